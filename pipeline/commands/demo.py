"""`loopmeter demo`: the README's first command."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..cli import app
from ..errors import Exit
from .common import QuietOption, WarehouseOption, command, open_warehouse, set_quiet


@app.command("demo", help="Make the sample data in data/ (deterministic), run every stage on it, show the key tables.")
@command
def demo_command(
    data: Annotated[Path, typer.Option("--data", help="Where the sample data goes.")] = Path("data"),
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
) -> int:
    set_quiet(quiet)
    from rich.console import Console

    from ..demo import SAMPLE_PLANS, run_demo
    from ..forgeloop.reports import render_tail, tail_report
    from ..forgeloop.stage import expected_profiles

    store = open_warehouse(warehouse)
    outcome = run_demo(data, store)
    console = Console(width=None if sys.stdout.isatty() else 200)
    for step in outcome.steps:
        console.print(f"[green]✓[/green] {step}")
    tail = tail_report(outcome.result, sorted(expected_profiles(store)))
    biggest = SAMPLE_PLANS[0][0]  # the tail-tier run set: the one with enough pairs to judge tails
    tail["runSets"] = [run_set for run_set in tail["runSets"] if run_set["runSetId"] == biggest]
    render_tail(tail, console)
    for text in outcome.texts:
        console.print(text, markup=False, highlight=False)
    console.print(f"\nsample data:  {outcome.sample}")
    console.print(f"warehouse:    {outcome.warehouse}  (Parquet tables, loopmeter.duckdb)")
    console.print(f"aggregates:   {outcome.aggregate}")
    console.print(f"HTML report:  {outcome.report}  (open it in a browser)")
    console.print("next: loopmeter report summary | outliers | tail | regression   (add --json for JSON)")
    return Exit.OK
