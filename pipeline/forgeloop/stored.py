"""What the last `aggregate` stored, read back for the reports, while it is current.

`aggregate` of all run sets leaves the documents (`<out>/<runSetId>/*.json`), the forgeloop_*
tables and a record of what it saw (`incremental.py`). A report reads those instead of
analysing the runs again only when they hold what an analysis would give now:

- the record was written by this loopmeter (version and schema) for the expected profiles
  the scenario files give now;
- the runs partitions are those it read (same run sets, same files: device, inode, size,
  modification time);
- every forgeloop_* table is the version it wrote, before and after the report reads it;
- each document read is the file it wrote (size and modification time, taken from the open
  file that is read).

`--tier` only sets summary.json's `tier`, which no report shows, so any tier will do.
Anything else (no record, a run set ingested since, a table or document rewritten or
removed, a run set the record does not know) means `None`: the caller computes.
This module imports no DuckDB and no pyarrow; polars only for the tables a report reads.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..storage.names import problem
from . import incremental
from .ingest import SCENARIOS

if TYPE_CHECKING:
    import polars as pl

    from ..storage import Warehouse


@dataclass
class RunSetDocuments:
    """A run set's aggregate documents, computed (`aggregate.py`) or read back (here)."""
    run_set_id: str
    scenarios: dict[str, dict] = field(default_factory=dict)  # scenario id -> aggregate document
    summary: dict = field(default_factory=dict)
    unknown_scenarios: list[str] = field(default_factory=list)  # no scenario file: expectedProfile unknown


class StoredAnalysis:
    """The forgeloop_* tables a report reads, under the names `Analysis` gives their frames."""

    def __init__(self, frames: dict[str, "pl.DataFrame"]):
        self.__dict__.update(frames)


@dataclass
class StoredResult:
    """What a report needs of an `Aggregated`: the documents and some of the analysis frames."""
    analysis: StoredAnalysis
    documents: list[RunSetDocuments]


def expected_profiles(warehouse: Warehouse) -> dict[str, str]:
    """Scenario id -> expectedProfile, from the scenario files given at ingest."""
    frame = warehouse.read(SCENARIOS, columns=["scenario_id", "expected_profile"])
    return {} if frame is None else dict(frame.iter_rows())


# the frames of `Analysis` a report may read, and the table `aggregate` stores each in
TABLE_OF = {"mode_runs": "forgeloop_mode_runs", "comparisons": "forgeloop_comparisons", "outliers": "forgeloop_outliers"}


def _read_document(path: Path, identity: object) -> dict | None:
    """The document at `path` if the file read is the one recorded (`[size, mtime_ns]`), a regular file."""
    from ..storage.files import NotAFile, open_regular

    try:
        with os.fdopen(open_regular(path), "rb") as handle:
            stat = os.fstat(handle.fileno())
            if [stat.st_size, stat.st_mtime_ns] != identity:
                return None
            text = handle.read(stat.st_size + 1)
        document = json.loads(text)
    except (OSError, ValueError, NotAFile):
        return None
    return document if isinstance(document, dict) else None


def _documents(out: Path, run_set: str, entry: dict) -> RunSetDocuments | None:
    facts, identities = entry.get("facts"), entry.get("documents")
    if not isinstance(facts, dict) or not isinstance(identities, dict):
        return None
    scenarios = facts.get("scenarios")
    if not isinstance(scenarios, list) or any(problem("scenario", s) for s in scenarios) or problem("run set", run_set) \
            or set(identities) != {*(f"{s}.json" for s in scenarios), "summary.json"}:
        return None
    unknown = facts.get("scenariosWithoutFile")
    documents = RunSetDocuments(run_set, unknown_scenarios=list(unknown) if isinstance(unknown, list) else [])
    for name in [*(f"{s}.json" for s in scenarios), "summary.json"]:
        document = _read_document(out / run_set / name, identities[name])
        if document is None:
            return None
        if name == "summary.json":
            documents.summary = document
        else:
            documents.scenarios[name[:-len(".json")]] = document
    return documents


def stored_result(warehouse: Warehouse, run_set: str | None, frames: tuple[str, ...],
                  profiles: dict[str, str]) -> StoredResult | None:
    """The documents of `run_set` (or of all run sets, in id order) and the analysis `frames`
    (names in `TABLE_OF`) as the last aggregate stored them, if they are current (see above);
    `profiles`: the expected profiles of the scenario files ingested now."""
    state = incremental.recorded(warehouse)
    if state is None:
        return None
    key = state["key"]
    out = key.get("out")
    if not isinstance(out, str) or key != incremental._key(Path(out), key.get("tier"), profiles):
        return None
    recorded = state["runSets"]
    identities = incremental.run_set_identities(warehouse)
    if set(identities) != set(recorded) or any(
            not isinstance(recorded[name], dict) or recorded[name].get("runs") != identity for name, identity in identities.items()):
        return None
    versions = incremental._table_versions(warehouse)
    if state.get("tables") != versions or any(versions[TABLE_OF[name]] is None for name in frames):
        return None
    wanted = sorted(recorded) if run_set is None else [run_set]
    if run_set is not None and run_set not in recorded:
        return None  # computing tells that no such run set is there
    documents = []
    for name in wanted:
        docs = _documents(Path(out), name, recorded[name])
        if docs is None:
            return None
        documents.append(docs)
    tables = {}
    for name in frames:
        try:
            frame = warehouse.read(TABLE_OF[name])
        except Exception:  # noqa: BLE001 - a stored table that cannot be read: the runs still can
            return None
        if frame is None:
            return None
        tables[name] = frame if run_set is None else frame.filter(run_set_id=run_set)
    if incremental._table_versions(warehouse) != versions:  # replaced while read: computing is what is current
        return None
    return StoredResult(StoredAnalysis(tables), documents)
