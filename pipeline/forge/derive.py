"""The Forge tables that summarize several events, rebuilt from the per-event tables.

`forge_attempts` (from attempt events), `forge_decisions` (from the route entries of every
plan revision) and `forge_tasks` (one record per planned task: what routing needs) are
each one named query, run in order in one DuckDB session and written whole, so
`report routing` reads one small table instead of the events. Inputs larger than a part
(`PART_ROWS`, `ingest forge --part-rows`) are summarized a part of whole runs at a time
(`compute_part`), by this process, worker processes or Spark (`ingest forge --engine`).
"""
from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

import polars as pl

from ..duckdb_module import duckdb
from .. import progress
from ..engines import Engine, run
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
# a column numbered 1, 2, ... over the whole table (each part numbers its own rows from 1, and a
# part's numbers start after those of the parts before it), with the SQL of (run, n): the rows the
# numbering counts in each run (forge_tasks: its planned tasks, the rows its row_number() numbers)
NUMBERED = {t.TASKS: ("task_order", f'SELECT run, count(*) AS n FROM (SELECT DISTINCT run, task FROM "{{whole}}{t.PLAN_TASKS}") GROUP BY run')}


def copy_summaries(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, done=lambda: None, *,
                   part_rows: int = PART_ROWS, engine: Engine = Engine()) -> None:
    """Compute and store the summary tables from a session with a view per input of SUMMARIES; DuckDB
    writes each table's Parquet file itself, straight from the query (or, when the inputs hold more
    than `part_rows` rows, one file per part of the runs, the parts computed by `engine`). Each is
    then a view of the table as stored (forge_tasks reads forge_attempts and forge_decisions). The
    summaries that read no summary stored in the same round (forge_attempts and forge_decisions)
    have their parts computed together: one pool or Spark session for both."""
    rounds: list[list[tuple[str, str, tuple[str, ...]]]] = [[]]
    for summary in SUMMARIES:
        if set(summary[2]) & {table for table, _, _ in rounds[-1]}:
            rounds.append([])
        rounds[-1].append(summary)
    for summaries in rounds:
        parted = []
        for table, query, inputs in summaries:
            counts = " + ".join(f'(SELECT count(*) FROM "{name}")' for name in inputs)
            ((total,),) = connection.execute(f"SELECT {counts}").fetchall()
            if total <= part_rows:
                store_query(connection, warehouse, table, f"{typed_sql(table, query_text(query))} ORDER BY {SUMMARY_ORDER[table]}")
            else:
                parted.append((table, query, inputs))
        if parted:
            _store_in_parts(connection, warehouse, parted, part_rows, engine)
        for table, _, _ in summaries:
            connection.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {warehouse.select_sql(table)}')
            done()


def _store_in_parts(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse,
                    summaries: list[tuple[str, str, tuple[str, ...]]], part_rows: int, engine: Engine) -> None:
    """Store each summary table computed over parts of the runs of about `part_rows` input rows each
    (a run is never split), in the order of RUN_KEYS, one file per part. Each part's file is written
    by `compute_part`, here or by `engine`'s workers, in a scratch folder, from the inputs as this
    process reads them (a summary stored before, not yet published, included); this process takes
    the files into the tables' new versions in order."""
    root = os.path.abspath(warehouse.root)
    with warehouse.scratch() as scratch, ExitStack() as stack:
        tasks, builders = [], []
        for table, query, inputs in summaries:
            sources = {name: _part_source(warehouse, name) for name in inputs}
            builder = stack.enter_context(warehouse.build_table(table))
            for number, (part_runs, offset) in enumerate(_parts(connection, table, sources, part_rows)):
                file = os.path.join(os.path.abspath(scratch), table, f"part-{number:05d}.parquet")
                tasks.append((root, table, _part_sql(table, query, offset), sources, part_runs, file))
                builders.append(builder)
        for number, _ in enumerate(run(engine, compute_part, tasks, job="loopmeter ingest forge")):
            builders[number].adopt(Path(tasks[number][-1]))  # its name says its place: part-00000.parquet, ...


