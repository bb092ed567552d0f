"""What every command shares: options, the way errors end a command, output helpers."""
from __future__ import annotations

import errno
import functools
import os
import sys
import traceback
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

if TYPE_CHECKING:
    from pathlib import Path

from ..errors import Exit, LoopmeterError, is_interruption, one_line, printable, usage_error

WarehouseOption = Annotated[
    Optional[str],  # text as given: a URL's `//`, `.` and `..` are its own (a Path would fold them away)
    typer.Option(
        "--warehouse", metavar="<path>",
        help="Warehouse directory (else $LOOPMETER_WAREHOUSE, else data/warehouse).",
        show_default=False,
    ),
]


def path(text: str | os.PathLike) -> "Path":
    """A path option's or argument's value: refused when empty (a Path of "" is ".", the working
    directory: an unset shell variable would otherwise name it) or a URL (as a Path, `s3://b/x` is
    `s3:/b/x`, a folder `s3:` here; only --warehouse may be on object storage)."""
    from pathlib import Path

    from ..errors import shown_path, starts_as_url, without_credentials

    if os.fspath(text) == "":
        raise typer.BadParameter("is empty; give a path (`.` for the working directory)")
    if isinstance(text, str) and starts_as_url(text):
        raise typer.BadParameter(f"{without_credentials(shown_path(text))} is a URL; a local path is wanted here "
                                 "(only --warehouse may be s3://bucket/prefix; an absolute path, /.../s3:..., for a "
                                 "local folder of that name)")
    return Path(text)


def path_option(*names: str, **options: Any) -> Any:
    """A path option: its text through `path`, shown in --help as <path>."""
    return typer.Option(*names, parser=path, metavar="<path>", **options)


def path_argument(**options: Any) -> Any:
    """A path argument: its text through `path`."""
    return typer.Argument(parser=path, **options)


QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or chatter.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
WaitOption = Annotated[bool, typer.Option("--wait", help="Wait for another writer's lock instead of leaving.")]

COMMON = "loopmeter.common"  # the click context's `meta` key of the common options given before the command

DEBUG = False
INTERRUPT_REPORTED = False  # a command's Ctrl-C was answered with its message


def interrupted_message() -> str:
    """What an interruption (Ctrl-C, or SIGTERM) left: every table is replaced atomically, the set of them
    is not."""
    from ..interrupts import TERMINATED
    from ..operations.common import replaced_tables

    from ..storage.remote import PUBLISHED

    how = "terminated (SIGTERM)" if TERMINATED else "interrupted"
    if PUBLISHED:  # the mirror's links say nothing of what object storage holds
        return f"{how} once its new state was published: {', '.join(PUBLISHED)} holds this command's tables"
    replaced = replaced_tables()
    if not replaced:
        return f"{how}; no table was replaced: the warehouse keeps its previous tables"
    shown = ", ".join(replaced[:8]) + (f" and {len(replaced) - 8} more" if len(replaced) > 8 else "")
    return (f"{how}; tables already replaced keep their new version ({shown}), the others their previous one; "
            "run the command again to finish")


def stdout_console(width_when_piped: int, **options: Any):
    """A rich Console on stdout whose broken pipe ends the command as `command` ends it (rich's
    own way exits 1 with no word), as wide as `tables_text.output_width` says (`COLUMNS`, else the
    terminal's width), else `width_when_piped` (a pipe or a file: tables printed whole)."""
    import errno

    from rich.console import Console

    from ..tables_text import output_width

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    terminal = sys.stdout.isatty()
    try:
        columns = os.get_terminal_size(sys.stdout.fileno()).columns if terminal else None
    except (OSError, ValueError):
        columns = None
    return _Console(width=output_width(terminal, columns) or width_when_piped, **options)


