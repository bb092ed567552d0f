"""The Forge tables that summarize several events, rebuilt from the per-event tables.

`forge_attempts` (from attempt events), `forge_decisions` (from the route entries of every
plan revision) and `forge_tasks` (one record per planned task: what routing needs) are
each one named query, run in order in one DuckDB session and written whole, so
`report routing` reads one small table instead of the events.
"""
from __future__ import annotations

import duckdb
import polars as pl

from .. import progress
from ..frames import polars_dtype
from ..layout import SQL_TYPES
from ..sql import query_text
from ..warehouse import Warehouse
from . import tables as t

KNOWN_KINDS = frozenset({"plan", "attempt", "dispatch", "event", "outcome"})

# the tables that summarize several events, in the order they are built: (table, query, its inputs)
SUMMARIES: list[tuple[str, str, tuple[str, ...]]] = [
    (t.ATTEMPTS, "forge_attempts", (t.ATTEMPT_EVENTS,)),
    (t.DECISIONS, "forge_decisions", (t.ROUTE_ENTRIES,)),
    (t.TASKS, "forge_tasks", (t.PLANS, t.PLAN_TASKS, t.DISPATCHES, t.ACCEPTANCES)),
]


def typed_frame(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """`frame` with exactly the documented columns of `table`, in order and type (missing ones null)."""
    columns = t.columns(table)
    if not any(name in frame.columns for name, _, _ in columns):
        # a select of literals only is one row whatever the frame's height (`typed_frame(pl.DataFrame(), ...)`,
        # an empty table, would hold a row of nulls): as many null rows as the frame has
        return pl.DataFrame([pl.Series(name, [None] * frame.height, dtype=polars_dtype(dtype)) for name, dtype, _ in columns])
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
            warehouse.check_table(name)
            connection.execute(f'CREATE VIEW "{name}" AS {warehouse.view_sql(name, absolute=True)}')
        else:
            _empty_view(connection, name)
    return connection



# the order each summary table is stored in (so a rebuild writes the same file whatever the threads did)
SUMMARY_ORDER = {t.ATTEMPTS: "run, task, attempt", t.DECISIONS: "run, task, position", t.TASKS: "task_order"}


def _empty_view(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    columns = ", ".join(f'CAST(NULL AS {SQL_TYPES[dtype]}) AS "{column}"' for column, dtype, _ in t.columns(name))
    connection.execute(f'CREATE VIEW "{name}" AS SELECT {columns} WHERE false')


def typed_sql(table: str, source: str, present: set[str] | None = None) -> str:
    """SQL selecting exactly the documented columns of `table`, in order and type, from the query
    `source` (the SQL twin of `typed_frame`); columns not in `present` (when given) are null."""
    columns = ", ".join(
        f'CAST({"NULL" if present is not None and name not in present else f"s.{name}"} AS {SQL_TYPES[dtype]}) AS "{name}"'
        for name, dtype, _ in t.columns(table))
    return f"SELECT {columns} FROM ({source}) s"


def store_query(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, table: str, query: str, *,
                partition: str | None = None, params: dict | None = None) -> None:
    """Replace `table` (or, with `partition`, that month partition of it, keeping the others) with the
    rows of `query`, DuckDB writing the Parquet file itself. A query that runs out of the session's
    memory (aggregates over many groups hold state per thread) is run again on one thread."""
    for attempt in (1, 2):
        try:
            with warehouse.build_table(table, "month" if partition is not None else None) as builder:
                builder.copy(connection, query, partition=partition, params=params)
                builder.keep_others = partition is not None
            return
        except duckdb.OutOfMemoryException:
            if attempt == 2:
                raise
            connection.execute("SET threads = 1")


def copy_summaries(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, done=lambda: None) -> None:
    """Compute and store the summary tables from a session with a view per input of SUMMARIES; DuckDB
    writes each table's Parquet file itself, straight from the query. Each is then a view of the
    table as stored (forge_tasks reads forge_attempts and forge_decisions)."""
    for table, query, _ in SUMMARIES:
        store_query(connection, warehouse, table, f"{typed_sql(table, query_text(query))} ORDER BY {SUMMARY_ORDER[table]}")
        connection.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {warehouse.view_sql(table, absolute=True)}')
        done()


def compute_summaries(connection: duckdb.DuckDBPyConnection) -> dict[str, pl.DataFrame]:
    """The summary tables from a session that has a view (or table) per input of SUMMARIES."""
    frames: dict[str, pl.DataFrame] = {}
    for table, query, _ in SUMMARIES:
        connection.execute(f'CREATE OR REPLACE TEMP TABLE "{table}" AS {query_text(query)}')
        frames[table] = typed_frame(connection.sql(f'SELECT * FROM "{table}"').pl(), table)
    return frames


def summary_inputs() -> list[str]:
    return sorted({name for _, _, needed in SUMMARIES for name in needed})


def rebuild_summaries(warehouse: Warehouse) -> None:
    """Rebuild forge_attempts, forge_decisions and forge_tasks from the per-event tables."""
    connection = connect(warehouse, summary_inputs())
    try:
        with progress.bar("store forge summaries", len(SUMMARIES)) as bar:
            copy_summaries(connection, warehouse, bar.advance)
    finally:
        connection.close()
