"""The Forge tables of the warehouse: what each holds, and every column's meaning and unit.

Every table loopmeter writes for Forge is listed here with `(name, dtype, comment)` column
specs; `pipeline/catalog.py` turns them into `COMMENT ON` statements. Times come twice
where the seed compares them in seconds: a `timestamp with time zone` to read, and the
exact `*_unix` seconds as the store holds them, which the routing rules compare.
"""
from __future__ import annotations

Column = tuple[str, str, str]

EVENTS = "forge_events"
REPOS = "forge_repos"
REJECTIONS = "forge_rejections"
PLANS = "forge_plans"
PLAN_TASKS = "forge_plan_tasks"
ROUTE_ENTRIES = "forge_route_entries"
DECISIONS = "forge_decisions"
ATTEMPT_EVENTS = "forge_attempt_events"
ATTEMPTS = "forge_attempts"
DISPATCHES = "forge_dispatches"
MERGES = "forge_merges"
INTEGRATIONS = "forge_integrations"
ACCEPTANCES = "forge_acceptances"
OUTCOMES = "forge_outcomes"
TASKS = "forge_tasks"
OBSERVATIONAL = "forge_routing_observational"
RANDOMIZED = "forge_routing_randomized"
SRM = "forge_routing_srm"
SURVIVAL = "forge_survival"

EVENT_COLUMNS: list[Column] = [
    ("rid", "str", "event id, unique in the store; a repeated rid is one event"),
    ("kind", "str", "plan, attempt, dispatch, event, outcome, or a kind this version does not know (kept)"),
    ("src", "str", "which Forge component wrote the event (harvest for outcomes loopmeter recorded)"),
    ("ts", "datetime", "when the event happened (UTC)"),
    ("ts_unix", "f64", "when the event happened, unix seconds exactly as the store holds them"),
    ("run", "str", "Forge run id"),
    ("task", "str", "task id within the run (null for run-level events)"),
    ("repo", "str", "repository id (see forge_repos for its path)"),
    ("mode", "str", "Forge execution mode (e.g. parallel)"),
    ("name", "str", "data.name when it is a string (events: accepted, merge, integrate_advanced, ...)"),
    ("data", "str", "the event's data object as JSON text, as loaded (SQLite: as the store holds it; JSON Lines: compact)"),
    ("source", "str", "the store or export file the event was loaded from (absolute), or harvest"),
    ("line", "i64", "line number in a JSON Lines export (null for SQLite stores and harvests)"),
    ("ingested_at", "datetime", "when loopmeter stored the event (UTC)"),
    ("month", "str", "YYYY-MM of ts (UTC); the table is partitioned by it"),
]

REPO_COLUMNS: list[Column] = [
    ("repo", "str", "repository id as events name it"),
    ("path", "str", "where the repository lies on the machine that recorded the store"),
    ("source", "str", "the store or export the mapping came from (the latest ingest wins)"),
    ("ingested_at", "datetime", "when the mapping was stored (UTC)"),
]

REJECTION_COLUMNS: list[Column] = [
    ("source", "str", "the store or export file (absolute)"),
    ("line", "i64", "line number in a JSON Lines export (null for SQLite rows)"),
    ("rid", "str", "the event's rid when it has one"),
    ("field", "str", "the field that broke a rule (line for unreadable lines)"),
    ("rule", "str", "the rule, in words"),
    ("ingested_at", "datetime", "when the ingest that rejected it ran (UTC); each ingest of a source replaces its rows"),
]

PLAN_COLUMNS: list[Column] = [
    ("rid", "str", "the plan event's rid"),
    ("run", "str", "Forge run id"),
    ("revision", "i64", "data.revision when it is an integer"),
    ("ts", "datetime", "when the revision was recorded (UTC)"),
    ("ts_unix", "f64", "when the revision was recorded, unix seconds"),
    ("fractal", "bool", "data.fractal_selection.enabled is set: the run is left out of routing"),
    ("task_count", "i64", "tasks in this revision"),
]

