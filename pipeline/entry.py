"""The `loopmeter` command's first step. Ctrl-C while the command's modules load ends it at
once, with one line and exit 130 (nothing has been touched yet), not Python's traceback;
from then on `cli.main` answers it."""
from __future__ import annotations

import _signal  # the C module: `signal` itself takes a moment to load
import gc
import os
import sys


def _interrupted_while_loading(signum, frame) -> None:
    terminated = signum == _signal.SIGTERM
    sys.stderr.write(f"loopmeter: {'terminated (SIGTERM)' if terminated else 'interrupted'} before the command "
                     "began; nothing was changed\n")
    sys.stderr.flush()
    os._exit(143 if terminated else 130)


def _printable_anywhere() -> None:
    """Under a locale whose encoding is not UTF-8 (ISO-8859-1, ASCII), a character it lacks (the
    reports' `Δ`, a model's name) is written as a `\\u` escape rather than ending the command with
    a UnicodeEncodeError."""
    import codecs

    for stream in (sys.stdout, sys.stderr):
        try:
            if codecs.lookup(stream.encoding).name != "utf-8":
                stream.reconfigure(errors="backslashreplace")
        except (AttributeError, LookupError, TypeError, ValueError):  # a stream of another kind: as it is
            pass


def main() -> None:
    # A collection every 100,000 new objects rather than every 700: the collector walks the young
    # objects of each (the parsed runs, the documents: 0.03 to 0.06 s a command, for the few
    # hundred cycles it finds), and a command makes few cycles. Memory stays bounded all the same.
    gc.set_threshold(100_000, 10, 10)
    # only where Ctrl-C would raise: a SIGINT the caller ignores (a background job) stays ignored
    answering = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
    if answering:
        _signal.signal(_signal.SIGINT, _interrupted_while_loading)
    # SIGTERM likewise, unless the process was started ignoring it (or with a handler of its caller's)
    terminating = _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL
    if terminating:
        _signal.signal(_signal.SIGTERM, _interrupted_while_loading)
    _printable_anywhere()
    from .cli import main as run

    # restored inside its error handling: no moment without an answer
    run(restore_interrupt=answering, answer_sigterm=terminating)
