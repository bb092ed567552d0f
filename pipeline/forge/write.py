"""Storing what a Forge ingest staged: the per-event tables, the summaries, forge_events, repos, rejections.

The per-event tables are stored first, then the summaries rebuilt from them (`derive.py`), then
forge_events last: it is what tells the next ingest which events are new. Every table is written
by DuckDB itself (`COPY ... TO` into the table's new version, see `Warehouse.build_table`) or,
on a first ingest, made of the files the stage wrote (`DirectWrite`): no table passes through
Python, each write is atomic.
"""
from __future__ import annotations

from datetime import datetime

import polars as pl

from .. import progress
from ..storage import Warehouse
from ..storage.names import quote_path
from . import tables as t
from ..engines import Engine
from .derive import PART_ROWS, SUMMARIES, copy_summaries, store_query, typed_frame, typed_sql
from .staging import EVENT_TABLES, PLAN_PARTS, PLAN_TABLES, Stage, plan_part_columns


def write_new_events(stage: Stage, warehouse: Warehouse, source: str, now: datetime, engine: Engine = Engine(),
                     part_rows: int = PART_ROWS) -> None:
    """Store the new events of `stage`: taken as written on a first ingest, else added to what is stored;
    the summaries computed in parts of about `part_rows` input rows by `engine` (`derive.copy_summaries`)."""
    if stage.direct is not None:
        _publish_direct(stage, engine, part_rows)
    else:
        _add_new_events(stage, warehouse, source, now, engine, part_rows)


def _publish_direct(stage: Stage, engine: Engine, part_rows: int) -> None:
    """A first ingest: every table's new version is made of the files the stage wrote."""
    c, direct, warehouse = stage.connection, stage.direct, stage.direct.warehouse
    tables = [*EVENT_TABLES, *PLAN_TABLES]
    with progress.bar("store forge tables", len(tables) + len(SUMMARIES) + 1) as bar:
        for table in tables:
            direct.publish(table)
            # the summaries read the table as just stored
            c.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {warehouse.select_sql(table)}')
            bar.advance()
        copy_summaries(c, warehouse, bar.advance, part_rows=part_rows, engine=engine)
        direct.publish(t.EVENTS)  # last, once everything derived from it is stored
        bar.advance()


