"""`loopmeter ingest forge STORE`: a Forge store -> `forge_events` and the flat `forge_*` tables.

The flow, batch by batch so memory stays flat whatever the size of the store:

1. `store.py` reads the container (SQLite read-only, or JSON Lines) in batches, in a
   thread of its own so reading overlaps the checking;
2. DuckDB checks each batch and parses each event's data once
   (`forge_*_envelopes.sql`, `forge_stage_events.sql`, `forge_stage_plan_tasks.sql`,
   `forge_stage_route_entries.sql`); the batch's typed rows, rejected ones deleted, go to
   Parquet files in the scratch directory, so the DuckDB session (memory-limited, spilling
   to the scratch directory) holds one batch at a time;
3. staged events are compared by rid with each other and with the events stored before
   (`forge_classify_staged.sql`): a repeated rid with the same content is a duplicate
   (counted), with other content a rejection; the new ones are added to the per-event
   tables (plans, plan tasks, route entries, attempt events, dispatches, merges,
   integrations, acceptances, outcomes);
4. the tables that summarize several events (attempts, decisions, tasks) are rebuilt from
   the stored per-event tables (`derive.py`), then the new events are written into
   `forge_events` one month partition at a time.

Every table is written by DuckDB itself (`COPY ... TO` into the table's new version, see
`Warehouse.build_table`): no table passes through Python, each write is atomic.

Every line or row is accounted for: stored, duplicate, repo mapping, or rejected with
its line (JSON Lines) or rid (SQLite), the field and the rule (`forge_rejections`).
"""
from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb
import polars as pl

from .. import progress
from ..sql import query_text
from ..warehouse import Warehouse
from . import tables as t
from .derive import KNOWN_KINDS, SUMMARIES, copy_summaries, rebuild_summaries, store_query, typed_frame, typed_sql
from .store import BATCH_ROWS, SourceBatch, open_store

# per-event tables: which staged events each holds
EVENT_TABLES: dict[str, str] = {
    t.PLANS: "kind = 'plan'",
    t.ATTEMPT_EVENTS: "kind = 'attempt'",
    t.DISPATCHES: "kind = 'dispatch'",
    t.MERGES: "kind = 'event' AND name = 'merge'",
    t.INTEGRATIONS: "kind = 'event' AND name = 'integrate_advanced'",
    t.ACCEPTANCES: "kind = 'event' AND name = 'accepted'",
    t.OUTCOMES: "kind = 'outcome'",
}
# per-event tables staged from plans: staged table -> (table, {column: staged column})
PLAN_PARTS: dict[str, tuple[str, dict[str, str]]] = {
    "staged_plan_tasks": (t.PLAN_TASKS, {"place": "node"}),
    "staged_route_entries": (t.ROUTE_ENTRIES, {"task_place": "task_node"}),
}
PLAN_TABLES = tuple(table for table, _ in PLAN_PARTS.values())
# what DuckDB may hold in memory while it stages and stores (it spills the rest to the scratch directory)
MEMORY_LIMIT = "384MB"


@dataclass
class Rejection:
    line: int | None
    rid: str | None
    field: str
    rule: str

    def where(self, source: Path) -> str:
        place = f"{source}:{self.line}" if self.line is not None else str(source)
        return place + (f" rid {self.rid}" if self.rid else "")


@dataclass
class IngestResult:
    source: Path
    format: str
    read: int = 0  # rows or non-blank lines seen
    stored: int = 0  # events new to the warehouse
    duplicates: int = 0  # events already stored (or repeated) with the same content
    repo_lines: int = 0
    repos: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)  # stored events per kind
    unknown_kinds: Counter = field(default_factory=Counter)  # stored events of kinds format 1 does not name
    rebuilt: bool = False
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage

    @property
    def rejected(self) -> int:
        return len(self.rejections)

    def as_dict(self) -> dict:
        return {
            "source": str(self.source),
            "format": self.format,
            "read": self.read,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "repoLines": self.repo_lines,
            "repos": self.repos,
            "rejected": self.rejected,
            "kinds": dict(sorted(self.kinds.items())),
            "unknownKinds": dict(sorted(self.unknown_kinds.items())),
            "rebuilt": self.rebuilt,
            "timings": {name: round(seconds, 3) for name, seconds in self.timings.items()},
            "rejections": [
                {"line": r.line, "rid": r.rid, "field": r.field, "rule": r.rule} for r in self.rejections
            ],
        }


