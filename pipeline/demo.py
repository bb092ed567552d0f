"""`loopmeter demo`: sample data made by the project, every stage run on it, the key tables shown.

The samples are deterministic and made once under `data/sample/`: ForgeLoop run sets in
ForgeLoop's layout, and a Forge store with small git repositories (dated commits,
`--no-ff` merges, a revert, rewrites) for the survival harvest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .warehouse import Warehouse

SAMPLE_PLANS = (("sample-tail-30", 30, "2"), ("sample-evidence-5", 5, "2"), ("sample-legacy-5", 5, "1"))
FORGE_RUNS = 400


@dataclass
class DemoOutcome:
    sample: Path
    warehouse: Path
    aggregate: Path
    report: Path
    steps: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # the Forge reports, as text


def make_forgeloop_sample(directory: Path) -> Path:
    """ForgeLoop run sets in ForgeLoop's layout (deterministic; made once)."""
    from .forgeloop.samples import RunSetPlan, write_results

    if not (directory / "raw").is_dir():
        write_results(directory, [RunSetPlan(run_set, runs, version) for run_set, runs, version in SAMPLE_PLANS], seed=2026)
    return directory


def make_forge_sample(directory: Path) -> tuple[Path, float]:
    """A Forge store and its git repositories (made once); returns the store and the moment
    the sample's survival is measured at."""
    from .forge.samples import write_sample

    marker = directory / "sample.json"
    if not marker.exists():
        info = write_sample(directory, runs=FORGE_RUNS)
        marker.write_text(json.dumps({"now": info["now"], "events": info["events"]}) + "\n")
    return directory / "dataset.sqlite", json.loads(marker.read_text())["now"]


def run_demo(data: Path, warehouse: Warehouse) -> DemoOutcome:
    from .catalog import refresh_catalog
    from .forgeloop.ingest import ingest_forgeloop
    from .forgeloop.stage import compute, store_tables, write_documents
    from .html import build_page
    from .warehouse import atomic_write_text

    results = make_forgeloop_sample(data / "sample" / "forgeloop")
    store_path, now = make_forge_sample(data / "sample" / "forge")
    outcome = DemoOutcome(data / "sample", warehouse.root, warehouse.root / "aggregate", warehouse.root / "report.html")
    with warehouse.lock(command="demo"):
        ingested = ingest_forgeloop(warehouse, results, results / "scenarios")
        outcome.steps.append(f"ingest forgeloop: {ingested.accepted + ingested.unchanged} runs in {len(ingested.run_sets)} run sets, {ingested.rejected} rejected")
        aggregated = compute(warehouse, tier=None)
        write_documents(aggregated, outcome.aggregate)
        store_tables(warehouse, aggregated.analysis, None)
        outcome.steps.append(f"aggregate: {len(aggregated.written)} ForgeLoop documents")
        outcome.steps += _forge_stages(warehouse, store_path, now, outcome)
        refresh_catalog(warehouse)
        atomic_write_text(outcome.report, build_page(warehouse))
    outcome.steps.append(f"report html: {outcome.report}")
    outcome.result = aggregated  # type: ignore[attr-defined]
    return outcome


def _forge_stages(warehouse: Warehouse, store_path: Path, now: float, outcome: DemoOutcome) -> list[str]:
    """ingest forge, report routing, harvest survival, report survival (the caller holds the lock)."""
    from .forge.ingest import ingest_forge
    from .forge.reports import (
        routing_document, routing_frames, routing_scope, routing_text, survival_document, survival_frame, survival_text,
    )
    from .forge.survival import harvest, record
    from .forge.tables import SURVIVAL

    ingested = ingest_forge(warehouse, store_path)
    scope = routing_scope(None, None)
    routing = routing_document(warehouse, scope)
    for name, frame in routing_frames(routing, scope).items():
        warehouse.write_table(name, frame)
    # the sample's repositories are the demo's own: harvest them even under a temporary directory
    harvested = harvest(warehouse, now=now, include_temp=True)
    recorded = record(warehouse, harvested)
    survival = survival_document(warehouse)
    warehouse.write_table(SURVIVAL, survival_frame(survival))
    outcome.texts += [routing_text(routing), survival_text(survival)]
    return [
        f"ingest forge: {ingested.stored} new events ({ingested.read} read, {ingested.rejected} rejected)",
        f"report routing: {len(routing['observational'])} observational rows, "
        f"{sum(1 for row in routing['randomized'] if 'note' not in row)} randomized pairs",
        f"harvest survival: {recorded} outcomes recorded ({harvested.git_processes} git processes)",
    ]
