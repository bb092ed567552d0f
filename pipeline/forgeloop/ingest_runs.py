"""The work of `loopmeter ingest forgeloop` (see `ingest.py`): run files -> validated rows -> the `runs` table.

Files are taken a chunk of run sets at a time, planned against the last ingest's manifest
(same size and mtime, or the same bytes: not parsed again), read in worker processes,
and each changed run set's partition written as its chunk completes.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import polars as pl

from .. import progress
from ..config import DEFAULT_MAX_FILE_BYTES
from ..faults import checkpoint
from ..frames import empty_frame, frame_from_rows
from ..warehouse import Warehouse
from .scenarios import SCENARIO_COLUMNS, read_scenarios
from .tables import MANIFEST_COLUMNS
from .reader import ALL_RUN_COLUMNS, PARALLEL_FROM, RunReader, ToRead

from .ingest import RUNS, SCENARIOS, IngestResult, SeenFile
from .manifest import ManifestSpool

RUN_KEY = ["run_set_id", "scenario_id", "mode", "run_index"]
DUPLICATE = "duplicate"
CHUNK = 8000  # files taken at a time: whole run sets, about this many files


def _chunks(files: Iterator[SeenFile]) -> Iterator[list[SeenFile]]:
    """The files in path order, cut between run sets once a chunk has CHUNK files."""
    chunk: list[SeenFile] = []
    for seen in files:
        if len(chunk) >= CHUNK and seen.run_set_id != chunk[-1].run_set_id:
            yield chunk
            chunk = []
        chunk.append(seen)
    if chunk:
        yield chunk


def ingest_runs(
    warehouse: Warehouse,
    results: Path,
    files: Iterator[SeenFile],
    scenarios: Path | None = None,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    only: list[str] | None = None,
) -> IngestResult:
    """Ingest the run files `files` (found under `results`) and optionally the scenario files.
    With `only` (entries of raw/: run set folders, "" for files directly in raw/), `files`
    are those entries' and the manifest rows of this results directory's other entries stay."""
    source_root = str(results.resolve())
    with warehouse.scratch() as scratch:
        spool = ManifestSpool(warehouse, source_root, scratch)
        try:
            return _ingest(warehouse, results, files, scenarios, max_file_bytes, only, spool)
        finally:
            spool.close()


def _ingest(warehouse: Warehouse, results: Path, files: Iterator[SeenFile], scenarios: Path | None,
            max_file_bytes: int, only: list[str] | None, spool: ManifestSpool) -> IngestResult:
    outcome = IngestResult(results=results.resolve())
    now = datetime.now(timezone.utc)
    changed: list[str] = []
    # A chunk of run sets at a time: planned against the last ingest, read (in worker
    # processes), their partitions written, their manifest rows spooled to disk. Memory
    # holds one chunk of runs, whatever the size of the tree.
    with progress.bar("ingest forgeloop", None) as bar, \
            RunReader(str(results), max_file_bytes, PARALLEL_FROM, bar.advance) as reader, \
            warehouse.build_table(RUNS, partition_by="run_set_id") as runs_table:
        pending = None  # the chunk being read while the one before it is stored
        for chunk in itertools.chain(_chunks(files), [None]):  # lazily: one chunk ahead
            started = None if chunk is None else _start_chunk(warehouse, results, chunk, spool, reader, now)
            if pending is None:
                pending = started
                continue
            outcome.run_sets += pending.run_sets
            rows = _finish_chunk(warehouse, pending, runs_table, changed)
            spool.add(frame_from_rows(rows, MANIFEST_COLUMNS), pending.previous)
            pending = started
            for row in rows:
                if row[4] == "accepted":
                    outcome.accepted += 1
                elif row[4] == "unchanged":
                    outcome.unchanged += 1
                else:
                    outcome.rejections.append((row[2], row[5], row[6]))
        checkpoint("ingest:read")
        runs_table.write(empty_frame(ALL_RUN_COLUMNS))  # the columns, should nothing else be written
        runs_table.keep_others, runs_table.drop = True, set(changed)
        runs_table.cancelled = not changed and warehouse.has_table(RUNS)
    scenario_rows: list[list] = []
    if scenarios is not None:
        outcome.scenarios = _ingest_scenarios(warehouse, Path(scenarios), scenario_rows, now)
        outcome.rejections += [(f"{row[1]}/{row[2]}", row[5], row[6]) for row in scenario_rows if row[4] == "rejected"]
        spool.add(frame_from_rows(scenario_rows, MANIFEST_COLUMNS))
    outcome.wrote = bool(changed) or scenarios is not None
    scenarios_root = None if scenarios is None else str(Path(scenarios).resolve())
    outcome.wrote |= spool.publish(outcome.run_sets, scenarios_root, only)
    return outcome


@dataclass
class _Chunk:
    run_sets: list[str]
    rows: dict[str, list]  # path -> manifest row
    by_run_set: dict[str | None, list[list]]
    todo: list[ToRead]
    stored: pl.DataFrame
    previous: pl.DataFrame  # the last ingest's manifest rows for these files
    reading: Callable[[], tuple[list, list]]


def _start_chunk(warehouse: Warehouse, results: Path, chunk: list[SeenFile], spool: ManifestSpool, reader: RunReader,
                 now: datetime) -> _Chunk:
    """Plan one chunk of files against the last ingest and start reading what must be read."""
    run_sets = sorted({f.run_set_id for f in chunk if f.run_set_id is not None and f.problem is None})
    stored = _stored(warehouse, run_sets)
    previous = spool.previous_rows([f.path for f in chunk])
    plan = _plan(chunk, previous, stored)
    source_root = str(results.resolve())
    rows: dict[str, list] = {}
    by_run_set: dict[str | None, list[list]] = {}
    todo: list[ToRead] = []
    for seen, action, field_name, reason, digest, stored_hash, since in zip(
        chunk, plan["action"], plan["field"], plan["reason"], plan["content_hash"], plan["stored_hash"], plan["since"]
    ):
        row = ["run", source_root, seen.path, seen.run_set_id, action, field_name, reason, seen.size, seen.mtime_ns, digest, since or now]
        rows[seen.path] = row
        by_run_set.setdefault(seen.run_set_id, []).append(row)
        if action == "read":
            todo.append(ToRead(seen.path, seen.run_set_id, seen.size, stored_hash))
    return _Chunk(run_sets, rows, by_run_set, todo, stored, previous, reader.submit(todo))


def _finish_chunk(warehouse: Warehouse, chunk: _Chunk, runs_table, changed: list[str]) -> list[list]:
    """Take one chunk's verdicts and write its changed run sets; returns its manifest rows."""
    verdicts, tables = chunk.reading()
    rows = chunk.rows
    for item, (status, field_name, reason, digest) in zip(chunk.todo, verdicts):
        rows[item.path][4:7] = [status, field_name, reason]
        rows[item.path][9] = digest
    stored_pairs = {
        run_set: set(zip(frame["source_path"], frame["content_hash"]))
        for (run_set,), frame in chunk.stored.partition_by("run_set_id", as_dict=True).items()
    }
    rewritten = []
    for run_set in chunk.run_sets:
        wanted = {(row[2], row[9]) for row in chunk.by_run_set.get(run_set, []) if row[4] in ("accepted", "unchanged")}
        if wanted != stored_pairs.get(run_set, set()):
            rewritten.append(run_set)
    if rewritten:
        new = pl.concat([pl.from_arrow(table) for table in tables]) if tables else empty_frame(ALL_RUN_COLUMNS)
        runs_table.write(_rebuilt_run_sets(warehouse, rewritten, new, chunk.by_run_set, rows))
        changed += rewritten
    return list(rows.values())


