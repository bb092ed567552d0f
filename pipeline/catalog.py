"""`<warehouse>/loopmeter.duckdb`: one documented view per table, for ad hoc SQL and BI tools.

Views read the Parquet files by paths relative to the warehouse, so the folder can be
moved or zipped; a client opening the database elsewhere sets
`SET file_search_path = '<warehouse>'` (loopmeter does) or starts in the warehouse folder.
Every view and column carries a `COMMENT ON` from the table registries of the areas.
The file is rebuilt aside and renamed into place, so a reader never sees half of it.

A view reads whatever version of its table is current, so the file is only rebuilt when
the set of tables, or their documentation, differs from what it was built for (recorded
in `.state/catalog.json`), or when it is missing or a killed writer left it half-built.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
from pathlib import Path

from . import SCHEMA_VERSION, __version__
from .faults import checkpoint
from .warehouse import DATABASE, Warehouse, atomic_write_text

STATE = Path(".state") / "catalog.json"

Column = tuple[str, str, str]


def table_docs() -> dict[str, tuple[str, list[Column]]]:
    """Every documented table: name -> (description, columns)."""
    from importlib.util import find_spec

    from .forgeloop.tables import FORGELOOP_TABLES

    docs = dict(FORGELOOP_TABLES)
    if find_spec("pipeline.forge.tables") is not None:  # the Forge area is being built beside this
        from .forge.tables import FORGE_TABLES

        docs.update(FORGE_TABLES)
    return docs


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _built_for(warehouse: Warehouse, docs: dict) -> str:
    """What the catalog depends on: the tables present and their documentation."""
    content = json.dumps([__version__, SCHEMA_VERSION, warehouse.table_names(), sorted(docs.items())])
    return hashlib.blake2b(content.encode(), digest_size=16).hexdigest()


def refresh_catalog(warehouse: Warehouse, force: bool = False) -> Path:
    """Make loopmeter.duckdb hold a view and comments for every table present (rebuilt only
    when it is missing, stale, or was built for other tables)."""
    if warehouse.publishing_now:
        raise ValueError("the catalog is built from published tables: refresh it after the publishing block")
    docs = table_docs()
    target = warehouse.root / DATABASE
    signature = _built_for(warehouse, docs)
    try:
        recorded = (warehouse.root / STATE).read_text()
    except OSError:
        recorded = None
    if not force and recorded == signature and target.exists() and not warehouse.catalog_stale:
        return target
    import duckdb

    temporary = warehouse.root / f".{DATABASE}.{secrets.token_hex(4)}.tmp"
    connection = duckdb.connect(str(temporary))
    try:
        connection.execute(f"SET file_search_path = {_quote(str(warehouse.root))}")
        names = warehouse.table_names()
        # one script each for the views and for the comments: a statement at a time is slow
        connection.execute("BEGIN TRANSACTION")  # one commit for everything: a commit per statement is slow
        if names:
            connection.execute(";\n".join(f'CREATE VIEW "{name}" AS {warehouse.view_sql(name, absolute=False)}' for name in names))
        present = connection.sql(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "ORDER BY table_name, column_index"
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
        connection.execute("CHECKPOINT")
    finally:
        connection.close()
    checkpoint("before-publish:catalog")
    os.replace(temporary, target)
    wal = Path(str(temporary) + ".wal")
    if wal.exists():
        wal.unlink()
    atomic_write_text(warehouse.root / STATE, signature)
    warehouse.catalog_stale = False
    return target


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
    """The schema page (docs/schema.md): every table and column the project writes, documented."""
    lines = [
        "# The warehouse schema",
        "",
        "Generated by `loopmeter schema --markdown` from the same documentation the DuckDB",
        "database carries as `COMMENT ON` (do not edit by hand). Every table is a folder of",
        "Parquet files under the warehouse and a view in `loopmeter.duckdb`.",
        "",
    ]
    for name, (description, columns) in sorted(table_docs().items()):
        lines += [f"## `{name}`", "", description, "", "| column | type | meaning |", "|---|---|---|"]
        lines += [f"| `{column}` | {dtype} | {comment.replace('|', '/')} |" for column, dtype, comment in columns]
        lines.append("")
    return "\n".join(lines)
