"""Child processes that end with the process that started them. Standard library only."""
from __future__ import annotations

import functools
import signal
import sys
from typing import Callable


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