PLAN_TASK_COLUMNS: list[Column] = [
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("plan_rid", "str", "the plan revision's rid"),
    ("revision", "i64", "data.revision of the plan event"),
    ("plan_ts_unix", "f64", "the plan event's time, unix seconds (revisions are ordered by it, then rid)"),
    ("place", "i64", "the task's place in the revision's tasks object (document order)"),
    ("declared_difficulty", "str", "declared_difficulty: low, medium or high"),
    ("difficulty", "str", "difficulty, the older field"),
    ("tier", "str", "declared_difficulty, else difficulty"),
    ("route_length", "i64", "routing decisions listed under the task in this revision"),
]

ROUTE_ENTRY_COLUMNS: list[Column] = [
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("plan_rid", "str", "the plan revision listing the decision"),
    ("plan_ts_unix", "f64", "that revision's time, unix seconds"),
    ("task_place", "i64", "the task's place in that revision's tasks object"),
    ("entry", "i64", "the decision's index in the task's route list"),
    ("decision", "str", "the decision id (null for a decision without one)"),
    ("decision_key", "str", "what deduplicates: the id's JSON text when truthy, else the decision's JSON text"),
    ("at_unix", "f64", "when the decision was made, unix seconds"),
    ("tier", "str", "the tier the router used"),
    ("default_spec", "str", "the tier's default spec"),
    ("candidates", "list_str", "the specs drawn from"),
    ("chosen", "str", "the spec the draw picked"),
    ("propensity", "f64", "P(chosen) under the draw"),
]

DECISION_COLUMNS: list[Column] = [
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("decision", "str", "the decision id (null for a decision without one)"),
    ("decision_key", "str", "what deduplicates: the id, else the decision's JSON text"),
    ("position", "i64", "order of first appearance among the task's decisions across revisions"),
    ("occurrences", "i64", "how many plan revisions listed it (the values are the last listing's)"),
    ("at", "datetime", "when the decision was made (UTC)"),
    ("at_unix", "f64", "when the decision was made, unix seconds (null counts as 0 when ordering)"),
    ("tier", "str", "the tier the router used"),
    ("default_spec", "str", "the tier's default spec"),
    ("candidates", "list_str", "the specs drawn from"),
    ("chosen", "str", "the spec the draw picked"),
    ("propensity", "f64", "P(chosen) under the draw (null or 0: unknown)"),
    ("paired", "bool", "exactly two candidates and a propensity: usable in the randomized table"),
    ("alternative", "str", "for a paired draw: the candidate that is not the default"),
    ("arm", "str", "for a paired draw: alternative if the alternative was chosen, else default (intent to treat)"),
]

ATTEMPT_EVENT_COLUMNS: list[Column] = [
    ("rid", "str", "the attempt event's rid"),
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("repo", "str", "repository id"),
    ("ts", "datetime", "when the event happened (UTC)"),
    ("ts_unix", "f64", "when the event happened, unix seconds"),
    ("attempt", "i64", "attempt number (data.n)"),
    ("dwarf", "str", "the spec requested"),
    ("status", "str", "started, passed, failed, abandoned (others are kept)"),
    ("reason", "str", "why the attempt was abandoned (timeout, infra, cancelled, ...)"),
    ("reviewed_commit", "str", "the commit review judged"),
    ("base_ref", "str", "the commit the attempt started from"),
]

