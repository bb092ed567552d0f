"""The garbage collector paused for bulk work (standard library only).

A stage that makes a few objects per run or per file, and almost no reference cycles,
pays for every collection with a walk over all live objects, its own and the libraries'.
In an ingest of 100k files that walk costs about 1 s of CPU. Paused, the few cycles made
meanwhile wait for the next collection after the block.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
