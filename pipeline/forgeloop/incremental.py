"""Aggregating only what changed since the last aggregate.

A run set's documents and table rows depend on its runs, the scenario files' expected
profiles and `--tier`, nothing else. After every aggregate of all run sets, the warehouse
keeps a record (`.state/forgeloop-aggregate.json`): where the documents went, the tier, a
digest of the profiles, the versions of the forgeloop_* tables written, and per run set
the identity of its runs (a digest of its partition's bytes: a warehouse copied or restored holds
the same) and of its documents (size, modification time and a digest of
their bytes: a document whose time changed but whose bytes did not, as after a plain copy, is kept).
The place of the documents is recorded relative to the warehouse when it is inside it, so a warehouse
copied or moved whole aggregates nothing again.

The next aggregate into the same place recomputes only the run sets whose partition
changed or is new, or whose documents were touched, and drops the rows of run sets no
longer in `runs`. Anything else that differs (out, tier, profiles, a table rewritten by
another command, a missing or unreadable record) means a full aggregate.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from .. import SCHEMA_VERSION, __version__
from ..storage import Warehouse
from .contract import SCENARIO_ID
from .tables import RUNS

STATE = "forgeloop-aggregate.json"
TABLES = (
    "forgeloop_mode_runs", "forgeloop_mode_stats", "forgeloop_comparisons", "forgeloop_paired_runs",
    "forgeloop_outliers", "forgeloop_outlier_fences", "forgeloop_context_inflation", "forgeloop_documents",
)


@dataclass
class Plan:
    full: bool  # everything is computed again
    changed: list[str] = field(default_factory=list)  # run sets to compute
    removed: list[str] = field(default_factory=list)  # run sets gone from `runs`: their rows go
    kept: dict[str, dict] = field(default_factory=dict)  # run set -> what the last aggregate recorded for it
    identities: dict[str, str] = field(default_factory=dict)  # of the partitions, taken before reading them


def recorded(warehouse: Warehouse) -> dict | None:
    """What the last aggregate of all run sets recorded (None: nothing usable)."""
    state = warehouse.state.read(STATE)
    if not isinstance(state, dict) or not isinstance(state.get("key"), dict) or not isinstance(state.get("runSets"), dict):
        return None
    if not all(isinstance(entry, dict) and isinstance(entry.get("runs"), str) and isinstance(entry.get("documents"), dict)
               and all(map(is_document_name, entry["documents"])) and _are_facts(entry.get("facts"))
               for entry in state["runSets"].values()):
        return None
    return state


def _are_facts(value: object) -> bool:
    """`facts` as `facts()` makes them (what `aggregate` prints of a run set it keeps)."""
    def names(items: object) -> bool:
        return isinstance(items, list) and all(isinstance(item, str) for item in items)

    return (isinstance(value, dict) and set(value) == {"scenarios", "runCount", "claimsAllowed", "scenariosWithoutFile"}
            and names(value["scenarios"]) and names(value["scenariosWithoutFile"])
            and type(value["runCount"]) is int and type(value["claimsAllowed"]) is bool)


def is_document_name(name: object) -> bool:
    """A name an aggregate writes in a run set's folder: `summary.json` or `<scenario id>.json`. The
    record is read from the warehouse, which may be anyone's: a name of another form (`../x`, `/proc/...`)
    is never joined to a path, so the record is not used."""
    return isinstance(name, str) and name.endswith(".json") and (
        name == "summary.json" or SCENARIO_ID.fullmatch(name[:-len(".json")]) is not None)


def run_set_identities(warehouse: Warehouse, run_sets: list[str] | None = None) -> dict[str, str]:
    """Run set -> the identity of its runs (of every run set, or of `run_sets`): a digest of its
    partition's files' names and of their bytes' digests, in name order: what the analysis reads. A
    warehouse copied or restored from a backup holds the same identities; a partition whose rows
    changed, whoever changed them, another. A file's digest is read from the verified record while
    the file is the same (`verified.py`), else the file is read, in pieces: memory holds none of it."""
    by_run_set = warehouse.files_by_partition(RUNS, "run_set_id")
    wanted = sorted(by_run_set if run_sets is None else {name for name in run_sets if name in by_run_set})
    warehouse.partition_files(RUNS, "run_set_id", wanted)  # checked
    identities: dict[str, str] = {}
    for name in wanted:
        hashed = hashlib.blake2b(digest_size=12)
        for file in sorted(by_run_set[name], key=lambda path: path.name):
            hashed.update(f"{file.name}\0{warehouse.verified.digest(RUNS, file)}\0".encode())
        identities[name] = hashed.hexdigest()
    return identities


def _place(warehouse: Warehouse, out: Path) -> str:
    """Where the documents go: relative to the warehouse when inside it (`./aggregate`), else absolute."""
    place = Path(out).resolve()
    try:
        return "./" + place.relative_to(warehouse.root.resolve()).as_posix()
    except ValueError:
        return str(place)


def _key(warehouse: Warehouse, out: Path, tier: str | dict[str, str] | None, profiles: dict[str, str]) -> dict:
    digest = hashlib.blake2b(json.dumps(sorted(profiles.items())).encode(), digest_size=12).hexdigest()
    if isinstance(tier, dict):  # per run set, as ingest read them (lists: as the record reads back from JSON)
        tier = [[run_set, name] for run_set, name in sorted(tier.items())]
    return {"loopmeter": __version__, "schema": SCHEMA_VERSION, "out": _place(warehouse, out), "tier": tier,
            "profiles": digest}


def table_versions(warehouse: Warehouse) -> dict[str, str | None]:
    return {name: warehouse.table_version(name) for name in TABLES}


def _digest(path: Path) -> str:
    with open(path, "rb") as handle:  # in pieces: a document of any size, in little memory
        return hashlib.file_digest(handle, lambda: hashlib.blake2b(digest_size=12)).hexdigest()


def _document_identities(directory: str | Path, names: list[str], before: dict | None = None) -> dict[str, list] | None:
    """Per document: [size, modification time, digest of its bytes] (None: one is missing or is not a
    regular file). Where `before` holds the same size and time, its digest is taken without reading."""
    identities = {}
    for name in names:
        path = os.path.join(directory, name)
        try:
            stat = os.stat(path, follow_symlinks=False)
            if not S_ISREG(stat.st_mode):
                return None
            known = (before or {}).get(name)
            same = isinstance(known, list) and len(known) == 3 and known[:2] == [stat.st_size, stat.st_mtime_ns]
            identities[name] = [stat.st_size, stat.st_mtime_ns, known[2] if same else _digest(path)]
        except OSError:
            return None
    return identities


def _same_documents(now: dict[str, list] | None, before: dict) -> bool:
    """The documents hold the bytes recorded (their times may differ)."""
    return now is not None and sorted(now) == sorted(before) and all(
        isinstance(before[name], list) and before[name][-1:] == now[name][-1:] for name in now)


def plan(warehouse: Warehouse, out: Path, tier: str | dict[str, str] | None, profiles: dict[str, str]) -> Plan:
    """What an aggregate of all run sets into `out` has to compute."""
    identities = run_set_identities(warehouse)
    state = recorded(warehouse)
    if (state is None or state.get("key") != _key(warehouse, out, tier, profiles)
            or state.get("tables") != table_versions(warehouse)):
        return Plan(full=True, changed=sorted(identities), identities=identities)
    by_run_set: dict[str, dict] = state.get("runSets", {})
    result = Plan(full=False, identities=identities)
    for run_set, identity in sorted(identities.items()):
        before = by_run_set.get(run_set)
        documents = None if before is None else _document_identities(os.path.join(out, run_set), sorted(before["documents"]),
                                                                     before["documents"])
        if before is None or before["runs"] != identity or not _same_documents(documents, before["documents"]):
            result.changed.append(run_set)
        else:
            result.kept[run_set] = before | {"documents": documents}
    result.removed = sorted(set(by_run_set) - set(result.changed) - set(result.kept))
    return result


def facts(documents) -> dict:
    """What `aggregate` says about a run set (kept for the run sets it does not compute again)."""
    return {
        "scenarios": list(documents.scenarios),
        "runCount": documents.summary["runCount"],
        "claimsAllowed": documents.summary["claimsAllowed"],
        "scenariosWithoutFile": documents.unknown_scenarios,
    }


def record(warehouse: Warehouse, out: Path, tier: str | dict[str, str] | None, profiles: dict[str, str], computed: list,
           kept: dict[str, dict], identities: dict[str, str]) -> None:
    """Remember this aggregate (after its documents and tables are in place); `computed`
    are the RunSetDocuments written now, `kept` the records of the run sets left as they
    were (`Plan.kept`), `identities` those of the partitions before the runs were read."""
    run_sets = dict(kept)
    for documents in computed:
        names = [*(f"{scenario}.json" for scenario in documents.scenarios), "summary.json"]
        identity = _document_identities(os.path.join(out, documents.run_set_id), names)
        if documents.run_set_id not in identities or identity is None:
            continue
        run_sets[documents.run_set_id] = {"runs": identities[documents.run_set_id], "documents": identity, "facts": facts(documents)}
    state = {"key": _key(warehouse, out, tier, profiles), "tables": table_versions(warehouse), "runSets": run_sets}
    warehouse.state.write(STATE, state)
