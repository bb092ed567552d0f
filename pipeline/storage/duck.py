"""DuckDB sessions on a warehouse, confined to it.

Every DuckDB connection loopmeter opens to work on a warehouse (the catalog build, `check`,
`sql`, the ForgeLoop analysis, the Forge summaries) comes from `connect`: an in-memory database
whose file access is limited to the warehouse folder (and the few files a stage names besides,
such as the store an ingest reads), that loads no extension and reads no Python variable by
name, with its settings locked. A name that slipped past `names.py` into SQL could still reach
no file outside.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .names import file_pattern, quote_literal

if TYPE_CHECKING:
    import duckdb


NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                 "allow_community_extensions": False}


def connect(root: Path, *, also: Iterable[Path] = (), memory_limit: str | None = None, threads: int | None = None,
            temp_directory: Path | None = None, database: str = ":memory:", read_only: bool = False,
            time_zone: str | None = "UTC", keep_order: bool = True, lock: bool = True) -> "duckdb.DuckDBPyConnection":
    """A DuckDB connection that may touch files only inside `root` (and the files `also`), in memory
    unless `database` names a file (opened `read_only`); its sessions (cursors) work in `time_zone`
    (None: the machine's), `keep_order`: results keep their input's order where SQL leaves it open;
    `lock`: no setting may change after (a session that runs only loopmeter's own SQL may leave its
    thread count free: file access, once limited, cannot be widened again in any case)."""
    from ..duckdb_module import duckdb

    # a database file is opened with no extension to load: a file that is not DuckDB's (SQLite's, say) would
    # otherwise have DuckDB fetch and load the extension that reads it, before `confine` could forbid it
    connection = duckdb.connect(database, read_only=read_only, config=NO_EXTENSIONS)
    try:
        if time_zone is not None:
            connection.execute(f"SET GLOBAL TimeZone = {quote_literal(time_zone)}")
        if not keep_order:
            connection.execute("SET preserve_insertion_order = false")
        confine(connection, root, also=also, memory_limit=memory_limit, threads=threads, temp_directory=temp_directory,
                lock=lock)
    except BaseException:
        connection.close()
        raise
    return connection


def confine(connection: "duckdb.DuckDBPyConnection", root: Path, *, also: Iterable[Path] = (),
            memory_limit: str | None = None, threads: int | None = None, temp_directory: Path | None = None,
            lock: bool = True) -> None:
    """Limit `connection` to the files inside `root` (and `also`), then (`lock`) lock its settings."""
    real = os.path.realpath(root)
    folders = [real + "/", *(() if os.path.realpath(root) == os.fspath(root) else (os.fspath(root).rstrip("/") + "/",))]
    # DuckDB checks a file pattern as written: a folder named with `[`, `?` or `*` is allowed as the
    # pattern that matches it too (`names.file_pattern`), which reaches only that folder
    folders = list(dict.fromkeys([*folders, *map(file_pattern, folders)]))
    connection.execute(f"SET allowed_directories = [{', '.join(quote_literal(folder) for folder in folders)}]")
    paths = [os.path.realpath(path) for path in also] + [os.path.abspath(path) for path in also]
    paths = list(dict.fromkeys([*paths, *map(file_pattern, paths)]))
    if paths:
        connection.execute(f"SET allowed_paths = [{', '.join(quote_literal(path) for path in paths)}]")
    if memory_limit is not None:
        connection.execute(f"SET memory_limit = {quote_literal(memory_limit)}")
    if threads is not None:
        connection.execute(f"SET threads = {int(threads)}")
    # without a folder of the caller's, none: DuckDB's default (`.tmp` under the working directory) would
    # be written when a query spills, and read by any query, outside the warehouse
    connection.execute(f"SET temp_directory = {quote_literal(str(temp_directory) if temp_directory is not None else '')}")
    connection.execute("SET autoinstall_known_extensions = false")
    connection.execute("SET autoload_known_extensions = false")
    connection.execute("SET allow_community_extensions = false")
    connection.execute("SET python_enable_replacements = false")
    connection.execute("SET enable_external_access = false")  # from here on, the folders above cannot widen
    if lock:
        connection.execute("SET lock_configuration = true")
