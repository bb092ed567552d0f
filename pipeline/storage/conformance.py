"""What a table's version folder and each of its files must be before anything reads them.

A version of a table (`.versions/<table>/<id>/`) holds regular Parquet files only, each named
`*.parquet`: directly, or, for a partitioned table, in `<column>=<value>` folders whose value
follows the partition's rule (and an empty table's one file at its root). Every file there is a
table file some client reads (DuckDB's `**/*.parquet` takes a file named `.parquet` too; pyarrow,
pandas and Spark take any name not starting with `.` or `_`), so every name ending in `.parquet` is
verified as one, and any other file is a problem. A partitioned table's root holds no file but an
empty table's EMPTY_FILE, alone: a client reads a file there beside the partition folders. Anything
else in it (a symbolic link, a FIFO, a device, a folder of another name) is a problem named in one line: it is never opened, and the
table is not read. Each file must hold its table's schema (the registry's Arrow types, in order)
and may not expand beyond MAX_EXPANSION times its size (and FLOOR bytes) when read: its footer and
its page headers (`pages.py`: a footer can understate what a reader decompresses and decodes, a
page header cannot), read from a descriptor opened as a regular file, say so before any page is
decompressed.

A command verifies every file it reads, unless this user's own record says it verified that
very file, unchanged since (`verified.py`: a record anyone else could write is never trusted).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import first_line, shown_path
from . import pages, registry
from .files import NotAFile, WHAT, entry_kind, kind_of, open_regular

if TYPE_CHECKING:
    import pyarrow as pa

MAX_EXPANSION = 1000  # a table file's data, uncompressed, may be this many times its size ...
FLOOR = 256 << 20  # ... or this many bytes, whichever is more
UNREADABLE = "cannot be read as Parquet"
NOT_PARQUET = "is not a table file (not named *.parquet), and a client reading the table's folder would read it"
EMPTY_FILE = "part-empty.parquet"  # an empty partitioned table: one file at the version's root, every column


@dataclass
class Listing:
    """A version's table files, and what in the folder is not one (path, problem); for a partitioned
    table, its partition folders too: value -> (folder, its files), in path order."""
    files: list[Path] = field(default_factory=list)
    problems: list[tuple[Path, str]] = field(default_factory=list)
    partitions: dict[str, tuple[Path, list[Path]]] = field(default_factory=dict)


def list_version(table: str, version: Path) -> Listing:
    """The table files of `version` (a real directory of table `table`), in path order, and the
    entries that are not table files. Nothing is followed or opened."""
    listing = Listing()
    partition = registry.table(table).partition
    entries = _entries(version, listing)
    partitioned = partition is not None and any(entry.name.startswith(partition + "=") for entry in entries)
    for entry in entries:
        kind = entry_kind(entry)
        if kind == "file":
            if not _parquet(entry.name):
                listing.problems.append((Path(entry.path), NOT_PARQUET))
            elif partition is not None and (entry.name != EMPTY_FILE or partitioned):
                # a client reads it beside the partition folders, where its own column would clash with theirs
                listing.problems.append((Path(entry.path), f"is a file at the root of {table}, which is partitioned "
                                         f"by {partition}: only an empty table's {EMPTY_FILE} lies there, alone"))
            else:
                listing.files.append(Path(entry.path))
            continue
        if kind == "directory" and partition is not None:
            value = entry.name[len(partition) + 1:] if entry.name.startswith(partition + "=") else None
            problem = None if value is not None else f"not a partition folder of {table} ({partition}=<value>)"
            problem = problem or registry.partition_value_problem(partition, value)
            if problem is not None:
                listing.problems.append((Path(entry.path), problem))
                continue
            folder: list[Path] = []
            for inner in _entries(entry.path, listing):
                inner_kind = entry_kind(inner)
                if inner_kind == "file":
                    if _parquet(inner.name):
                        folder.append(Path(inner.path))
                    else:
                        listing.problems.append((Path(inner.path), NOT_PARQUET))
                elif inner_kind is not None:
                    listing.problems.append((Path(inner.path), f"is {WHAT[inner_kind]}, not a table file"))
            if folder:
                listing.files += folder
                listing.partitions[value] = (Path(entry.path), folder)
            continue
        if kind is not None:
            listing.problems.append((Path(entry.path), f"is {WHAT[kind]}, not a table file"))
    if not listing.files and not listing.problems:  # loopmeter writes an empty table's columns in a file too
        listing.problems.append((Path(version), f"holds no table file (an empty table keeps its columns in "
                                 f"{EMPTY_FILE if partition is not None else 'one file'})"))
    return listing


def _entries(folder: str | Path, listing: Listing) -> list[os.DirEntry]:
    """The entries of `folder` by name (the order of their paths: they share the folder)."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        listing.problems.append((Path(folder), f"cannot be listed ({error.strerror or error})"))
        return []


