"""Opening a SQLite Forge store for reading: its read-only URI, the connection (with a progress
handler that answers Ctrl-C and a stop from another thread), the read transaction taken a moment at a
time, WAL-mode detection and the copy a WAL store is read from (`copy_wal_store`), the check that its
events and repos are tables with the format's columns, the query that reads the repos rows, and the
`StoreError` a SQLite error becomes.

`sqlite_store.py` reads the store through these; `sqlite_arrow.py` opens its second connection with
the same URI and compares the repos it sees through the same query.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path

from .store import EVENT_FIELDS, StoreError


_REQUIRED = {
    "events": EVENT_FIELDS,
    "repos": ("repo", "path"),
}


def _read_only_uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"


# how long SQLite waits for a writer's lock before the wait is taken up again in Python (which answers
# Ctrl-C between two waits), up to --busy-timeout
_LOCK_WAIT = 0.1
# SQLite virtual machine steps between two calls of the progress handler (the main thread answers
# Ctrl-C in it; a reading thread stops there when the ingest was stopped)
_PROGRESS_STEPS = 200_000


def _connect_read_only(path: Path, source: Path, stop: threading.Event) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(_read_only_uri(source), uri=True, timeout=_LOCK_WAIT, isolation_level=None,
                                     check_same_thread=False)
    except sqlite3.Error as error:
        raise StoreError(f"{path}: cannot be opened read-only ({error})") from None

    def progress() -> bool:  # Python code: the main thread's Ctrl-C is raised in it (and ends the statement)
        return stop.is_set()
    connection.set_progress_handler(progress, _PROGRESS_STEPS)
    return connection


def _take_read_lock(connection: sqlite3.Connection, busy_timeout: float) -> None:
    """Start the read transaction, waiting up to `busy_timeout` seconds for a writer's lock a moment at
    a time (so that Ctrl-C is answered while it waits); then SQLite waits as long by itself."""
    connection.execute("BEGIN")
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()  # takes the shared lock
            break
        except sqlite3.OperationalError as error:
            if not ("locked" in str(error) or "busy" in str(error)) or time.monotonic() >= deadline:
                raise
    connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")


def uses_wal(path: Path) -> bool:
    """The store is in WAL mode (its header's format bytes 18 and 19 are 2), or a -wal file lies beside
    it (SQLite reads it then whatever the header says)."""
    with open(path, "rb") as handle:
        header = handle.read(20)
    return header[18:20] == b"\x02\x02" or os.path.exists(f"{path.resolve()}-wal")


COPY_ATTEMPTS = 3


def _stamp(path: str) -> tuple | None:
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns


def copy_wal_store(path: Path, directory: Path) -> Path:
    """A copy of a WAL-mode store and its -wal in `directory`, to be read there. SQLite reading a WAL
    store in place creates its -shm (and -wal) beside it and leaves them, and cannot read one in a
    folder it may not write; `immutable=1` would not read what is committed in the -wal. The copy
    is taken again (up to COPY_ATTEMPTS times) when the store or its -wal changed while it was made,
    so it is one committed state."""
    real = path.resolve()
    wal = Path(f"{real}-wal")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "dataset.sqlite"
    copied_wal = Path(f"{target}-wal")
    for _ in range(COPY_ATTEMPTS):
        before = (_stamp(str(real)), _stamp(str(wal)))
        try:
            shutil.copyfile(real, target)
            if before[1] is not None:
                shutil.copyfile(wal, copied_wal)
            else:
                copied_wal.unlink(missing_ok=True)
        except FileNotFoundError:
            continue  # the -wal went away meanwhile (a writer's checkpoint): take it again
        except OSError as error:
            raise StoreError(f"{path}: a WAL-mode store is read from a copy in the warehouse's scratch space, "
                             f"and it cannot be copied to {directory} ({error.strerror})") from None
        if (_stamp(str(real)), _stamp(str(wal))) == before:
            return target
    raise StoreError(f"{path}: the store changed each time it was copied to be read ({COPY_ATTEMPTS} times); "
                     "try again when Forge is idle")


def _sqlite_problem(path: Path, error: sqlite3.Error, busy_timeout: float) -> StoreError:
    message = str(error)
    if "locked" in message or "busy" in message:
        return StoreError(f"{path}: the store is locked by a writer (waited {busy_timeout:g} s); "
                          "try again when Forge is idle")
    if "not a database" in message or "malformed" in message:
        return StoreError(f"{path}: is not a readable SQLite database ({message})")
    return StoreError(f"{path}: SQLite error ({message})")


def check_sqlite_schema(connection: sqlite3.Connection, path: Path) -> None:
    """`StoreError` unless events and repos are tables holding the format's columns. A view or a virtual
    table is refused: its rows are computed as they are read, and a recursive view never ends."""
    kinds = {name: (kind, sql or "") for name, kind, sql in connection.execute(
        "SELECT name, type, sql FROM sqlite_master WHERE type IN ('table', 'view')")}
    for table, wanted in _REQUIRED.items():
        if table not in kinds:
            raise StoreError(f"{path}: has no table {table!r}; a Forge store (format version 1) has tables "
                             "events(rid, kind, src, ts, run, task, repo, mode, data) and repos(repo, path)")
        kind, sql = kinds[table]
        if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            found = "a view" if kind == "view" else "a virtual table"
            raise StoreError(f"{path}: {table} is {found}, not a table; a Forge store's events and repos are "
                             "tables (format version 1), whose rows are stored, not computed")
        present = {row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')}
        missing = [column for column in wanted if column not in present]
        if missing:
            raise StoreError(f"{path}: table {table} lacks column(s) {', '.join(missing)}; "
                             f"format version 1 needs {table}({', '.join(wanted)})")


# the repos rows as they are stored, whatever their storage class or bytes (hex: text that is not UTF-8
# reads as well as any other, and two connections compare what they see exactly); in the table's order
_REPOS_QUERY = "SELECT typeof(repo), hex(repo), typeof(path), hex(path) FROM repos"
