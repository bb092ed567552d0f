"""Reading a SQLite Forge store (`dataset.sqlite`), read-only, as batches of `SourceBatch`.

The file is opened with `mode=ro` and read in one transaction (one snapshot); it is never migrated,
never written, and a writer holding it is waited for only `busy_timeout` seconds (a moment at a
time, so Ctrl-C is answered). A WAL-mode store is read from a copy in the warehouse's scratch space
(`copy_wal_store`), so nothing is created beside it. Its events and repos must be tables (a view is
computed as it is read, for ever if recursive). Its events are read straight into Arrow (ADBC's SQLite
driver, no Python object per value) as long as every row is plain: text or null in the text columns,
a number or null in ts, valid UTF-8. A row that is not makes the reader start again (once the Arrow
reader has read the plain rows: SQLite leaves the others out, counted) with Python's sqlite3, which
sorts such rows one by one. The Arrow reader is a second connection: in a WAL store, where a writer
may commit between the two, it reads only if it sees the repos and the number of events the first
one saw; else the first one reads. Batches end at BATCH_ROWS rows, or once their values of
LARGE_LINE bytes or more reach LARGE_BYTES.

The repos table is small: its rows are judged here, in Python (`_judge_repos`). A row that cannot be a
mapping (repo or path null, empty, not text, not UTF-8) or that gives a repo another path than an earlier
row is rejected, and its rejection travels with the first batch of the events (`SourceBatch.rejected`),
so it is counted and stored with the others.
"""
from __future__ import annotations

import bisect
import json
import os
import shutil
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import polars as pl

from .store import (BATCH_ROWS, Container, EVENT_FIELDS, FETCH_BYTES, FETCH_ROWS, FIRST_FETCH, LARGE_BYTES, LARGE_LINE, MAX_RECORD_BYTES, SourceBatch, StoreError, TEXT_FIELDS, _size)


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


_SCHEMA = {name: pl.String for name in EVENT_FIELDS} | {"ts": pl.Float64}


def _storage_class(value: object, text: type) -> str:
    if value is None:
        return "null"
    if isinstance(value, text):
        return "text"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "blob" if isinstance(value, (bytes, str)) else "other"
    return "integer" if isinstance(value, int) else "real"


