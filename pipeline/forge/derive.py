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
from ..sql.queries import query_text
from ..storage import Warehouse, duck
from ..storage.names import quote_identifier
from ..storage.registry import polars_type, sql_type
from . import tables as t

KNOWN_KINDS = frozenset({"plan", "attempt", "dispatch", "event", "outcome"})

# the tables that summarize several events, in the order they are built: (table, query, its inputs)
SUMMARIES: list[tuple[str, str, tuple[str, ...]]] = [
    (t.ATTEMPTS, "forge_attempts", (t.ATTEMPT_EVENTS,)),
    (t.DECISIONS, "forge_decisions", (t.ROUTE_ENTRIES,)),
    (t.TASKS, "forge_tasks", (t.PLANS, t.PLAN_TASKS, t.DISPATCHES, t.ACCEPTANCES, t.ATTEMPTS, t.DECISIONS)),
]


def typed_frame(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    """`frame` with exactly the documented columns of `table`, in order and type (missing ones null)."""
    columns = t.columns(table)
    if not any(name in frame.columns for name, _, _ in columns):
        # a select of literals only is one row whatever the frame's height (`typed_frame(pl.DataFrame(), ...)`,
        # an empty table, would hold a row of nulls): as many null rows as the frame has
        return pl.DataFrame([pl.Series(name, [None] * frame.height, dtype=polars_type(dtype)) for name, dtype, _ in columns])
    return frame.select(
        [
            (pl.col(name) if name in frame.columns else pl.lit(None)).cast(polars_type(dtype)).alias(name)
            for name, dtype, _ in columns
        ]
    )


def connect(warehouse: Warehouse, tables: list[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB session (UTC) with a view per named table that exists."""
    connection = duck.connect(warehouse.root, lock=False)  # `_store` may take it down to one thread
    for name in tables:
        if warehouse.has_table(name):
            connection.execute(f'CREATE VIEW {quote_identifier(name)} AS {warehouse.select_sql(name)}')
        else:
            _empty_view(connection, name)
    return connection



# the order each summary table is stored in (so a rebuild writes the same file whatever the threads did)
SUMMARY_ORDER = {t.ATTEMPTS: "run, task, attempt", t.DECISIONS: "run, task, position", t.TASKS: "task_order"}


def _empty_view(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    connection.execute(f'CREATE VIEW {quote_identifier(name)} AS {_empty_select(name)}')


def _empty_select(name: str) -> str:
    """A SELECT of no rows with the columns of table `name`."""
    columns = ", ".join(f'CAST(NULL AS {sql_type(dtype)}) AS {quote_identifier(column)}' for column, dtype, _ in t.columns(name))
    return f"SELECT {columns} WHERE false"


def typed_sql(table: str, source: str, present: set[str] | None = None) -> str:
    """SQL selecting exactly the documented columns of `table`, in order and type, from the query
    `source` (the SQL twin of `typed_frame`); columns not in `present` (when given) are null."""
    columns = ", ".join(
        f'CAST({"NULL" if present is not None and name not in present else "s." + quote_identifier(name)} AS {sql_type(dtype)}) AS {quote_identifier(name)}'
        for name, dtype, _ in t.columns(table))
    return f"SELECT {columns} FROM ({source}) s"


def store_query(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, table: str, query: str, *,
                partition: str | None = None, params: dict | None = None) -> None:
    """Replace `table` (or, with `partition`, that month partition of it, keeping the others) with the
    rows of `query`, DuckDB writing the Parquet file itself."""
    def write(builder) -> None:
        builder.copy(connection, query, partition=partition, params=params)
        builder.keep_others = partition is not None
    _store(connection, warehouse, table, "month" if partition is not None else None, write)


def _store(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, table: str, partition_by: str | None,
           write) -> None:
    """Write a new version of `table` with `write(builder)`. A query that runs out of the session's
    memory (aggregates over many groups hold state per thread) is run again on one thread."""
    for attempt in (1, 2):
        try:
            with warehouse.build_table(table, partition_by) as builder:
                write(builder)
            return
        except duckdb.OutOfMemoryException:
            if attempt == 2:
                raise
            connection.execute("SET threads = 1")


# A summary whose inputs hold more rows than this is computed over a part of the runs at a time:
# DuckDB's hash aggregates over text states (arg_max of a VARCHAR) do not spill to disk, so what
# one query holds must fit in the session's memory whatever the store's size. Every summary
# groups within a run, so parts of whole runs give the same rows.
PART_ROWS = 250_000

# How each summary orders its runs, so that its parts, stored one after the other, are the table
# in SUMMARY_ORDER: the SQL of (run, k), the runs sorted by k (default: by run itself).
# `{whole}` is the prefix of the inputs' names as stored.
RUN_KEYS = {t.TASKS: f'SELECT run, min((ts_unix, rid)) AS k FROM "{{whole}}{t.PLANS}" GROUP BY run'}
# a column numbered 1, 2, ... over the whole table (each part numbers its own rows from 1)
NUMBERED = {t.TASKS: "task_order"}


def copy_summaries(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, done=lambda: None, *,
                   part_rows: int = PART_ROWS) -> None:
    """Compute and store the summary tables from a session with a view per input of SUMMARIES; DuckDB
    writes each table's Parquet file itself, straight from the query (or, when the inputs hold more
    than `part_rows` rows, one file per part of the runs). Each is then a view of the table as
    stored (forge_tasks reads forge_attempts and forge_decisions)."""
    for table, query, inputs in SUMMARIES:
        counts = " + ".join(f'(SELECT count(*) FROM "{name}")' for name in inputs)
        ((total,),) = connection.execute(f"SELECT {counts}").fetchall()
        if total <= part_rows:
            store_query(connection, warehouse, table, f"{typed_sql(table, query_text(query))} ORDER BY {SUMMARY_ORDER[table]}")
        else:
            _store_in_parts(connection, warehouse, table, query, inputs, part_rows)
        connection.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {warehouse.select_sql(table)}')
        done()


def _store_in_parts(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, table: str, query: str,
                    inputs: tuple[str, ...], part_rows: int) -> None:
    """Store summary `table` computed over parts of the runs of about `part_rows` input rows each (a
    run is never split), in the order of RUN_KEYS, one file per part. A session of its own (a cursor
    of the same database: same memory limit and spill directory) holds the inputs as stored and,
    under their names, views narrowed to the runs of the part at hand."""
    session = connection.cursor()
    try:
        for name in inputs:
            source = warehouse.select_sql(name) if warehouse.has_table(name) else _empty_select(name)
            session.execute(f'CREATE TEMP VIEW "whole_{name}" AS {source}')
        runs = " UNION ALL ".join(f'SELECT run FROM "whole_{name}"' for name in inputs)
        key = RUN_KEYS.get(table, "SELECT run, run AS k FROM weights").format(whole="whole_")
        session.execute(f"""CREATE TEMP TABLE summary_parts AS
            WITH weights AS (SELECT run, count(*) AS n FROM ({runs}) GROUP BY run),
            keyed AS (SELECT w.run, w.n, r.k FROM weights w LEFT JOIN ({key}) r ON r.run IS NOT DISTINCT FROM w.run),
            by_key AS (SELECT k, sum(n) AS n FROM keyed GROUP BY k),
            parted AS (SELECT k, coalesce(sum(n) OVER (ORDER BY k ASC NULLS LAST
                                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                                 // {int(part_rows)} AS part
                       FROM by_key)
            SELECT keyed.run, parted.part FROM keyed JOIN parted ON parted.k IS NOT DISTINCT FROM keyed.k""")
        parts = [part for (part,) in session.execute("SELECT DISTINCT part FROM summary_parts ORDER BY part").fetchall()]
        session.execute("CREATE TEMP TABLE part_runs (run VARCHAR)")
        for name in inputs:
            session.execute(f'CREATE TEMP VIEW "{name}" AS SELECT x.* FROM "whole_{name}" x '
                            "SEMI JOIN part_runs p ON x.run IS NOT DISTINCT FROM p.run")
        numbered = NUMBERED.get(table)

        def write(builder) -> None:
            offset = 0
            for number, part in enumerate(parts):
                session.execute("DELETE FROM part_runs")
                session.execute("INSERT INTO part_runs SELECT run FROM summary_parts WHERE part = ?", [part])
                source = query_text(query)
                if numbered is not None:
                    source = f'SELECT * REPLACE ("{numbered}" + {offset} AS "{numbered}") FROM ({source}) q'
                offset += builder.copy(session, f"{typed_sql(table, source)} ORDER BY {SUMMARY_ORDER[table]}",
                                       part=number)
        _store(session, warehouse, table, None, write)
    finally:
        session.close()


def summary_inputs() -> list[str]:
    """The tables the summaries are computed from (the summaries read before them aside)."""
    return sorted({name for _, _, needed in SUMMARIES for name in needed} - {table for table, _, _ in SUMMARIES})


def rebuild_summaries(warehouse: Warehouse, *, part_rows: int = PART_ROWS) -> None:
    """Rebuild forge_attempts, forge_decisions and forge_tasks from the per-event tables (over parts
    of the runs of about `part_rows` input rows, see `copy_summaries`); the caller holds the lock."""
    connection = connect(warehouse, summary_inputs())
    try:
        with progress.bar("store forge summaries", len(SUMMARIES)) as bar:
            copy_summaries(connection, warehouse, bar.advance, part_rows=part_rows)
    finally:
        connection.close()


def report_frame(rows: list[dict], table: str) -> pl.DataFrame:
    """A report's rows (dicts) as the frame of table `table`: its columns, in order and type."""
    from ..frames import schema

    columns = t.columns(table)
    if not rows:
        return pl.DataFrame(schema=schema(columns))
    return typed_frame(pl.DataFrame(rows, schema_overrides={k: v for k, v in schema(columns).items()
                                                            if any(k in row for row in rows)},
                                    infer_schema_length=None, strict=False), table)