def _prefetch(batches: Iterator[SourceBatch], depth: int = 2) -> Iterator[SourceBatch]:
    """Read the next batches in a thread while the current one is checked."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for batch in batches:
                while not stop.is_set():
                    try:
                        items.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
            items.put(done)
        except BaseException as error:  # handed to the consumer, raised there
            items.put(error)
        finally:
            close = getattr(batches, "close", None)
            if close is not None and stop.is_set():
                close()

    worker = threading.Thread(target=produce, name="forge-store-reader", daemon=True)
    worker.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)


class Stage:
    """The scratch area of one ingest. Each batch is checked in a DuckDB session (tables
    `staged_<n>`, `staged_plan_tasks_<n>`, `staged_route_entries_<n>`), its rejected rows
    deleted, and what is kept written to narrow Parquet files in the scratch directory (see
    `files`) before the next batch comes, so the session holds one batch at a time whatever the
    size of the store. A view per file name (`staged_events`, `staged_forge_dispatches`, ...,
    `staged_plan_tasks`, `staged_route_entries`) reads the files of every batch; DuckDB streams
    them and spills to the scratch directory under `memory_limit`."""

    PARTS = ("staged", "staged_plan_tasks", "staged_route_entries")

    @staticmethod
    def files() -> dict[str, str]:
        """Each scratch file of a batch -> the SELECT over the batch's tables (`{n}` its number) that
        fills it: the envelopes of the kept events, the rows of each per-event table (narrow files:
        a kind's fields only), the plans' tasks and routes (parsed already, so without their JSON)."""
        events = ", ".join(name for name, _, _ in t.columns(t.EVENTS) if name not in ("source", "ingested_at"))
        files = {"staged_events": f"SELECT position, {events} FROM staged_{{n}}"}
        for table, where in EVENT_TABLES.items():
            columns = ", ".join(name for name, _, _ in t.columns(table))
            files[f"staged_{table}"] = f"SELECT position, {columns} FROM staged_{{n}} WHERE {where}"
        files["staged_plan_tasks"] = "SELECT * EXCLUDE (route, problem_field, problem_rule) FROM staged_plan_tasks_{n}"
        files["staged_route_entries"] = "SELECT * EXCLUDE (problem_field, problem_rule) FROM staged_route_entries_{n}"
        return files

    def __init__(self, directory: Path, memory_limit: str = MEMORY_LIMIT):
        self.directory = directory
        self.connection = duckdb.connect()
        self.connection.execute("SET TimeZone = 'UTC'")
        self.connection.execute(f"SET temp_directory = '{_sql_text(directory / 'spill')}'")
        self.connection.execute(f"SET memory_limit = '{memory_limit}'")
        self.connection.execute("SET preserve_insertion_order = false")
        for statement in _statements(query_text("forge_json_macros")):
            self.connection.execute(statement)
        self.batches: list[int] = []
        self.rejections: list[tuple] = []  # (position, line, rid, field, rule)

    def _file(self, name: str, number: int) -> Path:
        return self.directory / f"{name}-{number}.parquet"

    def reset(self) -> None:
        for number in self.batches:
            for part in self.PARTS:
                self.connection.execute(f"DROP TABLE IF EXISTS {part}_{number}")
            for name in self.files():
                self._file(name, number).unlink(missing_ok=True)
        self.batches.clear()
        self.rejections.clear()

    def add(self, batch: SourceBatch, repos: dict[str, str]) -> tuple[int, int]:
        """Check one batch and stage it; returns (rows seen, repo lines)."""
        c = self.connection
        number = len(self.batches) and self.batches[-1] + 1
        c.register("forge_batch_frame", batch.frame)
        try:
            if batch.kind == "sqlite" and not batch.binary:
                c.execute("CREATE OR REPLACE TEMP VIEW forge_batch AS "
                          "SELECT *, CAST(NULL AS VARCHAR) AS bad_text FROM forge_batch_frame")
                c.execute(f"CREATE OR REPLACE TEMP VIEW forge_envelopes AS {query_text('forge_sqlite_envelopes')}")
            elif batch.kind == "sqlite":
                c.execute("CREATE OR REPLACE TEMP VIEW forge_raw_batch AS SELECT * FROM forge_batch_frame")
                c.execute(f"CREATE OR REPLACE TEMP TABLE forge_batch_decoded AS {query_text('forge_decode_sqlite_batch')}")
                c.execute("CREATE OR REPLACE TEMP VIEW forge_batch AS SELECT * FROM forge_batch_decoded")
                c.execute(f"CREATE OR REPLACE TEMP VIEW forge_envelopes AS {query_text('forge_sqlite_envelopes')}")
            else:
                c.execute("CREATE OR REPLACE TEMP VIEW forge_batch AS SELECT * FROM forge_batch_frame")
                c.execute(f"CREATE OR REPLACE TEMP TABLE forge_jsonl_envelopes AS {query_text('forge_jsonl_envelopes')}")
                c.execute("CREATE OR REPLACE TEMP VIEW forge_envelopes AS SELECT * FROM forge_jsonl_envelopes")
            staged, plan_tasks, routes = (f"{part}_{number}" for part in self.PARTS)
            c.execute(f"CREATE TEMP TABLE {staged} AS {query_text('forge_stage_events')}")
            c.execute("CREATE OR REPLACE TEMP VIEW forge_staged_plans AS SELECT position, rid, run, ts_unix, revision, "
                      f"tasks FROM {staged} WHERE kind = 'plan' AND problem_field IS NULL AND tasks IS NOT NULL")
            c.execute(f"CREATE TEMP TABLE {plan_tasks} AS {query_text('forge_stage_plan_tasks')}")
            c.execute("CREATE OR REPLACE TEMP VIEW forge_staged_plan_tasks AS SELECT * FROM "
                      f"{plan_tasks} WHERE problem_field IS NULL AND route IS NOT NULL")
            c.execute(f"CREATE TEMP TABLE {routes} AS {query_text('forge_stage_route_entries')}")
            self.batches.append(number)
            # a plan is rejected for the first problem among its tasks (document order), then its routes
            c.execute(
                f"""CREATE OR REPLACE TEMP TABLE plan_problems AS
                SELECT position, arg_min(problem_field, (node, step, entry)) AS problem_field,
                       arg_min(problem_rule, (node, step, entry)) AS problem_rule
                FROM (SELECT position, node, 0 AS step, 0 AS entry, problem_field, problem_rule
                      FROM {plan_tasks} WHERE problem_field IS NOT NULL
                      UNION ALL
                      SELECT position, task_node, 1, entry, problem_field, problem_rule
                      FROM {routes} WHERE problem_field IS NOT NULL)
                GROUP BY position"""
            )
            self.rejections += c.sql(
                f"""SELECT position, line, rid, problem_field, problem_rule FROM forge_envelopes WHERE problem_field IS NOT NULL
                UNION ALL SELECT position, line, rid, problem_field, problem_rule FROM {staged} WHERE problem_field IS NOT NULL
                UNION ALL SELECT s.position, s.line, s.rid, p.problem_field, p.problem_rule
                          FROM {staged} s JOIN plan_problems p USING (position)"""
            ).fetchall()
            rejected = ("position IN (SELECT position FROM plan_problems) "
                        f"OR position IN (SELECT position FROM {staged} WHERE problem_field IS NOT NULL)")
            for table in (plan_tasks, routes, staged):
                c.execute(f"DELETE FROM {table} WHERE {rejected}")
            for repo, path in c.sql(
                "SELECT repo, repo_path FROM forge_envelopes WHERE repo_line AND problem_field IS NULL ORDER BY position"
            ).fetchall():
                repos[repo] = path
            seen, repo_lines = c.sql(
                "SELECT count(*), count(*) FILTER (WHERE repo_line AND problem_field IS NULL) FROM forge_envelopes"
            ).fetchall()[0]
            for name, select in self.files().items():  # out of the session: only one batch is ever held
                c.execute(f"COPY ({select.format(n=number)}) TO '{_sql_text(self._file(name, number))}' (FORMAT parquet)")
            for part in self.PARTS:
                c.execute(f"DROP TABLE {part}_{number}")
        finally:
            for view in ("forge_envelopes", "forge_batch", "forge_raw_batch"):
                c.execute(f"DROP VIEW IF EXISTS {view}")
            c.unregister("forge_batch_frame")
        return seen + len(batch.rejected), repo_lines

    def materialize(self, name: str, query: str) -> None:
        """The rows of `query` as the view `name` over a scratch Parquet file: DuckDB holds no
        table in memory however many rows it has."""
        path = self.directory / f"{name}.parquet"
        self.connection.execute(f"COPY ({query}) TO '{_sql_text(path)}' (FORMAT parquet)")
        self.connection.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM read_parquet('{_sql_text(path)}')")

    def _read(self, name: str) -> str:
        return "read_parquet([" + ", ".join(f"'{_sql_text(self._file(name, n))}'" for n in self.batches) + "])"

    def classify(self, warehouse: Warehouse) -> None:
        """verdicts(position, line, rid, kind, verdict, was_stored, other_line) of the staged events that
        are not new (duplicates and conflicts), and new_kinds(kind, events) of those that are."""
        c = self.connection
        if not self.batches:  # nothing was read: empty staging files of the right shape
            self.add(SourceBatch("sqlite", pl.DataFrame(schema=_EMPTY_SQLITE_BATCH)), {})
        for name in self.files():
            c.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT * FROM {self._read(name)}')
        c.execute("CREATE OR REPLACE TEMP VIEW forge_staged AS SELECT * FROM staged_events")
        if warehouse.has_table(t.EVENTS):
            c.execute(f"CREATE OR REPLACE TEMP VIEW forge_stored AS {warehouse.view_sql(t.EVENTS, absolute=True)}")
        else:
            c.execute("CREATE OR REPLACE TEMP VIEW forge_stored AS "
                      "SELECT *, CAST(NULL AS VARCHAR) AS source FROM forge_staged WHERE false")
        if not warehouse.has_table(t.EVENTS) and not c.execute(
                "SELECT count(*) FROM (SELECT rid FROM forge_staged GROUP BY rid HAVING count(*) > 1)").fetchall()[0][0]:
            # a first ingest without a repeated rid: every event is new, nothing to compare
            self.materialize("verdicts", "SELECT position, line, rid, kind, CAST(NULL AS VARCHAR) AS verdict, "
                                         "false AS was_stored, line AS other_line FROM forge_staged WHERE false")
        else:
            # a file, not a table of the session: a second ingest of a large store repeats every event
            self.materialize("verdicts", query_text("forge_classify_staged"))
        c.execute("CREATE OR REPLACE TEMP TABLE new_kinds AS SELECT kind, count(*) AS events FROM forge_staged "
                  "WHERE position NOT IN (SELECT position FROM verdicts) GROUP BY kind")


_EMPTY_SQLITE_BATCH = {"position": pl.Int64, "rid": pl.String, "kind": pl.String, "src": pl.String, "ts": pl.Float64,
                       "run": pl.String, "task": pl.String, "repo": pl.String, "mode": pl.String, "data": pl.String}


def _sql_text(value: object) -> str:
    """`value` as the inside of a SQL string literal."""
    return str(value).replace("'", "''")


def _statements(text: str) -> list[str]:
    """The statements of a SQL file of definitions (split at semicolons ending a line)."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [part.strip() for part in body.split(";\n") if part.strip().rstrip(";")]


def ingest_forge(
    warehouse: Warehouse,
    store_path: Path,
    *,
    busy_timeout: float = 5.0,
    batch_rows: int = BATCH_ROWS,
) -> IngestResult:
    """Load a Forge store into `warehouse` (the caller holds the warehouse lock)."""
    store_path = Path(store_path)
    container, batches = open_store(store_path, busy_timeout=busy_timeout, batch_rows=batch_rows)
    source = store_path.resolve()
    result = IngestResult(source=source, format=container.format)
    now = datetime.now(timezone.utc)
    repos: dict[str, str] = dict(container.repos)
    early: list[Rejection] = []
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now_ = time.perf_counter()
        result.timings[name] = result.timings.get(name, 0.0) + now_ - clock
        clock = now_

    with warehouse.scratch() as scratch:
        stage = Stage(Path(scratch))
        try:
            with progress.bar(f"ingest forge {store_path.name}", None) as bar:
                for batch in _prefetch(batches):
                    lap("read")
                    if batch.kind == "restart":  # the SQLite text was not all UTF-8: read again as bytes
                        stage.reset()
                        early.clear()
                        result.read = result.repo_lines = 0
                        continue
                    early += [Rejection(*row) for row in batch.rejected]
                    seen, repo_lines = stage.add(batch, repos)
                    result.read += seen
                    result.repo_lines += repo_lines
                    bar.advance(seen)
                    lap("check")
            result.rejections = early + [Rejection(line, rid, f, rule) for _, line, rid, f, rule in sorted(
                stage.rejections, key=lambda row: row[0])]
            stage.classify(warehouse)
            _count(stage.connection, result)
            lap("classify")
            if result.stored:
                _write_new_events(stage, warehouse, str(source), now)
            lap("store events")
        finally:
            stage.connection.close()
    result.repos = _write_repos(warehouse, repos, str(source), now)
    _write_rejections(warehouse, result, str(source), now)
    summaries = (t.ATTEMPTS, t.DECISIONS, t.TASKS)
    if not result.stored and not all(warehouse.has_table(name) for name in (*EVENT_TABLES, *PLAN_TABLES, *summaries)):
        for table in (*EVENT_TABLES, *PLAN_TABLES):  # nothing new and nothing before: the tables, empty
            if not warehouse.has_table(table):
                warehouse.write_table(table, typed_frame(pl.DataFrame(), table))
        rebuild_summaries(warehouse)
    result.rebuilt = bool(result.stored)
    lap("summaries")
    return result


def _count(connection: duckdb.DuckDBPyConnection, result: IngestResult) -> None:
    for line, rid, other_source, other_line in connection.sql(
        """WITH conflicts AS (SELECT * FROM verdicts WHERE verdict = 'conflict'),
                sources AS (SELECT rid, any_value(source) AS source FROM forge_stored
                            WHERE rid IN (SELECT rid FROM conflicts WHERE was_stored) GROUP BY rid)
           SELECT c.line, c.rid, CASE WHEN c.was_stored THEN s.source END, c.other_line
           FROM conflicts c LEFT JOIN sources s ON s.rid = c.rid ORDER BY c.position"""
    ).fetchall():
        if other_source is not None:
            first = other_source + (f":{other_line}" if other_line is not None else "")
        else:
            first = f"line {other_line}" if other_line is not None else "an earlier row"
        result.rejections.append(Rejection(
            line, rid, "rid", f"repeats the rid of an event already loaded with other content ({first}); the first is kept"))
    for (count,) in connection.sql("SELECT count(*) FROM verdicts WHERE verdict = 'duplicate'").fetchall():
        result.duplicates += count
    for kind, count in connection.sql("SELECT kind, events FROM new_kinds").fetchall():
        result.kinds[kind] += count
        if kind not in KNOWN_KINDS:
            result.unknown_kinds[kind] += count
    result.stored = sum(result.kinds.values())


def _write_new_events(stage: Stage, warehouse: Warehouse, source: str, now: datetime) -> None:
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
        names = ", ".join(f"p.{renamed.get(name, name)} AS {name}" for name, _, _ in t.columns(table))
        new_rows[table] = f"SELECT {names} FROM {staged} p WHERE p.position NOT IN (SELECT position FROM not_new)"
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
                stored = (f"SELECT * FROM ({warehouse.view_sql(table, absolute=True)}) "
                          f"WHERE {rid} NOT IN (SELECT rid FROM new_rids)")
                query = f"{typed_sql(table, stored)} UNION ALL {query}"
            store_query(c, warehouse, table, query)
            # the summaries read the table as just stored
            c.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {warehouse.view_sql(table, absolute=True)}')
            bar.advance()
        copy_summaries(c, warehouse, bar.advance)
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
                location = str(previous / "*.parquet").replace("'", "''")
                stored = f"SELECT * FROM read_parquet('{location}', hive_partitioning = false, union_by_name = true)"
                query = f"{typed_sql(t.EVENTS, stored)} UNION ALL {query}"
            store_query(c, warehouse, t.EVENTS, query, partition=month,
                        params={"source": source, "now": now, "month": month})
            bar.advance()


def _write_repos(warehouse: Warehouse, repos: dict[str, str], source: str, now: datetime) -> int:
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


def _write_rejections(warehouse: Warehouse, result: IngestResult, source: str, now: datetime) -> None:
    current = warehouse.read(t.REJECTIONS)
    if current is not None:
        current = typed_frame(current, t.REJECTIONS)
        if not result.rejections and current.filter(pl.col("source") == source).height == 0:
            return
    elif not result.rejections:
        warehouse.write_table(t.REJECTIONS, typed_frame(pl.DataFrame(), t.REJECTIONS))
        return
    fresh = pl.DataFrame(
        {
            "source": [source] * result.rejected,
            "line": [r.line for r in result.rejections],
            "rid": [r.rid for r in result.rejections],
            "field": [r.field for r in result.rejections],
            "rule": [r.rule for r in result.rejections],
            "ingested_at": [now] * result.rejected,
        },
        schema={"source": pl.String, "line": pl.Int64, "rid": pl.String, "field": pl.String, "rule": pl.String,
                "ingested_at": pl.Datetime("us", "UTC")},
    )
    if current is not None:
        fresh = pl.concat([current.filter(pl.col("source") != source), fresh])
    warehouse.write_table(t.REJECTIONS, fresh)
