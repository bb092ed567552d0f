"""`loopmeter check`: is the warehouse whole? Every table file, the publishing journal, the catalog.

- Each table file is read to its end, a row group at a time (memory bounded by a row group), and
  its schema compared with the one `layout.py` declares; a table's link must lead to a version.
- The journal (`.state/publishing.json`) exists only while a publish is under way, and a reader
  finishes a killed writer's: one left behind names what could not be finished. It must be JSON
  naming tables loopmeter knows and versions under `.versions/<table>/` that exist.
- The catalog (`loopmeter.duckdb`) must open read-only, be built for this warehouse's tables and
  place, and each view answer `count(*)`.

`repair` rebuilds what the warehouse holds the inputs of: the Forge summary tables
(forge_attempts, forge_decisions, forge_tasks) from the per-event tables when those are whole,
a journal left behind (finished, or removed when what it names is gone), and the catalog. A
table read from outside (runs, forge_events ...) or computed by `aggregate` cannot be rebuilt
from the warehouse: the line says which command rebuilds it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import layout
from .errors import first_line, shown_path
from .warehouse import DATABASE, JOURNAL, STATE, VERSIONS, Warehouse

_FORGELOOP_INGESTED = {"runs", "scenarios", "ingest_manifest"}
_FORGELOOP_AGGREGATES = (
    "forgeloop_mode_runs", "forgeloop_mode_stats", "forgeloop_comparisons", "forgeloop_paired_runs",
    "forgeloop_outliers", "forgeloop_outlier_fences", "forgeloop_context_inflation",
)


@dataclass
class Problem:
    kind: str  # "table file", "table", "journal", "catalog"
    path: Path
    detail: str
    table: str | None = None

    def line(self) -> str:
        return f"{shown_path(self.path)}: {self.detail}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "path": shown_path(self.path), "table": self.table, "problem": self.detail}


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
    """What is wrong with table file `path` (None: nothing): unreadable as Parquet (its footer, or
    with `whole` any row group), or a schema other than the table's."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        if whole:
            for group in range(parquet.num_row_groups):
                parquet.read_row_group(group)
        problem = layout.describe_mismatch(table, parquet.schema_arrow, layout.in_partition(table, path),
                                           as_stored=True) if layout.known_table(table) else None
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
        return f"cannot be read as Parquet ({first_line(error)})"
    return None if problem is None else f"does not hold the schema of {table}: {problem}"


def damaged_files(root: Path) -> list[tuple[Path, str, str]]:
    """(file, table, what is wrong) for the table files of the warehouse at `root` that are damaged,
    for telling which file an error came from: every footer and schema first; when all of those are
    whole, each file read to its end until the first damaged one (a file whose footer survived and
    whose pages did not)."""
    warehouse = Warehouse(Path(root))
    files = [(name, path) for name in warehouse.table_names() for path in warehouse.table_files(name)]
    found = []
    for name, path in files:
        problem = file_problem(name, path, whole=False)
        if problem is not None:
            found.append((path, name, problem))
    if found:
        return found
    for name, path in files:
        problem = file_problem(name, path)
        if problem is not None:
            return [(path, name, problem)]
    return []


def check(warehouse: Warehouse) -> Report:
    """Everything wrong with the warehouse, read only."""
    report = Report(warehouse.root)
    if not warehouse.root.is_dir():
        report.problems.append(Problem("warehouse", warehouse.root, "no such directory"))
        return report
    report.problems += _links(warehouse)
    names = warehouse.table_names()
    report.tables = len(names)
    for name in names:
        for path in warehouse.table_files(name):
            report.files += 1
            problem = file_problem(name, path)
            if problem is not None:
                report.problems.append(Problem("table file", path, problem, name))
    report.problems += _journal(warehouse)
    report.problems += _catalog(warehouse, names)
    return report


def _links(warehouse: Warehouse) -> list[Problem]:
    problems = []
    with os.scandir(warehouse.root) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_symlink():
                continue
            if not os.path.isdir(entry.path):
                problems.append(Problem("table", Path(entry.path),
                                        f"table {entry.name} points at a missing version ({os.readlink(entry.path)})",
                                        entry.name))
    return problems


