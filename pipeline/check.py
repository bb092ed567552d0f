"""`loopmeter check`: is the warehouse whole? Every table and its files, the publishing journal, the catalog.

- Each table is a link loopmeter made to a version holding nothing but table files; each file is
  opened as a regular file, its footer read (its size once decompressed bounded), read to its end a
  row group at a time (memory bounded by a row group), and its schema compared with the registry's.
  A link in the root that is not loopmeter's, a FIFO, device or link inside a version: each named.
- The journal (`.state/publishing.json`) exists only while a publish is under way, and a reader
  finishes a killed writer's: one left behind names what could not be finished. It must name
  tables loopmeter knows and versions under `.versions/<table>/`.
- The catalog (`loopmeter.duckdb`) must hold exactly the views loopmeter writes, for this
  warehouse's tables and place; its views are compared as text, never run.

`repair` rebuilds what the warehouse holds the inputs of: the Forge summary tables
(forge_attempts, forge_decisions, forge_tasks) from the per-event tables when those are whole,
a journal left behind (finished, or removed when what it names is gone), and the catalog. A
table read from outside (runs, forge_events ...) or computed by `aggregate` cannot be rebuilt
from the warehouse: the line says which command rebuilds it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import first_line, shown_path
from .storage import Warehouse, conformance, publish, registry, versions
from .storage.warehouse import DATABASE

_FORGELOOP_INGESTED = {"runs", "scenarios", "ingest_manifest"}
_FORGELOOP_AGGREGATES = (
    "forgeloop_mode_runs", "forgeloop_mode_stats", "forgeloop_comparisons", "forgeloop_paired_runs",
    "forgeloop_outliers", "forgeloop_outlier_fences", "forgeloop_context_inflation",
)


@dataclass
class Problem:
    kind: str  # "table file", "table", "journal", "catalog", "link"
    path: Path
    detail: str
    table: str | None = None

    shown: str = ""  # the path for people (a table's file as under the table's link)

    def line(self) -> str:
        return f"{self.shown or shown_path(self.path)}: {self.detail}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "path": self.shown or shown_path(self.path), "table": self.table, "problem": self.detail}


@dataclass
class Report:
    root: Path
    tables: int = 0
    files: int = 0
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # what --repair rebuilt, one line each
    not_repaired: list[str] = field(default_factory=list)  # what it could not, with how to

    def as_dict(self) -> dict:
        return {"warehouse": shown_path(self.root), "tables": self.tables, "files": self.files,
                "ok": not self.problems, "problems": [p.as_dict() for p in self.problems],
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
    report.problems += _links(warehouse)
    names = warehouse.table_names()
    report.tables = len(names)
    for name in names:
        listing = conformance.list_version(name, warehouse.table_dir(name))
        report.problems += [Problem("table", path, problem, name, warehouse.shown(path)) for path, problem in listing.problems]
        for path in listing.files:
            report.files += 1
            problem = file_problem(name, path)
            if problem is not None:
                report.problems.append(Problem("table file", path, problem, name, warehouse.shown(path)))
    report.problems += _journal(warehouse)
    if not any(p.kind in ("table", "table file") for p in report.problems):
        report.problems += _catalog(warehouse, names)
    return report


def _links(warehouse: Warehouse) -> list[Problem]:
    """The links in the root that are not tables: loopmeter's that lead nowhere, and any other."""
    problems = []
    with os.scandir(warehouse.root) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_symlink():
                continue
            if versions.current(warehouse.root, entry.name) is not None:
                continue
            target = versions.link_target(warehouse.root, entry.name)
            if registry.known(entry.name) and versions.parts(entry.name, target) is not None:
                problems.append(Problem("table", Path(entry.path), f"table {entry.name} points at a missing version "
                                        f"({shown_path(target or '')})", entry.name))
            else:
                problems.append(Problem("link", Path(entry.path), "a symbolic link loopmeter did not make (not a table; "
                                        "left out by every command): remove it (what it points to is not touched)"))
    return problems


def _journal(warehouse: Warehouse) -> list[Problem]:
    journal = warehouse.state.path(publish.JOURNAL)
    if not warehouse.state.exists(publish.JOURNAL):
        return []
    problem = publish.problem_of(warehouse.root, warehouse.state.read(publish.JOURNAL))
    if problem is not None:
        return [Problem("journal", journal, problem)]
    entries = warehouse.state.read(publish.JOURNAL)
    gone = [name for name, relative in entries["tables"].items() if versions.own(warehouse.root, name, relative) is None]
    if gone:
        return [Problem("journal", journal, f"names a version of {gone[0]} that is gone: {entries['tables'][gone[0]]}")]
    return [Problem("journal", journal, "a publish was left unfinished (a reader finishes it when no writer holds the lock)")]