def _parquet(name: str) -> bool:
    return name.endswith(".parquet")  # as DuckDB's glob `*.parquet` has it: `.parquet` itself included


def in_partition(table: str, path: Path) -> bool:
    """Whether the file `path` of `table` lies in a partition folder (so holds no partition column)."""
    column = registry.table(table).partition
    parts = os.fspath(path).rsplit(os.sep, 2)
    return column is not None and len(parts) >= 2 and parts[-2].startswith(column + "=")


def file_problem(table: str, path: Path, *, whole: bool = False, opened: list | None = None) -> str | None:
    """What is wrong with the table file `path` (None: nothing): not a regular file, unreadable as
    Parquet (its footer, or with `whole` every row group), larger than allowed once decompressed,
    or holding another schema than its table's. `opened` is given the status of the file verified
    (of the descriptor, as the verification ends), when it was opened."""
    import pyarrow.parquet as pq

    try:
        descriptor = open_regular(path)
    except NotAFile:
        return f"is {WHAT.get(kind_of(path) or '', 'not a regular file')}, not a table file: never opened"
    except OSError as error:
        return f"cannot be opened ({error.strerror or error})"
    try:
        with os.fdopen(descriptor, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            parquet = pq.ParquetFile(handle)
            metadata = parquet.metadata
            limit = max(FLOOR, MAX_EXPANSION * size)
            expanded = max(sum(metadata.row_group(group).total_byte_size for group in range(metadata.num_row_groups)),
                           pages.expanded_size(handle, metadata, size, limit))
            if expanded > limit:
                return (f"expands to at least {expanded:,} bytes when read, {expanded // max(size, 1):,} times its size: "
                        "not a file loopmeter wrote, and not read")
            if whole:  # on this thread only: pyarrow's workers would call into the Python file object, and one
                # still waiting for the interpreter when it exits (after a damaged page) aborts the process
                for group in range(metadata.num_row_groups):
                    parquet.read_row_group(group, use_threads=False)
            problem = schema_problem(table, parquet.schema_arrow, in_partition(table, path))
            if opened is not None:
                opened.append(os.fstat(handle.fileno()))
            return problem
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
        return f"{UNREADABLE} ({first_line(error)})"


def schema_problem(table: str, schema: "pa.Schema", partitioned_file: bool, *, as_stored: bool = True) -> str | None:
    """What in `schema` differs from the table's (None: nothing): the first column missing,
    unexpected or of another type. `as_stored`: `schema` is a file's as read back (its types
    exactly); else an Arrow table's about to be written (large and view types store as plain).
    The files of a table share a few schemas: each is compared once per process (a schema equal to
    the table's, field for field, needs no comparison at all: hashing one costs more than that)."""
    if as_stored and schema.equals(registry.table(table).arrow_schema(partitioned_file)):
        return None
    return _schema_problem(table, schema, partitioned_file, as_stored)


@lru_cache(maxsize=1024)
def _schema_problem(table: str, schema: "pa.Schema", partitioned_file: bool, as_stored: bool) -> str | None:
    want = registry.table(table).arrow_schema(partitioned_file)
    shown = str if as_stored else _parquet_type
    have = {field.name: field.type for field in schema}
    partition = registry.table(table).partition
    for wanted in want:
        if wanted.name not in have:
            return f"column {wanted.name} is missing ({table} declares {wanted.type})"
        if shown(have[wanted.name]) != str(wanted.type) and not (as_stored and have[wanted.name] == wanted.type):
            return f"column {wanted.name} is {shown(have[wanted.name])}, {table} declares {wanted.type}"
    for name in have:
        if want.get_field_index(name) < 0:
            if partitioned_file and name == partition:
                return f"column {name} is stored inside the file too (a partition column lives in the folder name only)"
            return f"column {shown_path(name)} is not a column of {table}"
    if [field.name for field in schema] != want.names:
        return f"columns are in another order than {table} declares"
    return None


def _parquet_type(kind: "pa.DataType") -> str:
    """The type a reader gets back from the Parquet file of an Arrow column (large and view
    strings and lists are stored as plain ones)."""
    import pyarrow as pa

    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return "string"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        return f"list<element: {_parquet_type(kind.value_type)}>"
    return str(kind)
