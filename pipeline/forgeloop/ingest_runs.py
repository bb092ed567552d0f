"""The work of `loopmeter ingest forgeloop` (see `ingest.py`): run files -> validated rows -> the `runs` table.

Files are taken a chunk of run sets at a time, planned against the last ingest's manifest
(same size and mtime, or the same bytes: not parsed again), read in worker processes,
and each changed run set's partition written as its chunk completes.
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import polars as pl

from .. import progress
from ..config import DEFAULT_MAX_FILE_BYTES
from ..faults import checkpoint
from ..frames import empty_frame, frame_from_rows
from ..storage import Warehouse
from .contract import OF_THE_MOMENT, TOO_LARGE
from .scenarios import SCENARIO_COLUMNS, read_scenarios
from .tables import MANIFEST_COLUMNS
from .reader import ALL_RUN_COLUMNS, PARALLEL_FROM, RunReader, ToRead, Verdicts

from .ingest import RUNS, SCENARIOS, IngestResult
from .walk import SeenFile
from .manifest import ManifestSpool

RUN_KEY = ["run_set_id", "scenario_id", "mode", "run_index"]
DUPLICATE = "duplicate"
MANIFEST_NAMES = [name for name, _, _ in MANIFEST_COLUMNS]
CHUNK = 8000  # files taken at a time: whole run sets, about this many files
AHEAD = 2  # chunks being read while one is stored, so the workers seldom wait for the main process


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
    reread: bool = False,
) -> IngestResult:
    """Ingest the run files `files` (found under `results`) and optionally the scenario files.
    With `only` (entries of raw/: run set folders, "" for files directly in raw/), `files`
    are those entries' and the manifest rows of this results directory's other entries stay.
    With `reread`, every file is read and judged again and every run set written again,
    whatever the last ingest saw: the tables a clean ingest would write."""
    source_root = str(results.resolve())
    with warehouse.scratch() as scratch:
        spool = ManifestSpool(warehouse, source_root, scratch)
        try:
            return _ingest(warehouse, results, files, scenarios, max_file_bytes, only, spool, reread)
        finally:
            spool.close()


def _ingest(warehouse: Warehouse, results: Path, files: Iterator[SeenFile], scenarios: Path | None,
            max_file_bytes: int, only: list[str] | None, spool: ManifestSpool, reread: bool) -> IngestResult:
    outcome = IngestResult(results=results.resolve())
    now = datetime.now(timezone.utc)
    changed: list[str] = []
    # A chunk of run sets at a time: planned against the last ingest, read (in worker
    # processes), their partitions written, their manifest rows spooled to disk. Memory
    # holds AHEAD + 1 chunks of runs, whatever the size of the tree.
    with progress.bar("ingest forgeloop", None) as bar, \
            RunReader(str(results), max_file_bytes, PARALLEL_FROM, bar.advance) as reader, \
            warehouse.build_table(RUNS, partition_by="run_set_id") as runs_table:
        def store(done: _Chunk) -> None:
            outcome.run_sets += done.run_sets
            manifest = _finish_chunk(warehouse, done, runs_table, changed)
            spool.add(manifest, done.previous)
            counts = dict(manifest.group_by("status").len().iter_rows())
            outcome.accepted += counts.get("accepted", 0)
            outcome.unchanged += counts.get("unchanged", 0)
            outcome.rejections += manifest.filter(pl.col("status") == "rejected").select("path", "field", "reason").rows()

        pending: deque[_Chunk] = deque()  # chunks being read while the oldest is stored
        for chunk in _chunks(files):  # lazily
            pending.append(_start_chunk(warehouse, chunk, spool, reader, now, reread))
            if len(pending) > AHEAD:
                store(pending.popleft())
        while pending:
            store(pending.popleft())
        checkpoint("ingest:read")
        runs_table.write(empty_frame(ALL_RUN_COLUMNS))  # the columns, should nothing else be written
        runs_table.keep_others, runs_table.drop = True, set(changed)
        runs_table.cancelled = not changed and warehouse.has_table(RUNS)
    scenario_rows: list[list] = []
    if scenarios is not None:
        outcome.scenarios = _ingest_scenarios(warehouse, Path(scenarios), scenario_rows, now, max_file_bytes)
        outcome.rejections += [(f"{row[1]}/{row[2]}", row[5], row[6]) for row in scenario_rows if row[4] == "rejected"]
        spool.add(frame_from_rows(scenario_rows, MANIFEST_COLUMNS))
    outcome.wrote = bool(changed) or scenarios is not None
    scenarios_root = None if scenarios is None else str(Path(scenarios).resolve())
    outcome.wrote |= spool.publish(outcome.run_sets, scenarios_root, only)
    return outcome


@dataclass
class _Chunk:
    run_sets: list[str]
    plan: pl.DataFrame  # the manifest rows, the files to read with status "read" until they are read
    todo: ToRead
    stored: pl.DataFrame
    previous: pl.DataFrame  # the last ingest's manifest rows for these files
    reading: Callable[[], tuple[Verdicts, list]]
    reread: bool  # every run set of the chunk is written again


def _start_chunk(warehouse: Warehouse, chunk: list[SeenFile], spool: ManifestSpool, reader: RunReader,
                 now: datetime, reread: bool) -> _Chunk:
    """Plan one chunk of files against the last ingest and start reading what must be read
    (with `reread`: all of them, each parsed even when its bytes are the stored run's)."""
    run_sets = sorted({f.run_set_id for f in chunk if f.run_set_id is not None and f.problem is None})
    stored = _stored(warehouse, run_sets)
    previous = spool.previous_rows([f.path for f in chunk])
    plan = _plan(chunk, previous, stored, spool.source_root, now, reread)
    read = plan.filter(pl.col("status") == "read")
    todo = ToRead(read["path"].to_list(), read["run_set_id"].to_list(), read["size_bytes"].to_list(),
                  [None] * read.height if reread else read["stored_hash"].to_list())
    return _Chunk(run_sets, plan, todo, stored, previous, reader.submit(todo), reread)


def _finish_chunk(warehouse: Warehouse, chunk: _Chunk, runs_table, changed: list[str]) -> pl.DataFrame:
    """Take one chunk's verdicts and write its changed run sets; returns its manifest rows."""
    (statuses, fields, reasons, digests), tables = chunk.reading()
    verdicts = pl.DataFrame(
        {"path": chunk.todo.paths, "v_status": statuses, "v_field": fields, "v_reason": reasons, "v_hash": digests},
        schema={"path": pl.String, "v_status": pl.String, "v_field": pl.String, "v_reason": pl.String, "v_hash": pl.String},
    )
    read = pl.col("v_status").is_not_null()
    manifest = chunk.plan.join(verdicts, on="path", how="left", maintain_order="left").with_columns(
        *[pl.when(read).then(f"v_{name}").otherwise(name).alias(name) for name in ("status", "field", "reason")],
        pl.when(read).then("v_hash").otherwise("content_hash").alias("content_hash"),
    ).select(MANIFEST_NAMES)
    # a run set is written again when the runs it should hold are not (path for path, hash
    # for hash) the ones it holds
    wanted = manifest.filter(pl.col("status").is_in(["accepted", "unchanged"]) & pl.col("run_set_id").is_in(chunk.run_sets))
    wanted = wanted.select("run_set_id", "path", "content_hash")
    stored = chunk.stored.select("run_set_id", pl.col("source_path").alias("path"), "content_hash")
    differ = pl.concat([wanted.join(stored, on=wanted.columns, how="anti"), stored.join(wanted, on=wanted.columns, how="anti")])
    rewritten = chunk.run_sets if chunk.reread else sorted(set(differ["run_set_id"].to_list()))
    if rewritten:
        new = pl.concat([pl.from_arrow(table) for table in tables]) if tables else empty_frame(ALL_RUN_COLUMNS)
        runs, duplicates = _rebuilt_run_sets(warehouse, rewritten, new, manifest)
        runs_table.write(runs)
        changed += rewritten
        if duplicates.height:
            duplicate = pl.col("first_path").is_not_null()
            rule = pl.format("repeats the run set, scenario, mode and runIndex of {} (the first in path order is kept)",
                             "first_path")
            manifest = manifest.join(duplicates, on="path", how="left", maintain_order="left").with_columns(
                pl.when(duplicate).then(pl.lit("rejected")).otherwise("status").alias("status"),
                pl.when(duplicate).then(pl.lit(DUPLICATE)).otherwise("field").alias("field"),
                pl.when(duplicate).then(rule).otherwise("reason").alias("reason"),
            ).drop("first_path")
    return manifest


def _plan(files: list[SeenFile], previous: pl.DataFrame | None, stored: pl.DataFrame, source_root: str,
          now: datetime, reread: bool = False) -> pl.DataFrame:
    """The manifest rows of `files`, decided for all files at once against the last ingest,
    with the content hash of the run stored for each path (stored_hash).

    status: rejected (a problem of place, or the same bytes were rejected before for a
    reason of their own), unchanged (same size and mtime as an accepted file whose run is
    stored), or read (to be read; the verdict comes from reading it). With `reread`, every
    file without a problem of place is read.
    """
    seen = pl.DataFrame(
        {
            "path": [f.path for f in files],
            "run_set_id": [f.run_set_id for f in files],
            "size_bytes": [f.size for f in files],
            "mtime_ns": [f.mtime_ns for f in files],
            "problem_field": [f.problem[0] if f.problem else None for f in files],
            "problem_reason": [f.problem[1] if f.problem else None for f in files],
        },
        schema={"path": pl.String, "run_set_id": pl.String, "size_bytes": pl.Int64, "mtime_ns": pl.Int64,
                "problem_field": pl.String, "problem_reason": pl.String},
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
        pl.col("ingested_at").dt.convert_time_zone("UTC").alias("before_ingested_at"),  # DuckDB says Etc/UTC
    )
    stored_hash = stored.select(pl.col("source_path").alias("path"), pl.col("content_hash").alias("stored_hash"))
    joined = seen.join(before, on="path", how="left", maintain_order="left").join(
        stored_hash, on="path", how="left", maintain_order="left"
    )
    same_stat = (pl.col("before_size") == pl.col("size_bytes")) & (pl.col("before_mtime") == pl.col("mtime_ns"))
    unchanged = (same_stat & pl.col("before_status").is_in(["accepted", "unchanged"])
                 & (pl.col("stored_hash") == pl.col("before_hash"))).fill_null(False)
    # a verdict on the bytes stands while they look the same; one on the options (the size limit) or on
    # the moment (the file could not be read) is given again
    judged_again = (pl.col("before_field") == DUPLICATE) | (
        (pl.col("before_field") == "file") & pl.any_horizontal([pl.col("before_reason").str.starts_with(start) for start in (TOO_LARGE, *OF_THE_MOMENT)]))
    still_rejected = (same_stat & (pl.col("before_status") == "rejected") & ~judged_again).fill_null(False)
    if reread:
        unchanged = still_rejected = pl.lit(False)
    has_problem = pl.col("problem_field").is_not_null()
    return joined.select(
        pl.lit("run").alias("kind"),
        pl.lit(source_root).alias("source_root"),
        "path",
        "run_set_id",
        pl.when(has_problem).then(pl.lit("rejected"))
        .when(unchanged).then(pl.lit("unchanged"))
        .when(still_rejected).then(pl.lit("rejected"))
        .otherwise(pl.lit("read")).alias("status"),
        pl.when(has_problem).then("problem_field").when(still_rejected).then("before_field").alias("field"),
        pl.when(has_problem).then("problem_reason").when(still_rejected).then("before_reason").alias("reason"),
        "size_bytes",
        "mtime_ns",
        pl.when(unchanged | still_rejected).then("before_hash").alias("content_hash"),
        # a verdict that stands keeps the time it was first given
        pl.when((unchanged & (pl.col("before_status") == "unchanged")) | still_rejected)
        .then("before_ingested_at").otherwise(pl.lit(now)).cast(pl.Datetime("us", "UTC")).alias("ingested_at"),
        "stored_hash",
    )


def _reject_duplicates(runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Keep the first run (in path order) of each run set, scenario, mode and runIndex; the
    others' paths with the path of the first (path, first_path)."""
    first = pl.struct(RUN_KEY).is_first_distinct()
    duplicates = runs.filter(~first)
    if duplicates.height == 0:
        return runs, pl.DataFrame(schema={"path": pl.String, "first_path": pl.String})
    firsts = runs.filter(first).select(*RUN_KEY, pl.col("source_path").alias("first_path"))
    paths = duplicates.join(firsts, on=RUN_KEY).select(pl.col("source_path").alias("path"), "first_path")
    return runs.filter(first), paths


STORED_COLUMNS = ["run_set_id", "source_path", "content_hash"]


def _stored(warehouse: Warehouse, run_sets: list[str]) -> pl.DataFrame:
    """(run set, source path, content hash) of the stored runs of these run sets — three
    columns only, so an unchanged tree is checked without reading the runs themselves."""
    files = warehouse.partition_files(RUNS, "run_set_id", run_sets)
    if not files:
        return pl.DataFrame(schema={name: pl.String for name in STORED_COLUMNS})
    return warehouse.read_files(RUNS, files, STORED_COLUMNS)


def _rebuilt_run_sets(warehouse: Warehouse, run_sets: list[str], new: pl.DataFrame,
                      manifest: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The changed run sets' runs: their new rows, plus the stored rows of their unchanged
    files, duplicates resolved in path order — for a whole chunk at once; and the duplicates
    (see `_reject_duplicates`)."""
    frames = [new.filter(pl.col("run_set_id").is_in(run_sets))]
    unchanged = manifest.filter((pl.col("status") == "unchanged") & pl.col("run_set_id").is_in(run_sets))
    for (run_set,), paths in unchanged.partition_by("run_set_id", as_dict=True, maintain_order=True).items():
        previous = warehouse.read_partition(RUNS, "run_set_id", run_set)
        if previous is not None:
            frames.append(previous.filter(pl.col("source_path").is_in(paths["path"].implode()))
                          .select(new.columns).cast(new.schema))
    return _reject_duplicates(pl.concat(frames).sort("source_path"))


def _ingest_scenarios(warehouse: Warehouse, directory: Path, manifest_rows: list[list], now: datetime,
                      max_file_bytes: int) -> int:
    """The scenario files into `scenarios`; their manifest rows appended. The table mirrors the
    directory: a scenario it held from this directory, or of an id a file here names, is replaced by
    what the files say now (nothing, when the file was rejected or is gone); the others are kept."""
    rows, rejected = read_scenarios(directory, max_file_bytes)
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
        named = frame["scenario_id"].to_list() + [Path(path).stem for path, _, _ in rejected]
        ours = pl.col("source_path").str.starts_with(root + os.sep) | pl.col("scenario_id").is_in(named)
        kept = current.filter(~ours.fill_null(False))
        frame = pl.concat([frame, kept.select(frame.columns).cast(frame.schema)]).sort("scenario_id")
    warehouse.write_table(SCENARIOS, frame)
    return len(rows)