ATTEMPT_COLUMNS: list[Column] = [
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("attempt", "i64", "attempt number (data.n)"),
    ("repo", "str", "repository id of the attempt's first event"),
    ("dwarf", "str", "the spec requested, from the attempt's first event"),
    ("started", "datetime", "the attempt's first event (UTC)"),
    ("started_unix", "f64", "the attempt's first event, unix seconds"),
    ("first_rid", "str", "rid of the attempt's first event"),
    ("passed", "bool", "true if any event passed, false if one failed, null: no outcome (censored)"),
    ("reason", "str", "why it has no outcome: the last reason given, else its last status"),
    ("last_status", "str", "status of the attempt's last event"),
    ("events", "i64", "events of the attempt"),
    ("reviewed_commit", "str", "the commit review judged (from the last event naming one)"),
    ("base_ref", "str", "the commit the attempt started from, paired with reviewed_commit"),
    ("reviewed_ts_unix", "f64", "time of the last event naming both reviewed_commit and base_ref, unix seconds"),
    ("reviewed_rid", "str", "rid of that event"),
]

DISPATCH_COLUMNS: list[Column] = [
    ("rid", "str", "the dispatch event's rid"),
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("ts", "datetime", "when the dispatch was recorded (UTC)"),
    ("ts_unix", "f64", "when the dispatch was recorded, unix seconds"),
    ("role", "str", "dwarf (the implementer), reviewer, ..."),
    ("attempt", "i64", "the attempt number it served (null unless an integer)"),
    ("spec", "str", "the spec as requested (an alias like sol, or model:effort:harness)"),
    ("model", "str", "the model that really ran"),
    ("effort", "str", "the effort it ran at"),
    ("harness", "str", "the agent harness"),
    ("wall_started", "datetime", "when it started (UTC)"),
    ("wall_started_unix", "f64", "when it started, unix seconds"),
    ("duration_s", "f64", "how long it ran, seconds (null unless a number)"),
]

MERGE_COLUMNS: list[Column] = [
    ("rid", "str", "the merge event's rid"),
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("repo", "str", "repository id"),
    ("ts", "datetime", "when the merge was recorded (UTC)"),
    ("ts_unix", "f64", "when the merge was recorded, unix seconds"),
    ("status", "str", "MERGED or another status"),
    ("commit", "str", "the task's merged commit: data.commit, else data.reviewed_commit"),
    ("integration", "str", "the merge commit that brought the task into the run branch"),
]

INTEGRATION_COLUMNS: list[Column] = [
    ("rid", "str", "the integrate_advanced event's rid"),
    ("run", "str", "Forge run id"),
    ("repo", "str", "repository id"),
    ("ts", "datetime", "when the user's branch advanced (UTC)"),
    ("ts_unix", "f64", "when the user's branch advanced, unix seconds (the horizon counts from it)"),
    ("branch", "str", "the user's branch"),
    ("parent", "str", "the branch's commit before it advanced"),
    ("candidate", "str", "the commit the branch advanced to"),
    ("target", "str", "the integration target as Forge named it"),
]

ACCEPTANCE_COLUMNS: list[Column] = [
    ("rid", "str", "the accepted event's rid"),
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("ts", "datetime", "when a person accepted the task (UTC)"),
]

OUTCOME_COLUMNS: list[Column] = [
    ("rid", "str", "outcome id: names candidate, reviewed commit and horizon"),
    ("run", "str", "the merge's run"),
    ("task", "str", "the merge's task"),
    ("repo", "str", "repository id"),
    ("src", "str", "harvest, or what the store says wrote it"),
    ("recorded", "datetime", "when the outcome was recorded (UTC)"),
    ("status", "str", "ok, no_additions or lost"),
    ("candidate", "str", "the integration's candidate commit"),
    ("reviewed", "str", "the task's reviewed (merged) commit"),
    ("base_ref", "str", "the commit the task started from"),
    ("branch", "str", "the user's branch"),
    ("horizon_days", "i64", "days after the integration the survival was measured at"),
    ("integrated", "datetime", "when the integration happened (UTC)"),
    ("integrated_unix", "f64", "when the integration happened, unix seconds"),
    ("horizon_rev", "str", "the last first-parent commit not after the horizon (null when lost)"),
    ("horizon", "datetime", "that commit's committer time (UTC)"),
    ("integrate_run", "str", "the run that integrated"),
    ("added", "i64", "lines the task added (numstat base..reviewed, text files)"),
    ("surviving", "i64", "of those, lines git blame still attributes to the task's commits at the horizon"),
    ("file_paths", "list_str", "files the task added lines to"),
    ("file_added", "list_i64", "lines added per file (same order as file_paths)"),
    ("file_surviving", "list_i64", "lines surviving per file (same order as file_paths)"),
    ("reverted_by", "list_str", "later commits whose message reverts a task commit, the merge or the candidate"),
]

