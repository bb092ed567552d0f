"""`loopmeter ingest forge STORE`: a Forge store -> `forge_events` and the flat `forge_*` tables.

The flow, batch by batch so memory stays flat whatever the size of the store:

1. `store.py` reads the container (SQLite read-only, or JSON Lines) in batches, in a
   thread of its own so reading overlaps the checking;
2. DuckDB checks each batch and parses each event's data once (`staging.py`); the batch's
   typed rows, rejected ones deleted, go to Parquet files in the scratch directory, so the
   DuckDB session (memory-limited, spilling to the scratch directory) holds one batch at a time;
3. staged events are compared by rid with each other and with the events stored before
   (`forge_classify_staged.sql`): a repeated rid with the same content is a duplicate
   (counted), with other content a rejection; the new ones are added to the per-event
   tables (plans, plan tasks, route entries, attempt events, dispatches, merges,
   integrations, acceptances, outcomes). On a first ingest (no Forge table yet) without a
   repeated rid, there is nothing to compare: the files the stage wrote are the tables' files;
4. the tables that summarize several events (attempts, decisions, tasks) are rebuilt from
   the stored per-event tables (`derive.py`; inputs of more than `part_rows` rows a part of
   whole runs at a time, the parts computed by `engine`: this process, worker processes or
   Spark), then the new events are stored in `forge_events` (`write.py`).

Every line or row is accounted for: stored, duplicate, repo mapping, or rejected with
its line (JSON Lines) or rid (SQLite), the field and the rule (`forge_rejections`).
"""
from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from ..duckdb_module import duckdb
from .. import collector, progress
from ..errors import LoopmeterError, printable, shown_path
from ..engines import Engine
from ..lifetime import thread_pool
from ..storage import Warehouse
from . import tables as t
from .derive import KNOWN_KINDS, PART_ROWS, rebuild_summaries, typed_frame
from .staging import EVENT_TABLES, MEMORY_LIMIT, PLAN_TABLES, STAGE_WORKERS, DirectWrite, Repeated, Stage, prefetch
from .sources import open_store
from .store import BATCH_ROWS
from .write import write_new_events, write_rejections, write_repos


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
    warehouse: Path | None = None  # where the events went
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

    def rejected_summary(self) -> str:
        """What `ingest forge` says last when something was rejected: 'the rest is stored' only when an
        event was stored."""
        said = f"{self.rejected} of {self.read} rejected"
        if self.stored:
            return f"{said}; the rest is stored"
        if self.rejected >= self.read:
            return f"{said}; no event is stored"
        return f"{said}; no new event is stored (the others were stored already or map repositories)"

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


def ingest_forge(
    warehouse: Warehouse,
    store_path: Path,
    *,
    busy_timeout: float = 5.0,
    batch_rows: int = BATCH_ROWS,
    engine: Engine | None = None,
    part_rows: int = PART_ROWS,
) -> IngestResult:
    """Load a Forge store into `warehouse` (the caller holds the warehouse lock); summaries whose
    inputs hold more than `part_rows` rows are computed a part of the runs at a time by `engine`
    (default: this process)."""
    store_path = Path(store_path)
    source = store_path.resolve()
    now = datetime.now(timezone.utc)
    # a first ingest writes the tables' files as it stages (nothing stored to compare with)
    direct = not any(warehouse.has_table(name) for name in (t.EVENTS, *EVENT_TABLES, *PLAN_TABLES))
    timings: dict[str, float] = {}
    # every Forge table it writes is published with the others, at the end: all new, or all as they were
    engine = engine or Engine()
    with warehouse.publishing(), warehouse.scratch() as store_copy:  # where a WAL-mode store is copied to be read
        # the rows read are many small objects and no cycles: the collector's walks are pure cost
        with collector.paused():
            while True:
                container, batches = open_store(store_path, busy_timeout=busy_timeout, batch_rows=batch_rows,
                                                scratch=Path(store_copy))
                result = IngestResult(source=source, format=container.format, timings=timings)
                repos: dict[str, str] = dict(container.repos)
                try:
                    _stage_and_store(warehouse, store_path, batches, result, repos, now, direct, engine, part_rows)
                    break
                except Repeated:  # the store repeats a rid: stage it again, comparing events
                    direct = False
        clock = time.perf_counter()
        result.repos = write_repos(warehouse, repos, str(source), now)
        write_rejections(warehouse, result.rejections, str(source), now)
        if not result.stored:
            write_empty_tables(warehouse, engine, part_rows)
    result.rebuilt = bool(result.stored)
    timings["summaries"] = timings.get("summaries", 0.0) + time.perf_counter() - clock
    return result


