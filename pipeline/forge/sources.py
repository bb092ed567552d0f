"""A Forge event store opened as a source of batches of events: a SQLite store (`sqlite_store.py`)
or a JSON Lines export (`store.py`), told apart by their first bytes."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from .sqlite_store import read_sqlite
from .store import BATCH_ROWS, Container, SourceBatch, detect_format, read_jsonl


def open_store(path: Path, *, busy_timeout: float = 5.0, batch_rows: int = BATCH_ROWS,
               scratch: Path | None = None) -> tuple[Container, Iterator[SourceBatch]]:
    """The store's container facts and batches; `scratch`: where a WAL-mode store is copied to be read."""
    path = Path(path)
    if detect_format(path) == "sqlite":
        return read_sqlite(path, busy_timeout=busy_timeout, batch_rows=batch_rows, scratch=scratch)
    return read_jsonl(path, batch_rows=batch_rows)