TASK_COLUMNS: list[Column] = [
    ("run", "str", "Forge run id"),
    ("task", "str", "task id"),
    ("task_order", "i64", "the seed's record order: runs by first plan event, tasks by first appearance"),
    ("fractal", "bool", "the run used fractal selection: left out of routing"),
    ("tier", "str", "declared_difficulty, else difficulty, from the last plan revision holding the task"),
    ("ran", "str", "the spec requested for attempt 1 (its first event's dwarf)"),
    ("model", "str", "model:effort of attempt 1's dwarf dispatch (null when it names neither)"),
    ("first_pass", "bool", "attempt 1's outcome; null when it has none"),
    ("censored", "str", "why attempt 1 has no outcome; not_run when the task never ran"),
    ("passed", "bool", "any attempt passed, or a person accepted the task"),
    ("attempts", "i64", "attempts made"),
    ("runtime_s", "f64", "sum of the dwarf dispatches' durations, seconds (null without any)"),
    ("started_unix", "f64", "when attempt 1 started: its dwarf dispatch's wall_started, else its first event"),
    ("first_event_repo", "str", "repository id of the task's first attempt event"),
    ("first_event_unix", "f64", "time of the task's first attempt event, unix seconds (--since filters on it)"),
    ("decision", "str", "the decision attempt 1 ran under: the latest at or before its start + 1 s"),
    ("decision_at_unix", "f64", "that decision's time, unix seconds"),
    ("decision_tier", "str", "that decision's tier"),
    ("decision_default", "str", "that decision's default spec"),
    ("decision_chosen", "str", "the spec that decision chose"),
    ("decision_alternative", "str", "for a paired draw: the candidate that is not the default"),
    ("decision_propensity", "f64", "P(chosen) of that decision"),
    ("decision_paired", "bool", "that decision is a paired draw (two candidates and a propensity)"),
]

OBSERVATIONAL_COLUMNS: list[Column] = [
    ("tier", "str", "declared tier"),
    ("spec", "str", "model:effort that ran attempt 1, else the spec requested"),
    ("tasks", "i64", "first attempts with an outcome"),
    ("first_pass", "f64", "share of them that passed, 0..1"),
    ("ci_low", "f64", "Wilson 95% interval, low end (z = 1.96)"),
    ("ci_high", "f64", "Wilson 95% interval, high end"),
    ("passed", "f64", "share that passed at some attempt or was accepted, 0..1"),
    ("unfinished", "i64", "tasks that never passed nor were accepted"),
    ("attempts", "f64", "mean attempts per task"),
    ("runtime_min", "f64", "median dwarf runtime, minutes"),
    ("scope_repo", "str", "the --repo the report was limited to (null: all)"),
    ("scope_since_unix", "f64", "the --since limit, unix seconds (null: none)"),
    ("computed_at", "datetime", "when the report was computed (UTC)"),
]

_ARM: list[Column] = [  # the arm's spec is default_spec or alternative
    ("assigned", "i64", "tasks assigned to the arm in the judged window"),
    ("first_pass", "f64", "Hajek first-pass rate (weights 1/propensity), 0..1"),
    ("n_eff", "f64", "Kish effective n, (sum w)^2 / sum w^2, rounded to 0.1"),
    ("not_followed", "i64", "tasks that ran a spec other than the chosen one"),
    ("no_outcome", "i64", "tasks without a first-attempt outcome (attrition)"),
    ("runtime_min", "f64", "median dwarf runtime, minutes"),
]

