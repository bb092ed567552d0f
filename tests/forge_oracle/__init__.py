"""The seed's `forge dataset` scripts, used as a test oracle (never imported by the package).

`routing.py` and `outcomes.py` are verbatim copies of `../shared/seeds/002_*.txt`. The seed
imports helpers that were not published (`connect`, `dataset_dir`, `record`, `sha256`, and
`export.Store`, `export.Runs`, `export._attempts`, `importer.is_temp`); this package supplies
them as the input contract (`docs/forge-format.md`) describes them:

- events are taken in event order: by `ts`, then `rid`;
- an attempt passes if any of its events passed, fails if one failed, else has no outcome
  and its reason is the last `reason` given (else its last status);
- a dispatch resolves a spec through the last dwarf dispatch of that attempt.

`DATASET_DIR` (or $FORGE_DATASET_DIR) says where `dataset.sqlite` lies.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

DATASET_DIR: Path | None = None


def dataset_dir() -> Path:
    if DATASET_DIR is not None:
        return Path(DATASET_DIR)
    return Path(os.environ.get("FORGE_DATASET_DIR", "."))


def connect():
    """A read-only connection to the store (the seed's connect() would migrate it)."""
    path = dataset_dir() / "dataset.sqlite"
    return sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record(batch, repo=None, where=None) -> int:  # the oracle never writes
    raise RuntimeError("the oracle is read-only")
