"""Helpers of the Forge tests: sample stores, the seed oracle, the CLI in process and as a user runs it."""
from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
from pathlib import Path

import forge_oracle
from forge_oracle import export as oracle_export
from forge_oracle import routing as oracle_routing
from loopmeter import operations
from loopmeter.forge import samples
from loopmeter.forge.ingest import ingest_forge
from loopmeter.storage import Warehouse

ROOT = Path(__file__).resolve().parent.parent


def write_store(path: Path, events: list[dict], repos: list[tuple[str, str]] = (("api", "/nowhere/api"),)) -> Path:
    return samples.write_sqlite(path, list(repos), events)


def retarget(warehouse: Warehouse, store: Path, repo: str, path: Path) -> None:
    """Point repository `repo` of the SQLite store at `path` and ingest the store (its mapping) again."""
    db = sqlite3.connect(store)
    db.execute("UPDATE repos SET path = ? WHERE repo = ?", (str(path), repo))
    db.commit()
    db.close()
    ingest_forge(warehouse, store)


def ingested(tmp: Path, store: Path) -> Warehouse:
    """The store ingested as `loopmeter ingest forge` ingests it (the routing report's tables stored too)."""
    warehouse = Warehouse(tmp / "warehouse")
    operations.ingest_forge(store, warehouse=warehouse)
    return warehouse


def seed_routing(store: Path, *, repo: str | None = None, since: float | None = None) -> dict:
    """The seed's routing document for a SQLite store (its own functions, our store reader)."""
    db = sqlite3.connect("file:%s?mode=ro" % store, uri=True)
    try:
        runs = oracle_export.Runs(oracle_export.Store(db))
    finally:
        db.close()
    records = oracle_routing.tasks(runs, repo=repo, since=since)
    return dict(observational=oracle_routing.observational(records), randomized=oracle_routing.randomized(records))


def seed_json(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True)


def seed_harvest(store_dir: Path, **options):
    """The seed's harvest over STORE_DIR/dataset.sqlite: (events, counts, git processes it ran), under
    the spec's rule where the seed differs: a horizon still ahead of `now` is pending and records
    nothing (the seed takes one as passed, ok or lost, once the branch holds a commit dated after it)."""
    from forge_oracle import outcomes

    forge_oracle.DATASET_DIR = store_dir
    started = {"count": 0}
    real_run, real_popen = outcomes.subprocess.run, outcomes.subprocess.Popen

    def counted_run(*args, **kwargs):
        started["count"] += 1
        return real_run(*args, **kwargs)

    class CountedPopen(real_popen):
        def __init__(self, *args, **kwargs):
            started["count"] += 1
            super().__init__(*args, **kwargs)

    outcomes.subprocess.run, outcomes.subprocess.Popen = counted_run, CountedPopen
    try:
        events, counts = outcomes.harvest(**options)
    finally:
        outcomes.subprocess.run, outcomes.subprocess.Popen = real_run, real_popen
        forge_oracle.DATASET_DIR = None
    ahead = [item for item in events
             if item[1]["data"]["integrated_ts"] + options.get("horizon_days", 14) * 86400 > options["now"]]
    for _, event in ahead:
        counts[event["data"]["status"]] -= 1
        counts["pending"] += 1
    return [item for item in events if item not in ahead], counts, started["count"]


def tree_fingerprint(root: Path) -> dict[str, str]:
    """Every file under root (a repository with its .git) -> sha256 of its bytes, plus symlinks."""
    found = {}
    for path in sorted(Path(root).rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_symlink():
            found[relative] = "link:" + os.readlink(path)
        elif path.is_file():
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            found[relative] = "dir"
    return found


def event(rid: str, kind: str, ts: float, run: str | None = "r1", task: str | None = None, data: dict | None = None,
          repo: str | None = "api") -> dict:
    return dict(rid=rid, kind=kind, src="forge", ts=ts, run=run, task=task, repo=repo, mode="parallel", data=data or {})


def one_task_integration(start: float, base: str, reviewed: str, candidate: str, repo: str = "r") -> list[dict]:
    """The events of one task (t1) of repository `repo`: its attempt passed with `reviewed` on `base`
    (at start - 50), merged (start + 50), and brought into main by the integration `candidate` (start + 250)."""
    return [
        event("e1", "attempt", start - 50, task="t1", repo=repo,
              data={"n": 1, "dwarf": "sonnet", "status": "passed", "reviewed_commit": reviewed, "base_ref": base}),
        event("e2", "event", start + 50, task="t1", repo=repo,
              data={"name": "merge", "status": "MERGED", "commit": reviewed, "integration": candidate}),
        event("e3", "event", start + 250, repo=repo,
              data={"name": "integrate_advanced", "branch": "main", "parent": base, "candidate": candidate, "target": "main"}),
    ]


def decision(id_: str, at: float, tier: str, default: str, alternative: str, chosen: str, propensity: float | None) -> dict:
    made = dict(decision=id_, at=at, tier=tier, default=default, candidates=[default, alternative], chosen=chosen)
    if propensity is not None:
        made["propensity"] = propensity
    return made


def drop_outcomes(events: list[dict], arm: str, share: float, seed: int = 0) -> tuple[list[dict], int]:
    """`events` (a store of `samples.routing_events`) with the outcome of attempt 1 lost for about `share` of the
    tasks of `arm` ("default" or "alternative") whose attempt 1 has one: each such task, drawn with probability
    `share`, loses its attempt-1 events that passed or failed (it reads as started and never finished). A task's
    arm is its first paired decision's (two candidates and a propensity). Returns the events and how many lost it."""
    arms: dict[tuple, str] = {}
    for e in events:
        if e["kind"] == "plan":
            for task, planned in e["data"]["tasks"].items():
                for made in planned.get("route", []):
                    if len(made.get("candidates", [])) == 2 and made.get("propensity"):
                        chosen = "default" if made["chosen"] == made["default"] else "alternative"
                        arms.setdefault((e["run"], task), chosen)
                        break
    finished = {(e["run"], e["task"]) for e in events if e["kind"] == "attempt" and e["data"].get("n") == 1
                and e["data"].get("status") in ("passed", "failed")}
    rng = random.Random(seed)
    lost = {key for key in sorted(finished) if arms.get(key) == arm and rng.random() < share}

    def kept(e: dict) -> bool:
        return not (e["kind"] == "attempt" and (e["run"], e["task"]) in lost and e["data"].get("n") == 1
                    and e["data"].get("status") in ("passed", "failed"))

    return [e for e in events if kept(e)], len(lost)
