"""Who computes a command's independent tasks: this process, a local process pool, or Spark.

A task is a plain tuple of arguments for a work function the workers import by name (a module-level
function of loopmeter); its result comes back to this process, which writes everything. Whatever
the engine, `run` yields the results in the order of the tasks, so a command gives the same
tables and documents on each (`tests/test_aggregate_engines.py` and the ingest engine tests).

- `local`: this process, one task after the other;
- `pool`: `workers` spawned processes (a fresh interpreter each: this process's engine threads are
  not forked), at most one task more than the workers in flight, so memory holds a few results;
- `spark`: the tasks of Spark jobs (`on_spark.py`), in waves of as many as the session runs at once.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

from .errors import usage_error
from .lifetime import end_with_parent, pdeathsig_setter, usable_cores

ENGINES = ("local", "pool", "spark")
QUIET_TRACKER = "ignore:resource_tracker:UserWarning"
BUCKET_RUNS = 20_000  # aggregate: runs per bucket, about 100 MB of runs and their results in memory at once


@dataclass(frozen=True)
class Engine:
    name: str = "local"  # local | pool | spark
    workers: int | None = None  # pool: the worker processes (None: one per usable core); spark: tasks per wave
    bucket_runs: int = BUCKET_RUNS  # aggregate: runs per bucket, about (whole run sets)
    master: str | None = None  # spark: the session's master (None: local[*], or Spark Connect at $SPARK_REMOTE)

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise usage_error(f"--engine must be one of {', '.join(ENGINES)} (got {self.name!r})")
        if self.workers is not None and not 1 <= self.workers <= 256:
            raise usage_error(f"--workers must be between 1 and 256 (got {self.workers})")
        if self.bucket_runs < 1:
            raise usage_error(f"--bucket-runs must be at least 1 (got {self.bucket_runs})")
        if self.master is not None and self.name != "spark":  # else a forgotten --engine spark goes unseen
            raise usage_error(f"--spark-master applies to --engine spark only (got --engine {self.name})")
        if self.workers is not None and self.name == "local":  # likewise a forgotten --engine pool
            raise usage_error("--workers applies to --engine pool or spark (got --engine local)")

    def pool_size(self, tasks: int) -> int:
        return max(1, min(self.workers or usable_cores(), tasks))


def run(engine: Engine, work: Callable, tasks: list[tuple], *, job: str = "loopmeter") -> Iterator:
    """`work(*task)` of each task, in task order, computed by `engine` (`job`: the Spark job's name).
    Fewer than two tasks are computed here whatever the engine."""
    if engine.name == "local" or len(tasks) < 2:
        for task in tasks:
            yield work(*task)
        return
    if engine.name == "spark":
        from . import on_spark

        yield from on_spark.compute(work, tasks, engine.master, job, engine.workers)
        return
    yield from in_pool(engine.pool_size(len(tasks)), work, tasks)


def in_pool(workers: int, work: Callable, tasks: list[tuple]) -> Iterator:
    """The tasks' results, in order, from `workers` spawned processes tied to this process's life."""
    from concurrent.futures import ProcessPoolExecutor

    pdeathsig_setter()
    # An interrupted command ends without the pool's semaphores released; multiprocessing's resource
    # tracker (a process of its own, started with this interpreter's -W options) unlinks them after
    # it and would warn of each on the terminal, after the command's last line.
    if QUIET_TRACKER not in sys.warnoptions:
        sys.warnoptions.append(QUIET_TRACKER)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=end_with_parent,
                               initargs=(os.getpid(), threading.current_thread() is threading.main_thread()))
    finished = False
    try:
        # at most one task more than the workers waiting or done: memory holds a few results
        pending: deque = deque()
        waiting = iter(tasks)
        for task in islice(waiting, workers + 1):
            pending.append(pool.submit(work, *task))
        while pending:
            result = pending.popleft().result()
            for task in islice(waiting, 1):
                pending.append(pool.submit(work, *task))
            yield result
        finished = True
    finally:
        # after an error or Ctrl-C, not waiting: the workers end with this process in any case
        pool.shutdown(wait=finished, cancel_futures=True)
