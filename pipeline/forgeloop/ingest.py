"""`loopmeter ingest forgeloop`: run files -> validated rows -> the `runs` table.

The warehouse mirrors the run sets it is given: a run set found under `RESULTS/raw/` is
rebuilt from its files (a changed file replaces its run, a removed file drops it); run
sets not found there are left alone. A file whose size and modification time match the
last ingest (or whose bytes hash the same) is not parsed again. Every `*.json` seen gets a
row in `ingest_manifest`: accepted, unchanged, or rejected with the field and the rule.

This module is the light half (standard library only, so an unchanged tree is answered
without importing polars, DuckDB or pyarrow): it walks the tree (`walk.py`), and when every file
still has the size and modification time the last ingest of this RESULTS saw, the
scenario files too, and the tables are still the versions that ingest wrote, it reports
that ingest's verdicts again and writes nothing. Otherwise `ingest_runs.py` does the work.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

from .. import SCHEMA_VERSION, __version__, collector
from ..config import DEFAULT_MAX_FILE_BYTES
from ..engines import Engine
from ..errors import LoopmeterError
from ..storage import Warehouse
from .contract import OF_THE_MOMENT
from .ingested import IngestResult, rejection_group
from .tables import MANIFEST, RUNS, SCENARIOS
from .walk import Digested, SeenFile, digest, discover_by_run_set, group_of, walk_digested

def ingest_forgeloop(
    warehouse: Warehouse,
    results: Path,
    scenarios: Path | None = None,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    run_sets: list[str] | None = None,
    full: bool = False,
    engine: Engine = Engine(),
    batch_files: int | None = None,
) -> IngestResult:
    """Ingest a ForgeLoop results directory (and optionally its scenarios) into `warehouse`;
    with `run_sets`, only those run set folders are looked at. With `full`, every file is read
    and judged again, whatever its size and modification time say (an edit that kept both
    is found), and its run sets written as a clean ingest writes them. `engine` says who reads the
    files, in batches of at most `batch_files` (default `reader.BATCH`): the same answer and tables
    whoever reads them. The caller holds the lock."""
    results = Path(results)
    if scenarios is not None and not Path(scenarios).is_dir():
        raise LoopmeterError(f"--scenarios {scenarios} is not a directory")
    if run_sets is not None:
        present = {entry.name for entry in os.scandir(results / "raw") if entry.is_dir()} if (results / "raw").is_dir() else set()
        missing = sorted(set(run_sets) - present)
        if missing:
            raise LoopmeterError(f"no run set folder {', '.join(missing)} in {results / 'raw'}")
    with collector.paused():  # about 1 s of CPU in 100k files
        tree = TreeState(warehouse, results, scenarios, max_file_bytes, run_sets, full)
        if tree.unchanged():
            return tree.answer()
        from .ingest_runs import BATCH, ingest_runs

        scope = tree.scope()
        with warehouse.publishing():  # runs, ingest_manifest and scenarios: all new, or all as they were
            result = ingest_runs(warehouse, results, tree.files(), scenarios, max_file_bytes=max_file_bytes,
                                 only=scope if scope is not None else run_sets, reread=full, engine=engine,
                                 batch_files=batch_files or BATCH)
        whole = tree.answer(result)
        tree.remember(whole)
        return whole


class TreeState:
    """What the last ingest of a RESULTS directory (with the same options) saw, per entry
    of raw/ (the path, size and mtime of every file), and what it answered for each; the
    scenario files it saw; the versions of the tables it left.

    When those tables are still current, an entry of raw/ whose files all look the same is
    not looked at again: its answer is the recorded one. Nothing changed at all: nothing is
    written. Otherwise only the entries that changed (or appeared, or went) are ingested."""

    def __init__(self, warehouse: Warehouse, results: Path, scenarios: Path | None, max_file_bytes: int,
                 run_sets: list[str] | None, full: bool = False):
        self.warehouse, self.results, self.scenarios, self.run_sets = warehouse, results, scenarios, run_sets
        root = str(results.resolve())
        self.key = {
            "loopmeter": __version__,
            "schema": SCHEMA_VERSION,
            "results": root,
            "scenarios": None if scenarios is None else str(Path(scenarios).resolve()),
            "maxFileBytes": max_file_bytes,
            "runSets": None if run_sets is None else sorted(run_sets),
        }
        name = hashlib.blake2b(json.dumps(self.key, sort_keys=True).encode(), digest_size=10).hexdigest()
        self.state_name = f"forgeloop-ingest-{name}.json"
        self.state = None if full else self._load()  # `full`: no record vouches for anything
        # per entry of raw/, in path order: its digest and number of files; the files themselves
        # are kept only for entries that changed since the recorded ingest (without a record,
        # `files()` walks the tree as the ingest goes, and fills these in)
        self.digests: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.changed: dict[str, list[SeenFile]] = {}
        if self.state is not None:
            stray: list[SeenFile] = []  # files directly in raw/ come one by one, in path order
            for group, files in self._walk_recorded():
                if isinstance(files, Digested):  # a run set folder walked by a helper
                    self.digests[group], self.counts[group] = files.digest, files.count
                    if files.files is not None:
                        self.changed[group] = files.files
                    continue
                self._note(group, files)
                if group == "":
                    stray += files
                elif not self._same(group, self.digests[group]):
                    self.changed[group] = files
            if stray and not self._same("", self.digests[""]):
                self.changed[""] = stray
        self.scenario_listing = self._scenario_listing()

    def _walk(self) -> Iterator[tuple[str, list[SeenFile]]]:
        """(entry of raw/, its files), an entry at a time."""
        for found in discover_by_run_set(self.results):
            yield from self._kept(found)

    def _kept(self, found: list[SeenFile]) -> Iterator[tuple[str, list[SeenFile]]]:
        """(entry of raw/, its files) for the files of an entry the options keep, if any."""
        if self.run_sets is not None:
            found = [seen for seen in found if seen.run_set_id in self.run_sets]
        if found:
            yield group_of(found[0].path), found

    def _walk_recorded(self) -> Iterator[tuple[str, list[SeenFile] | Digested]]:
        """`_walk` for comparing with the record: the run set folders walked in parallel where
        that can be done, each as a `Digested` whose files are there only if it changed."""
        walked = walk_digested(self.results, lambda name: self.run_sets is None or name in self.run_sets,
                               lambda group, seen: not self._same(group, seen))
        if walked is None:
            yield from self._walk()
            return
        for found in walked:
            if not isinstance(found, Digested):
                yield from self._kept(found)
            elif found.count:
                yield found.group, found

    def _note(self, group: str, files: list[SeenFile]) -> None:
        self.digests[group] = digest(files, self.digests.get(group, ""))
        self.counts[group] = self.counts.get(group, 0) + len(files)

    def _load(self) -> dict | None:
        state = self.warehouse.state.read(self.state_name)
        if not _well_formed(state) or state.get("key") != self.key or state.get("tables") != self._tables():
            return None  # other options, or the tables changed since: it cannot vouch for them
        return state

    def _scenario_listing(self) -> str:
        if self.scenarios is None:
            return ""
        lines = []
        with os.scandir(self.scenarios) as entries:
            for entry in entries:
                if entry.name.endswith(".json"):
                    try:
                        stat = entry.stat()
                        lines.append(f"{entry.name}\0{entry.is_file()}\0{stat.st_size}\0{stat.st_mtime_ns}")
                    except OSError as error:
                        lines.append(f"{entry.name}\0{error.strerror}")
        return "\n".join(sorted(lines))

    def _tables(self) -> dict[str, str | None]:
        return {name: self.warehouse.table_version(name) for name in (RUNS, MANIFEST, SCENARIOS)}

    def _same(self, group: str, seen: str) -> bool:
        """The entry's files look as the recorded ingest saw them (`seen`, their digest now), and
        none was rejected for a reason of the moment (a file that could not be read may be
        readable now: it is read again)."""
        if self.state is None:
            return False
        recorded = self.state["groups"].get(group, {})
        return recorded.get("digest") == seen and not any(
            _passing(rule) for _, _, rule in recorded.get("rejections", []))

    def unchanged(self) -> bool:
        return (self.state is not None and self.state["scenarioListing"] == self.scenario_listing
                and not any(_passing(rule) for _, _, rule in self.state["scenarioRejections"])
                and set(self.state["groups"]) == set(self.digests) and not self.changed)

    def scope(self) -> list[str] | None:
        """The entries of raw/ to ingest (changed, new, or gone), or None for all."""
        if self.state is None:
            return None
        return sorted(set(self.changed) | (set(self.state["groups"]) - set(self.digests)))

    def files(self) -> Iterator[SeenFile]:
        """The files of the entries to ingest, in path order."""
        if self.state is not None:
            for files in self.changed.values():
                yield from files
            return
        for group, files in self._walk():  # no record: the whole tree, walked as the ingest goes
            self._note(group, files)
            yield from files

    def answer(self, result: IngestResult | None = None) -> IngestResult:
        """The answer for the whole tree: `result` for the entries just ingested (none: an
        unchanged tree), the recorded answers for the others, in path order."""
        ingested = set(self.digests) if self.state is None else set(self.scope() or ())
        outcome = IngestResult(results=self.results.resolve(), wrote=bool(result and result.wrote))
        outcome.scenarios_unchanged = (self.scenarios is not None and self.state is not None
                                       and self.state["scenarioListing"] == self.scenario_listing)
        fresh_rejections: dict[str, list] = {}
        if result is not None:
            outcome.accepted, outcome.unchanged, outcome.scenarios = result.accepted, result.unchanged, result.scenarios
            for rejection in result.rejections:
                fresh_rejections.setdefault(rejection_group(rejection[0]), []).append(rejection)
        elif self.state is not None:
            outcome.scenarios = self.state["scenarios"]
        fresh_run_sets = set(result.run_sets) if result else set()
        for group in self.digests:
            if group in ingested:
                outcome.rejections += fresh_rejections.get(group, [])
                if group in fresh_run_sets:
                    outcome.run_sets.append(group)
            else:
                recorded = self.state["groups"][group]
                outcome.unchanged += recorded["stored"]
                outcome.rejections += [tuple(rejection) for rejection in recorded["rejections"]]
                if recorded["runSet"]:
                    outcome.run_sets.append(group)
        if result is not None:
            outcome.rejections += fresh_rejections.get(None, [])  # the scenario files'
        else:
            outcome.rejections += [tuple(rejection) for rejection in self.state["scenarioRejections"]]
        return outcome

    def remember(self, whole: IngestResult) -> None:
        """Record what this ingest saw and `whole`, its answer for the whole tree, per entry of
        raw/ (written atomically; losing it only costs the next ingest its shortcut)."""
        rejected: dict[str | None, list] = {}
        for rejection in whole.rejections:
            rejected.setdefault(rejection_group(rejection[0]), []).append(rejection)
        run_sets = set(whole.run_sets)
        groups = {
            group: {
                "digest": digest,
                "stored": self.counts[group] - len(rejected.get(group, [])),
                "rejections": rejected.get(group, []),
                "runSet": group in run_sets,
            }
            for group, digest in self.digests.items()
        }
        state = {
            "key": self.key, "tables": self._tables(), "groups": groups, "scenarioListing": self.scenario_listing,
            "scenarios": whole.scenarios, "scenarioRejections": rejected.get(None, []),
        }
        self.warehouse.state.write(self.state_name, state)


def _well_formed(state: object) -> bool:
    """A record `remember` could have written (the folder's files are input: anything else is no record)."""
    if not isinstance(state, dict) or not isinstance(state.get("groups"), dict):
        return False
    rejection = lambda item: isinstance(item, list) and len(item) == 3 and all(isinstance(part, str) for part in item)
    groups = state["groups"].values()
    return (all(isinstance(group, dict) and isinstance(group.get("digest"), str) and isinstance(group.get("stored"), int)
                and isinstance(group.get("rejections"), list) and all(map(rejection, group["rejections"]))
                and isinstance(group.get("runSet"), bool) for group in groups)
            and isinstance(state.get("scenarioListing"), str) and isinstance(state.get("scenarios"), int)
            and isinstance(state.get("scenarioRejections"), list) and all(map(rejection, state["scenarioRejections"])))


def _passing(rule: str) -> bool:
    """A rejection that says nothing about the file itself, only about the moment: it could not be read."""
    return rule.startswith(OF_THE_MOMENT)
