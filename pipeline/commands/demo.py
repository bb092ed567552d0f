"""`loopmeter demo` (the README's first command) and `loopmeter run-all` (every stage on real data)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..cli import app
from ..errors import Exit
from .common import (
    JsonOption, QuietOption, WaitOption, WarehouseOption, check_choice, check_utf8_path, command, note, open_warehouse,
    print_json, refuse_inside_warehouse, set_quiet, stdout_console,
)
from .forge import MAX_HORIZON_DAYS
from .helptext import TIER_METAVAR, command_help


def _as_json(outcome, data: Path | None) -> dict:
    return {
        "steps": outcome.steps,
        "sample": None if data is None else str(_sample(data)),
        "warehouse": str(outcome.warehouse),
        "aggregate": None if outcome.forgeloop is None else str(outcome.aggregate),  # no ForgeLoop data: none written
        "report": str(outcome.report),
        "rejected": outcome.rejected,
        "unharvested": outcome.unharvested,
        "notes": outcome.notes,
    }


def _sample(data: Path) -> Path:
    """The sample data's folder, absolute as every other path the demo names."""
    return (data / "sample").expanduser().resolve()


def _show(outcome, store, data: Path | None) -> None:
    from ..demo import SAMPLE_PLANS
    from ..forgeloop.reports import render_tail, tail_report
    from ..forgeloop.stage import expected_profiles

    console = stdout_console(200)
    for step in outcome.steps:
        console.print(f"[green]✓[/green] {step}")
    for line in outcome.notes:
        note(line)
    if outcome.forgeloop is not None:
        tail = tail_report(outcome.forgeloop, sorted(expected_profiles(store)))
        if data is not None:  # the demo shows its tail-tier run set, the one with enough pairs to judge tails
            tail["runSets"] = [run_set for run_set in tail["runSets"] if run_set["runSetId"] == SAMPLE_PLANS[0][0]]
        render_tail(tail, console)
    for text in outcome.texts:
        console.print(text, markup=False, highlight=False)
    if data is not None:
        console.print(f"\nsample data:  {_sample(data)}")
    console.print(f"warehouse:    {outcome.warehouse}  (Parquet tables, loopmeter.duckdb)")
    if outcome.forgeloop is not None:
        console.print(f"aggregates:   {outcome.aggregate}")
    console.print(f"HTML report:  {outcome.report}  (open it in a browser)")
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
    data: Annotated[Path, typer.Option("--data", help="Where the sample data goes.")] = Path("data"),
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet or json)
    from ..demo import run_demo

    store = open_warehouse(warehouse, writing=True)
    outcome = run_demo(data, store, wait=wait)
    if json:
        print_json(_as_json(outcome, data), 2)
    else:
        _show(outcome, store, data)
    return Exit.OK


@app.command("run-all", **command_help(
    "Run every stage on real data.",
    "ingest forgeloop and aggregate, ingest forge, report routing, harvest survival, report survival, the "
    "catalog and the HTML report.",
    example="loopmeter run-all results --scenarios scenarios --forge dataset.sqlite",
    codes=(Exit.REJECTED, Exit.BUSY)))
@command
def run_all_command(
    results: Annotated[Optional[Path], typer.Argument(metavar="[RESULTS]", help="ForgeLoop results directory (holds raw/).",
                                                      show_default=False)] = None,
    scenarios: Annotated[Optional[Path], typer.Option("--scenarios", help="ForgeLoop scenario files.")] = None,
    forge: Annotated[Optional[Path], typer.Option("--forge", help="Forge store: dataset.sqlite or a .jsonl export.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Where ForgeLoop documents go (default: <warehouse>/aggregate).")] = None,
    tier: Annotated[Optional[str], typer.Option("--tier", metavar=TIER_METAVAR, help="Recorded in summary.json.",
                                                        show_default=False)] = None,
    horizon_days: Annotated[Optional[list[int]], typer.Option(
        "--horizon-days", help="Survival horizon, days (repeatable: one harvest measures each; default 14).", min=0,
        max=MAX_HORIZON_DAYS, show_default=False)] = None,
    include_temp: Annotated[bool, typer.Option("--include-temp", help="Also harvest repositories under the temporary directory.")] = False,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    from ..errors import LoopmeterError
    from ..forgeloop.contract import TIERS
    from .forgeloop import AGGREGATE_HINT, inside_aggregate

    if results is None and forge is None:
        raise LoopmeterError("give RESULTS (ForgeLoop), --forge STORE (Forge), or both", Exit.USAGE)
    check_choice("--tier", tier, TIERS)
    for path, what in ((results, "RESULTS"), (scenarios, "--scenarios"), (forge, "--forge"), (out, "--out")):
        check_utf8_path(path, what)
    set_quiet(quiet or json)
    store = open_warehouse(warehouse, writing=True)
    if out is not None:
        refuse_inside_warehouse("--out", out, store.root, inside_aggregate, AGGREGATE_HINT)
    from ..stages import run_all

    outcome = run_all(store, results=results, scenarios=scenarios, forge_store=forge, out=out, tier=tier,
                      horizon_days=horizon_days or [14], include_temp=include_temp, wait=wait)
    if json:
        print_json(_as_json(outcome, None), 2)
    else:
        _show(outcome, store, None)
    if outcome.rejected or outcome.unharvested:
        print(f"loopmeter: {outcome.rejected} inputs rejected, {outcome.unharvested} survival measurements pending a retry; "
              "the rest is stored", file=sys.stderr)
        return Exit.REJECTED
    return Exit.OK
