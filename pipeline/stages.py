"""Every stage in order, on real data (`loopmeter run-all`) or on the samples (`loopmeter demo`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .storage import Warehouse


@dataclass
class AllStages:
    warehouse: Path
    aggregate: Path
    report: Path
    steps: list[str] = field(default_factory=list)  # one line per stage, for people
    texts: list[str] = field(default_factory=list)  # the Forge reports, as text
    rejected: int = 0  # inputs rejected by the ingests
    unharvested: int = 0  # integrations or tasks the harvest could not measure (tried again next time)
    notes: list[str] = field(default_factory=list)  # what a user should know about the numbers (shown on stderr)
    forgeloop: object = None  # the ForgeLoop aggregate (stage.Aggregated)
    confidence: dict | None = None  # the `report confidence` document of every run set


def run_all(
    warehouse: Warehouse,
    *,
    results: Path | None = None,
    scenarios: Path | None = None,
    forge_store: Path | None = None,
    out: Path | None = None,
    tier: str | None = None,
    horizon_days: int | Sequence[int] = 14,
    now: float | None = None,
    include_temp: bool = False,
    wait: bool = False,
) -> AllStages:
    """ingest forgeloop, aggregate, report confidence; ingest forge, report routing (and srm), harvest
    survival, report survival; the catalog and the HTML report — under one hold of the warehouse lock."""
    from .storage.catalog import refresh_catalog
    from .html import build_page
    from .storage.files import atomic_write

    outcome = AllStages(warehouse.root, out or warehouse.root / "aggregate", warehouse.root / "report.html")
    with warehouse.lock(wait=wait, command="run-all"):
        if results is not None:
            _forgeloop(warehouse, results, scenarios, tier, outcome)
        if forge_store is not None:
            _forge(warehouse, forge_store, horizon_days, now, include_temp, outcome)
        refresh_catalog(warehouse)
        page = build_page(warehouse, forgeloop=outcome.forgeloop, confidence=outcome.confidence)
        atomic_write(outcome.report, page.encode())
    outcome.steps.append(f"report html: {outcome.report}")
    return outcome


def _forgeloop(warehouse: Warehouse, results: Path, scenarios: Path | None, tier: str | None, outcome: AllStages) -> None:
    from .forgeloop.confidence import confidence_frames, confidence_report
    from .forgeloop.ingest import ingest_forgeloop
    from .forgeloop.stage import compute, publish

    ingested = ingest_forgeloop(warehouse, results, scenarios)
    outcome.rejected += ingested.rejected
    outcome.steps.append(
        f"ingest forgeloop: {ingested.accepted + ingested.unchanged} runs in {len(ingested.run_sets)} run sets, "
        f"{ingested.rejected} rejected"
    )
    aggregated = compute(warehouse, tier=tier)
    publish(warehouse, aggregated, outcome.aggregate)
    outcome.forgeloop = aggregated
    outcome.steps.append(f"aggregate: {len(aggregated.written)} ForgeLoop documents in {outcome.aggregate}")
    outcome.confidence = confidence_report(warehouse)
    with warehouse.publishing():
        for name, frame in confidence_frames(outcome.confidence).items():
            warehouse.write_table(name, frame)
    verdicts = [entry["verdict"] for entry in outcome.confidence["objectives"]]
    outcome.steps.append(f"report confidence: {len(outcome.confidence['rows'])} intervals; light objectives "
                         f"{verdicts.count('MET')} met, {verdicts.count('VIOLATED')} violated, "
                         f"{verdicts.count('INCONCLUSIVE')} inconclusive")
    unknown = aggregated.unknown_scenarios_note()
    if unknown:  # as `aggregate` says it
        outcome.notes.append(unknown + ("" if scenarios is not None else " (pass --scenarios DIR); the reports list only scenarios with a file"))


def _forge(warehouse: Warehouse, store_path: Path, horizon_days: int | Sequence[int], now: float | None, include_temp: bool,
           outcome: AllStages) -> None:
    from .forge.ingest import ingest_forge
    from .forge.reports import (
        harvest_days, routing_frames, routing_scope, routing_text, survival_document, survival_frame, survival_text,
    )
    from .forge.srm import routing_and_srm, srm_frame
    from .forge.survival import harvest_horizons, record
    from .forge.tables import SRM, SURVIVAL

    ingested = ingest_forge(warehouse, store_path)
    outcome.rejected += ingested.rejected
    outcome.steps.append(f"ingest forge: {ingested.stored} new events ({ingested.read} read, {ingested.rejected} rejected)")
    scope = routing_scope(None, None)
    routing, srm = routing_and_srm(warehouse, scope)
    with warehouse.publishing():
        for name, frame in {**routing_frames(routing, scope), SRM: srm_frame(srm, scope)}.items():
            warehouse.write_table(name, frame)
    pairs = sum(1 for row in routing["randomized"] if "note" not in row)
    outcome.steps.append(f"report routing: {len(routing['observational'])} observational rows, {pairs} randomized pairs")
    horizons = [horizon_days] if isinstance(horizon_days, int) else list(horizon_days)
    harvested = harvest_horizons(warehouse, horizons=horizons, now=now, include_temp=include_temp)
    recorded = record(warehouse, harvested)
    outcome.unharvested += harvested.problems
    skipped = harvested.results[0].counts.get("skipped_temp", 0)  # per integration, the same at every horizon
    if skipped:
        outcome.notes.append(f"note: {skipped} integration(s) in repositories under the temporary directory were not harvested "
                             "(pass --include-temp to measure them)")
    already = sum(result.counts.get("already", 0) for result in harvested.results)
    outcome.steps.append(
        f"harvest survival: {recorded} outcomes recorded at {harvest_days([r.horizon_days for r in harvested.results])}"
        + (f" ({already} recorded before)" if already else "")
        + (f"; {harvested.problems} could not be measured" if harvested.problems else "")
    )
    survival = survival_document(warehouse)
    warehouse.write_table(SURVIVAL, survival_frame(survival))
    outcome.texts += [routing_text(routing, srm=srm), survival_text(survival)]
