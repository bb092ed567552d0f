"""`loopmeter ingest forgeloop`: run files -> validated rows -> the `runs` table.

The warehouse mirrors the run sets it is given: a run set found under `RESULTS/raw/` is
rebuilt from its files (a changed file replaces its run, a removed file drops it); run
sets not found there are left alone. A file whose size and modification time match the
last ingest (or whose bytes hash the same) is not parsed again. Every `*.json` seen gets a
row in `ingest_manifest`: accepted, unchanged, or rejected with the field and the rule.

This module is the light half (standard library only, so an unchanged tree is answered
without importing polars, DuckDB or pyarrow): it walks the tree, and when every file
still has the size and modification time the last ingest of this RESULTS saw, the
scenario files too, and the tables are still the versions that ingest wrote, it reports
that ingest's verdicts again and writes nothing. Otherwise `ingest_runs.py` does the work.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from .. import SCHEMA_VERSION, __version__
from ..config import DEFAULT_MAX_FILE_BYTES
from ..errors import LoopmeterError
from ..warehouse import Warehouse, atomic_write_text
from .contract import RUN_SET_ID, RUN_SET_RULE

RUNS = "runs"
MANIFEST = "ingest_manifest"
SCENARIOS = "scenarios"
STATE_DIR = ".state"  # in the warehouse: what the last ingest of each RESULTS saw


@dataclass(slots=True)
class SeenFile:
    path: str  # relative to the results directory
    run_set_id: str | None
    size: int
    mtime_ns: int
    problem: tuple[str, str] | None = None  # rejected before reading: (field, rule)


@dataclass
class IngestResult:
    results: Path
    run_sets: list[str] = field(default_factory=list)
    accepted: int = 0
    unchanged: int = 0
    rejections: list[tuple[str, str, str]] = field(default_factory=list)  # (path, field, rule)
    scenarios: int = 0
    wrote: bool = False  # some table changed (false for an unchanged tree)

    @property
    def rejected(self) -> int:
        return len(self.rejections)

    @property
    def seen(self) -> int:
        return self.accepted + self.unchanged + self.rejected

    def as_dict(self) -> dict:
        return {
            "results": str(self.results),
            "runSets": self.run_sets,
            "seen": self.seen,
            "accepted": self.accepted,
            "unchanged": self.unchanged,
            "rejected": self.rejected,
            "scenarios": self.scenarios,
            "rejections": [{"path": p, "field": f, "reason": r} for p, f, r in self.rejections],
        }


def discover(results: Path) -> Iterator[SeenFile]:
    """Every `*.json` below `results/raw/`, in path order (so each run set's files come
    together); problems of place noted. Lazy by run set: one run set's files are held at a time."""
    for found in discover_by_run_set(results):
        yield from found


def discover_by_run_set(results: Path) -> Iterator[list[SeenFile]]:
    """`discover`'s files, a list per entry of `raw/` (a run set folder, or a stray file)."""
    raw = results / "raw"
    if not raw.is_dir():
        raise LoopmeterError(f"{raw} is not a directory: expected RESULTS/raw/<runSetId>/**/*.json")
    walker = _Walker(str(results.resolve()))
    raw_real = os.path.realpath(raw)
    entries = walker.entries(str(raw), "raw", None, found := [])
    if found:
        yield found
    for entry in entries:
        found = []
        walker.visit(entry, raw_real, "raw", None, None, found)
        yield found


class _Walker:
    """The recursive walk below one run set folder, appending to a list (a generator per
    level costs more than the system calls)."""

    def __init__(self, root: str):
        self.root = root
        self.visited: set[str] = set()  # real paths of the directories walked (a symlink may lead back)

    @staticmethod
    def entries(directory: str, relative: str, run_set: str | None, found: list[SeenFile]) -> list[os.DirEntry]:
        try:
            return sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as error:
            found.append(SeenFile(relative, run_set, 0, 0, ("file", f"directory cannot be read ({error.strerror})")))
            return []

    def visit(self, entry: os.DirEntry, real_parent: str, relative: str, run_set: str | None,
              folder_problem: tuple[str, str] | None, found: list[SeenFile]) -> None:
        path = f"{relative}/{entry.name}"
        link = entry.is_symlink()
        if link:
            target = os.path.realpath(entry.path)
            if os.path.commonpath([target, self.root]) != self.root:
                if entry.name.endswith(".json") or os.path.isdir(target):
                    found.append(SeenFile(path, run_set, 0, 0, ("file", "symlink leads outside the results tree")))
                return
        try:
            is_dir = entry.is_dir()
            stat = None if is_dir else entry.stat()
        except OSError as error:
            found.append(SeenFile(path, run_set, 0, 0, ("file", f"cannot be read ({error.strerror})")))
            return
        if is_dir:
            real = target if link else f"{real_parent}/{entry.name}"  # no system call for a real directory
            if real in self.visited:
                return
            self.visited.add(real)
            if run_set is None:
                run_set = entry.name
                folder_problem = None if RUN_SET_ID.fullmatch(entry.name) else ("runSetId", f"run set folder name {RUN_SET_RULE}")
            for inner in self.entries(entry.path, path, run_set, found):
                self.visit(inner, real, path, run_set, folder_problem, found)
        elif entry.name.endswith(".json"):
            problem = folder_problem if run_set is not None else ("file", "lies directly in raw/, not in a run set folder")
            found.append(SeenFile(path, run_set, stat.st_size, stat.st_mtime_ns, problem))


