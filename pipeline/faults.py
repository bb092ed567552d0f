"""Crash points for the reliability tests: with LOOPMETER_CRASH_AT=<point> set, the process
kills itself (SIGKILL, no cleanup, like a power cut) when it reaches that point. Unset, a
checkpoint costs one dictionary lookup."""
from __future__ import annotations

import os
import signal

ENVIRONMENT = "LOOPMETER_CRASH_AT"


def checkpoint(point: str) -> None:
    if os.environ.get(ENVIRONMENT) == point:
        os.kill(os.getpid(), signal.SIGKILL)