RANDOMIZED_COLUMNS: list[Column] = [
    ("note", "str", "for the note row only: draws left out and why (other columns null)"),
    ("tier", "str", "the decisions' tier"),
    ("default_spec", "str", "the tier's default spec"),
    ("alternative", "str", "the other candidate"),
    ("alternative_is", "str", "stronger (low tier) or cheaper (medium, high)"),
    ("window", "i64", "the largest of 30, 60, 120 alternative assignments reached (null: none)"),
    ("runs", "i64", "runs in the judged window"),
    *[(f"default_{name}", dtype, f"default arm: {comment}") for name, dtype, comment in _ARM],
    *[(f"alternative_{name}", dtype, f"alternative arm: {comment}") for name, dtype, comment in _ARM],
    ("difference", "f64", "alternative minus default first-pass rate"),
    ("ci_low", "f64", "run-cluster bootstrap 95% percentile interval, low end"),
    ("ci_high", "f64", "run-cluster bootstrap 95% percentile interval, high end"),
    ("verdict", "str", "the pre-registered decision rule's advice"),
    ("scope_repo", "str", "the --repo the report was limited to (null: all)"),
    ("scope_since_unix", "f64", "the --since limit, unix seconds (null: none)"),
    ("computed_at", "datetime", "when the report was computed (UTC)"),
]

SRM_COLUMNS: list[Column] = [
    ("tier", "str", "the decisions' tier"),
    ("default_spec", "str", "the tier's default spec"),
    ("alternative", "str", "the other candidate"),
    ("assigned", "i64", "paired assignments of the pair in scope, every one (no window)"),
    ("alternative_assigned", "i64", "of those, assignments to the alternative arm (intent to treat)"),
    ("expected_alternative", "f64", "sum over the assignments of P(alternative): the propensity where the alternative "
                                    "was chosen, else 1 - propensity"),
    ("chi_square", "f64", "Pearson's chi-square over the two cells (the default expects assigned - "
                          "expected_alternative); null when a cell expecting 0 observed more"),
    ("p_value", "f64", "P(chi-square, 1 degree of freedom >= chi_square) = erfc(sqrt(chi_square / 2)); 0 when "
                       "chi_square is null"),
    ("srm", "bool", "the assignment ratio's mismatch at one look: p_value < 0.001"),
    ("p_value_bound", "f64", "a Chernoff bound on the exact probability of a split at least this uneven, whatever "
                             "the propensities (it confirms a mismatch where an expected count is below 5)"),
    ("default_with_outcome", "i64", "of the default arm's assignments, those with an outcome (attempt 1 passed or "
                                    "failed review): the tasks the routing comparison averages"),
    ("alternative_with_outcome", "i64", "of the alternative arm's assignments, those with an outcome (as "
                                        "default_with_outcome)"),
    ("attrition_p_value", "f64", "Fisher's exact two-sided p-value of the arm-by-outcome table: the chance, its "
                                 "margins given, of a split of the tasks with an outcome this unlikely"),
    ("attrition_srm", "bool", "differential attrition at one look: attrition_p_value < 0.001"),
    ("untrustworthy", "bool", "the verdict: p_value (where a cell expects under 5, p_value_bound too) or "
                              "attrition_p_value below 0.00025; the routing report marks the pair"),
    ("untrustworthy_checks", "list_str", "the checks that fired: assignment (the ratio), attrition (the outcomes)"),
    ("scope_repo", "str", "the --repo the report was limited to (null: all)"),
    ("scope_since_unix", "f64", "the --since limit, unix seconds (null: none)"),
    ("computed_at", "datetime", "when the report was computed (UTC)"),
]

