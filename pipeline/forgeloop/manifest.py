"""`ingest_manifest` during an ingest, out of Python's memory whatever the number of files.

The last ingest's rows for this results directory sit in a DuckDB session (which spills
to a scratch directory beyond its memory limit) and are looked up a chunk of paths at a
time. This ingest's rows are held in memory up to IN_MEMORY_ROWS, then spooled to Parquet a
chunk at a time. At the end the new version of the table is written, sorted by kind, source
and path: the rows kept from other sources (or other run set folders) merged with this ingest's.
The table's files are sorted and follow one another in key order, so a file holding no replaced
row and no new row among its keys is taken as it is (hard-linked): adding a run set rewrites the
file its rows sort into, not the table. A first ingest whose rows all fit in memory has nothing
to merge: its rows are sorted and written as they are, without a DuckDB session.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from ..frames import empty_frame
from ..storage import Warehouse, duck
from ..storage.names import file_pattern
from .tables import MANIFEST
from .tables import MANIFEST_COLUMNS

if TYPE_CHECKING:
    import duckdb

COLUMNS = ", ".join(f'"{name}"' for name, _, _ in MANIFEST_COLUMNS)
MEMORY_LIMIT = "128MB"  # beyond it DuckDB spills to the scratch directory: peak memory stays flat
IN_MEMORY_ROWS = 20_000  # this ingest's rows held before they are spooled (a row is about 300 bytes)
ORDER = ["kind", "source_root", "path"]


class ManifestSpool:
    def __init__(self, warehouse: Warehouse, source_root: str, scratch: Path):
        self.warehouse, self.source_root, self.scratch = warehouse, source_root, scratch
        self._connection: duckdb.DuckDBPyConnection | None = None
        self.current = warehouse.has_table(MANIFEST)
        self.files: list[str] = []
        self.held: list[pl.DataFrame] = []  # rows not spooled yet
        self.rows = 0
        self.same = self.current  # every chunk so far has the rows the last ingest wrote
        if self.current:
            self.connection.execute(
                f"CREATE TEMP TABLE previous AS SELECT {COLUMNS} FROM read_parquet(?, hive_partitioning = false) "
                "WHERE kind = 'run' AND source_root = ?",
                [[file_pattern(file) for file in warehouse.table_file_list(MANIFEST)], source_root],
            )
            self.previous_count = self.connection.execute("SELECT count(*) FROM previous").fetchall()[0][0]
        else:
            self.previous_count = 0

    @property
    def connection(self) -> "duckdb.DuckDBPyConnection":
        """The DuckDB session, opened on first need (a first ingest that fits in memory has none)."""
        if self._connection is None:
            # one thread: one Parquet row group in the making, not one per thread
            self._connection = duck.connect(self.warehouse.root, memory_limit=MEMORY_LIMIT, threads=1,
                                            temp_directory=self.scratch / "duckdb")
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()

    def previous_rows(self, paths: list[str]) -> pl.DataFrame:
        """The last ingest's rows (of this results directory) for these paths."""
        if not self.current:
            return empty_frame(MANIFEST_COLUMNS)
        wanted = pl.DataFrame({"path": paths}, schema={"path": pl.String}).to_arrow()
        self.connection.register("wanted", wanted)
        try:
            return self.connection.sql(f"SELECT {', '.join('p.' + c for c in COLUMNS.split(', '))} FROM previous AS p "
                                       "JOIN wanted USING (path)").pl()
        finally:
            self.connection.unregister("wanted")

    def add(self, frame: pl.DataFrame, previous: pl.DataFrame | None = None) -> None:
        """Spool a chunk of this ingest's rows; `previous`: the last ingest's rows for its paths."""
        if previous is not None and self.same:
            self.same = previous.height == frame.height and previous.sort("path").equals(
                frame.select(previous.columns).cast(previous.schema).sort("path"))
        elif previous is None:
            self.same = False
        self.held.append(frame)
        self.rows += frame.height
        if sum(held.height for held in self.held) > IN_MEMORY_ROWS:
            self._spool()

    def _spool(self) -> None:
        """The rows held, to a Parquet file of the scratch space."""
        if self.held:
            path = self.scratch / f"manifest-{len(self.files):06d}.parquet"
            pl.concat(self.held, how="vertical_relaxed").write_parquet(path)
            self.files.append(str(path))
            self.held = []

    def publish(self, in_scope: list[str], scenarios_root: str | None, only: list[str] | None) -> bool:
        """Write the new version of the table; False (nothing written) when this ingest's rows
        are exactly the last one's. The run rows replaced: this results directory's (with
        `only`, those under these entries of raw/) and those of the run sets ingested now."""
        if self.same and scenarios_root is None and only is None and self.rows == self.previous_count:
            return False
        params: dict = {"root": self.source_root, "in_scope": in_scope, "new": self.files}
        ours = "source_root = $root"
        if only is not None:
            params["only"] = only
            ours += (" AND CASE WHEN length(path) - length(replace(path, '/', '')) >= 2"
                     " THEN list_contains($only, split_part(path, '/', 2)) ELSE list_contains($only, '') END")
        replaced = f"(kind = 'run' AND (list_contains($in_scope, run_set_id) OR ({ours})))"
        if scenarios_root is not None:
            params["scenarios"] = scenarios_root
            replaced += " OR (kind = 'scenario' AND source_root = $scenarios)"
        if not self.current and not self.files:  # nothing to merge: the rows held, sorted
            rows = pl.concat([empty_frame(MANIFEST_COLUMNS), *self.held], how="vertical_relaxed")
            with self.warehouse.build_table(MANIFEST) as builder:
                builder.write(rows.sort(ORDER))
            return True
        self._spool()
        # this ingest's rows sorted; the rows kept stay in the order they were written in (sorted)
        new = self.scratch / "manifest-sorted.parquet"
        if self.files:
            self.connection.execute(f"COPY (SELECT {COLUMNS} FROM read_parquet($new, union_by_name = true) ORDER BY "
                                    f"{', '.join(ORDER)}) TO $out (FORMAT parquet)",
                                    {"new": [file_pattern(file) for file in self.files], "out": str(new)})
        rows = _SortedRows(_batches(new) if self.files else iter(()))
        files: list[_File] = []
        used: dict = {}
        if self.current:
            params["current"] = self.warehouse.table_file_list(MANIFEST)
            used = {name: value for name, value in params.items() if f"${name}" in replaced or name == "current"}
            files = _current_files(self.connection, params["current"], replaced, used)
            if rows.peek() is not None:
                _mark_hits(files, new)
        with self.warehouse.build_table(MANIFEST) as builder:
            builder.schema_frame = empty_frame(MANIFEST_COLUMNS)
            # a file with no row replaced and no new row within its keys is taken as it is (hard-linked);
            # the files between two such are merged with the new rows that sort between them, and
            # written in parts of MERGE_ROWS (a first ingest's rows too: the next one keeps most of them)
            between: list[str] = []
            for file in files:
                if file.kept:
                    self._merge(builder, between, replaced, used, rows.until(file.low))
                    builder.link_part(Path(file.path))
                    between = []
                else:
                    between.append(file.path)
            self._merge(builder, between, replaced, used, rows.until(None))
        return True

    def _merge(self, builder, files: list[str], replaced: str, params: dict, new_rows) -> None:
        """The rows kept of `files` (in their order) merged with the new rows given, written in parts."""
        if not files:
            for chunk in merged(new_rows):
                builder.write_part(chunk)
            return
        query = (f"SELECT {COLUMNS} FROM read_parquet($current, hive_partitioning = false) "
                 f"WHERE NOT coalesce({replaced}, false)")
        read = self.connection.sql(query, params=dict(params, current=[file_pattern(file) for file in files]))
        with read.to_arrow_reader(batch_size=MERGE_ROWS) as kept:
            for chunk in merged(kept, new_rows):
                builder.write_part(chunk)


