"""The `aggregate` stage: analyse the warehouse's runs, write ForgeLoop's documents, store the tables."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from ..errors import LoopmeterError
from ..jsjson import dumps
from ..warehouse import Warehouse, atomic_write_text
from .aggregate import RunSetDocuments, build_documents
from .analysis import Analysis, analyse
from .contract import TIERS
from .ingest import RUNS, SCENARIOS



@dataclass
class Aggregated:
    analysis: Analysis
    documents: list[RunSetDocuments]
    written: list[Path] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "runSets": [
                {
                    "runSetId": docs.run_set_id,
                    "scenarios": list(docs.scenarios),
                    "claimsAllowed": docs.summary["claimsAllowed"],
                    "scenariosWithoutFile": docs.unknown_scenarios,
                }
                for docs in self.documents
            ],
            "written": [str(path) for path in self.written],
        }


def expected_profiles(warehouse: Warehouse) -> dict[str, str]:
    """Scenario id -> expectedProfile, from the scenario files given at ingest."""
    frame = warehouse.read(SCENARIOS, columns=["scenario_id", "expected_profile"])
    return {} if frame is None else dict(frame.iter_rows())


def compute(warehouse: Warehouse, run_set: str | None = None, tier: str | None = None) -> Aggregated:
    """Analyse the runs (of one run set, or all) and assemble ForgeLoop's documents."""
    if not warehouse.has_table(RUNS):
        raise LoopmeterError(f"no runs in {warehouse.root}; run `loopmeter ingest forgeloop RESULTS` first")
    if tier is not None and tier not in TIERS:
        raise LoopmeterError(f"--tier must be one of {', '.join(TIERS)} (got {tier!r})")
    runs = warehouse.read(RUNS) if run_set is None else warehouse.read_partition(RUNS, "run_set_id", run_set)
    if runs is None or runs.height == 0:
        raise LoopmeterError(f"no run set {run_set!r} in {warehouse.root}" if run_set else f"no runs in {warehouse.root}")
    connection = duckdb.connect()
    try:
        connection.register("runs", runs.to_arrow())  # read once; every query scans it in memory
        analysis = analyse(connection, run_set)
    finally:
        connection.close()
    return Aggregated(analysis, build_documents(analysis, expected_profiles(warehouse), tier))


def publish(warehouse: Warehouse, result: Aggregated, out: Path, run_set: str | None = None) -> None:
    """What `aggregate` produces from a computed result: the documents under `out` and the
    forgeloop_* tables (the caller holds the warehouse lock)."""
    write_documents(result, out)
    store_tables(warehouse, result.analysis, run_set)


def write_documents(result: Aggregated, out: Path) -> None:
    """`out/<runSetId>/<scenarioId>.json` and `summary.json`, each replaced atomically."""
    for docs in result.documents:
        directory = Path(out) / docs.run_set_id
        for scenario, document in docs.scenarios.items():
            path = directory / f"{scenario}.json"
            atomic_write_text(path, dumps(document, 2) + "\n")
            result.written.append(path)
        path = directory / "summary.json"
        atomic_write_text(path, dumps(docs.summary, 2) + "\n")
        result.written.append(path)


def store_tables(warehouse: Warehouse, analysis: Analysis, run_set: str | None) -> None:
    """The analysis as BI tables, one file each (they are small: one row per scenario and mode,
    or per pair); with --run-set, the other run sets' rows are kept."""
    tables = {
        "forgeloop_mode_runs": analysis.mode_runs,
        "forgeloop_mode_stats": analysis.mode_stats.rename({"outlierCount": "outlier_count"}),
        "forgeloop_comparisons": analysis.comparisons,
        "forgeloop_paired_runs": analysis.paired_runs,
        "forgeloop_outliers": analysis.outliers,
        "forgeloop_outlier_fences": analysis.outlier_modes,
        "forgeloop_context_inflation": analysis.inflation,
    }
    for name, frame in tables.items():
        current = warehouse.read(name) if run_set is not None else None
        if current is not None:
            kept = current.filter(pl.col("run_set_id") != run_set)
            frame = pl.concat([kept, frame.select(kept.columns).cast(kept.schema)]).sort("run_set_id", maintain_order=True)
        warehouse.write_table(name, frame)
