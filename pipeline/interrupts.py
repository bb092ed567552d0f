"""Ctrl-C where native libraries run: held back where it would do harm, answered where one swallowed it.

Python raises KeyboardInterrupt in whatever Python code runs when Ctrl-C comes, and native libraries
call back into Python: polars converting a dtype, DuckDB's native module making its enums as it
loads. Raised there, the exception cannot pass through the library. DuckDB's loader then ends the
process ("Critical nanobind error", an abort); polars hands it to `sys.unraisablehook` and goes on.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

# A Ctrl-C came to this process (`answer`'s handler).
RECEIVED = False
# A Ctrl-C whose KeyboardInterrupt was raised inside a native library's call back into Python and
# could not pass through it: set by `answer_swallowed`'s hook.
SWALLOWED = False


def answer() -> None:
    """Ctrl-C's answers in the process that answers it (`cli.main`): KeyboardInterrupt, as Python's own
    handler raises it, remembering that one came (a library that caught it inside its call back into
    Python may wrap it in an error of its own: `errors.is_interruption`), and `answer_swallowed`."""
    answer_swallowed()
    signal.signal(signal.SIGINT, _on_ctrl_c)


def _on_ctrl_c(number, frame) -> None:
    global RECEIVED
    RECEIVED = True
    raise KeyboardInterrupt


@contextmanager
def _handled_by(handler) -> Iterator[object]:
    """SIGINT handled by `handler` during the block, then as before; yields the handler it had
    (None where no handler can be set: outside the main thread, where the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main interpreter
        yield None
        return
    try:
        yield previous
    finally:
        # None: a handler set outside Python, which cannot be set again; Ctrl-C's default then
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)


@contextmanager
def deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block takes effect when it ends (only the main thread can catch
    it; elsewhere the block runs as it is)."""
    received: list[int] = []
    with _handled_by(lambda number, frame: received.append(number)) as previous:
        yield
    if received and previous is not signal.SIG_IGN:
        if callable(previous):
            previous(signal.SIGINT, None)
        else:
            raise KeyboardInterrupt


@contextmanager
def ignored() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block is dropped (a line being written is not cut short)."""
    with _handled_by(signal.SIG_IGN):
        yield


def answer_swallowed() -> None:
    """Make a Ctrl-C that a native library swallowed take effect all the same. The library can only
    hand such an exception to `sys.unraisablehook` ("Exception ignored in ...", with a traceback) and
    go on, often to fail with an error of its own. The hook says nothing, records the Ctrl-C (an
    error that follows is told as the interruption: `errors.is_interruption`) and delivers it again
    from a thread of its own: delivered from the hook itself, it would be raised in the hook, and
    swallowed again. For the process that answers Ctrl-C (`cli.main`)."""
    import _thread
    import sys

    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        global SWALLOWED
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            SWALLOWED = True
            _thread.start_new_thread(_thread.interrupt_main, ())
            return
        previous(unraisable)

    sys.unraisablehook = hook
