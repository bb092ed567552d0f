"""`<warehouse>/loopmeter.duckdb`: one documented view per table, for ad hoc SQL and BI tools.

Each view reads its table's Parquet files by their absolute path, so the database answers
from any working directory with no setup: `duckdb.connect('<warehouse>/loopmeter.duckdb')`,
a SQLAlchemy URI (`duckdb:///<warehouse>/loopmeter.duckdb`), DBeaver, Metabase, Evidence.
Every view and column carries a `COMMENT ON` from the table registries of the areas.
The file is written in DuckDB's v1.4 storage format (STORAGE_VERSION), which DuckDB 1.4, 1.5
and 2.x all read, so BI tools whose embedded DuckDB is still of the 1.x line open it too.
It is rebuilt aside and renamed into place, so a reader never sees half of it (a program
holding the old file open keeps reading the old one). When only the set of tables changed, the
rebuild starts from a copy of the file and keeps the views of the tables still present, comments
and all: DuckDB comments on one column at a time, so most of a rebuild's statements are comments.

A view reads whatever version of its table is current, so the file is only rebuilt when
what it was built for (recorded in `.state/catalog.json`) differs: the warehouse's place
(a copied or moved warehouse would otherwise read the original's files, or none), the set of
tables, their documentation, loopmeter's version; or when it is missing or a killed writer
left it half-built, or when the file is not the one the last rebuild wrote (its size and
modification time, recorded too: a damaged or replaced file). Writers rebuild it as they end; any other command that opens the
warehouse rebuilds it when it must and no writer holds the lock (`repair_catalog`).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import SCHEMA_VERSION, __version__
from .errors import LoopmeterError
from .faults import checkpoint
from .sql import holding, session
from .warehouse import DATABASE, REBUILDING, Warehouse, atomic_write_text

if TYPE_CHECKING:
    import duckdb

STATE = Path(".state") / "catalog.json"
# The storage format loopmeter.duckdb is written in: DuckDB storage version 67, which DuckDB
# 1.4.x (the long-term-support line BI drivers embed), 1.5.x and 2.x read. 1.4 reads up to 67;
# 2.x's own format (69) is read by no 1.x release. Views and comments need nothing newer.
STORAGE_VERSION = "v1.4.0"
NAME = "loopmeter"  # the database's name in SQL (`loopmeter.runs`), as DuckDB names a file it opens

Column = tuple[str, str, str]


def table_docs() -> dict[str, tuple[str, list[Column]]]:
    """Every documented table: name -> (description, columns)."""
    from importlib.util import find_spec

    from .forgeloop.tables import FORGELOOP_TABLES

    docs = dict(FORGELOOP_TABLES)
    if find_spec("loopmeter.forge.tables") is not None:  # the Forge area is being built beside this
        from .forge.tables import FORGE_TABLES

        docs.update(FORGE_TABLES)
    return docs


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _real_root(warehouse: Warehouse) -> Path:
    """The warehouse's absolute place, links resolved: the views' paths start with it."""
    return Path(os.path.realpath(warehouse.root))


def _built_for(warehouse: Warehouse, docs: dict | None = None, names: list[str] | None = None) -> dict:
    """What the catalog depends on: where the warehouse is, the tables present, loopmeter's and
    the storage's versions and, given `docs`, a digest of the documentation. Without `docs`
    nothing is imported (the check every command makes when it opens the warehouse)."""
    record = {
        "root": str(_real_root(warehouse)),
        "tables": warehouse.table_names() if names is None else names,
        "loopmeter": __version__,
        "schema": SCHEMA_VERSION,
        "storage": STORAGE_VERSION,
    }
    if docs is not None:
        import hashlib

        text = json.dumps(sorted(docs.items()))
        record["documentation"] = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return record


def _recorded(warehouse: Warehouse) -> dict | None:
    """What `.state/catalog.json` says the catalog was built for (None: nothing readable)."""
    try:
        recorded = json.loads((warehouse.root / STATE).read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def catalog_needs_rebuild(warehouse: Warehouse) -> bool:
    """Whether loopmeter.duckdb must be rebuilt before it shows this warehouse's tables: the
    warehouse has tables and the file is missing, half-built by a killed writer, or was built
    for another place, other tables or another loopmeter. Reads `.state/catalog.json` and lists
    the folder; imports neither DuckDB nor the documentation."""
    current = _built_for(warehouse)
    if not current["tables"]:
        return False
    recorded = _recorded(warehouse)
    if recorded is None or warehouse.catalog_stale or not _file_as_built(warehouse, recorded):
        return True
    return any(recorded.get(key) != value for key, value in current.items())


def _file_identity(path: Path) -> list[int] | None:
    """The size and modification time of loopmeter.duckdb (None: no such file)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns]


