"""Reading run files: bytes -> hash -> JSON -> validated row, in batches, on every core.

`RunReader(...).submit(todo)` starts reading the files an ingest has to read (`ToRead`,
columns); its result is the files' verdicts (accepted, unchanged or rejected with field and
rule) and content hashes, as columns, plus the accepted rows as Arrow tables. Batches of files go to worker
processes when there are enough of them to pay for it; each worker returns a compact
Arrow table, never a list of Python rows.
"""
from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator

import orjson
import pyarrow as pa

from ..lifetime import pdeathsig_setter, usable_cores
from ..storage.registry import arrow_type
from .contract import TOO_LARGE, UNREADABLE
from .schema import RUN_COLUMNS, SOURCE_COLUMNS, RunRejected, flatten_run

ALL_RUN_COLUMNS = [*RUN_COLUMNS, *SOURCE_COLUMNS]
BATCH = 2000
PARALLEL_FROM = 4000  # fewer files than this are read in the calling process


@dataclass(frozen=True)
class ToRead:
    """The files to read, as columns: paths relative to the results directory, the run set
    folder each lies in, its size when listed, and the content hash of the run stored for
    that path (None: none)."""
    paths: list[str]
    run_sets: list[str]
    sizes: list[int]
    stored_hashes: list[str | None]

    def __len__(self) -> int:
        return len(self.paths)

    def batches(self) -> Iterator["ToRead"]:
        for start in range(0, len(self.paths), BATCH):
            end = start + BATCH
            yield ToRead(self.paths[start:end], self.run_sets[start:end], self.sizes[start:end], self.stored_hashes[start:end])


Verdict = tuple[str, str | None, str | None, str | None]  # status, field, reason, content hash
# the verdicts of a list of files, as columns: status, field, reason, content hash
Verdicts = tuple[list[str], list[str | None], list[str | None], list[str | None]]


def _parse(content: bytes, expected_run_set: str) -> tuple:
    if not content:
        raise RunRejected("file", "is empty")
    try:
        document = orjson.loads(content)
    except orjson.JSONDecodeError as error:
        message = str(error)
        if "utf-8" in message.lower():
            raise RunRejected("file", f"is not valid UTF-8 ({message})") from None
        if "depth limit" in message.lower() or "recursion" in message.lower():
            raise RunRejected("file", "nests too deeply to be a run (over 1024 levels)") from None
        raise RunRejected("file", f"is not valid JSON ({message})") from None
    row = flatten_run(document)
    if row[0] != expected_run_set:
        raise RunRejected("runSetId", f"must equal its run set folder ({expected_run_set})")
    return row


