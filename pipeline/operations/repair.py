"""`loopmeter check --repair`: rebuild what the warehouse holds the inputs of.

The Forge summary tables (forge_attempts, forge_decisions, forge_tasks) from the per-event tables
when those are whole; the ForgeLoop tables an ingest writes from the run files the warehouse's
ingests recorded (when they are still where they were read); a journal left behind (finished, or
removed when what it names is gone); the catalog; a table's link, pointed again at the table's whole
version in `.versions/` when it is missing or not loopmeter's. A table `aggregate` computes, the
months of forge_events, or a per-event Forge table cannot be rebuilt from the warehouse: a damaged
(or gone) one is set aside (`set_aside.py`), so that the command the line names can write it again
without reading the damaged file.
Any other table read from outside cannot be: the line says which command rebuilds it. What loopmeter
never makes is removed where that is safe (`strays.py`): the entry itself, never what a link names,
never a user's file.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import first_line, is_interruption, shown_path
from ..storage import Warehouse, conformance, lock, publish, registry, versions
from ..storage.integrity import Report, file_problem, journal_problems
from ..storage.files import is_real_directory, kind_of, remove_tree
from ..storage.marker import MARKER
from ..storage.entries import DATABASE
from .set_aside import FORGELOOP_AGGREGATES, checked, ingest_of_every_store, set_aside as set_aside_tables

_FORGELOOP_INGESTED = {"runs", "scenarios", "ingest_manifest"}


REPAIRING = "loopmeter check --repair"


def repair(warehouse: Warehouse, report: Report, *, wait: bool = False) -> Report:
    """Rebuild what `report` found wrong where the warehouse holds the inputs, holding the writer
    lock; the warehouse checked again after. The lock is taken as a reader's moment of writing is
    (`lock_if_free`), not as a writer's: a writer first rewrites every table file not in its
    table's schema, and refuses a damaged one, which is what is to be replaced here."""
    from ..errors import WarehouseBusy
    from ..storage.catalog import refresh_catalog
    from ..storage.remote import is_mirror

    damaged = {p.table for p in report.problems if p.kind in ("table file", "table") and p.table and not _foreign(warehouse, p)}
    gone = {p.table for p in report.problems if p.kind == "table gone"}  # stored again as a damaged table is
    # an entry removed from where a table file belongs (named *.parquet) took that file's rows with it: its
    # table is rebuilt too
    in_place = [p for p in report.problems
                if p.kind == "table" and p.table and p.path.name.endswith(".parquet") and _foreign(warehouse, p)]
    damaged |= {p.table for p in in_place} | gone
    report.repaired += _remove_lock(warehouse, report)  # else no lock can be taken, by this repair or any writer
    with warehouse.lock_if_free(REPAIRING, wait=wait) as taken:
        if not taken and kind_of(warehouse.root / lock.FILE) not in (None, "file"):  # named above, left to the user
            report.not_repaired.append(f"{shown_path(warehouse.root / lock.FILE)}: no lock can be taken while it is "
                                       "there, so nothing was repaired: remove it, then run `loopmeter check "
                                       "--repair` again")
            return report
        if not taken:
            raise WarehouseBusy(f"warehouse {shown_path(warehouse.root)} is locked by another process (or its lock "
                                "file cannot be opened); run `loopmeter check --repair` again when it has ended, "
                                "or pass --wait")
        report.repaired += _remove_foreign(warehouse, report)
        if any(p.kind == "marker" for p in report.problems):
            report.repaired += _repair_marker(warehouse, report)
        for problem in (p for p in report.problems if p.kind == "state"):
            warehouse.state.remove(problem.path.name)
            report.repaired.append(f"state {shown_path(problem.path)}: the folder removed")
        if any(p.kind == "journal" for p in report.problems):
            report.repaired += _repair_journal(warehouse)
        for problem in (p for p in report.problems if p.kind == "table link"):
            _relink(warehouse, problem.table, report)
        from ..forge.derive import summary_sources

        summaries = summary_sources()
        rebuildable = damaged & set(summaries)
        inputs_damaged = damaged & set(_summary_inputs())
        if rebuildable and not inputs_damaged:
            from ..forge.derive import rebuild_summaries

            with warehouse.publishing():
                rebuild_summaries(warehouse)
            report.repaired += [f"table {name}: rebuilt from {', '.join(summaries[name])}" for name in sorted(rebuildable)]
        left = damaged - (rebuildable if not inputs_damaged else set())
        if left & _FORGELOOP_INGESTED:
            damaged_runs = [p.path for p in report.problems if p.kind == "table file" and p.table == "runs"]
            damaged_runs += [p.path for p in in_place if p.table == "runs"]
            done, undone = _reingest_forgeloop(warehouse, sorted(left & _FORGELOOP_INGESTED), damaged_runs,
                                               in_place=not (damaged - gone) & _FORGELOOP_INGESTED)
            report.repaired += done
            report.not_repaired += undone
            if done and not undone:
                left -= _FORGELOOP_INGESTED
        set_aside = set_aside_tables(warehouse, report, left, gone,
                                     {p.table for p in report.problems if p.kind == "table gap"})
        report.repaired += set_aside.values()
        left -= set(set_aside)
        for name in sorted(left - _FORGELOOP_INGESTED):
            report.not_repaired.append(f"table {name}: {_how_to_rebuild(warehouse, name, inputs_damaged)}")
        if is_mirror(warehouse.root):
            pass  # on object storage no catalog is kept (`remote.py`)
        elif not left:
            try:
                refresh_catalog(warehouse)
                report.repaired.append(f"catalog {shown_path(warehouse.root / DATABASE)}: rebuilt")
            except Exception as error:  # noqa: BLE001 - said, with the rest of the repair
                _stop_if_interrupted(error)
                report.not_repaired.append(f"catalog {shown_path(warehouse.root / DATABASE)}: {first_line(error)}")
        else:
            report.not_repaired.append(f"catalog {shown_path(warehouse.root / DATABASE)}: rebuilt once the tables "
                                       "above are (`loopmeter catalog`)")
    after = checked(warehouse)
    report.problems = after.problems
    return report