def _parts(connection: duckdb.DuckDBPyConnection, table: str, sources: dict[str, str],
           part_rows: int) -> list[tuple[list[str | None], int]]:
    """The parts of summary `table`, in order: each part's runs and the offset of its NUMBERED column
    (0 for a table without one). A session of its own (a cursor of the same database) holds the
    inputs, `sources`, and cuts their runs."""
    session = connection.cursor()
    try:
        for name, source in sources.items():
            session.execute(f'CREATE TEMP VIEW "whole_{name}" AS {source}')
        runs = " UNION ALL ".join(f'SELECT run FROM "whole_{name}"' for name in sources)
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
        parts = session.execute("SELECT part, list(run) FROM summary_parts GROUP BY part ORDER BY part").fetchall()
        offsets = [0] * len(parts)
        if table in NUMBERED:
            counted = NUMBERED[table][1].format(whole="whole_")
            numbered = dict(session.execute(f"SELECT s.part, sum(c.n) FROM summary_parts s JOIN ({counted}) c "
                                            "ON c.run IS NOT DISTINCT FROM s.run GROUP BY s.part").fetchall())
            for number, (part, _) in enumerate(parts[:-1]):
                offsets[number + 1] = offsets[number] + int(numbered.get(part) or 0)
        return [(part_runs, offset) for (_, part_runs), offset in zip(parts, offsets)]
    finally:
        session.close()


def _part_sql(table: str, query: str, offset: int) -> str:
    """The typed, ordered SQL of summary `table` over one part, its NUMBERED column starting after `offset`."""
    source = query_text(query)
    if table in NUMBERED:
        column = NUMBERED[table][0]
        source = f'SELECT * REPLACE ("{column}" + {offset} AS "{column}") FROM ({source}) q'
    return f"{typed_sql(table, source)} ORDER BY {SUMMARY_ORDER[table]}"


def _part_source(warehouse: Warehouse, name: str) -> str:
    """The SELECT of input `name` as this process reads it (`Warehouse.select_sql`: its files named one
    by one by absolute path, a version written in this `publishing()` block included), so a worker
    started elsewhere reads the very same files."""
    if not warehouse.has_table(name):
        return _empty_select(name)
    return warehouse.select_sql(name)


def compute_part(root: str, table: str, sql: str, sources: dict[str, str], runs: list[str | None],
                 file: str) -> int:
    """Write the rows of summary `table` over the runs `runs` (one part) as its table file `file` (in
    the warehouse's scratch space), in whatever process the engine runs it: `sql`, the part's typed
    and ordered query, in a DuckDB session confined to the warehouse at `root` where each input
    `name` is `sources[name]` (its SELECT as the driver reads it) narrowed to those runs; DuckDB
    writes the file itself. A query that runs out of the session's memory (aggregates over many
    groups hold state per thread) is run again on one thread. Returns the rows written."""
    warehouse = Warehouse(Path(root))
    connection = duck.connect(Path(root), lock=False)
    try:
        connection.execute("CREATE TEMP TABLE part_runs (run VARCHAR)")
        connection.execute("INSERT INTO part_runs SELECT unnest($runs::VARCHAR[])", {"runs": runs})
        for name, source in sources.items():
            connection.execute(f'CREATE TEMP VIEW "whole_{name}" AS {source}')
            connection.execute(f'CREATE TEMP VIEW "{name}" AS SELECT x.* FROM "whole_{name}" x '
                               "SEMI JOIN part_runs p ON x.run IS NOT DISTINCT FROM p.run")
        try:
            return warehouse.copy_table_file(connection, sql, Path(file), table)
        except duckdb.OutOfMemoryException:
            connection.execute("SET threads = 1")
        return warehouse.copy_table_file(connection, sql, Path(file), table)
    finally:
        connection.close()


def summary_sources() -> dict[str, tuple[str, ...]]:
    """Each summary table and the tables it is computed from."""
    return {table: needed for table, _, needed in SUMMARIES}


def summary_inputs() -> list[str]:
    """The tables the summaries are computed from (the summaries read before them aside)."""
    return sorted({name for _, _, needed in SUMMARIES for name in needed} - {table for table, _, _ in SUMMARIES})


def rebuild_summaries(warehouse: Warehouse, *, part_rows: int = PART_ROWS, engine: Engine = Engine()) -> None:
    """Rebuild forge_attempts, forge_decisions and forge_tasks from the per-event tables (over parts
    of the runs of about `part_rows` input rows computed by `engine`, see `copy_summaries`); the
    caller holds the lock."""
    connection = connect(warehouse, summary_inputs())
    try:
        with progress.bar("store forge summaries", len(SUMMARIES)) as bar:
            copy_summaries(connection, warehouse, bar.advance, part_rows=part_rows, engine=engine)
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
