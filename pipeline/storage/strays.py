"""The entries of a warehouse loopmeter did not make, for `loopmeter check`, and which of them its
`--repair` removes.

loopmeter makes, in a warehouse's root, its own entries (`OWN_ENTRIES`, each of one kind) and its
tables' links; in `.versions/` a folder per table it knows, holding version folders; in `.state/`
regular files named as state files; in `aggregate/` a folder per run set. Anything else, or one of
these of another kind, is named in one line (the links in the root: `integrity._links`). A stray is
removable (`Stray.removable`, the kind seen: repairing removes the entry only while it is still of
that kind) when it is a link, a FIFO, a device or a socket (the entry itself: what a link names is
never touched, and such an entry holds no one's data), or anything inside `.versions/` or
`.state/`, which hold loopmeter's files alone. A regular file or folder anywhere else may be a
user's: it is named, with "move it out", and left.

What a writer makes while it works, and a killed one leaves behind, is no stray: the contents of
`.scratch/` (any kind: a writer removes it all as it takes the lock, never following a link), a
link `.<table>.<token>.link` beside a table's link or a file `.<name>.<token>.tmp` beside a file a
writer makes in the root (its marker, loopmeter.duckdb, report.html), such a file in `.state/`,
staged folders in `aggregate/`, and the versions no table's link names (`entries.py` tells them).
`check` takes no lock, so a writer may be using them now; they are counted (`leftovers`), not
named, and the next writer removes them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import lock, publish, registry, versions
from .files import WHAT, entry_kind, kind_of
from .folders import NEW, OLD
from .marker import MARKER
from .state import FOLDER as STATE, NAME as STATE_NAME
from .entries import DATABASE, SCRATCH, STATE_TEMPORARY, writers_leftover
from .warehouse import Warehouse

UNUSUAL = ("link", "FIFO", "device", "socket")  # kinds whose entry holds no one's data: removed as themselves
AGGREGATE = "aggregate"
REPORT = "report.html"
REPAIRS = "`loopmeter check --repair` removes it (the entry itself: what a link names is not touched)"
REPAIRS_FOLDER = "`loopmeter check --repair` removes it and everything in it (links in it, never what they name)"
USERS = "move it out of the warehouse (it may be yours: loopmeter does not remove it)"


@dataclass
class Stray:
    path: Path
    detail: str
    removable: str | None = None  # the kind seen, when repairing removes it


@dataclass
class Found:
    strays: list[Stray]
    leftovers: int  # entries a writer makes while it works (one killed leaves them): not named


def what(kind: str | None) -> str:
    return "a regular file" if kind == "file" else WHAT.get(kind or "", kind or "nothing")


def _stray(path: Path, kind: str | None, rule: str, *, ours: bool = False) -> Stray:
    """`path`, of `kind`, breaking `rule`; removed by repairing when its kind holds no data, or (`ours`)
    when it is inside a folder only loopmeter writes."""
    removable = kind if kind is not None and (kind in UNUSUAL or ours) else None
    repairs = REPAIRS_FOLDER if removable == "directory" else REPAIRS
    return Stray(path, f"is {what(kind)}, {rule}; {repairs if removable else USERS}", removable)


def find(warehouse: Warehouse, named: set[Path]) -> Found:
    """The strays of the warehouse and the count of writers' leftovers; `named` are paths other lines
    name already (what a table's link meets on its way to its version), left out here."""
    found = Found([], 0)
    root = warehouse.root
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            _root_entry(found, Path(entry.path), entry.name, entry_kind(entry))
    if kind_of(root / versions.FOLDER) == "directory":
        _versions(found, root / versions.FOLDER, named)
    if kind_of(root / STATE) == "directory":
        _state(found, root / STATE)
    if kind_of(root / AGGREGATE) == "directory":
        _aggregate(found, root / AGGREGATE)
    return found


def _root_entry(found: Found, path: Path, name: str, kind: str | None) -> None:
    if name in (MARKER, DATABASE, f"{DATABASE}.wal"):
        return  # the marker and the catalog have checks of their own (`marker.py`, `integrity._catalog`)
    if name == SCRATCH:
        found.leftovers += _count(path) if kind == "directory" else 1
        return
    if name == lock.FILE:
        _lock(found, path, kind)
    elif name in (versions.FOLDER, STATE, AGGREGATE):
        if kind != "directory":  # a link there stops every command as the warehouse is opened
            found.strays.append(_stray(path, kind, "where loopmeter keeps a folder of its own: no writer can use it"))
    elif name == REPORT:
        if kind != "file":
            found.strays.append(_stray(path, kind, "where `loopmeter report html` writes its page, which it refuses "
                                       "to replace"))
    elif kind == "link":
        if name.startswith(".") and writers_leftover(name) != "link":  # other links: `integrity._links`
            found.strays.append(_stray(path, kind, "a link loopmeter did not make (never followed)"))
        elif name.startswith("."):
            found.leftovers += 1
    elif kind == "file" and writers_leftover(name) == "tmp":
        found.leftovers += 1
    elif kind == "directory" and registry.known(name):
        found.strays.append(_stray(path, kind, f"in place of the link of table {name}, which no writer replaces: "
                                   "the table cannot be written"))
    else:
        found.strays.append(_stray(path, kind, "an entry loopmeter did not make"))


def _lock(found: Found, path: Path, kind: str | None) -> None:
    """`.lock` must be a regular file with no other link: anything else stops every writer."""
    if kind == "file":
        try:
            links = os.lstat(path).st_nlink
        except FileNotFoundError:  # removed since it was listed
            return
        if links > 1:  # removing this link leaves the other's bytes as they are
            found.strays.append(Stray(path, f"is a file with {links - 1} other link(s) (a hard link of a file "
                                      "elsewhere), not the warehouse's own lock file: every writer refuses it; "
                                      f"{REPAIRS}", "file"))
        return
    if kind is not None:
        found.strays.append(_stray(path, kind, "not the regular file that is the warehouse's lock: every writer "
                                   "refuses it"))


def _versions(found: Found, folder: Path, named: set[Path]) -> None:
    """`.versions/` holds a real folder per table loopmeter knows, each holding version folders."""
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path, kind = Path(entry.path), entry_kind(entry)
            if path in named:
                continue
            if kind != "directory":
                found.strays.append(_stray(path, kind, "in .versions/, which holds a folder of versions per table",
                                           ours=True))
            elif not registry.known(entry.name):
                found.strays.append(_stray(path, kind, "a folder of versions of no table loopmeter knows", ours=True))
            else:
                _table_versions(found, path, named)


def _table_versions(found: Found, folder: Path, named: set[Path]) -> None:
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path, kind = Path(entry.path), entry_kind(entry)
            if kind != "directory" and path not in named:
                found.strays.append(_stray(path, kind, f"in {versions.FOLDER}/{folder.name}/, which holds version "
                                           "folders only", ours=True))


def _state(found: Found, folder: Path) -> None:
    """`.state/` holds state files: regular files of state files' names (a folder there: `State.folders`;
    the journal: `integrity.journal_problems`)."""
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path, kind = Path(entry.path), entry_kind(entry)
            if STATE_NAME.fullmatch(entry.name):
                if kind not in ("file", "directory") and entry.name != publish.JOURNAL:
                    found.strays.append(_stray(path, kind, "not a regular file: loopmeter never reads it (what it "
                                               "would record is done again)", ours=True))
            elif kind == "file" and STATE_TEMPORARY.fullmatch(entry.name):
                found.leftovers += 1
            else:
                found.strays.append(_stray(path, kind, "in .state/, which holds loopmeter's state files only",
                                           ours=True))


def _aggregate(found: Found, folder: Path) -> None:
    """`aggregate/` holds a folder of documents per run set (and, while `aggregate` swaps one, its
    staged folder)."""
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            kind = entry_kind(entry)
            if kind == "directory":
                if entry.name.startswith(".") and entry.name.endswith((NEW, OLD)):
                    found.leftovers += 1
                continue
            found.strays.append(_stray(Path(entry.path), kind, "in aggregate/, which holds a folder of documents "
                                       "per run set (`aggregate` refuses to write a run set's of its name)"))


def _count(folder: Path) -> int:
    try:
        return len(os.listdir(folder))
    except OSError:
        return 0
