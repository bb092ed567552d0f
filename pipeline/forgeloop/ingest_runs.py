"""The work of `loopmeter ingest forgeloop` (see `ingest.py`): run files -> validated rows -> the `runs` table.

The ingest streams: whatever the number and size of the files and run sets, memory holds a fixed
number of batches of runs, each at most BATCH files or about BATCH_BYTES of them (`reader.py`),
and the rows of a part file.

Files are planned a chunk of whole run sets at a time against the last ingest's manifest (same
size and mtime, or the same bytes: not parsed again), from their listing, the last ingest's rows
for them and the paths and hashes of the stored runs, never a run's row. A chunk's files are then
taken in run set and path order, a batch at a time, read by the engine's workers (worker processes of
this machine, or Spark's tasks: `reader.py`, `reader_spark.py`), and the partitions
of its changed run sets written in parts (`TableBuilder.write_part`; a partition whose rows fit in
one part is written whole, with others): the new rows, and the rows of the unchanged files copied
from the stored partition a piece at a time (`_StoredRows`). A run set is written again only when
the runs it should hold are not those it holds: until one of its batches brings a new run, the
rows of its unchanged files are left where they are, to be copied only if it turns out to have
changed. Rows go by in path order, so the first run of a run set, scenario, mode and runIndex is
the first one met: later ones are dropped as they come (`duplicate`), only the keys met so far held.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from .. import progress
from ..config import DEFAULT_MAX_FILE_BYTES
from ..engines import Engine
from ..faults import checkpoint
from ..frames import empty_frame, frame_from_rows, schema
from ..storage import Warehouse
from .contract import OF_THE_MOMENT, TOO_LARGE
from .scenarios import SCENARIO_COLUMNS, read_scenarios
from .tables import MANIFEST_COLUMNS
from .reader import ALL_RUN_COLUMNS, BATCH, BATCH_BYTES, RunReader, ToRead, Verdicts

from .ingested import IngestResult
from .tables import RUNS, SCENARIOS
from .tiers import read_tiers, store_tiers
from .walk import SeenFile
from .manifest import ManifestSpool

if TYPE_CHECKING:
    from ..storage.writing import TableBuilder
    from .reader_spark import SparkReading

RUN_KEY = ["run_set_id", "scenario_id", "mode", "run_index"]
DUPLICATE = "duplicate"
MANIFEST_NAMES = [name for name, _, _ in MANIFEST_COLUMNS]
CHUNK = 8000  # files planned at a time: whole run sets, about this many (their listing, not their rows)
PART_BYTES = BATCH_BYTES  # a partition's rows are written in part files of about this many bytes
PIECE_BYTES = 16 << 20  # stored rows are decoded about this many bytes at a time
ROWS = schema(ALL_RUN_COLUMNS)
# the stored runs as an ingest plans against them: no row's contents, and where each row lies
STORED_COLUMNS = ["run_set_id", "source_path", "content_hash"]
STORED = {**{name: ROWS[name] for name in STORED_COLUMNS}, "file": pl.String, "row": pl.Int64}
VERDICTS = {"path": pl.String, "v_status": pl.String, "v_field": pl.String, "v_reason": pl.String, "v_hash": pl.String}
KEYS = {**{name: ROWS[name] for name in RUN_KEY}, "first_path": pl.String}


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
    engine: Engine = Engine(),
    batch_files: int = BATCH,
) -> IngestResult:
    """Ingest the run files `files` (found under `results`) and optionally the scenario files.
    With `only` (entries of raw/: run set folders, "" for files directly in raw/), `files`
    are those entries' and the manifest rows of this results directory's other entries stay.
    With `reread`, every file is read and judged again and every run set written again,
    whatever the last ingest saw: the tables a clean ingest would write. `engine` says who reads
    the batches of at most `batch_files` files (the same verdicts and rows whoever reads them)."""
    source_root = str(results.resolve())
    with warehouse.scratch() as scratch:
        spool = ManifestSpool(warehouse, source_root, scratch)
        try:
            return _ingest(warehouse, results, files, scenarios, max_file_bytes, only, spool, reread, scratch, engine,
                           batch_files)
        finally:
            spool.close()


def _ingest(warehouse: Warehouse, results: Path, files: Iterator[SeenFile], scenarios: Path | None,
            max_file_bytes: int, only: list[str] | None, spool: ManifestSpool, reread: bool, scratch: Path,
            engine: Engine = Engine(), batch_files: int = BATCH) -> IngestResult:
    outcome = IngestResult(results=results.resolve())
    now = datetime.now(timezone.utc)
    changed: list[str] = []
    with progress.bar("ingest forgeloop", None) as bar, \
            _reader(engine, str(results), max_file_bytes, str(scratch), bar.advance) as reader, \
            warehouse.build_table(RUNS, partition_by="run_set_id") as runs_table:
        batches = _batches(warehouse, files, spool, now, reread, batch_files)
        for batch, verdicts, table in reader.stream(batches, lambda batch: batch.todo):
            chunk = batch.chunk
            if batch.items is not None:
                chunk.take(batch, _verdict_frame(batch.todo, verdicts), table, runs_table)
                continue
            # the chunk's end: its run sets written, its manifest rows spooled to disk
            rewritten, manifest = chunk.finish(runs_table)
            changed += rewritten
            outcome.run_sets += chunk.run_sets
            spool.add(manifest, chunk.previous)
            counts = dict(manifest.group_by("status").len().iter_rows())
            outcome.accepted += counts.get("accepted", 0)
            outcome.unchanged += counts.get("unchanged", 0)
            outcome.rejections += manifest.filter(pl.col("status") == "rejected").select("path", "field", "reason").rows()
        checkpoint("ingest:read")
        runs_table.write(empty_frame(ALL_RUN_COLUMNS))  # the columns, should nothing else be written
        runs_table.keep_others, runs_table.drop = True, set(changed)
        runs_table.cancelled = not changed and warehouse.has_table(RUNS)
    if outcome.run_sets:  # the runner's tier, where ForgeLoop's summary.json beside raw/ names it
        outcome.wrote |= store_tiers(warehouse, read_tiers(results, outcome.run_sets), outcome.run_sets)
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
class _Batch:
    """A batch of a chunk's files, in run set and path order (`items`: run_set_id, path, status "read"
    or "unchanged"), those to read in `todo`; `ended`: the run sets whose last file it holds. A batch
    without items ends its chunk."""
    chunk: "_Chunk"
    items: pl.DataFrame | None
    todo: ToRead
    ended: list[str]


def _reader(engine: Engine, results: str, max_file_bytes: int, scratch: str, advance) -> RunReader | SparkReading:
    """Who reads the batches: this machine's worker processes, or Spark's tasks (as `RunReader` answers)."""
    if engine.name == "spark":
        from .reader_spark import SparkReading

        return SparkReading(results, max_file_bytes, engine.master, advance, engine.workers)
    return RunReader(results, max_file_bytes, scratch, advance, engine)


def _batches(warehouse: Warehouse, files: Iterator[SeenFile], spool: ManifestSpool, now: datetime,
             reread: bool, batch_files: int = BATCH) -> Iterator[_Batch]:
    """The batches of every chunk, each chunk planned as the reading comes to it, and after each
    chunk's batches one that ends it."""
    for listing in _chunks(files):
        run_sets = sorted({f.run_set_id for f in listing if f.run_set_id is not None and f.problem is None})
        stored = _stored(warehouse, run_sets)
        previous = spool.previous_rows([f.path for f in listing])
        chunk = _Chunk(run_sets, _plan(listing, previous, stored, spool.source_root, now, reread), previous, stored, reread)
        # the files to read or to copy from the stored partitions, cut into batches
        taken_before = pl.col("size_bytes").cum_sum() - pl.col("size_bytes")
        by_bytes = taken_before // BATCH_BYTES
        batch = pl.struct(by_bytes.alias("bytes"), (pl.int_range(pl.len()).over(by_bytes) // batch_files).alias("files")).rle_id()
        items = chunk.plan.filter(pl.col("status").is_in(["read", "unchanged"])).sort("run_set_id", "path").with_columns(
            batch.alias("batch"))
        ends = dict(items.group_by("run_set_id").agg(pl.col("batch").max()).group_by("batch").agg("run_set_id").iter_rows())
        for (number,), part in items.partition_by("batch", as_dict=True, maintain_order=True).items():
            read = part.filter(pl.col("status") == "read")
            todo = ToRead(read["path"].to_list(), read["run_set_id"].to_list(), read["size_bytes"].to_list(),
                          [None] * read.height if reread else read["stored_hash"].to_list())
            yield _Batch(chunk, part.select("run_set_id", "path", "status"), todo, ends.get(number, []))
        yield _Batch(chunk, None, ToRead([], [], [], []), [])


def _verdict_frame(todo: ToRead, verdicts: Verdicts) -> pl.DataFrame:
    statuses, fields, reasons, digests = verdicts
    return pl.DataFrame({"path": todo.paths, "v_status": statuses, "v_field": fields, "v_reason": reasons,
                         "v_hash": digests}, schema=VERDICTS)


class _Chunk:
    """A chunk of run sets as its batches are taken: its plan (the manifest rows of its files in path
    order, status "read" for the files to read), the last ingest's rows for them, its stored runs
    (`STORED`), and its run sets' partitions being written again, in path order, a part at a time."""

    def __init__(self, run_sets: list[str], plan: pl.DataFrame, previous: pl.DataFrame, stored: pl.DataFrame,
                 reread: bool):
        self.run_sets, self.plan, self.previous, self.stored = run_sets, plan, previous, stored
        self.rewriting = set(run_sets) if reread else set()  # run sets whose partitions are written again
        self.finished: set[str] = set()  # run sets written again whose rows are all written or held
        self.parted: set[str] = set()  # run sets written in parts
        self.verdicts: list[pl.DataFrame] = []  # of the files read, a frame per batch
        self.left: list[pl.DataFrame] = []  # unchanged files (run_set_id, path) of the other run sets, per batch
        self.keys = pl.DataFrame(schema=KEYS)  # the runs written so far of the run sets still open, each key with its first path
        self.duplicates: list[pl.DataFrame] = []  # (path, first_path)
        self.held: list[pl.DataFrame] = []  # rows not yet written
        self.held_bytes = 0
        self.stored_rows = _StoredRows()

    def take(self, batch: _Batch, verdicts: pl.DataFrame, table: pa.Table, builder: TableBuilder) -> None:
        """One batch: the verdicts of the files read and the rows of those accepted. A run set with a new
        run is written again, from its first file: the rows of its unchanged files are copied from its
        stored partition. Until then, its stored partition may well stand: its unchanged files are left."""
        self.verdicts.append(verdicts)
        unchanged = batch.items.join(verdicts.select("path", "v_status"), on="path", how="left", maintain_order="left")
        unchanged = unchanged.filter((pl.col("status") == "unchanged") | (pl.col("v_status") == "unchanged"))
        new = pl.from_arrow(table).cast(ROWS) if table.num_rows else None
        if new is not None:
            self._rewrite(set(new["run_set_id"].unique().to_list()) - self.rewriting, builder)
        rewritten = pl.col("run_set_id").is_in(sorted(self.rewriting))
        self.left.append(unchanged.filter(~rewritten).select("run_set_id", "path"))
        self._hold([new, self._copied(unchanged.filter(rewritten))], builder)
        self.finished.update(self.rewriting.intersection(batch.ended))
        self.keys = self.keys.filter(~pl.col("run_set_id").is_in(batch.ended))  # they have all their runs
        if self.held_bytes >= PART_BYTES:
            self._flush(builder)

    def finish(self, builder: TableBuilder) -> tuple[list[str], pl.DataFrame]:
        """The chunk's last batch taken: the run sets written again (those whose stored runs, path for
        path and hash for hash, are not the runs they should hold) and the chunk's manifest rows."""
        manifest = _judged(self.plan, self.verdicts)
        wanted = manifest.filter(pl.col("status").is_in(["accepted", "unchanged"]) & pl.col("run_set_id").is_in(self.run_sets))
        wanted = wanted.select("run_set_id", "path", "content_hash")
        stored = self.stored.select("run_set_id", pl.col("source_path").alias("path"), "content_hash")
        differ = pl.concat([wanted.join(stored, on=wanted.columns, how="anti"), stored.join(wanted, on=wanted.columns, how="anti")])
        self._rewrite(set(differ["run_set_id"].to_list()) - self.rewriting, builder)
        self.finished.update(self.run_sets)
        self._flush(builder)
        self.stored_rows.close()
        if self.duplicates:
            duplicate = pl.col("first_path").is_not_null()
            rule = pl.format("repeats the run set, scenario, mode and runIndex of {} (the first in path order is kept)",
                             "first_path")
            manifest = manifest.join(pl.concat(self.duplicates), on="path", how="left", maintain_order="left").with_columns(
                pl.when(duplicate).then(pl.lit("rejected")).otherwise("status").alias("status"),
                pl.when(duplicate).then(pl.lit(DUPLICATE)).otherwise("field").alias("field"),
                pl.when(duplicate).then(rule).otherwise("reason").alias("reason"),
            ).drop("first_path")
        return sorted(self.rewriting), manifest

    def _rewrite(self, run_sets: set[str], builder: TableBuilder) -> None:
        """These run sets are written again: first the rows of the unchanged files left so far."""
        if not run_sets:
            return
        self.rewriting |= run_sets
        now = pl.col("run_set_id").is_in(sorted(run_sets))
        left, self.left = self.left, []
        for unchanged in left:  # a batch's files at a time
            self._hold([self._copied(unchanged.filter(now))], builder)
            self.left.append(unchanged.filter(~now))

    def _copied(self, unchanged: pl.DataFrame) -> pl.DataFrame | None:
        """The stored rows of these files (run_set_id, path), in any order."""
        where = unchanged.join(self.stored.select("run_set_id", pl.col("source_path").alias("path"), "file", "row"),
                               on=["run_set_id", "path"])
        pieces = [pl.from_arrow(piece).with_columns(pl.lit(rows["run_set_id"][0]).alias("run_set_id"))
                  for (file,), rows in where.partition_by("file", as_dict=True, maintain_order=True).items()
                  for piece in self.stored_rows.take(file, rows["row"].sort().to_numpy())]
        return pl.concat([piece.select(ROWS.names()).cast(ROWS) for piece in pieces]) if pieces else None

    def _hold(self, frames: list[pl.DataFrame | None], builder: TableBuilder) -> None:
        """Rows to write, next in run set and path order once sorted: the first of each run key kept."""
        frames = [frame for frame in frames if frame is not None and frame.height]
        if not frames:
            return
        rows = pl.concat(frames, rechunk=False)
        before_set, before_path = pl.col("run_set_id").shift(1), pl.col("source_path").shift(1)
        in_order = (before_set < pl.col("run_set_id")) | ((before_set == pl.col("run_set_id")) & (before_path < pl.col("source_path")))
        if not rows.select(in_order.fill_null(True).all()).item():
            rows = rows.sort("run_set_id", "source_path")
        rows = self._first_runs(rows)
        size = rows.estimated_size()
        if self.held and self.held_bytes + size > PART_BYTES:
            self._flush(builder)
        self.held.append(rows)
        self.held_bytes += size

    def _flush(self, builder: TableBuilder) -> None:
        """The rows held, written: a run set's rows all here, its partition whole (with the others', on
        every core); else as its partition's next part file."""
        if not self.held:
            return
        rows, self.held, self.held_bytes = pl.concat(self.held, rechunk=False), [], 0
        whole = pl.col("run_set_id").is_in(sorted(self.finished - self.parted))
        builder.write(rows.filter(whole))
        for (run_set,), part in rows.filter(~whole).partition_by("run_set_id", as_dict=True, maintain_order=True).items():
            builder.write_part(part, run_set)
            self.parted.add(run_set)

    def _first_runs(self, rows: pl.DataFrame) -> pl.DataFrame:
        """`rows` (after every row written so far, in run set and path order) without the runs whose
        run set, scenario, mode and runIndex an earlier one has: those are noted as duplicates."""
        keys = rows.select(*RUN_KEY, pl.col("source_path").alias("first_path"))
        met = pl.concat([self.keys, keys], rechunk=False)
        first = met.select(pl.struct(RUN_KEY).is_first_distinct()).to_series()
        fresh = first.slice(self.keys.height)
        self.keys = met.filter(first)
        if fresh.all():
            return rows
        later = keys.filter(~fresh).select(*RUN_KEY, pl.col("first_path").alias("path"))
        self.duplicates.append(later.join(self.keys, on=RUN_KEY).select("path", "first_path"))
        return rows.filter(fresh)


def _judged(plan: pl.DataFrame, verdicts: list[pl.DataFrame]) -> pl.DataFrame:
    """The manifest rows of `plan`, each file read with its verdict."""
    verdict = pl.concat(verdicts) if verdicts else pl.DataFrame(schema=VERDICTS)
    read = pl.col("v_status").is_not_null()
    return plan.join(verdict, on="path", how="left", maintain_order="left").with_columns(
        *[pl.when(read).then(f"v_{name}").otherwise(name).alias(name) for name in ("status", "field", "reason")],
        pl.when(read).then("v_hash").otherwise("content_hash").alias("content_hash"),
    ).select(MANIFEST_NAMES)


class _StoredRows:
    """Rows of a stored partition's files taken by row number, each file read forward a piece of
    about PIECE_BYTES at a time (a column chunk is read as it is decoded, never a file or a row
    group whole); a file is opened again only when asked for a row behind the piece it is at."""

    def __init__(self):
        self.file: str | None = None
        self.handle: pq.ParquetFile | None = None
        self.pieces: Iterator[pa.RecordBatch] | None = None
        self.piece: pa.RecordBatch | None = None
        self.start = 0  # the row number of the piece's first row

    def take(self, file: str, rows: np.ndarray) -> list[pa.RecordBatch]:
        """Rows `rows` (ascending row numbers) of `file`."""
        if self.file != file or (len(rows) and rows[0] < self.start):
            self._open(file)
        taken, at = [], 0
        while at < len(rows):
            while self.piece is None or rows[at] >= self.start + self.piece.num_rows:
                if self.piece is not None:
                    self.start += self.piece.num_rows
                self.piece = next(self.pieces)  # a row past the end: the file changed under the ingest (StopIteration)
            end = int(np.searchsorted(rows, self.start + self.piece.num_rows))
            taken.append(self.piece.take(pa.array(rows[at:end] - self.start)))
            at = end
        return taken

    def _open(self, file: str) -> None:
        self.close()
        self.handle = pq.ParquetFile(file, buffer_size=1 << 16, pre_buffer=False)  # a column chunk is not read whole
        metadata = self.handle.metadata
        widest = max((metadata.row_group(i).total_byte_size / max(1, metadata.row_group(i).num_rows)
                      for i in range(metadata.num_row_groups)), default=1.0)
        self.pieces = self.handle.iter_batches(batch_size=max(1, int(PIECE_BYTES // max(widest, 1.0))), use_threads=False)
        self.file, self.piece, self.start = file, None, 0

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        self.file = self.handle = self.pieces = self.piece = None
        self.start = 0


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


def _stored(warehouse: Warehouse, run_sets: list[str]) -> pl.DataFrame:
    """The stored runs of these run sets (`STORED`): their paths and hashes, and the file and row
    number each lies at; so an unchanged tree is checked, and a changed one planned, without reading
    the runs themselves."""
    files = warehouse.partition_files(RUNS, "run_set_id", run_sets)
    if not files:
        return pl.DataFrame(schema=STORED)
    frame = pl.read_parquet(files, columns=[*STORED_COLUMNS, "file"], hive_partitioning=True, hive_schema={"run_set_id": pl.String}, glob=False,
                            include_file_paths="file")
    return frame.select(*STORED_COLUMNS, "file", pl.int_range(pl.len()).over("file").alias("row")).cast(STORED)


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
