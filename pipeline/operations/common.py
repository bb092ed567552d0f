"""What every operation shares: opening the warehouse to read or to write, and the writer's block."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import first_line, is_interruption, one_line, shown_path, warn
from ..storage import Warehouse

# The warehouses the operations of this process opened, with each table's version at that moment:
# an interruption says which tables it had replaced already (each is replaced atomically, not the set).
WATCHED: list[tuple[Path, dict[str, str]]] = []


def open_warehouse(warehouse: str | os.PathLike | Warehouse | None = None, *, writing: bool = False) -> Warehouse:
    """The warehouse named (a path, `$LOOPMETER_WAREHOUSE`, or `data/warehouse`), made fit to read.

    A folder without the warehouse marker is refused, unless the operation writes (its lock makes a
    new or empty folder a warehouse). A killed writer's publish is finished, and loopmeter.duckdb is
    rebuilt when it was built for another place (a copied or moved warehouse) or is missing, unless
    a writer holds the lock (it rebuilds it as it ends)."""
    from ..config import warehouse_dir
    from ..storage.catalog import repair_catalog

    store = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse_dir(warehouse))
    watch(store.root)
    if not store.is_marked():
        if not writing:
            store.require_marked()
        return store  # nothing to finish or repair in a folder that is not a warehouse yet
    store.finish_interrupted_publishing()
    try:
        repair_catalog(store)
    except Exception as error:  # noqa: BLE001 - the operation's own work does not need the catalog
        if is_interruption(error):
            raise KeyboardInterrupt from None
        warn(f"{shown_path(store.root / 'loopmeter.duckdb')} could not be rebuilt for this folder: "
             f"{one_line(first_line(error))}; `loopmeter check --repair` says why and rebuilds it")
    return store


@contextmanager
def writing(store: Warehouse, *, wait: bool = False, command: str = "loopmeter") -> Iterator[Warehouse]:
    """The writer's block: the warehouse's lock held, and its catalog built anew as the block ends
    unless it is the one built for these tables (`catalog_needs_rebuild`). A block that ends with an
    error or Ctrl-C builds it too, for the tables its finished stages published (an error in that
    build is left to the next command, which builds it: the block's own error is the one told)."""
    from ..storage.catalog import catalog_needs_rebuild, refresh_catalog

    def build_if_stale() -> None:
        if catalog_needs_rebuild(store, private=True):
            refresh_catalog(store)

    with store.lock(wait=wait, command=command):
        try:
            yield store
        except BaseException:
            try:
                build_if_stale()
            except Exception:  # noqa: BLE001 - the next command builds it again
                pass
            raise
        build_if_stale()


def watch(root: Path) -> None:
    """Remember the tables' versions in `root` now, to tell an interruption what changed since."""
    WATCHED.append((root, table_links(root)))


def table_links(root: Path) -> dict[str, str]:
    try:
        with os.scandir(root) as entries:
            return {entry.name: os.readlink(entry.path) for entry in entries
                    if not entry.name.startswith(".") and entry.is_symlink()}
    except OSError:
        return {}


def replaced_tables() -> list[str]:
    """The tables the operations of this process replaced since they opened their warehouses."""
    replaced: list[str] = []
    for root, before in WATCHED:
        after = table_links(root)
        replaced += sorted(name for name, version in after.items() if before.get(name) != version and name not in replaced)
    return replaced
