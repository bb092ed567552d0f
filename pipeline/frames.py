"""Typed polars frames from column specs `(name, dtype name, comment)`."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    import pyarrow

Columns = Sequence[tuple[str, str, str]]


def polars_dtype(name: str) -> "pl.DataType":
    import polars as pl

    return {
        "str": pl.String(),
        "i64": pl.Int64(),
        "f64": pl.Float64(),
        "bool": pl.Boolean(),
        "datetime": pl.Datetime("us", "UTC"),
        "list_str": pl.List(pl.String()),
        "list_i64": pl.List(pl.Int64()),
        "list_f64": pl.List(pl.Float64()),
    }[name]


def schema(columns: Columns) -> "pl.Schema":
    import polars as pl

    return pl.Schema([(name, polars_dtype(dtype)) for name, dtype, _ in columns])


_pandas_settled = False


class _PandasHidden:
    """A finder that answers an import of pandas with ImportError (see `arrow`)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError("pandas is hidden while pyarrow looks for it", name=name)
        return None


def arrow() -> "pyarrow":
    """pyarrow, set to build arrays from Python lists without importing pandas.

    pyarrow's first conversion of a Python list asks whether the list is a pandas object,
    importing pandas to find out where it is installed: about 0.3 s of CPU, for nothing
    loopmeter uses (an installed loopmeter does not depend on pandas). pyarrow is asked once
    with pandas hidden, so it records that pandas is absent, as it does in an environment
    without it; an explicit conversion to pandas (`to_pandas`) still imports it."""
    global _pandas_settled
    import pyarrow as pa

    if not _pandas_settled:
        _pandas_settled = True
        if "pandas" not in sys.modules:
            sys.meta_path.insert(0, _PandasHidden)
            try:
                pa.array([], pa.int64())  # pyarrow's one attempt to import pandas, made here
            finally:
                sys.meta_path.remove(_PandasHidden)
    return pa


class Scannable:
    """A polars frame DuckDB scans through the Arrow C stream interface, as often as it is read
    (`connection.register(name, Scannable(frame))`). DuckDB reads a registered polars frame as
    the pyarrow table of its `to_arrow()`: a conversion the scan does not need, which imports
    pyarrow (0.03 s, and numpy with it where pyarrow may load it) in a process that may need
    neither."""

    def __init__(self, frame: "pl.DataFrame") -> None:
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self.frame.__arrow_c_stream__(requested_schema)


def from_duckdb(relation: "duckdb.DuckDBPyRelation") -> "pl.DataFrame":
    """A DuckDB result as a polars frame, through the Arrow C stream interface (`relation.pl()`
    goes through a pyarrow table: see `Scannable`)."""
    import polars as pl

    return pl.DataFrame(relation)


def arrow_type(name: str):
    pa = arrow()

    return {
        "str": pa.large_string(),
        "i64": pa.int64(),
        "f64": pa.float64(),
        "bool": pa.bool_(),
        "datetime": pa.timestamp("us", tz="UTC"),
        "list_str": pa.large_list(pa.large_string()),
        "list_i64": pa.large_list(pa.int64()),
        "list_f64": pa.large_list(pa.float64()),
    }[name]


def frame_from_rows(rows: Iterable[Sequence], columns: Columns) -> "pl.DataFrame":
    """Rows (tuples in column order) to a typed frame, column by column through Arrow
    (about 2.5 times faster than polars' row constructor for wide rows with lists)."""
    import polars as pl

    pa = arrow()
    rows = list(rows)
    if not rows:
        return empty_frame(columns)
    arrays = [pa.array(values, type=arrow_type(dtype)) for values, (_, dtype, _) in zip(zip(*rows), columns)]
    return pl.from_arrow(pa.Table.from_arrays(arrays, names=[name for name, _, _ in columns]))


def empty_frame(columns: Columns) -> "pl.DataFrame":
    import polars as pl

    return pl.DataFrame(schema=schema(columns))
