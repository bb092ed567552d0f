"""Which tables the last writer left published: those its records name (`.state/verified.json`, the
files it verified; `.state/catalog.json`, the catalog's build). A version of a table neither names may
be a writer's at work, or one a killed writer never published (perhaps half written): it is never
linked as the table, and a missing link of a table they name is never taken for a table that is not."""
from __future__ import annotations

import os
from pathlib import Path

from . import registry, versions
from .files import is_real_directory, kind_of
from .verified import RECORD

CATALOG_RECORD = "catalog.json"  # what `catalog.py` records of the catalog it built


def published(warehouse, name: str) -> bool:
    """Whether the records the last writer left in `warehouse` (a `Warehouse`) name table `name`."""
    if kind_of(warehouse.state.path(RECORD)) == "file" and any(key[0] == name for key in warehouse.verified.recorded()):
        return True
    built = warehouse.state.read(CATALOG_RECORD) if kind_of(warehouse.state.path(CATALOG_RECORD)) == "file" else None
    return isinstance(built, dict) and isinstance(built.get("tables"), list) and name in built["tables"]


def unlinked(warehouse) -> list[str]:
    """The tables the last writer left published whose link in the root is gone or not loopmeter's while
    `.versions/<table>/` holds versions of them (`versions.held`)."""
    folder = Path(warehouse.root) / versions.FOLDER
    if not is_real_directory(folder):
        return []
    with os.scandir(folder) as entries:
        names = sorted(entry.name for entry in entries if registry.known(entry.name))
    return [name for name in names if versions.current(warehouse.root, name) is None
            and versions.held(warehouse.root, name) and published(warehouse, name)]