def _plan(files: list[SeenFile], previous: pl.DataFrame | None, stored: pl.DataFrame) -> pl.DataFrame:
    """What to do with each file, decided for all files at once against the last ingest.

    action: rejected (a problem of place, or the same bytes were rejected before for a
    reason of their own), unchanged (same size and mtime as an accepted file whose run is
    stored), or read.
    """
    seen = pl.DataFrame(
        {
            "path": [f.path for f in files],
            "size_bytes": [f.size for f in files],
            "mtime_ns": [f.mtime_ns for f in files],
            "problem_field": [f.problem[0] if f.problem else None for f in files],
            "problem_reason": [f.problem[1] if f.problem else None for f in files],
        },
        schema={"path": pl.String, "size_bytes": pl.Int64, "mtime_ns": pl.Int64, "problem_field": pl.String, "problem_reason": pl.String},
    )
    if previous is None:
        previous = empty_frame(MANIFEST_COLUMNS)
    before = previous.select(
        "path",
        pl.col("status").alias("before_status"),
        pl.col("field").alias("before_field"),
        pl.col("reason").alias("before_reason"),
        pl.col("size_bytes").alias("before_size"),
        pl.col("mtime_ns").alias("before_mtime"),
        pl.col("content_hash").alias("before_hash"),
        pl.col("ingested_at").alias("before_ingested_at"),
    )
    stored_hash = stored.select(pl.col("source_path").alias("path"), pl.col("content_hash").alias("stored_hash"))
    joined = seen.join(before, on="path", how="left", maintain_order="left").join(
        stored_hash, on="path", how="left", maintain_order="left"
    )
    same_stat = (pl.col("before_size") == pl.col("size_bytes")) & (pl.col("before_mtime") == pl.col("mtime_ns"))
    unchanged = same_stat & pl.col("before_status").is_in(["accepted", "unchanged"]) & (pl.col("stored_hash") == pl.col("before_hash"))
    still_rejected = same_stat & (pl.col("before_status") == "rejected") & (pl.col("before_field") != DUPLICATE)
    has_problem = pl.col("problem_field").is_not_null()
    return joined.select(
        pl.when(has_problem).then(pl.lit("rejected"))
        .when(unchanged.fill_null(False)).then(pl.lit("unchanged"))
        .when(still_rejected.fill_null(False)).then(pl.lit("rejected"))
        .otherwise(pl.lit("read")).alias("action"),
        pl.when(has_problem).then("problem_field").when(still_rejected.fill_null(False)).then("before_field").alias("field"),
        pl.when(has_problem).then("problem_reason").when(still_rejected.fill_null(False)).then("before_reason").alias("reason"),
        pl.when(unchanged.fill_null(False) | still_rejected.fill_null(False)).then("before_hash").alias("content_hash"),
        pl.col("stored_hash"),
        # a verdict that stands keeps the time it was first given
        pl.when((unchanged & (pl.col("before_status") == "unchanged")) | still_rejected)
        .then("before_ingested_at").alias("since"),
    )


