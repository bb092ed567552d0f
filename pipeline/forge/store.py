"""Reading a Forge store: a SQLite `dataset.sqlite` (read-only) or a JSON Lines export.

Both containers come out as batches of rows in one shape, `SourceBatch`, so the checks
that follow (`ingest.py`) are written once, in SQL. Nothing here judges an event beyond
what the container itself says: a SQLite row whose columns have the wrong storage class
(a blob rid, a text ts) is reported here, everything else downstream.

A store must be a regular file (`check_regular_file`): a pipe or a device is refused before it is read.
A record over MAX_RECORD_BYTES (a line, a SQLite value) is rejected without being read into memory.

The SQLite reader is `sqlite_store.py`. A JSON Lines export is read a chunk of bytes at a time;
a batch ends at BATCH_ROWS lines, at BATCH_BYTES, or once its lines of LARGE_LINE bytes or more
reach LARGE_BYTES (DuckDB's JSON functions take about ten times the text they parse).
"""
from __future__ import annotations

import codecs
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import polars as pl

if TYPE_CHECKING:
    import pyarrow as pa

from ..errors import LoopmeterError
from ..storage.files import parse_json

SQLITE_MAGIC = b"SQLite format 3\x00"
EVENT_FIELDS = ("rid", "kind", "src", "ts", "run", "task", "repo", "mode", "data")
TEXT_FIELDS = ("rid", "kind", "src", "run", "task", "repo", "mode", "data")
# rows checked together (DuckDB holds a batch per stage worker, memory stays flat); each batch costs a
# fixed 0.1 s or so of CPU (planning the staging queries: about 0.06 s for the main one), so fewer larger
# batches cost less: 150,000 against 75,000 took a 1M-event ingest 0.5 s less, for 160 MiB more at peak
BATCH_ROWS = 150_000
FETCH_ROWS = 20_000  # SQLite rows fetched as Python objects at a time
READ_CHUNK_BYTES = 8 * 1024 * 1024
HEAD_BYTES = 1024 * 1024  # what `detect_format` reads of a file that is not SQLite
# the most one record may hold: a JSON Lines line, or one column of a SQLite row. DuckDB's JSON functions
# take about ten times a value's size while a batch is checked (a 32 MiB line asked for 256 MiB at once,
# past the stage's memory limit); a larger record is rejected unread, so memory stays as it is for
# ordinary events
MAX_RECORD_BYTES = 4 * 1024 * 1024
# a JSON Lines batch ends at BATCH_ROWS lines, at BATCH_BYTES bytes, or at a line weighing LARGE_LINE or more
# (below) that brings its large lines' weights to LARGE_BYTES: DuckDB's JSON functions take about ten times the text they
# parse, so a few large lines weigh more than a whole batch of ordinary ones (150,000 lines of a few
# hundred bytes: 50 MB or so), and two batches are checked at once
BATCH_BYTES = 96 * 1024 * 1024
LARGE_LINE = 64 * 1024
LARGE_BYTES = 4 * 1024 * 1024
# A record's weight is its bytes, and COMMA_WEIGHT more per comma: a value of a dense array (`0,`, two
# bytes) costs the parser about 28 bytes, far beyond ten times its text, so a line of 63 KiB of such
# values weighs 2.5 times its size and counts as large. Text under DENSE_FROM bytes cannot weigh
# LARGE_LINE, so its commas are not counted.
COMMA_WEIGHT = 3
DENSE_FROM = LARGE_LINE // (1 + COMMA_WEIGHT)
# A SQLite store's batches end the same way: at LARGE_BYTES of values weighing LARGE_LINE or more.
# Rows read as Python objects (the exact reader) are fetched a few at first, then more while they
# are small: at most about FETCH_BYTES at a time, whatever the rows hold
FIRST_FETCH = 4
FETCH_BYTES = 8 * 1024 * 1024


class StoreError(LoopmeterError):
    """The store as a whole cannot be read (not a store, locked, missing tables)."""


@dataclass
class SourceBatch:
    """Rows of one container, in source order.

    `kind` says which named query reads `frame`: `sqlite` frames hold the event columns
    (text decoded already, or binary when `binary`), `jsonl` frames hold `line` and the
    raw `text` of each line (binary: decoded in SQL, so bad UTF-8 is one rejected line).
    `restart`: forget the batches so far, the rows come again. A frame is a polars frame or,
    from the Arrow reader, an Arrow table (DuckDB reads either).
    """

    kind: str
    frame: "pl.DataFrame | pa.Table"
    binary: bool = False
    rejected: list = field(default_factory=list)  # (line, rid, field, rule) found by the container