def _read_file(path: str, size: int, limit: int) -> bytes:
    """The file's bytes, or the first `limit` + 1 of them. os.open/os.read: three system calls,
    where open() adds an fstat, an ioctl and a buffer (4 of the 10 µs a file costs)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        content = os.read(descriptor, size + 1)  # a buffer of the file's size, not of the limit
        if len(content) == size:
            return content
        parts, total = [content], len(content)  # it grew or shrank since it was listed: read to the end
        while total <= limit and (more := os.read(descriptor, limit + 1 - total)):
            parts.append(more)
            total += len(more)
        return b"".join(parts)
    finally:
        os.close(descriptor)


def _read_one(results: str, path: str, run_set: str, size: int, stored_hash: str | None, max_file_bytes: int,
              rows: list) -> Verdict:
    if size > max_file_bytes:
        return ("rejected", "file", f"{TOO_LARGE} {max_file_bytes}-byte limit ({size} bytes)", None)
    try:
        content = _read_file(os.path.join(results, path), size, max_file_bytes)
    except OSError as error:
        return ("rejected", "file", f"{UNREADABLE} ({error.strerror})", None)
    if len(content) > max_file_bytes:
        return ("rejected", "file", f"{TOO_LARGE} {max_file_bytes}-byte limit", None)
    digest = hashlib.sha256(content).hexdigest()
    if digest == stored_hash:  # the stored run has these very bytes
        return ("unchanged", None, None, digest)
    try:
        rows.append((*_parse(content, run_set), path, digest))
    except RunRejected as error:
        return ("rejected", error.field, error.rule, digest)
    return ("accepted", None, None, digest)


def _table(rows: list[tuple]) -> pa.Table:
    names = [name for name, _, _ in ALL_RUN_COLUMNS]
    if not rows:
        return pa.table({name: pa.array([], type=arrow_type(dtype, large=True)) for name, dtype, _ in ALL_RUN_COLUMNS})
    arrays = [pa.array(values, type=arrow_type(dtype, large=True)) for values, (_, dtype, _) in zip(zip(*rows), ALL_RUN_COLUMNS)]
    return pa.Table.from_arrays(arrays, names=names)


def read_batch(results: str, batch: ToRead, max_file_bytes: int) -> tuple[Verdicts, pa.Table]:
    """Read one batch of files: their verdicts (as columns) and the accepted rows."""
    rows: list[tuple] = []
    collecting = gc.isenabled()
    gc.disable()  # the batch makes no cycles; collections would walk every object for nothing
    try:
        verdicts = [_read_one(results, *item, max_file_bytes, rows)
                    for item in zip(batch.paths, batch.run_sets, batch.sizes, batch.stored_hashes)]
    finally:
        if collecting:
            gc.enable()
    columns = tuple(map(list, zip(*verdicts))) if verdicts else ([], [], [], [])
    return columns, _table(rows)


WATCH_PARENT_EVERY = 0.5  # seconds, where the kernel cannot be asked to end a worker


def _end_with_parent(parent: int | None, forker_outlives_pool: bool) -> None:
    """Worker initializer: the worker ends when the process that started it does. (A SIGKILLed
    or OOM-killed ingest would otherwise leave its workers waiting on the pool's queue for
    ever, holding every fd they inherited: the warehouse lock among them.)

    PR_SET_PDEATHSIG fires when the *thread* that forked the worker ends, so the kernel is
    asked only when that thread lives as long as the pool (`forker_outlives_pool`: the main
    thread, or a fork server's); otherwise, or without prctl, a daemon thread polls the
    parent's pid. `parent`, the pid that forks the workers as recorded before they forked
    (None: unknown, a fork server's), closes the race of a parent that died before the
    worker was tied to it.

    Ctrl-C is ignored: a terminal sends it to the whole process group, and each worker would
    print its own KeyboardInterrupt traceback; the parent answers it, and shuts the pool down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setter = pdeathsig_setter()
    if not (forker_outlives_pool and setter is not None and setter()):
        started_by = os.getppid() if parent is None else parent

        def watch() -> None:
            while os.getppid() == started_by:
                time.sleep(WATCH_PARENT_EVERY)
            os._exit(1)
        threading.Thread(target=watch, name="loopmeter-parent-watch", daemon=True).start()
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the worker was tied to it


class RunReader:
    """Reads files in batches, in worker processes when there are enough files to pay for
    them (the pool starts once, on first need, and serves every later call)."""

    def __init__(self, results: str, max_file_bytes: int, expected_files: int,
                 advance: Callable[[int], None] = lambda n: None):
        self.results, self.max_file_bytes, self.advance = results, max_file_bytes, advance
        workers = usable_cores()
        self.parallel = expected_files >= PARALLEL_FROM and workers > 1
        self.workers = workers
        self.pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "RunReader":
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        if self.pool is not None:
            # after an error or Ctrl-C, not waiting: a KeyboardInterrupt inside the executor's own
            # calls can leave its manager thread waiting for ever (the workers end with this process)
            self.pool.shutdown(wait=exc_type is None, cancel_futures=True)

    def submit(self, todo: ToRead) -> Callable[[], tuple[Verdicts, list[pa.Table]]]:
        """Start reading `todo` (in the workers, when parallel); call the result to wait for
        the verdicts, in the order of `todo`, and the accepted rows as Arrow tables."""
        batches = list(todo.batches())
        if not self.parallel or len(batches) < 2:
            def local() -> tuple[Verdicts, list[pa.Table]]:
                return self._collect(batches, (read_batch(self.results, batch, self.max_file_bytes) for batch in batches))
            return local
        starting = self.pool is None
        if starting:
            self.pool = self._start_pool()
            # the workers fork on the first submit: frozen, the objects they inherit are left
            # out of their collections (which would walk them, and copy their pages)
            gc.freeze()
        # Ctrl-C held while the workers fork (on this first submit): one that came before a worker's
        # initializer ignores it would end that worker with a traceback; the parent takes it after
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if starting else None
        try:
            futures = [self.pool.submit(read_batch, self.results, batch, self.max_file_bytes) for batch in batches]
        finally:
            if starting:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                gc.unfreeze()
        return lambda: self._collect(batches, (future.result() for future in futures))

    def _start_pool(self) -> ProcessPoolExecutor:
        """The worker pool, its workers tied to this process's life (`_end_with_parent`).
        With the fork start method they fork in the thread that submits the first batch:
        this one (an ingest's, the main thread's from the command line), all of them at once."""
        context = multiprocessing.get_context()
        method = context.get_start_method()
        forker_outlives_pool = method == "forkserver" or threading.current_thread() is threading.main_thread()
        pdeathsig_setter()  # looked up here, so the workers inherit it
        parent = None if method == "forkserver" else os.getpid()  # a fork server's children are not ours
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=context, initializer=_end_with_parent,
                                   initargs=(parent, forker_outlives_pool))

    def _collect(self, batches, results) -> tuple[Verdicts, list[pa.Table]]:
        verdicts: Verdicts = ([], [], [], [])
        tables: list[pa.Table] = []
        for batch, (batch_verdicts, table) in zip(batches, results):
            for column, values in zip(verdicts, batch_verdicts):
                column += values
            tables.append(table)
            self.advance(len(batch))
        return verdicts, tables

    def read(self, todo: ToRead) -> tuple[Verdicts, list[pa.Table]]:
        return self.submit(todo)()