def _oversize(value: object) -> tuple[str, int] | None:
    """(field, bytes) from the ts of a row `_EXACT_QUERY` read with a value over `MAX_RECORD_BYTES`."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str) and value.startswith(_OVERSIZE):
        name, _, size = value[len(_OVERSIZE):].partition(" ")
        return name, int(size)
    return None


def _row_problem(row: tuple, text: type) -> tuple[str, str] | None:
    oversize = _oversize(row[EVENT_FIELDS.index("ts")])
    if oversize is not None:
        name, size = oversize
        return name, f"is {size:,} bytes long; a value may hold at most {_size(MAX_RECORD_BYTES)}"
    classes = dict(zip(EVENT_FIELDS, (_storage_class(value, text) for value in row[:len(EVENT_FIELDS)])))
    if classes["rid"] != "text":
        return "rid", f"must be text (found {classes['rid']})"
    if classes["kind"] != "text":
        return "kind", f"must be text (found {classes['kind']})"
    if classes["ts"] not in ("integer", "real"):
        return "ts", f"must be unix seconds, a number (found {classes['ts']})"
    if classes["data"] != "text":
        return "data", f"must be a JSON object as text (found {classes['data']})"
    for name in ("src", "run", "task", "repo", "mode"):
        if classes[name] not in ("text", "null"):
            return name, f"must be text or null (found {classes[name]})"
    return None


def _split_bad_rows(rows: list[tuple], start: int, text: type) -> tuple[list[tuple], list[tuple]]:
    """Rows whose SQLite storage classes are wrong (a blob rid, a text ts, an integer rid, ...), found
    when a batch does not fit the typed frame (or holds a rid or kind stored as a number): each becomes
    a rejection naming its rid and column."""
    good, bad = [], []
    for offset, row in enumerate(rows):
        problem = _row_problem(row, text)
        if problem is None:
            good.append((start + offset, *row))
            continue
        rid = row[0]
        shown = rid.decode("utf-8", "replace") if isinstance(rid, bytes) else (None if rid is None else str(rid))
        if shown is not None and len(shown) > _SHOWN_RID:
            shown = shown[:_SHOWN_RID] + "..."  # an oversize rid, read cut (`_EXACT_QUERY`)
        bad.append((None, shown, *problem))
    return good, bad


# A number in a text column fits the typed frame (it takes 7 as "7"), as the format lets src, run, task,
# repo and mode be. The rid and the kind must be text (JSON Lines rejects a rid or kind that is not a
# string): a row holding either as a number reads with the text 'number' for its ts, which does not fit,
# so its rows are sorted one by one and `_row_problem` (which looks at rid and kind before ts) names the
# rid or the kind. `x < ''` is true for an integer or a real only (SQLite orders numbers before text, null
# compares to nothing), and costs less than typeof(x), or than a column more in every row.
# A value longer than MAX_RECORD_BYTES is not read: the row's ts says which and how long
# ('oversize data 104857600', which does not fit either), the value reads as null (a rid cut to its start).
_OVERSIZE = "oversize "
_SHOWN_RID = 200


def _byte_length(name: str) -> str:
    """A value's bytes (length() of text counts characters) in the SQLite Python has (3.40: no
    octet_length): SQLite reads the value to measure it, one value at a time."""
    return f"length(CAST({name} AS BLOB))"


def _exact_query(limit: int) -> str:
    too_long = " ".join(f"WHEN {_byte_length(name)} > {limit} THEN '{_OVERSIZE}{name} ' || {_byte_length(name)}"
                        for name in TEXT_FIELDS)
    columns = {name: (f"CASE WHEN {_byte_length(name)} > {limit} THEN "
                      + (f"substr({name}, 1, {_SHOWN_RID + 1})" if name == "rid" else "NULL") + f" ELSE {name} END")
               for name in TEXT_FIELDS}
    columns["ts"] = f"CASE {too_long} WHEN rid < '' OR kind < '' THEN 'number' ELSE ts END"
    return "SELECT " + ", ".join(f"{columns[name]} AS {name}" for name in EVENT_FIELDS) + " FROM events"


_EXACT_QUERY = _exact_query(MAX_RECORD_BYTES)


def _exact_query_skipping(oversize: list[tuple[int, str, int]]) -> str:
    """`_EXACT_QUERY` for a store whose oversize rows the Arrow reader found already ((rowid, field,
    bytes), measured without reading them): their values are never read, so one row of 1 GB costs no
    more memory than any other."""
    values = ", ".join(f"({rowid}, '{_OVERSIZE}{name} {size}')" for rowid, name, size in oversize)
    columns = {name: f"CASE WHEN b.id IS NULL THEN e.{name} END" for name in TEXT_FIELDS}
    columns["rid"] = f"CASE WHEN b.id IS NULL THEN e.rid ELSE substr(e.rid, 1, {_SHOWN_RID + 1}) END"
    columns["ts"] = "coalesce(b.note, CASE WHEN e.rid < '' OR e.kind < '' THEN 'number' ELSE e.ts END)"
    return (f"WITH big(id, note) AS (VALUES {values}) SELECT "
            + ", ".join(f"{columns[name]} AS {name}" for name in EVENT_FIELDS)
            + " FROM events e LEFT JOIN big b ON b.id = e.rowid")


def _sqlite_batches(connection: sqlite3.Connection, binary: bool, batch_rows: int,
                    oversize: list[tuple[int, str, int]] | None = None) -> Iterator[SourceBatch]:
    """Batches of typed rows; a batch whose rows do not all fit is sorted row by row."""
    text = bytes if binary else str
    connection.text_factory = text
    # no typeof(ts): a ts that fits the Float64 column is a number or null (others are sorted row by row;
    # so is a rid or kind stored as a number: `_EXACT_QUERY`)
    cursor = connection.execute(_exact_query_skipping(oversize) if oversize else _EXACT_QUERY)
    position = 0
    schema = {"position": pl.Int64} | {
        name: (pl.Binary if binary and name != "ts" else dtype) for name, dtype in _SCHEMA.items()
    }
    row_schema = {name: dtype for name, dtype in schema.items() if name != "position"}
    frames: list[pl.DataFrame] = []
    rejected: list = []
    held = large = 0
    fetch = FIRST_FETCH
    while True:
        # Python holds one small chunk of rows at a time (a row as Python objects weighs several
        # times its columnar form), of about FETCH_BYTES at most; the batch is built of their frames
        rows = cursor.fetchmany(min(batch_rows, fetch))
        more = bool(rows)
        if more:
            try:
                frame = pl.DataFrame(rows, schema=row_schema, orient="row").with_row_index("position", offset=position)
                frame = frame.with_columns(pl.col("position").cast(pl.Int64))
            except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
                good, bad = _split_bad_rows(rows, position, text)
                frame = pl.DataFrame(good, schema=schema, orient="row")
                rejected += bad
            size = max(1, frame.estimated_size())
            fetch = max(1, min(FETCH_ROWS, fetch * 2, len(rows) * FETCH_BYTES // size))
            position += len(rows)
            held += len(rows)
            large += _large_bytes(frame)
            frames.append(frame)
        rows = None
        if held and (held >= batch_rows or large >= LARGE_BYTES or not more):
            yield SourceBatch("sqlite", pl.concat(frames, rechunk=False), binary, rejected)
            frames, rejected, held, large = [], [], 0, 0
        if not more:
            break


def _large_bytes(frame: pl.DataFrame) -> int:
    """The bytes of the frame's text values of LARGE_LINE bytes or more."""
    lengths = [pl.col(name).cast(pl.Binary).bin.size() if frame.schema[name] == pl.Binary else pl.col(name).str.len_bytes()
               for name in TEXT_FIELDS if name in frame.columns]
    total = frame.select(pl.sum_horizontal([pl.when(n >= LARGE_LINE).then(n).otherwise(0) for n in lengths]).sum())
    return int(total.item() or 0)