def ingest_forgeloop(
    warehouse: Warehouse,
    results: Path,
    scenarios: Path | None = None,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    run_sets: list[str] | None = None,
) -> IngestResult:
    """Ingest a ForgeLoop results directory (and optionally its scenarios) into `warehouse`;
    with `run_sets`, only those run set folders are looked at. The caller holds the lock."""
    results = Path(results)
    if scenarios is not None and not Path(scenarios).is_dir():
        raise LoopmeterError(f"--scenarios {scenarios} is not a directory")
    if run_sets is not None:
        present = {entry.name for entry in os.scandir(results / "raw") if entry.is_dir()} if (results / "raw").is_dir() else set()
        missing = sorted(set(run_sets) - present)
        if missing:
            raise LoopmeterError(f"no run set folder {', '.join(missing)} in {results / 'raw'}")
    tree = TreeState(warehouse, results, scenarios, max_file_bytes, run_sets)
    answer = tree.last_answer()
    if answer is not None:
        return answer
    from .ingest_runs import ingest_runs

    result = ingest_runs(warehouse, results, tree.files(), scenarios, max_file_bytes=max_file_bytes)
    tree.remember(result)
    return result


class TreeState:
    """What one ingest of a RESULTS directory saw (every file's path, size and mtime, the
    scenario files', the options, the versions of the tables it left) and answered."""

    def __init__(self, warehouse: Warehouse, results: Path, scenarios: Path | None, max_file_bytes: int,
                 run_sets: list[str] | None):
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
        self.path = warehouse.root / STATE_DIR / f"forgeloop-ingest-{name}.json"
        self._seen: list[list[SeenFile]] | None = None  # kept from a walk that did not match, for the ingest
        self._digest: str | None = None

    # ---- the walk ---------------------------------------------------------------------
    def _walk(self) -> Iterator[list[SeenFile]]:
        for found in discover_by_run_set(self.results):
            if self.run_sets is not None:
                found = [f for f in found if f.run_set_id in self.run_sets]
            yield found

    def _fingerprint(self, batches: Iterator[list[SeenFile]]) -> Iterator[SeenFile]:
        """Pass the files on, and set `_digest` once all have passed."""
        digest = hashlib.blake2b(digest_size=20)
        for found in batches:
            _add(digest, found)
            yield from found
        self._digest = self._finish(digest)

    def _finish(self, digest) -> str:
        digest.update(self._scenario_listing().encode())
        return digest.hexdigest()

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
        return "scenarios\n" + "\n".join(sorted(lines))

    def files(self) -> Iterator[SeenFile]:
        """The files for a full ingest (from the walk already made, if one was made)."""
        return self._fingerprint(iter(self._seen) if self._seen is not None else self._walk())

    def _tables(self) -> dict[str, str | None]:
        versions = {}
        for name in (RUNS, MANIFEST, SCENARIOS):
            link = self.warehouse.table_dir(name)
            versions[name] = os.readlink(link) if link.is_symlink() else None
        return versions

    # ---- the record ---------------------------------------------------------------------
    def last_answer(self) -> IngestResult | None:
        """The last ingest's answer, when the tree, the options and the tables are as it left
        them; None (and the walk kept for the ingest) otherwise."""
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or state.get("key") != self.key or state.get("tables") != self._tables():
            return None
        digest = hashlib.blake2b(digest_size=20)
        self._seen = []
        for found in self._walk():
            _add(digest, found)
            self._seen.append(found)
        if state.get("digest") != self._finish(digest):
            return None
        answer = state["answer"]
        return IngestResult(
            results=self.results.resolve(),
            run_sets=list(answer["run_sets"]),
            unchanged=answer["accepted"] + answer["unchanged"],
            rejections=[tuple(rejection) for rejection in answer["rejections"]],
            scenarios=answer["scenarios"],
            wrote=False,
        )

    def remember(self, result: IngestResult) -> None:
        """Record what this ingest saw and answered (written atomically; losing it only
        costs the next ingest its shortcut)."""
        if self._digest is None:  # the walk was not finished
            return
        answer = asdict(result)
        answer.pop("results")
        answer.pop("wrote")
        state = {"key": self.key, "digest": self._digest, "tables": self._tables(), "answer": answer}
        atomic_write_text(self.path, json.dumps(state))


def _add(digest, found: list[SeenFile]) -> None:
    digest.update("".join([f"{f.path}\0{f.size}\0{f.mtime_ns}\0{f.problem}\n" for f in found]).encode())
