"""`<warehouse>/loopmeter.duckdb`: one documented view per table, for ad hoc SQL and BI tools.

Each view reads its table's Parquet files through the table's link, by absolute path, so the
database answers from any working directory with no setup (`duckdb.connect(...)`, a SQLAlchemy
URI, DBeaver, Metabase, Evidence), and a view always reads the current version. Every view and
column carries a `COMMENT ON` from the table registry. The file is written in DuckDB's v1.4
storage format (STORAGE_VERSION), which DuckDB 1.4, 1.5 and 2.x all read.

The file is always built from nothing, in a confined session (`duck.py`), with every name quoted
(`names.py`), aside and renamed into place: a view loopmeter did not write is never kept. A
view reads through the table's link, so a new version of a table changes nothing in it: a writer
builds the file as it ends unless the record of its build (`.state/catalog.json`, this user's
own, writable by nobody else) says it was built for these tables, this place and this loopmeter,
and the file is exactly the one built (size, times, inode, device: replaced or changed in any
way, it is built again). A reader rebuilds it when the record says it was built for another
place (a copied or moved warehouse), other tables or another loopmeter, or the file is not the
one built, and no writer holds the lock. loopmeter's own commands never run the
file's views: `sql` builds the same views in memory, and `check` compares the file's view
definitions with what loopmeter writes, without running them.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from .. import SCHEMA_VERSION, __version__
from ..errors import LoopmeterError, TableFileMismatch, shown_path, warn
from .. import faults
from . import duck, lock, registry
from .files import WHAT, NotAFile, kind_of, open_regular
from .names import file_pattern, quote_identifier, quote_literal
from .published import CATALOG_RECORD
from .entries import DATABASE
from .warehouse import Warehouse

if TYPE_CHECKING:
    import duckdb

STATE = CATALOG_RECORD
# DuckDB storage version 67: read by DuckDB 1.4.x (the long-term-support line BI drivers embed),
# 1.5.x and 2.x; 2.x's own format (69) is read by no 1.x release. Views and comments need nothing newer.
STORAGE_VERSION = "v1.4.0"
NAME = "loopmeter"  # the database's name in SQL (`loopmeter.runs`), as DuckDB names a file it opens


def real_root(warehouse: Warehouse) -> Path:
    """The warehouse's absolute place, links resolved: the views' paths start with it."""
    return Path(os.path.realpath(warehouse.root))


def view_sql(warehouse: Warehouse, name: str) -> str:
    """The SELECT the view of table `name` is: its columns in their declared order, the partition
    column read from the folder names (as text), the files read through the table's link."""
    table = registry.table(name)
    location = quote_literal(f"{file_pattern(real_root(warehouse) / name)}/**/*.parquet")
    hive = "hive_partitioning = true, hive_types_autocast = false" if table.partition else "hive_partitioning = false"
    columns = ", ".join(quote_identifier(column) for column in table.column_names)
    return f"SELECT {columns} FROM read_parquet({location}, {hive})"


def define_views(connection: "duckdb.DuckDBPyConnection", warehouse: Warehouse, names: list[str],
                 comments: bool = True) -> None:
    """Create, in the connection's current database, a view of each table in `names` (each a table
    loopmeter knows) with the comments on it and its columns, in one transaction."""
    connection.execute("BEGIN TRANSACTION")  # one commit for everything: a commit per statement is slow
    statements = [f"CREATE VIEW {quote_identifier(name)} AS {view_sql(warehouse, name)}" for name in names]
    if comments:
        for name in names:
            table = registry.table(name)
            statements.append(f"COMMENT ON VIEW {quote_identifier(name)} IS {quote_literal(table.description)}")
            statements += [f"COMMENT ON COLUMN {quote_identifier(name)}.{quote_identifier(column)} IS {quote_literal(comment)}"
                           for column, _, comment in table.columns]
    if statements:
        connection.execute(";\n".join(statements))
    connection.execute("COMMIT")


def viewable(warehouse: Warehouse) -> list[str]:
    """The tables a view is made of: those whose version holds nothing but table files (DuckDB reads
    a file's footer as the view is made: a FIFO there would hang it). Another is named and left out."""
    names = []
    for name in warehouse.table_names():
        try:
            warehouse.listing(name)
        except TableFileMismatch as error:
            warn(f"{error} (table {name} is left out of the views)")
            continue
        names.append(name)
    return names


