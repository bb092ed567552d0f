"""The aggregate's computation, bucket by bucket.

A run set's documents and table rows depend on its own runs only, so the run sets are cut into
buckets of whole run sets (in id order, about `Engine.bucket_runs` runs each; a larger run set is a
bucket of its own) and each bucket is computed on its own by `compute_bucket`: its runs in, its
analysis (the rows of the forgeloop_* tables) and its documents out. Memory is then bounded by a
bucket's runs, not by the warehouse's. The buckets' results, put one after the other, are what one
computation of all the runs gives: the same documents byte for byte, the same rows in the same order
(`tests/test_aggregate_engines.py`).

Who computes the buckets is the engine: `local`, this process, one bucket after the other; `pool`,
a pool of worker processes (`workers`, default one per usable core); `spark`, the tasks of a Spark
job (`on_spark.py`). A worker or task reads its bucket's runs from the warehouse itself and hands
its result back to this process, which writes everything. A warehouse of one bucket is computed
here whatever the engine.
"""
from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from ..engines import Engine, run
from ..errors import LoopmeterError
from ..sql.queries import query_text
from ..storage import Warehouse, duck, registry
from .aggregate import RunSetDocuments, build_documents
from .analysis import QUERIES, Analysis, analyse
from .tables import RUNS

if TYPE_CHECKING:
    import duckdb


@dataclass
class Part:
    """What one bucket gives: its analysis and its run sets' documents (in id order)."""
    analysis: Analysis
    documents: list[RunSetDocuments]


def columns_used(queries: tuple[str, ...] = QUERIES) -> list[str]:
    """The columns of `runs` the named queries (the analysis's by default) name."""
    words = set(re.findall(r"\w+", " ".join(query_text(name) for name in queries)))  # one scan, not one per column
    return [name for name in registry.table(RUNS).column_names if name in words]


def no_runs(warehouse: Warehouse) -> LoopmeterError:
    """No run is stored: none was ingested, or every run file was rejected."""
    return LoopmeterError(f"no runs in {warehouse.root}; run `loopmeter ingest forgeloop RESULTS` first (it names "
                          "each run file it rejects)")


@contextmanager
def runs_in_duckdb(warehouse: Warehouse, columns: list[str], run_set: str | None = None,
                   run_sets: Collection[str] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB session (confined to the warehouse) with `runs` registered: the `columns` of the
    runs of one run set, of `run_sets`, or of all, read once."""
    wanted = [run_set] if run_set is not None else run_sets if run_sets is not None else warehouse.partitions(RUNS, "run_set_id")
    files = warehouse.partition_files(RUNS, "run_set_id", sorted(wanted))
    if not files:
        raise LoopmeterError(f"no run set {run_set!r} in {warehouse.root}") if run_set else no_runs(warehouse)
    # one chunk per column (a file each else): cheaper to hand to DuckDB, and to scan
    runs = warehouse.read_files(RUNS, files, columns).rechunk()
    connection = duck.connect(warehouse.root)
    try:
        connection.register("runs", runs)
        yield connection
    finally:
        connection.close()


def cut(counts: dict[str, int], bucket_runs: int) -> list[list[str]]:
    """The run sets (run set -> its runs) in id order, cut into buckets of whole run sets: a bucket
    is closed once it holds `bucket_runs` runs or more."""
    buckets: list[list[str]] = [[]]
    held = 0
    for run_set in sorted(counts):
        if held >= bucket_runs:
            buckets.append([])
            held = 0
        buckets[-1].append(run_set)
        held += counts[run_set]
    return [bucket for bucket in buckets if bucket]


def run_counts(warehouse: Warehouse, run_sets: Collection[str]) -> dict[str, int]:
    """Run set -> its runs (of those of `run_sets` that hold runs)."""
    files = warehouse.partition_files(RUNS, "run_set_id", sorted(run_sets))
    if not files:
        return {}
    counts = warehouse.read_files(RUNS, files, ["run_set_id"]).group_by("run_set_id").len()
    return dict(counts.iter_rows())


def compute_bucket(warehouse: Warehouse, run_sets: list[str], profiles: dict[str, str], tier: str | dict[str, str] | None,
                   rendered: bool = False) -> Part:
    """The analysis and the documents of these whole run sets (`rendered`: documents only to be
    written, see `aggregate.iter_documents`)."""
    with runs_in_duckdb(warehouse, columns_used(), run_sets=run_sets) as connection:
        analysis = analyse(connection)
    return Part(analysis, build_documents(analysis, profiles, tier, rendered))


def _compute_in_worker(root: str, run_sets: list[str], profiles: dict[str, str], tier: str | dict[str, str] | None,
                       rendered: bool) -> Part:
    """`compute_bucket` in a worker process: it opens the warehouse to read (the command that
    started it holds the lock) and hands its result back, its documents as plain data (rendered
    ones hold text fragments that do not cross processes; written, they give the same bytes)."""
    return compute_bucket(Warehouse(Path(root)), run_sets, profiles, tier, rendered=False)


def compute(warehouse: Warehouse, run_sets: Collection[str], profiles: dict[str, str], tier: str | dict[str, str] | None,
            rendered: bool = False, engine: Engine = Engine()) -> Iterator[Part]:
    """Each bucket's `Part`, in run set order, computed by `engine`."""
    buckets = cut(run_counts(warehouse, run_sets), engine.bucket_runs)
    if engine.name == "local" or len(buckets) < 2:
        for bucket in buckets:
            yield compute_bucket(warehouse, bucket, profiles, tier, rendered)
        return
    tasks = [(str(warehouse.root.resolve()), bucket, profiles, tier, rendered) for bucket in buckets]
    yield from run(engine, _compute_in_worker, tasks, job="loopmeter aggregate")


def merge(analyses: list[Analysis]) -> Analysis:
    """The buckets' analyses as one: each frame's rows, bucket after bucket."""
    if len(analyses) == 1:
        return analyses[0]
    return Analysis(**{field.name: pl.concat([getattr(analysis, field.name) for analysis in analyses],
                                             how="vertical_relaxed") for field in fields(Analysis)})
