"""The `loopmeter` command: a thin shell over functions users can also import.

Each area registers its commands on the groups below from its module in
`pipeline/commands/`. Nothing here imports polars, DuckDB or pyarrow, so `--help` and
argument errors answer at once.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .commands.common import COMMON, JsonOption, QuietOption, WaitOption, WarehouseOption
from .commands.helptext import command_help, exit_codes_table

TOP_HELP = (
    "Turn AI coding-agent telemetry (ForgeLoop benchmark runs, Forge event stores) into numbers people trust.\n\n"
    "The common options --warehouse, --quiet, --json and --wait go before the command or after it."
)
TOP_EPILOG = (
    "\b\nExamples:\n  loopmeter demo\n  loopmeter --warehouse ~/lm report tail\n  loopmeter report tail -h\n\n"
    "Exit codes: 0 done, 1 failed (nothing changed), 2 wrong command line, 3 some inputs rejected (the rest "
    "stored), 4 warehouse locked by another writer, 5 compare found a regression (--fail-on regression), "
    "130 interrupted, 141 the reader of the output left; "
    "each command's -h lists those it can end with, and `loopmeter help exit-codes` says more."
)

app = typer.Typer(
    name="loopmeter",
    help=TOP_HELP,
    epilog=TOP_EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _group(summary: str, example: str) -> typer.Typer:
    return typer.Typer(help=summary, short_help=summary, epilog=f"\b\nExample:\n  {example}", no_args_is_help=True)


ingest_app = _group("Read raw telemetry into the warehouse.", "loopmeter ingest forgeloop ~/forgeloop/results")
report_app = _group("Print a report from the warehouse (tables, or --json).", "loopmeter report tail --run-set RUN_SET")
harvest_app = _group("Collect outcomes from outside sources (git).", "loopmeter harvest survival --dry-run")
app.add_typer(ingest_app, name="ingest")
app.add_typer(report_app, name="report")
app.add_typer(harvest_app, name="harvest")


def _remember(ctx: typer.Context, warehouse: Optional[Path], quiet: bool, json: bool, wait: bool) -> None:
    """Keep the common options given before the command, for `common.command` to apply: the
    context's `meta` is shared with the command's context."""
    given = ctx.meta.setdefault(COMMON, {})
    if warehouse is not None:
        given["warehouse"] = warehouse
    for name, value in (("quiet", quiet), ("json", json), ("wait", wait)):
        if value:
            given[name] = True


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

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
    from .commands import common

    common.DEBUG = debug
    _remember(ctx, warehouse, quiet, json, wait)


def _group_options(ctx: typer.Context, warehouse: WarehouseOption = None, quiet: QuietOption = False,
                   json: JsonOption = False, wait: WaitOption = False) -> None:
    _remember(ctx, warehouse, quiet, json, wait)


for _group_app in (ingest_app, report_app, harvest_app):
    _group_app.callback()(_group_options)


@app.command("help", **command_help(
    "Help on a command, or on the exit codes.",
    "`loopmeter help COMMAND...` is `loopmeter COMMAND... --help`.",
    example="loopmeter help exit-codes\nloopmeter help report tail"))
def help_command(
    ctx: typer.Context,
    topic: Annotated[Optional[list[str]], typer.Argument(metavar="[exit-codes | COMMAND...]", show_default=False,
                                                         help="exit-codes, or a command (e.g. report tail).")] = None,
) -> None:
    from typer._click.core import Context
    from typer._click.exceptions import UsageError
    from typer.core import TyperGroup

    if topic == ["exit-codes"]:
        sys.stdout.write(exit_codes_table())
        return
    context = ctx.find_root()
    command = context.command
    for depth, name in enumerate(topic or []):
        found = command.get_command(context, name) if isinstance(command, TyperGroup) else None
        if found is None:
            shown = " ".join((topic or [])[:depth + 1])
            raise UsageError(f"no command `loopmeter {shown}`; `loopmeter --help` lists the commands, "
                             "`loopmeter help exit-codes` the exit codes")
        context = Context(found, info_name=name, parent=context)
        command = found
    print(command.get_help(context))


def _register() -> None:
    # each module registers its commands on the groups above
    from .commands import check, demo, execute, forge, forgeloop, query, statistics  # noqa: F401


_register()


def main(restore_interrupt: bool = False) -> None:
    """Run the command. A wrong command line is one line too, as every other error
    (`loopmeter: error: ...`, exit 2), not click's usage block. Once the command has ended,
    Ctrl-C is ignored: its work is done, and the interpreter's exit would end killed by SIGINT,
    without a word. `restore_interrupt`: give Ctrl-C back its default handler (KeyboardInterrupt)
    once inside the handling below (`entry.py` answers it until then)."""
    import signal
    import sys

    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

    try:
        if restore_interrupt:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        code = app(standalone_mode=False, prog_name="loopmeter")
    except NoArgsIsHelpError as error:  # `loopmeter` or a group alone: its help
        error.show()
        code = error.exit_code
    except UsageError as error:
        where = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
        print(f"loopmeter: error: {error.format_message().rstrip('.')}{where}", file=sys.stderr)
        code = error.exit_code
    except ClickException as error:
        print(f"loopmeter: error: {error.format_message()}", file=sys.stderr)
        code = error.exit_code
    except typer.Abort:
        print("loopmeter: aborted", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:  # between the command and the exit
        code = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = code if isinstance(code, int) else 0
    if code == 130:
        import os

        from .commands import common

        if not common.INTERRUPT_REPORTED:  # typer took the Ctrl-C, outside the command's own answer
            print(f"loopmeter: {common.interrupted_message()}", file=sys.stderr)
        # interrupted: end now, without the exit's joins of pool threads a Ctrl-C may have left waiting
        # (the warehouse lock and scratch space were let go as the command unwound; workers end with us)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(130)
    # done: what the command made is left out of the collections the interpreter's exit runs, which
    # would walk every object of polars, DuckDB and pyarrow again (0.05 to 0.08 s a command)
    import gc

    gc.freeze()
    sys.exit(code)
