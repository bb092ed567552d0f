"""Statistics ForgeLoop does not compute: `report confidence` and `compare`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import Exit
from .apps import app, report_app
from .common import JsonOption, QuietOption, WarehouseOption, command, note, print_json, set_quiet, stdout_console, \
    write_stdout
from .helptext import command_help

LevelOption = Annotated[float, typer.Option("--level", help="Confidence level of the intervals, between 0 and 1.")]
ResamplesOption = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples per interval.", min=100,
                                              max=1_000_000)]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the resampling: the same seed, the same intervals.",
                                         min=0, max=2**53 - 1)]  # `--json` writes it exactly


@report_app.command("confidence", **command_help(
    "Intervals on the overheads; objective verdicts.",
    "Per run set, scenario and ForgeLoop mode: intervals on the paired token and time overhead p50 and "
    "p95 (exact, from the order statistics: no seed) and the token distribution deltas (bootstrap of the pairs: "
    "--resamples, --seed), around ForgeLoop's own figures; the light objectives judged MET, VIOLATED or "
    "INCONCLUSIVE on them (NOT_VERIFIED where ForgeLoop allows no claim), with the pairs that would resolve them (`aggregate --confidence` stores them as "
    "forgeloop_confidence and forgeloop_objectives).",
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
    "Compare two run sets: ratios, detectable effects, verdicts.",
    "Per scenario and mode, for tokens and wall time, and pooled over the scenarios per mode: the ratio "
    "CANDIDATE / BASELINE of the runs' geometric means with an interval (t on log values; all the "
    "gated intervals hold at once at --level), the minimum detectable effect (MDE: the true ratio these runs "
    "would tell apart from 1 80% of the time), and a verdict: REGRESSED (the interval above 1 + margin), IMPROVED "
    "(below 1 - margin), NO_CHANGE (inside both) or INCONCLUSIVE. --fail-on (repeatable, or comma-separated) "
    "exits 5 when a gated row regressed (regression), is inconclusive (inconclusive) or has an MDE above "
    "1 + margin (underpowered). --adjust direct divides each ForgeLoop mode's time ratio by the same "
    "scenario's direct-mode ratio (--adjust-tokens: the token ratio too). --format markdown writes a table "
    "for a pull request or $GITHUB_STEP_SUMMARY.",
    example="loopmeter compare RUN_SET_BEFORE RUN_SET_AFTER\n"
            "loopmeter compare BEFORE AFTER --adjust direct --format markdown \\\n"
            "    --fail-on regression",
    codes=(Exit.REGRESSED,)))
@command
def compare_command(
    baseline: Annotated[str, typer.Argument(metavar="BASELINE", help="The run set to compare against.", show_default=False)],
    candidate: Annotated[str, typer.Argument(metavar="CANDIDATE", help="The run set compared.", show_default=False)],
    margin: Annotated[float, typer.Option("--margin", help="Ratios within 1 ± margin count as no change.")] = 0.10,
    output_format: Annotated[str, typer.Option("--format", metavar="[table|markdown|json]",
                                               help="table for people, markdown, or json (as --json).")] = "table",
    fail_on: Annotated[Optional[list[str]], typer.Option(
        "--fail-on", metavar="[regression|inconclusive|underpowered]",
        help="Exit 5 when a gated row meets the condition; repeatable.", show_default=False)] = None,
    adjust: Annotated[Optional[str], typer.Option("--adjust", metavar="[direct]", show_default=False,
                                                  help="Divide time ratios by the direct mode's.")] = None,
    adjust_tokens: Annotated[bool, typer.Option("--adjust-tokens", help="With --adjust: token ratios too.")] = False,
    level: Annotated[float, typer.Option("--level", help="Level at which all the gated intervals hold at once.")] = 0.95,
    # accepted, without effect: the intervals draw nothing (a command line that passes them still runs)
    resamples: Annotated[Optional[int], typer.Option("--resamples", hidden=True)] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", hidden=True)] = None,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet)
    del resamples, seed  # no effect (above)
    from ..operations import compare
    from ..operations.statistics import check_compare_options

    check_compare_options(output_format, json)
    shown = compare(baseline, candidate, warehouse=warehouse, margin=margin, level=level, adjust=adjust,
                    adjust_tokens=adjust_tokens, fail_on=fail_on or ())
    report = shown.document
    for line in shown.notes:
        note(line)
    if json or output_format == "json":
        print_json(report, 2)
    else:
        from ..forgeloop.compare_text import compare_markdown, render_compare

        if output_format == "markdown":
            write_stdout(compare_markdown(report))
        else:
            render_compare(report, stdout_console(250))
    return Exit.REGRESSED if report["gate"]["failed"] else Exit.OK
