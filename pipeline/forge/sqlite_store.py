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

The store is opened by `sqlite_open.py` and its events read into Arrow by `sqlite_arrow.py`; this
module holds `read_sqlite`, which runs the reading, the exact row-by-row reader (`_sqlite_batches`),
and the judging of the repos rows.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Iterator

import polars as pl

from .sqlite_arrow import _NotPlain, _Snapshot, _arrow_batches
from .sqlite_arrow import batch_plan as batch_plan  # offered beside read_sqlite: the tests plan batches here
from .sqlite_open import (_REPOS_QUERY, _connect_read_only, _sqlite_problem, _take_read_lock, check_sqlite_schema,
                          copy_wal_store, uses_wal)
from .store import (BATCH_ROWS, COMMA_WEIGHT, DENSE_FROM, Container, EVENT_FIELDS, FETCH_BYTES, FETCH_ROWS, FIRST_FETCH, LARGE_BYTES, LARGE_LINE, MAX_RECORD_BYTES, SourceBatch, StoreError, TEXT_FIELDS, _size)


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
    """The weight of the frame's text values weighing LARGE_LINE or more (`store.COMMA_WEIGHT`)."""
    weights = []
    for name in TEXT_FIELDS:
        if name not in frame.columns:
            continue
        text = pl.col(name).cast(pl.String, strict=False) if frame.schema[name] == pl.Binary else pl.col(name)
        size = pl.col(name).cast(pl.Binary).bin.size() if frame.schema[name] == pl.Binary else pl.col(name).str.len_bytes()
        commas = pl.when(size >= DENSE_FROM).then(text.str.count_matches(",", literal=True)).otherwise(0).fill_null(0)
        weights.append(size + COMMA_WEIGHT * commas)
    total = frame.select(pl.sum_horizontal([pl.when(w >= LARGE_LINE).then(w).otherwise(0) for w in weights]).sum())
    return int(total.item() or 0)


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
        elif "\0" in path:
            rejections.append((None, None, "path", f"holds a NUL character, which no path on a file system can (the "
                                                   f"row's repo: {json.dumps(repo, ensure_ascii=False)})"))
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
