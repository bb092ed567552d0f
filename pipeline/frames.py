"""Typed polars frames from column specs `(name, dtype name, comment)`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import polars as pl

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


def frame_from_rows(rows: Iterable[Sequence], columns: Columns) -> "pl.DataFrame":
    import polars as pl

    return pl.DataFrame(list(rows), schema=schema(columns), orient="row")


def empty_frame(columns: Columns) -> "pl.DataFrame":
    import polars as pl

    return pl.DataFrame(schema=schema(columns))