def _reject_duplicates(runs: pl.DataFrame, manifest: dict) -> pl.DataFrame:
    """Keep the first run (in path order) of each run set, scenario, mode and runIndex."""
    first = pl.struct(RUN_KEY).is_first_distinct()
    duplicates = runs.filter(~first)
    if duplicates.height == 0:
        return runs
    firsts = runs.filter(first).select(*RUN_KEY, pl.col("source_path").alias("first_path"))
    for path, first_path in duplicates.join(firsts, on=RUN_KEY).select("source_path", "first_path").iter_rows():
        row = manifest[path]
        row[4], row[5] = "rejected", DUPLICATE
        row[6] = f"repeats the run set, scenario, mode and runIndex of {first_path} (the first in path order is kept)"
    return runs.filter(first)


STORED_COLUMNS = ["run_set_id", "source_path", "content_hash"]


def _stored(warehouse: Warehouse, run_sets: list[str]) -> pl.DataFrame:
    """(run set, source path, content hash) of the stored runs of these run sets — three
    columns only, so an unchanged tree is checked without reading the runs themselves."""
    files = warehouse.partition_files(RUNS, "run_set_id", run_sets)
    if not files:
        return pl.DataFrame(schema={name: pl.String for name in STORED_COLUMNS})
    return pl.read_parquet(files, columns=STORED_COLUMNS, hive_partitioning=False)


def _rebuilt_run_sets(
    warehouse: Warehouse, run_sets: list[str], new: pl.DataFrame, by_run_set: dict, manifest: dict
) -> pl.DataFrame:
    """The changed run sets' runs: their new rows, plus the stored rows of their unchanged
    files, duplicates resolved in path order — for a whole chunk at once."""
    frames = [new.filter(pl.col("run_set_id").is_in(run_sets))]
    for run_set in run_sets:
        unchanged = [row[2] for row in by_run_set[run_set] if row[4] == "unchanged"]
        previous = warehouse.read_partition(RUNS, "run_set_id", run_set) if unchanged else None
        if previous is not None:
            frames.append(previous.filter(pl.col("source_path").is_in(unchanged)).select(new.columns).cast(new.schema))
    return _reject_duplicates(pl.concat(frames).sort("source_path"), manifest)


def _ingest_scenarios(warehouse: Warehouse, directory: Path, manifest_rows: list[list], now: datetime) -> int:
    """The scenario files into `scenarios` (upserted by id); their manifest rows appended."""
    rows, rejected = read_scenarios(directory)
    root = str(directory.resolve())
    for path, field_name, rule in rejected:
        relative = os.path.relpath(path, directory)
        manifest_rows.append(["scenario", root, relative, None, "rejected", field_name, rule, None, None, None, now])
    for row in rows:
        relative = os.path.relpath(row[8], root)
        manifest_rows.append(["scenario", root, relative, None, "accepted", None, None, None, None, row[9], now])
    frame = frame_from_rows(rows, SCENARIO_COLUMNS)
    current = warehouse.read(SCENARIOS)
    if current is not None:
        kept = current.filter(~pl.col("scenario_id").is_in(frame["scenario_id"].to_list()))
        frame = pl.concat([frame, kept.select(frame.columns).cast(frame.schema)]).sort("scenario_id")
    warehouse.write_table(SCENARIOS, frame)
    return len(rows)
