"""What every command shares: options, the way errors end a command, output helpers."""
from __future__ import annotations

import functools
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from ..errors import Exit, LoopmeterError

WarehouseOption = Annotated[
    Optional[Path],
    typer.Option(
        "--warehouse",
        help="Warehouse directory (else $LOOPMETER_WAREHOUSE, else data/warehouse).",
        show_default=False,
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or chatter.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
WaitOption = Annotated[bool, typer.Option("--wait", help="Wait for another writer's lock instead of leaving.")]

DEBUG = False


def open_warehouse(option: Optional[Path]):
    from ..config import warehouse_dir
    from ..warehouse import Warehouse

    return Warehouse(warehouse_dir(option))


def set_quiet(quiet: bool) -> None:
    from .. import progress

    progress.QUIET = quiet


def command(function: Callable) -> Callable:
    """Run a command body: a LoopmeterError ends it with its one-line message and exit code;
    any other error too, with the traceback only under --debug (or LOOPMETER_DEBUG=1)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            code = function(*args, **kwargs)
        except typer.Exit:
            raise
        except LoopmeterError as error:
            if DEBUG or os.environ.get("LOOPMETER_DEBUG"):
                traceback.print_exc()
            print(f"loopmeter: error: {error}", file=sys.stderr)
            raise typer.Exit(int(error.exit_code)) from None
        except KeyboardInterrupt:
            print("loopmeter: interrupted; the warehouse keeps its previous tables", file=sys.stderr)
            raise typer.Exit(130) from None
        except Exception as error:  # noqa: BLE001 - the last line of defence of a CLI
            if DEBUG or os.environ.get("LOOPMETER_DEBUG"):
                traceback.print_exc()
            print(f"loopmeter: error: {type(error).__name__}: {error} (rerun with --debug for the traceback)", file=sys.stderr)
            raise typer.Exit(int(Exit.FATAL)) from None
        raise typer.Exit(int(code or 0))

    return wrapper


def print_json(value: Any, indent: int | None = None) -> None:
    from ..jsjson import dumps

    sys.stdout.write(dumps(value, indent) + "\n")


SHOWN_REJECTIONS = 20


def print_rejections(lines: list[str], total: int, table: str) -> None:
    """The first rejections, one line each, on stderr; the rest counted, and where to find them."""
    for line in lines[:SHOWN_REJECTIONS]:
        print(line, file=sys.stderr)
    if total > SHOWN_REJECTIONS:
        print(f"... and {total - SHOWN_REJECTIONS} more (all in the {table} table, or --json)", file=sys.stderr)


def note(message: str) -> None:
    """A line of chatter on stderr, unless --quiet."""
    from .. import progress

    if not progress.QUIET:
        print(message, file=sys.stderr)