def _catalog(warehouse: Warehouse, names: list[str]) -> list[Problem]:
    from .storage.catalog import catalog_needs_rebuild, objects_problems

    database = warehouse.root / DATABASE
    if not names:
        return []
    if not os.path.lexists(database):
        return [Problem("catalog", database, "missing")]
    if os.path.islink(database) or not os.path.isfile(database):
        return [Problem("catalog", database, "is not a regular file")]
    problems = [Problem("catalog", database, problem) for problem in objects_problems(warehouse)]
    if not problems and catalog_needs_rebuild(warehouse):
        problems.append(Problem("catalog", database, "was built for another place, other tables or another loopmeter"))
    return problems


# ---- repair ---------------------------------------------------------------------------------------
REPAIRING = "loopmeter check --repair"


def repair(warehouse: Warehouse, report: Report) -> Report:
    """Rebuild what `report` found wrong where the warehouse holds the inputs, holding the writer
    lock; the warehouse checked again after. The lock is taken as a reader's moment of writing is
    (`lock_if_free`), not as a writer's: a writer first rewrites every table file not in its
    table's schema, and refuses a damaged one, which is what is to be replaced here."""
    from .storage.catalog import refresh_catalog
    from .errors import WarehouseBusy

    damaged = {p.table for p in report.problems if p.kind in ("table file", "table") and p.table}
    with warehouse.lock_if_free(REPAIRING) as taken:
        if not taken:
            raise WarehouseBusy(f"warehouse {shown_path(warehouse.root)} is locked by another process (or its lock "
                                "file cannot be opened); run `loopmeter check --repair` again when it has ended")
        if any(p.kind == "journal" for p in report.problems):
            report.repaired += _repair_journal(warehouse)
        summaries = _summaries()
        rebuildable = damaged & set(summaries)
        inputs_damaged = damaged & set(_summary_inputs())
        if rebuildable and not inputs_damaged:
            from .forge.derive import rebuild_summaries

            with warehouse.publishing():
                rebuild_summaries(warehouse)
            report.repaired += [f"table {name}: rebuilt from {', '.join(summaries[name])}" for name in sorted(rebuildable)]
        left = damaged - (rebuildable if not inputs_damaged else set())
        if left & _FORGELOOP_INGESTED:
            damaged_runs = [p.path for p in report.problems if p.kind == "table file" and p.table == "runs"]
            done, undone = _reingest_forgeloop(warehouse, sorted(left & _FORGELOOP_INGESTED), damaged_runs)
            report.repaired += done
            report.not_repaired += undone
            if done and not undone:
                left -= _FORGELOOP_INGESTED
        for name in sorted(left - _FORGELOOP_INGESTED):
            report.not_repaired.append(f"table {name}: {_how_to_rebuild(name, inputs_damaged)}")
        if not left:
            try:
                refresh_catalog(warehouse)
                report.repaired.append(f"catalog {shown_path(warehouse.root / DATABASE)}: rebuilt")
            except Exception as error:  # noqa: BLE001 - said, with the rest of the repair
                report.not_repaired.append(f"catalog {shown_path(warehouse.root / DATABASE)}: {first_line(error)}")
        else:
            report.not_repaired.append(f"catalog {shown_path(warehouse.root / DATABASE)}: rebuilt once the tables "
                                       "above are (`loopmeter catalog`)")
    after = check(warehouse)
    report.problems = after.problems
    return report


def _summaries() -> dict[str, tuple[str, ...]]:
    from importlib.util import find_spec

    if find_spec("loopmeter.forge.derive") is None:
        return {}
    from .forge.derive import SUMMARIES

    return {table: needed for table, _, needed in SUMMARIES}


def _summary_inputs() -> list[str]:
    from .forge.derive import summary_inputs

    return summary_inputs() if _summaries() else []


def _how_to_rebuild(name: str, inputs_damaged: set[str]) -> str:
    if name in _summaries():
        return (f"not rebuilt: its inputs are damaged too ({', '.join(sorted(inputs_damaged))}); "
                "run `loopmeter ingest forge <store>` again")
    if name in _FORGELOOP_AGGREGATES:
        return "computed by `loopmeter aggregate`: run `loopmeter aggregate --full` to rebuild it"
    if name.startswith("forge_"):
        return "read from a Forge store: run `loopmeter ingest forge <store>` again to rebuild it"
    return "read from ForgeLoop's run files: run `loopmeter ingest forgeloop <RESULTS>` again to rebuild it"