def built_for(warehouse: Warehouse, names: list[str] | None = None) -> dict:
    """What the catalog depends on: where the warehouse is, the tables present, the versions."""
    return {
        "root": str(real_root(warehouse)),
        "tables": warehouse.table_names() if names is None else names,
        "loopmeter": __version__,
        "schema": SCHEMA_VERSION,
        "storage": STORAGE_VERSION,
    }


def _file_identity(path: Path, private: bool = False) -> list[int] | None:
    """The catalog file as it is: a file put in its place (another inode) or changed in any way (its
    change time, which no one can set back) is another. `private`: None unless it is this user's
    own file and nobody else may write it."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(status.st_mode) or private and (status.st_uid != os.geteuid() or status.st_mode & 0o022):
        return None
    return [status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino, status.st_dev]


def catalog_needs_rebuild(warehouse: Warehouse, *, private: bool = False) -> bool:
    """Whether loopmeter.duckdb must be rebuilt before it shows this warehouse's tables, as far as
    `.state/catalog.json` tells, read without importing DuckDB: a hint for readers; `private` (a
    writer, which would otherwise build it anew) trusts only a record of this user's own that
    nobody else may write, of the file exactly as it is now (`_file_identity`)."""
    current = built_for(warehouse)
    if not current["tables"]:
        return False
    recorded = warehouse.state.read(STATE, private=private)
    if not isinstance(recorded, dict) or warehouse.catalog_stale:
        return True
    if recorded.get("file") != _file_identity(warehouse.root / DATABASE, private) or recorded.get("file") is None:
        return True
    if os.path.lexists(warehouse.root / f"{DATABASE}.wal"):  # loopmeter's build leaves no log: DuckDB would replay it
        return True
    return any(recorded.get(key) != value for key, value in current.items())


def refresh_catalog(warehouse: Warehouse) -> Path:
    """Build loopmeter.duckdb anew for the tables present (the caller holds the writer lock)."""
    if warehouse.publishing_now:
        raise ValueError("the catalog is built from published tables: refresh it after the publishing block")
    target = warehouse.root / DATABASE
    names = viewable(warehouse)
    if not names:
        return target
    _build(warehouse, target, names)
    record = built_for(warehouse, names)
    record["file"] = _file_identity(target)
    warehouse.state.write(STATE, record)
    warehouse.catalog_stale = False
    return target


def _build(warehouse: Warehouse, target: Path, names: list[str]) -> None:
    temporary = warehouse.root / f".{DATABASE}.{secrets.token_hex(4)}.tmp"
    wal = Path(str(temporary) + ".wal")
    connection = duck.connect(warehouse.root, threads=1)  # views and comments only: many small statements
    try:
        connection.execute(f"ATTACH {quote_literal(str(temporary))} AS {NAME} (STORAGE_VERSION {quote_literal(STORAGE_VERSION)})")
        connection.execute(f"USE {NAME}")
        define_views(connection, warehouse, names)
        connection.execute(f"CHECKPOINT {NAME}")
        connection.execute("USE memory")
        connection.execute(f"DETACH {NAME}")
        connection.close()
        if os.path.lexists(target) and not os.path.isfile(target) or os.path.islink(target):
            raise LoopmeterError(f"{shown_path(target)} is not a regular file; remove it (loopmeter rebuilds it)")
        faults.checkpoint("before-publish:catalog")
        os.replace(temporary, target)
        # a write-ahead log beside the target is the replaced file's: DuckDB would refuse the new file with it
        wal_of_target = Path(str(target) + ".wal")
        if os.path.lexists(wal_of_target):
            wal_of_target.unlink()
    except BaseException:
        connection.close()
        temporary.unlink(missing_ok=True)
        raise
    finally:
        wal.unlink(missing_ok=True)


def memory_catalog(warehouse: Warehouse, comments: bool = True, threads: int | None = None) -> "duckdb.DuckDBPyConnection":
    """The views and comments loopmeter.duckdb holds, built in an in-memory database of the same name
    (`loopmeter.runs` reads alike), confined to the warehouse: what `sql` and `schema` read. `threads`:
    DuckDB's threads (default: one per core; one makes each of many small statements cheaper)."""
    connection = duck.connect(warehouse.root, time_zone=None, threads=threads)  # `sql` shows times in the machine's zone
    try:
        connection.execute(f"ATTACH ':memory:' AS {NAME}")
        connection.execute(f"USE {NAME}")
        define_views(connection, warehouse, viewable(warehouse), comments)
    except BaseException:
        connection.close()
        raise
    return connection