def _stdout_broken() -> bool:
    """Whether stdout is a pipe (or socket) nobody reads any more."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush finds no broken pipe to complain about."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def set_quiet(quiet: bool) -> None:
    from .. import progress

    progress.QUIET = quiet


# how `aggregate` (and `run-all`'s aggregate) computes its buckets of run sets (docs/scale.md)
EngineOption = Annotated[str, typer.Option("--engine", metavar="[local|pool|spark]",
                                           help="Who computes the command's independent tasks (aggregate: "
                                                "buckets of run sets; ingest forge: parts of the summaries): this "
                                                "process, a pool of worker processes, or Spark (docs/scale.md).")]
SparkMasterOption = Annotated[Optional[str], typer.Option("--spark-master", show_default=False,
                                                          help="With --engine spark: the master (default local[*]; "
                                                               "Spark Connect: $SPARK_REMOTE).")]
WorkersOption = Annotated[Optional[int], typer.Option("--workers", show_default=False,
                                                      help="With --engine pool: worker processes (default: one per "
                                                           "usable core); with --engine spark: tasks per wave "
                                                           "(default: the session's parallelism; 2 over Spark "
                                                           "Connect).")]
BucketRunsOption = Annotated[int, typer.Option("--bucket-runs", help="Runs per bucket of whole run sets: what is in "
                                               "memory at once, per worker.")]


def _run(function: Callable, args: tuple, kwargs: dict) -> Any:
    """The command; where its warehouse is at a URL (--warehouse or $LOOPMETER_WAREHOUSE), on a
    scratch mirror of it, published back when the command changed it (`storage/remote.py`)."""
    from ..config import ENV_WAREHOUSE

    url = None
    if "warehouse" in kwargs:
        from ..storage.remote import remote_url

        given = kwargs["warehouse"]
        url = remote_url(given or os.environ.get(ENV_WAREHOUSE), "--warehouse" if given else f"${ENV_WAREHOUSE}")
    if url is None:
        return function(*args, **kwargs)
    from ..errors import shown_as
    from ..storage.remote import mirrored

    with mirrored(url) as local, shown_as(local, url):
        return function(*args, **(kwargs | {"warehouse": local}))


def command(function: Callable) -> Callable:
    """Run a command body: a LoopmeterError ends it with its one-line message and exit code;
    any other error too, with the traceback only under --debug (or LOOPMETER_DEBUG=1)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..errors import reset_warnings
        from ..operations.common import WATCHED

        from ..storage.remote import PUBLISHED

        WATCHED.clear()  # this command's warehouses only (tests run many commands in one process)
        PUBLISHED.clear()
        reset_warnings()
        context = kwargs.pop(_CONTEXT)
        try:
            code = _run(function, args, with_common_options(function, kwargs, context))
            sys.stdout.flush()  # a reader gone away shows here, not in the interpreter's last flush
            if _stdout_broken():
                # the reader left mid-write: the system took part of a large write and Python dropped the rest
                # without an error, so the exit says it as a broken pipe does
                raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
        except typer.Exit:
            raise
        except BrokenPipeError as error:
            if not _stdout_broken():  # a pipe to a child process, not stdout
                _fail(error)
            # `loopmeter report ... | head`: the reader has what it wanted; no message, no traceback
            _silence_stdout()
            raise typer.Exit(int(Exit.BROKEN_PIPE)) from None
        except LoopmeterError as error:
            # an error a Ctrl-C swallowed by a native library led to; not the command's own word for the
            # Ctrl-C (execute's: what it kept and how to finish), which is told as it is
            own_word = error.exit_code in (Exit.INTERRUPTED, Exit.TERMINATED)  # execute's: what it kept, how to finish
            if is_interruption(error) and not own_word:
                _interrupted()
            global INTERRUPT_REPORTED
            INTERRUPT_REPORTED = INTERRUPT_REPORTED or own_word
            if DEBUG or os.environ.get("LOOPMETER_DEBUG"):
                traceback.print_exc()
            told = "" if own_word else "error: "  # an interruption's line reads as every command's does
            print(f"loopmeter: {told}{clipped(one_line(str(error)))}", file=sys.stderr)
            raise typer.Exit(int(error.exit_code)) from None
        except KeyboardInterrupt:
            _interrupted()
        except Exception as error:  # noqa: BLE001 - the last line of defence of a CLI
            if is_interruption(error):
                _interrupted()
            _fail(error)
        raise typer.Exit(int(code or 0))

    # typer hands a parameter annotated typer.Context the command's context: the wrapper takes one
    # more parameter than the command, under a name no command uses
    import inspect

    signature = inspect.signature(function, eval_str=True)
    extra = inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])
    wrapper.__annotations__ = {**function.__annotations__, _CONTEXT: typer.Context}
    return wrapper


_CONTEXT = "loopmeter_context"