def _journal(warehouse: Warehouse) -> list[Problem]:
    journal = warehouse.root / STATE / JOURNAL
    if not journal.exists():
        return []
    try:
        entries = json.loads(journal.read_text())
    except (OSError, ValueError) as error:
        return [Problem("journal", journal, f"cannot be read as JSON ({first_line(error)})")]
    tables = entries.get("tables", entries) if isinstance(entries, dict) else None
    if not isinstance(tables, dict):
        return [Problem("journal", journal, "does not name tables and their versions")]
    problems = []
    versions = (warehouse.root / VERSIONS).resolve()
    for name, relative in tables.items():
        if not layout.known_table(name):
            problems.append(Problem("journal", journal, f"names a table loopmeter does not know: {name!r}"))
            continue
        target = (warehouse.root / relative).resolve() if isinstance(relative, str) else None
        if target is None or target.parent != versions / name:
            problems.append(Problem("journal", journal, f"names a version of {name} outside .versions/{name}/: "
                                                        f"{relative!r}"))
        elif not target.is_dir():
            problems.append(Problem("journal", journal, f"names a version of {name} that is gone: {relative}"))
    if not problems:
        problems.append(Problem("journal", journal, "a publish was left unfinished (a reader finishes it when "
                                                    "no writer holds the lock)"))
    return problems


def _catalog(warehouse: Warehouse, names: list[str]) -> list[Problem]:
    from .catalog import catalog_needs_rebuild

    database = warehouse.root / DATABASE
    if not names:
        return []
    if not database.exists():
        return [Problem("catalog", database, "missing")]
    import duckdb

    try:
        connection = duckdb.connect(str(database), read_only=True)
    except duckdb.Error as error:
        return [Problem("catalog", database, f"cannot be opened ({first_line(error)})")]
    problems = []
    try:
        views = {name for (name,) in connection.sql(
            "SELECT view_name FROM duckdb_views() WHERE database_name = current_database() AND NOT internal").fetchall()}
        for name in names:
            if name not in views:
                problems.append(Problem("catalog", database, f"has no view of table {name}", name))
                continue
            try:
                connection.sql(f'SELECT count(*) FROM "{name}"').fetchall()
            except duckdb.Error as error:
                problems.append(Problem("catalog", database, f"its view {name} does not answer ({first_line(error)})",
                                        name))
    except duckdb.Error as error:
        problems.append(Problem("catalog", database, f"cannot be read ({first_line(error)})"))
    finally:
        connection.close()
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
    from .catalog import refresh_catalog
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
                refresh_catalog(warehouse, force=True)
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
    journal = warehouse.root / STATE / JOURNAL
    problems = _journal(warehouse)
    if all(p.detail.startswith("a publish was left unfinished") for p in problems):
        warehouse._finish_publishing()
        if not journal.exists():
            return [f"journal {shown_path(journal)}: its publish finished"]
    journal.unlink(missing_ok=True)
    return [f"journal {shown_path(journal)}: removed ({problems[0].detail})"]



def _recorded_ingests(warehouse: Warehouse) -> list[tuple[Path, Path | None, dict]]:
    """The ingests the warehouse recorded (`.state/forgeloop-ingest-*.json`) whose run files are still
    where they were read: (RESULTS, scenarios, options)."""
    found = []
    for record in sorted((warehouse.root / STATE).glob("forgeloop-ingest-*.json")):
        try:
            key = json.loads(record.read_text()).get("key", {})
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
            builder.keep_others, builder.drop, builder.schema_frame = True, drop, layout.empty_frame("runs")


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
    for record in sorted((warehouse.root / STATE).glob("forgeloop-ingest-*.json")):
        try:
            key = json.loads(record.read_text()).get("key", {})
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(key, dict) and isinstance(key.get("results"), str):
            scenarios = f" --scenarios {shown_path(key['scenarios'])}" if isinstance(key.get("scenarios"), str) else ""
            lines.append(f"{', '.join(tables)}: cannot be rebuilt from the warehouse; its rows come from run files: "
                         f"`loopmeter ingest forgeloop {shown_path(key['results'])}{scenarios} --warehouse <a new folder>`")
    return lines or [f"{', '.join(tables)}: cannot be rebuilt from the warehouse; its rows come from run files: "
                     "`loopmeter ingest forgeloop <RESULTS> --warehouse <a new folder>`"]
