"""`loopmeter execute`: the benchmark runner (pipeline/forgeloop/runner.py) on the command line."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import Exit
from .apps import app
from .common import JsonOption, QuietOption, WaitOption, WarehouseOption, command, note, path_option, print_json, \
    set_quiet
from .helptext import TIER_METAVAR, command_help

HELP = command_help(
    "Run a ForgeLoop benchmark through an adapter and ingest it.",
    "Run every scenario in every mode (direct, forgeloopBalanced, forgeloopAdaptive) through an adapter, "
    "time each run, write RESULTS/raw/<runSetId>/<scenario>/<mode>/run-NNN.json, then ingest the run set "
    "and write RESULTS/aggregate/<runSetId>/. The adapter executes; it must return actual provider/host "
    "usage, verification and comparable steps (docs/runner.md). Tiers: smoke 1-3 runs (default 1), "
    "evidence 5-10 (5), tail 20-30 (20); without a tier 1-100 (default 5). With --until-resolved, "
    "rounds of one run per scenario and mode until each scenario's objectives and overheads are "
    "settled on 95% confidence sequences, at most --max-runs (default 30).",
    example="loopmeter execute --adapter adapter.py --scenarios scenarios --tier smoke\n"
            "loopmeter execute --adapter adapter.py --scenarios scenarios \\\n"
            "    --until-resolved --max-runs 30\n"
            "loopmeter execute --adapter 'node adapter.mjs' --scenarios scenarios \\\n"
            "    --resume --run-set RUN_SET",
    codes=(Exit.REJECTED, Exit.BUSY),
)


@app.command("execute", **HELP)
@command
def execute_command(
    adapter: Annotated[str, typer.Option("--adapter", help="A .py file or Python module with run_benchmark(input), "
                                         "or a command speaking JSON lines (e.g. 'node host-adapter.mjs').",
                                         show_default=False)],
    scenarios: Annotated[Path, path_option("--scenarios", help="Directory of scenario files (<scenarioId>.json).",
                                            show_default=False)],
    tier: Annotated[Optional[str], typer.Option("--tier", metavar=TIER_METAVAR, help="The tier: how many runs it takes.",
                                            show_default=False)] = None,
    runs: Annotated[Optional[int], typer.Option("--runs", help="Runs per scenario and mode: smoke 1-3 (default 1), evidence "
                                                "5-10 (5), tail 20-30 (20); without a tier 1-100 (5).",
                                                show_default=False)] = None,
    run_set: Annotated[Optional[str], typer.Option("--run-set", help="Run set id (default: a UTC timestamp).",
                                                   show_default=False)] = None,
    output: Annotated[Optional[Path], path_option("--output", help="Results directory (default: SCENARIOS/results).",
                                                   show_default=False)] = None,
    target: Annotated[Path, path_option("--target", help="The project the agent works on; its git HEAD is the "
                                         "runs' projectRevision.")] = Path("."),
    scenario: Annotated[Optional[List[str]], typer.Option("--scenario", help="Only this scenario (repeatable).",
                                                          show_default=False)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Finish an interrupted run set: run only the runs not "
                                         "written yet.")] = False,
    keep_going: Annotated[bool, typer.Option("--keep-going", help="Record a failed adapter call and go on "
                                             "(exit 3 at the end) instead of stopping.")] = False,
    until_resolved: Annotated[bool, typer.Option("--until-resolved", help="Run in rounds and stop each scenario "
                                                 "when its objectives and overheads are settled (docs/runner.md).")] = False,
    max_runs: Annotated[Optional[int], typer.Option("--max-runs", help="With --until-resolved: the most runs per "
                                                    "scenario and mode, 1-100 (default 30).", show_default=False)] = None,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet or json)
    from ..operations import execute

    execution = execute(adapter=adapter, scenarios=scenarios, output=output, target=target, tier=tier, runs=runs,
                        run_set=run_set, only_scenarios=scenario, resume=resume, keep_going=keep_going,
                        until_resolved=until_resolved, max_runs=max_runs, warehouse=warehouse, wait=wait,
                        on_note=lambda message: print(message, file=sys.stderr))
    if execution.other_rejections:
        note(f"note: ingest rejected {execution.other_rejections} files of other run sets in {execution.paths.results} "
             "(see `loopmeter ingest forgeloop`)")
    if json:
        print_json(execution.as_dict())
    else:
        claims = execution.claims_allowed
        print("\n".join([
            f"Benchmark run set: {execution.run_set_id}",
            *size_lines(execution),
            f"Runs: {execution.run_count} ({execution.executed} executed, {execution.resumed} already written, "
            f"{len(execution.failures)} failed)",
            f"Project revision: {execution.revision or 'none (target is not a git repository)'}",
            f"Claims allowed: {'-' if claims is None else 'yes (observational only)' if claims else 'no'}",
            f"Quality finalization: {execution.finalization.get('status', 'MEASURED')}",
            f"Results: {execution.paths.results}",
        ]))
    if execution.failures:
        for failure in execution.failures[:20]:
            print(f"failed {failure.line()}", file=sys.stderr)
        print(f"loopmeter: {len(execution.failures)} adapter calls failed (listed in {execution.paths.failures}); "
              f"rerun with --resume --run-set {execution.run_set_id} to retry them", file=sys.stderr)
        return Exit.REJECTED
    return Exit.OK


MODE_NAMES = {"forgeloopBalanced": "balanced", "forgeloopAdaptive": "adaptive"}
STOPPED = {"RESOLVED": "resolved", "OUT_OF_REACH": "settled, the rest out of reach of the budget",
           "BUDGET_SPENT": "budget spent", None: "not finished"}


def size_lines(execution) -> list[str]:
    """The run set's size: its tier, or, until resolved, the budget and, per scenario, the runs it
    took, why it stopped and its questions' answers."""
    if execution.stopping is None:
        return [f"Tier: {execution.tier or 'custom'} ({execution.runs} runs per scenario and mode)",
                f"Scenarios: {len(execution.scenarios)}"]
    stopping = execution.stopping
    lines = [f"Until resolved: at most {stopping['maxRuns']} runs per scenario and mode "
             f"({stopping['level'] * 100:g}% confidence sequences, margin {stopping['margin']:g} points)",
             f"Scenarios: {len(execution.scenarios)}"]
    for scenario in stopping["scenarios"]:
        answers = ", ".join(f"{question_text(question)} {answer_text(question)}" for question in scenario["questions"])
        lines.append(f"  {scenario['scenarioId']}: {scenario['runs']} runs per mode, {STOPPED[scenario['stopped']]}: "
                     f"{answers}")
    return lines


def question_text(question: dict) -> str:
    statistic = "p50" if question["statistic"].endswith("P50") else "p95"
    mode = MODE_NAMES.get(question["mode"], question["mode"])
    if question["objective"] is not None:
        return f"{mode} {statistic} <= {question['threshold']:g}%"
    return f"{mode} {statistic} vs direct"


def answer_text(question: dict) -> str:
    if question["verdict"] is not None:
        return question["verdict"]
    return "out of reach" if question["status"] == "OUT_OF_REACH" else "open"
