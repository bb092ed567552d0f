"""The warehouse: the only module that writes tables.

Layout of a warehouse directory:

    <table>/                     a symlink to the table's current version
    .versions/<table>/<id>/      one complete version of a table (Parquet files)
    loopmeter.duckdb             a DuckDB database with one documented view per table
    .lock                        held by the process that writes
    .state/                      what the last ingests and aggregates saw
    .scratch/                    scratch space of the stage running now

A table is replaced as a whole: its new version is written aside, then the symlink is
swapped with one atomic rename, so a reader (or a process killed half way) always sees
either the old or the new version, never a mix. A stage that writes several tables does so
inside `Warehouse.publishing()`: its new versions are published together when it ends, after
a journal (`.state/publishing.json`) names them all; Ctrl-C waits for the swaps, and a
process killed among them leaves the journal, by which the next writer (or reader, when no
writer holds the lock) finishes them. So an interrupted stage leaves all its tables old, or
all new. Partitioned tables (hive layout,
`run_set_id=<id>/part-0.parquet`) keep the column inside each file too, so every file
reads on its own; unchanged partitions are hard-linked into the new version, not copied.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from . import SCHEMA_VERSION, folders
from .lifetime import thread_pool, usable_cores
from .errors import LoopmeterError, WarehouseBusy
from .faults import checkpoint

if TYPE_CHECKING:
    import duckdb
    import polars as pl

VERSIONS = ".versions"
DATABASE = "loopmeter.duckdb"
LOCK = ".lock"
SCRATCH = ".scratch"  # stages' scratch directories
STATE = ".state"  # what the last ingests and aggregates saw (to skip what did not change)
JOURNAL = "publishing.json"  # in STATE: the versions a multi-table publish is swapping in


class Warehouse:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.catalog_stale = False  # set when a killed writer left the catalog half-built
        self.unfinished: str | None = None  # why a killed writer's publish could not be finished
        # inside `publishing()`: table -> its new version, published when the block ends (read here meanwhile)
        self._pending: dict[str, Path] | None = None
        self._pending_folders: list[folders.Staged] = []  # folders staged to be swapped in with them

    # ---- reading -------------------------------------------------------------------
    def table_dir(self, name: str) -> Path:
        """Where table `name` is read: its link in the root, or inside `publishing()` the new
        version written in the block (the block reads its own writes)."""
        pending = self._pending
        if pending is not None and name in pending:
            return pending[name]
        return self.root / name

    def has_table(self, name: str) -> bool:
        return self.table_dir(name).is_dir()

    def table_version(self, name: str) -> str | None:
        """Which version of table `name` is current (None: no table); any write changes it."""
        pending = self._pending
        if pending is not None and name in pending:
            return os.path.relpath(pending[name], self.root)  # what its link will hold
        link = self.root / name
        return os.readlink(link) if link.is_symlink() else None

    def table_glob(self, name: str) -> str:
        return str(self.table_dir(name) / "**" / "*.parquet")

    def partitions(self, name: str, column: str) -> dict[str, Path]:
        """Partition value -> its directory, for a hive-partitioned table."""
        if not self.has_table(name):
            return {}
        prefix = column + "="
        return {
            entry.name[len(prefix):]: entry
            for entry in sorted(self.table_dir(name).iterdir())
            if entry.is_dir() and entry.name.startswith(prefix)
        }

    def partition_files(self, name: str, column: str, values: Iterable[str]) -> list[str]:
        """The Parquet files of these partitions (those that exist), in the order given."""
        partitions = self.partitions(name, column)
        return [str(path) for value in values if value in partitions for path in sorted(partitions[value].glob("*.parquet"))]

    def read(self, name: str, columns: list[str] | None = None) -> "pl.DataFrame | None":
        import polars as pl

        if not self.has_table(name):
            return None
        return pl.read_parquet(self.table_glob(name), columns=columns, hive_partitioning=False)

    def read_partition(self, name: str, column: str, value: str) -> "pl.DataFrame | None":
        import polars as pl

        directory = self.partitions(name, column).get(value)
        if directory is None:
            return None
        return pl.read_parquet(str(directory / "*.parquet"), hive_partitioning=False)

    def connect(self) -> "duckdb.DuckDBPyConnection":
        """An in-memory DuckDB connection with a view per table (absolute paths)."""
        import duckdb

        connection = duckdb.connect()
        for name in self.table_names():
            connection.execute(f'CREATE VIEW "{name}" AS {self.view_sql(name, absolute=True)}')
        return connection

    def table_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted({
            *(entry.name
              for entry in self.root.iterdir()
              if not entry.name.startswith(".") and entry.is_symlink() and entry.is_dir()),
            *(self._pending or {}),
        })

    def view_sql(self, name: str, *, absolute: bool) -> str:
        location = self.table_glob(name) if absolute else f"{name}/**/*.parquet"
        location = location.replace("'", "''")
        return f"SELECT * FROM read_parquet('{location}', hive_partitioning = false, union_by_name = true)"

    @property
    def publishing_now(self) -> bool:
        """Inside a `publishing()` block (tables written now are not published yet)."""
        return self._pending is not None

    # ---- writing -------------------------------------------------------------------
    @contextmanager
    def lock(self, *, wait: bool = False, command: str = "") -> Iterator[None]:
        """Hold the warehouse's writer lock; a second writer waits or leaves with who holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        handle = open(self.root / LOCK, "a+")
        try:
            if not _try_lock(handle) and not _lock_after_a_moment(handle):
                holder = _holder(handle)
                if not wait:
                    raise WarehouseBusy(
                        f"warehouse {self.root} is locked by {holder}; try again later or pass --wait"
                    ) from None
                print(f"waiting for the warehouse lock held by {holder} ...", file=sys.stderr)
                fcntl.flock(handle, fcntl.LOCK_EX)
            since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            _name_holder(handle, f"pid {os.getpid()} on {socket.gethostname()} ({command or 'loopmeter'}) since {since}")
            self._finish_publishing()
            if self.unfinished:
                raise LoopmeterError(
                    f"an interrupted aggregate's documents could not be swapped in ({self.unfinished}); "
                    f"fix that and run again, or remove {self.root / STATE / JOURNAL} to keep the documents as they are")
            self._collect_garbage()
            yield
        finally:
            try:
                handle.seek(0)
                handle.truncate()
            except OSError:
                pass
            handle.close()  # closing releases the lock

    def write_table(
        self,
        name: str,
        frame: "pl.DataFrame",
        *,
        partition_by: str | None = None,
        keep_partitions: bool = False,
        drop_partitions: set[str] | frozenset[str] = frozenset(),
    ) -> Path:
        """Replace table `name` with `frame`, atomically.

        With `partition_by` and `keep_partitions`, partitions of the current version that
        `frame` does not hold (and `drop_partitions` does not name) are kept as they are.
        """
        with self.build_table(name, partition_by) as builder:
            builder.write(frame)
            builder.keep_others = keep_partitions
            builder.drop = set(drop_partitions)
        return self.table_dir(name)

    @contextmanager
    def build_table(self, name: str, partition_by: str | None = None) -> Iterator["TableBuilder"]:
        """A new version of table `name`, written piece by piece (so a large table never has
        to be in memory at once) and published atomically when the block ends without error."""
        builder = TableBuilder(self, name, partition_by)
        try:
            yield builder
        except BaseException:
            shutil.rmtree(builder.version, ignore_errors=True)
            raise
        if builder.cancelled:
            shutil.rmtree(builder.version, ignore_errors=True)
        else:
            builder.publish()

    def _new_version_dir(self, name: str) -> Path:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        directory = self.root / VERSIONS / name / f"{stamp}-{os.getpid()}-{secrets.token_hex(3)}"
        directory.mkdir(parents=True)
        return directory

    def _write_file(self, frame: "pl.DataFrame", path: Path, table: str) -> None:
        """polars' own Parquet writer: a third less CPU than through Arrow and pyarrow's, and
        no conversion of its string views to Arrow's large strings on the way."""
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(path, compression="zstd", metadata=_tags(table))
        checkpoint(f"wrote-file:{table}")

    def _copy_file(self, connection: "duckdb.DuckDBPyConnection", query: str, path: Path, table: str,
                   params: dict | None = None, level: int | None = None) -> int:
        """DuckDB writes the rows of `query` to the Parquet file `path` itself (streaming, multi-threaded,
        under its memory limit): no row passes through Python. Same compression and metadata as
        `_write_file`. Returns the number of rows written."""
        path.parent.mkdir(parents=True, exist_ok=True)
        pairs = ", ".join(f"'{key}': '{value.replace(chr(39), chr(39) * 2)}'" for key, value in _tags(table).items())
        location = str(path).replace("'", "''")
        compression = "COMPRESSION zstd" + (f", COMPRESSION_LEVEL {int(level)}" if level is not None else "")
        (rows,) = connection.execute(
            f"COPY ({query}) TO '{location}' (FORMAT parquet, {compression}, KV_METADATA {{{pairs}}})", params or {}
        ).fetchone()
        checkpoint(f"wrote-file:{table}")
        return rows

    def copy_table_file(self, connection: "duckdb.DuckDBPyConnection", query: str, path: Path, table: str,
                        params: dict | None = None, level: int | None = None) -> int:
        """Write the rows of `query` as a file of table `table` (its columns, compression and metadata) to
        `path` in the warehouse's scratch space, to be taken into a new version whole by
        `TableBuilder.adopt`; `level`: zstd's (DuckDB's default when None). Returns the number of rows
        written."""
        if self.root / SCRATCH not in Path(path).parents:
            raise ValueError(f"{path}: a table file is written in the warehouse's scratch space ({self.root / SCRATCH})")
        return self._copy_file(connection, query, Path(path), table, params, level)

    @contextmanager
    def publishing(self) -> Iterator[None]:
        """Publish the tables written in the block together, when it ends without error (see the
        module's docstring); an error or Ctrl-C inside leaves every table as it was. Reads in the
        block see its writes. Nested blocks are part of the outermost one."""
        if self._pending is not None:
            yield
            return
        self._pending = {}
        try:
            yield
        except BaseException:
            pending, self._pending = self._pending, None
            staged, self._pending_folders = self._pending_folders, []
            for version in pending.values():
                shutil.rmtree(version, ignore_errors=True)
            for entry in staged:
                folders.discard(entry)
            raise
        pending, self._pending = self._pending, None
        staged, self._pending_folders = self._pending_folders, []
        if pending or staged:
            self._commit(pending, staged)

    def publish_folder(self, entry: folders.Staged) -> None:
        """Swap a staged folder in (`folders.py`): inside `publishing()`, with the block's tables,
        under the same journal; else now."""
        if self._pending is not None:
            self._pending_folders.append(entry)
        else:
            folders.swap(entry)

    def _refuse_real_directory(self, name: str) -> None:
        link = self.root / name
        if link.exists() and not link.is_symlink():
            raise LoopmeterError(f"{link} is a real directory, not a loopmeter table; move it away first")

    def _publish(self, name: str, version: Path) -> None:
        self._refuse_real_directory(name)
        pending = self._pending
        if pending is not None:  # published with the others when the block ends
            superseded = pending.get(name)
            pending[name] = version
            if superseded is not None and superseded != version:
                shutil.rmtree(superseded, ignore_errors=True)  # a new version made from it has hard links
            return
        _fsync_dir(version)
        previous = self._swap(name, version)
        _fsync_dir(self.root)
        _remove_superseded(previous, version)

    def _swap(self, name: str, version: Path) -> Path | None:
        """Point table `name`'s link at `version` (one atomic rename); the version it left."""
        link = self.root / name
        previous = link.resolve() if link.is_symlink() else None
        temporary = self.root / f".{name}.{secrets.token_hex(4)}.link"
        os.symlink(os.path.relpath(version, self.root), temporary)
        os.replace(temporary, link)  # the atomic step
        return previous

    def _commit(self, pending: dict[str, Path], staged: list[folders.Staged] = ()) -> None:
        """Publish `pending` (table -> new version) and swap the `staged` folders in as one: the
        journal first, then the swaps."""
        for name in pending:  # checked as each was written too; a directory may have appeared since
            self._refuse_real_directory(name)
        for version in pending.values():
            _fsync_dir(version)
        journal = self.root / STATE / JOURNAL
        previous = []
        try:
            with _interruption_deferred():  # from the journal on, Ctrl-C waits for the last swap
                atomic_write_text(journal, json.dumps({
                    "tables": {name: os.path.relpath(version, self.root) for name, version in pending.items()},
                    "folders": [entry.as_json() for entry in staged],
                }))
                _fsync_dir(journal.parent)
                checkpoint("publishing:journal")
                for name, version in pending.items():
                    previous.append((self._swap(name, version), version))
                    checkpoint(f"publishing:swapped:{name}")
                for entry in staged:
                    folders.swap(entry, remove=False)
                    checkpoint(f"publishing:swapped-folder:{entry.target.name}")
                _fsync_dir(self.root)
                journal.unlink()
        finally:  # also when the Ctrl-C held above comes now: the versions left go with it
            for old, version in previous:
                _remove_superseded(old, version)
            for entry in staged:
                folders.remove_old(entry)

    def _finish_publishing(self) -> bool:
        """Finish the swaps a killed writer's journal names (its versions were complete when it
        was written); the caller holds the lock. Whether there was one. A folder that cannot be
        swapped in now (its error: `OSError`) stays in the journal, the rest is done."""
        journal = self.root / STATE / JOURNAL
        self.unfinished = None
        try:
            entries = json.loads(journal.read_text())
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            entries = {}  # unreadable: written atomically, so never half; nothing to finish
        entries = entries if isinstance(entries, dict) else {}
        if isinstance(entries.get("tables"), dict) or isinstance(entries.get("folders"), list):
            tables, staged = entries.get("tables"), entries.get("folders")
        else:  # the journal of an earlier loopmeter: tables only
            tables, staged = entries, []
        for name, relative in tables.items() if isinstance(tables, dict) else ():
            if not isinstance(relative, str):
                continue
            version, link = self.root / relative, self.root / name
            if not version.is_dir() or (link.exists() and not link.is_symlink()):
                continue  # nothing to point to, or not a loopmeter table (left to the next publish to refuse)
            if not link.is_symlink() or os.readlink(link) != relative:
                self._swap(name, version)
        failed, error = [], None
        for entry in staged if isinstance(staged, list) else ():
            try:
                folders.swap(folders.Staged.from_json(entry))
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # not a journal entry loopmeter wrote: nothing to finish
            except OSError as problem:
                failed.append(entry)
                error = error or problem
        _fsync_dir(self.root)
        if failed:
            atomic_write_text(journal, json.dumps({"tables": {}, "folders": failed}))
            self.unfinished = f"{error.filename}: {error.strerror}" if error.filename else str(error)
        else:
            journal.unlink(missing_ok=True)
        self.catalog_stale = True
        return True

    def finish_interrupted_publishing(self) -> None:
        """For a reader: when a killed writer left a publish half done and no writer holds the
        lock, finish it, so what is read is one stage's tables, all old or all new."""
        if not (self.root / STATE / JOURNAL).exists():
            return
        try:
            handle = open(self.root / LOCK, "a+")
        except OSError:
            return
        try:
            if not _try_lock(handle):
                return  # a writer holds it: it finishes the publish as it takes the lock
            # left there when done: a writer starting meanwhile waits for it, and then writes its own
            _name_holder(handle, f"pid {os.getpid()} ({FINISHING})")
            self._finish_publishing()
        finally:
            handle.close()

    @contextmanager
    def scratch(self) -> Iterator[Path]:
        """A scratch directory for one stage, inside the warehouse (the same file system, not
        a RAM-backed /tmp), removed when the block ends; one a killed writer left is removed
        by the next writer that takes the lock."""
        import tempfile

        base = self.root / SCRATCH
        base.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(dir=base))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _collect_garbage(self) -> None:
        """Remove what a killed writer left: versions no table points to, stray links,
        temporary files and scratch directories. A half-built catalog marks the catalog
        stale, to be rebuilt."""
        for stray in self.root.glob(".*.link"):
            stray.unlink(missing_ok=True)
        for stray in [*self.root.glob(".*.tmp*"), *self.root.glob(f"{STATE}/.*.tmp")]:
            if stray.name.startswith(f".{DATABASE}."):
                self.catalog_stale = True
            stray.unlink(missing_ok=True)
        shutil.rmtree(self.root / SCRATCH, ignore_errors=True)  # only the lock holder uses it
        versions = self.root / VERSIONS
        if not versions.is_dir():
            return
        for table in versions.iterdir():
            link = self.table_dir(table.name)
            current = link.resolve() if link.is_symlink() else None
            for version in table.iterdir():
                if version.resolve() != current:
                    shutil.rmtree(version, ignore_errors=True)



