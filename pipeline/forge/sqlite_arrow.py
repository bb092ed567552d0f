"""The Arrow reader of a SQLite Forge store: its events straight from SQLite into Arrow tables through
ADBC's SQLite driver (no Python object per value), for stores whose rows are all plain (`_PLAIN`).
A row that is not plain, a driver error, or a second connection that does not see what the first one
saw (`_Snapshot`) raises `_NotPlain`, and `sqlite_store.py` reads the rows again the exact way. Also
`batch_plan`, the sizes of the batches once the number of events is known.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import polars as pl

from .sqlite_open import _REPOS_QUERY, _read_only_uri
from .store import COMMA_WEIGHT, DENSE_FROM, EVENT_FIELDS, LARGE_BYTES, LARGE_LINE, MAX_RECORD_BYTES, SourceBatch, TEXT_FIELDS


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


# rows the Arrow reader takes as they are: what `_sqlite_batches` puts in its typed frame without a question,
# and not longer than MAX_RECORD_BYTES (such a row is read by `_EXACT_QUERY`, which names it): the ADBC
# driver's SQLite (3.43 or later) measures a text's bytes with octet_length without reading the value.
# SQLite tests it as a WHERE clause (each row stops at its first failing column): as a column of the
# result it costs about 0.4 s more CPU for a million rows
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
    """The running total over the rows of `record` of their text values weighing LARGE_LINE or more
    (`store.COMMA_WEIGHT`) (None when it holds none: the usual case, which costs a length per value; the list is made only
    for a batch that holds large values)."""
    import pyarrow.compute as pc

    total = None
    for name in TEXT_FIELDS:
        column = record.column(name)
        lengths = pc.fill_null(pc.binary_length(column), 0)
        if (pc.max(lengths).as_py() or 0) >= DENSE_FROM:  # a value long enough that its commas could count
            commas = pc.fill_null(pc.count_substring(column, ","), 0)
            lengths = pc.add(lengths, pc.if_else(pc.greater_equal(lengths, DENSE_FROM),
                                                 pc.multiply(commas, COMMA_WEIGHT), 0))
        large = pc.if_else(pc.greater_equal(lengths, LARGE_LINE), lengths, 0)
        total = large if total is None else pc.add(total, large)
    if total is None or not pc.max(total).as_py():
        return None
    return pc.cumulative_sum(pc.cast(total, "int64")).to_pylist()


@dataclass(frozen=True)
class _Snapshot:
    """What the first connection saw: the repos rows (as `_REPOS_QUERY` reads them), and (WAL stores
    only) the number of events."""
    repos: list[tuple]
    events: int | None


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

