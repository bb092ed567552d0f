"""`loopmeter execute`: run every scenario in every mode through an adapter, time each run,
write ForgeLoop's layout, then ingest and aggregate the new run set.

What the runner owns, not the adapter: the wall-clock time around each call, the project
revision (git HEAD of `--target`), the requested profile of each mode and the default
resolved profile, the run identity, and the validity of every run (checked with the rules
ingest uses before the file is written). Files:

    RESULTS/raw/<runSetId>/<scenarioId>/<mode>/run-NNN.json   one run, written atomically
    RESULTS/aggregate/<runSetId>/<scenarioId>.json, summary.json
    RESULTS/runner/<runSetId>/plan.json                       what the run set was started with
    RESULTS/runner/<runSetId>/failures.jsonl                  one line per failed adapter call
    RESULTS/runner/<runSetId>/adapter-stderr.log              a command adapter's stderr
    RESULTS/runner/<runSetId>/stopping.json                   --until-resolved: each scenario's runs and why it stopped

(`runner/` sits beside `raw/` because ingest reads every `*.json` below `raw/<runSetId>/`.)

A fixed size runs every scenario, mode and run index in ForgeLoop's order. `--until-resolved` runs in
rounds instead: one run index of every mode of each scenario still running, direct first, so a
round's pairs are whole; after each round the scenario's questions are judged on its pairs
(`sequential.py`) and it stops when they are settled or its budget is spent. What decides is in the
run files alone, so a resumed run set finishes its rounds where they stopped and judges again.

The run set's plan and places (runs per mode, id, scenarios, revision, environment, the paths above)
are settled by `run_set.py`.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import interrupts, progress
from ..errors import LoopmeterError, usage_error
from ..numbers import js_round4
from . import sequential
from .adapters import AdapterFailed, load_adapter
from .contract import MODES
from .run_document import BENCHMARK_VERSION, build_run, quality_shape, run_id, run_text, utc_timestamp
from .run_set import (RunSetPaths, Size, append_failure, check_run_set_id, Claim, environment_defaults,
                      generated_run_set_id, load_scenarios, plan_document, project_revision, read_existing_run,
                      reconcile_plan, resolve_budget, resolve_runs, write_json, write_text)
from .schema import RunRejected, flatten_run


NOT_CONFIGURED = {"status": "NOT_CONFIGURED"}


# ---- executing -------------------------------------------------------------------------------
@dataclass
class Failure:
    scenario_id: str
    mode: str
    run_index: int
    error: str
    wall_clock_ms: float | None
    recorded_at: str

    def as_dict(self, run_set_id: str) -> dict:
        return {
            "runSetId": run_set_id,
            "runId": run_id(self.scenario_id, self.mode, self.run_index),
            "scenarioId": self.scenario_id,
            "mode": self.mode,
            "runIndex": self.run_index,
            "recordedAt": self.recorded_at,
            "wallClockMs": self.wall_clock_ms,
            "error": self.error,
        }

    def line(self) -> str:
        return f"{self.scenario_id}/{self.mode}/run {self.run_index}: {self.error}"


@dataclass
class Execution:
    run_set_id: str
    tier: str | None
    runs: int
    scenarios: list[dict]
    paths: RunSetPaths
    revision: str | None
    executed: int = 0
    resumed: int = 0
    failures: list[Failure] = field(default_factory=list)
    documents: dict[tuple[str, str, int], dict] = field(default_factory=dict)  # every run on disk
    finalization: dict = field(default_factory=lambda: dict(NOT_CONFIGURED))
    cleanup_error: str | None = None
    claims_allowed: bool | None = None
    aggregated: bool = False
    other_rejections: int = 0
    stopping: dict | None = None  # --until-resolved: the stopping record (run_set.RunSetPaths.stopping)

    @property
    def run_count(self) -> int:
        return len(self.documents)

    def as_dict(self) -> dict:
        document = {
            "status": "MEASURED" if not self.failures else "INCOMPLETE",
            "runSetId": self.run_set_id,
            "tier": self.tier,
            "scenarioCount": len(self.scenarios),
            "runCount": self.run_count,
            "outputDirectory": str(self.paths.results),
            "claimsAllowed": self.claims_allowed,
            "qualityFinalization": self.finalization,
            "runsPerMode": self.runs if self.stopping is None else None,
            "executed": self.executed,
            "resumed": self.resumed,
            "failed": len(self.failures),
            "failures": [failure.as_dict(self.run_set_id) for failure in self.failures],
            "projectRevision": self.revision,
            "rawDirectory": str(self.paths.raw),
            "aggregateDirectory": str(self.paths.aggregate) if self.aggregated else None,
            "cleanupError": self.cleanup_error,
        }
        if self.stopping is not None:
            document["untilResolved"] = {**self.stopping, "record": str(self.paths.stopping)}
        return document


class RunStopped(LoopmeterError):
    """An adapter call failed without --keep-going: the run set stops, written runs stay."""


def _finalize(adapter, execution: Execution, answers: dict, target: Path) -> None:
    """Let the adapter attach independently evaluated quality by runId, after every timing."""
    records = []
    for scenario in execution.scenarios:
        for mode in MODES:
            for run_index in range(1, execution.runs + 1):
                document = execution.documents.get((scenario["scenarioId"], mode, run_index))
                if document is None:
                    continue
                records.append({
                    "runSetId": execution.run_set_id,
                    "runId": document["runId"],
                    "runIndex": run_index,
                    "scenarioId": scenario["scenarioId"],
                    "mode": mode,
                    "scenario": scenario,
                    "wallClockMs": document["wallClockMs"],
                    "response": answers.get(document["runId"]),
                    "run": document,
                })
    payload = {
        "benchmarkVersion": BENCHMARK_VERSION,
        "runSetId": execution.run_set_id,
        "target": str(target),
        "scenarios": execution.scenarios,
        "records": records,
    }
    try:
        value = adapter.finalize(payload)
    except AdapterFailed as error:
        raise LoopmeterError(f"finalize_benchmark failed: {error} (the runs are kept; rerun with --resume to finalize again)") from None
    if value is None:
        return
    if not isinstance(value, dict):
        raise LoopmeterError("finalize_benchmark must return an object (or null)")
    quality_by_run = value.get("qualityByRunId")
    quality_by_run = {} if quality_by_run is None else quality_by_run
    if not isinstance(quality_by_run, dict):
        raise LoopmeterError("finalize_benchmark's qualityByRunId must be an object")
    by_run_id = {document["runId"]: key for key, document in execution.documents.items()}
    updated = {}
    for run_id_, quality in quality_by_run.items():  # all checked before any file changes
        if run_id_ not in by_run_id:
            raise LoopmeterError(f"finalize_benchmark returned an unknown runId: {run_id_}")
        key = by_run_id[run_id_]
        document = {**execution.documents[key], "quality": quality_shape(quality)}
        try:
            flatten_run(document)
        except RunRejected as error:
            raise LoopmeterError(f"finalize_benchmark: quality of {run_id_}: {error.field}: {error.rule}") from None
        if document != execution.documents[key]:
            updated[key] = document
    for key, document in updated.items():
        write_text(execution.paths.run_file(*key), run_text(document))
        execution.documents[key] = document
    summary = value.get("summary")
    execution.finalization = summary if isinstance(summary, dict) else {"status": "MEASURED"}


def _run_once(adapter, execution: Execution, scenario: dict, mode: str, run_index: int, target: Path,
              environment: dict) -> tuple[dict | None, Any, Failure | None]:
    """One adapter call, timed by the runner: (run document, answer, None) or (None, answer, failure)."""
    scenario_id = scenario["scenarioId"]
    request = {
        "benchmarkVersion": BENCHMARK_VERSION,
        "runSetId": execution.run_set_id,
        "runId": run_id(scenario_id, mode, run_index),
        "scenario": copy.deepcopy(scenario),
        "mode": mode,
        "runIndex": run_index,
        "target": str(target),
        "projectRevision": execution.revision,
    }
    answer, error = None, None
    started = time.perf_counter_ns()
    try:
        answer = adapter.run(request)
    except AdapterFailed as failed:
        error = " ".join(str(failed).split()) or "the adapter failed without a message"
    wall_clock_ms = js_round4((time.perf_counter_ns() - started) / 1e6)
    recorded_at = utc_timestamp()
    if error is None:
        try:
            document = build_run(
                answer=answer, run_set_id=execution.run_set_id, scenario=scenario, mode=mode, run_index=run_index,
                wall_clock_ms=wall_clock_ms, recorded_at=recorded_at, revision=execution.revision, environment=environment,
            )
            return document, answer, None
        except RunRejected as rejected:
            error = f"answer rejected: {rejected.field}: {rejected.rule}"
    return None, answer, Failure(scenario_id, mode, run_index, error, wall_clock_ms, recorded_at)


def execute(
    *,
    adapter_spec: str,
    scenarios_dir: Path,
    results: Path,
    target: Path,
    tier: str | None = None,
    runs: int | None = None,
    run_set_id: str | None = None,
    only_scenarios: list[str] | None = None,
    resume: bool = False,
    keep_going: bool = False,
    until_resolved: bool = False,
    max_runs: int | None = None,
    on_note: Callable[[str], None] = lambda message: None,
) -> Execution:
    """Run the benchmark and write the raw runs (not the aggregate: see `aggregate_run_set`); with
    `until_resolved`, in rounds that stop each scenario when its questions are settled, at most
    `max_runs` (default 30) runs per scenario and mode.

    Raises RunStopped when an adapter call fails without `keep_going`; the runs written so
    far stay, and `resume=True` finishes the run set later."""
    if resume and run_set_id is None:
        raise usage_error("--resume needs --run-set: the run set to finish")
    resolve_budget(until_resolved, max_runs, tier, runs)  # refuse a bad command line before anything else
    if runs is not None or tier is not None:
        resolve_runs(tier, runs)
    run_set_id = check_run_set_id(run_set_id) if run_set_id is not None else generated_run_set_id()
    target = Path(target).expanduser().resolve()
    if not target.is_dir():
        raise LoopmeterError(f"--target {target} is not a directory")
    results = Path(results).expanduser().resolve()
    scenarios = load_scenarios(scenarios_dir, only_scenarios)
    paths = RunSetPaths(results, run_set_id)
    held = Claim(paths)  # before the run set is looked at: two executes of it never both find it free
    try:
        present = paths.exists()
        if present and not resume:
            raise LoopmeterError(
                f"run set {run_set_id} already exists ({present[0]}) and will not be overwritten; "
                "pass --resume to finish it, or choose another --run-set"
            )
        planned = None
        if resume:
            planned = reconcile_plan(paths, Size(tier, runs, max_runs), until_resolved, scenarios)
            if not present:
                on_note(f"note: run set {run_set_id} does not exist yet in {results}: starting it")
        if planned is not None:
            tier, runs, max_runs, until_resolved = planned.tier, planned.runs, planned.max_runs, planned.max_runs is not None
        max_runs = resolve_budget(until_resolved, max_runs, tier, runs)
        runs = max_runs if until_resolved else resolve_runs(tier, runs)
        revision = project_revision(target)
        execution = Execution(run_set_id, tier, runs, scenarios, paths, revision)

        # what is already written (--resume): every file present was written whole (temp + rename)
        todo = []
        for scenario in scenarios:
            for mode in MODES:
                for run_index in range(1, runs + 1):
                    key = (scenario["scenarioId"], mode, run_index)
                    path = paths.run_file(*key)
                    if path.exists():
                        execution.documents[key] = read_existing_run(path, paths, *key)
                    else:
                        todo.append((scenario, mode, run_index))
        execution.resumed = len(execution.documents)
        earlier = sorted({doc["metadata"]["projectRevision"] or "null" for doc in execution.documents.values()})
        if earlier and earlier != [revision or "null"]:
            on_note(
                f"note: the target is at {revision or 'no git revision'} but runs already written have "
                f"{', '.join(earlier)}: their pairs with new runs will not be comparable"
            )

        adapter = load_adapter(adapter_spec, paths.adapter_log)
        stopping = None if not until_resolved else planned.rule if planned is not None and planned.rule else \
            sequential.settings(max_runs)
        plan = plan_document(run_set_id, Size(tier, None if until_resolved else runs), scenarios, adapter_spec, target, stopping)
        calls = _Calls(adapter, execution, target, environment_defaults(), keep_going, plan)
        try:
            try:
                adapter.start()
                if until_resolved:
                    _run_rounds(calls, stopping)
                else:
                    with progress.bar(f"execute {run_set_id}", len(todo)) as bar:
                        for scenario, mode, run_index in todo:
                            bar.update(description=f"{scenario['scenarioId']} {mode} {run_index}/{runs}")
                            calls.run(scenario, mode, run_index)
                            bar.advance()
                if execution.documents:
                    _finalize(adapter, execution, calls.answers, target)
            finally:
                try:
                    adapter.cleanup()
                except AdapterFailed as error:
                    execution.cleanup_error = str(error)
                    on_note(f"warning: the adapter's cleanup failed: {error}")
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (`interrupts.answer` raises it for both)
            how, code = ("terminated (SIGTERM)", 143) if interrupts.TERMINATED else ("interrupted", 130)
            if not paths.plan.exists():  # stopped in the first call: --resume, as told, needs the plan's size
                write_json(paths.plan, plan)
            raise LoopmeterError(
                f"{how}; {execution.run_count} runs kept in {paths.raw}; rerun with --resume --run-set {run_set_id} to finish",
                code,
            ) from None
    finally:
        held.close()
    return execution


class _Calls:
    """The adapter calls of one invocation: each run written as it returns, each failure recorded
    (and the run set stopped without `keep_going`), the plan written with the first of them."""

    def __init__(self, adapter, execution: Execution, target: Path, environment: dict, keep_going: bool, plan: dict):
        self.adapter, self.execution, self.target, self.environment = adapter, execution, target, environment
        self.keep_going, self.plan = keep_going, plan
        self.answers: dict[str, Any] = {}

    def run(self, scenario: dict, mode: str, run_index: int) -> None:
        execution, paths = self.execution, self.execution.paths
        key = (scenario["scenarioId"], mode, run_index)
        document, answer, failure = _run_once(self.adapter, execution, scenario, mode, run_index, self.target,
                                              self.environment)
        if not paths.plan.exists():  # once something of the run set is written
            write_json(paths.plan, self.plan)
        if failure is not None:
            execution.failures.append(failure)
            append_failure(paths, failure.as_dict(execution.run_set_id))
            if not self.keep_going:
                raise RunStopped(
                    f"{failure.line()} (stopped; {execution.run_count} runs kept in {paths.raw}; "
                    f"rerun with --resume --run-set {execution.run_set_id} to finish, or --keep-going to go past failures)"
                )
            return
        write_text(paths.run_file(*key), run_text(document))
        execution.documents[key] = document
        self.answers[document["runId"]] = answer
        execution.executed += 1


def _run_rounds(calls: _Calls, stopping: dict) -> None:
    """--until-resolved: the rounds reached are finished first (the runs missing in them: a resumed
    run set), then every scenario still running gets one more run index in every mode per round, and
    is judged after each; the stopping record is written after every round."""
    execution = calls.execution
    max_runs, level, margin = stopping["maxRuns"], stopping["level"], stopping["margin"]
    reached = {scenario["scenarioId"]: max((key[2] for key in execution.documents if key[0] == scenario["scenarioId"]),
                                           default=0) for scenario in execution.scenarios}
    missing = [(scenario, mode, run_index) for scenario in execution.scenarios
               for run_index in range(1, reached[scenario["scenarioId"]] + 1) for mode in MODES
               if (scenario["scenarioId"], mode, run_index) not in execution.documents]
    records: dict[str, dict] = {}
    left = len(missing) + sum(max_runs - done for done in reached.values()) * len(MODES)
    with progress.bar(f"execute {execution.run_set_id} until resolved", left) as bar:
        def call(batch: list[tuple[dict, str, int]]) -> None:
            for scenario, mode, run_index in batch:
                bar.update(description=f"{scenario['scenarioId']} {mode} {run_index} (at most {max_runs})")
                calls.run(scenario, mode, run_index)
                bar.advance()

        call(missing)
        running = list(execution.scenarios)
        while running:
            batch = []
            for scenario in list(running):
                scenario_id = scenario["scenarioId"]
                rounds = reached[scenario_id]
                if rounds:
                    documents = [document for key, document in execution.documents.items() if key[0] == scenario_id]
                    judgements, reason = sequential.judge_scenario(
                        sequential.token_overheads(documents), scenario.get("expectedProfile"), rounds, max_runs, level, margin)
                    records[scenario_id] = sequential.scenario_record(scenario_id, rounds, reason, judgements)
                    if reason is not None:
                        running.remove(scenario)
                        left -= (max_runs - rounds) * len(MODES)  # the rounds it will not run
                        bar.update(total=left)
                        continue
                reached[scenario_id] = rounds + 1
                batch += [(scenario, mode, rounds + 1) for mode in MODES]
            execution.stopping = {**stopping, "scenarios": [records[s["scenarioId"]] for s in execution.scenarios
                                                            if s["scenarioId"] in records]}
            if records:  # once a round is whole: before it, nothing is judged
                write_json(execution.paths.stopping, {"schemaVersion": 1, "runSetId": execution.run_set_id,
                                                      **execution.stopping})
            call(batch)
