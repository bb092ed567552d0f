"""The staging of a Forge ingest: each batch of the store checked in DuckDB, what is kept written out.

`Stage` checks one batch at a time (`forge_*_envelopes.sql`, `forge_stage_events.sql`,
`forge_stage_plan_tasks.sql`, `forge_stage_route_entries.sql`), deletes the rejected rows and
writes what is kept to Parquet files in the scratch directory before the next batch comes, so
the DuckDB session (memory-limited, spilling to the scratch directory) holds one batch at a time
whatever the size of the store. It writes either

- narrow staging files (a `position` per event) that `forge_classify_staged.sql` compares with
  the stored events, the new rows then written into the tables (`write.py`); or
- on a first ingest (`DirectWrite`: no Forge table stored yet), each batch's rows as files of the
  tables themselves, typed and compressed as the warehouse stores them, which the tables' new
  versions then take as they are (hard links, no second encoding). Should the store repeat a rid,
  that stage is dropped and the ingest staged again the first way (`Repeated`).
"""
from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterator

import polars as pl

from ..duckdb_module import duckdb
from ..lifetime import usable_cores
from ..sql.queries import query_text
from ..storage import Warehouse, duck
from ..storage.files import remove_tree
from ..storage.names import quote_literal, quote_path
from . import tables as t
from .derive import typed_sql
from .store import SourceBatch

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
# batches checked at once: a batch is one task for DuckDB (too few rows to share among its threads),
# so two sessions keep two cores busy; memory holds two batches, not one
STAGE_WORKERS = 2
# DuckDB threads per session while batches are checked: the sessions share the cores (more threads
# than cores only switch between each other: about 1.3 s more CPU for a million events on two cores)
CHECK_THREADS = max(1, usable_cores() // STAGE_WORKERS)


class Repeated(Exception):
    """A first ingest's store repeats a rid: its events must be compared (staged again, narrow)."""


def prefetch(batches: Iterator[SourceBatch], depth: int = 2) -> Iterator[SourceBatch]:
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
    finished = False
    try:
        while True:
            item = items.get()
            if item is done:
                finished = True
                return
            if isinstance(item, BaseException):
                finished = True
                raise item
            yield item
    finally:
        stop.set()
        if finished:
            worker.join(timeout=5)
        else:
            # stopped early (Ctrl-C, an error while checking): the reader is told to stop and not waited
            # for (SQLite ends the statement it runs at its next progress check; the thread is a daemon)
            cancel = getattr(batches, "cancel", None)
            if cancel is not None:
                cancel()


def plan_part_columns(table: str, renamed: dict[str, str], alias: str = "") -> str:
    """The columns of a per-event table staged from plans, as the SELECT list over its staged table."""
    return ", ".join(f"{alias}{renamed.get(name, name)} AS {name}" for name, _, _ in t.columns(table))


# zstd's level for the tables' files written while the store is read, when CPU is what bounds the ingest:
# level 1 costs about a fifth less CPU than DuckDB's default (3) for files about 10 % larger
ZSTD_LEVEL = 1


class DirectWrite:
    """The files of the tables a first ingest writes, batch by batch: each per-event table's rows
    of batch n in `<table>/part-<n>.parquet`, forge_events in `forge_events/month=<m>/part-<n>.parquet`,
    all written as the warehouse stores a table (`Warehouse.copy_table_file`), to be taken whole into
    the tables' new versions (`publish`)."""

    def __init__(self, warehouse: Warehouse, directory: Path, source: str, now: datetime):
        self.warehouse, self.directory, self.source, self.now = warehouse, directory, source, now
        self.files: dict[str, list[tuple[str | None, Path, int]]] = {}  # table -> (month, file, rows)

    def reset(self) -> None:
        remove_tree(self.directory)
        self.files.clear()

    def _write(self, c: duckdb.DuckDBPyConnection, table: str, number: int, query: str,
               month: str | None = None, params: dict | None = None) -> tuple[str, str | None, Path, int]:
        folder = self.directory / table / (f"month={month}" if month is not None else "")
        path = folder / f"part-{number}.parquet"
        rows = self.warehouse.copy_table_file(c, typed_sql(table, query), path, table, params, ZSTD_LEVEL)
        return table, month, path, rows

    def write_batch(self, c: duckdb.DuckDBPyConnection, number: int) -> list[tuple[str, str | None, Path, int]]:
        """Write the kept rows of batch `number` (tables staged_<n>, staged_plan_tasks_<n>,
        staged_route_entries_<n> of the session `c`); returns the files, to be `add`ed in batch order."""
        staged = f"staged_{number}"
        written = [self._write(c, table, number, f"SELECT * FROM {staged} WHERE {where}")
                   for table, where in EVENT_TABLES.items()]
        written += [self._write(c, table, number, f"SELECT {plan_part_columns(table, renamed)} FROM {part}_{number}")
                    for part, (table, renamed) in PLAN_PARTS.items()]
        events = "SELECT *, $source AS source, $now::TIMESTAMPTZ AS ingested_at FROM {staged} WHERE month = $month"
        for (month,) in c.execute(f"SELECT DISTINCT month FROM {staged} ORDER BY month").fetchall():
            written.append(self._write(c, t.EVENTS, number, events.format(staged=staged), month,
                                       {"source": self.source, "now": self.now, "month": month}))
        return written

    def add(self, written: list[tuple[str, str | None, Path, int]]) -> None:
        for table, month, path, rows in written:
            self.files.setdefault(table, []).append((month, path, rows))

    def event_files(self) -> list[Path]:
        return [path for _, path, _ in self.files.get(t.EVENTS, [])]

    def publish(self, table: str) -> None:
        """Publish the new version of `table` made of its files (those holding rows; one empty file
        carries the columns of a table without rows)."""
        files = self.files.get(table, [])
        kept = [(month, path) for month, path, rows in files if rows] or [(month, path) for month, path, _ in files[:1]]
        with self.warehouse.build_table(table, "month" if table == t.EVENTS else None) as builder:
            for month, path in kept:
                builder.adopt(path, partition=month)


@dataclass
class StagedBatch:
    """What checking one batch found, merged into the stage in batch order (`Stage.accept`)."""

    number: int
    seen: int  # rows or lines read
    repo_lines: int
    rejections: list[tuple]  # (position, line, rid, field, rule)
    repos: list[tuple[int, int | None, str, str]]  # JSON Lines repo lines: (position, line, repo, path), in source order
    written: list[tuple[str, str | None, Path, int]] = field(default_factory=list)  # DirectWrite files


class Stage:
    """The scratch area of one ingest. Each batch is checked in a DuckDB session of its own
    (a cursor of the stage's database, per thread: `check` runs for up to `WORKERS` batches at
    once, a batch being smaller than what DuckDB splits among its threads), in tables
    `staged_<n>`, `staged_plan_tasks_<n>`, `staged_route_entries_<n>`; its rejected rows are
    deleted, and what is kept written to Parquet files in the scratch directory before the
    session takes another batch: the narrow files of `files` (a view per file name,
    `staged_events`, `staged_forge_dispatches`, ..., `staged_plan_tasks`, `staged_route_entries`,
    reads the files of every batch; DuckDB streams them and spills to the scratch directory under
    `memory_limit`), or, with `direct`, the files of the tables themselves."""

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

    def __init__(self, directory: Path, root: Path, memory_limit: str = MEMORY_LIMIT, direct: DirectWrite | None = None):
        self.directory = directory
        self.direct = direct
        self.connection = duck.connect(root, memory_limit=memory_limit, threads=CHECK_THREADS,
                                       temp_directory=directory / "spill", keep_order=False, lock=False)
        self._session(self.connection)
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursors_lock = threading.Lock()
        self.batches: list[int] = []
        self.rejections: list[tuple] = []  # (position, line, rid, field, rule)
        self.repo_lines: dict[str, int | None] = {}  # repo -> the line of the repo line that mapped it
        self.next_number = 0

    @staticmethod
    def _session(c: duckdb.DuckDBPyConnection) -> None:
        """What each session needs (its temporary objects: the JSON macros)."""
        for statement in _statements(query_text("forge_json_macros")):
            c.execute(statement)

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's session of the stage's database (same memory limit and spill directory)."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self.connection.cursor()
            self._session(cursor)
            self._local.cursor = cursor
            with self._cursors_lock:
                self._cursors.append(cursor)
        return cursor

    def close(self) -> None:
        """End every session; a batch still being checked (the ingest stopped early) is interrupted."""
        for session in (*self._cursors, self.connection):
            session.interrupt()
            try:
                session.close()
            except duckdb.Error:  # still busy in a thread the ingest stopped waiting for: it ends with the process
                pass

    def _file(self, name: str, number: int) -> Path:
        return self.directory / f"{name}-{number}.parquet"

    def checked(self) -> None:
        """Every batch is checked: what follows (one query at a time) has all of DuckDB's threads."""
        self.connection.execute("RESET threads")

    def reset(self) -> None:
        """Forget every batch (none may be being checked)."""
        for number in range(self.next_number):
            for name in self.files():
                self._file(name, number).unlink(missing_ok=True)
        if self.direct is not None:
            self.direct.reset()
        self.batches.clear()
        self.rejections.clear()
        self.repo_lines.clear()
        self.next_number = 0

    def add(self, batch: SourceBatch, repos: dict[str, str]) -> tuple[int, int]:
        """Check one batch and stage it; returns (rows seen, repo lines)."""
        staged = self.check(batch, self.take_number())
        self.accept(staged, repos)
        return staged.seen, staged.repo_lines

    def take_number(self) -> int:
        """The number of the next batch (batches are numbered in source order)."""
        self.next_number += 1
        return self.next_number - 1

    def accept(self, staged: StagedBatch, repos: dict[str, str]) -> None:
        """Merge what checking a batch found; called in batch order."""
        self.batches.append(staged.number)
        self.rejections += staged.rejections
        for position, line, repo, path in staged.repos:
            known = repos.get(repo)
            if known is None:
                repos[repo] = path
                self.repo_lines[repo] = line
            elif known != path:  # as a SQLite store's repos rows: the first mapping is kept
                first = self.repo_lines.get(repo)
                where = f"line {first}" if first is not None else "the store's repos"
                self.rejections.append((position, line, None, "repo", f"a repo line repeats repo {json.dumps(repo)} with another "
                                        f"path ({json.dumps(path)}; {where} has {json.dumps(known)}); the first is kept"))
                staged.repo_lines -= 1
        if self.direct is not None:
            self.direct.add(staged.written)

    def check(self, batch: SourceBatch, number: int) -> StagedBatch:
        """Check batch `number` and write what it keeps (thread-safe: a session per thread)."""
        c = self._cursor()
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
            rejections = c.sql(
                f"""SELECT position, line, rid, problem_field, problem_rule FROM forge_envelopes WHERE problem_field IS NOT NULL
                UNION ALL SELECT position, line, rid, problem_field, problem_rule FROM {staged} WHERE problem_field IS NOT NULL
                UNION ALL SELECT s.position, s.line, s.rid, p.problem_field, p.problem_rule
                          FROM {staged} s JOIN plan_problems p USING (position)"""
            ).fetchall()
            rejected = ("position IN (SELECT position FROM plan_problems) "
                        f"OR position IN (SELECT position FROM {staged} WHERE problem_field IS NOT NULL)")
            for table in (plan_tasks, routes, staged):
                c.execute(f"DELETE FROM {table} WHERE {rejected}")
            repos = c.sql("SELECT position, line, repo, repo_path FROM forge_envelopes "
                          "WHERE repo_line AND problem_field IS NULL ORDER BY position").fetchall()
            seen, repo_lines = c.sql(
                "SELECT count(*), count(*) FILTER (WHERE repo_line AND problem_field IS NULL) FROM forge_envelopes"
            ).fetchall()[0]
            staged_batch = StagedBatch(number, seen + len(batch.rejected), repo_lines, rejections, repos)
            # out of the session: it holds one batch at a time
            if self.direct is not None:
                staged_batch.written = self.direct.write_batch(c, number)
            else:
                for name, select in self.files().items():
                    c.execute(f"COPY ({select.format(n=number)}) TO {quote_literal(str(self._file(name, number)))} (FORMAT parquet)")
        finally:
            for part in self.PARTS:
                c.execute(f"DROP TABLE IF EXISTS {part}_{number}")
            for view in ("forge_envelopes", "forge_batch", "forge_raw_batch"):
                c.execute(f"DROP VIEW IF EXISTS {view}")
            c.unregister("forge_batch_frame")
        return staged_batch

    def materialize(self, name: str, query: str) -> None:
        """The rows of `query` as the view `name` over a scratch Parquet file: DuckDB holds no
        table in memory however many rows it has."""
        path = self.directory / f"{name}.parquet"
        self.connection.execute(f"COPY ({query}) TO {quote_literal(str(path))} (FORMAT parquet)")
        self.connection.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM read_parquet({quote_path(path)})")

    def _read(self, name: str) -> str:
        return "read_parquet([" + ", ".join(quote_path(self._file(name, n)) for n in self.batches) + "])"

    def classify(self, warehouse: Warehouse) -> None:
        """verdicts(position, line, rid, kind, verdict, was_stored, other_line) of the staged events that
        are not new (duplicates and conflicts), and new_kinds(kind, events) of those that are. A direct
        stage whose events repeat a rid raises `Repeated`."""
        c = self.connection
        if not self.batches:  # nothing was read: empty staging files of the right shape
            self.add(SourceBatch("sqlite", pl.DataFrame(schema=_EMPTY_SQLITE_BATCH)), {})
        if self.direct is not None:
            files = ", ".join(quote_path(path) for path in self.direct.event_files())
            c.execute("CREATE OR REPLACE TEMP VIEW forge_staged AS " + (
                f"SELECT rid, kind FROM read_parquet([{files}], hive_partitioning = false)" if files
                else "SELECT CAST(NULL AS VARCHAR) AS rid, CAST(NULL AS VARCHAR) AS kind WHERE false"))
            if c.execute("SELECT count(*) FROM (SELECT rid FROM forge_staged GROUP BY rid HAVING count(*) > 1)"
                         ).fetchall()[0][0]:
                raise Repeated()
            c.execute("CREATE OR REPLACE TEMP VIEW forge_stored AS SELECT CAST(NULL AS VARCHAR) AS rid, "
                      "CAST(NULL AS VARCHAR) AS source WHERE false")
            c.execute("CREATE OR REPLACE TEMP VIEW verdicts AS SELECT CAST(NULL AS BIGINT) AS position, "
                      "CAST(NULL AS BIGINT) AS line, CAST(NULL AS VARCHAR) AS rid, CAST(NULL AS VARCHAR) AS kind, "
                      "CAST(NULL AS VARCHAR) AS verdict, false AS was_stored, CAST(NULL AS BIGINT) AS other_line "
                      "WHERE false")
            c.execute("CREATE OR REPLACE TEMP TABLE new_kinds AS SELECT kind, count(*) AS events FROM forge_staged "
                      "GROUP BY kind")
            return
        for name in self.files():
            c.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT * FROM {self._read(name)}')
        c.execute("CREATE OR REPLACE TEMP VIEW forge_staged AS SELECT * FROM staged_events")
        if warehouse.has_table(t.EVENTS):
            c.execute(f"CREATE OR REPLACE TEMP VIEW forge_stored AS {warehouse.select_sql(t.EVENTS)}")
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


def _statements(text: str) -> list[str]:
    """The statements of a SQL file of definitions (split at semicolons ending a line)."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [part.strip() for part in body.split(";\n") if part.strip().rstrip(";")]
