"""Is the warehouse whole? Every table and its files, the publishing journal, the catalog (`loopmeter check`).

- Each table is a link loopmeter made to a version holding nothing but table files; each file is
  opened as a regular file, its footer read (its size once decompressed bounded), read to its end a
  row group at a time (memory bounded by a row group), its schema compared with the registry's, and
  its bytes with the digest its writer recorded (`written.py`), where this user's record names it.
  A link in the root that is not loopmeter's, a FIFO, device or link inside a version: each named.
- The journal (`.state/publishing.json`) exists only while a publish is under way, and a reader
  finishes a killed writer's: one left behind names what could not be finished. It must name
  tables loopmeter knows and versions under `.versions/<table>/`.
- Every other entry loopmeter did not make (`strays.py`), and a table the last writer left published
  (`published`) whose link is missing or not loopmeter's while `.versions/<table>/` holds its versions
  (`--repair` links it again), or of which nothing is left (`--repair` stores it again, as a damaged one).
- The catalog (`loopmeter.duckdb`) must hold exactly the views loopmeter writes, for this
  warehouse's tables and place; its views are compared as text, never run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import shown_path
from . import conformance, lock, publish, registry, strays, versions, written
from .remote import is_mirror
from .published import published, unlinked
from .files import WHAT, kind_of
from .marker import MARKER
from .entries import DATABASE, OWN_ENTRIES
from .warehouse import Warehouse

@dataclass
class Problem:
    kind: str  # "table file", "table", "table link", "table gone", "journal", "catalog", "link", "marker", "state", "stray"
    path: Path
    detail: str
    table: str | None = None

    shown: str = ""  # the path for people (a table's file as under the table's link)
    removable: str | None = None  # a stray's kind when `--repair` removes it (`strays.Stray`)

    def line(self) -> str:
        return f"{self.shown or shown_path(self.path)}: {self.detail}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "path": self.shown or shown_path(self.path), "table": self.table, "problem": self.detail}


@dataclass
class Report:
    root: Path
    tables: int = 0
    files: int = 0
    leftovers: int = 0  # entries of a writer at work (or one killed), which the next writer removes (`strays.py`)
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # what --repair rebuilt, one line each
    not_repaired: list[str] = field(default_factory=list)  # what it could not, with how to

    def as_dict(self) -> dict:
        return {"warehouse": shown_path(self.root), "tables": self.tables, "files": self.files,
                "leftovers": self.leftovers, "ok": not self.problems, "problems": [p.as_dict() for p in self.problems],
                "repaired": self.repaired, "notRepaired": self.not_repaired}


def file_problem(table: str, path: Path, *, whole: bool = True) -> str | None:
    """What is wrong with table file `path` (None: nothing); `whole`: every row group read too."""
    problem = conformance.file_problem(table, path, whole=whole)
    if problem is None or problem.startswith(("is ", "expands", "cannot", conformance.UNREADABLE)):
        return problem
    return f"does not hold the schema of {table}: {problem}"


def damaged_files(root: Path) -> list[tuple[Path, str, str]]:
    """(file, table, what is wrong) for the table files of the warehouse at `root` that are damaged,
    for telling which file an error came from: every footer and schema first; when all of those are
    whole, each file read to its end until the first damaged one."""
    warehouse = Warehouse(Path(root))
    files = []
    for name in warehouse.table_names():
        listing = conformance.list_version(name, warehouse.table_dir(name))
        files += [(name, path) for path in listing.files]
    found = []
    for name, path in files:
        problem = file_problem(name, path, whole=False)
        if problem is not None:
            found.append((Path(warehouse.shown(path)), name, problem))
    if found:
        return found
    for name, path in files:
        problem = file_problem(name, path)
        if problem is not None:
            return [(Path(warehouse.shown(path)), name, problem)]
    return []


def check(warehouse: Warehouse) -> Report:
    """Everything wrong with the warehouse, read only: nothing is run that loopmeter did not write."""
    report = Report(warehouse.root)
    if not warehouse.root.is_dir():
        report.problems.append(Problem("warehouse", warehouse.root, "no such directory"))
        return report
    marker = warehouse.marker_problem()
    if marker is not None:
        report.problems.append(Problem("marker", warehouse.root / MARKER, marker))
    links, named = _links(warehouse)
    report.problems += links
    found = strays.find(warehouse, named)
    warehouse.links_named.update([p.path.name for p in links] + [s.path.name for s in found.strays
                                                                  if s.path.parent == warehouse.root])
    report.leftovers = found.leftovers
    report.problems += [Problem("stray", s.path, s.detail, removable=s.removable) for s in found.strays]
    report.problems += _unlinked(warehouse) + _gone(warehouse)
    names = warehouse.table_names()
    report.tables = len(names)
    as_written = {} if is_mirror(warehouse.root) else written.recorded(warehouse.state)
    for name in names:
        listing = conformance.list_version(name, warehouse.table_dir(name))
        report.problems += [Problem("table", path, problem + _REMOVED.get(kind_of(path) or "", ""), name, warehouse.shown(path))
                            for path, problem in listing.problems]
        for path in listing.files:
            report.files += 1
            problem = file_problem(name, path) or _changed(path, as_written.get(os.path.relpath(path, warehouse.root)))
            if problem is not None:
                report.problems.append(Problem("table file", path, problem, name, warehouse.shown(path)))
    if kind_of(warehouse.state.folder) in (None, "directory"):  # else named as a stray
        report.problems += [Problem("state", warehouse.state.path(name), "is a folder where loopmeter keeps a file; "
                                    "`loopmeter check --repair` removes it") for name in warehouse.state.folders()
                            if name != publish.JOURNAL]
        if warehouse.state.exists(publish.JOURNAL) and lock.held(warehouse.root):
            report.leftovers += 1  # the journal of the publish the lock's holder is making now
        else:
            report.problems += journal_problems(warehouse)
    if not any(p.kind in ("table", "table file", "table link", "table gone") for p in report.problems):
        report.problems += _catalog(warehouse, names)
    return report


# what `check --repair` does with an entry in a table's version that is no file of it (`repair._foreign`)
_REMOVED = {kind: "; `loopmeter check --repair` removes it (never what a link names) and stores the table again"
            for kind in ("link", "FIFO", "device", "socket")}


def _changed(path: Path, as_written: tuple | None) -> str | None:
    """Why the file's bytes are not those the writer recorded (`written.py`: digest, device, inode, size,
    time), or None."""
    if as_written is None:
        return None
    try:
        if written.digest(path) == as_written[0]:
            return None
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    return ("does not hold the bytes loopmeter wrote there: it changed in place since (its digest is not the one "
            "the writer recorded in .state/written.json)")


def _links(warehouse: Warehouse) -> tuple[list[Problem], set[Path]]:
    """The links in the root that are not tables: loopmeter's that lead nowhere, and any other; and the
    paths those lines name already (what a table's link meets on its way to its version)."""
    problems, named = [], set()
    with os.scandir(warehouse.root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith(".") or not entry.is_symlink():
                continue  # a link named with a dot: `strays.py`
            if entry.name in OWN_ENTRIES - {DATABASE, f"{DATABASE}.wal"}:
                continue  # in place of loopmeter's own folder or file: `strays.py`
            if versions.current(warehouse.root, entry.name) is not None:
                continue
            target = versions.link_target(warehouse.root, entry.name)
            held = len(versions.held(warehouse.root, entry.name)) if published(warehouse, entry.name) else 0
            if registry.known(entry.name) and versions.parts(entry.name, target) is not None:
                found = versions.blocked_at(warehouse.root, versions.parts(entry.name, target))
                named.add(found)
                kind = kind_of(found)
                detail = (f"table {entry.name} points at a missing version ({shown_path(target or '')})" if kind is None
                          else f"table {entry.name} points at {shown_path(target or '')}, where {shown_path(found)} is "
                               f"{WHAT.get(kind, kind)}, not a folder (never followed)")
                if held:
                    detail += (f"; {versions.FOLDER}/{entry.name}/ holds {held} other version(s) of it: `loopmeter "
                               "check --repair` points the link at one")
                problems.append(Problem("table link" if held else "table", Path(entry.path), detail, entry.name))
            elif held:
                problems.append(Problem("table link", Path(entry.path), (
                    f"a symbolic link loopmeter did not make (to {shown_path(target or '')}, never followed) in place of "
                    f"table {entry.name}, whose {held} version(s) {versions.FOLDER}/{entry.name}/ holds: `loopmeter "
                    "check --repair` points it back at one (what it points to now is not touched)"), entry.name))
            else:
                problems.append(Problem("link", Path(entry.path), "a symbolic link loopmeter did not make (not a table; "
                                        "left out by every command): remove it (what it points to is not touched)"))
    return problems, named


def _unlinked(warehouse: Warehouse) -> list[Problem]:
    """The tables with versions in `.versions/` and nothing in the root where their link belongs (a link
    there that is not loopmeter's: `_links`)."""
    problems = []
    for name in unlinked(warehouse):
        if not os.path.lexists(warehouse.root / name):
            held = len(versions.held(warehouse.root, name))
            problems.append(Problem("table link", warehouse.root / name, (
                f"table {name} has no link, though {versions.FOLDER}/{name}/ holds {held} version(s) of it: "
                "`loopmeter check --repair` links it again"), name))
    return problems


def _gone(warehouse: Warehouse) -> list[Problem]:
    """The tables the last writer left published (`published`) of which nothing is left: no entry where
    their link belongs, no version in `.versions/<table>/` (their rows are gone with them)."""
    problems = []
    for name in registry.tables():
        if os.path.lexists(warehouse.root / name) or versions.held(warehouse.root, name) or not published(warehouse, name):
            continue
        problems.append(Problem("table gone", warehouse.root / name, (
            f"table {name} is gone (no link, no version in {versions.FOLDER}/{name}/), though the last writer's records "
            "name it: `loopmeter check --repair` stores it again where the warehouse holds its inputs, else says what "
            "to run"), name))
    return problems


def journal_problems(warehouse: Warehouse) -> list[Problem]:
    journal = warehouse.state.path(publish.JOURNAL)
    if not warehouse.state.exists(publish.JOURNAL):
        return []
    entries, problem = publish.read_journal(warehouse.state)
    problem = problem or publish.problem_of(warehouse.root, entries)
    if problem is not None:
        return [Problem("journal", journal, problem)]
    gone = [name for name, relative in entries["tables"].items() if versions.own(warehouse.root, name, relative) is None]
    if gone:
        return [Problem("journal", journal, f"names a version of {gone[0]} that is gone: {entries['tables'][gone[0]]}")]
    return [Problem("journal", journal, "a publish was left unfinished (a reader finishes it when no writer holds the lock)")]


def _catalog(warehouse: Warehouse, names: list[str]) -> list[Problem]:
    from .catalog import objects_problems

    from .remote import is_mirror

    database = warehouse.root / DATABASE
    if not names or is_mirror(warehouse.root):  # on object storage: no catalog is kept (`remote.py`)
        return []
    if not os.path.lexists(database):
        return [Problem("catalog", database, "missing")]
    if os.path.islink(database) or not os.path.isfile(database):
        return [Problem("catalog", database, "is not a regular file")]
    # its views are compared with what loopmeter writes for this place and these tables (the paths
    # in them say the place): no record in `.state` is trusted for it
    return [Problem("catalog", database, problem) for problem in objects_problems(warehouse)]