def _stop_if_interrupted(error: Exception) -> None:
    """A library's error that is a Ctrl-C (or SIGTERM) in disguise (`errors.is_interruption`) stops the
    repair as the interruption it is, never a line of what could not be rebuilt."""
    if is_interruption(error):
        raise KeyboardInterrupt from error


def _repair_marker(warehouse: Warehouse, report: Report) -> list[str]:
    """Mark a warehouse whose marker is missing; one whose marker is not loopmeter's is left to the user
    (the file may be theirs)."""
    marker = shown_path(warehouse.root / MARKER)
    if os.path.lexists(warehouse.root / MARKER):
        report.not_repaired.append(f"marker {marker}: not loopmeter's file; remove it, then run `loopmeter check "
                                   "--repair` again")
        return []
    warehouse.mark()
    return [f"marker {marker}: written"]


def _foreign(warehouse: Warehouse, problem) -> bool:
    """A problem that is an entry loopmeter never makes, which repairing removes: a link in the root that
    is not a table, a link, FIFO, device or socket inside a table's version, a stray `strays.py` says
    may go (the lock file aside: `_remove_lock`)."""
    from ..storage.files import kind_of

    if problem.kind == "link":
        return True
    if problem.kind == "stray":
        return problem.removable is not None and problem.path != warehouse.root / lock.FILE
    inside = os.path.commonpath([os.path.abspath(warehouse.root / versions.FOLDER), os.path.abspath(problem.path)])
    return (problem.kind == "table" and inside == os.path.abspath(warehouse.root / versions.FOLDER)
            and kind_of(problem.path) in ("link", "FIFO", "device", "socket"))


def _remove_foreign(warehouse: Warehouse, report: Report) -> list[str]:
    """Remove the entries loopmeter never makes (`_foreign`): the entry itself, never what a link names;
    a stray only while it is still of the kind `check` saw (a folder in `.versions/` or `.state/` with
    what it holds, no link in it followed)."""
    removed = []
    for problem in report.problems:
        if not _foreign(warehouse, problem):
            continue
        if problem.kind == "stray" and kind_of(problem.path) != problem.removable:
            report.not_repaired.append(f"{problem.line()}: not removed (it changed since it was checked)")
            continue
        try:
            if problem.kind == "stray" and problem.removable == "directory":
                remove_tree(problem.path)
            else:
                os.unlink(problem.path)
        except OSError as error:
            report.not_repaired.append(f"{problem.line()}: cannot be removed ({error.strerror})")
            continue
        if os.path.lexists(problem.path):
            report.not_repaired.append(f"{problem.line()}: cannot be removed")
            continue
        said = problem.detail.rsplit("; ", 1)[0] if problem.kind == "stray" else problem.detail  # not how to repair it
        removed.append(f"{problem.shown or shown_path(problem.path)}: removed ({said})")
    return removed


