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
all new. Partitioned tables use standard Hive partitioning (`run_set_id=<id>/part-0.parquet`,
the column in the folder name only); unchanged partitions are hard-linked into the new
version, not copied. Every file holds its table's one Arrow schema (`layout.py`): checked as
it is written, and when it is read; a file that differs (written by hand, or by an earlier
loopmeter) stops a reader with one line naming it, and the next writer rewrites it.

Which files are known to hold their table's schema is kept in `.state/conforming.json`
(table, path inside the version, size, mtime), so a reader checks only files it has not seen.
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
import stat
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from . import SCHEMA_VERSION, folders, layout
from .lifetime import thread_pool, usable_cores
from .errors import LoopmeterError, TableFileMismatch, WarehouseBusy, shown_path
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
CONFORMING = "conforming.json"  # in STATE: the table files known to hold their table's schema
UNREADABLE = "cannot be read as Parquet"


class Warehouse:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.catalog_stale = False  # set when a killed writer left the catalog half-built
        self.unfinished: str | None = None  # why a killed writer's publish could not be finished
        # inside `publishing()`: table -> its new version, published when the block ends (read here meanwhile)
        self._pending: dict[str, Path] | None = None
        self._pending_folders: list[folders.Staged] = []  # folders staged to be swapped in with them
        # the `publishing()` block running now (None: none); a table built for a block that has
        # ended without publishing (an error, Ctrl-C) is never published on its own
        self._block: object | None = None
        self._thread_block = threading.local()  # the block a thread writes for (`for_block`), if not the current one
        self._conforming: set[str] | None = None  # identities of files known to hold their table's schema
        self._conforming_changed = False
        for folder in (STATE, VERSIONS):  # loopmeter writes and removes in these: never through a link
            if (self.root / folder).is_symlink():
                raise LoopmeterError(
                    f"{shown_path(self.root / folder)} is a symbolic link; loopmeter keeps its own files there and "
                    "never follows a link out of the warehouse: remove the link (what it points to is not touched)")

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
        """The Parquet files of these partitions (those that exist), in the order given; checked
        against the table's schema (`check_table`)."""
        partitions = self.partitions(name, column)
        files = [str(path) for value in values if value in partitions for path in sorted(partitions[value].glob("*.parquet"))]
        self.check_table(name, files)
        return files

    def read_files(self, name: str, files: list[str], columns: list[str] | None = None) -> "pl.DataFrame":
        """These files of table `name` (from `partition_files`), the partition column taken from
        their folder names, the columns in the table's order."""
        import polars as pl

        column = layout.partition_column(name)
        wanted = layout.column_names(name, columns)
        if column is None:
            return pl.read_parquet(files, columns=wanted, hive_partitioning=False)
        frame = pl.read_parquet(files, columns=wanted, hive_partitioning=True, hive_schema={column: pl.String})
        return frame.select(wanted)

    def read(self, name: str, columns: list[str] | None = None) -> "pl.DataFrame | None":
        import polars as pl

        if not self.has_table(name):
            return None
        self.check_table(name)
        column = layout.partition_column(name)
        hive = column is not None and bool(self.partitions(name, column))
        wanted = layout.column_names(name, columns)
        frame = pl.read_parquet(self.table_glob(name), columns=wanted, hive_partitioning=hive,
                                hive_schema={column: pl.String} if hive else None)
        return frame.select(wanted)

    def read_partition(self, name: str, column: str, value: str) -> "pl.DataFrame | None":
        import polars as pl

        directory = self.partitions(name, column).get(value)
        if directory is None:
            return None
        files = sorted(str(path) for path in directory.glob("*.parquet"))
        self.check_table(name, files)
        frame = pl.read_parquet(files, hive_partitioning=False).with_columns(pl.lit(value, pl.String).alias(column))
        return frame.select(layout.column_names(name))

    # ---- the schema every file holds -----------------------------------------------
    def table_files(self, name: str) -> list[Path]:
        return sorted(self.table_dir(name).rglob("*.parquet")) if self.has_table(name) else []

    def _identity(self, name: str, path: Path, base: Path | None = None) -> str | None:
        """What makes a file of table `name` known: its path inside the table's version, size and
        mtime (a hard link into a newer version, or a copy of the warehouse, keeps all three)."""
        try:
            stat = os.stat(path)
        except OSError:
            return None
        relative = os.path.relpath(path, base if base is not None else self.table_dir(name))
        return f"{name}/{relative}:{stat.st_size}:{stat.st_mtime_ns}"

    def _known(self) -> set[str]:
        if self._conforming is None:
            try:
                recorded = json.loads((self.root / STATE / CONFORMING).read_text())
            except (OSError, ValueError):
                recorded = []
            self._conforming = {key for key in recorded if isinstance(key, str)} if isinstance(recorded, list) else set()
        return self._conforming

    def _note_conforming(self, name: str, path: Path, base: Path) -> None:
        """The file `path` of the version `base` of table `name` was written in its schema."""
        identity = self._identity(name, path, base)
        if identity is not None:
            self._known().add(identity)
            self._conforming_changed = True

    def mismatches(self, name: str, files: Iterable[str | Path] | None = None) -> list[tuple[Path, str]]:
        """The files of table `name` (or these of its files) that do not hold its schema, with how
        each differs; files known to hold it are not opened."""
        known = self._known()
        found = []
        for path in map(Path, self.table_files(name) if files is None else files):
            identity = self._identity(name, path)
            if identity is not None and identity in known:
                continue
            try:
                problem = layout.mismatch(name, path)
            except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
                problem = f"{UNREADABLE} ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
            if problem is None:
                if identity is not None:
                    known.add(identity)
                    self._conforming_changed = True
            else:
                found.append((path, problem))
        return found

    def check_table(self, name: str, files: Iterable[str | Path] | None = None) -> None:
        """Refuse to read table `name` when one of its files (or of `files`) does not hold its schema."""
        if not layout.known_table(name):
            return
        for path, problem in self.mismatches(name, files):
            if problem.startswith(UNREADABLE):
                raise TableFileMismatch(f"{path}: {problem}; move it out of the warehouse and run the stage "
                                        f"that writes {name} again")
            raise TableFileMismatch(
                f"{path}: {problem}; the next loopmeter command that writes to {self.root} "
                f"(an ingest, for example) rewrites it")

    def _conform_tables(self) -> None:
        """Rewrite, in its table's schema, every table file that does not hold it (the caller holds
        the lock): a file an earlier loopmeter wrote, or one written by hand. A file that cannot be
        rewritten without changing a value stops the writer with one line naming it."""
        for name in self.table_names():
            if not layout.known_table(name):
                continue
            bad = self.mismatches(name)
            if bad:
                self._rewrite(name, bad)
        self._save_conforming()

    def _rewrite(self, name: str, bad: list[tuple[Path, str]]) -> None:
        import polars as pl

        column = layout.partition_column(name)
        partitions = self.partitions(name, column) if column is not None else {}
        groups: dict[str | None, list[Path]] = {}
        for path, problem in bad:
            value = path.parent.name[len(f"{column}="):] if partitions and path.parent.name.startswith(f"{column}=") else None
            if partitions and value not in partitions:
                raise LoopmeterError(f"{path}: {problem}, and it lies outside {name}'s partition folders; "
                                     "move it out of the warehouse")
            groups[value] = sorted(partitions[value].glob("*.parquet")) if value is not None else self.table_files(name)
        try:
            with self.build_table(name, column if partitions else None) as builder:
                for value, files in groups.items():
                    frame = pl.concat([pl.read_parquet(file, hive_partitioning=False) for file in files], how="vertical_relaxed")
                    if value is not None:
                        if column in frame.columns and frame.height and frame[column].n_unique() == 1 and frame[column][0] != value:
                            raise ValueError(f"column {column} holds {frame[column][0]!r} in the folder {column}={value}")
                        frame = frame.with_columns(pl.lit(value, pl.String).alias(column))
                    builder.write(pl.from_arrow(layout.conform(frame, name, False, where=str(files[0]))))
                builder.keep_others = True
        except (ValueError, OSError, pl.exceptions.PolarsError) as error:
            path, problem = bad[0]
            raise LoopmeterError(f"{path}: {problem}, and it cannot be rewritten in {name}'s schema "
                                 f"({str(error).splitlines()[0]}); move it out of the warehouse and ingest again") from None
        for path, problem in bad:
            print(f"loopmeter: note: {path}: {problem}; rewritten in {name}'s schema", file=sys.stderr)

    def _save_conforming(self) -> None:
        """Keep the identities of the files of the tables present (the caller holds the lock)."""
        if not self._conforming_changed:
            return
        present = {identity for name in self.table_names() for path in self.table_files(name)
                   if (identity := self._identity(name, path)) is not None}
        atomic_write_text(self.root / STATE / CONFORMING, json.dumps(sorted(self._known() & present)))
        self._conforming_changed = False

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
        """The SELECT a view of table `name` is: its columns in their declared order and types,
        the partition column read from the folder names (as text, whatever it looks like)."""
        location = self.table_glob(name) if absolute else f"{name}/**/*.parquet"
        location = location.replace("'", "''")
        if not layout.known_table(name):
            return f"SELECT * FROM read_parquet('{location}')"
        column = layout.partition_column(name)
        hive = "hive_partitioning = true, hive_types_autocast = false" if column else "hive_partitioning = false"
        columns = ", ".join(f'"{c}"' for c in layout.column_names(name))
        return f"SELECT {columns} FROM read_parquet('{location}', {hive})"

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
        held = False
        try:
            if not _try_lock(handle) and not _lock_after_a_moment(handle):
                holder = _holder(handle)
                if not wait:
                    raise WarehouseBusy(
                        f"warehouse {self.root} is locked by {holder}; try again later or pass --wait"
                    ) from None
                print(f"waiting for the warehouse lock held by {holder} ...", file=sys.stderr)
                fcntl.flock(handle, fcntl.LOCK_EX)
            held = True
            _name_holder(handle, _holder_line(command or "loopmeter"))
            self._finish_publishing()
            if self.unfinished:
                raise LoopmeterError(
                    f"an interrupted aggregate's documents could not be swapped in ({self.unfinished}); "
                    f"fix that and run again, or remove {self.root / STATE / JOURNAL} to keep the documents as they are")
            self._collect_garbage()
            self._conform_tables()
            yield
        finally:
            if held:  # a writer that did not get the lock leaves the holder's name in place
                try:
                    self._save_conforming()
                except OSError:
                    pass  # the files not recorded are checked again by the next reader
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
        """Write `frame` as the Parquet file `path` of `table`, in the table's schema (`layout.py`):
        pyarrow's writer, without the `ARROW:schema` footer entry, so every reader derives the same
        types from the Parquet types."""
        import pyarrow.parquet as pq

        partitioned = layout.in_partition(table, path)
        data = layout.conform(frame, table, partitioned, where=str(path))
        problem = layout.describe_mismatch(table, data.schema, partitioned, as_stored=False)
        if problem is not None:
            raise ValueError(f"{path}: {problem}")
        path.parent.mkdir(parents=True, exist_ok=True)
        # plain pages, as polars' writer has them: dictionary pages cost a third more time here and
        # made the runs files larger, not smaller, once compressed
        with pq.ParquetWriter(path, data.schema, compression="zstd", store_schema=False, use_dictionary=False) as writer:
            writer.write_table(data)
            writer.add_key_value_metadata(_tags(table))
        self._note_written(table, path)
        checkpoint(f"wrote-file:{table}")

    def _note_written(self, table: str, path: Path) -> None:
        """Remember that the file `path`, just written in a version or the scratch space, holds its schema."""
        for base in Path(path).parents:
            if base.parent.parent.name == VERSIONS or base.parent == self.root / SCRATCH:
                break
        else:
            return
        if base.parent == self.root / SCRATCH:
            return  # taken into a version by `adopt`, which notes it there
        self._note_conforming(table, Path(path), base)

    def _copy_file(self, connection: "duckdb.DuckDBPyConnection", query: str, path: Path, table: str,
                   params: dict | None = None, level: int | None = None) -> int:
        """DuckDB writes the rows of `query` to the Parquet file `path` itself (streaming, multi-threaded,
        under its memory limit): no row passes through Python. The table's columns, in its order and
        types (`layout.py`), same compression and metadata as `_write_file`; the file is checked
        against the table's schema once written. Returns the number of rows written."""
        path.parent.mkdir(parents=True, exist_ok=True)
        pairs = ", ".join(f"'{key}': '{value.replace(chr(39), chr(39) * 2)}'" for key, value in _tags(table).items())
        location = str(path).replace("'", "''")
        compression = "COMPRESSION zstd" + (f", COMPRESSION_LEVEL {int(level)}" if level is not None else "")
        select = f"SELECT {layout.copy_select(table, layout.in_partition(table, path))} FROM ({query}) AS stored"
        (rows,) = connection.execute(
            f"COPY ({select}) TO '{location}' (FORMAT parquet, {compression}, KV_METADATA {{{pairs}}})", params or {}
        ).fetchone()
        problem = layout.mismatch(table, path)
        if problem is not None:
            raise ValueError(f"{path}: {problem}")
        self._note_written(table, path)
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
        self._pending, self._block = {}, object()
        try:
            yield
        except BaseException:
            self._block = None  # a thread still writing for the block leaves its table as it was
            pending, self._pending = self._pending, None
            staged, self._pending_folders = self._pending_folders, []
            for version in pending.values():
                shutil.rmtree(version, ignore_errors=True)
            for entry in staged:
                folders.discard(entry)
            raise
        pending, self._pending, self._block = self._pending, None, None
        staged, self._pending_folders = self._pending_folders, []
        if pending or staged:
            self._commit(pending, staged)

    def current_block(self) -> object | None:
        """The `publishing()` block running now, to hand to a thread that writes tables for it."""
        return self._block

    def for_block(self, block: object | None, work, *args, **kwargs):
        """`work(*args, **kwargs)` in a thread writing tables for publishing block `block`: a table it
        builds after the block has ended (a Ctrl-C or an error in the block's own thread) is never
        published, not even on its own once no block runs."""
        self._thread_block.block = block
        try:
            return work(*args, **kwargs)
        finally:
            self._thread_block.block = None

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
        """Point table `name`'s link at `version` (one atomic rename); the version it left, when
        that is one of the table's own (a link to anywhere else is replaced, what it named left)."""
        link = self.root / name
        previous = self._own_version(name, os.readlink(link)) if link.is_symlink() else None
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
        swapped in now (its error: `OSError`) stays in the journal, the rest is done. A journal
        loopmeter cannot have written (`_journal_problem`) is not followed in any part: one line
        says why, and it is removed."""
        journal = self.root / STATE / JOURNAL
        self.unfinished = None
        try:
            text = journal.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as error:
            text, problem = b"", f"cannot be read ({error.strerror or error})"
        else:
            problem = None
        try:
            entries = json.loads(text) if problem is None else None
        except ValueError:
            entries, problem = None, "is not JSON"
        if isinstance(entries, dict) and (isinstance(entries.get("tables"), dict) or isinstance(entries.get("folders"), list)):
            tables, staged = entries.get("tables") or {}, entries.get("folders") or []
        else:  # the journal of an earlier loopmeter: tables only
            tables, staged = entries, []
        problem = problem or self._journal_problem(tables, staged)
        if problem is not None:
            print(f"loopmeter: warning: {journal}: {problem}; loopmeter did not write it: nothing it names was done, "
                  "and it is removed", file=sys.stderr)
            journal.unlink(missing_ok=True)
            return True
        for name, relative in tables.items():
            version, link = self._own_version(name, relative), self.root / name
            if version is None or (os.path.lexists(link) and not link.is_symlink()):
                continue  # gone (removed by hand), or not a loopmeter table (left to the next publish to refuse)
            if not link.is_symlink() or os.readlink(link) != relative:
                self._swap(name, version)
        failed, error = [], None
        for entry in staged:
            try:
                folders.swap(folders.Staged.from_json(entry))
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

    def _journal_problem(self, tables: object, staged: object) -> str | None:
        """What in a journal's entries loopmeter's `_commit` never writes (None: nothing): a table
        loopmeter does not know, a version that is not `.versions/<table>/<id>` of real directories,
        a folder entry that is not a staged folder beside its target. (A version or staged folder
        that is gone is not a problem: a publish killed after its swap leaves such a journal.)"""
        if not isinstance(tables, dict) or not isinstance(staged, list):
            return "it holds no tables and folders to publish"
        for name, relative in tables.items():
            if not layout.known_table(name):
                return f"{json.dumps(name)} is not a table loopmeter knows"
            if not isinstance(relative, str) or _version_parts(name, relative) is None:
                return f"the version of {name}, {json.dumps(relative)}, is not a folder of {VERSIONS}/{name}/"
            if os.path.lexists(self.root / relative) and self._own_version(name, relative) is None:
                return f"the version of {name}, {relative}, is not a real directory of {VERSIONS}/{name}/"
        for entry in staged:
            try:
                parsed = folders.Staged.from_json(entry)
            except (ValueError, TypeError, KeyError, AttributeError):
                return f"the folder entry {json.dumps(entry)[:200]} is not a staged folder beside its target"
            if os.path.islink(parsed.staged) or os.path.islink(parsed.aside):
                return f"the staged folder {parsed.staged} is a symbolic link"
        return None

    def _own_version(self, name: str, relative: str) -> Path | None:
        """The version `relative` (as a table's link or the journal holds it) names, when it is one
        of table `name`'s: `.versions/<name>/<id>`, each of the three a real directory (no symbolic
        link on the way); else None."""
        parts = _version_parts(name, relative)
        if parts is None:
            return None
        path = self.root
        for part in parts:
            path = path / part
            if not _real_directory(path):
                return None
        return path

    def finish_interrupted_publishing(self) -> None:
        """For a reader: when a killed writer left a publish half done and no writer holds the
        lock, finish it, so what is read is one stage's tables, all old or all new."""
        if not (self.root / STATE / JOURNAL).exists():
            return
        # its name is left there when done: a writer starting meanwhile waits for it, and then writes its own
        with self.lock_if_free(FINISHING, leave_name=True) as taken:
            if taken:  # else a writer holds it: it finishes the publish as it takes the lock
                self._finish_publishing()

    @contextmanager
    def lock_if_free(self, what: str, *, leave_name: bool = False) -> Iterator[bool]:
        """The writer lock for a reader's moment of writing, taken only if no one holds it: True
        inside when taken, False when another process holds it or the lock file cannot be opened
        (a read-only warehouse). The lock file names the holder with `what` it does (FINISHING,
        REBUILDING: a writer starting meanwhile waits for those); the name is emptied as the lock
        is let go, unless `leave_name`, or unless the file named this process already (the
        publish it just finished, whose line stays for the rest of that work)."""
        try:
            handle = open(self.root / LOCK, "a+")
        except OSError:
            yield False
            return
        with handle:
            if not _try_lock(handle):
                yield False
                return
            ours = _holder(handle).startswith(f"pid {os.getpid()} ")
            if not ours:
                _name_holder(handle, _holder_line(what))
            try:
                yield True
            finally:
                if not ours and not leave_name:
                    try:
                        handle.seek(0)
                        handle.truncate()
                    except OSError:
                        pass

    @contextmanager
    def scratch(self) -> Iterator[Path]:
        """A scratch directory for one stage, inside the warehouse (the same file system, not
        a RAM-backed /tmp), removed when the block ends; one a killed writer left is removed
        by the next writer that takes the lock."""
        import tempfile

        base = self.root / SCRATCH
        if base.is_symlink():  # not the warehouse's own: the link goes, what it names stays
            base.unlink()
        base.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(dir=base))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _collect_garbage(self) -> None:
        """Remove what a killed writer left: versions no table points to, stray links,
        temporary files and scratch directories. A half-built catalog marks the catalog
        stale, to be rebuilt. Nothing here follows a symbolic link: one where a folder of the
        warehouse belongs is removed (the link, not what it names), or, for `.versions` and
        `.state` themselves, left with what they name untouched."""
        for stray in self.root.glob(".*.link"):
            stray.unlink(missing_ok=True)
        state = self.root / STATE
        strays = [*self.root.glob(".*.tmp*"), *(state.glob(".*.tmp") if _real_directory(state) else ())]
        for stray in strays:
            if _real_directory(stray):
                continue  # not a file loopmeter writes
            if stray.name.startswith(f".{DATABASE}."):
                self.catalog_stale = True
            stray.unlink(missing_ok=True)
        scratch = self.root / SCRATCH
        if scratch.is_symlink():
            scratch.unlink()
        shutil.rmtree(scratch, ignore_errors=True)  # only the lock holder uses it
        versions = self.root / VERSIONS
        if not _real_directory(versions):
            return
        for table in os.scandir(versions):
            if table.is_symlink():
                os.unlink(table.path)
                continue
            if not table.is_dir(follow_symlinks=False):
                continue
            link = self.root / table.name
            current = os.path.realpath(link) if link.is_symlink() else None
            for version in os.scandir(table.path):
                if version.is_symlink():
                    os.unlink(version.path)
                elif version.is_dir(follow_symlinks=False) and os.path.realpath(version.path) != current:
                    shutil.rmtree(version.path, ignore_errors=True)


