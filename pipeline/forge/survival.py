"""The survival harvest: what happened to merged work after it landed, read from git.

The seed's `forge dataset outcomes`, reading the warehouse instead of the store and
writing the outcomes to the warehouse (`forge_events`, `forge_outcomes`), never into the
store or the repository. For each integration (the user's branch advanced to a
candidate) whose repository is reachable, the tasks it brought in are the MERGED merges
whose commit is in `rev-list candidate ^parent`; at the horizon (integration + 14 days)
the last first-parent commit not after it is found; per task, the lines it added
(`diff --numstat base reviewed`) and the lines blame still credits to its commits there,
and the later commits that revert it. Outcome ids, data fields and counts are the seed's.

The work is planned per repository in three passes, so git runs few processes and
shares them: integrations (one batch lookup, one first-parent log per branch), then the
tasks' commits and numstats (one `diff-tree --stdin`), then one blame per (horizon
revision, path) and one revert scan per (candidate, horizon revision), in parallel threads.
Several horizons (`harvest_horizons`) are planned together and measured in one pass: per
horizon the outcomes, counts and reasons are exactly those of a harvest at that horizon
alone, while every git query any of them needs runs once.
A horizon still ahead, a failed query or an unreachable repository records nothing and
is tried again by the next harvest; each is listed with its reason.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from ..errors import Exit, LoopmeterError
from ..sql.queries import run_query
from ..storage import Warehouse
from . import tables as t
from .derive import connect, typed_frame
from .git import Git, GitError, is_directory, is_temporary
from .measure import History, Job, measure

HORIZON_DAYS = 14
DAY_S = 86400
COUNT_KEYS = ("ok", "no_additions", "lost", "pending", "already", "no_base", "candidate_missing", "branch_missing",
              "repo_missing", "skipped_temp", "git_error", "not_git", "shallow", "repo_unknown", "no_candidate")
# asked-for work that could not be done: each listed in `unharvested`, tried again by the next harvest
PROBLEMS = ("no_base", "candidate_missing", "branch_missing", "repo_missing", "git_error", "not_git", "shallow",
            "repo_unknown")


def outcome_rid(candidate: str, reviewed: str, horizon_days: int) -> str:
    digest = hashlib.sha256(("%s:%s:%d" % (candidate, reviewed, horizon_days)).encode()).hexdigest()
    return "outcome:survival:" + digest[:24]


@dataclass
class State:
    integrations: list[dict]
    merges: dict[tuple[str, str], dict]  # (repo, commit) -> merge, in first-appearance order
    bases: dict[str, str]  # reviewed commit -> base_ref
    have: set[str]  # outcome rids already recorded


@dataclass
class HarvestResult:
    horizon_days: int
    now: float
    outcomes: list[dict] = field(default_factory=list)  # {rid, run, task, repo, path, data}
    counts: Counter = field(default_factory=Counter)
    unharvested: list[dict] = field(default_factory=list)
    git_processes: int = 0

    @property
    def problems(self) -> int:
        return sum(self.counts[key] for key in PROBLEMS)

    def as_dict(self, recorded: int, dry_run: bool = False) -> dict:
        return {
            "recorded": recorded,
            "dryRun": dry_run,
            "horizonDays": self.horizon_days,
            "now": self.now,
            "counts": {key: self.counts[key] for key in COUNT_KEYS if self.counts.get(key)},
            "outcomes": [{"rid": o["rid"], "run": o["run"], "task": o["task"], "data": o["data"]} for o in self.outcomes],
            "unharvested": self.unharvested,
            "gitProcesses": self.git_processes,
        }


@dataclass
class Harvests:
    """The harvests at several horizons, found together (git work shared) from one reading of the
    warehouse: per horizon exactly what a harvest at that one horizon finds."""

    now: float
    results: list[HarvestResult]
    git_processes: int = 0  # of all horizons together (the work is shared, so not told apart)

    @property
    def outcomes(self) -> list[dict]:
        return [outcome for result in self.results for outcome in result.outcomes]

    @property
    def problems(self) -> int:
        return sum(result.problems for result in self.results)

    def as_dict(self, recorded: bool, dry_run: bool = False) -> dict:
        """One horizon: its `HarvestResult.as_dict`. Several: the run's `recorded` (all horizons),
        `dryRun`, `now` and `gitProcesses`, and `horizons`, one entry per horizon (ascending) with
        the single-horizon keys that differ between horizons (`horizonDays`, `recorded`, `counts`,
        `outcomes`, `unharvested`)."""
        counts = [len(result.outcomes) if recorded else 0 for result in self.results]
        if len(self.results) == 1:
            return self.results[0].as_dict(counts[0], dry_run)
        shared = ("dryRun", "now", "gitProcesses")
        return {
            "recorded": sum(counts), "dryRun": dry_run, "now": self.now, "gitProcesses": self.git_processes,
            "horizons": [{key: value for key, value in result.as_dict(count, dry_run).items() if key not in shared}
                         for result, count in zip(self.results, counts)],
        }


def read_state(warehouse: Warehouse) -> State:
    connection = connect(warehouse, [t.INTEGRATIONS, t.REPOS, t.MERGES, t.ATTEMPT_EVENTS, t.OUTCOMES, t.EVENTS])
    try:
        integrations = run_query(connection, "forge_harvest_integrations").to_dicts()
        merges = {
            (row["repo"], row["commit"]): dict(run=row["run"], task=row["task"], commit=row["commit"],
                                               integration=row["integration"])
            for row in run_query(connection, "forge_harvest_merges").iter_rows(named=True)
        }
        bases = dict(run_query(connection, "forge_harvest_bases").iter_rows())
        # recorded = in both tables: a harvest killed between its two writes records it again
        have = set(connection.sql(
            "SELECT o.rid FROM forge_outcomes o JOIN (SELECT rid FROM forge_events WHERE kind = 'outcome') e USING (rid)"
        ).pl()["rid"].to_list())
    finally:
        connection.close()
    return State(integrations, merges, bases, have)


def _horizon(chain: list[tuple[str, int, list[str]]], index: dict[str, int], candidate: str, cutoff: float,
             now: float) -> tuple[str, str | None, int | None]:
    """The seed's horizon_rev on a branch's first-parent chain (newest first):
    ('ok', rev, ts) | ('lost', None, None) | ('pending', None, None). A horizon still ahead of `now` is
    pending whatever the chain holds: a commit dated after it (a clock set ahead) does not settle it,
    and the candidate may be back on the branch by then."""
    if now < cutoff:
        return "pending", None, None  # more commits may still land before the horizon
    position = index.get(candidate)
    if position is None:
        return "lost", None, None  # a rebase, squash or reset took the candidate off the branch
    rev, rev_ts = candidate, chain[position][1]
    for sha, ct, _ in reversed(chain[:position]):  # oldest first, after the candidate
        if ct > cutoff:
            return "ok", rev, rev_ts
        rev, rev_ts = sha, ct
    return "ok", rev, rev_ts


def harvest(
    warehouse: Warehouse,
    *,
    horizon_days: int = HORIZON_DAYS,
    repo: str | None = None,
    include_temp: bool = False,
    now: float | None = None,
    workers: int = 4,
) -> HarvestResult:
    """Find the survival outcomes at one horizon not yet recorded (nothing is written here)."""
    found = harvest_horizons(warehouse, horizons=[horizon_days], repo=repo, include_temp=include_temp, now=now,
                             workers=workers)
    return found.results[0]


def harvest_horizons(
    warehouse: Warehouse,
    *,
    horizons: list[int],
    repo: str | None = None,
    include_temp: bool = False,
    now: float | None = None,
    workers: int = 4,
) -> Harvests:
    """Find the survival outcomes not yet recorded at each of `horizons` (days; repeated ones once,
    in ascending order); nothing is written here. Git work is shared between horizons: each
    integration's landed commits and branch history, each task's commits and numstat, and each
    blame of a (revision, path) and revert scan of a (candidate, revision) whichever horizons ask."""
    now = time.time() if now is None else float(now)
    if not math.isfinite(now):  # NaN compares false with every horizon: a pending integration would read as measured
        raise LoopmeterError(f"now must be a finite time in unix seconds (got {now})", Exit.USAGE)
    days = sorted(set(horizons))
    if not days or days[0] < 0:
        raise LoopmeterError(f"horizons must be days, at least 0 (got {horizons})", Exit.USAGE)
    state = read_state(warehouse)
    results = [HarvestResult(horizon_days=horizon, now=now) for horizon in days]
    wanted = str(Path(repo).resolve()) if repo else None
    by_path: dict[str, list[dict]] = defaultdict(list)
    for integration in state.integrations:
        path = integration["path"]
        if wanted and (not path or str(Path(path).resolve()) != wanted):
            continue
        if not integration["candidate"] or not integration["parent"]:  # nothing to measure, ever: counted
            for result in results:
                result.counts["no_candidate"] += 1
            continue
        reason = _unreachable(path, include_temp)
        if reason is None:
            by_path[path].append(integration)
            continue
        for result in results:
            result.counts[reason[0]] += 1
            if reason[1]:
                _unharvested(result, integration, *reason)
    slots: dict[int, list[dict | None]] = {result.horizon_days: [] for result in results}
    processes = 0
    for path, integrations in by_path.items():
        git = Git(path)
        try:
            _harvest_repository(git, path, integrations, state, results, slots, now, workers)
        finally:
            processes += git.processes
    for result in results:
        result.git_processes = processes
        found: set[str] = set()
        for outcome in slots[result.horizon_days]:
            if outcome is None:
                continue
            if outcome["rid"] in found:  # the same candidate integrated again: its tasks are measured once, first
                result.counts["already"] += 1
                continue
            found.add(outcome["rid"])
            result.outcomes.append(outcome)
            result.counts[outcome["data"]["status"]] += 1
        _measured_elsewhere(result)
    return Harvests(now=now, results=results, git_processes=processes)


def _measured_elsewhere(result: HarvestResult) -> None:
    """An integration that could not be read (its branch missing, say) whose candidate another
    integration of the same repository brought in and had measured: its tasks are those, measured
    once; it counts as `already`, not as work left undone."""
    measured = {(outcome["repo"], outcome["data"]["candidate"]) for outcome in result.outcomes}
    left = []
    for entry in result.unharvested:
        if "task" not in entry and (entry["repo"], entry["candidate"]) in measured:
            result.counts[entry["reason"]] -= 1
            result.counts["already"] += 1
        else:
            left.append(entry)
    result.unharvested = left


def _unreachable(path: str | None, include_temp: bool) -> tuple[str, str] | None:
    """(count key, detail: "" when the integration is counted but not listed) for a repository the
    harvest does not open, else None."""
    if not path:
        return "repo_unknown", "its repository id has no path (no repos entry)"
    if is_temporary(path) and not include_temp:
        return "skipped_temp", ""
    if not is_directory(path):
        return "repo_missing", f"{path} is not a directory"
    return None


def _unharvested(result: HarvestResult, integration: dict, reason: str, detail: str, merge: dict | None = None) -> None:
    entry = {"integration": integration["rid"], "run": integration["run"], "repo": integration["repo"],
             "path": integration["path"], "candidate": integration["candidate"], "reason": reason, "detail": detail}
    if merge is not None:
        entry.update(task=merge["task"], reviewed=merge["commit"], taskRun=merge["run"])
    result.unharvested.append(entry)


def _harvest_repository(git: Git, path: str, integrations: list[dict], state: State, results: list[HarvestResult],
                        slots: dict[int, list], now: float, workers: int) -> None:
    problem = git.repository_problem()
    if problem is not None:
        key = "not_git" if problem.startswith("not a git") else "shallow" if "shallow" in problem else "git_error"
        for result in results:
            for integration in integrations:
                result.counts[key] += 1
                _unharvested(result, integration, key, problem)
        return
    try:
        resolved = git.resolve([i["candidate"] + "^{commit}" for i in integrations]
                               + [i["branch"] + "^{commit}" for i in integrations if i["branch"]])
    except GitError as error:
        for result in results:
            for integration in integrations:
                result.counts["git_error"] += 1
                _unharvested(result, integration, "git_error", str(error))
        return
    history = History(git, resolved)
    jobs: list[Job] = []
    for result in results:
        jobs += _plan(history, path, integrations, state, result, slots[result.horizon_days], now)
    if jobs:
        measure(history, jobs, workers)
        for job in jobs:
            if job.error:
                job.result.counts["git_error"] += 1
                _unharvested(job.result, job.integration, "git_error", job.error, job.merge)
            else:
                job.slots[job.slot] = dict(rid=outcome_rid(job.integration["candidate"], job.merge["commit"],
                                                           job.data["horizon_days"]),
                                           run=job.merge["run"], task=job.merge["task"], repo=job.integration["repo"],
                                           path=job.path, data=job.data)


def _plan(history: History, path: str, integrations: list[dict], state: State, result: HarvestResult, slots: list,
          now: float) -> list[Job]:
    """One horizon's outcomes in this repository: lost ones and the pending count at once, a slot and
    a job for each task whose lines are to be measured."""
    counts, horizon_days, resolved = result.counts, result.horizon_days, history.resolved
    jobs: list[Job] = []
    for integration in integrations:
        candidate, parent, branch = integration["candidate"], integration["parent"], integration["branch"]
        if resolved.get(candidate + "^{commit}") is None:
            counts["candidate_missing"] += 1
            _unharvested(result, integration, "candidate_missing", f"commit {candidate} is not in {path}")
            continue
        candidate_sha = resolved[candidate + "^{commit}"][0]  # what git is given (`measure`)
        try:
            landed = history.landed(candidate_sha, parent)
            tasks = [m for (r, c), m in state.merges.items() if r == integration["repo"] and c in landed]
            todo = [m for m in tasks if outcome_rid(candidate, m["commit"], horizon_days) not in state.have]
            counts["already"] += len(tasks) - len(todo)
            if not todo:
                continue
            cutoff = integration["ts_unix"] + horizon_days * DAY_S
            tip = resolved.get(branch + "^{commit}") if branch else None
            if tip is None:  # no chain to follow: not "nothing survived"
                counts["branch_missing"] += 1
                _unharvested(result, integration, "branch_missing", f"branch {branch} is not in {path}" if branch
                             else "the integration names no branch")
                continue
            chain, index = history.chain(tip[0])
            status, rev, rev_ts = _horizon(chain, index, candidate_sha, cutoff, now)
            rev_sha = rev
            if status == "ok" and rev == candidate_sha:
                rev = candidate  # the seed names the candidate as the event gave it
        except GitError as error:
            counts["git_error"] += 1
            _unharvested(result, integration, "git_error", str(error))
            continue
        if status == "pending":
            counts["pending"] += len(todo)
            continue
        for merge in todo:
            base = state.bases.get(merge["commit"])
            if not base:
                counts["no_base"] += 1
                _unharvested(result, integration, "no_base", "no attempt names the base_ref of this reviewed commit", merge)
                continue
            data = dict(name="survival", candidate=candidate, reviewed=merge["commit"], base_ref=base,
                        branch=integration["branch"], horizon_days=horizon_days, integrated_ts=integration["ts_unix"],
                        horizon_rev=rev, horizon_ts=rev_ts, integrate_run=integration["run"])
            slot = len(slots)
            outcome = dict(rid=outcome_rid(candidate, merge["commit"], horizon_days), run=merge["run"],
                           task=merge["task"], repo=integration["repo"], path=path, data=data)
            if status == "lost":
                data.update(status="lost")
                slots.append(outcome)
            else:
                slots.append(None)  # filled when the task's git work is done
                jobs.append(Job(slot, path, integration, merge, base, rev, data, result, slots, tip[0], rev_sha,
                                candidate_sha))
    return jobs


# ---- recording ----------------------------------------------------------------------------

def record(warehouse: Warehouse, result: HarvestResult | Harvests) -> int:
    """Add the outcomes (of every horizon, in one publish) to forge_events (month of `now`) and
    forge_outcomes; returns how many."""
    if not result.outcomes:
        return 0
    now = datetime.fromtimestamp(result.now, timezone.utc)
    month = now.strftime("%Y-%m")
    events = typed_frame(pl.DataFrame({
        "rid": [o["rid"] for o in result.outcomes],
        "kind": "outcome", "src": "harvest", "ts": [now] * len(result.outcomes), "ts_unix": result.now,
        "run": [o["run"] for o in result.outcomes], "task": [o["task"] for o in result.outcomes],
        "repo": [o["repo"] for o in result.outcomes], "mode": "parallel", "name": "survival",
        "data": [json.dumps(o["data"], separators=(",", ":")) for o in result.outcomes],
        "source": "harvest", "ingested_at": [datetime.now(timezone.utc)] * len(result.outcomes), "month": month,
    }, schema_overrides={"ts": pl.Datetime("us", "UTC"), "ingested_at": pl.Datetime("us", "UTC")}), t.EVENTS)
    rows = typed_frame(pl.DataFrame([_outcome_row(o, now) for o in result.outcomes], infer_schema_length=None,
                                    schema_overrides={"recorded": pl.Datetime("us", "UTC"),
                                                      "integrated": pl.Datetime("us", "UTC"),
                                                      "horizon": pl.Datetime("us", "UTC")}), t.OUTCOMES)
    # both tables replace any copy of an outcome a killed harvest left in one of them (the next
    # harvest counts an outcome as recorded only when both hold it), so an outcome is one row each
    current = warehouse.read(t.OUTCOMES)
    if current is not None:
        rows = pl.concat([typed_frame(current, t.OUTCOMES).filter(~pl.col("rid").is_in(rows["rid"].to_list())), rows])
    previous = warehouse.read_partition(t.EVENTS, "month", month)
    if previous is not None:
        events = pl.concat([typed_frame(previous, t.EVENTS).filter(~pl.col("rid").is_in(events["rid"].to_list())), events])
    with warehouse.publishing():
        warehouse.write_table(t.OUTCOMES, rows)
        warehouse.write_table(t.EVENTS, events, partition_by="month", keep_partitions=True)
    return len(result.outcomes)


def _outcome_row(outcome: dict, now: datetime) -> dict:
    data = outcome["data"]
    files = data.get("files") or {}

    def moment(seconds):
        """The time as a timestamp; None where there is none, or none a timestamp can hold (a commit's
        time is what its author wrote: year 3170843 too; the outcome's JSON keeps the number)."""
        try:
            return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)
        except (ValueError, OverflowError, OSError):
            return None

    return dict(
        rid=outcome["rid"], run=outcome["run"], task=outcome["task"], repo=outcome["repo"], src="harvest",
        recorded=now, status=data["status"], candidate=data["candidate"], reviewed=data["reviewed"],
        base_ref=data["base_ref"], branch=data["branch"], horizon_days=data["horizon_days"],
        integrated=moment(data["integrated_ts"]), integrated_unix=data["integrated_ts"],
        horizon_rev=data["horizon_rev"], horizon=moment(data["horizon_ts"]), integrate_run=data["integrate_run"],
        added=data.get("added"), surviving=data.get("surviving"), file_paths=list(files),
        file_added=[v[0] for v in files.values()], file_surviving=[v[1] for v in files.values()],
        reverted_by=data.get("reverted_by"),
    )
