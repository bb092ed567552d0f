"""`loopmeter ingest forge STORE`: a Forge store -> `forge_events` -> the flat `forge_*` tables.

The flow, batch by batch so memory stays bounded:

1. `store.py` reads the container (SQLite read-only, or JSON Lines) in batches;
2. DuckDB checks each batch (`forge_*_envelopes.sql`, then `forge_event_problems.sql`) and
   stages the well-formed events in a scratch DuckDB file (spills to disk, not RAM);
3. staged events are compared by rid with each other and with the events stored before:
   new ones are written into `forge_events`, one month partition at a time; a repeated rid
   with the same content is a duplicate (counted), with other content a rejection;
4. when anything changed, every flat table is rebuilt from `forge_events` in SQL
   (`derive.py`).

Every line or row is accounted for: stored, duplicate, repo mapping, or rejected with
its line (JSON Lines) or rid (SQLite), the field and the rule (`forge_rejections`).
"""
from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import polars as pl

from .. import progress
from ..sql import query_text
from ..warehouse import Warehouse
from . import tables as t
from .derive import KNOWN_KINDS, rebuild_derived, typed_frame
from .store import BATCH_ROWS, open_store

_STAGED_COLUMNS = "position BIGINT, line BIGINT, rid VARCHAR, kind VARCHAR, src VARCHAR, ts_unix DOUBLE, run VARCHAR, " \
                  "task VARCHAR, repo VARCHAR, mode VARCHAR, name VARCHAR, data VARCHAR"
_CONTENT = ("kind", "src", "ts_unix", "run", "task", "repo", "mode", "data")


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
            "rejections": [
                {"line": r.line, "rid": r.rid, "field": r.field, "rule": r.rule} for r in self.rejections
            ],
        }


def _stage_connection(directory: Path) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect(str(directory / "stage.duckdb"))
    connection.execute("SET TimeZone = 'UTC'")
    connection.execute(f"SET temp_directory = '{directory / 'spill'}'")
    connection.execute(f"CREATE TABLE staged ({_STAGED_COLUMNS})")
    connection.execute("CREATE TABLE rejected (position BIGINT, line BIGINT, rid VARCHAR, field VARCHAR, rule VARCHAR)")
    return connection


def _stage_batch(connection: duckdb.DuckDBPyConnection, batch, repos: dict[str, str]) -> tuple[int, int]:
    """Check one batch and stage it; returns (rows seen, repo lines)."""
    frame = batch.frame
    if batch.kind == "sqlite":
        if batch.binary:
            connection.register("forge_raw_batch", frame)
            connection.execute(f"CREATE OR REPLACE TEMP TABLE forge_batch AS {query_text('forge_decode_sqlite_batch')}")
            connection.unregister("forge_raw_batch")
        else:
            connection.register("forge_batch_frame", frame.with_columns(pl.lit(None, pl.String).alias("bad_text")))
            connection.execute("CREATE OR REPLACE TEMP TABLE forge_batch AS SELECT * FROM forge_batch_frame")
            connection.unregister("forge_batch_frame")
        envelopes = query_text("forge_sqlite_envelopes")
    else:
        connection.register("forge_batch_frame", frame)
        connection.execute("CREATE OR REPLACE TEMP TABLE forge_batch AS SELECT * FROM forge_batch_frame")
        connection.unregister("forge_batch_frame")
        envelopes = query_text("forge_jsonl_envelopes")
    connection.execute(f"CREATE OR REPLACE TEMP TABLE envelopes AS {envelopes}")
    connection.execute(
        "CREATE OR REPLACE TEMP VIEW forge_candidates AS "
        "SELECT position, kind, name, data FROM envelopes WHERE problem_field IS NULL AND NOT repo_line"
    )
    connection.execute(f"CREATE OR REPLACE TEMP TABLE event_problems AS {query_text('forge_event_problems')}")
    connection.execute(
        "INSERT INTO rejected "
        "SELECT position, line, rid, problem_field, problem_rule FROM envelopes WHERE problem_field IS NOT NULL "
        "UNION ALL "
        "SELECT e.position, e.line, e.rid, p.field, p.rule FROM envelopes e JOIN event_problems p USING (position)"
    )
    connection.execute(
        "INSERT INTO staged SELECT e.position, e.line, e.rid, e.kind, e.src, e.ts_unix, e.run, e.task, e.repo, "
        "e.mode, e.name, e.data FROM envelopes e ANTI JOIN event_problems p USING (position) "
        "WHERE e.problem_field IS NULL AND NOT e.repo_line"
    )
    for repo, path in connection.sql(
        "SELECT repo, repo_path FROM envelopes WHERE repo_line AND problem_field IS NULL ORDER BY position"
    ).fetchall():
        repos[repo] = path
    seen, repo_lines = connection.sql("SELECT count(*), count(*) FILTER (WHERE repo_line AND problem_field IS NULL) FROM envelopes").fetchall()[0]
    return seen, repo_lines