class TableBuilder:
    """One version of a table being written; see `Warehouse.build_table`."""

    def __init__(self, warehouse: Warehouse, name: str, partition_by: str | None):
        self.warehouse, self.name, self.partition_by = warehouse, name, partition_by
        self.version = warehouse._new_version_dir(name)
        # the publishing block it is written for, if any: its thread's (`for_block`), else the current one
        self.block = getattr(warehouse._thread_block, "block", None) or warehouse._block
        self.written: set[str] = set()
        self.files: set[tuple[str, str]] = set()  # (partition key, file name) written by copy
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
             params: dict | None = None, part: int | None = None) -> int:
        """Write the rows of the DuckDB `query` (run on `connection`, its columns those of the table)
        as the table's file, or, partitioned, as the file of partition `partition` (each at most once).
        With `part`, the rows are file number `part` of several (`part-00000.parquet`, ...: read in
        that order). DuckDB encodes the Parquet itself, so a large table never passes through Python.
        Returns the number of rows written."""
        key = self._key(partition)
        name = "part-0.parquet" if part is None else f"part-{part:05d}.parquet"
        if (key, name) in self.files or (part is None and key in self.written):
            raise ValueError(f"partition written twice in {self.name}: {key!r}")
        rows = self.warehouse._copy_file(connection, query, self._directory(key) / name, self.name, params)
        self.written.add(key)
        self.files.add((key, name))
        return rows

    def adopt(self, file: Path, *, partition: str | None = None) -> None:
        """Take a file written by `Warehouse.copy_table_file` for this table into the new version as it
        is (hard-linked, the scratch space being on the same file system: not rewritten). Several files
        may make up the table, or a partition."""
        key = self._key(partition)
        directory = self._directory(key)
        directory.mkdir(parents=True, exist_ok=True)
        os.link(file, directory / Path(file).name)
        self.warehouse._note_conforming(self.name, directory / Path(file).name, self.version)
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
        if self.block is not None and self.block is not self.warehouse._block:
            # written for a publishing block that ended without publishing (a thread that went on
            # after the block's Ctrl-C or error): the table stays as it was, with the block's others
            shutil.rmtree(self.version, ignore_errors=True)
            return
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
    """Remove the version a table's link left for `version` (none, or the same one: nothing);
    `previous` is a real directory of the table's (`Warehouse._own_version`)."""
    if previous is not None and os.path.realpath(previous) != os.path.realpath(version):
        shutil.rmtree(previous, ignore_errors=True)  # follows no symbolic link inside