def _file_as_built(warehouse: Warehouse, recorded: dict) -> bool:
    """Whether loopmeter.duckdb is the file the last rebuild wrote: a file damaged, truncated or
    replaced since (or written by a client that opened it to write) has another size or time, and is
    rebuilt rather than refused by every command after."""
    identity = _file_identity(warehouse.root / DATABASE)
    return identity is not None and recorded.get("file", identity) == identity


def refresh_catalog(warehouse: Warehouse, force: bool = False) -> Path:
    """Make loopmeter.duckdb hold a view and comments for every table present (rebuilt only
    when it is missing, stale, or was built for another place or other tables; always with
    `force`). The caller holds the writer lock."""
    if warehouse.publishing_now:
        raise ValueError("the catalog is built from published tables: refresh it after the publishing block")
    docs = table_docs()
    target = warehouse.root / DATABASE
    names = warehouse.table_names()
    signature = _built_for(warehouse, docs, names)
    recorded = _recorded(warehouse)
    if (not force and recorded is not None and {k: v for k, v in recorded.items() if k != "file"} == signature
            and _file_as_built(warehouse, recorded) and not warehouse.catalog_stale):
        return target
    import duckdb

    kept = None if force else kept_views(warehouse, recorded, signature)
    try:
        _write(warehouse, target, names, docs, kept, recorded)
    except duckdb.Error:
        if kept is None:
            raise
        _write(warehouse, target, names, docs, None, recorded)  # the copy did not open as it was built: all anew
    signature["file"] = _file_identity(target)
    atomic_write_text(warehouse.root / STATE, json.dumps(signature, indent=1) + "\n")
    warehouse.catalog_stale = False
    return target


def kept_views(warehouse: Warehouse, recorded: dict | None, signature: dict) -> list[str] | None:
    """The views of the current loopmeter.duckdb that a rebuild for `signature` can keep as they are,
    comments and all: those of the tables still present, when the file is the one the last rebuild
    wrote, for the same place, documentation and versions, and only the set of tables differs
    (an aggregate after the first ingest: three views kept, seven added). None: build it all."""
    if recorded is None or "file" not in recorded or warehouse.catalog_stale or not _file_as_built(warehouse, recorded):
        return None
    if any(recorded.get(key) != value for key, value in signature.items() if key != "tables"):
        return None
    tables = recorded.get("tables")
    if not isinstance(tables, list):
        return None
    return [name for name in tables if name in signature["tables"]]


def _write(warehouse: Warehouse, target: Path, names: list[str], docs: dict, kept: list[str] | None,
           recorded: dict | None) -> None:
    """loopmeter.duckdb for the tables `names`, built aside and renamed into place: from nothing, or
    (`kept`) from a copy of the current file (`recorded` says what it was built for), its views of
    the tables in `kept` left as they are."""
    with holding():  # built beside an aggregate (`ingest forgeloop --aggregate`): not closed under it
        _build(warehouse, target, names, docs, kept, recorded)


