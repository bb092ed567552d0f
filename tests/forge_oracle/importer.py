"""`is_temp` as the spec describes it: a path under the system's temporary directory."""
from __future__ import annotations

import os
import tempfile


def is_temp(path: str) -> bool:
    root = os.path.realpath(tempfile.gettempdir())
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)