class TableBuilder:
    """One version of a table being written; see `Warehouse.build_table`."""

    def __init__(self, warehouse: Warehouse, name: str, partition_by: str | None):
        self.warehouse, self.name, self.partition_by = warehouse, name, partition_by
        self.version = warehouse._new_version_dir(name)
        self.written: set[str] = set()
        self.schema_frame: "pl.DataFrame | None" = None
        self.keep_others = False  # keep the current version's partitions not written here ...
        self.drop: set[str] = set()  # ... except these
        self.cancelled = False  # set to leave the table as it is

    def write(self, frame: "pl.DataFrame") -> None:
        """Write `frame`: the whole table, or (partitioned) its partitions, each at most once."""
        self.schema_frame = frame.clear()
        if self.partition_by is None:
            self.warehouse._write_file(frame, self.version / "part-0.parquet", self.name)
            self.written.add("")
            return
        if not frame.height:
            return
        parts = frame.partition_by(self.partition_by, as_dict=True, maintain_order=True)
        values = [str(value) for (value,) in parts]
        if self.written.intersection(values):
            raise ValueError(f"partition written twice in {self.name}: {sorted(self.written.intersection(values))}")
        jobs = [(part, self._directory(value) / "part-0.parquet") for value, part in zip(values, parts.values())]
        # Parquet encoding releases the GIL: write partitions on every core
        with thread_pool(usable_cores()) as pool:
            list(pool.map(lambda job: self.warehouse._write_file(job[0], job[1], self.name), jobs))
        self.written.update(values)

    def copy(self, connection: "duckdb.DuckDBPyConnection", query: str, *, partition: str | None = None,
             params: dict | None = None) -> None:
        """Write the rows of the DuckDB `query` (run on `connection`, its columns those of the table)
        as the table's file, or, partitioned, as the file of partition `partition` (each at most once).
        DuckDB encodes the Parquet itself, so a large table never passes through Python."""
        key = self._key(partition)
        if key in self.written:
            raise ValueError(f"partition written twice in {self.name}: {key!r}")
        self.warehouse._copy_file(connection, query, self._directory(key) / "part-0.parquet", self.name, params)
        self.written.add(key)

    def adopt(self, file: Path, *, partition: str | None = None) -> None:
        """Take a file written by `Warehouse.copy_table_file` for this table into the new version as it
        is (hard-linked, the scratch space being on the same file system: not rewritten). Several files
        may make up the table, or a partition."""
        key = self._key(partition)
        directory = self._directory(key)
        directory.mkdir(parents=True, exist_ok=True)
        os.link(file, directory / Path(file).name)
        self.written.add(key)

    def _key(self, partition: str | None) -> str:
        """The partition's key in `written` ("" for an unpartitioned table)."""
        if (partition is None) != (self.partition_by is None):
            raise ValueError(f"{self.name}: a partition value is needed exactly when the table is partitioned")
        return "" if partition is None else str(partition)

    def _directory(self, key: str) -> Path:
        """Where the files of partition `key` go in the new version (the version itself when unpartitioned)."""
        return self.version / f"{self.partition_by}={key}" if self.partition_by is not None else self.version

    def publish(self) -> None:
        if self.partition_by is not None and self.keep_others:
            for value, directory in self.warehouse.partitions(self.name, self.partition_by).items():
                if value in self.written or value in self.drop:
                    continue
                target = self.version / directory.name
                target.mkdir()
                for file in directory.iterdir():
                    os.link(file, target / file.name)
                self.written.add(value)
        if not self.written:  # an empty table still has its columns
            if self.schema_frame is None:
                raise ValueError(f"nothing written to {self.name}, not even its columns")
            self.warehouse._write_file(self.schema_frame, self.version / "part-empty.parquet", self.name)
        checkpoint(f"before-publish:{self.name}")
        self.warehouse._publish(self.name, self.version)
        checkpoint(f"after-publish:{self.name}")


