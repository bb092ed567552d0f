"""`loopmeter demo`: sample data made by the project, every stage run on it, the key tables shown.

The samples are deterministic and made once under `data/sample/`: ForgeLoop run sets in
ForgeLoop's layout, and a Forge store with small git repositories (dated commits,
`--no-ff` merges, a revert, rewrites) for the survival harvest.
"""
from __future__ import annotations

import json
from pathlib import Path

from .stages import AllStages, run_all
from .storage import Warehouse

SAMPLE_PLANS = (("sample-tail-30", 30, "2"), ("sample-evidence-5", 5, "2"), ("sample-legacy-5", 5, "1"))
FORGE_RUNS = 400
HORIZONS = (7, 14, 30)  # the demo's survival horizons, days: the HTML report draws a curve through them


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


def run_demo(data: Path, warehouse: Warehouse, wait: bool = False) -> AllStages:
    """Make the samples (once) and run every stage on them (`wait`: for another writer's lock)."""
    results = make_forgeloop_sample(data / "sample" / "forgeloop")
    store_path, now = make_forge_sample(data / "sample" / "forge")
    # the sample's git repositories are the demo's own: harvest them even under a temporary directory
    return run_all(warehouse, results=results, scenarios=results / "scenarios", forge_store=store_path, now=now,
                   horizon_days=HORIZONS, include_temp=True, wait=wait)
