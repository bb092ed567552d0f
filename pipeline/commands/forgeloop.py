"""ForgeLoop commands: `ingest forgeloop`, `aggregate`, `report outliers|tail|summary|regression`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..cli import app, ingest_app, report_app
from ..errors import Exit, LoopmeterError
from .common import (
    JsonOption, QuietOption, WaitOption, WarehouseOption, check_choice, check_number, check_utf8_path, command, note,
    open_warehouse, print_json, print_rejections, refuse_inside_warehouse, set_quiet, stdout_console,
)
from .helptext import TIER_METAVAR, command_help

RunSetOption = Annotated[Optional[str], typer.Option("--run-set", help="Only this run set (default: all).")]
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
    results: Annotated[Path, typer.Argument(metavar="RESULTS", help="ForgeLoop results directory (holds raw/).", show_default=False)],
    scenarios: Annotated[Optional[Path], typer.Option("--scenarios", help="Directory of scenario files (<scenarioId>.json).")] = None,
    max_file_mb: Annotated[float, typer.Option("--max-file-mb", help="Reject run files and scenario files larger than this.")] = 16.0,
    full: Annotated[bool, typer.Option("--full", "--reread", help="Read and judge every file again, whatever its size and "
                                       "modification time say: the tables a clean ingest would write.")] = False,
    run_set: Annotated[Optional[list[str]], typer.Option("--run-set", help="Only this run set folder (repeatable; default: all).")] = None,
    then_aggregate: Annotated[bool, typer.Option("--aggregate", help="Then aggregate, in the same process: `loopmeter "
                                                 "aggregate` with its defaults, the documents in <warehouse>/aggregate.")] = False,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    check_number("--max-file-mb", max_file_mb, minimum=0, inclusive=False)
    check_utf8_path(results, "RESULTS")
    check_utf8_path(scenarios, "--scenarios")
    set_quiet(quiet or json)
    from ..forgeloop.ingest import ingest_forgeloop
    from ..tables_text import print_fitted
    from ..storage.catalog import refresh_catalog

    store = open_warehouse(warehouse, writing=True)
    aggregated = None
    with store.lock(wait=wait, command="ingest forgeloop"):
        result = ingest_forgeloop(store, results, scenarios, max_file_bytes=max(1, int(max_file_mb * 1024 * 1024)),
                                  run_sets=run_set or None, full=full)
        if then_aggregate and store.has_table("runs"):
            from ..forgeloop.stage import aggregate
            from ..lifetime import thread_pool
            from ..storage import Warehouse

            # the catalog of the tables the ingest published is built while the aggregate computes
            # (DuckDB works outside the interpreter lock); the refresh after it keeps those views
            with thread_pool(1) as pool:
                early = pool.submit(refresh_catalog, Warehouse(store.root))  # not the aggregate's publishing
                aggregated = aggregate(store, store.root / "aggregate")
                early.result()
        refresh_catalog(store)  # rebuilt only if the tables it shows changed
    if json:
        print_json(result.as_dict() if aggregated is None else {**result.as_dict(), "aggregate": aggregated.as_dict()}, 2)
    else:
        print_rejections([f"rejected {path}: {field}: {reason}" for path, field, reason in result.rejections],
                         result.rejected, "ingest_manifest")
        scenario_files = result.scenarios + result.scenarios_rejected
        print_fitted(
            f"{_count(result.seen, 'run file')}: {result.accepted} accepted, {result.unchanged} unchanged, "
            f"{result.runs_rejected} rejected; run sets {_names(result.run_sets)}"
            + (f"; {_count(scenario_files, 'scenario file')}: {result.scenarios} accepted, {result.scenarios_rejected} rejected"
               if scenarios is not None else "")
            + f" -> {store.root}"
        )
        if aggregated is not None:
            print_aggregated(aggregated, store.root / "aggregate")
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
    out: Annotated[Optional[Path], typer.Option("--out", help="Where to write the documents (default: <warehouse>/aggregate).")] = None,
    run_set: RunSetOption = None,
    tier: Annotated[Optional[str], typer.Option("--tier", metavar=TIER_METAVAR, help="Recorded in summary.json.",
                                            show_default=False)] = None,
    full: Annotated[bool, typer.Option("--full", help="Compute every run set again, not only those changed since the last aggregate.")] = False,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    from ..forgeloop.contract import TIERS

    check_choice("--tier", tier, TIERS)
    set_quiet(quiet or json)
    store = open_warehouse(warehouse, writing=True)
    if out is not None:
        check_utf8_path(out, "--out")
        refuse_inside_warehouse("--out", out, store.root, inside_aggregate, AGGREGATE_HINT)
    from ..storage.catalog import refresh_catalog
    from ..forgeloop.stage import aggregate, check, compute, publish

    destination = out or store.root / "aggregate"
    if run_set is not None:
        result = compute(store, run_set, tier, rendered=True)  # reads whole table versions: needs no lock
        with store.lock(wait=wait, command="aggregate"):
            publish(store, result, destination, run_set)
            refresh_catalog(store)
    else:
        check(store, tier)  # a failed aggregate creates no warehouse
        with store.lock(wait=wait, command="aggregate"):
            result = aggregate(store, destination, tier, full)
            refresh_catalog(store)
    if json:
        print_json(result.as_dict(), 2)
    else:
        print_aggregated(result, destination)
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
            f"claims allowed: {'yes' if docs.summary['claimsAllowed'] else 'no'} -> {destination / docs.run_set_id}"
        )
    if len(result.documents) > SHOWN_RUN_SETS:
        print_fitted(f"... {len(result.documents)} run sets computed, {len(result.written)} documents -> {destination}")
    plan = result.plan
    if plan is not None and (plan.kept or plan.removed or not result.documents):
        removed = f"; rows of {len(plan.removed)} run sets no longer ingested dropped" if plan.removed else ""
        computed = len(result.documents)
        print_fitted(f"{computed} run set{'' if computed == 1 else 's'} computed, {len(plan.kept)} unchanged since the last aggregate"
              f"{removed} -> {destination} (--full computes all again)")


AGGREGATE_HINT = "inside it, documents go under its aggregate/ folder (the default); or write them outside it"


def inside_aggregate(relative: Path) -> bool:
    """Inside the warehouse, documents go under aggregate/ (the default --out) and nowhere else."""
    return relative.parts[:1] == ("aggregate",)


def _report(name: str, run_set: Optional[str], warehouse: Optional[Path], json: bool) -> int:
    store = open_warehouse(warehouse)
    from ..forgeloop.reports import FRAMES_USED, REPORTS
    from ..forgeloop.stored import expected_profiles, stored_result

    profiles = expected_profiles(store)
    # what the last aggregate stored, while current; else the runs analysed again (DuckDB and all)
    result = stored_result(store, run_set, FRAMES_USED[name], profiles)
    if result is None:
        from ..forgeloop.stage import compute

        result = compute(store, run_set, profiles=profiles)
    scenario_ids = sorted(profiles)
    if not scenario_ids:
        note("note: no scenario files were ingested (ingest forgeloop --scenarios DIR): the report has no scenarios")
    build, render, indent = REPORTS[name]
    report = build(result, scenario_ids)
    if json:
        print_json(report, indent)
    else:
        render(report, stdout_console(250))
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
    "No network is needed to view it: a section per run set, then the Forge charts.",
    example="loopmeter report html\nloopmeter report html --out ~/report.html"))
@command
def report_html(
    out: Annotated[Optional[Path], typer.Option("--out", help="The HTML file to write (default: report.html in the "
                                                "warehouse, where demo and run-all write it).")] = None,
    run_set: RunSetOption = None,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
) -> int:
    store = open_warehouse(warehouse)
    out = store.root / "report.html" if out is None else out
    check_utf8_path(out, "--out")
    # the warehouse's own page (demo and run-all write it there) may be written again; nothing else inside
    refuse_inside_warehouse("--out", out, store.root, lambda relative: relative == Path("report.html"),
                            "inside it, only its own report.html (where demo and run-all write the page); or write it outside")
    if out.is_dir():
        raise LoopmeterError(f"--out {out} is a directory; give the HTML file to write (e.g. {out / 'report.html'})")
    if out.name in ("", ".", ".."):
        raise LoopmeterError(f"--out {out}: give the HTML file to write (e.g. report.html)")
    from ..forge.tables import TASKS

    if not store.has_table("runs") and not store.has_table(TASKS):
        raise LoopmeterError(f"no ForgeLoop runs and no Forge data in {store.root}; run `loopmeter ingest forgeloop "
                             "RESULTS` or `loopmeter ingest forge STORE` first (is --warehouse right?)")
    from ..html import build_page
    from ..storage.files import write_output

    page = build_page(store, run_set)
    write_output(out, lambda path: path.write_text(page, encoding="utf-8"))
    if not quiet:
        print(f"wrote {out.resolve()}")
    return Exit.OK