@dataclass
class _File:
    """A file of the current version: its first and last keys (its rows are sorted), and whether it
    is kept as it is (no row of it replaced, no new row among its keys)."""
    path: str
    low: str
    high: str
    kept: bool


def _current_files(connection: "duckdb.DuckDBPyConnection", paths: list[str], replaced: str, params: dict) -> list[_File]:
    """Each file of the current version (in order) with its key range and whether it may be kept: no
    row of it replaced, and it has rows (a file without any only held the columns) whose first and
    last keys are whole."""
    stats = connection.sql(
        "SELECT filename, count(*) FILTER (WHERE coalesce(" + replaced + ", false)) AS replaced, "
        + ", ".join(f"arg_{end}_null({column}, file_row_number) AS {end}_{column}"
                    for end in ("min", "max") for column in ORDER)
        + " FROM read_parquet($current, hive_partitioning = false, filename = true, file_row_number = true) "
          "GROUP BY filename", params=dict(params, current=[file_pattern(path) for path in paths])).pl()
    stats = stats.with_columns(
        low=pl.concat_str([f"min_{column}" for column in ORDER], separator="\0"),
        high=pl.concat_str([f"max_{column}" for column in ORDER], separator="\0"))
    found = {row["filename"]: row for row in stats.iter_rows(named=True)}
    files = []
    for path in paths:
        row = found.get(path, {"low": None, "high": None, "replaced": 0})
        kept = row["replaced"] == 0 and row["low"] is not None and row["high"] is not None  # an empty key: merged
        files.append(_File(path, row["low"] or "", row["high"] or "", kept))
    return files


