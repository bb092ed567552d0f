"""Forge's use cases: ingest an event store, harvest survival from git, read the reports.

The reports only read: `report_routing`, `report_srm` and `report_survival` compute what they show
from the stored per-event tables. The tables of the routing report (forge_routing_observational,
forge_routing_randomized, forge_routing_srm) are stored by `ingest_forge`, for every task; the
survival table by `harvest_survival`.
"""
from __future__ import annotations

import dataclasses
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import LoopmeterError, shown_path, usage_error
from ..storage import Warehouse
from .checks import check_number, check_utf8_path
from .common import open_warehouse, writing
from .forgeloop import Shown

if TYPE_CHECKING:
    from ..engines import Engine

PART_ROWS = 250_000  # ingest forge: input rows per part of a summary (`forge.derive.PART_ROWS`)
MAX_BUSY_TIMEOUT = 2_000_000.0  # seconds (23 days): SQLite takes its busy timeout as an int of milliseconds
MAX_HORIZON_DAYS = 100_000  # about 270 years: a horizon beyond the calendar --now can name is always pending


def require(store: Warehouse, table: str) -> None:
    if not store.has_table(table):
        raise LoopmeterError(f"no Forge data in {shown_path(store.root)}; run `loopmeter ingest forge STORE` first")


def ingest_forge(store_path: str | os.PathLike, *, warehouse: str | os.PathLike | Warehouse | None = None,
                 busy_timeout: float = 5.0, engine: str | Engine = "local", workers: int | None = None,
                 spark_master: str | None = None, part_rows: int = PART_ROWS, wait: bool = False):
    """Read a Forge event store (dataset.sqlite, opened read-only, or a JSON Lines export) into the
    warehouse, and store the routing report's tables for every task. A summary table whose inputs
    hold more than `part_rows` rows is computed over parts of whole runs of about `part_rows` input
    rows, by this process (`engine="local"`), by `workers` worker processes (`engine="pool"`) or on
    Spark (`engine="spark"`, at `spark_master`), or by an `engines.Engine` given as `engine`: the
    same tables whatever the engine. Returns `forge.ingest.IngestResult`."""
    check_number("--busy-timeout", busy_timeout, minimum=0, maximum=MAX_BUSY_TIMEOUT)
    check_utf8_path(store_path)
    from ..engines import Engine

    computing = engine if isinstance(engine, Engine) else Engine(engine, workers, master=spark_master)
    if isinstance(part_rows, bool) or not isinstance(part_rows, int) or part_rows < 1:
        raise usage_error(f"--part-rows must be at least 1 (got {part_rows})")
    from ..forge.ingest import ingest_forge as ingest
    from ..forge.store import detect_format

    detect_format(Path(store_path))  # a clear error before taking the lock
    store = open_warehouse(warehouse, writing=True)
    with writing(store, wait=wait, command="ingest forge"), store.publishing():  # the tables and the report, as one
        result = ingest(store, Path(store_path), busy_timeout=busy_timeout, engine=computing, part_rows=part_rows)
        store_routing(store)
    result.warehouse = store.root
    return result


def store_routing(store: Warehouse) -> tuple[dict, dict]:
    """The routing report and its SRM check of every task, stored (the caller holds the lock)."""
    from ..forge import tables as t
    from ..forge.reports import routing_frames, routing_scope
    from ..forge.srm import routing_and_srm, srm_frame

    if not store.has_table(t.TASKS):
        return {"observational": [], "randomized": []}, {"rows": []}
    scope = routing_scope(None, None)
    routing, srm = routing_and_srm(store, scope)
    with store.publishing():
        for name, frame in {**routing_frames(routing, scope), t.SRM: srm_frame(srm, scope)}.items():
            store.write_table(name, frame)
    return routing, srm


def _scope(store: Warehouse, repo: str | os.PathLike | None, since: float | None):
    """The scope of the routing and SRM reports: --since DAYS, and --repo as forge_repos spells its path."""
    from ..forge.reports import routing_scope

    check_number("--since", since, minimum=0)
    scope = routing_scope(None, since)
    return dataclasses.replace(scope, repo=_known_repo(store, Path(repo))) if repo else scope


def _chosen(repo, since: float | None) -> str:
    return " and ".join(([f"--repo {repo}"] if repo else []) + ([f"--since {since:g}"] if since else []))


