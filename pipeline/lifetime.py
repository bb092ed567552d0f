"""Child processes that end with the process that started them, and thread pools that do not
keep an interrupted command alive. Standard library only."""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or `taskset` may
    hold below the machine's count), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


@functools.cache
def pdeathsig_setter() -> Callable[[], bool] | None:
    """On Linux, a function that asks the kernel to SIGKILL the calling process when the
    thread that forked it ends (prctl PR_SET_PDEATHSIG), true when it did; None elsewhere.
    Looked up once, in the parent before the workers fork (they inherit it and make one
    system call; a spawned worker looks it up itself)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int
    arguments = (ctypes.c_int(1), ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0),
                 ctypes.c_ulong(0))  # PR_SET_PDEATHSIG = 1

    def set_pdeathsig() -> bool:
        return prctl(*arguments) == 0
    return set_pdeathsig


@contextmanager
def thread_pool(workers: int, **options) -> Iterator[ThreadPoolExecutor]:
    """A thread pool that is not waited for after a Ctrl-C: a thread stuck on a lock the
    interruption left held (an import's, seen once in a thousand Ctrl-Cs) would hang the
    command for ever. The interrupted command ends the process itself (`cli.main`), and the
    warehouse's next writer removes what such a thread may still have written. After any
    other error the threads are waited for, as `ThreadPoolExecutor` does."""
    from concurrent.futures import ThreadPoolExecutor  # here: the walk's helpers import this module, never a pool

    pool = ThreadPoolExecutor(max_workers=workers, **options)
    try:
        yield pool
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)


WATCH_PARENT_EVERY = 0.5  # seconds, where the kernel cannot be asked to end a worker


def end_with_parent(parent: int | None, forker_outlives_pool: bool) -> None:
    """Worker initializer: the worker ends when the process that started it does. (A SIGKILLed
    or OOM-killed ingest would otherwise leave its workers waiting on the pool's queue for
    ever, holding every fd they inherited: the warehouse lock among them.)

    PR_SET_PDEATHSIG fires when the *thread* that forked the worker ends, so the kernel is
    asked only when that thread lives as long as the pool (`forker_outlives_pool`: the main
    thread, or a fork server's); otherwise, or without prctl, a daemon thread polls the
    parent's pid. `parent`, the pid that forks the workers as recorded before they forked
    (None: unknown, a fork server's), closes the race of a parent that died before the
    worker was tied to it.

    Ctrl-C is ignored: a terminal sends it to the whole process group, and each worker would
    print its own KeyboardInterrupt traceback; the parent answers it, and shuts the pool down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setter = pdeathsig_setter()
    if not (forker_outlives_pool and setter is not None and setter()):
        started_by = os.getppid() if parent is None else parent

        def watch() -> None:
            while os.getppid() == started_by:
                time.sleep(WATCH_PARENT_EVERY)
            os._exit(1)
        threading.Thread(target=watch, name="loopmeter-parent-watch", daemon=True).start()
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the worker was tied to it
