"""Errors users see, and the exit codes every command shares."""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import Any


class Exit(IntEnum):
    """How a command ends; told to people by `loopmeter help exit-codes` (commands/helptext.py)."""

    OK = 0  # everything asked for was done
    FATAL = 1  # the command could not do what was asked; nothing was changed
    USAGE = 2  # the command line itself is wrong (unknown option, missing argument)
    REJECTED = 3  # some inputs were rejected (each listed with its reason); the rest was stored
    BUSY = 4  # another loopmeter process holds the warehouse lock and --wait was not given
    REGRESSED = 5  # `compare --fail-on`: a gated row regressed, is inconclusive or underpowered (the comparison was printed)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); tables already replaced keep their new version, the others the old
    BROKEN_PIPE = 141  # stdout's reader left (`| head`): 128 + SIGPIPE, what the shell reports for any tool it ends
    TERMINATED = 143  # SIGTERM (128 + SIGTERM), answered as Ctrl-C is


class LoopmeterError(Exception):
    """An error with a one-line message for the user; `exit_code` says how the command ends."""

    exit_code: Exit = Exit.FATAL

    def __init__(self, message: str, exit_code: Exit | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def usage_error(message: str) -> LoopmeterError:
    """A wrong command line (an option, an argument): exit 2, as the command line's own errors."""
    return LoopmeterError(message, Exit.USAGE)


class WarehouseBusy(LoopmeterError):
    exit_code = Exit.BUSY


class TableFileMismatch(LoopmeterError):
    """A table file does not hold its table's schema (written by hand, or by an earlier loopmeter)."""


def starts_as_url(text: str) -> bool:
    """Whether a path as given starts as a URL does (`s3://b/x`; as a Path, `s3:/b/x`): never a local
    file of loopmeter's outputs or inputs, which would make or read a folder named `s3:` here."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", text) is not None


def is_utf8(text: str) -> bool:
    """A name or path from the file system is text (not bytes Python kept as surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_path(path: str | os.PathLike) -> str:
    """A path as text for a message: bytes that are not UTF-8 as \\xNN escapes, a line break or
    other control character as its escape (`\\n`), so the message stays one line; a path inside a
    folder `shown_as` names, under the name it gives."""
    return one_line(named(os.fsencode(path).decode("utf-8", "backslashreplace")))


def named(text: str) -> str:
    """`text`, a path inside a folder `shown_as` names, under the name it gives; else as it is."""
    for local, shown in SHOWN_AS.items():
        if text == local or text.startswith(local + "/"):
            return shown + text[len(local):]
    return text


def named_in(value: Any) -> Any:
    """`value` (JSON: dicts, lists, text, numbers) with each text that is a path inside a folder
    `shown_as` names under the name it gives (`named`)."""
    if not SHOWN_AS:
        return value
    if isinstance(value, str):
        return named(value)
    if isinstance(value, dict):
        return {key: named_in(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [named_in(item) for item in value]
    return value


SHOWN_AS: dict[str, str] = {}  # folder -> how messages name it (a warehouse's mirror: its URL)


@contextmanager
def shown_as(folder: str | os.PathLike, name: str) -> Iterator[None]:
    """Messages inside the block name `folder` (and the paths in it) as `name`."""
    key = os.fspath(folder)
    SHOWN_AS[key] = name
    try:
        yield
    finally:
        SHOWN_AS.pop(key, None)


_CONTROL = {code: f"\\x{code:02x}" for code in [*range(0x20), 0x7f, *range(0x80, 0xa0)]} | {0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t"}


def one_line(text: str) -> str:
    """`text` with its line breaks and other control characters escaped (`\\n`): one line, whatever
    a file or table name holds."""
    return text.translate(_CONTROL)


_UNPRINTABLE = {code: f"\\x{code:02x}" for code in [*range(0x20), 0x7f, *range(0x80, 0xa0)] if code not in (0x0a, 0x09)}


def printable(text: str) -> str:
    """`text` for a terminal: control characters (escape sequences among them) shown as `\\xNN`,
    line breaks and tabs kept. Whatever a name from a store or a file holds, it cannot move the
    cursor, recolour, retitle or clear the terminal it is printed on."""
    return text.translate(_UNPRINTABLE)


def without_credentials(text: str) -> str:
    """`text` with the user and password of a URL in it (`s3://user:secret@bucket`) left out."""
    return re.sub(r"(?<=:/)(/?)[^/@\s]*@", r"\1***@", text)


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (its type's name when it has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def flat_message(error: BaseException) -> str:
    """`error`'s message with its line breaks and runs of spaces made single spaces."""
    return " ".join(str(error).split())


def is_interruption(error: BaseException) -> bool:
    """Ctrl-C while DuckDB ran a query: DuckDB turns it into an error of its own (its
    InterruptException, or the RuntimeError its conversions raise). Or any error once a Ctrl-C came
    (`interrupts.answer`'s handler ran, or a native library swallowed one: `answer_swallowed`): the
    user asked the command to stop, and what fails after that is its consequence (a library's error
    wrapping the KeyboardInterrupt raised in its call back into Python, as DuckDB's reading an Arrow
    stream does, or a connection refusing a call while the query it was stopping ends)."""
    from . import interrupts

    return (interrupts.SWALLOWED or interrupts.RECEIVED
            or type(error).__name__ == "InterruptException"
            or (isinstance(error, RuntimeError) and str(error) == "Query interrupted"))


_WARNED: set[str] = set()


def warn(message: str) -> None:
    """`loopmeter: warning: <message>` on stderr, one line, once per process for the same message."""
    import sys

    line = one_line(message)
    if line in _WARNED:
        return
    _WARNED.add(line)
    print(f"loopmeter: warning: {line}", file=sys.stderr)


def reset_warnings() -> None:
    """Forget the warnings given (a new command in the same process warns again)."""
    _WARNED.clear()
