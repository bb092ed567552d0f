"""What every Parquet file of a table holds: one fixed Arrow schema per table, and its partitioning.

A table's columns and their types are declared once, with their documentation, in the table
registries of the areas (`forgeloop/tables.py`, `forge/tables.py`); this module turns those
declarations into the one Arrow schema every file of the table has, whoever writes it
(polars frames go through pyarrow's writer, DuckDB writes its own COPY files):

    str -> string        i64 -> int64        f64 -> double        bool -> bool
    datetime -> timestamp[us, tz=UTC]        list_str -> list<element: string> (likewise i64, f64)

Files carry no `ARROW:schema` footer entry, so every reader (pyarrow, pandas, DataFusion, Spark,
DuckDB, polars) derives the same types from the Parquet types themselves.

Partitioned tables use standard Hive partitioning: `<table>/<column>=<value>/part-0.parquet`,
the partition column in the folder name only, never inside the file. An empty partitioned
table is one file at its root holding every column, the partition column too.

`mismatch` compares a file with its table's schema; `conform` makes a polars frame into the
Arrow table a file holds, refusing what would need more than a lossless cast.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

# table -> its partition column; a file in a `<column>=<value>` folder holds the other columns
PARTITIONED = {"runs": "run_set_id", "forge_events": "month"}
# DuckDB's types for the declared ones (COPY casts to these, views declare them)
SQL_TYPES = {"str": "VARCHAR", "i64": "BIGINT", "f64": "DOUBLE", "bool": "BOOLEAN", "datetime": "TIMESTAMPTZ",
             "list_str": "VARCHAR[]", "list_i64": "BIGINT[]", "list_f64": "DOUBLE[]"}


def arrow_type(dtype: str) -> "pa.DataType":
    import pyarrow as pa

    element = {"str": pa.string(), "i64": pa.int64(), "f64": pa.float64()}
    if dtype.startswith("list_"):
        return pa.list_(pa.field("element", element[dtype[5:]]))
    return {**element, "bool": pa.bool_(), "datetime": pa.timestamp("us", tz="UTC")}[dtype]


@lru_cache(maxsize=None)
def declared(table: str) -> tuple[tuple[str, str], ...]:
    """The table's (column, dtype) in the documented order."""
    from .catalog import table_docs

    docs = table_docs()
    if table not in docs:
        raise ValueError(f"{table}: not a table loopmeter knows")
    return tuple((name, dtype) for name, dtype, _ in docs[table][1])


@lru_cache(maxsize=None)
def known_table(table: str) -> bool:
    from .catalog import table_docs

    return table in table_docs()


def column_names(table: str, columns: list[str] | None = None) -> list[str]:
    """The table's columns in its order (those of `columns` only, when given)."""
    return [name for name, _ in declared(table) if columns is None or name in columns]


def partition_column(table: str) -> str | None:
    return PARTITIONED.get(table)


def in_partition(table: str, path: Path) -> bool:
    """Whether the file `path` of `table` lies in a partition folder (so holds no partition column)."""
    column = PARTITIONED.get(table)
    return column is not None and Path(path).parent.name.startswith(column + "=")


def file_columns(table: str, partitioned_file: bool) -> list[tuple[str, str]]:
    column = PARTITIONED.get(table) if partitioned_file else None
    return [(name, dtype) for name, dtype in declared(table) if name != column]


@lru_cache(maxsize=None)
def file_schema(table: str, partitioned_file: bool) -> "pa.Schema":
    import pyarrow as pa

    return pa.schema([pa.field(name, arrow_type(dtype)) for name, dtype in file_columns(table, partitioned_file)])


def copy_select(table: str, partitioned_file: bool) -> str:
    """The select list a DuckDB COPY of a file of `table` writes: its columns, in order, in their types."""
    return ", ".join(f'CAST("{name}" AS {SQL_TYPES[dtype]}) AS "{name}"' for name, dtype in file_columns(table, partitioned_file))


def _parquet_type(kind: "pa.DataType") -> str:
    """The type a reader gets back from the Parquet file of an Arrow column (large and view
    strings and lists are stored as plain ones)."""
    import pyarrow as pa

    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return "string"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        return f"list<element: {_parquet_type(kind.value_type)}>"
    return str(kind)


def describe_mismatch(table: str, schema: "pa.Schema", partitioned_file: bool, *, as_stored: bool) -> str | None:
    """What in `schema` differs from the table's (None: nothing): the first column missing,
    unexpected or of another type. `as_stored`: `schema` is a file's as read back (its types
    exactly); else an Arrow table's about to be written (large and view types store as plain)."""
    want = file_schema(table, partitioned_file)
    shown = str if as_stored else _parquet_type
    have = {field.name: field.type for field in schema}
    partition = PARTITIONED.get(table)
    for field in want:
        if field.name not in have:
            return f"column {field.name} is missing ({table} declares {field.type})"
        if shown(have[field.name]) != str(field.type) and not (as_stored and have[field.name] == field.type):
            return f"column {field.name} is {shown(have[field.name])}, {table} declares {field.type}"
    for name in have:
        if want.get_field_index(name) < 0:
            if partitioned_file and name == partition:
                return f"column {name} is stored inside the file too (a partition column lives in the folder name only)"
            return f"column {name} is not a column of {table}"
    if [field.name for field in schema] != want.names:
        return f"columns are in another order than {table} declares"
    return None


def mismatch(table: str, path: Path) -> str | None:
    """How the Parquet file `path` of `table` differs from the table's schema (None: it does not)."""
    import pyarrow.parquet as pq

    return describe_mismatch(table, pq.read_schema(path), in_partition(table, path), as_stored=True)


# Conversions `conform` makes: none changes a value (integers widen, nulls take any type,
# a time in UTC keeps its instant).
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


@lru_cache(maxsize=None)
def _polars_columns(table: str, partitioned_file: bool) -> tuple[tuple[str, "pl.DataType"], ...]:
    from .frames import polars_dtype

    return tuple((name, polars_dtype(dtype)) for name, dtype in file_columns(table, partitioned_file))


def empty_frame(table: str) -> "pl.DataFrame":
    """A frame of no rows with every column of table `table` (a partitioned table's partition column too)."""
    import polars as pl

    return pl.DataFrame(schema=dict(_polars_columns(table, partitioned_file=False)))


def conform(frame: "pl.DataFrame", table: str, partitioned_file: bool, where: str = "") -> "pa.Table":
    """`frame` as the Arrow table a file of `table` holds: the declared columns in order, cast
    where the cast is lossless. A frame with other columns or types is refused (ValueError), and
    so is a partition column holding other values than the one folder's."""
    partition = PARTITIONED.get(table) if partitioned_file else None
    if partition is not None and partition in frame.columns:
        if frame.height and frame[partition].n_unique() > 1:
            raise ValueError(f"{where or table}: one partition file holds several {partition} values")
        frame = frame.drop(partition)
    columns = _polars_columns(table, partitioned_file)
    schema = frame.schema  # built once: each access builds it anew
    extra = sorted(set(schema) - {name for name, _ in columns})
    if extra:
        raise ValueError(f"{where or table}: column {extra[0]} is not a column of {table}")
    casts = []
    for name, want in columns:
        have = schema.get(name)
        if have is None:
            raise ValueError(f"{where or table}: column {name} is missing")
        if have != want:
            if not _lossless(have, want):
                raise ValueError(f"{where or table}: column {name} is {have}, {table} declares {want}")
            casts.append(frame[name].cast(want))
    names = [name for name, _ in columns]
    if list(schema) != names or casts:
        frame = frame.with_columns(casts).select(names)
    return frame.to_arrow()