def _mark_hits(files: list[_File], new: Path) -> None:
    """Files with a new row's key within their first and last keys are not kept."""
    for batch in _batches(new):
        keys = _key(pl.from_arrow(batch))
        for file in files:
            if file.kept:
                at = keys.search_sorted(file.low, side="left")
                file.kept = not (at < keys.len() and keys[at] <= file.high)


class _SortedRows:
    """The new rows, sorted, handed out a batch at a time up to a key."""

    def __init__(self, batches):
        self.batches, self.held = iter(batches), None

    def peek(self) -> "pl.DataFrame | None":
        while self.held is None or self.held.height == 0:
            batch = next(self.batches, None)
            if batch is None:
                self.held = None
                return None
            self.held = pl.from_arrow(batch)
        return self.held

    def until(self, upper: str | None) -> Iterator:
        """The rows whose key sorts before `upper` (all the rest with None), as Arrow tables."""
        while self.peek() is not None:
            if upper is None:
                taken, self.held = self.held, None
            else:
                below = _key(self.held) < upper
                taken, self.held = self.held.filter(below), self.held.filter(~below)
            if taken.height:
                yield taken.to_arrow()
            if self.held is not None and self.held.height:
                return  # the rest sorts after `upper`


MERGE_ROWS = 100_000  # rows of the kept table merged at once


def _batches(path: Path):
    import pyarrow.parquet as pq

    yield from pq.ParquetFile(path).iter_batches(MERGE_ROWS)


def _key(frame: pl.DataFrame) -> pl.Series:
    """The sort order as one string (the parts joined by NUL, which no part holds): compared byte by
    byte, as DuckDB's ORDER BY compares the parts."""
    return frame.select(pl.concat_str(ORDER, separator="\0")).to_series()


def merged(*streams) -> Iterator[pl.DataFrame]:
    """Streams of Arrow batches, each sorted by ORDER, as one stream of frames sorted by ORDER (rows
    of equal keys in the order of the streams). Each step takes the rows, of every stream's batch
    at hand, up to the smallest of their last keys: at most a batch of each in memory."""
    streams = [iter(stream) for stream in streams]
    held: list[pl.DataFrame | None] = [None] * len(streams)

    def refill(index: int) -> None:
        while held[index] is None or held[index].height == 0:
            batch = next(streams[index], None)
            if batch is None:
                held[index] = None
                return
            held[index] = pl.from_arrow(batch)

    for index in range(len(streams)):
        refill(index)
    while any(frame is not None for frame in held):
        live = [index for index, frame in enumerate(held) if frame is not None]
        cut = min(_key(held[index])[-1] for index in live)
        taken = []
        for index in live:
            up_to = _key(held[index]) <= cut
            taken.append(held[index].filter(up_to))
            held[index] = held[index].filter(~up_to)
            refill(index)
        columns, schema = taken[0].columns, taken[0].schema
        frame = pl.concat([part.select(columns).cast(schema) for part in taken if part.height])
        yield frame.sort(ORDER, maintain_order=True) if len(live) > 1 else frame
