"""The warehouse: a folder of tables, read and written only through here.

    .loopmeter                   the marker: this folder is a loopmeter warehouse
    <table>/                     a link to the table's current version (`versions.py`)
    .versions/<table>/<id>/      one complete version of a table (Parquet files)
    loopmeter.duckdb             one documented view per table (`catalog.py`)
    aggregate/                   ForgeLoop's documents, by default (`folders.py`)
    .lock                        held by the process that writes (`lock.py`)
    .state/                      what the last ingests and aggregates saw (`state.py`)
    .scratch/                    scratch space of the stage running now

The folder is input too: what a reader finds in it was verified first. Only loopmeter's own
version links are tables; a version is read only when it holds nothing but table files
(`conformance.py`); each file only when it holds its table's schema and is not a decompression
bomb. A writer makes a folder a warehouse (the marker) when the folder is new or empty; a reader
refuses a folder without the marker, and writes nothing there.

Tables are replaced whole, atomically; the tables of one `publishing()` block together
(`publish.py`). Partitioned tables use Hive partitioning; unchanged partitions are hard-linked
into a new version, not copied.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from .. import faults
from ..errors import LoopmeterError, TableFileMismatch, shown_path, warn
from . import conformance, folders, lock, marker, publish, registry, versions, written
from .entries import OWN_ENTRIES, SCRATCH, collect_garbage
from .files import is_real_directory, kind_of, remove_tree
from .published import unlinked
from .state import State
from .verified import Verified

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from .writing import TableBuilder

def _same(one: os.stat_result, other: os.stat_result) -> bool:
    """The same file, unchanged between the two looks (its change time is set by any change)."""
    return (one.st_dev, one.st_ino, one.st_ctime_ns) == (other.st_dev, other.st_ino, other.st_ctime_ns)


class Warehouse:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.state = State(self.root)
        self.catalog_stale = False  # set when a killed writer left the catalog half-built
        self._pending: dict[str, Path] | None = None  # inside `publishing()`: table -> its new version
        self._pending_folders: list[folders.Staged] = []
        self._listings: dict[Path, conformance.Listing] = {}  # verified in this process, by version
        self.verified = Verified(self.state)  # table files verified: in this process, or recorded by a writer
        self.links_named: set[str] = set()  # links in the root `check` names itself: `table_names` does not warn of them too
        for name in (".state", versions.FOLDER):  # loopmeter writes and removes in these: never through a link
            if kind_of(self.root / name) == "link":
                raise LoopmeterError(
                    f"{shown_path(self.root / name)} is a symbolic link; loopmeter keeps its own files there and "
                    "never follows a link out of the warehouse: remove the link (what it points to is not touched)")

    # ---- the marker (`marker.py`) ----------------------------------------------------------
    def is_marked(self) -> bool:
        return marker.is_marked(self.root)

    def marker_problem(self) -> str | None:
        return marker.problem(self.root)

    def require_marked(self) -> None:
        """Refuse a folder that is not a warehouse (a reader writes nothing there)."""
        marker.require(self.root)

    def mark(self) -> None:
        """Mark the folder a warehouse (its marker written), as a writer does first."""
        marker.mark(self.root, OWN_ENTRIES)

    # ---- tables ------------------------------------------------------------------------
    def table_names(self) -> list[str]:
        """The tables: loopmeter's own version links in the root (any other link is named in a warning
        and left out), and inside `publishing()` the tables written in the block."""
        names = set(self._pending or {})
        if is_real_directory(self.root):
            with os.scandir(self.root) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name.startswith(".") or not entry.is_symlink():
                        continue
                    if versions.current(self.root, entry.name) is not None:
                        names.add(entry.name)
                    elif entry.name not in names and entry.name not in self.links_named:
                        warn(f"{shown_path(entry.path)}: a symbolic link loopmeter did not make (not a table of this "
                             "warehouse); left out")
        return sorted(names)

    def version_dir(self, name: str) -> Path | None:
        """The version of table `name` read now: inside `publishing()` the block's own new version, else
        the current one (None: no such table)."""
        pending = self._pending
        if pending is not None and name in pending:
            return pending[name]
        return versions.current(self.root, name)

    def has_table(self, name: str) -> bool:
        return self.version_dir(name) is not None

    def table_dir(self, name: str) -> Path:
        """Where table `name` is read: its current version (the block's own inside `publishing()`)."""
        directory = self.version_dir(name)
        if directory is None:
            raise LoopmeterError(f"no table {name} in {shown_path(self.root)}")
        return directory

    def table_version(self, name: str) -> str | None:
        """Which version of table `name` is current (None: no table); any write changes it."""
        directory = self.version_dir(name)
        return None if directory is None else os.path.relpath(directory, self.root)

    def listing(self, name: str) -> conformance.Listing:
        """The table files of `name`'s version, verified (`conformance.list_version`): a version
        holding anything but table files is refused, naming it."""
        directory = self.table_dir(name)
        found = self._listings.get(directory)
        if found is None:
            found = conformance.list_version(name, directory)
            if directory not in (self._pending or {}).values():
                self._listings[directory] = found
        if found.problems:
            path, problem = found.problems[0]
            raise TableFileMismatch(f"{self.shown(path)}: {problem}; loopmeter does not read table {name} while it is "
                                    "there (remove it: what a link points to is not touched; `loopmeter check` lists "
                                    "every such entry)")
        return found

    def shown(self, path: str | os.PathLike) -> str:
        """`path` for a message: a file of a table's current version as under the table's link
        (`<warehouse>/runs/run_set_id=x/part-0.parquet`), any other path as it is (escaped)."""
        relative = os.path.relpath(path, self.root)
        parts = relative.split(os.sep)
        if len(parts) > 3 and parts[0] == versions.FOLDER and self.version_dir(parts[1]) == self.root.joinpath(*parts[:3]):
            return shown_path(self.root.joinpath(parts[1], *parts[3:]))
        return shown_path(path)

    def table_files(self, name: str) -> list[Path]:
        return self.listing(name).files if self.has_table(name) else []

    def _partition_index(self, name: str, column: str | None) -> dict[str, tuple[Path, list[Path]]]:
        """Partition value -> (its folder, its files), of table `name` partitioned by `column` (none when
        the table is not, or has no such table)."""
        if column is None or not self.has_table(name) or registry.table(name).partition != column:
            return {}
        return self.listing(name).partitions

    def partitions(self, name: str, column: str) -> dict[str, Path]:
        """Partition value -> its folder, for a hive-partitioned table."""
        return {value: folder for value, (folder, _) in self._partition_index(name, column).items()}

    def files_by_partition(self, name: str, column: str | None) -> dict[str, list[Path]]:
        """Partition value -> its files, of table `name`'s current version (none when unpartitioned)."""
        return {value: files for value, (_, files) in self._partition_index(name, column).items()}

    def partition_files(self, name: str, column: str, values: Iterable[str]) -> list[str]:
        """The Parquet files of these partitions (those that exist), in the order given; checked."""
        index = self._partition_index(name, column)
        files = [str(path) for value in values if value in index for path in index[value][1]]
        self.check_table(name, files)
        return files

    def table_file_list(self, name: str) -> list[str]:
        """Every file of table `name`, checked: what a DuckDB query of the table reads."""
        files = [str(path) for path in self.table_files(name)]
        self.check_table(name, files)
        return files

    def select_sql(self, name: str) -> str:
        """The SELECT of table `name` as loopmeter's own DuckDB sessions read it: its columns in their
        declared order, from its verified files named one by one by absolute path (no glob that could
        meet what was not verified; a worker started in another folder reads the same files), the
        partition column from the folder names (as text)."""
        from .names import quote_identifier, quote_path

        declared = registry.table(name)
        files = self.table_file_list(name)
        columns = ", ".join(quote_identifier(column) for column in declared.column_names)
        if not files:
            kinds = declared.kinds()
            nulls = ", ".join(f"CAST(NULL AS {registry.sql_type(kinds[c])}) AS {quote_identifier(c)}" for c in declared.column_names)
            return f"SELECT {nulls} WHERE false"
        hive = declared.partition is not None and any(Path(file).parent.name.startswith(declared.partition + "=") for file in files)
        options = "hive_partitioning = true, hive_types_autocast = false" if hive else "hive_partitioning = false"
        listed = ", ".join(quote_path(os.path.abspath(file)) for file in files)
        return f"SELECT {columns} FROM read_parquet([{listed}], {options})"

    def mismatches(self, name: str, files: Iterable[str | Path] | None = None,
                   verified: list[tuple[str, Path, os.stat_result]] | None = None) -> list[tuple[Path, str]]:
        """The files of table `name` (or these of its files) that are not what they must be, each with
        its problem (`conformance.file_problem`); a file verified before (`verified.py`) is not opened.
        `verified` is given (table, file, status as listed) of each file verified, now or before."""
        found = []
        for path in self.table_files(name) if files is None else map(Path, files):
            try:
                status = os.lstat(path)
            except OSError:
                status = None
            if status is not None and self.verified.known(name, path, status):
                if verified is not None:
                    verified.append((name, path, status))
                continue
            opened: list[os.stat_result] = []
            problem = conformance.file_problem(name, path, opened=opened)
            if problem is None and status is not None and opened and _same(opened[0], status):
                self.verified.add(name, path, status)  # the file verified is the one listed, unchanged since
                if verified is not None:
                    verified.append((name, path, status))
            elif problem is not None:
                found.append((path, problem))
        return found

    def check_table(self, name: str, files: Iterable[str | Path] | None = None) -> None:
        """Refuse to read table `name` when one of its files (or of `files`) is not what it must be."""
        if not registry.known(name):
            return
        for path, problem in self.mismatches(name, files):
            refused = self.unreadable_line(name, self.shown(path), problem)
            if refused is not None:
                raise TableFileMismatch(refused)
            raise TableFileMismatch(f"{self.shown(path)}: {problem}; the next loopmeter command that writes to "
                                    f"{shown_path(self.root)} (an ingest, for example) rewrites it")

    def unreadable_line(self, name: str, shown: str, problem: str) -> str | None:
        """The line refusing a file of table `name` (shown as `shown`) that cannot be read at all: a
        damaged one (as a read that meets a damaged page says it), or what is no file loopmeter
        wrote; None for a file that can be read (in another schema: rewritten by the next writer)."""
        if problem.startswith(conformance.UNREADABLE):
            return (f"{shown}: a file of table {name} is damaged: {problem}; run `loopmeter check --repair "
                    f"--warehouse {shown_path(self.root)}` to rebuild what can be rebuilt")
        if problem.startswith(("is ", "expands", "cannot")):
            return f"{shown}: {problem}; move it out of the warehouse and run the stage that writes {name} again"
        return None

    # ---- reading -----------------------------------------------------------------------
    def read_files(self, name: str, files: list[str], columns: list[str] | None = None) -> "pl.DataFrame":
        """These (checked) files of table `name`, the partition column taken from their folder names,
        the columns in the table's order."""
        import polars as pl

        declared = registry.table(name)
        wanted = [column for column in declared.column_names if columns is None or column in columns]
        column = declared.partition
        if column is None or not any(Path(file).parent.name.startswith(column + "=") for file in files):
            return pl.read_parquet(files, columns=wanted, hive_partitioning=False, glob=False).select(wanted)
        frame = pl.read_parquet(files, columns=wanted, hive_partitioning=True, hive_schema={column: pl.String}, glob=False)
        return frame.select(wanted)

    def read(self, name: str, columns: list[str] | None = None) -> "pl.DataFrame | None":
        if not self.has_table(name):
            return None
        return self.read_files(name, self.table_file_list(name), columns)

    def read_partition(self, name: str, column: str, value: str) -> "pl.DataFrame | None":
        files = self.partition_files(name, column, [value])
        return self.read_files(name, files) if files else None

    # ---- writing -----------------------------------------------------------------------
    @contextmanager
    def lock(self, *, wait: bool = False, command: str = "") -> Iterator[None]:
        """Hold the warehouse's writer lock (made a warehouse first, if new); a second writer waits or
        leaves with who holds it. Taken, the lock first finishes a killed writer's publish, removes
        what one left, and rewrites any table file not in its table's schema."""
        self.mark()
        with lock.hold(self.root, wait=wait, command=command):
            self.finish_publishing()
            self._refuse_unlinked()
            if collect_garbage(self.root, self.state.folder):
                self.catalog_stale = True
            self._conform_tables()
            yield
            self._record_verified()

    @contextmanager
    def lock_if_free(self, what: str, *, leave_name: bool = False, wait: bool = False) -> Iterator[bool]:
        with lock.hold_if_free(self.root, what, leave_name=leave_name, wait=wait) as taken:
            yield taken

    def finish_publishing(self) -> bool:
        """Finish a killed writer's publish (the caller holds the lock); whether there was one."""
        had, unfinished = publish.finish(self.root)
        if had:
            self.catalog_stale = True
        if unfinished:
            raise LoopmeterError(
                f"an interrupted aggregate's documents could not be swapped in ({unfinished}); fix that and run again, "
                f"or remove {shown_path(self.state.path(publish.JOURNAL))} to keep the documents as they are")
        return had

    def finish_interrupted_publishing(self) -> None:
        """For a reader: when a killed writer left a publish half done and no writer holds the lock,
        finish it, so what is read is one stage's tables, all old or all new."""
        if not self.state.exists(publish.JOURNAL):
            return
        with self.lock_if_free(lock.FINISHING, leave_name=True) as taken:
            if taken:  # else a writer holds it: it finishes the publish as it takes the lock
                try:
                    self.finish_publishing()
                except LoopmeterError as error:
                    warn(str(error))

    @property
    def publishing_now(self) -> bool:
        return self._pending is not None

    @contextmanager
    def publishing(self) -> Iterator[None]:
        """Publish the tables written in the block (and the folders staged) together, when it ends
        without error; an error or Ctrl-C inside leaves every table as it was. Reads in the block
        see its writes. Nested blocks are part of the outermost one."""
        if self._pending is not None:
            yield
            return
        self._pending, self._pending_folders = {}, []
        try:
            yield
        except BaseException:
            pending, self._pending = self._pending, None
            staged, self._pending_folders = self._pending_folders, []
            for version in pending.values():
                versions.discard(version, self.verified.remove)
            for entry in staged:
                folders.discard(entry)
            raise
        pending, self._pending = self._pending, None
        staged, self._pending_folders = self._pending_folders, []
        if pending or staged:
            publish.commit(self.root, pending, staged, remove=self.verified.remove)

    @contextmanager
    def build_table(self, name: str, partition_by: str | None = None) -> Iterator["TableBuilder"]:
        """A new version of table `name`, written piece by piece (a large table is never in memory at
        once) and published when the block ends without error (with the others of `publishing()`)."""
        from .writing import TableBuilder

        registry.table(name)
        self.mark()  # a warehouse written through the library, without the lock, is one too
        builder = TableBuilder(self.root, name, partition_by, lambda: self.files_by_partition(name, partition_by),
                               link=lambda source, target: self.verified.link(name, source, target),
                               remove=self.verified.remove)
        try:
            yield builder
            if not builder.cancelled:
                builder.finish()
        except BaseException:
            builder.discard()
            raise
        if builder.cancelled:
            builder.discard()
        else:
            self._publish(name, builder.version)

    def write_table(self, name: str, frame: "pl.DataFrame", *, partition_by: str | None = None,
                    keep_partitions: bool = False, drop_partitions: set[str] | frozenset[str] = frozenset()) -> Path:
        """Replace table `name` with `frame`, atomically. With `partition_by` and `keep_partitions`,
        partitions of the current version that `frame` does not hold (and `drop_partitions` does not
        name) are kept as they are."""
        with self.build_table(name, partition_by) as builder:
            builder.write(frame)
            builder.keep_others = keep_partitions
            builder.drop = set(drop_partitions)
        return self.table_dir(name)

    def _publish(self, name: str, version: Path) -> None:
        faults.checkpoint(f"before-publish:{name}")
        if kind_of(self.root / name) not in (None, "link"):
            raise LoopmeterError(f"{shown_path(self.root / name)} is a real directory, not a loopmeter table; "
                                 "move it away first")
        if self._pending is not None:  # published with the others when the block ends
            superseded = self._pending.get(name)
            self._pending[name] = version
            if superseded is not None and superseded != version:
                self.verified.remove(superseded)
        else:
            publish.publish_one(self.root, name, version, remove=self.verified.remove)
        faults.checkpoint(f"after-publish:{name}")

    def publish_folder(self, entry: folders.Staged) -> None:
        """Swap a staged folder in: inside `publishing()`, with the block's tables; else now."""
        if self._pending is not None:
            self._pending_folders.append(entry)
        else:
            folders.swap(entry)

    def copy_table_file(self, connection: "duckdb.DuckDBPyConnection", query: str, path: Path, table: str,
                        params: dict | None = None, level: int | None = None) -> int:
        """Write the rows of `query` as a file of table `table` at `path` in the scratch space, to be
        taken into a new version whole by `TableBuilder.adopt`. Returns the number of rows written."""
        from .writing import copy_file

        if self.root / SCRATCH not in Path(path).parents:
            raise ValueError(f"{path}: a table file is written in the warehouse's scratch space")
        return copy_file(connection, query, Path(path), table, params, level)

    @contextmanager
    def scratch(self) -> Iterator[Path]:
        """A scratch folder for one stage, inside the warehouse (the same file system), removed when
        the block ends; one a killed writer left is removed by the next writer."""
        import tempfile

        self.mark()
        base = self.root / SCRATCH
        if kind_of(base) not in (None, "directory"):  # not the warehouse's own: the link goes, what it names stays
            base.unlink()
        base.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(dir=base))
        try:
            yield path
        finally:
            remove_tree(path)

    def _conform_tables(self) -> None:
        """Rewrite, in its table's schema, every table file that does not hold it (the caller holds the
        lock): a file an earlier loopmeter wrote, or one written by hand. A version holding what is not a
        table file, or a file that cannot be rewritten without changing a value, stops the writer with
        one line naming it."""
        for name in self.table_names():
            bad = self.mismatches(name)
            if bad:
                from .rewrite import rewrite

                rewrite(self, name, bad)

    def _record_verified(self) -> None:
        """Record the current versions' files as verified (the files this process wrote verified now)."""
        files: list[tuple[str, Path, os.stat_result]] = []
        for name in self.table_names():
            try:
                self.mismatches(name, verified=files)
            except TableFileMismatch:  # a version holding what is not a table file: its files are not recorded
                continue
        self.verified.save(files)
        from .remote import is_mirror

        if not is_mirror(self.root):  # object storage keeps no record of this user's (`written.py`)
            written.save(self.state, self.root, files)

    def _refuse_unlinked(self) -> None:
        """A table the last writer left published whose link is gone (removed or replaced by hand) while
        `.versions/<table>/` holds its versions: a writer would take the table for absent, write it anew
        and remove those versions. Refused, naming it (the caller holds the lock)."""
        for name in unlinked(self)[:1]:
            folder = self.root / versions.FOLDER / name
            raise LoopmeterError(
                f"{shown_path(self.root / name)}: table {name} has no link to its versions in {shown_path(folder)} "
                f"(removed or replaced by hand); run `loopmeter check --repair` to link it back (or remove "
                f"{shown_path(folder)} to drop the table), then run this again")
