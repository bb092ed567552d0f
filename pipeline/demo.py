"""`loopmeter demo`: sample data made by the project, every stage run on it, the key tables shown."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .warehouse import Warehouse

SAMPLE_PLANS = (("sample-tail-30", 30, "2"), ("sample-evidence-5", 5, "2"), ("sample-legacy-5", 5, "1"))


@dataclass
class DemoOutcome:
    sample: Path
    warehouse: Path
    aggregate: Path
    report: Path
    steps: list[str] = field(default_factory=list)


def make_forgeloop_sample(directory: Path) -> Path:
    """ForgeLoop run sets in ForgeLoop's layout (deterministic; made once)."""
    from .forgeloop.samples import RunSetPlan, write_results

    if not (directory / "raw").is_dir():
        write_results(directory, [RunSetPlan(run_set, runs, version) for run_set, runs, version in SAMPLE_PLANS], seed=2026)
    return directory


def run_demo(data: Path, warehouse: Warehouse) -> DemoOutcome:
    from .catalog import refresh_catalog
    from .forgeloop.ingest import ingest_forgeloop
    from .forgeloop.stage import compute, store_tables, write_documents

    results = make_forgeloop_sample(data / "sample" / "forgeloop")
    outcome = DemoOutcome(results, warehouse.root, warehouse.root / "aggregate", warehouse.root / "report.html")
    with warehouse.lock(command="demo"):
        ingested = ingest_forgeloop(warehouse, results, results / "scenarios")
        outcome.steps.append(f"ingest forgeloop: {ingested.accepted + ingested.unchanged} runs in {len(ingested.run_sets)} run sets, {ingested.rejected} rejected")
        aggregated = compute(warehouse, tier=None)
        write_documents(aggregated, outcome.aggregate)
        store_tables(warehouse, aggregated.analysis, None)
        outcome.steps.append(f"aggregate: {len(aggregated.written)} ForgeLoop documents")
        refresh_catalog(warehouse)
    from .html import build_page
    from .warehouse import atomic_write_text

    atomic_write_text(outcome.report, build_page(warehouse))
    outcome.steps.append(f"report html: {outcome.report}")
    outcome.result = aggregated  # type: ignore[attr-defined]
    return outcome