def _remove_lock(warehouse: Warehouse, report: Report) -> list[str]:
    """Remove a `.lock` no writer can use (`strays._lock`), while it is of the kind `check` saw: a hard
    link only while no process holds it (a writer that opened it before the other link was made)."""
    import fcntl

    from ..storage.files import open_regular

    path = warehouse.root / lock.FILE
    problem = next((p for p in report.problems if p.kind == "stray" and p.path == path and p.removable), None)
    if problem is None:
        return []
    if kind_of(path) != problem.removable:
        report.not_repaired.append(f"{problem.line()}: not removed (it changed since it was checked)")
        return []
    try:
        if problem.removable == "file":
            with os.fdopen(open_regular(path), "rb") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    report.not_repaired.append(f"{problem.line()}: not removed (a process holds it)")
                    return []
                os.unlink(path)
        else:
            os.unlink(path)
    except OSError as error:
        report.not_repaired.append(f"{problem.line()}: cannot be removed ({error.strerror})")
        return []
    return [f"{shown_path(path)}: removed ({problem.detail.rsplit('; ', 1)[0]})"]


def _relink(warehouse: Warehouse, name: str, report: Report) -> None:
    """Point table `name`'s link (missing, or not loopmeter's) at its whole version in `.versions/`: the one
    this user's record of verified files (`.state/verified.json`) names, else the newest (by the time in
    its id). A version is whole when it holds nothing but table files, each read to its end."""
    root, link = warehouse.root, warehouse.root / name
    if versions.current(root, name) is not None:  # a journal finished above pointed it
        return
    if kind_of(link) not in (None, "link"):
        report.not_repaired.append(f"table {name}: {shown_path(link)} is not a link; move it out of the warehouse, then "
                                   "run `loopmeter check --repair` again")
        return
    held = versions.held(root, name)
    listings = {version: conformance.list_version(name, version) for version in held}
    whole = [version for version in held if _whole(name, listings[version])]
    if not whole:
        report.not_repaired.append(f"table {name}: none of its {len(held)} version(s) in {versions.FOLDER}/{name}/ is "
                                   f"whole; run the command that writes {name} again")
        return
    recorded = [version for version in whole if _recorded(warehouse, name, listings[version])]
    if len(recorded) == 1:
        chosen, why = recorded[0], "the version .state/verified.json records"
    elif len(whole) == 1:
        chosen, why = whole[0], "its one whole version"
    else:
        chosen, why = whole[-1], f"the newest of its {len(whole)} whole versions; no record names one"
    versions.swap(root, name, chosen)
    report.repaired.append(f"table {name}: its link points at {os.path.relpath(chosen, root)} again ({why})")


def _whole(name: str, listing: conformance.Listing) -> bool:
    """A version (as `listing` lists it) holding nothing but table files of `name`, each read to its end."""
    return not listing.problems and all(file_problem(name, path) is None for path in listing.files)


def _recorded(warehouse: Warehouse, name: str, listing: conformance.Listing) -> bool:
    """Whether this user's record of verified files holds exactly the files of a version of table `name`
    (as `listing` lists it), each as it is now (`Verified.known`: device, inode, size, times)."""
    files = listing.files
    if len(files) != sum(1 for key in warehouse.verified.recorded() if key[0] == name):
        return False
    return all(warehouse.verified.known(name, path, os.lstat(path)) for path in files)


def _summary_inputs() -> list[str]:
    from ..forge.derive import summary_inputs

    return summary_inputs()


def _how_to_rebuild(warehouse: Warehouse, name: str, inputs_damaged: set[str]) -> str:
    from ..forge.derive import summary_sources

    if name == "forge_events":
        return (f"read from the Forge stores: {ingest_of_every_store(warehouse)} stores its events again, and "
                "`loopmeter harvest survival` measures again the outcomes a harvest had stored")
    if name in summary_sources():
        return (f"not rebuilt: its inputs are damaged too ({', '.join(sorted(inputs_damaged))}); "
                "run `loopmeter ingest forge <store>` again")
    if name in FORGELOOP_AGGREGATES:
        return "computed by `loopmeter aggregate`: run `loopmeter aggregate --full` to rebuild it"
    if name.startswith("forge_"):
        return "read from a Forge store: run `loopmeter ingest forge <store>` again to rebuild it"
    return "read from ForgeLoop's run files: run `loopmeter ingest forgeloop <RESULTS>` again to rebuild it"


