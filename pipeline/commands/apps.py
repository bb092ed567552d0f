"""The `loopmeter` program and its groups (`ingest`, `report`, `harvest`), on which each command
module registers its commands. Nothing here imports polars, DuckDB or pyarrow, so `--help` and a
wrong command line answer at once."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import COMMON, JsonOption, QuietOption, WaitOption, WarehouseOption

TOP_HELP = (
    "Turn AI coding-agent telemetry (ForgeLoop benchmark runs, Forge event stores) into numbers people trust.\n\n"
    "The common options --warehouse, --quiet, --json and --wait go before the command or after it."
)
TOP_EPILOG = (
    "\b\nExamples:\n  loopmeter demo\n  loopmeter --warehouse ~/lm report tail\n  loopmeter report tail -h\n\n"
    "Exit codes: 0 done, 1 failed (nothing changed), 2 wrong command line, 3 some inputs rejected (the rest "
    "stored), 4 warehouse locked by another writer, 5 compare --fail-on met (a regressed, inconclusive or "
    "underpowered row), "
    "130 interrupted, 141 the reader of the output left, 143 terminated (SIGTERM); "
    "each command's -h lists those it can end with, and `loopmeter help exit-codes` says more."
)

app = typer.Typer(
    name="loopmeter",
    help=TOP_HELP,
    epilog=TOP_EPILOG,
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _group(summary: str, example: str) -> typer.Typer:
    return typer.Typer(help=summary, short_help=summary, epilog=f"\b\nExample:\n  {example}", invoke_without_command=True)


ingest_app = _group("Read raw telemetry into the warehouse.", "loopmeter ingest forgeloop ~/forgeloop/results")
report_app = _group("Print a report from the warehouse (tables, or --json).", "loopmeter report tail --run-set RUN_SET")
harvest_app = _group("Collect outcomes from outside sources (git).", "loopmeter harvest survival --dry-run")
app.add_typer(ingest_app, name="ingest")
app.add_typer(report_app, name="report")
app.add_typer(harvest_app, name="harvest")


def _remember(ctx: typer.Context, warehouse: Optional[Path], quiet: bool, json: bool, wait: bool) -> None:
    """Keep the common options given before the command, for `common.command` to apply: the context's
    `meta` is shared with the command's context."""
    given = ctx.meta.setdefault(COMMON, {})
    if warehouse is not None:
        given["warehouse"] = warehouse
    for name, value in (("quiet", quiet), ("json", json), ("wait", wait)):
        if value:
            given[name] = True


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"loopmeter {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    ctx: typer.Context,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
    wait: WaitOption = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print loopmeter's version and exit.", is_eager=True,
                                          callback=_print_version)] = False,
) -> None:
    from . import common

    common.DEBUG = debug
    _remember(ctx, warehouse, quiet, json, wait)
    _help_without_command(ctx)


def _group_options(ctx: typer.Context, warehouse: WarehouseOption = None, quiet: QuietOption = False,
                   json: JsonOption = False, wait: WaitOption = False) -> None:
    _remember(ctx, warehouse, quiet, json, wait)
    _help_without_command(ctx)


def _help_without_command(ctx: typer.Context) -> None:
    """`loopmeter` or a group named without a command: its help on stderr, exit 2 (a command was expected)."""
    if ctx.invoked_subcommand is None and not ctx.resilient_parsing:
        sys.stderr.write(ctx.get_help() + "\n")
        raise typer.Exit(2)


for _group_app in (ingest_app, report_app, harvest_app):
    _group_app.callback()(_group_options)
