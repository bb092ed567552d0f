"""Statistics ForgeLoop does not compute: `report confidence` and `compare`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..cli import app, report_app
from ..errors import Exit
from .common import (
    JsonOption, QuietOption, WaitOption, WarehouseOption, check_choice, check_number, command, open_warehouse, print_json,
    set_quiet, stdout_console, store_report_tables, usage_error, write_stdout,
)
from .helptext import command_help

LevelOption = Annotated[float, typer.Option("--level", help="Confidence level of the intervals, between 0 and 1.")]
ResamplesOption = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples per interval.", min=100,
                                              max=1_000_000)]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the resampling: the same seed, the same intervals.",
                                         min=0)]
COMPARE_FORMATS = ("table", "markdown", "json")


def _settings(level: float, resamples: int, seed: int):
    from ..forgeloop.confidence import Settings

    if not 0 < level < 1:
        raise usage_error(f"--level must be between 0 and 1, e.g. 0.95 (got {level:g})")
    return Settings(level=level, resamples=resamples, seed=seed)


@report_app.command("confidence", **command_help(
    "Bootstrap intervals on the overheads; objective verdicts.",
    "Per run set, scenario and ForgeLoop mode: intervals on the paired token and time overhead p50 and "
    "p95 and the token distribution deltas, around ForgeLoop's own figures; the light objectives "
    "judged MET, VIOLATED or INCONCLUSIVE on them. Stores forgeloop_confidence and forgeloop_objectives.",
    example="loopmeter report confidence\nloopmeter report confidence --run-set RUN_SET --level 0.9 --json",
    codes=(Exit.BUSY,)))
@command
def report_confidence(
    run_set: Annotated[Optional[str], typer.Option("--run-set", help="Only this run set (default: all).")] = None,
    level: LevelOption = 0.95,
    resamples: ResamplesOption = 2000,
    seed: SeedOption = 0,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    check_number("--level", level, minimum=0, inclusive=False)
    settings = _settings(level, resamples, seed)
    set_quiet(quiet)
    store = open_warehouse(warehouse)
    from ..forgeloop.confidence import confidence_frames, confidence_report, render_confidence
    from ..forgeloop.stage import check

    check(store)
    report = confidence_report(store, run_set, settings)
    if json:
        print_json(report, 2)
    else:
        render_confidence(report, stdout_console(250))
    store_report_tables(store, confidence_frames(report), wait, "report confidence")
    return Exit.OK


@app.command("compare", **command_help(
    "Compare two run sets: medians, ratios and verdicts.",
    "Per scenario and mode, for tokens and wall time: each run set's median, the ratio CANDIDATE / BASELINE "
    "with a bootstrap interval, and a verdict: REGRESSED (the interval above 1 + margin), IMPROVED (below "
    "1 - margin), NO_CHANGE (inside both) or INCONCLUSIVE. --format markdown writes a table for a pull "
    "request or $GITHUB_STEP_SUMMARY.",
    example="loopmeter compare RUN_SET_BEFORE RUN_SET_AFTER\n"
            "loopmeter compare BEFORE AFTER --format markdown --fail-on regression",
    codes=(Exit.REGRESSED,)))
@command
def compare_command(
    baseline: Annotated[str, typer.Argument(metavar="BASELINE", help="The run set to compare against.", show_default=False)],
    candidate: Annotated[str, typer.Argument(metavar="CANDIDATE", help="The run set compared.", show_default=False)],
    margin: Annotated[float, typer.Option("--margin", help="Ratios within 1 ± margin count as no change.")] = 0.10,
    output_format: Annotated[str, typer.Option("--format", metavar="[table|markdown|json]",
                                               help="table for people, markdown, or json (as --json).")] = "table",
    fail_on: Annotated[Optional[str], typer.Option("--fail-on", metavar="[regression]",
                                                   help="Exit 5 when any row regressed.", show_default=False)] = None,
    level: LevelOption = 0.95,
    resamples: ResamplesOption = 2000,
    seed: SeedOption = 0,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    check_number("--margin", margin, minimum=0)
    if margin >= 1:
        raise usage_error(f"--margin must be below 1, e.g. 0.10 for ±10% (got {margin:g})")
    check_choice("--format", output_format, COMPARE_FORMATS)
    check_choice("--fail-on", fail_on, ("regression",))
    if json and output_format not in ("table", "json"):
        raise usage_error(f"--json and --format {output_format} say two things; give one")
    settings = _settings(level, resamples, seed)
    set_quiet(quiet)
    store = open_warehouse(warehouse)
    from ..forgeloop.compare import compare_markdown, compare_run_sets, counts, render_compare

    report = compare_run_sets(store, baseline, candidate, margin, settings)
    if json or output_format == "json":
        print_json(report, 2)
    elif output_format == "markdown":
        write_stdout(compare_markdown(report))
    else:
        render_compare(report, stdout_console(250))
    if fail_on == "regression" and counts(report)["REGRESSED"]:
        return Exit.REGRESSED
    return Exit.OK