def _build(warehouse: Warehouse, target: Path, names: list[str], docs: dict, kept: list[str] | None,
           recorded: dict | None) -> None:
    temporary = warehouse.root / f".{DATABASE}.{secrets.token_hex(4)}.tmp"
    wal = Path(str(temporary) + ".wal")
    connection = session()
    attached = False
    try:
        if kept is not None:
            identity = _file_identity(target)
            shutil.copyfile(target, temporary)
            if identity != _file_identity(target):  # a client wrote into it meanwhile: all anew
                temporary.unlink()
                kept = None
        dropped = [name for name in (recorded or {}).get("tables", []) if name not in names] if kept is not None else []
        connection.execute(f"ATTACH {_quote(str(temporary))} AS {NAME} (STORAGE_VERSION {_quote(STORAGE_VERSION)})")
        attached = True
        connection.execute(f"USE {NAME}")
        define_views(connection, _located(warehouse), [name for name in names if name not in (kept or ())], docs, dropped)
        connection.execute(f"CHECKPOINT {NAME}")
        connection.execute("USE memory")
        connection.execute(f"DETACH {NAME}")
        attached = False
        connection.close()
        checkpoint("before-publish:catalog")
        os.replace(temporary, target)
        # A write-ahead log beside the target is the replaced file's (a client that wrote into it, then
        # crashed or still holds it): DuckDB would refuse the new file with it ("WAL does not match").
        Path(str(target) + ".wal").unlink(missing_ok=True)
    except BaseException:
        connection.close()  # its transaction, if one is open, rolled back
        if attached:  # the database outlives the session: nothing of this build stays attached to it
            _detach()
        temporary.unlink(missing_ok=True)
        raise
    finally:
        wal.unlink(missing_ok=True)


def _detach() -> None:
    import duckdb

    cleanup = session()
    try:
        cleanup.execute(f"DETACH DATABASE IF EXISTS {NAME}")
    except duckdb.Error:
        pass
    finally:
        cleanup.close()


def _located(warehouse: Warehouse) -> Warehouse:
    """The warehouse named by its absolute place, links resolved (its views' paths start there)."""
    root = _real_root(warehouse)
    return warehouse if warehouse.root == root else Warehouse(root)


def define_views(connection: "duckdb.DuckDBPyConnection", warehouse: Warehouse, names: list[str], docs: dict,
                 dropped: list[str] = ()) -> int:
    """Create, in the connection's current database, a view of each table in `names` (absolute
    paths) with the comments on it and its columns from `docs`, and drop the views `dropped`.
    The number of statements run: DuckDB comments on one column at a time, and a statement costs
    about as much as a comment (0.1 to 0.2 ms), so views kept as they are save most of them."""
    # one script each for the views and for the comments: a statement at a time is slow
    connection.execute("BEGIN TRANSACTION")  # one commit for everything: a commit per statement is slow
    views = [f'DROP VIEW "{name}"' for name in dropped]
    views += [f'CREATE VIEW "{name}" AS {warehouse.view_sql(name, absolute=True)}' for name in names]
    if views:
        connection.execute(";\n".join(views))
    present = connection.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND list_contains(?, table_name) ORDER BY table_name, column_index", [names]
    ).fetchall()
    statements = []
    for name in names:
        description, _ = docs.get(name, ("(undocumented table)", []))
        statements.append(f'COMMENT ON VIEW "{name}" IS {_quote(description)}')
    comments = {(name, column): comment for name, (_, columns) in docs.items() for column, _, comment in columns}
    for name, column in present:
        comment = comments.get((name, column))
        if comment is None:
            print(f"loopmeter: warning: {name}.{column} has no documentation", file=sys.stderr)
            comment = "(undocumented)"
        statements.append(f'COMMENT ON COLUMN "{name}"."{column}" IS {_quote(comment)}')
    if statements:
        connection.execute(";\n".join(statements))
    connection.execute("COMMIT")
    return len(views) + len(statements)


