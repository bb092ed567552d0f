"""Writing table files: every file in its table's one schema, whoever writes it.

Polars frames are written through pyarrow's writer (`write_file`), DuckDB query results by
DuckDB's own COPY (`copy_file`: a large table never passes through Python). Either way the
file holds the table's columns in order, in the registry's types, zstd-compressed, without the
`ARROW:schema` footer entry (so every reader derives the same types from the Parquet types),
tagged with the table's name and the schema version; and it is checked once written.

A `TableBuilder` is one new version of a table, written piece by piece and published when its
block ends (`Warehouse.build_table`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .. import SCHEMA_VERSION, faults
from ..lifetime import thread_pool, usable_cores
from . import registry
from .conformance import EMPTY_FILE, file_problem, in_partition, schema_problem
from .files import remove_tree
from .names import quote_literal

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow as pa


def tags(table: str) -> dict[str, str]:
    """The key-value metadata of every Parquet file of table `table` (in the file's footer)."""
    return {"loopmeter.table": table, "loopmeter.schema_version": str(SCHEMA_VERSION)}


# Conversions `conform` makes: none changes a value (integers widen, nulls take any type, a time
# in UTC keeps its instant).
def _lossless(have: "pl.DataType", want: "pl.DataType") -> bool:
    import polars as pl

    if have == want or have == pl.Null:
        return True
    if isinstance(want, pl.List) and isinstance(have, pl.List):
        return _lossless(have.inner, want.inner)
    if want == pl.Int64:
        return have in (pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32)
    if want == pl.Float64:
        return have in (pl.Float32, pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16)
    if isinstance(want, pl.Datetime) and isinstance(have, pl.Datetime):
        return have.time_zone in ("UTC", "Etc/UTC") and have.time_unit in ("ms", "us")
    return False


def conform(frame: "pl.DataFrame", table: str, partitioned_file: bool, where: str = "") -> "pa.Table":
    """`frame` as the Arrow table a file of `table` holds: the declared columns in order, cast where
    the cast is lossless. A frame with other columns or types is refused (ValueError), and so is a
    partition column holding other values than the one folder's."""
    declared = registry.table(table)
    partition = declared.partition if partitioned_file else None
    if partition is not None and partition in frame.columns:
        if frame.height and frame[partition].n_unique() > 1:
            raise ValueError(f"{where or table}: one partition file holds several {partition} values")
        frame = frame.drop(partition)
    wanted = declared.polars_schema(partitioned_file)
    schema = frame.schema  # built once: each access builds it anew
    extra = sorted(set(schema) - set(wanted))
    if extra:
        raise ValueError(f"{where or table}: column {extra[0]} is not a column of {table}")
    casts = []
    for name, want in wanted.items():
        have = schema.get(name)
        if have is None:
            raise ValueError(f"{where or table}: column {name} is missing")
        if have != want:
            if not _lossless(have, want):
                raise ValueError(f"{where or table}: column {name} is {have}, {table} declares {want}")
            casts.append(frame[name].cast(want))
    names = list(wanted)
    if list(schema) != names or casts:
        frame = frame.with_columns(casts).select(names)
    return frame.to_arrow()


def write_file(frame: "pl.DataFrame", path: Path, table: str) -> None:
    """Write `frame` as the Parquet file `path` of `table`, in the table's schema: pyarrow's writer,
    plain pages (dictionary pages cost a third more time here and made the runs files larger, not
    smaller, once compressed)."""
    import pyarrow.parquet as pq

    partitioned = in_partition(table, path)
    data = conform(frame, table, partitioned, where=str(path))
    problem = schema_problem(table, data.schema, partitioned, as_stored=False)
    if problem is not None:
        raise ValueError(f"{path}: {problem}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, data.schema, compression="zstd", store_schema=False, use_dictionary=False) as writer:
        writer.write_table(data)
        writer.add_key_value_metadata(tags(table))
    faults.checkpoint(f"wrote-file:{table}")


def copy_file(connection: "duckdb.DuckDBPyConnection", query: str, path: Path, table: str,
              params: dict | None = None, level: int | None = None) -> int:
    """DuckDB writes the rows of `query` to the Parquet file `path` of `table` itself (streaming,
    under its memory limit): the table's columns in its order and types, the same compression and
    tags as `write_file`; the file is checked once written. Returns the number of rows written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pairs = ", ".join(f"{quote_literal(key)}: {quote_literal(value)}" for key, value in tags(table).items())
    compression = "COMPRESSION zstd" + (f", COMPRESSION_LEVEL {int(level)}" if level is not None else "")
    select = f"SELECT {registry.table(table).sql_select(in_partition(table, path))} FROM ({query}) AS stored"
    (rows,) = connection.execute(
        f"COPY ({select}) TO {quote_literal(str(path))} (FORMAT parquet, {compression}, KV_METADATA {{{pairs}}})",
        params or {},
    ).fetchone()
    problem = file_problem(table, path)
    if problem is not None:
        raise ValueError(f"{path}: {problem}")
    faults.checkpoint(f"wrote-file:{table}")
    return rows


class TableBuilder:
    """One version of a table being written; see `Warehouse.build_table`."""

    def __init__(self, root: Path, name: str, partition_by: str | None,
                 current: Callable[[], dict[str, list[Path]]] = dict, *,
                 link: Callable[[Path, Path], None] = lambda source, target: os.link(source, target, follow_symlinks=False),
                 remove: Callable[[Path], None] = remove_tree):
        """A new version of table `name` in the warehouse at `root`; `current` gives the current version's
        partitions (value -> its files), which `keep_others` keeps. `link` hard-links a file of the
        current version into the new one, and `remove` removes the new one if it is discarded
        (`Verified.link` and `Verified.remove`, which keep what was verified of the files)."""
        from . import versions

        self.name, self.partition_by, self.current = name, partition_by, current
        self._link, self._remove = link, remove
        self.version = versions.new(root, name)
        self.written: set[str] = set()
        self.files: set[tuple[str, str]] = set()  # (partition key, file name) written by copy
        self.parts: dict[str, int] = {}  # partition key -> files written by `write_part`
        self.schema_frame: "pl.DataFrame | None" = None
        self.keep_others = False  # keep the current version's partitions not written here ...
        self.drop: set[str] = set()  # ... except these
        self.cancelled = False  # set to leave the table as it is

    def write(self, frame: "pl.DataFrame") -> None:
        """Write `frame`: the whole table, or (partitioned) its partitions, each at most once."""
        self.schema_frame = frame.clear()
        if self.partition_by is None:
            write_file(frame, self.version / "part-0.parquet", self.name)
            self.written.add("")
            return
        if not frame.height:
            return
        parts = frame.partition_by(self.partition_by, as_dict=True, maintain_order=True)
        values = [str(value) for (value,) in parts]
        if self.written.intersection(values):
            raise ValueError(f"partition written twice in {self.name}: {sorted(self.written.intersection(values))}")
        jobs = [(part, self._directory(value) / "part-0.parquet") for value, part in zip(values, parts.values())]
        # Parquet encoding releases the GIL: write partitions on every core
        with thread_pool(usable_cores()) as pool:
            list(pool.map(lambda job: write_file(job[0], job[1], self.name), jobs))
        self.written.update(values)

    def write_part(self, frame: "pl.DataFrame", partition: str | None = None) -> Path:
        """Write `frame` as the next file of the table, or of partition `partition` (`part-00000.parquet`,
        `part-00001.parquet`, ...: read in that order): a large table or partition written a piece at a
        time, so that no more than a piece is ever in memory. Returns the file written."""
        self.schema_frame = frame.clear()
        key = self._key(partition)
        if key in self.written and key not in self.parts:
            raise ValueError(f"partition written whole and in parts in {self.name}: {key!r}")
        number = self.parts.get(key, 0)
        path = self._directory(key) / f"part-{number:05d}.parquet"
        write_file(frame, path, self.name)
        self.parts[key] = number + 1
        self.written.add(key)
        return path

    def link_part(self, file: Path, partition: str | None = None) -> Path:
        """Take `file`, a verified file of the table's current version, as the next file of the table (or
        of partition `partition`) as it is: hard-linked, so rows kept unchanged are neither read nor
        written again. A link in its place is linked as a link (never followed): readers refuse it."""
        key = self._key(partition)
        if key in self.written and key not in self.parts:
            raise ValueError(f"partition written whole and in parts in {self.name}: {key!r}")
        number = self.parts.get(key, 0)
        directory = self._directory(key)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"part-{number:05d}.parquet"
        self._link(file, path)
        self.parts[key] = number + 1
        self.written.add(key)
        return path

    def copy(self, connection: "duckdb.DuckDBPyConnection", query: str, *, partition: str | None = None,
             params: dict | None = None, part: int | None = None) -> int:
        """Write the rows of the DuckDB `query` (its columns those of the table) as the table's file,
        or, partitioned, as the file of partition `partition` (each at most once). With `part`, the
        rows are file number `part` of several (`part-00000.parquet`, ...: read in that order).
        Returns the number of rows written."""
        key = self._key(partition)
        name = "part-0.parquet" if part is None else f"part-{part:05d}.parquet"
        if (key, name) in self.files or (part is None and key in self.written):
            raise ValueError(f"partition written twice in {self.name}: {key!r}")
        rows = copy_file(connection, query, self._directory(key) / name, self.name, params)
        self.written.add(key)
        self.files.add((key, name))
        return rows

    def adopt(self, file: Path, *, partition: str | None = None) -> None:
        """Take a file written by `Warehouse.copy_table_file` for this table into the new version as
        it is (hard-linked: the scratch space is on the same file system). Several files may make up
        the table, or a partition."""
        key = self._key(partition)
        directory = self._directory(key)
        directory.mkdir(parents=True, exist_ok=True)
        os.link(file, directory / Path(file).name)
        self.written.add(key)

    def _key(self, partition: str | None) -> str:
        if (partition is None) != (self.partition_by is None):
            raise ValueError(f"{self.name}: a partition value is needed exactly when the table is partitioned")
        return "" if partition is None else str(partition)

    def _directory(self, key: str) -> Path:
        """Where the files of partition `key` go (the version itself when unpartitioned); the value
        follows its partition's rule, so the folder is one component under the version."""
        if self.partition_by is None:
            return self.version
        problem = registry.partition_value_problem(self.partition_by, key)
        if problem is not None:
            raise ValueError(f"{self.name}: {problem}")
        return self.version / f"{self.partition_by}={key}"

    def finish(self) -> None:
        """Complete the version: the current version's partitions kept (`keep_others`), hard-linked;
        an empty table's columns. The caller publishes it."""
        if self.partition_by is not None and self.keep_others:
            for value, files in self.current().items():
                if value in self.written or value in self.drop:
                    continue
                target = self.version / f"{self.partition_by}={value}"
                target.mkdir()
                for file in files:
                    self._link(file, target / file.name)
                self.written.add(value)
        if not self.written:  # an empty table still has its columns
            if self.schema_frame is None:
                raise ValueError(f"nothing written to {self.name}, not even its columns")
            write_file(self.schema_frame, self.version / EMPTY_FILE, self.name)

    def discard(self) -> None:
        from . import versions

        versions.discard(self.version, self._remove)
