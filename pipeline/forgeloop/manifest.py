"""`ingest_manifest` during an ingest, out of Python's memory whatever the number of files.

The last ingest's rows for this results directory sit in a DuckDB session (which spills
to a scratch directory beyond its memory limit) and are looked up a chunk of paths at a
time. This ingest's rows are held in memory up to IN_MEMORY_ROWS, then spooled to Parquet a
chunk at a time. At the end DuckDB writes the new version of the table: the rows kept from
other sources (or other run set folders), then this ingest's, sorted by kind, source and
path. A first ingest whose rows all fit in memory has nothing to merge: its rows are sorted
and written as they are, without a DuckDB session.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from ..frames import empty_frame
from ..storage import Warehouse, duck
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
                [warehouse.table_file_list(MANIFEST), source_root],
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
        if not self.current:  # this ingest's rows alone
            with self.warehouse.build_table(MANIFEST) as builder:
                builder.copy(self.connection, f"SELECT {COLUMNS} FROM read_parquet($new, union_by_name = true) "
                             f"ORDER BY {', '.join(ORDER)}", params={"new": self.files})
            return True
        # the rows kept stay in the order they were written in (sorted): only this ingest's are
        # sorted, then the two are merged a batch at a time, never the whole table at once
        new = self.scratch / "manifest-sorted.parquet"
        if self.files:
            self.connection.execute(f"COPY (SELECT {COLUMNS} FROM read_parquet($new, union_by_name = true) ORDER BY "
                                    f"{', '.join(ORDER)}) TO $out (FORMAT parquet)", {"new": self.files, "out": str(new)})
        params["current"] = self.warehouse.table_file_list(MANIFEST)
        query = (f"SELECT {COLUMNS} FROM read_parquet($current, hive_partitioning = false) "
                 f"WHERE NOT coalesce({replaced}, false)")
        kept = self.connection.sql(query, params={name: value for name, value in params.items() if f"${name}" in query})
        with self.warehouse.build_table(MANIFEST) as builder, kept.to_arrow_reader(batch_size=MERGE_ROWS) as reader:
            builder.schema_frame = empty_frame(MANIFEST_COLUMNS)
            for chunk in merged(reader, _batches(new) if self.files else iter(())):
                builder.write_part(chunk)
        return True


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
