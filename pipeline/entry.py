"""The `loopmeter` command's first step. Ctrl-C while the command's modules load ends it at
once, with one line and exit 130 (nothing has been touched yet), not Python's traceback;
from then on `cli.main` answers it."""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_loading(signum, frame) -> None:
    sys.stderr.write("loopmeter: interrupted before the command began; nothing was changed\n")
    sys.stderr.flush()
    os._exit(130)


def main() -> None:
    previous = signal.signal(signal.SIGINT, _interrupted_while_loading)
    from .cli import main as run

    signal.signal(signal.SIGINT, previous)
    run()
