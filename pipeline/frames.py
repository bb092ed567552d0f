"""Typed polars frames from column specs `(name, kind, comment)` (the registry's kinds)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

from .storage.registry import arrow_type, polars_type

if TYPE_CHECKING:
    import polars as pl

Columns = Sequence[tuple[str, str, str]]


def schema(columns: Columns) -> "pl.Schema":
    import polars as pl

    return pl.Schema([(name, polars_type(kind)) for name, kind, _ in columns])


def frame_from_rows(rows: Iterable[Sequence], columns: Columns) -> "pl.DataFrame":
    """Rows (tuples in column order) to a typed frame, column by column through Arrow
    (about 2.5 times faster than polars' row constructor for wide rows with lists)."""
    import polars as pl
    import pyarrow as pa

    rows = list(rows)
    if not rows:
        return empty_frame(columns)
    arrays = [pa.array(values, type=arrow_type(kind, large=True)) for values, (_, kind, _) in zip(zip(*rows), columns)]
    return pl.from_arrow(pa.Table.from_arrays(arrays, names=[name for name, _, _ in columns]))


def empty_frame(columns: Columns) -> "pl.DataFrame":
    import polars as pl

    return pl.DataFrame(schema=schema(columns))