def _add_new_events(stage: Stage, warehouse: Warehouse, source: str, now: datetime, engine: Engine,
                    part_rows: int) -> None:
    """Add the new events to the per-event tables, rebuild the summaries from the stored and the
    new rows, and add the new events to forge_events (one month partition at a time, each write
    atomic). DuckDB writes every Parquet file itself, straight from the staging session (COPY):
    no table passes through Python, and DuckDB keeps its memory under the session's limit."""
    c = stage.connection
    # only the new events (duplicates and conflicts are few)
    c.execute("CREATE OR REPLACE TEMP VIEW not_new AS SELECT position FROM verdicts")
    c.execute("CREATE OR REPLACE TEMP VIEW forge_new AS SELECT * FROM staged_events "
              "WHERE position NOT IN (SELECT position FROM not_new)")
    months = [m for (m,) in c.execute("SELECT DISTINCT month FROM forge_new ORDER BY month").fetchall()]

    new_rows = {table: f"SELECT {', '.join(n for n, _, _ in t.columns(table))} FROM \"staged_{table}\" "
                       "WHERE position NOT IN (SELECT position FROM not_new)"
                for table in EVENT_TABLES}
    for staged, (table, renamed) in PLAN_PARTS.items():
        new_rows[table] = (f"SELECT {plan_part_columns(table, renamed, 'p.')} FROM {staged} p "
                           "WHERE p.position NOT IN (SELECT position FROM not_new)")
    # A stored row of an event that is new again is left out: a run killed after it stored
    # the per-event tables but before forge_events (which is written last) sees those events
    # as new next time, and must not count them twice.
    if any(warehouse.has_table(table) for table in new_rows):
        stage.materialize("new_rids", "SELECT DISTINCT rid FROM forge_new WHERE rid IS NOT NULL")
    with progress.bar("store forge tables", len(new_rows) + len(SUMMARIES)) as bar:
        for table, select in new_rows.items():
            query = typed_sql(table, select)
            if warehouse.has_table(table):
                rid = "plan_rid" if table in PLAN_TABLES else "rid"
                stored = (f"SELECT * FROM ({warehouse.select_sql(table)}) "
                          f"WHERE {rid} NOT IN (SELECT rid FROM new_rids)")
                query = f"{typed_sql(table, stored)} UNION ALL {query}"
            store_query(c, warehouse, table, query)
            # the summaries read the table as just stored
            c.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {warehouse.select_sql(table)}')
            bar.advance()
        copy_summaries(c, warehouse, bar.advance, part_rows=part_rows, engine=engine)
    # forge_events last, once everything derived from it is stored: it is what tells the
    # next ingest which events are new
    event_columns = ", ".join(name for name, _, _ in t.columns(t.EVENTS) if name not in ("source", "ingested_at"))
    fresh = (f"SELECT {event_columns}, $source AS source, $now::TIMESTAMPTZ AS ingested_at FROM forge_new "
             "WHERE month = $month")
    with progress.bar("store forge_events", len(months)) as bar:
        for month in months:
            query = typed_sql(t.EVENTS, fresh)
            previous = warehouse.partitions(t.EVENTS, "month").get(month)
            if previous is not None:
                listed = ", ".join(quote_path(file) for file in warehouse.partition_files(t.EVENTS, "month", [month]))
                # the month is the folder's name, not a column of the files
                stored = f"SELECT *, $month AS month FROM read_parquet([{listed}], hive_partitioning = false)"
                query = f"{typed_sql(t.EVENTS, stored)} UNION ALL {query}"
            store_query(c, warehouse, t.EVENTS, query, partition=month,
                        params={"source": source, "now": now, "month": month})
            bar.advance()


def write_repos(warehouse: Warehouse, repos: dict[str, str], source: str, now: datetime) -> int:
    current = warehouse.read(t.REPOS)
    if not repos:
        if current is None:
            warehouse.write_table(t.REPOS, typed_frame(pl.DataFrame(), t.REPOS))
        return 0
    fresh = typed_frame(
        pl.DataFrame({"repo": list(repos), "path": list(repos.values()), "source": source, "ingested_at": now}),
        t.REPOS,
    )
    if current is not None:
        current = typed_frame(current, t.REPOS)
        unchanged = current.join(fresh.select("repo", "path"), on=["repo", "path"], how="semi")
        if unchanged.height == fresh.height:
            return len(repos)  # nothing new: keep the table as it is
        fresh = pl.concat([current.filter(~pl.col("repo").is_in(fresh["repo"].implode())), fresh])
    warehouse.write_table(t.REPOS, fresh.sort("repo"))
    return len(repos)


def write_rejections(warehouse: Warehouse, rejections: list, source: str, now: datetime) -> None:
    """Replace the rows of `source` in forge_rejections with `rejections` (each with line, rid, field, rule)."""
    current = warehouse.read(t.REJECTIONS)
    if current is not None:
        current = typed_frame(current, t.REJECTIONS)
        if not rejections and current.filter(pl.col("source") == source).height == 0:
            return
    elif not rejections:
        warehouse.write_table(t.REJECTIONS, typed_frame(pl.DataFrame(), t.REJECTIONS))
        return
    fresh = pl.DataFrame(
        {
            "source": [source] * len(rejections),
            "line": [r.line for r in rejections],
            "rid": [r.rid for r in rejections],
            "field": [r.field for r in rejections],
            "rule": [r.rule for r in rejections],
            "ingested_at": [now] * len(rejections),
        },
        schema={"source": pl.String, "line": pl.Int64, "rid": pl.String, "field": pl.String, "rule": pl.String,
                "ingested_at": pl.Datetime("us", "UTC")},
    )
    if current is not None:
        fresh = pl.concat([current.filter(pl.col("source") != source), fresh])
    warehouse.write_table(t.REJECTIONS, fresh)