def _repair_journal(warehouse: Warehouse) -> list[str]:
    """Finish the journal's publish when it can be; else take the journal away: every table keeps
    the version its link holds (each a whole version, swapped in one rename)."""
    journal = warehouse.state.path(publish.JOURNAL)
    problems = journal_problems(warehouse)
    if all(p.detail.startswith("a publish was left unfinished") for p in problems):
        try:
            warehouse.finish_publishing()
        except Exception as error:  # noqa: BLE001 - what could not be finished: the journal is removed below
            _stop_if_interrupted(error)
        if not warehouse.state.exists(publish.JOURNAL):
            return [f"journal {shown_path(journal)}: its publish finished"]
    warehouse.state.remove(publish.JOURNAL)
    return [f"journal {shown_path(journal)}: removed ({problems[0].detail})"]



def _stored_run_sets(warehouse: Warehouse) -> set[str]:
    """The run sets whose folders the current version of `runs` holds (named, not read)."""
    version = warehouse.version_dir("runs")
    if version is None:
        return set()
    try:
        with os.scandir(version) as entries:
            return {entry.name.partition("=")[2] for entry in entries
                    if entry.name.startswith("run_set_id=") and entry.is_dir(follow_symlinks=False)}
    except OSError:
        return set()


def _recorded_ingests(warehouse: Warehouse) -> list[tuple[Path, Path | None, dict]]:
    """The ingests the warehouse recorded (`.state/forgeloop-ingest-*.json`) whose run files are still
    where they were read: (RESULTS, scenarios, options). A record is the warehouse's word, not the
    user's, so what it names is read only as far as the warehouse already holds it: a `raw` folder
    that is a real folder (no link followed), and in it only the folders of the run sets `runs`
    holds (and the record names, when it names some), and scenarios only from the folder they were
    read from (`_scenarios_of`): a record pointing elsewhere finds nothing to read there, and no other
    folder is walked."""
    found = []
    stored = _stored_run_sets(warehouse)
    for name in warehouse.state.names("forgeloop-ingest-*.json"):
        try:
            key = warehouse.state.read(name).get("key", {})
            results, scenarios = Path(key["results"]), key.get("scenarios")
            named = key.get("runSets")
            wanted = stored if named is None else stored & {str(run_set) for run_set in named}
            max_file_bytes = int(key["maxFileBytes"])
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            continue
        raw = results / "raw"
        if not is_real_directory(raw) or (scenarios is not None and not _scenarios_of(warehouse, results, scenarios)):
            continue
        present = sorted(run_set for run_set in wanted if is_real_directory(raw / run_set))
        if present:
            found.append((results, None if scenarios is None else Path(scenarios),
                          dict(max_file_bytes=max_file_bytes, run_sets=present)))
    return found


def _scenarios_of(warehouse: Warehouse, results: Path, scenarios: str) -> bool:
    """Whether a record's scenario folder may be read again: a real folder the scenarios the warehouse
    holds were read from (their `source_path`), or, while that table cannot be read, one the ingests'
    manifest names as a source of scenarios, or the one beside the record's run files
    (`RESULTS/scenarios`). A record naming any other folder finds nothing there."""
    if not isinstance(scenarios, str) or not is_real_directory(scenarios):
        return False
    folder = os.path.normpath(scenarios)
    try:
        paths = warehouse.read("scenarios")["source_path"].to_list()
    except Exception as error:  # noqa: BLE001 - a table that cannot be read is what is being repaired
        _stop_if_interrupted(error)
        return folder == os.path.normpath(results / "scenarios") or folder in _manifest_scenario_folders(warehouse)
    return bool(paths) and all(isinstance(path, str) and os.path.dirname(path) == folder for path in paths)


