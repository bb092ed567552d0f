"""The warehouse's marker, `<warehouse>/.loopmeter`: what makes a folder a loopmeter warehouse.

A writer marks a folder when it first writes there (new or empty, or a warehouse of an earlier
loopmeter, which holds `.versions`); a reader refuses a folder without the mark and writes
nothing there. The marker is read without following a link and with a bound; a file there that is
not loopmeter's marker is named, never replaced (it may be the user's).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import LoopmeterError, shown_path
from . import registry, versions
from .files import NotAFile, atomic_write, is_real_directory, read_bounded

MARKER = ".loopmeter"
MARKER_TEXT = b'{"loopmeter": "warehouse", "format": 2}\n'


def is_marked(root: Path) -> bool:
    try:
        return read_bounded(Path(root) / MARKER, 4096).startswith(b'{"loopmeter": "warehouse"')
    except (OSError, NotAFile):
        return False


def problem(root: Path) -> str | None:
    """What is wrong with the folder's marker (None: it is loopmeter's)."""
    if is_marked(root):
        return None
    if os.path.lexists(Path(root) / MARKER):
        return "is not loopmeter's marker file, so no command takes the folder for a warehouse"
    return "is missing (a warehouse of an earlier loopmeter, or its marker removed)"


def require(root: Path) -> None:
    """Refuse a folder that is not a warehouse, in one line saying why."""
    root = Path(root)
    if is_marked(root):
        return
    if os.path.lexists(root / MARKER):
        raise LoopmeterError(f"{shown_path(root / MARKER)} is not loopmeter's marker file, so {shown_path(root)} is not "
                             "taken for a loopmeter warehouse; give --warehouse the folder an ingest wrote (in a "
                             "warehouse of yours, remove it and run `loopmeter check --repair`, which marks it again)")
    if not root.exists():
        raise LoopmeterError(f"no warehouse at {shown_path(root)}; ingest something first (`loopmeter ingest "
                             "forgeloop RESULTS` or `loopmeter ingest forge STORE`), or run `loopmeter demo` "
                             "(is --warehouse right?)")
    legacy = " (a warehouse of an earlier loopmeter is marked by its next writer, e.g. `loopmeter catalog`)" \
        if is_real_directory(root / versions.FOLDER) else ""
    raise LoopmeterError(f"{shown_path(root)} is not a loopmeter warehouse: it has no {MARKER} marker{legacy}; "
                         "give --warehouse the folder an ingest wrote")


def mark(root: Path, own_entries: set[str]) -> None:
    """Make the folder a warehouse when it is new, empty (but for `own_entries`, what loopmeter keeps
    in a warehouse's root), or a warehouse of an earlier loopmeter."""
    root = Path(root)
    if is_marked(root):
        return
    root.mkdir(parents=True, exist_ok=True)
    with os.scandir(root) as entries:
        present = [entry.name for entry in entries]
    foreign = [name for name in present if name not in own_entries and not registry.known(name)]
    if foreign and not is_real_directory(root / versions.FOLDER):
        raise LoopmeterError(f"{shown_path(root)} holds files and is not a loopmeter warehouse (no {MARKER} "
                             "marker); give --warehouse a new or empty folder")
    if os.path.lexists(root / MARKER):
        raise LoopmeterError(f"{shown_path(root / MARKER)} is not loopmeter's marker file; remove it")
    atomic_write(root / MARKER, MARKER_TEXT)