@dataclass
class Container:
    path: Path
    format: str  # sqlite or jsonl
    repos: list[tuple[str, str]] = field(default_factory=list)  # (repo, path) from the SQLite repos table
    # (line, rid, field, rule) of the SQLite repos rows that are not mappings; the batches carry them too
    repo_rejections: list[tuple] = field(default_factory=list)


def detect_format(path: Path) -> str:
    """sqlite or jsonl, from the file's first bytes (the name does not decide), or `StoreError`.

    A file is a SQLite store when it starts with the SQLite header. It is a JSON Lines export when
    one of the lines in its first MiB (`HEAD_BYTES`) is an event or a repo line: a JSON object with a
    kind (a string); or when its first line, longer than that MiB, starts with `{` (a large plan event:
    the ingest judges it as any line). Lines around an event line that are broken
    are rejected with their numbers and the rest loads. A file with no such line is no Forge store (a
    pretty-printed JSON document, a ForgeLoop run file, a JSON array, a binary file) and is refused
    before anything is written; so is an empty file, unless it is named `.jsonl` or `.ndjson` (an
    export of an empty store). Only the first MiB is read: a real export's first line decides."""
    check_regular_file(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
            if head == SQLITE_MAGIC:
                return "sqlite"
            head += handle.read(HEAD_BYTES - len(head))
            whole = len(head) < HEAD_BYTES or not handle.read(1)
    except OSError as error:
        raise StoreError(f"{path}: cannot be read ({error.strerror})") from None
    reason = _not_json_lines(head, whole)
    if reason is None:
        return "jsonl"
    if reason == _EMPTY and path.suffix in (".jsonl", ".ndjson"):
        return "jsonl"  # an export of a store without events: 0 lines read
    if path.suffix in (".sqlite", ".sqlite3", ".db"):
        raise StoreError(f"{path}: is not a SQLite database (it does not start with the SQLite header)")
    raise StoreError(f"{path}: is neither a SQLite Forge store nor a JSON Lines export: not SQLite (no SQLite header), "
                     f"and {reason}; a Forge export has one event per line")


_EMPTY = "it is empty"

_FILE_KINDS = ((stat.S_ISFIFO, "a pipe"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_regular_file(path: Path) -> None:
    """`StoreError` unless `path` is a regular file (symbolic links followed). A pipe is refused before
    it is opened (opening a FIFO waits for a writer; reading a pipe consumes it, so a second look
    at it sees other bytes), and so is a device (/dev/zero never ends)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise StoreError(f"{path}: no such file") from None
    except OSError as error:
        raise StoreError(f"{path}: cannot be read ({error.strerror})") from None
    if stat.S_ISDIR(mode):
        raise StoreError(f"{path}: is a directory; give the store file (dataset.sqlite) or a JSON Lines export")
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
        raise StoreError(f"{path}: is {kind}, not a regular file; a store is read from a file: "
                         "copy it to a file first (cat ... > export.jsonl)")


def _is_event_line(line: bytes) -> bool:
    """A JSON object with a kind (a string): what every line of an export is meant to be."""
    if not (line.startswith(b"{") and line.endswith(b"}")):
        return False  # cheaply not an object (most lines of a pretty-printed document)
    try:
        value = parse_json(line)
    except ValueError:
        return False
    return isinstance(value, dict) and isinstance(value.get("kind"), str)


def _not_json_lines(head: bytes, whole: bool) -> str | None:
    """None when `head` (the file's first bytes; `whole`: the whole file) holds an event line, or a line
    cut by its end that starts with `{`; else why the file is no JSON Lines export."""
    if head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8):]
    lines, first, start = 0, b"", 0
    while start < len(head):
        end = head.find(b"\n", start)
        cut = end < 0 and not whole  # the line goes on past the bytes read
        line = head[start:len(head) if end < 0 else end].strip()
        start = len(head) if end < 0 else end + 1
        if not line:
            continue
        if cut:
            if not lines and line.startswith(b"{"):
                return None  # a first line longer than the bytes read (a large plan event): the ingest judges it
            break  # (a later cut line is not judged: it may be the `{` opening an object of a pretty-printed file)
        lines += 1
        first = first or line
        if _is_event_line(line):
            return None
    if not lines:
        return _EMPTY if whole else "its first MiB holds no complete line"
    if whole:
        described = "no line of it is a JSON object with a kind"
        try:
            value = parse_json(head)
        except ValueError:
            return described
        if lines > 1:
            return f"{described} (it is one JSON document spread over {lines} lines)"
        return f"{described} (its one line is {_described_value(value)})"
    described = f"none of the {lines:,} lines of its first MiB is a JSON object with a kind"
    if first in (b"{", b"["):
        described += " (it starts like one JSON document spread over lines)"
    return described


def _described_value(value: object) -> str:
    if isinstance(value, dict):
        return "a JSON object without a kind" if "kind" not in value else "a JSON object whose kind is not a string"
    return "JSON " + {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


# ---- SQLite ----------------------------------------------------------------------------


def read_jsonl(path: Path, *, batch_rows: int = BATCH_ROWS, max_record: int = MAX_RECORD_BYTES,
               batch_bytes: int = BATCH_BYTES) -> tuple[Container, Iterator[SourceBatch]]:
    """The export's non-blank lines in batches of `batch_rows` lines or `batch_bytes` bytes. A line longer
    than `max_record` bytes is rejected (field `line`) without being held: only its length is counted,
    so memory stays bounded whatever the file holds (a 50 GB file of one line included)."""
    container = Container(path=path, format="jsonl")

    def oversize(line: int, size: int) -> tuple:
        return (line, None, "line", f"is {size:,} bytes long; a line may hold at most {_size(max_record)}")

    def batches() -> Iterator[SourceBatch]:
        try:
            handle = open(path, "rb")
        except OSError as error:
            raise StoreError(f"{path}: cannot be read ({error.strerror})") from None
        with handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # replaced since it was looked at
                raise StoreError(f"{path}: is not a regular file; copy it to a file first")
            line_number = 0
            pending = b""  # the start of the line the last chunk cut
            skipped = 0  # bytes so far of a line too long to hold (kept out of `pending`)
            lines: list[bytes] = []
            numbers: list[int] = []
            rejected: list[tuple] = []
            held = large = 0
            while True:
                chunk = handle.read(READ_CHUNK_BYTES)
                if not chunk:
                    break
                if line_number == 0 and not pending and not skipped and chunk.startswith(codecs.BOM_UTF8):
                    chunk = chunk[len(codecs.BOM_UTF8):]  # an export saved with a byte-order mark: not part of line 1
                parts = chunk.split(b"\n")
                rest = parts.pop()
                for index, raw in enumerate(parts):
                    line_number += 1
                    if index == 0 and skipped:
                        rejected.append(oversize(line_number, skipped + len(raw)))
                        skipped = 0
                        continue
                    if index == 0 and pending:
                        raw, pending = pending + raw, b""
                    if len(raw) > max_record:
                        rejected.append(oversize(line_number, len(raw)))
                    elif raw.strip():
                        lines.append(raw)
                        numbers.append(line_number)
                        held += len(raw)
                        weight = len(raw) + COMMA_WEIGHT * raw.count(b",") if len(raw) >= DENSE_FROM else len(raw)
                        if weight >= LARGE_LINE:
                            large += weight
                            if large >= LARGE_BYTES:
                                yield _jsonl_batch(numbers, lines, rejected)
                                lines, numbers, rejected, held, large = [], [], [], 0, 0
                if skipped or len(pending) + len(rest) > max_record:
                    skipped += len(pending) + len(rest)
                    pending = b""
                else:
                    pending += rest
                if len(lines) >= batch_rows or held >= batch_bytes:
                    yield _jsonl_batch(numbers, lines, rejected)
                    lines, numbers, rejected, held, large = [], [], [], 0, 0
            if skipped:
                rejected.append(oversize(line_number + 1, skipped))
            elif pending.strip():
                lines.append(pending)
                numbers.append(line_number + 1)
            if lines or rejected:
                yield _jsonl_batch(numbers, lines, rejected)

    return container, batches()


def _size(limit: int) -> str:
    """A byte limit as the rules say it: `4 MiB (4,194,304 bytes)`."""
    mib = limit / (1024 * 1024)
    return (f"{mib:g} MiB ({limit:,} bytes)" if mib >= 1 else f"{limit:,} bytes")


def _jsonl_batch(numbers: list[int], lines: list[bytes], rejected: list[tuple] | None = None) -> SourceBatch:
    frame = pl.DataFrame(
        {"line": pl.Series("line", numbers, dtype=pl.Int64), "text": pl.Series("text", lines, dtype=pl.Binary)}
    )
    return SourceBatch("jsonl", frame.with_columns(pl.col("line").alias("position")), True, list(rejected or []))
