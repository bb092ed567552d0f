"""Reading run files: bytes -> hash -> JSON -> validated row, in batches, on every core.

`RunReader(...).stream(tasks, todo)` reads the files each task names (`ToRead`, columns; the
caller cuts them into batches by files and by bytes) and answers the tasks in their order,
taking them as the reading goes: a batch per worker and AHEAD more at most. A batch's answer is
its files' verdicts (accepted, unchanged or rejected with field and rule) and content hashes, as
columns, plus the accepted rows as an Arrow table. Batches go to worker processes once two are
waiting (a small ingest is read in its own process); a worker hands its rows over in an Arrow
file of the scratch space, never as Python rows: the batches read ahead wait on disk, and the
main process holds the one it takes.

The engine (`engines.Engine`) says who reads: `local`, as above, a worker per usable core (none on a
machine of one core); `pool`, exactly `workers` worker processes (default one per usable core); `spark`,
the tasks of Spark jobs, a batch each, in waves (`reader_spark.SparkReading`, which answers as
`RunReader.stream` does). Whoever reads, the answers are the same and come in the same order.
"""
from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import signal
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Callable, Iterable, Iterator, TypeVar

import orjson
import pyarrow as pa

from ..engines import Engine
from ..lifetime import end_with_parent, pdeathsig_setter, usable_cores
from ..storage.registry import arrow_type
from .contract import TOO_LARGE, UNREADABLE
from .schema import RUN_COLUMNS, SOURCE_COLUMNS, RunRejected, flatten_run

ALL_RUN_COLUMNS = [*RUN_COLUMNS, *SOURCE_COLUMNS]
BATCH = 2000  # files read at a time ...
BATCH_BYTES = 32 << 20  # ... or about this many bytes of them (a batch's rows are about as large)
AHEAD = 8  # batches read beyond one per worker (waiting on disk), so the workers seldom wait for the main process
PARALLEL_FROM = 2 * BATCH  # two batches waiting (this many small files, or fewer large ones): read in worker processes


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
            raise RunRejected("file", f"is not valid UTF-8 ({_first_bad_byte(content) or message})") from None
        if "depth limit" in message.lower() or "recursion" in message.lower():
            raise RunRejected("file", "nests too deeply to be a run (over 1024 levels)") from None
        raise RunRejected("file", f"is not valid JSON ({message})") from None
    row = flatten_run(document)
    if row[0] != expected_run_set:
        raise RunRejected("runSetId", f"must equal its run set folder ({expected_run_set})")
    return row


def _first_bad_byte(content: bytes) -> str | None:
    """Where `content` stops being UTF-8, for a message (orjson's own says neither what nor where)."""
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"byte 0x{content[error.start]:02x} at offset {error.start}: {error.reason}"
    return None


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
    if not rows:  # (pa.array, or empty_table, would import pandas for nothing)
        return pa.Table.from_batches([], schema=pa.schema([(name, arrow_type(dtype, large=True)) for name, dtype, _ in ALL_RUN_COLUMNS]))
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


def read_batch_to(results: str, batch: ToRead, max_file_bytes: int, spill: str) -> tuple[Verdicts, str]:
    """`read_batch` in a worker process, the rows written to the Arrow file `spill` (nothing large is
    pickled, and a batch waiting for the main process waits on disk, not in its memory)."""
    verdicts, table = read_batch(results, batch, max_file_bytes)
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(spill, "wb") as sink, pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return verdicts, spill


def _taken(spill: str) -> pa.Table:
    """The rows a worker wrote to `spill`, the file removed. Compressed, each buffer is read into
    memory of its own, so a column kept past its batch (the run keys) keeps only itself: buffers
    sliced out of one read, or out of a mapped file, would keep the whole batch."""
    with pa.OSFile(spill) as source:
        table = pa.ipc.open_file(source).read_all()
    os.unlink(spill)
    return table


Task = TypeVar("Task")


class RunReader:
    """Reads batches of files, in worker processes when two or more batches wait (the pool
    starts once, on first need, and serves every later batch); the workers hand their rows over
    in Arrow files in `spill` (a scratch folder): a worker per usable core (`engine` local, none on a
    machine of one core), or exactly the `engine`'s workers (pool, default one per usable core)."""

    def __init__(self, results: str, max_file_bytes: int, spill: str, advance: Callable[[int], None] = lambda n: None,
                 engine: Engine = Engine()):
        self.results, self.max_file_bytes, self.spill, self.advance = results, max_file_bytes, spill, advance
        self.spilled = 0  # batches handed to the workers
        self.workers = usable_cores() if engine.name == "local" else engine.workers or usable_cores()
        self.parallel = self.workers > 1 or engine.name == "pool"
        self.pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "RunReader":
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        if self.pool is not None:
            # after an error or Ctrl-C, not waiting: a KeyboardInterrupt inside the executor's own
            # calls can leave its manager thread waiting for ever (the workers end with this process)
            self.pool.shutdown(wait=exc_type is None, cancel_futures=True)

    def stream(self, tasks: Iterable[Task], todo: Callable[[Task], ToRead]) -> Iterator[tuple[Task, Verdicts, pa.Table]]:
        """Each task with the verdicts of its files (`todo(task)`, read in that order) and their
        accepted rows, in the order of `tasks`, taken from it as the reading goes: at most a batch
        per worker and AHEAD more are being read or waiting to be taken."""
        tasks = iter(tasks)
        window: deque[list] = deque()  # [task, its files, its future (None: not submitted)]
        size = self.workers + AHEAD if self.parallel else 1
        while True:
            window.extend([task, todo(task), None] for task in islice(tasks, size - len(window)))
            if not window:
                return
            if self.parallel and (self.pool is not None or sum(1 for _, files, _ in window if len(files)) >= 2):
                waiting = [entry for entry in window if entry[2] is None and len(entry[1])]
                if waiting:
                    for entry, future in zip(waiting, self._submit([files for _, files, _ in waiting])):
                        entry[2] = future
            task, files, future = window.popleft()
            if future is not None:
                verdicts, spill = future.result()
                table = _taken(spill)
            else:
                verdicts, table = read_batch(self.results, files, self.max_file_bytes)
            self.advance(len(files))
            yield task, verdicts, table

    def _submit(self, batches: list[ToRead]) -> list[Future]:
        """Start reading these batches in the workers."""
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
            futures = []
            for batch in batches:
                self.spilled += 1
                spill = os.path.join(self.spill, f"batch-{self.spilled:08d}.arrow")
                futures.append(self.pool.submit(read_batch_to, self.results, batch, self.max_file_bytes, spill))
            return futures
        finally:
            if starting:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                gc.unfreeze()

    def _start_pool(self) -> ProcessPoolExecutor:
        """The worker pool, its workers tied to this process's life (`lifetime.end_with_parent`).
        With the fork start method they fork in the thread that submits the first batch:
        this one (an ingest's, the main thread's from the command line), all of them at once."""
        context = multiprocessing.get_context()
        method = context.get_start_method()
        forker_outlives_pool = method == "forkserver" or threading.current_thread() is threading.main_thread()
        pdeathsig_setter()  # looked up here, so the workers inherit it
        parent = None if method == "forkserver" else os.getpid()  # a fork server's children are not ours
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=context, initializer=end_with_parent,
                                   initargs=(parent, forker_outlives_pool))