def _rows_of(batch) -> str:
    """Which rows of the store a batch holds, for a message: its lines (JSON Lines) or its rids (SQLite)."""
    frame = pl.from_arrow(batch.frame) if not isinstance(batch.frame, pl.DataFrame) else batch.frame
    if "line" in frame.columns and frame.height:
        return f"lines {frame['line'].min()} to {frame['line'].max()}"
    if "rid" in frame.columns and frame.height:
        first, last = (frame["rid"][at] for at in (0, -1))
        return f"the {frame.height} events from rid {printable(str(first))} to rid {printable(str(last))}"
    return "a batch of events"


def write_empty_tables(warehouse: Warehouse, engine: Engine | None = None, part_rows: int = PART_ROWS) -> None:
    """Nothing new stored: the Forge tables not stored before are written empty, with their columns
    (forge_events too, partitioned by month: one empty file), so every documented table can be queried
    whatever the store held; the summaries are rebuilt when one of their inputs or one of them was missing."""
    summaries = (t.ATTEMPTS, t.DECISIONS, t.TASKS)
    missing = [table for table in (t.EVENTS, *EVENT_TABLES, *PLAN_TABLES) if not warehouse.has_table(table)]
    for table in missing:
        warehouse.write_table(table, typed_frame(pl.DataFrame(), table), partition_by="month" if table == t.EVENTS else None)
    if [table for table in missing if table != t.EVENTS] or not all(warehouse.has_table(name) for name in summaries):
        rebuild_summaries(warehouse, part_rows=part_rows, engine=engine)


def _stage_and_store(warehouse: Warehouse, store_path: Path, batches, result: IngestResult, repos: dict[str, str],
                     now: datetime, direct: bool, engine: Engine, part_rows: int) -> None:
    """Stage every batch, classify the staged events, store the new ones (raises `Repeated` when a
    direct stage finds a repeated rid: nothing is stored then)."""
    source = str(result.source)
    container_repos = dict(repos)
    early: list[Rejection] = []
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now_ = time.perf_counter()
        result.timings[name] = result.timings.get(name, 0.0) + now_ - clock
        clock = now_

    with warehouse.scratch() as scratch:
        scratch = Path(scratch)
        stage = Stage(scratch, warehouse.root, direct=DirectWrite(warehouse, scratch / "tables", source, now) if direct else None)
        try:
            # (a Ctrl-C does not wait for the batches being checked: `thread_pool`)
            with progress.bar(f"ingest forge {store_path.name}", None) as bar, \
                    thread_pool(STAGE_WORKERS, thread_name_prefix="forge-stage") as pool:
                checking: deque = deque()  # (batch, future of its check), in source order

                def accept_oldest() -> None:
                    batch, checked = checking.popleft()
                    try:
                        staged = checked.result()
                    except duckdb.OutOfMemoryException:
                        raise LoopmeterError(f"{shown_path(store_path)}: {_rows_of(batch)}: checking them takes more "
                                             f"memory than the ingest holds ({MEMORY_LIMIT} a batch; `data` of dense "
                                             "JSON arrays expands far beyond its text), so nothing was stored; "
                                             "ingest the store in smaller parts") from None
                    early.extend(Rejection(*row) for row in batch.rejected)
                    stage.accept(staged, repos)
                    result.read += staged.seen
                    result.repo_lines += staged.repo_lines
                    bar.advance(staged.seen)

                for batch in prefetch(batches, depth=1):
                    lap("read")
                    if batch.kind == "restart":  # the reader starts again (a row the Arrow reader cannot take; text not UTF-8)
                        for _, checked in checking:
                            checked.exception()  # wait; what it found is dropped
                        checking.clear()
                        stage.reset()
                        early.clear()
                        repos.clear()
                        repos.update(container_repos)
                        result.read = result.repo_lines = 0
                        continue
                    checking.append((batch, pool.submit(stage.check, batch, stage.take_number())))
                    while len(checking) >= STAGE_WORKERS:
                        accept_oldest()
                    lap("check")
                while checking:
                    accept_oldest()
                lap("check")
            stage.checked()
            result.rejections = early + [Rejection(line, rid, f, rule) for _, line, rid, f, rule in sorted(
                stage.rejections, key=lambda row: row[0])]
            if result.format == "jsonl":  # every rejection names its line: in line order
                result.rejections.sort(key=lambda r: r.line if r.line is not None else 0)
            stage.classify(warehouse)
            _count(stage.connection, result)
            lap("classify")
            if result.stored:
                write_new_events(stage, warehouse, source, now, engine, part_rows)
            lap("store events")
        finally:
            stage.close()


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
