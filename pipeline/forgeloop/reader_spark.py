"""Batches of run files read by the tasks of Spark jobs (`ingest forgeloop --engine spark`).

Each task reads one batch with the reader's own code (`reader.read_batch`: bytes, hash, JSON,
validated row) and hands back the batch's verdicts and its accepted rows as Arrow IPC bytes (lz4).
The batches go in waves of as many as the session runs at once, and their answers are taken in
batch order: this process holds at most a wave's answers, and the verdicts, duplicates, manifest
and tables are those of the other engines. Fewer than two batches to read are read in this process
(no session is started for them); once started, the session serves every later batch.

The executors read the run files at the absolute paths this process sees: a local master, or a
cluster whose nodes all mount RESULTS at the same path. A task that does not find RESULTS fails the
ingest with one line naming it (nothing is written); a file it cannot read is rejected as this
process rejects it, `cannot be read (...)`, and read again by the next ingest.
"""
from __future__ import annotations

import os
import socket
from collections import deque
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa

from .reader import ToRead, Verdicts, read_batch

JOB = "loopmeter ingest forgeloop"
_END = object()


def read_batch_shipped(results: str, batch: ToRead, max_file_bytes: int) -> tuple[Verdicts, bytes]:
    """`read_batch` on an executor: the verdicts, and the accepted rows as Arrow IPC bytes."""
    if not os.path.isdir(results):
        raise FileNotFoundError(
            f"the Spark executor on {socket.gethostname()} cannot read RESULTS {results}: the executors read the "
            "run files at the paths this machine sees (a local master, or a cluster whose nodes mount them there)")
    verdicts, table = read_batch(results, batch, max_file_bytes)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return verdicts, sink.getvalue().to_pybytes()


def _unshipped(shipped: bytes) -> pa.Table:
    """The rows a task sent. Compressed, each buffer is decoded into memory of its own, so a column
    kept past its batch (the run keys) keeps only itself, as with the pool's scratch files."""
    with pa.ipc.open_stream(pa.py_buffer(shipped)) as reader:
        return reader.read_all()


class SparkReading:
    """`RunReader`'s answers, the batches read by Spark tasks in waves (the session started on first
    need, stopped as the block ends)."""

    def __init__(self, results: str, max_file_bytes: int, master: str | None,
                 advance: Callable[[int], None] = lambda n: None, workers: int | None = None):
        self.master, self.results, self.max_file_bytes = master, os.path.abspath(results), max_file_bytes
        self.workers = workers  # batches per wave (None: as many as the session runs at once)
        self.advance = advance
        self.spark = None
        self.wave = 2  # batches to read before a session is started; then as many as it runs at once

    def __enter__(self) -> "SparkReading":
        return self

    def __exit__(self, *exc_info) -> None:
        if self.spark is not None:
            from ..on_spark import stop

            stop(self.spark)
            self.spark = None

    def stream(self, tasks: Iterable, todo: Callable[[object], ToRead]) -> Iterator:
        """Each task with its files' verdicts and accepted rows, in the order of `tasks` (as `RunReader.stream`)."""
        tasks = iter(tasks)
        pending: deque = deque()  # (task, its files), in order
        while True:
            self._fill(pending, tasks, todo)
            if self.spark is None and sum(1 for _, files in pending if len(files)) >= 2:
                self._start()
                self._fill(pending, tasks, todo)
            if not pending:
                return
            reading = [files for _, files in pending if len(files)]
            answers = self._wave(reading) if self.spark is not None and reading else None
            while pending:
                task, files = pending.popleft()
                if answers is not None and len(files):
                    verdicts, shipped = answers.popleft()
                    table = _unshipped(shipped)
                else:  # nothing to read, or too little to start a session for
                    verdicts, table = read_batch(self.results, files, self.max_file_bytes)
                self.advance(len(files))
                yield task, verdicts, table

    def _fill(self, pending: deque, tasks: Iterator, todo: Callable[[object], ToRead]) -> None:
        """Tasks taken until `pending` holds a wave of batches with files to read (or the tasks end)."""
        reading = sum(1 for _, files in pending if len(files))
        while reading < self.wave:
            task = next(tasks, _END)
            if task is _END:
                return
            files = todo(task)
            pending.append((task, files))
            reading += bool(len(files))

    def _start(self) -> None:
        from ..on_spark import session, wave_size

        self.spark = session(self.master, JOB)
        self.wave = wave_size(self.spark, self.workers)

    def _wave(self, batches: list[ToRead]) -> deque:
        """One Spark job reading these batches, a task each: their answers (verdicts, rows shipped), in order."""
        from ..on_spark import wave

        return deque(wave(self.spark, read_batch_shipped,
                          [(self.results, batch, self.max_file_bytes) for batch in batches]))