def _manifest_scenario_folders(warehouse: Warehouse) -> set[str]:
    """The folders `ingest_manifest` says scenarios were read from (none when it cannot be read)."""
    try:
        manifest = warehouse.read("ingest_manifest", ["kind", "source_root"])
    except Exception as error:  # noqa: BLE001 - a damaged manifest names no folder
        _stop_if_interrupted(error)
        return set()
    if manifest is None:
        return set()
    roots = manifest.filter(manifest["kind"] == "scenario")["source_root"].unique().drop_nulls().to_list()
    return {os.path.normpath(root) for root in roots}


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


def _set_aside_scenarios(warehouse: Warehouse, recorded: list[tuple[Path, Path | None, dict]]) -> bool:
    """An empty version of `scenarios` in place of a damaged one, when every ingest recorded as reading
    scenarios reads its folder again (`recorded`): an ingest merges its scenarios into the table's
    rows and cannot read past a damaged file, and those folders together held every row. Else the
    table is left as it is (False)."""
    again = {os.path.normpath(scenarios) for _, scenarios, _ in recorded if scenarios is not None}
    for name in warehouse.state.names("forgeloop-ingest-*.json"):
        try:
            scenarios = warehouse.state.read(name).get("key", {}).get("scenarios")
        except AttributeError:
            return False
        if scenarios is not None and (not isinstance(scenarios, str) or os.path.normpath(scenarios) not in again):
            return False
    warehouse.write_table("scenarios", registry.table("scenarios").empty_frame())
    return True


def _reingest_forgeloop(warehouse: Warehouse, tables: list[str], damaged_runs: list[Path],
                        in_place: bool = False) -> tuple[list[str], list[str]]:
    """Rebuild the tables `ingest forgeloop` writes from the run files they were read from: each
    ingest the warehouse recorded is run again with `full` (every file read and every run set
    written anew, whatever its size and time say), after the runs partitions holding a damaged
    file are set aside. All of it is published together, or, on an error, none of it.
    (what was rebuilt, what was not and how to), one line each; `in_place`: none of the tables is
    damaged (only gone), so the ingest that stores them again may write into this warehouse."""
    from ..forgeloop.ingest import ingest_forgeloop

    recorded = _recorded_ingests(warehouse)
    if not recorded:
        return [], _forget_forgeloop_ingests(warehouse, tables, in_place)
    try:
        with warehouse.publishing():
            _set_aside_damaged_run_sets(warehouse, damaged_runs)
            if "scenarios" in tables:
                _set_aside_scenarios(warehouse, recorded)
            if "ingest_manifest" in tables:  # rows of every file read again are written anew
                warehouse.write_table("ingest_manifest", registry.table("ingest_manifest").empty_frame())
            for results, scenarios, options in recorded:
                ingest_forgeloop(warehouse, results, scenarios, full=True, **options)
    except Exception as error:  # noqa: BLE001 - said, with the rest of the repair
        _stop_if_interrupted(error)
        return [], [f"{', '.join(tables)}: read again from {', '.join(shown_path(r) for r, _, _ in recorded)}, "
                    f"which failed, so nothing was changed: {first_line(error)}"]
    return [f"{', '.join(tables)}: read again from {shown_path(results)}" for results, _, _ in recorded], []


def _forget_forgeloop_ingests(warehouse: Warehouse, tables: list[str], in_place: bool) -> list[str]:
    """How to rebuild a table `ingest forgeloop` writes when none of the run files it was read from
    are where the ingests' records (`.state/forgeloop-ingest-*.json`) say: from the run files, into a
    new warehouse (a writer refuses a damaged table file), or into this one when the tables are only
    gone (`in_place`)."""
    where = "" if in_place else " --warehouse <a new folder>"
    lines = []
    for name in warehouse.state.names("forgeloop-ingest-*.json"):
        try:
            key = warehouse.state.read(name).get("key", {})
        except AttributeError:
            continue
        if isinstance(key, dict) and isinstance(key.get("results"), str):
            scenarios = f" --scenarios {shown_path(key['scenarios'])}" if isinstance(key.get("scenarios"), str) else ""
            lines.append(f"{', '.join(tables)}: cannot be rebuilt from the warehouse; its rows come from run files: "
                         f"`loopmeter ingest forgeloop {shown_path(key['results'])}{scenarios}{where}`")
    return lines or [f"{', '.join(tables)}: cannot be rebuilt from the warehouse; its rows come from run files: "
                     f"`loopmeter ingest forgeloop <RESULTS>{where}`"]
