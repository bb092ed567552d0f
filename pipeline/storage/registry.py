"""Every table of the warehouse: its columns, their types, its documentation, its partitioning.

A table is declared once, with its documentation, in the table declarations of its area
(`forgeloop/tables.py`, `forge/tables.py`): `(column, kind, comment)` triples. A column's
kind is one of the names below; its polars, Arrow and SQL types are derived here, from one
map, so every writer (pyarrow, DuckDB's COPY), every reader and every view agree:

    str -> string        i64 -> int64        f64 -> double        bool -> bool
    datetime -> timestamp[us, tz=UTC]        list_str -> list<element: string> (likewise i64, f64)

Partitioned tables use standard Hive partitioning: `<table>/<column>=<value>/part-*.parquet`,
the partition column in the folder name only, never inside the file.

This module is the bottom of the storage layer: it imports nothing of loopmeter's but the
declarations, and polars and pyarrow only when a type is asked for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

Column = tuple[str, str, str]  # (name, kind, comment)

# kind -> (polars type name, pyarrow type function, SQL type); `list_<kind>` is a list of <kind>
SCALARS: dict[str, tuple[str, str, str]] = {
    "str": ("String", "string", "VARCHAR"),
    "i64": ("Int64", "int64", "BIGINT"),
    "f64": ("Float64", "float64", "DOUBLE"),
    "bool": ("Boolean", "bool_", "BOOLEAN"),
    "datetime": ("Datetime", "timestamp", "TIMESTAMPTZ"),
}
KINDS = (*SCALARS, *(f"list_{kind}" for kind in ("str", "i64", "f64")))

# table -> its partition column; the rule its folder names' values follow
PARTITIONED = {"runs": "run_set_id", "forge_events": "month", "forgeloop_documents": "run_set_id"}
PARTITION_VALUES = {
    "run_set_id": re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"),  # ForgeLoop's runSetId
    "month": re.compile(r"[0-9]{4}-[0-9]{2}"),  # YYYY-MM
}


def _element(kind: str) -> str | None:
    return kind[5:] if kind.startswith("list_") else None


def polars_type(kind: str) -> "pl.DataType":
    import polars as pl

    element = _element(kind)
    if element is not None:
        return pl.List(polars_type(element))
    name = SCALARS[kind][0]
    return pl.Datetime("us", "UTC") if kind == "datetime" else getattr(pl, name)()


def arrow_type(kind: str, large: bool = False) -> "pa.DataType":
    """The Arrow type of `kind` as files store it; `large`: with 64-bit offsets (strings and lists), for
    arrays built in memory whose text may pass 2 GiB (a file stores them as the plain type)."""
    import pyarrow as pa

    element = _element(kind)
    if element is not None:
        inner = arrow_type(element, large)
        return pa.large_list(inner) if large else pa.list_(pa.field("element", inner))
    if kind == "str" and large:
        return pa.large_string()
    name = SCALARS[kind][1]
    return pa.timestamp("us", tz="UTC") if kind == "datetime" else getattr(pa, name)()


def sql_type(kind: str) -> str:
    element = _element(kind)
    return f"{sql_type(element)}[]" if element is not None else SCALARS[kind][2]


@dataclass(frozen=True)
class Table:
    name: str
    description: str
    columns: tuple[Column, ...]
    partition: str | None  # the partition column, if the table is partitioned
    # columns declared after files of the table were first written: a file without them is rewritten
    # with them null (`rewrite.py`), not refused
    added: frozenset[str] = frozenset()

    @property
    def column_names(self) -> list[str]:
        return [name for name, _, _ in self.columns]

    def kinds(self) -> dict[str, str]:
        return {name: kind for name, kind, _ in self.columns}

    def file_columns(self, partitioned_file: bool) -> list[tuple[str, str]]:
        """(column, kind) a file of the table holds: a file inside a partition folder holds every
        column but the partition column."""
        left_out = self.partition if partitioned_file else None
        return [(name, kind) for name, kind, _ in self.columns if name != left_out]

    def arrow_schema(self, partitioned_file: bool) -> "pa.Schema":
        return _arrow_schema(self.name, partitioned_file)

    def polars_schema(self, partitioned_file: bool = False) -> "pl.Schema":
        import polars as pl

        return pl.Schema([(name, polars_type(kind)) for name, kind in self.file_columns(partitioned_file)])

    def empty_frame(self) -> "pl.DataFrame":
        """A frame of no rows with every column of the table (the partition column too)."""
        import polars as pl

        return pl.DataFrame(schema=self.polars_schema())

    def sql_select(self, partitioned_file: bool) -> str:
        """The select list that casts a query's columns to a file of the table (DuckDB's COPY)."""
        from .names import quote_identifier

        return ", ".join(f"CAST({quote_identifier(name)} AS {sql_type(kind)}) AS {quote_identifier(name)}"
                         for name, kind in self.file_columns(partitioned_file))


@cache
def _arrow_schema(name: str, partitioned_file: bool) -> "pa.Schema":
    import pyarrow as pa

    return pa.schema([pa.field(column, arrow_type(kind)) for column, kind in table(name).file_columns(partitioned_file)])


@cache
def tables() -> dict[str, Table]:
    """Every table loopmeter writes, by name."""
    from ..forge.tables import FORGE_TABLES
    from ..forgeloop.tables import ADDED_COLUMNS, FORGELOOP_TABLES

    declared = {**FORGELOOP_TABLES, **FORGE_TABLES}
    return {name: Table(name, description, tuple(columns), PARTITIONED.get(name), frozenset(ADDED_COLUMNS.get(name, ())))
            for name, (description, columns) in declared.items()}


def table(name: str) -> Table:
    found = tables().get(name)
    if found is None:
        raise ValueError(f"{name}: not a table loopmeter knows")
    return found


def known(name: str) -> bool:
    return name in tables()


def partition_value_problem(column: str, value: str) -> str | None:
    """Why `value` cannot be a value of partition column `column` (None: it can)."""
    rule = PARTITION_VALUES.get(column)
    if rule is None or rule.fullmatch(value) is None:
        return f"{column}={value} is not a partition folder loopmeter writes (the value must match {rule.pattern if rule else '?'})"
    return None
