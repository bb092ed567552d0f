"""The `loopmeter` command: a thin shell over the operations users can also import
(`loopmeter.operations`).

Each area registers its commands on the program and its groups (`commands/apps.py`) from its
module in `pipeline/commands/`. Nothing here imports polars, DuckDB or pyarrow, so `--help` and
argument errors answer at once.
"""
from __future__ import annotations

import functools
import sys
from typing import Annotated, Optional

import typer

from .commands.apps import app
from .commands.helptext import command_help, exit_codes_table


@app.command("help", **command_help(
    "Help on a command, or on the exit codes.",
    "`loopmeter help COMMAND...` is `loopmeter COMMAND... --help`.",
    example="loopmeter help exit-codes\nloopmeter help report tail"))
def help_command(
    ctx: typer.Context,
    topic: Annotated[Optional[list[str]], typer.Argument(metavar="[exit-codes | COMMAND...]", show_default=False,
                                                         help="exit-codes, or a command (e.g. report tail).")] = None,
) -> None:
    from typer.core import TyperGroup

    if topic == ["exit-codes"]:
        from .tables_text import stdout_width

        sys.stdout.write(exit_codes_table(stdout_width()))
        return
    context = ctx.find_root()
    command = context.command
    for depth, name in enumerate(topic or []):
        found = command.get_command(context, name) if isinstance(command, TyperGroup) else None
        if found is None:
            shown = " ".join((topic or [])[:depth + 1])
            print(f"loopmeter: error: no command `loopmeter {shown}`; `loopmeter --help` lists the commands, "
                  "`loopmeter help exit-codes` the exit codes", file=sys.stderr)
            raise typer.Exit(2)
        context = typer.Context(found, info_name=name, parent=context)
        command = found
    print(command.get_help(context))


def _register() -> None:
    # each module registers its commands on the groups above
    from .commands import check, demo, execute, forge, forgeloop, query, statistics  # noqa: F401


_register()


@functools.cache
def program() -> "typer.core.TyperGroup":
    """The click command the program is, made from the registered commands once per process (typer
    would make it again at each call: about 13 ms of reading signatures)."""
    return typer.main.get_command(app)


def run(args: list[str] | None = None) -> int:
    """Run the command line `args` (default: the process's own) and return its exit code: what the
    program does, without ending the process (tests run commands this way, in their own process).
    A wrong command line is one line, as every other error (`loopmeter: error: ...`, exit 2), not
    click's usage block."""
    import sys

    from . import interrupts
    from .commands import common

    common.INTERRUPT_REPORTED = False
    interrupts.forget()
    try:
        code = program().main(args=args, standalone_mode=False, prog_name="loopmeter")
    except typer.TyperException as error:  # the command line's own errors (typer's public base class of them)
        code = getattr(error, "exit_code", 2)
        message = error.format_message() if hasattr(error, "format_message") else str(error)
        context = getattr(error, "ctx", None)
        where = f" (see '{context.command_path} --help')" if code == 2 and context is not None else ""
        print(f"loopmeter: error: {message.rstrip('.')}{where}", file=sys.stderr)
    except typer.Abort:
        print("loopmeter: aborted", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:  # between the command and its end
        code = interrupts.exit_code()
    code = code if isinstance(code, int) else 0
    if code == 130 and interrupts.TERMINATED:  # typer's own answer to the KeyboardInterrupt SIGTERM raised
        code = interrupts.exit_code()
    if code == interrupts.exit_code():  # told here when typer took the Ctrl-C, outside the command's own answer
        common.tell_interruption()
    return code


def main(restore_interrupt: bool = False, answer_sigterm: bool = False) -> None:
    """The `loopmeter` program: `run`, then the process's end. Once the command has ended, Ctrl-C is
    ignored: its work is done, and the interpreter's exit would end killed by SIGINT, without a word.
    `restore_interrupt`: give Ctrl-C back a handler raising KeyboardInterrupt first (`interrupts.answer`;
    `entry.py` answers it until then); `answer_sigterm`: answer SIGTERM the same way (`entry.py` found
    it at its default)."""
    import gc
    import os
    import signal
    import sys

    from . import interrupts

    try:
        if restore_interrupt or answer_sigterm:
            interrupts.answer(sigint=restore_interrupt, sigterm=answer_sigterm)
        code = run()
    except KeyboardInterrupt:  # between the handler's return and here
        code = interrupts.exit_code()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if signal.getsignal(signal.SIGTERM) is interrupts.answering_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the work is done: SIGTERM now ends the process at once
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code == interrupts.exit_code():
        # interrupted: end now, without the exit's joins of pool threads a Ctrl-C may have left waiting
        # (the warehouse lock and scratch space were let go as the command unwound; workers end with us)
        os._exit(code)
    import threading

    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.main_thread()):
        # a thread the command did not start and cannot end (a Python adapter's) would hold the exit for ever
        os._exit(code)
    # done: what the command made is left out of the collections the interpreter's exit runs
    gc.freeze()
    sys.exit(code)