def memory_catalog(warehouse: Warehouse) -> "duckdb.DuckDBPyConnection":
    """The views and comments loopmeter.duckdb holds, built in an in-memory database of the same
    name (`loopmeter.runs` reads alike): for a reader that cannot use the file as it is."""
    import duckdb

    connection = duckdb.connect()
    try:
        connection.execute(f"ATTACH ':memory:' AS {NAME}")
        connection.execute(f"USE {NAME}")
        define_views(connection, _located(warehouse), warehouse.table_names(), table_docs())
    except BaseException:
        connection.close()
        raise
    return connection


def repair_catalog(warehouse: Warehouse) -> bool:
    """For any command opening the warehouse: rebuild loopmeter.duckdb when it must be
    (`catalog_needs_rebuild`: a copied or moved warehouse, a catalog a killed writer left
    missing) and no writer holds the lock; a writer that holds it rebuilds the catalog as it
    ends. Whether it was rebuilt. Costs a read of `.state/catalog.json` when nothing is to be done."""
    if not catalog_needs_rebuild(warehouse):
        return False
    with warehouse.lock_if_free(REBUILDING) as taken:
        if not taken:
            return False
        refresh_catalog(warehouse)  # checks again under the lock: another reader may just have rebuilt it
    return True


def rebuild_catalog(warehouse: Warehouse, *, wait: bool = False) -> dict:
    """`loopmeter catalog`: rebuild loopmeter.duckdb now, under the writer lock. What was built:
    the database's path, its number of views, the folder they read, its storage version."""
    if not warehouse.table_names():
        raise LoopmeterError(f"no tables in {warehouse.root}; ingest something first (or run `loopmeter demo`)")
    with warehouse.lock(wait=wait, command="catalog"):
        database = refresh_catalog(warehouse, force=True)
        built = _recorded(warehouse) or {}
    return {"database": str(database), "views": len(built.get("tables", [])), "root": built.get("root"),
            "storageVersion": STORAGE_VERSION}


def schema_rows(warehouse: Warehouse) -> list[dict]:
    """Every view and column of the warehouse database with its type and comment."""
    from .adhoc import open_read_only

    connection = open_read_only(warehouse)
    try:
        rows = connection.sql(
            "SELECT table_name, column_name, data_type, comment FROM duckdb_columns() "
            "WHERE database_name = current_database() ORDER BY table_name, column_index"
        ).fetchall()
    finally:
        connection.close()
    return [{"table": t, "column": c, "type": d, "comment": comment} for t, c, d, comment in rows]


def schema_markdown() -> str:
    """The schema page (docs/schema.md): every table and column the project writes, documented,
    with the Arrow type every file of the table holds (`layout.py`)."""
    from .layout import PARTITIONED, SQL_TYPES, arrow_type

    lines = [
        "# The warehouse schema",
        "",
        "Generated by `loopmeter schema --markdown` from the same documentation the DuckDB",
        "database carries as `COMMENT ON` (do not edit by hand). Every table is a folder of",
        "Parquet files under the warehouse and a view in `loopmeter.duckdb`. Every file of a",
        "table holds the Arrow types below, whoever wrote it; DuckDB reads them as the SQL types",
        "beside them. A partitioned table is a standard Hive layout: its partition column is in",
        "the folder names (`runs/run_set_id=<id>/part-0.parquet`), not inside the files.",
        "",
    ]
    for name, (description, columns) in sorted(table_docs().items()):
        partition = PARTITIONED.get(name)
        where = f" Partition column: `{partition}` (folder `{partition}=<value>`)." if partition else ""
        lines += [f"## `{name}`", "", description + where, "", "| column | Arrow type | SQL type | meaning |", "|---|---|---|---|"]
        lines += [f"| `{column}` | {arrow_type(dtype)} | {SQL_TYPES[dtype]} | {comment.replace('|', '/')} |"
                  for column, dtype, comment in columns]
        lines.append("")
    return "\n".join(lines)