def batch_plan(total: int, batch_rows: int, workers: int = 2) -> list[int]:
    """The sizes of the batches `total` rows are checked in, when the total is known (the Arrow
    reader). The workers check batches side by side, each taking the next batch when it is done;
    a last batch checked alone would leave the other cores idle for as long as it takes (about
    0.45 s for 75,000 events). So the first batch is half a batch, which
    puts the first worker half a batch ahead of the second; the last is about half a batch too,
    and the ones between (at most `batch_rows`, as equal as can be) a multiple of `workers`, so
    that the workers finish together."""
    half = max(1, batch_rows // 2)
    if total <= 2 * half:
        return [size for size in (min(total, half), total - half) if size > 0]
    rest = total - 2 * half
    count = -(-rest // batch_rows)
    count += -count % workers
    count = min(count, rest)
    # the last half batch in proportion to the others (they may be smaller than batch_rows)
    last = min(half, max(1, (rest // count + 1) // 2))
    middle = rest + half - last
    size, larger = divmod(middle, count)
    return [half] + [size + 1] * larger + [size] * (count - larger) + [last]


class _NotPlain(Exception):
    """The Arrow reader met a row it cannot take as it is: the rows are read again by `_sqlite_batches`.
    `oversize`: the rows with a value over MAX_RECORD_BYTES, (rowid, field, bytes), when it found them."""

    def __init__(self, message: str, oversize: list[tuple[int, str, int]] | None = None):
        super().__init__(message)
        self.oversize = oversize


# the rows holding a value over MAX_RECORD_BYTES: the first such field and its bytes, measured without
# reading the values (octet_length)
_OVERSIZE_QUERY = ("SELECT rowid, CASE " + " ".join(f"WHEN octet_length({name}) > {MAX_RECORD_BYTES} THEN '{name}'"
                                                    for name in TEXT_FIELDS)
                   + " END, CASE " + " ".join(f"WHEN octet_length({name}) > {MAX_RECORD_BYTES} THEN octet_length({name})"
                                              for name in TEXT_FIELDS)
                   + " END FROM events WHERE " + " OR ".join(f"octet_length({name}) > {MAX_RECORD_BYTES}"
                                                             for name in TEXT_FIELDS))


# rows the Arrow reader takes as they are: what `_sqlite_batches` puts in its typed frame without a question.
# SQLite tests it as a WHERE clause (each row stops at its first failing column): as a column of the
# result it cost about 0.4 s more CPU for a million rows
# and not longer than MAX_RECORD_BYTES (such a row is read by `_EXACT_QUERY`, which names it): the ADBC
# driver's SQLite (3.43 or later) measures a text's bytes with octet_length without reading the value
_PLAIN = " AND ".join([f"(typeof({name}) = 'null' OR (typeof({name}) = 'text' AND "
                       f"octet_length({name}) <= {MAX_RECORD_BYTES}))" for name in TEXT_FIELDS]
                      + ["typeof(ts) <> 'text' AND typeof(ts) <> 'blob'"])
# a first row of the right types, so the driver gives every column its type (it infers them from the
# first batch: a column null all through it would be typed as integers, and text later a mismatch);
# it also carries the number of events of the same snapshot (one statement): fewer plain rows than
# that, and some row was not plain
_ARROW_QUERY = ("SELECT '' AS rid, '' AS kind, '' AS src, 0.0 AS ts, '' AS run, '' AS task, '' AS repo, '' AS mode, "
                f"'' AS data, (SELECT count(*) FROM events) AS total "
                f"UNION ALL SELECT {', '.join(EVENT_FIELDS)}, 0 FROM events WHERE {_PLAIN}")


def _row_large_bytes(record) -> "list[int] | None":
    """The running total over the rows of `record` of their text values of LARGE_LINE bytes or more
    (None when it holds none: the usual case, which costs a length per value; the list is made only
    for a batch that holds large values)."""
    import pyarrow.compute as pc

    total = None
    for name in TEXT_FIELDS:
        lengths = pc.fill_null(pc.binary_length(record.column(name)), 0)
        large = pc.if_else(pc.greater_equal(lengths, LARGE_LINE), lengths, 0)
        total = large if total is None else pc.add(total, large)
    if total is None or not pc.max(total).as_py():
        return None
    return pc.cumulative_sum(pc.cast(total, "int64")).to_pylist()


def _arrow_batches(path: Path, busy_timeout: float, batch_rows: int, snapshot: "_Snapshot",
                   stop: threading.Event | None = None) -> Iterator[SourceBatch]:
    """The events as Arrow tables straight from SQLite (ADBC's driver: no Python object per value),
    typed as `_sqlite_batches` types them. Raises `_NotPlain` after the last batch when a row was not
    plain (left out by the query), or at any driver error: the caller reads again the exact way, which
    judges such rows one by one. Raises it too, before any batch, when this second connection does not
    see what the first one saw (`snapshot`: a WAL store a writer committed to in between), and between
    two of the driver's batches once `stop` is set."""
    import adbc_driver_manager
    import adbc_driver_sqlite.dbapi as adbc
    import pyarrow as pa

    try:
        connection = adbc.connect(_read_only_uri(path))
    except (adbc_driver_manager.Error, OSError) as error:
        raise _NotPlain(str(error)) from None
    try:
        cursor = connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if snapshot.events is not None:  # WAL: this connection's transaction (it holds one) may see more
            cursor.execute(_REPOS_QUERY)
            if [tuple(row) for row in cursor.fetchall()] != snapshot.repos:
                raise _NotPlain("the repos changed since the store was opened")
        # the driver's batches (half a batch: the first batch is the first of them, so checking starts
        # as soon as it is read) are cut and joined where the plan says (known once the first tells the total)
        cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(max(1, batch_rows // 2))})
        cursor.execute(_ARROW_QUERY)
        schema = pa.schema([(name, pa.float64() if name == "ts" else pa.string()) for name in EVENT_FIELDS])
        position, total, plan = 0, None, []
        held: list[pa.RecordBatch] = []  # of the next batch
        held_rows = held_large = 0

        def batch() -> SourceBatch:
            nonlocal position, held, held_rows
            table = pa.Table.from_batches(held, schema)
            rows, held, held_rows = table.num_rows, [], 0
            numbers = pl.int_range(position, position + rows, dtype=pl.Int64, eager=True).to_arrow()
            position += rows
            return SourceBatch("sqlite", table.add_column(0, "position", numbers))

        for record in cursor.fetch_record_batch():
            if stop is not None and stop.is_set():
                raise _NotPlain("stopped")
            if total is None:  # the typing row
                total, record = record.column("total")[0].as_py(), record.slice(1)
                if snapshot.events is not None and total != snapshot.events:
                    raise _NotPlain("events were written since the store was opened")
                # planned with the typing row, which the first driver batch holds: the first batch is that
                # driver batch's events exactly
                plan = batch_plan(total + 1, batch_rows)
                plan[0] -= 1
                if not plan[0]:
                    plan.pop(0)
            rows = record.num_rows
            if not rows:
                continue
            columns = []
            for name in EVENT_FIELDS:
                column = record.column(name)
                wanted = schema.field(name).type
                if column.null_count == rows:
                    column = pa.nulls(rows, wanted)
                elif column.type != wanted:
                    raise _NotPlain(f"{name} read as {column.type}")
                elif name != "ts":
                    column.validate(full=True)  # valid UTF-8, else ArrowInvalid
                columns.append(column)
            record = pa.RecordBatch.from_arrays(columns, schema=schema)
            weights = _row_large_bytes(record)  # running total of each row's large values, or None
            while record.num_rows:  # cut where the plan says (fewer rows than planned: some are not plain)
                take = min(record.num_rows, plan[0] - held_rows) if plan else record.num_rows
                full = False
                if weights is not None:  # ... or where the large values reach LARGE_BYTES
                    crossing = bisect.bisect_left(weights, LARGE_BYTES - held_large)
                    if crossing < take:
                        take, full = crossing + 1, True
                    taken = weights[take - 1]
                    held_large += taken
                    weights = [weight - taken for weight in weights[take:]]
                held.append(record.slice(0, take))
                held_rows += take
                record = record.slice(take)
                if plan and held_rows == plan[0]:
                    plan.pop(0)
                    held_large = 0
                    yield batch()
                elif full:
                    if plan:
                        plan[0] -= held_rows  # the rest of the planned batch comes next
                    held_large = 0
                    yield batch()
        if held:
            yield batch()
        if position != total:
            try:
                cursor.execute(_OVERSIZE_QUERY)
                oversize = [(int(rowid), name, int(size)) for rowid, name, size in cursor.fetchall()]
            except adbc_driver_manager.Error:  # a table WITHOUT ROWID: `_EXACT_QUERY` measures them itself
                oversize = None
            raise _NotPlain(f"{total - position} rows of another storage class", oversize)
    except (adbc_driver_manager.Error, OSError, pa.ArrowException) as error:
        raise _NotPlain(str(error)) from None
    finally:
        connection.close()


@dataclass(frozen=True)
class _Snapshot:
    """What the first connection saw: the repos rows (as `_REPOS_QUERY` reads them), and (WAL stores
    only) the number of events."""
    repos: list[tuple]
    events: int | None


# the repos rows as they are stored, whatever their storage class or bytes (hex: text that is not UTF-8
# reads as well as any other, and two connections compare what they see exactly); in the table's order
_REPOS_QUERY = "SELECT typeof(repo), hex(repo), typeof(path), hex(path) FROM repos"


def _repo_value(storage_class: str, hex_text: str) -> tuple[str | None, str]:
    """A repos column's text, or None and what was found instead (as `_storage_class` names it)."""
    if storage_class != "text":
        return None, storage_class
    try:
        value = bytes.fromhex(hex_text).decode("utf-8")
    except UnicodeDecodeError:
        return None, "text that is not valid UTF-8"
    return (value, "") if value else (None, "empty text")


def _judge_repos(rows: list[tuple]) -> tuple[list[tuple[str, str]], list[tuple]]:
    """The repos rows (`_REPOS_QUERY`) -> the mappings, in the table's order, and the rejections
    (line, rid, field, rule) of the rows that are not: as a JSON Lines repo line, a row needs repo and
    path, each non-empty text. A repo given twice is one mapping, the first row's: a row repeating it
    with the same path adds nothing (as a repeated event), with another path it is rejected, naming
    the first row's path (the PRIMARY KEY of the format keeps a store from holding either)."""
    mappings: dict[str, str] = {}
    rejections: list[tuple] = []
    for repo_class, repo_hex, path_class, path_hex in rows:
        repo, repo_found = _repo_value(repo_class, repo_hex)
        path, path_found = _repo_value(path_class, path_hex)
        if repo is None:
            shown = json.dumps(path, ensure_ascii=False) if path is not None else path_found
            rejections.append((None, None, "repo", f"a repos row needs repo, non-empty text "
                                                   f"(found {repo_found}; the row's path: {shown})"))
        elif path is None:
            rejections.append((None, None, "path", f"a repos row needs path, non-empty text "
                                                   f"(found {path_found}; the row's repo: "
                                                   f"{json.dumps(repo, ensure_ascii=False)})"))
        elif repo not in mappings:
            mappings[repo] = path
        elif mappings[repo] != path:
            rejections.append((None, None, "repo", f"a repos row repeats repo {json.dumps(repo, ensure_ascii=False)} "
                                                   f"with another path ({json.dumps(path, ensure_ascii=False)}; an "
                                                   f"earlier row has {json.dumps(mappings[repo], ensure_ascii=False)}); "
                                                   "the first is kept"))
    return list(mappings.items()), rejections


class StoreBatches:
    """The batches of a store (an iterator), and `cancel`: from another thread, stop the reading (the
    iterator then ends with an error) when the ingest stops early."""

    def __init__(self, iterator: Iterator[SourceBatch], stop: threading.Event | None = None):
        self._iterator, self._stop = iterator, stop

    def __iter__(self) -> Iterator[SourceBatch]:
        return self._iterator

    def __next__(self) -> SourceBatch:
        return next(self._iterator)

    def close(self) -> None:
        self._iterator.close()

    def cancel(self) -> None:
        if self._stop is not None:
            self._stop.set()


def read_sqlite(path: Path, *, busy_timeout: float = 5.0, batch_rows: int = BATCH_ROWS,
                arrow: bool = True, scratch: Path | None = None) -> tuple[Container, StoreBatches]:
    """Open the store and return its container facts and its batches.

    The batches hold one read transaction until exhausted (or closed). With `scratch` (a directory
    of the warehouse's scratch space), a WAL-mode store is copied there with its -wal and the copy
    read (`copy_wal_store`): nothing is created beside the store."""
    container = Container(path=path, format="sqlite")
    source = copy_wal_store(path, scratch / "store") if scratch is not None and uses_wal(path) else path
    stop = threading.Event()
    connection = _connect_read_only(path, source, stop)
    try:
        _take_read_lock(connection, busy_timeout)  # one snapshot for repos and events
        check_sqlite_schema(connection, path)
        repo_rows = connection.execute(_REPOS_QUERY).fetchall()
        container.repos, container.repo_rejections = _judge_repos(repo_rows)
        # The Arrow reader is a second connection. In rollback-journal mode this transaction keeps
        # writers out until the end, so it sees the same store; so does a copy (nothing writes it).
        # A WAL store read in place may be committed to in between: the Arrow reader checks that it
        # sees these repos and this many events, else the rows are read here.
        wal = source == path and connection.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
        snapshot = _Snapshot(repo_rows, connection.execute("SELECT count(*) FROM events").fetchone()[0] if wal else None)
    except StoreError:
        connection.close()
        raise
    except sqlite3.Error as error:
        connection.close()
        if "interrupted" in str(error):
            raise KeyboardInterrupt from None  # Ctrl-C, answered in the progress handler
        raise _sqlite_problem(path, error, busy_timeout) from None

    def events() -> Iterator[SourceBatch]:
        try:
            oversize = None
            if arrow:
                try:
                    yield from _arrow_batches(source, busy_timeout, batch_rows, snapshot, stop)
                    return
                except _NotPlain as error:
                    if stop.is_set():
                        raise StoreError(f"{path}: reading was stopped") from None
                    oversize = error.oversize
                    yield SourceBatch("restart", pl.DataFrame())
            try:
                yield from _sqlite_batches(connection, False, batch_rows, oversize)
                return
            except sqlite3.OperationalError as error:
                if "decode" not in str(error).lower():
                    raise
            # some text is not UTF-8: read again, decoding in SQL (a bad value rejects its row)
            yield SourceBatch("restart", pl.DataFrame())
            yield from _sqlite_batches(connection, True, batch_rows, oversize)
        except sqlite3.Error as error:
            if stop.is_set():
                raise StoreError(f"{path}: reading was stopped") from None
            raise _sqlite_problem(path, error, busy_timeout) from None
        finally:
            try:
                connection.execute("COMMIT")
            except sqlite3.Error:
                pass
            connection.close()

    def batches() -> Iterator[SourceBatch]:
        """The events' batches, the first of each reading (a restart forgets what came before) carrying
        the rejected repos rows; an empty batch carries them when there are no events."""
        pending = list(container.repo_rejections)
        source = events()
        try:
            for batch in source:
                if batch.kind == "restart":
                    pending = list(container.repo_rejections)
                elif pending:
                    batch.rejected = pending + batch.rejected
                    pending = []
                yield batch
        finally:
            source.close()  # closed early (the ingest stopped): the transaction ends, the store is closed
        if pending:
            yield SourceBatch("sqlite", pl.DataFrame(schema={"position": pl.Int64} | _SCHEMA), rejected=pending)

    return container, StoreBatches(batches(), stop)


# ---- JSON Lines ------------------------------------------------------------------------
