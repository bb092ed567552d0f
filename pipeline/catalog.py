"""`<warehouse>/loopmeter.duckdb`: one documented view per table, for ad hoc SQL and BI tools.

Views read the Parquet files by paths relative to the warehouse, so the folder can be
moved or zipped; a client opening the database elsewhere sets
`SET file_search_path = '<warehouse>'` (loopmeter does) or starts in the warehouse folder.
Every view and column carries a `COMMENT ON` from the table registries of the areas.
The file is rebuilt aside and renamed into place, so a reader never sees half of it.
"""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from .warehouse import DATABASE, Warehouse

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


def refresh_catalog(warehouse: Warehouse) -> Path:
    """Rebuild loopmeter.duckdb with a view and comments for every table present."""
    import duckdb

    docs = table_docs()
    target = warehouse.root / DATABASE
    temporary = warehouse.root / f".{DATABASE}.{secrets.token_hex(4)}.tmp"
    connection = duckdb.connect(str(temporary))
    try:
        connection.execute(f"SET file_search_path = {_quote(str(warehouse.root))}")
        for name in warehouse.table_names():
            connection.execute(f'CREATE VIEW "{name}" AS {warehouse.view_sql(name, absolute=False)}')
            description, columns = docs.get(name, ("(undocumented table)", []))
            connection.execute(f'COMMENT ON VIEW "{name}" IS {_quote(description)}')
            comments = {column: comment for column, _, comment in columns}
            present = [row[0] for row in connection.sql(f'DESCRIBE "{name}"').fetchall()]
            for column in present:
                comment = comments.get(column)
                if comment is None:
                    print(f"loopmeter: warning: {name}.{column} has no documentation", file=sys.stderr)
                    comment = "(undocumented)"
                connection.execute(f'COMMENT ON COLUMN "{name}"."{column}" IS {_quote(comment)}')
        connection.execute("CHECKPOINT")
    finally:
        connection.close()
    os.replace(temporary, target)
    wal = Path(str(temporary) + ".wal")
    if wal.exists():
        wal.unlink()
    return target