def report_routing(*, warehouse: str | os.PathLike | Warehouse | None = None, repo: str | os.PathLike | None = None,
                   since: float | None = None) -> Shown:
    """First-pass rates by tier and model (observational) and the randomized pairs; `document` is
    (routing, srm): the routing report and the SRM check of its pairs."""
    check_number("--since", since, minimum=0)
    from ..forge import tables as t
    from ..forge.srm import routing_and_srm

    store = open_warehouse(warehouse)
    require(store, t.TASKS)
    scope = _scope(store, repo, since)
    routing, srm = routing_and_srm(store, scope)
    notes = []
    if (repo or since) and not routing["observational"] and not any("note" not in r for r in routing["randomized"]):
        notes.append(f"note: no task matched {_chosen(repo, since)}: the report is empty")
    return Shown((routing, srm), notes)


def report_srm(*, warehouse: str | os.PathLike | Warehouse | None = None, repo: str | os.PathLike | None = None,
               since: float | None = None) -> Shown:
    """The sample-ratio-mismatch check of every randomized pair."""
    check_number("--since", since, minimum=0)
    from ..forge import tables as t
    from ..forge.srm import srm_document

    store = open_warehouse(warehouse)
    require(store, t.TASKS)
    document = srm_document(store, _scope(store, repo, since))
    notes = [f"note: no paired assignment matched {_chosen(repo, since)}: the report is empty"] \
        if (repo or since) and not document["rows"] else []
    return Shown(document, notes)


def report_survival(*, warehouse: str | os.PathLike | Warehouse | None = None) -> Shown:
    """The survival of merged work per model, tier and horizon, from the harvested outcomes."""
    from ..forge import tables as t
    from ..forge.reports import survival_document

    store = open_warehouse(warehouse)
    require(store, t.TASKS)
    return Shown(survival_document(store))


def harvest_survival(*, warehouse: str | os.PathLike | Warehouse | None = None, repo: str | os.PathLike | None = None,
                     horizon_days: Sequence[int] = (14,), now: float | str | None = None, dry_run: bool = False,
                     include_temp: bool = False, workers: int = 4, wait: bool = False):
    """Per task an integration brought in, the lines it added that git blame still credits to it at each
    horizon, and later reverts: recorded as outcome events and stored as forge_survival (unless
    `dry_run`). Git runs read-only. Returns `forge.survival.Harvests`."""
    moment = parse_time(now) if isinstance(now, str) else now
    from ..forge import tables as t
    from ..forge.reports import survival_document, survival_frame
    from ..forge.survival import harvest_horizons, record

    store = open_warehouse(warehouse)
    require(store, t.INTEGRATIONS)
    options = dict(horizons=list(horizon_days), repo=str(_known_repo(store, Path(repo))) if repo else None,
                   include_temp=include_temp, now=moment, workers=workers)
    if dry_run:
        return harvest_horizons(store, **options)
    with writing(store, wait=wait, command="harvest survival"):
        found = harvest_horizons(store, **options)
        record(store, found)
        store.write_table(t.SURVIVAL, survival_frame(survival_document(store)))
    return found


def _known_repo(store: Warehouse, repo: Path) -> str:
    """The path of the Forge repository `repo` names, as forge_repos holds it (the same directory,
    symbolic links and relative paths resolved); none is an error."""
    from ..forge import tables as t

    frame = store.read(t.REPOS, columns=["path"])
    known = sorted({path for path in ([] if frame is None else frame["path"].to_list()) if path})
    wanted = os.path.realpath(repo)
    matching = [path for path in known if os.path.realpath(path) == wanted]
    if not matching:
        listed = ", ".join(known[:5]) + (f" and {len(known) - 5} more" if len(known) > 5 else "")
        raise LoopmeterError(f"--repo {shown_path(repo)}: no Forge repository of {shown_path(store.root)} has this path "
                             f"(known: {listed or 'none'})")
    return wanted if wanted in matching else matching[0]


def parse_time(text: str) -> float:
    """--now: unix seconds or an ISO 8601 time, finite and within the years 1 to 9999."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise usage_error(f"--now {text!r}: give unix seconds or an ISO 8601 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        seconds = moment.timestamp()
    try:  # nan, inf, 1e400 and times no calendar holds would be compared with every horizon, and recorded
        datetime.fromtimestamp(seconds, timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise usage_error(f"--now {text!r}: must be a finite time (unix seconds or ISO 8601) "
                          "between the years 1 and 9999") from None
    return seconds
