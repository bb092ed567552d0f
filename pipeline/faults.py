"""Crash points for the reliability tests: with LOOPMETER_CRASH_AT=<point> set, the process
kills itself (SIGKILL, no cleanup, like a power cut) when it reaches that point, or sends itself
the signal LOOPMETER_CRASH_SIGNAL names (TERM: as a service manager stops a process). Unset, a
checkpoint costs one dictionary lookup."""
from __future__ import annotations

import os
import signal

ENVIRONMENT = "LOOPMETER_CRASH_AT"


def checkpoint(point: str) -> None:
    if os.environ.get(ENVIRONMENT) == point:
        os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get("LOOPMETER_CRASH_SIGNAL", "KILL")))
