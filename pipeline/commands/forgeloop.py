"""ForgeLoop commands: `ingest forgeloop`, `aggregate`, `report outliers|tail|summary|regression`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import Exit, LoopmeterError, shown_path
from .apps import app, ingest_app, report_app
from .common import BucketRunsOption, EngineOption, JsonOption, QuietOption, SparkMasterOption, WaitOption, \
    WarehouseOption, WorkersOption, command, note, path_argument, path_option, print_json, print_rejections, \
    set_quiet, stdout_console
from .helptext import TIER_METAVAR, command_help

RunSetOption = Annotated[Optional[str], typer.Option("--run-set", help="Only this run set (default: all).")]
ReadingEngineOption = Annotated[str, typer.Option("--engine", metavar="[local|pool|spark]",
                                                  help="Who reads the batches of run files: worker processes of this "
                                                       "machine, exactly --workers of them, or Spark (docs/scale.md).")]
SHOWN_RUN_SETS = 10


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _names(run_sets: list[str]) -> str:
    shown = ", ".join(run_sets[:SHOWN_RUN_SETS]) or "-"
    return shown + (f" and {len(run_sets) - SHOWN_RUN_SETS} more" if len(run_sets) > SHOWN_RUN_SETS else "")


@ingest_app.command("forgeloop", **command_help(
    "Read ForgeLoop run files into the warehouse.",
    "The run files are RESULTS/raw/<runSetId>/**/*.json. A file that has the size and modification time it had at the last ingest is not read again "
                    "(--full reads every one). A run file or scenario file larger than --max-file-mb is rejected "
                    "unread (ForgeLoop writes runs of about 2 KB and scenarios of about 1 KB).",
    example="loopmeter ingest forgeloop results --scenarios scenarios\nloopmeter ingest forgeloop results --scenarios scenarios --aggregate",
    codes=(Exit.REJECTED, Exit.BUSY)))
@command
def ingest_forgeloop_command(
    results: Annotated[Path, path_argument(metavar="RESULTS", help="ForgeLoop results directory (holds raw/).", show_default=False)],
    scenarios: Annotated[Optional[Path], path_option("--scenarios", help="Directory of scenario files (<scenarioId>.json).")] = None,
    max_file_mb: Annotated[float, typer.Option("--max-file-mb", help="Reject run files and scenario files larger than this.")] = 16.0,
    full: Annotated[bool, typer.Option("--full", "--reread", help="Read and judge every file again, whatever its size and "
                                       "modification time say: the tables a clean ingest would write.")] = False,
    run_set: Annotated[Optional[list[str]], typer.Option("--run-set", help="Only this run set folder (repeatable; default: all).")] = None,
    then_aggregate: Annotated[bool, typer.Option("--aggregate", help="Then aggregate, in the same process: `loopmeter "
                                                 "aggregate` with its defaults and this --engine, the documents in "
                                                 "<warehouse>/aggregate.")] = False,
    engine: ReadingEngineOption = "local",
    spark_master: SparkMasterOption = None,
    workers: WorkersOption = None,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet or json)
    from ..operations import ingest_forgeloop

    ingested = ingest_forgeloop(results, scenarios, warehouse=warehouse, max_file_mb=max_file_mb, run_sets=run_set or None,
                                full=full, then_aggregate=then_aggregate, engine=engine, workers=workers,
                                spark_master=spark_master, wait=wait)
    from ..tables_text import print_fitted

    result, aggregated, root = ingested.ingest, ingested.aggregated, ingested.warehouse
    if json:
        print_json(ingested.as_dict(), 2)
    else:
        print_rejections([f"rejected {path}: {field}: {reason}" for path, field, reason in result.rejections],
                         result.rejected, "ingest_manifest")
        scenario_files = result.scenarios + result.scenarios_rejected
        print_fitted(
            f"{_count(result.seen, 'run file')}: {result.accepted} accepted, {result.unchanged} unchanged, "
            f"{result.runs_rejected} rejected; run sets {_names(result.run_sets)}"
            + (f"; {_count(scenario_files, 'scenario file')}: {result.scenarios} "
               f"{'unchanged' if result.scenarios_unchanged else 'accepted'}, {result.scenarios_rejected} rejected"
               if scenarios is not None else "")
            + f" -> {shown_path(root)}"
        )
        if aggregated is not None:
            print_aggregated(aggregated, aggregated.destination)
        for line in ingested.notes:
            note(line)
    if result.rejected:
        if not json:
            seen = result.seen + result.scenarios + result.scenarios_rejected
            rest = "the rest is stored" if result.rejected < seen else "nothing is stored"
            print(f"loopmeter: {result.rejected} of {_count(seen, 'file')} rejected; {rest}", file=sys.stderr)
        return Exit.REJECTED
    return Exit.OK


@app.command("aggregate", **command_help(
    "Compute ForgeLoop's aggregates from the warehouse.",
    "Writes DIR/<runSetId>/<scenarioId>.json and summary.json (DIR: --out), and the forgeloop_* tables.",
    example="loopmeter aggregate --tier evidence\nloopmeter aggregate --run-set RUN_SET --out ~/forgeloop/aggregate",
    codes=(Exit.BUSY,)))
@command
def aggregate_command(
    out: Annotated[Optional[Path], path_option("--out", help="Where to write the documents (default: <warehouse>/aggregate).")] = None,
    run_set: RunSetOption = None,
    tier: Annotated[Optional[str], typer.Option("--tier", metavar=TIER_METAVAR, help="Recorded in summary.json.",
                                            show_default=False)] = None,
    full: Annotated[bool, typer.Option("--full", help="Compute every run set again, not only those changed since the last aggregate.")] = False,
    confidence: Annotated[bool, typer.Option("--confidence", help="Also store the intervals of `report confidence` (its "
                                             "defaults) as forgeloop_confidence and forgeloop_objectives.")] = False,
    engine: EngineOption = "local",
    spark_master: SparkMasterOption = None,
    workers: WorkersOption = None,
    bucket_runs: BucketRunsOption = 20_000,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet or json)
    from ..operations import aggregate

    result = aggregate(warehouse=warehouse, out=out, run_set=run_set, tier=tier, full=full, confidence=confidence,
                       engine=engine, workers=workers, bucket_runs=bucket_runs, spark_master=spark_master, wait=wait)
    if json:
        print_json(result.as_dict(), 2)
    else:
        print_aggregated(result, result.destination)
    return Exit.OK


def print_aggregated(result, destination: Path) -> None:
    """What an aggregate computed, for people: a line per run set (the first few), and what it left."""
    from ..tables_text import print_fitted

    unknown = result.unknown_scenarios_note()
    if unknown:
        note(unknown)
    for docs in result.documents[:SHOWN_RUN_SETS]:
        print_fitted(
            f"{docs.run_set_id}: {len(docs.scenarios)} scenarios, {docs.summary['runCount']} runs, "
            f"claims allowed: {'yes' if docs.summary['claimsAllowed'] else 'no'} -> {shown_path(destination / docs.run_set_id)}"
        )
    if len(result.documents) > SHOWN_RUN_SETS:
        print_fitted(f"... {len(result.documents)} run sets computed, {len(result.written)} documents -> {shown_path(destination)}")
    plan = result.plan
    if plan is not None and (plan.kept or plan.removed or not result.documents):
        removed = f"; rows of {len(plan.removed)} run sets no longer ingested dropped" if plan.removed else ""
        computed = len(result.documents)
        print_fitted(f"{computed} run set{'' if computed == 1 else 's'} computed, {len(plan.kept)} unchanged since the last aggregate"
              f"{removed} -> {shown_path(destination)} (--full computes all again)")


def _report(name: str, run_set: Optional[str], warehouse: Optional[Path], json: bool) -> int:
    from ..forgeloop.reports import REPORTS
    from ..operations import forgeloop_report

    shown = forgeloop_report(name, warehouse=warehouse, run_set=run_set)
    for line in shown.notes:
        note(line)
    _, render, indent = REPORTS[name]
    try:
        if json:
            print_json(shown.body, indent)
        else:
            render(shown.body, stdout_console(250))
    except LoopmeterError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as error:  # made as it is printed
        from ..forgeloop.stored import not_as_written

        raise not_as_written(error) from error
    return Exit.OK


REPORT_HELP = {
    "outliers": ("ForgeLoop's token outliers and their runaway signals.",
                 "Outliers by TOKEN_IQR_1_5, per run set and scenario."),
    "tail": ("ForgeLoop's tail interpretation (adaptive against direct).",
             "The paired p95 of adaptive against direct beside the distribution p95."),
    "summary": ("ForgeLoop's summary per run set and scenario.",
                "Comparisons, light objectives and mode aggregates."),
    "regression": ("ForgeLoop's efficiency regression check.",
                   "Against the light objectives (observational)."),
}


def _report_command(name: str):
    def report(run_set: RunSetOption = None, warehouse: WarehouseOption = None, quiet: QuietOption = False,
               json: JsonOption = False) -> int:
        set_quiet(quiet)  # notes on stderr; the report itself is always printed
        return _report(name, run_set, warehouse, json)

    report.__name__ = f"report_{name}"
    return command(report)


for _name, (_summary, _details) in REPORT_HELP.items():
    report_app.command(_name, **command_help(
        _summary, _details + " --json prints what ForgeLoop's script prints.",
        example=f"loopmeter report {_name}\nloopmeter report {_name} --run-set RUN_SET --json"))(_report_command(_name))


@report_app.command("html", **command_help(
    "Write one self-contained HTML page with charts.",
    "No network is needed to view it: a section per run set, then the Forge charts. --json prints where it "
    "was written and its size.",
    example="loopmeter report html\nloopmeter report html --out ~/report.html"))
@command
def report_html(
    out: Annotated[Optional[Path], path_option("--out", help="The HTML file to write (default: report.html in the "
                                                "warehouse, where demo and run-all write it).")] = None,
    run_set: RunSetOption = None,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    from ..operations import report_html as write_page

    written = write_page(warehouse=warehouse, out=out, run_set=run_set)
    if json:
        print_json({"written": str(written), "bytes": written.stat().st_size}, 2)
    elif not quiet:
        print(f"wrote {written}")
    return Exit.OK
