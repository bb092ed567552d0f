"""The `loopmeter` command: a thin shell over functions users can also import.

Each area registers its commands on the groups below from its module in
`pipeline/commands/`. Nothing here imports polars, DuckDB or pyarrow, so `--help` and
argument errors answer at once.
"""
from __future__ import annotations

from typing import Annotated

import typer

from .errors import EXIT_CODES_HELP

app = typer.Typer(
    name="loopmeter",
    help="Turn AI coding-agent telemetry (ForgeLoop benchmark runs, Forge event stores) into numbers "
    "people trust. " + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
ingest_app = typer.Typer(help="Read raw telemetry into the warehouse. " + EXIT_CODES_HELP, no_args_is_help=True)
report_app = typer.Typer(help="Print a report from the warehouse (tables, or --json). " + EXIT_CODES_HELP, no_args_is_help=True)
harvest_app = typer.Typer(help="Collect outcomes from outside sources (git). " + EXIT_CODES_HELP, no_args_is_help=True)
app.add_typer(ingest_app, name="ingest")
app.add_typer(report_app, name="report")
app.add_typer(harvest_app, name="harvest")


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
) -> None:
    from .commands import common

    common.DEBUG = debug


def _register() -> None:
    # each module registers its commands on the groups above
    from .commands import check, demo, execute, forge, forgeloop, query  # noqa: F401


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
    sys.exit(code)