def with_common_options(function: Callable, kwargs: dict[str, Any], context: typer.Context) -> dict[str, Any]:
    """`kwargs` with the common options given before the command (`loopmeter --warehouse W report
    tail`): the command's own --warehouse, after it, wins; a flag holds if given on either side.
    --json asks for an output a command without one cannot give: refused. --warehouse, --quiet
    and --wait are settings, which a command with no use for one leaves aside (as it does
    $LOOPMETER_WAREHOUSE)."""
    given = context.meta.get(COMMON, {})
    if not given:
        return kwargs
    import inspect

    taken = inspect.signature(function).parameters
    merged = dict(kwargs)
    for name, value in given.items():
        if name not in taken:
            if name == "json":
                raise usage_error(f"--json: `{context.command_path}` prints no JSON; drop --json")
            continue
        if name == "warehouse":
            merged[name] = value if kwargs.get(name) is None else kwargs[name]
        else:
            merged[name] = bool(kwargs.get(name)) or value
    return merged


def _interrupted() -> None:
    from ..interrupts import exit_code

    tell_interruption()
    raise typer.Exit(exit_code()) from None


def tell_interruption() -> None:
    """Say once that the command was interrupted. A further Ctrl-C (or one delivered again,
    `interrupts.answer_swallowed`) is ignored while the line is written, not left to cut it short."""
    from ..interrupts import ignored

    global INTERRUPT_REPORTED
    with ignored():
        if not INTERRUPT_REPORTED:
            INTERRUPT_REPORTED = True
            sys.stderr.write(f"loopmeter: {interrupted_message()}\n")


ERROR_LINE = 4000  # characters of an error line: an argument of 100 KB echoed whole would bury the message


def clipped(text: str) -> str:
    """`text`, its middle left out (and counted) when it is longer than ERROR_LINE: its start says what
    was wrong with what, its end what to do."""
    if len(text) <= ERROR_LINE:
        return text
    half = ERROR_LINE // 2
    return f"{text[:half]}... ({len(text) - 2 * half:,} characters left out) ...{text[-half:]}"


def _fail(error: BaseException) -> None:
    if DEBUG or os.environ.get("LOOPMETER_DEBUG"):
        traceback.print_exc()
    from ..failures import explain

    from ..operations.common import WATCHED, replaced_tables

    explained = explain(error, [root for root, _ in WATCHED], replaced_tables())
    if explained is not None:
        print(f"loopmeter: error: {clipped(one_line(explained))}", file=sys.stderr)
        raise typer.Exit(int(Exit.FATAL)) from None
    first = (str(error).strip().splitlines() or [""])[0]  # DuckDB's messages run on with hints: the line that says what
    print(f"loopmeter: error: {type(error).__name__}: {one_line(first)} (`loopmeter --debug ...` shows the traceback)",
          file=sys.stderr)
    raise typer.Exit(int(Exit.FATAL)) from None


def print_json(value: Any, indent: int | None = None) -> None:
    """`value` as JSON on stdout; a `Streamed` document as it is made, one item held at a time."""
    from ..errors import named_in
    from ..jsjson import dumps
    from ..streamed import Streamed

    if isinstance(value, Streamed):
        value.write_json(write_stdout, indent, named_in)
        write_stdout("\n")
        return
    write_stdout(dumps(named_in(value), indent) + "\n")


def write_stdout(text: str, chunk: int = 1 << 16) -> None:
    """Write `text` to stdout a piece at a time: unbuffered (PYTHONUNBUFFERED, -u), one large write that
    the system takes only in part (a pipe whose reader left, a full disk) would lose the rest without
    an error; the next piece's write tells it instead. Control characters are shown escaped (`printable`)."""
    text = printable(text)
    for start in range(0, len(text), chunk):
        sys.stdout.write(text[start:start + chunk])


SHOWN_REJECTIONS = 20


def print_rejections(lines: list[str], total: int, table: str) -> None:
    """The first rejections, one line each, on stderr; the rest counted, and where to find them."""
    for line in lines[:SHOWN_REJECTIONS]:
        print(one_line(line), file=sys.stderr)
    if total > SHOWN_REJECTIONS:
        print(f"... and {total - SHOWN_REJECTIONS} more (all in the {table} table, or --json)", file=sys.stderr)


def note(message: str) -> None:
    """A line of chatter on stderr, unless --quiet."""
    from .. import progress

    if not progress.QUIET:
        print(one_line(message), file=sys.stderr)
