"""The flat Forge tables, rebuilt from `forge_events` with the named queries in `queries/`.

Each table is one query over `forge_events` (or over tables built just before it, in
the order of `DERIVED`), run in one DuckDB session and written whole. `forge_tasks` is
built here too, so `report routing` reads one small table instead of the events.
"""
from __future__ import annotations

import duckdb
import polars as pl

from .. import progress
from ..frames import polars_dtype
from ..sql import query_text
from ..warehouse import Warehouse
from . import tables as t

KNOWN_KINDS = frozenset({"plan", "attempt", "dispatch", "event", "outcome"})

# (table, query, kept in the session for the queries after it)
DERIVED: list[tuple[str | None, str]] = [
    (t.PLANS, "forge_plans"),
    (None, "forge_plan_task_values"),
    (t.PLAN_TASKS, "forge_plan_tasks"),
    (t.DECISIONS, "forge_decisions"),
    (t.ATTEMPTS, "forge_attempts"),
    (t.DISPATCHES, "forge_dispatches"),
    (t.MERGES, "forge_merges"),
    (t.INTEGRATIONS, "forge_integrations"),
    (t.ACCEPTANCES, "forge_acceptances"),
    (t.OUTCOMES, "forge_outcomes"),
    (t.TASKS, "forge_tasks"),
]


def typed_frame(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """`frame` with exactly the documented columns of `table`, in order and type (missing ones null)."""
    columns = t.columns(table)
    return frame.select(
        [
            (pl.col(name) if name in frame.columns else pl.lit(None)).cast(polars_dtype(dtype)).alias(name)
            for name, dtype, _ in columns
        ]
    )


def connect(warehouse: Warehouse, tables: list[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB session (UTC) with a view per named table that exists."""
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")
    for name in tables:
        if warehouse.has_table(name):
            connection.execute(f'CREATE VIEW "{name}" AS {warehouse.view_sql(name, absolute=True)}')
        else:
            _empty_view(connection, name)
    return connection


def _empty_view(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    types = {"str": "VARCHAR", "i64": "BIGINT", "f64": "DOUBLE", "bool": "BOOLEAN", "datetime": "TIMESTAMPTZ",
             "list_str": "VARCHAR[]", "list_i64": "BIGINT[]", "list_f64": "DOUBLE[]"}
    columns = ", ".join(f'CAST(NULL AS {types[dtype]}) AS "{column}"' for column, dtype, _ in t.columns(name))
    connection.execute(f'CREATE VIEW "{name}" AS SELECT {columns} WHERE false')


def derive(connection: duckdb.DuckDBPyConnection, only: set[str] | None = None) -> dict[str, pl.DataFrame]:
    """Run the derivation queries in order in `connection` (which has a `forge_events` view)."""
    frames: dict[str, pl.DataFrame] = {}
    for table, query in DERIVED:
        name = table or query
        if only is not None and table is not None and table not in only and not _needed_later(table, only):
            continue
        connection.execute(f'CREATE OR REPLACE TEMP TABLE "{name}" AS {query_text(query)}')
        if table is not None and (only is None or table in only):
            frames[table] = typed_frame(connection.sql(f'SELECT * FROM "{name}"').pl(), table)
    return frames


def _needed_later(table: str, only: set[str]) -> bool:
    # forge_tasks reads these; nothing else depends on another derived table
    return t.TASKS in only and table in (t.PLANS, t.PLAN_TASKS, t.DECISIONS, t.ATTEMPTS, t.DISPATCHES, t.ACCEPTANCES)


def rebuild_derived(warehouse: Warehouse, only: set[str] | None = None) -> None:
    """Rebuild the flat tables (all, or `only` these) from forge_events and write them."""
    connection = connect(warehouse, [t.EVENTS])
    try:
        frames = derive(connection, only)
    finally:
        connection.close()
    with progress.bar("store forge tables", len(frames)) as bar:
        for table, frame in frames.items():
            warehouse.write_table(table, frame)
            bar.advance()
