"""The entries of a warehouse's root that loopmeter makes: its own files and folders, and what a
writer makes there for a moment (a temporary file beside a file it writes, a link beside a table's
link, `.scratch/`); and the removal of what a killed writer left, as the next writer takes the lock.
Nothing else in the root is a writer's: a user's file named like a temporary one is left."""
from __future__ import annotations

import os
import re
from pathlib import Path

from . import lock, registry, versions
from .files import is_real_directory, kind_of, remove_tree
from .marker import MARKER

DATABASE = "loopmeter.duckdb"
SCRATCH = ".scratch"
# what loopmeter keeps in a warehouse's root besides its tables
OWN_ENTRIES = {MARKER, versions.FOLDER, lock.FILE, SCRATCH, ".state", DATABASE, f"{DATABASE}.wal", "aggregate",
               "report.html"}
ROOT_FILES = (MARKER, DATABASE, "report.html")  # the root's files a writer makes as a temporary file beside, renamed
_TEMPORARY = re.compile(r"\.(.+)\.[0-9a-f]{8}\.(tmp|tmp\.wal|link)")
STATE_TEMPORARY = re.compile(r"\..+\.[0-9a-f]{8}\.tmp(\.wal)?")  # `atomic_write`'s file in .state/ before its rename


def writers_leftover(name: str) -> str | None:
    """What entry `name` in the root is when a writer makes it there for a moment: "tmp" for
    `.<file>.<8 hex>.tmp` (and DuckDB's `.wal` of it) beside a file of ROOT_FILES, "link" for
    `.<table>.<8 hex>.link` beside a table's link; None for any other name (perhaps a user's file)."""
    found = _TEMPORARY.fullmatch(name)
    if found is None:
        return None
    if found[2] == "link":
        return "link" if registry.known(found[1]) else None
    return "tmp" if found[1] in ROOT_FILES else None


def _state_temporaries(state: Path) -> list[Path]:
    try:
        return [state / name for name in os.listdir(state) if STATE_TEMPORARY.fullmatch(name)]
    except OSError:  # not readable: nothing of a writer's can be there
        return []


def collect_garbage(root: Path, state: Path) -> bool:
    """Remove what a killed writer left in the warehouse at `root` (its state folder `state`): versions
    no table points to, its links and temporary files, the scratch folder. Nothing here follows a link.
    Whether a half-built catalog was among them (the catalog is then stale)."""
    with os.scandir(root) as entries:
        made = {entry.name: writers_leftover(entry.name) for entry in entries if entry.name.startswith(".")}
    for name in (name for name, what in made.items() if what == "link"):
        if kind_of(root / name) == "link":
            (root / name).unlink(missing_ok=True)
    stale = False
    strays = [*(root / name for name, what in made.items() if what == "tmp"),
              *(_state_temporaries(state) if is_real_directory(state) else ())]
    for stray in strays:
        if kind_of(stray) in ("file", "link"):
            stale = stale or stray.name.startswith(f".{DATABASE}.")
            stray.unlink(missing_ok=True)
    scratch = root / SCRATCH
    if kind_of(scratch) == "link":
        scratch.unlink()
    remove_tree(scratch)  # only the lock holder uses it
    folder = root / versions.FOLDER
    if not is_real_directory(folder):
        return stale
    for table in os.scandir(folder):
        if table.is_symlink():
            os.unlink(table.path)
            continue
        if not table.is_dir(follow_symlinks=False):
            continue
        current = versions.current(root, table.name)
        for version in os.scandir(table.path):
            if version.is_symlink():
                os.unlink(version.path)
            elif version.is_dir(follow_symlinks=False) and (
                    current is None or os.path.realpath(version.path) != os.path.realpath(current)):
                remove_tree(version.path)
    return stale
