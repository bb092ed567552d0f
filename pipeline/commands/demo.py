"""`loopmeter demo` (the README's first command) and `loopmeter run-all` (every stage on real data)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import Exit, shown_path
from ..operations.forge import MAX_HORIZON_DAYS
from .apps import app
from .common import BucketRunsOption, JsonOption, QuietOption, SparkMasterOption, WaitOption, WarehouseOption, \
    WorkersOption, command, note, path_argument, path_option, print_json, set_quiet, stdout_console
from .helptext import TIER_METAVAR, command_help

RunAllEngineOption = Annotated[str, typer.Option("--engine", metavar="[local|pool|spark]",
                                                 help="Who reads the ForgeLoop run files, computes the aggregate's "
                                                      "buckets and the Forge summaries' parts: this machine's processes, "
                                                      "a pool of --workers worker processes, or Spark (docs/scale.md).")]


def _show(outcome, shown_steps: bool) -> None:
    """What the demo or run-all did, for people: each stage's line (unless shown as it ended), the tail
    report, the Forge reports, and where everything is."""
    from ..forgeloop.reports import render_tail
    from ..operations import forgeloop_report
    from ..operations.everything import SAMPLE_PLANS
    from rich.markup import escape

    console = stdout_console(200)
    if not shown_steps:
        for step in outcome.steps:
            console.print(f"[green]✓[/green] {escape(step)}")
    for line in outcome.notes:
        note(line)
    if outcome.forgeloop is not None:
        tail = forgeloop_report("tail", warehouse=outcome.warehouse).document
        if outcome.sample is not None:  # the demo shows its tail-tier run set, the one with enough pairs to judge tails
            tail["runSets"] = [run_set for run_set in tail["runSets"] if run_set["runSetId"] == SAMPLE_PLANS[0][0]]
        render_tail(tail, console)
    for text in outcome.texts:
        console.print(text, markup=False, highlight=False)
    if outcome.sample is not None:
        console.print(f"\nsample data:  {shown_path(outcome.sample)}", markup=False, highlight=False)
    from ..storage.remote import is_mirror

    kept = "Parquet tables" if is_mirror(outcome.warehouse) else "Parquet tables, loopmeter.duckdb"  # none on object storage
    console.print(f"warehouse:    {shown_path(outcome.warehouse)}  ({kept})", markup=False, highlight=False)
    if outcome.forgeloop is not None:
        console.print(f"aggregates:   {shown_path(outcome.aggregate)}", markup=False, highlight=False)
    if outcome.report is not None:
        console.print(f"HTML report:  {shown_path(outcome.report)}  (open it in a browser)", markup=False, highlight=False)
    console.print("next: loopmeter report summary | outliers | tail | regression | confidence\n"
                  "      loopmeter report routing | srm | survival\n"
                  "      loopmeter compare RUN_SET RUN_SET   (each with --json for JSON)")


@app.command("demo", **command_help(
    "Run every stage on sample data and show the key tables.",
    "The sample data (ForgeLoop run sets, a Forge store with small git repositories) is made once in "
    "--data, deterministically.",
    example="loopmeter demo\nloopmeter demo --data /tmp/lm-data --warehouse /tmp/lm-warehouse",
    codes=(Exit.BUSY,)))
@command
def demo_command(
    data: Annotated[Path, path_option("--data", help="Where the sample data goes.")] = Path("data"),
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet or json)
    from ..operations import demo

    live = _live_steps(quiet or json)
    outcome = demo(data, warehouse=warehouse, wait=wait, on_step=live)
    if json:
        print_json(outcome.as_dict(), 2)
    else:
        _show(outcome, live is not _silent)
    return Exit.OK


def _silent(line: str) -> None:
    pass


def _live_steps(quiet: bool):
    """Each stage's line printed as the stage ends (on stdout, as the rest of the summary), unless quiet."""
    if quiet:
        return _silent
    from rich.markup import escape

    console = stdout_console(200)
    return lambda line: console.print(f"[green]✓[/green] {escape(line)}")


@app.command("run-all", **command_help(
    "Run every stage on real data.",
    "ingest forgeloop and aggregate, ingest forge, report routing, harvest survival, report survival, the "
    "catalog and the HTML report.",
    example="loopmeter run-all results --scenarios scenarios --forge dataset.sqlite",
    codes=(Exit.REJECTED, Exit.BUSY)))
@command
def run_all_command(
    results: Annotated[Optional[Path], path_argument(metavar="[RESULTS]", help="ForgeLoop results directory (holds raw/).",
                                                      show_default=False)] = None,
    scenarios: Annotated[Optional[Path], path_option("--scenarios", help="ForgeLoop scenario files.")] = None,
    forge: Annotated[Optional[Path], path_option("--forge", help="Forge store: dataset.sqlite or a .jsonl export.")] = None,
    out: Annotated[Optional[Path], path_option("--out", help="Where ForgeLoop documents go (default: <warehouse>/aggregate).")] = None,
    tier: Annotated[Optional[str], typer.Option("--tier", metavar=TIER_METAVAR, help="Recorded in summary.json.",
                                                        show_default=False)] = None,
    horizon_days: Annotated[Optional[list[int]], typer.Option(
        "--horizon-days", help="Survival horizon, days (repeatable: one harvest measures each; default 14).", min=0,
        max=MAX_HORIZON_DAYS, show_default=False)] = None,
    include_temp: Annotated[bool, typer.Option("--include-temp", help="Also harvest repositories under the temporary directory.")] = False,
    engine: RunAllEngineOption = "local",
    spark_master: SparkMasterOption = None,
    workers: WorkersOption = None,
    bucket_runs: BucketRunsOption = 20_000,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet or json)
    from ..operations import run_all

    live = _live_steps(quiet or json)
    outcome = run_all(results, scenarios=scenarios, forge=forge, warehouse=warehouse, out=out, tier=tier,
                      horizon_days=horizon_days or [14], include_temp=include_temp, engine=engine, workers=workers,
                      bucket_runs=bucket_runs, spark_master=spark_master, wait=wait, on_step=live)
    if json:
        print_json(outcome.as_dict(), 2)
    else:
        _show(outcome, live is not _silent)
    if outcome.rejected or outcome.unharvested:
        print(f"loopmeter: {outcome.rejected} inputs rejected, {outcome.unharvested} survival measurements pending a retry; "
              "the rest is stored", file=sys.stderr)
        return Exit.REJECTED
    return Exit.OK