def _remove_superseded(previous: Path | None, version: Path) -> None:
    """Remove the version a table's link left for `version` (none, or the same one: nothing)."""
    if previous is not None and previous != version.resolve():
        shutil.rmtree(previous, ignore_errors=True)


@contextmanager
def _interruption_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block takes effect when it ends (only the main thread can
    catch it; elsewhere the block runs as it is, the journal covering a kill)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    except ValueError:  # not the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received and previous is not signal.SIG_IGN:
        if callable(previous):
            previous(signal.SIGINT, None)
        else:
            raise KeyboardInterrupt


def _tags(table: str) -> dict[str, str]:
    """The key-value metadata of every Parquet file of table `table` (in the file's footer)."""
    return {"loopmeter.table": table, "loopmeter.schema_version": str(SCHEMA_VERSION)}


def _fsync_dir(path: Path) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


FINISHING = "a reader finishing an interrupted publish"
READER_FINISHING_WAIT = 10.0  # seconds a writer waits for such a reader before saying the lock is held
UNNAMED_HOLDER_WAIT = 1.0  # seconds a writer waits for a holder to say who it is
NO_HOLDER_NAMED = "another process"


def _try_lock(handle) -> bool:
    """Take the writer lock on the open lock file if no one holds it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock_after_a_moment(handle) -> bool:
    """Wait for a holder that lets go in a moment: a reader finishing an interrupted publish
    (at most READER_FINISHING_WAIT), or one that has just taken the lock and not yet written
    who it is (the file empty, or naming a process of this host that is gone: at most
    UNNAMED_HOLDER_WAIT). True once the lock is taken; false as soon as the holder is a
    process that named itself."""
    start = time.monotonic()
    while True:
        holder = _holder(handle)
        if FINISHING in holder:
            limit = READER_FINISHING_WAIT
        elif _unnamed(holder):
            limit = UNNAMED_HOLDER_WAIT
        else:
            return False
        if time.monotonic() - start >= limit:
            return False
        time.sleep(0.02)
        if _try_lock(handle):
            return True


def _unnamed(holder: str) -> bool:
    """The lock file does not name its holder: empty, or a process of this host that is gone
    (the line a killed writer left, which the holder has not replaced yet)."""
    if holder == NO_HOLDER_NAMED:
        return True
    named = re.match(r"pid (\d+) on (\S+) ", holder)
    if named is None or named[2] != socket.gethostname():
        return False
    try:
        os.kill(int(named[1]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def _name_holder(handle, who: str) -> None:
    """Say in the lock file, just taken, who holds the lock (what a second writer is told)."""
    handle.seek(0)
    handle.truncate()
    handle.write(who + "\n")
    handle.flush()


def _holder(handle) -> str:
    """Who holds the lock, as the holder wrote it in the lock file."""
    handle.seek(0)
    return handle.read().strip() or NO_HOLDER_NAMED


def atomic_write_text(path: Path, text: str) -> None:
    """Write `path` (UTF-8) through a temporary file in the same directory and a rename."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes, make_parents: bool = True) -> None:
    """Write `path` through a temporary file in the same directory and a rename."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
