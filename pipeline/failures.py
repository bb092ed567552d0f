"""What an unexpected error means to the user: one line naming the path and what to do.

The last line of defence of a command (`commands/common.py`) asks `explain` first. Three kinds
of failure are recognised whatever library raised them (Python, polars, pyarrow, DuckDB):
a full disk (or quota), a damaged table file (found by checking the footers of the tables of
the warehouses the command opened: polars' and DuckDB's messages often name no file) and a
damaged loopmeter.duckdb. Anything else gets the generic line.
"""
from __future__ import annotations

import errno
import re
from pathlib import Path

from .errors import first_line, shown_path

_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded|errno 28\b|os error 28\b", re.IGNORECASE)
# a damaged page, as DuckDB, polars and pyarrow tell it, often names no file
_PARQUET_TEXT = re.compile(r"parquet|magic bytes|footer|thrift|out of buffer|decompress|snappy|zstd", re.IGNORECASE)
_DATABASE_TEXT = re.compile(r"Corrupt database file|not a valid DuckDB database|loopmeter\.duckdb", re.IGNORECASE)


def _chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def explain(error: BaseException, roots: list[Path], replaced: list[str]) -> str | None:
    """The one line for `error` when it is a full disk, a damaged table file or a damaged
    loopmeter.duckdb (`roots`: the warehouses the command opened; `replaced`: the tables it had
    already replaced); None for any other error."""
    errors = list(_chain(error))
    text = " ".join(first_line(e) for e in errors)
    if any(isinstance(e, OSError) and e.errno in _FULL for e in errors) or _FULL_TEXT.search(text):
        return _disk_full(errors, roots, replaced)
    if _PARQUET_TEXT.search(text) and roots:
        from .storage.integrity import damaged_files

        for root in roots:
            damaged = damaged_files(root)
            if damaged:
                path, table, detail = damaged[0]
                more = f" (and {len(damaged) - 1} more damaged files)" if len(damaged) > 1 else ""
                return (f"{shown_path(path)}: a file of table {table} is damaged: {detail}{more}; "
                        f"run `loopmeter check --repair --warehouse {shown_path(root)}` to rebuild what can be rebuilt")
    if _DATABASE_TEXT.search(text) and roots:
        database = Path(roots[0]) / "loopmeter.duckdb"
        return (f"{shown_path(database)} is damaged ({first_line(error)}); "
                f"run `loopmeter catalog --warehouse {shown_path(roots[0])}` to rebuild it")
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        # a path the system refused (not a directory, a name too long, no such place): the path and the reason
        return f"{shown_path(error.filename)}: {error.strerror.lower()}"
    return None


def _disk_full(errors: list[BaseException], roots: list[Path], replaced: list[str]) -> str:
    named = next((e.filename for e in errors if isinstance(e, OSError) and e.filename), None)
    where = shown_path(named) if named else shown_path(roots[0]) if roots else "a file this command writes"
    left = (f"tables already replaced keep their new version ({', '.join(replaced)}), the others their previous one"
            if replaced else "no table was replaced: the warehouse keeps its previous tables")
    return (f"no space left on the device holding {where}; {left}; free some space there "
            "(or give --warehouse a disk with room) and run the command again")
