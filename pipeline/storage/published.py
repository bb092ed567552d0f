"""Which tables the last writer left published: those its records name (`.state/verified.json`, the
files it verified; `.state/catalog.json`, the catalog's build). A version of a table neither names may
be a writer's at work, or one a killed writer never published (perhaps half written): it is never
linked as the table, and a missing link of a table they name is never taken for a table that is not."""
from __future__ import annotations

from .files import kind_of
from .verified import RECORD

CATALOG_RECORD = "catalog.json"  # what `catalog.py` records of the catalog it built


def published(warehouse, name: str) -> bool:
    """Whether the records the last writer left in `warehouse` (a `Warehouse`) name table `name`."""
    if kind_of(warehouse.state.path(RECORD)) == "file" and any(key[0] == name for key in warehouse.verified.recorded()):
        return True
    built = warehouse.state.read(CATALOG_RECORD) if kind_of(warehouse.state.path(CATALOG_RECORD)) == "file" else None
    return isinstance(built, dict) and isinstance(built.get("tables"), list) and name in built["tables"]