SURVIVAL_COLUMNS: list[Column] = [
    ("model", "str", "model:effort of the dwarf dispatch of the attempt whose reviewed commit landed (else its spec)"),
    ("tier", "str", "the task's tier"),
    ("horizon_days", "i64", "days after integration"),
    ("tasks", "i64", "landed tasks measured (status ok or no_additions)"),
    ("lines_added", "i64", "lines those tasks added"),
    ("lines_surviving", "i64", "of those, lines still attributed to the tasks at the horizon"),
    ("surviving_share", "f64", "lines_surviving / lines_added (null without added lines)"),
    ("reverted", "i64", "tasks a later commit reverted"),
    ("revert_rate", "f64", "reverted / tasks"),
    ("revert_ci_low", "f64", "Wilson 95% interval of the revert rate, low end"),
    ("revert_ci_high", "f64", "Wilson 95% interval of the revert rate, high end"),
    ("lost", "i64", "outcomes whose candidate left the branch (not measurable)"),
    ("unmatched", "i64", "outcomes of the group whose reviewed commit no attempt names"),
    ("computed_at", "datetime", "when the report was computed (UTC)"),
]

FORGE_TABLES: dict[str, tuple[str, list[Column]]] = {
    EVENTS: ("Every Forge event loaded (SQLite store, JSON Lines export, or harvest), one row per rid; "
             "partitioned by month.", EVENT_COLUMNS),
    REPOS: ("Forge repository ids and their paths.", REPO_COLUMNS),
    REJECTIONS: ("Events and lines the last ingest of each source rejected, with the field and the rule.",
                 REJECTION_COLUMNS),
    PLANS: ("One row per plan event (a plan revision of a run).", PLAN_COLUMNS),
    PLAN_TASKS: ("One row per task of a plan revision, with its tier.", PLAN_TASK_COLUMNS),
    ROUTE_ENTRIES: ("Every routing decision as each plan revision lists it (before deduplication).",
                    ROUTE_ENTRY_COLUMNS),
    DECISIONS: ("Routing decisions, one row per (run, task, decision), deduplicated across plan revisions.",
                DECISION_COLUMNS),
    ATTEMPT_EVENTS: ("One row per attempt event.", ATTEMPT_EVENT_COLUMNS),
    ATTEMPTS: ("One row per attempt of a task, from its attempt events.", ATTEMPT_COLUMNS),
    DISPATCHES: ("One row per dispatch event: which model and effort really ran, and for how long.",
                 DISPATCH_COLUMNS),
    MERGES: ("One row per merge event.", MERGE_COLUMNS),
    INTEGRATIONS: ("One row per integrate_advanced event: the user's branch advanced to a candidate.",
                   INTEGRATION_COLUMNS),
    ACCEPTANCES: ("One row per accepted event: a person accepted the task.", ACCEPTANCE_COLUMNS),
    OUTCOMES: ("One row per survival outcome (harvested by loopmeter or found in the store).", OUTCOME_COLUMNS),
    TASKS: ("One row per (run, task) a plan held: what routing needs (tier, model, outcome, decision).",
            TASK_COLUMNS),
    OBSERVATIONAL: ("Routing, observational: first attempts by tier and model, every task (stored by `ingest forge`).",
                    OBSERVATIONAL_COLUMNS),
    RANDOMIZED: ("Routing, randomized: exploration pairs, arms, bootstrap interval and verdict, every task "
                 "(stored by `ingest forge`).", RANDOMIZED_COLUMNS),
    SRM: ("Routing, randomized: the sample-ratio-mismatch checks of each pair, assignments to the alternative "
          "against the sum of their propensities and each arm's share of assignments with an outcome (stored by "
          "`ingest forge`).", SRM_COLUMNS),
    SURVIVAL: ("Survival of merged work per model, tier and horizon (stored by `harvest survival`).", SURVIVAL_COLUMNS),
}


def columns(table: str) -> list[Column]:
    return FORGE_TABLES[table][1]