def _repair_journal(warehouse: Warehouse) -> list[str]:
    """Finish the journal's publish when it can be; else take the journal away: every table keeps
    the version its link holds (each a whole version, swapped in one rename)."""
    journal = warehouse.state.path(publish.JOURNAL)
    problems = _journal(warehouse)
    if all(p.detail.startswith("a publish was left unfinished") for p in problems):
        try:
            warehouse.finish_publishing()
        except Exception:  # noqa: BLE001 - what could not be finished: the journal is removed below
            pass
        if not warehouse.state.exists(publish.JOURNAL):
            return [f"journal {shown_path(journal)}: its publish finished"]
    warehouse.state.remove(publish.JOURNAL)
    return [f"journal {shown_path(journal)}: removed ({problems[0].detail})"]



def _recorded_ingests(warehouse: Warehouse) -> list[tuple[Path, Path | None, dict]]:
    """The ingests the warehouse recorded (`.state/forgeloop-ingest-*.json`) whose run files are still
    where they were read: (RESULTS, scenarios, options)."""
    found = []
    for name in warehouse.state.names("forgeloop-ingest-*.json"):
        try:
            key = warehouse.state.read(name).get("key", {})
            results, scenarios = Path(key["results"]), key.get("scenarios")
            options = dict(max_file_bytes=int(key["maxFileBytes"]), run_sets=key.get("runSets"))
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            continue
        if (results / "raw").is_dir() and (scenarios is None or Path(scenarios).is_dir()):
            found.append((results, None if scenarios is None else Path(scenarios), options))
    return found


def _set_aside_damaged_run_sets(warehouse: Warehouse, damaged: list[Path]) -> None:
    """A new version of `runs` without the partitions holding a damaged file, when their run set's
    folder is in a recorded ingest's RESULTS (which reads it again): an ingest cannot read past a
    damaged file of the table it adds to. A run set no recorded RESULTS holds keeps its file."""
    partitions = warehouse.partitions("runs", "run_set_id")
    folders = [results / "raw" for results, _, _ in _recorded_ingests(warehouse)]
    drop = {value for value, directory in partitions.items()
            if any(path.parent == directory for path in damaged) and any((raw / value).is_dir() for raw in folders)}
    if drop:
        with warehouse.build_table("runs", "run_set_id") as builder:
            builder.keep_others, builder.drop, builder.schema_frame = True, drop, registry.table("runs").empty_frame()


def _reingest_forgeloop(warehouse: Warehouse, tables: list[str], damaged_runs: list[Path]) -> tuple[list[str], list[str]]:
    """Rebuild the tables `ingest forgeloop` writes from the run files they were read from: each
    ingest the warehouse recorded is run again with `full` (every file read and every run set
    written anew, whatever its size and time say), after the runs partitions holding a damaged
    file are set aside. All of it is published together, or, on an error, none of it.
    (what was rebuilt, what was not and how to), one line each."""
    from .forgeloop.ingest import ingest_forgeloop

    recorded = _recorded_ingests(warehouse)
    if not recorded:
        return [], _forget_forgeloop_ingests(warehouse, tables)
    try:
        with warehouse.publishing():
            _set_aside_damaged_run_sets(warehouse, damaged_runs)
            for results, scenarios, options in recorded:
                ingest_forgeloop(warehouse, results, scenarios, full=True, **options)
    except Exception as error:  # noqa: BLE001 - said, with the rest of the repair
        return [], [f"{', '.join(tables)}: read again from {', '.join(shown_path(r) for r, _, _ in recorded)}, "
                    f"which failed, so nothing was changed: {first_line(error)}"]
    return [f"{', '.join(tables)}: read again from {shown_path(results)}" for results, _, _ in recorded], []


def _forget_forgeloop_ingests(warehouse: Warehouse, tables: list[str]) -> list[str]:
    """How to rebuild a table `ingest forgeloop` writes when none of the run files it was read from
    are where the ingests' records (`.state/forgeloop-ingest-*.json`) say: from the run files, into a
    new warehouse."""
    lines = []
    for name in warehouse.state.names("forgeloop-ingest-*.json"):
        try:
            key = warehouse.state.read(name).get("key", {})
        except AttributeError:
            continue
        if isinstance(key, dict) and isinstance(key.get("results"), str):
            scenarios = f" --scenarios {shown_path(key['scenarios'])}" if isinstance(key.get("scenarios"), str) else ""
            lines.append(f"{', '.join(tables)}: cannot be rebuilt from the warehouse; its rows come from run files: "
                         f"`loopmeter ingest forgeloop {shown_path(key['results'])}{scenarios} --warehouse <a new folder>`")
    return lines or [f"{', '.join(tables)}: cannot be rebuilt from the warehouse; its rows come from run files: "
                     "`loopmeter ingest forgeloop <RESULTS> --warehouse <a new folder>`"]