def _version_parts(name: str, relative: str) -> tuple[str, str, str] | None:
    """`relative` as (.versions, name, id) when it is a version of table `name`, else None."""
    parts = relative.split("/")
    if len(parts) != 3 or parts[0] != VERSIONS or parts[1] != name or parts[2] in ("", ".", "..") or "\0" in relative:
        return None
    return parts[0], parts[1], parts[2]


def _real_directory(path: str | os.PathLike) -> bool:
    """A directory, not a symbolic link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


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
REBUILDING = "a reader rebuilding loopmeter.duckdb"  # catalog.py's repair of a copied or moved warehouse
READER_FINISHING_WAIT = 10.0  # seconds a writer waits for such readers before saying the lock is held
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
    """Wait for a holder that lets go in a moment: a reader finishing an interrupted publish or
    rebuilding the catalog (at most READER_FINISHING_WAIT), or one that has just taken the lock
    and not yet written who it is (the file empty, or naming a process of this host that is
    gone: at most UNNAMED_HOLDER_WAIT). True once the lock is taken; false as soon as the holder is a
    process that named itself."""
    start = time.monotonic()
    while True:
        holder = _holder(handle)
        if FINISHING in holder or REBUILDING in holder:
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


def _holder_line(what: str) -> str:
    """Who this process is, for the lock file: pid, host, what it does, since when (UTC)."""
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"pid {os.getpid()} on {socket.gethostname()} ({what}) since {since}"


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