def _classify(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse) -> None:
    """Split staged events into new, duplicate and conflicting (by rid)."""
    if warehouse.has_table(t.EVENTS):
        connection.execute(f"CREATE OR REPLACE TEMP VIEW stored AS {warehouse.view_sql(t.EVENTS, absolute=True)}")
    else:
        connection.execute(f"CREATE OR REPLACE TEMP TABLE stored ({_STAGED_COLUMNS}, source VARCHAR)")
    same = " AND ".join(f"s.{c} IS NOT DISTINCT FROM o.{c}" for c in _CONTENT)
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE ranked AS "
        "SELECT *, row_number() OVER (PARTITION BY rid ORDER BY position) AS nth FROM staged"
    )
    connection.execute(
        f"""CREATE OR REPLACE TEMP TABLE verdicts AS
        SELECT s.*, CASE
            WHEN o.rid IS NULL THEN 'new'
            WHEN {same} THEN 'duplicate'
            ELSE 'conflict' END AS verdict,
          o.source AS other_source, o.line AS other_line
        FROM ranked s LEFT JOIN (SELECT rid, {', '.join(_CONTENT)}, source, line FROM stored) o USING (rid)
        WHERE s.nth = 1
        UNION ALL
        SELECT s.*, CASE WHEN {same} THEN 'duplicate' ELSE 'conflict' END AS verdict,
          NULL AS other_source, o.line AS other_line
        FROM ranked s JOIN ranked o ON o.rid = s.rid AND o.nth = 1
        WHERE s.nth > 1"""
    )


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
    with tempfile.TemporaryDirectory(prefix="loopmeter-forge-") as scratch:
        connection = _stage_connection(Path(scratch))
        try:
            with progress.bar(f"ingest forge {store_path.name}", None) as bar:
                for batch in batches:
                    if batch.kind == "restart":  # the SQLite text was not all UTF-8: read again as bytes
                        connection.execute("DELETE FROM staged")
                        connection.execute("DELETE FROM rejected")
                        result.read = result.repo_lines = 0
                        continue
                    seen, repo_lines = _stage_batch(connection, batch, repos)
                    result.read += seen
                    result.repo_lines += repo_lines
                    bar.advance(seen)
            result.read += len(container.early_rejections)
            result.rejections = [Rejection(*row) for row in container.early_rejections]
            result.rejections += [
                Rejection(line, rid, field_name, rule)
                for line, rid, field_name, rule in connection.sql(
                    "SELECT line, rid, field, rule FROM rejected ORDER BY position"
                ).fetchall()
            ]
            _classify(connection, warehouse)
            for line, rid, other_source, other_line in connection.sql(
                "SELECT line, rid, other_source, other_line FROM verdicts WHERE verdict = 'conflict' ORDER BY position"
            ).fetchall():
                first = f"line {other_line}" if other_line is not None else "the first row"
                if other_source is not None:
                    first = f"{other_source}" + (f":{other_line}" if other_line is not None else "")
                result.rejections.append(Rejection(
                    line, rid, "rid",
                    f"repeats the rid of an event already loaded with other content ({first}); the first is kept",
                ))
            result.duplicates = connection.sql("SELECT count(*) FROM verdicts WHERE verdict = 'duplicate'").fetchall()[0][0]
            for kind, count in connection.sql("SELECT kind, count(*) FROM verdicts WHERE verdict = 'new' GROUP BY kind").fetchall():
                result.kinds[kind] = count
                if kind not in KNOWN_KINDS:
                    result.unknown_kinds[kind] = count
            result.stored = sum(result.kinds.values())
            if result.stored:
                _write_new_events(connection, warehouse, str(source), now)
        finally:
            connection.close()
    result.repos = _write_repos(warehouse, repos, str(source), now)
    _write_rejections(warehouse, result, str(source), now)
    if result.stored or not all(warehouse.has_table(name) for name in t.FORGE_TABLES
                                if name not in (t.OBSERVATIONAL, t.RANDOMIZED, t.SURVIVAL)):
        rebuild_derived(warehouse)
        result.rebuilt = True
    return result


def _write_new_events(connection: duckdb.DuckDBPyConnection, warehouse: Warehouse, source: str, now: datetime) -> None:
    """Add the new events to forge_events, one month partition at a time (each write is atomic)."""
    connection.sql(
        "CREATE OR REPLACE TEMP TABLE new_events AS "
        "SELECT rid, kind, src, to_timestamp(ts_unix) AS ts, ts_unix, run, task, repo, mode, name, data, "
        "$source AS source, line, $now::TIMESTAMPTZ AS ingested_at, strftime(to_timestamp(ts_unix), '%Y-%m') AS month "
        "FROM verdicts WHERE verdict = 'new'",
        params={"source": source, "now": now},
    )
    months = [m for (m,) in connection.sql("SELECT DISTINCT month FROM new_events ORDER BY month").fetchall()]
    with progress.bar("store forge_events", len(months)) as bar:
        for month in months:
            fresh = connection.sql("SELECT * FROM new_events WHERE month = $m", params={"m": month}).pl()
            fresh = typed_frame(fresh, t.EVENTS)
            previous = warehouse.read_partition(t.EVENTS, "month", month)
            if previous is not None:
                fresh = pl.concat([typed_frame(previous, t.EVENTS), fresh])
            warehouse.write_table(t.EVENTS, fresh.sort("ts_unix", "rid"), partition_by="month", keep_partitions=True)
            bar.advance()


def _write_repos(warehouse: Warehouse, repos: dict[str, str], source: str, now: datetime) -> int:
    current = warehouse.read(t.REPOS)
    if not repos:
        if current is None:
            warehouse.write_table(t.REPOS, typed_frame(pl.DataFrame(), t.REPOS))
        return 0
    fresh = pl.DataFrame(
        {"repo": list(repos), "path": list(repos.values()), "source": source, "ingested_at": now}
    )
    fresh = typed_frame(fresh, t.REPOS)
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
    fresh = typed_frame(
        pl.DataFrame(
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
        ),
        t.REJECTIONS,
    )
    if current is not None:
        fresh = pl.concat([current.filter(pl.col("source") != source), fresh])
    warehouse.write_table(t.REJECTIONS, fresh)
