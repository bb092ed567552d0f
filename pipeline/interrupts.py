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

# A Ctrl-C (or SIGTERM) came to this process (`answer`'s handlers).
RECEIVED = False
# It was SIGTERM (a service manager, `timeout`, Kubernetes or Slurm stopping the command): answered as
# Ctrl-C is, the command ending with 143 (128 + SIGTERM) rather than 130.
TERMINATED = False
# A Ctrl-C whose KeyboardInterrupt was raised inside a native library's call back into Python and
# could not pass through it: set by `answer_swallowed`'s hook.
SWALLOWED = False


def forget() -> None:
    """A new command's start (`cli.run`): no interruption has come to it yet (one that ended an earlier
    command run in this process is that command's)."""
    global RECEIVED, TERMINATED, SWALLOWED
    RECEIVED = TERMINATED = SWALLOWED = False


def answer(sigint: bool = True, sigterm: bool = True) -> None:
    """Ctrl-C's answers in the process that answers it (`cli.main`): KeyboardInterrupt, as Python's own
    handler raises it, remembering that one came (a library that caught it inside its call back into
    Python may wrap it in an error of its own: `errors.is_interruption`), and `answer_swallowed`.
    `sigterm`: SIGTERM is answered the same way (`TERMINATED`): what the command was doing is undone or
    kept as after a Ctrl-C (for a process not started ignoring it: `entry.py` tells)."""
    answer_swallowed()
    if sigint:
        signal.signal(signal.SIGINT, _on_ctrl_c)
    if sigterm:
        signal.signal(signal.SIGTERM, _on_ctrl_c)


def _on_ctrl_c(number, frame) -> None:
    global RECEIVED, TERMINATED
    RECEIVED = True
    TERMINATED = TERMINATED or number == signal.SIGTERM
    raise KeyboardInterrupt


def answering_sigterm():
    """The handler `answer` gives SIGTERM."""
    return _on_ctrl_c


def exit_code() -> int:
    """The exit code of a command stopped by `answer`'s handlers: 143 after SIGTERM, else 130."""
    return 128 + signal.SIGTERM if TERMINATED else 130


@contextmanager
def _handled_by(handler) -> Iterator[dict]:
    """SIGINT, and SIGTERM where `answer` answers it, handled by `handler` during the block, then as
    before; yields the handlers they had, by signal (none where no handler can be set: outside the
    main thread, where the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield {}
        return
    previous: dict = {}
    try:
        for number in (signal.SIGINT, signal.SIGTERM):
            if number == signal.SIGINT or signal.getsignal(number) is _on_ctrl_c:
                previous[number] = signal.signal(number, handler)
    except ValueError:  # not the main interpreter
        yield {}
        return
    try:
        yield previous
    finally:
        # None: a handler set outside Python, which cannot be set again; the signal's default then
        for number, before in previous.items():
            signal.signal(number, signal.SIG_DFL if before is None else before)


@contextmanager
def deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT), or SIGTERM where answered, during the block takes effect when it ends (only
    the main thread can catch them; elsewhere the block runs as it is)."""
    received: list[int] = []
    with _handled_by(lambda number, frame: received.append(number)) as previous:
        yield
    for number in dict.fromkeys(received):
        before = previous.get(number)
        if before is signal.SIG_IGN:
            continue
        if callable(before):
            before(number, None)
        else:
            raise KeyboardInterrupt


@contextmanager
def ignored() -> Iterator[None]:
    """Ctrl-C (SIGINT), and SIGTERM where answered, during the block are dropped (a line being written
    is not cut short)."""
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
