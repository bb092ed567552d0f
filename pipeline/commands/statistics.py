"""Statistics ForgeLoop does not compute: `report confidence` and `compare`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import Exit
from .apps import app, report_app
from .common import JsonOption, QuietOption, WarehouseOption, command, print_json, set_quiet, stdout_console, write_stdout
from .helptext import command_help

LevelOption = Annotated[float, typer.Option("--level", help="Confidence level of the intervals, between 0 and 1.")]
ResamplesOption = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples per interval.", min=100,
                                              max=1_000_000)]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the resampling: the same seed, the same intervals.",
                                         min=0)]


@report_app.command("confidence", **command_help(
    "Bootstrap intervals on the overheads; objective verdicts.",
    "Per run set, scenario and ForgeLoop mode: intervals on the paired token and time overhead p50 and "
    "p95 and the token distribution deltas, around ForgeLoop's own figures; the light objectives "
    "judged MET, VIOLATED or INCONCLUSIVE on them (`aggregate --confidence` stores them as forgeloop_confidence "
    "and forgeloop_objectives).",
    example="loopmeter report confidence\nloopmeter report confidence --run-set RUN_SET --level 0.9 --json"))
@command
def report_confidence(
    run_set: Annotated[Optional[str], typer.Option("--run-set", help="Only this run set (default: all).")] = None,
    level: LevelOption = 0.95,
    resamples: ResamplesOption = 2000,
    seed: SeedOption = 0,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet)
    from ..forgeloop.confidence import render_confidence
    from ..operations import report_confidence as confidence

    shown = confidence(warehouse=warehouse, run_set=run_set, level=level, resamples=resamples, seed=seed)
    if json:
        print_json(shown.document, 2)
    else:
        render_confidence(shown.document, stdout_console(250))
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
    set_quiet(quiet)
    from ..forgeloop.compare import compare_markdown, counts, render_compare
    from ..operations import compare
    from ..operations.statistics import check_compare_options

    check_compare_options(output_format, fail_on, json)
    report = compare(baseline, candidate, warehouse=warehouse, margin=margin, level=level, resamples=resamples,
                     seed=seed).document
    if json or output_format == "json":
        print_json(report, 2)
    elif output_format == "markdown":
        write_stdout(compare_markdown(report))
    else:
        render_compare(report, stdout_console(250))
    if fail_on == "regression" and counts(report)["REGRESSED"]:
        return Exit.REGRESSED
    return Exit.OK