def repair_catalog(warehouse: Warehouse) -> bool:
    """For a reader: rebuild loopmeter.duckdb when `catalog_needs_rebuild` says so and no writer holds
    the lock (a writer rebuilds it as it ends). Whether it was rebuilt."""
    if not catalog_needs_rebuild(warehouse):
        return False
    with warehouse.lock_if_free(lock.REBUILDING) as taken:
        if not taken:
            return False
        refresh_catalog(warehouse)
    return True


def _duckdb_header(path: Path) -> bool:
    """Whether the file `path` starts as a DuckDB database file does (its magic bytes at offset 8); True
    when it cannot be read here (opening it then says why)."""
    try:
        with os.fdopen(open_regular(path), "rb") as handle:
            return handle.read(12)[8:12] == b"DUCK"
    except (OSError, NotAFile):
        return True


def _other_place(have: str, want: str | None, root: Path) -> str | None:
    """The warehouse whose table a view reads when the view is, but for that place, the one loopmeter
    writes here (`want`): the view of a copied or moved warehouse. None when it differs otherwise."""
    import re

    here = file_pattern(root).replace("'", "''")  # the place as the view's text holds it (`view_sql`)
    if want is None or here not in want:
        return None
    before, after = want[:want.index(here)], want[want.index(here) + len(here):]
    if not have.startswith(before) or not have.endswith(after) or len(have) <= len(before) + len(after):
        return None
    place = have[len(before):len(have) - len(after)]
    if not place.startswith("/") or "'" in place.replace("''", "") or "\n" in place:
        return None
    return re.sub(r"\[([*?[])\]", r"\1", place.replace("''", "'"))


def objects_problems(warehouse: Warehouse) -> list[str]:
    """What in loopmeter.duckdb loopmeter did not write, read without running anything: a view
    whose definition is not the one loopmeter writes, a view missing or of no table, a table,
    macro, sequence or type. Empty when the file holds exactly loopmeter's views."""
    from ..duckdb_module import duckdb

    database = warehouse.root / DATABASE
    names = viewable(warehouse)
    expected = memory_catalog(warehouse, comments=False, threads=1)
    try:
        want = dict(expected.sql("SELECT view_name, sql FROM duckdb_views() WHERE database_name = 'loopmeter' "
                                 "AND NOT internal").fetchall())
    finally:
        expected.close()
    if not _duckdb_header(database):
        return ["is not a DuckDB database (its first bytes are not DuckDB's header)"]
    wal = Path(f"{database}.wal")
    wal_kind = kind_of(wal)
    if wal_kind not in (None, "file"):  # DuckDB opens the log beside the file, and would wait on a FIFO
        return [f"its write-ahead log {shown_path(wal)} is {WHAT.get(wal_kind, wal_kind)}, not a regular file "
                "(never opened): the next writer, or `loopmeter check --repair`, rebuilds the catalog without it"]
    try:
        connection = duck.connect(warehouse.root, database=str(database), read_only=True)
    except duckdb.Error as error:
        return [f"cannot be opened ({str(error).splitlines()[0]})"]
    try:
        have = dict(connection.sql("SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
                                   "AND NOT internal").fetchall())
        others = connection.sql(
            "SELECT 'table ' || table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "UNION ALL SELECT 'macro ' || function_name FROM duckdb_functions() WHERE database_name = current_database() "
            "AND NOT internal UNION ALL SELECT 'sequence ' || sequence_name FROM duckdb_sequences() "
            "WHERE database_name = current_database() UNION ALL SELECT 'type ' || type_name FROM duckdb_types() "
            "WHERE database_name = current_database() AND NOT internal").fetchall()
    finally:
        connection.close()
    problems = [f"holds a {what} loopmeter did not write" for (what,) in others]
    places = set()
    for name in names:
        if name not in have:
            problems.append(f"has no view of table {name}")
        elif have[name] != want.get(name):
            place = _other_place(have[name], want.get(name), real_root(warehouse))
            if place is None:
                problems.append(f"its view {name} is not the one loopmeter writes")
            places.add(place)
    places.discard(None)  # those views are named one by one above
    if places:  # the views that are loopmeter's but for their place: one line says it
        others = f" (and {len(places) - 1} other places)" if len(places) > 1 else ""
        problems.insert(0, f"its views read the tables of the warehouse at {shown_path(sorted(places)[0])}{others}, "
                        "not of this place (a copied or moved warehouse): any other loopmeter command that opens the "
                        "warehouse, or `loopmeter check --repair`, builds them anew for this place")
    problems += [f"holds a view {name!r} of no table" for name in sorted(set(have) - set(names))]
    return problems
