"""Every stage in order, on real data (`run_all`) or on the project's own samples (`demo`).

The samples are deterministic and made once under `<data>/sample/`: ForgeLoop run sets in
ForgeLoop's layout, and a Forge store with small git repositories (dated commits, `--no-ff`
merges, a revert, rewrites) for the survival harvest.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..errors import LoopmeterError, shown_path, usage_error
from ..storage import Warehouse
from ..storage.marker import is_marked
from .checks import AGGREGATE_HINT, check_choice, check_utf8_path, inside_aggregate, refuse_inside_warehouse
from .common import open_warehouse

SAMPLE_PLANS = (("sample-tail-30", 30, "2"), ("sample-evidence-5", 5, "2"), ("sample-legacy-5", 5, "1"))
FORGE_RUNS = 400
HORIZONS = (7, 14, 30)  # the demo's survival horizons, days: the HTML report draws a curve through them


@dataclass
class AllStages:
    warehouse: Path
    aggregate: Path
    report: Path | None  # None: no page written (a warehouse on object storage keeps none)
    steps: list[str] = field(default_factory=list)  # one line per stage, for people
    texts: list[str] = field(default_factory=list)  # the Forge reports, as text
    rejected: int = 0  # inputs rejected by the ingests
    unharvested: int = 0  # integrations or tasks the harvest could not measure (tried again next time)
    notes: list[str] = field(default_factory=list)  # what a user should know about the numbers (shown on stderr)
    forgeloop: object = None  # the ForgeLoop aggregate (stage.Aggregated)
    confidence: dict | None = None  # the `report confidence` document of every run set
    sample: Path | None = None  # the demo's sample data

    def as_dict(self) -> dict:
        return {
            "steps": self.steps,
            "sample": None if self.sample is None else str(self.sample),
            "warehouse": str(self.warehouse),
            "aggregate": None if self.forgeloop is None else str(self.aggregate),  # no ForgeLoop data: none written
            "report": None if self.report is None else str(self.report),
            "rejected": self.rejected,
            "unharvested": self.unharvested,
            "notes": self.notes,
        }


def run_all(results: str | os.PathLike | None = None, *, scenarios: str | os.PathLike | None = None,
            forge: str | os.PathLike | None = None, warehouse: str | os.PathLike | Warehouse | None = None,
            out: str | os.PathLike | None = None, tier: str | None = None, horizon_days: int | Sequence[int] = 14,
            now: float | None = None, include_temp: bool = False, engine: str = "local", workers: int | None = None,
            bucket_runs: int = 20_000, spark_master: str | None = None, wait: bool = False,
            on_step: Callable[[str], None] = lambda line: None) -> AllStages:
    """ingest forgeloop (its run files read by `engine`, as `ingest_forgeloop`'s), aggregate (with the
    confidence intervals; its buckets computed by `engine`, as `aggregate`'s); ingest forge (with the
    routing tables; its summaries' parts computed by `engine`, as `ingest_forge`'s), harvest survival;
    the catalog and the HTML report: under one hold of the warehouse lock. `on_step` is told each
    stage's line as the stage ends."""
    from ..engines import Engine
    from ..forgeloop.contract import TIERS

    if results is None and forge is None:
        raise usage_error("give RESULTS (ForgeLoop), --forge STORE (Forge), or both")
    check_choice("--tier", tier, TIERS)
    computing = Engine(engine, workers, bucket_runs, spark_master)
    for path, what in ((results, "RESULTS"), (scenarios, "--scenarios"), (forge, "--forge"), (out, "--out")):
        check_utf8_path(path, what)
    store = open_warehouse(warehouse, writing=True)
    if out is not None:
        refuse_inside_warehouse("--out", Path(out), store.root, inside_aggregate, AGGREGATE_HINT)
    return _run_all(store, results=None if results is None else Path(results),
                    scenarios=None if scenarios is None else Path(scenarios),
                    forge_store=None if forge is None else Path(forge), out=None if out is None else Path(out), tier=tier,
                    horizon_days=horizon_days, now=now, include_temp=include_temp, engine=computing, wait=wait,
                    on_step=on_step)


def _run_all(store: Warehouse, *, results: Path | None, scenarios: Path | None, forge_store: Path | None, out: Path | None,
             tier: str | None, horizon_days, now: float | None, include_temp: bool, wait: bool,
             on_step: Callable[[str], None], engine=None) -> AllStages:
    from ..html import build_page
    from ..storage.files import atomic_write
    from ..storage.remote import is_mirror
    from .common import writing

    outcome = AllStages(store.root, out or store.root / "aggregate", store.root / "report.html")

    def step(line: str) -> None:
        outcome.steps.append(line)
        on_step(line)

    with writing(store, wait=wait, command="run-all"):
        if results is not None:
            _forgeloop(store, results, scenarios, tier, outcome, step, engine)
        if forge_store is not None:
            _forge(store, forge_store, horizon_days, now, include_temp, outcome, step, engine)
        from ..storage.catalog import refresh_catalog

        refresh_catalog(store)  # the page is written last; the catalog is built again as the block ends, unchanged
        if is_mirror(store.root):  # only tables, documents and state are published there
            outcome.report = None
        else:
            page = build_page(store, confidence=outcome.confidence)
            atomic_write(outcome.report, page.encode())
    step(f"report html: {shown_path(outcome.report)}" if outcome.report is not None else
         "report html: not written (a warehouse on object storage keeps no page: `loopmeter report html --out FILE` "
         "writes one here)")
    return outcome


def _forgeloop(store: Warehouse, results: Path, scenarios: Path | None, tier: str | None, outcome: AllStages,
               step: Callable[[str], None], engine=None) -> None:
    from ..forgeloop.ingest import ingest_forgeloop
    from ..forgeloop.aggregation import aggregate
    from ..engines import Engine
    from .forgeloop import store_confidence

    ingested = ingest_forgeloop(store, results, scenarios, engine=engine or Engine())
    outcome.rejected += ingested.rejected
    step(f"ingest forgeloop: {ingested.accepted + ingested.unchanged} runs in {len(ingested.run_sets)} run sets, "
         f"{ingested.rejected} rejected")
    aggregated = aggregate(store, outcome.aggregate, tier, full=True, engine=engine or Engine())
    outcome.forgeloop = aggregated
    step(f"aggregate: {len(aggregated.written)} ForgeLoop documents in {shown_path(outcome.aggregate)}")
    outcome.confidence = store_confidence(store)
    verdicts = [entry["verdict"] for entry in outcome.confidence["objectives"]]
    step(f"report confidence: {len(outcome.confidence['rows'])} intervals; light objectives "
         f"{verdicts.count('MET')} met, {verdicts.count('VIOLATED')} violated, {verdicts.count('INCONCLUSIVE')} inconclusive"
         + (f", {verdicts.count('NOT_VERIFIED')} not verified" if "NOT_VERIFIED" in verdicts else ""))
    unknown = aggregated.unknown_scenarios_note()
    if unknown:  # as `aggregate` says it
        outcome.notes.append(unknown + ("" if scenarios is not None else " (pass --scenarios DIR); the reports list only "
                                                                         "scenarios with a file"))


def _forge(store: Warehouse, store_path: Path, horizon_days, now: float | None, include_temp: bool, outcome: AllStages,
           step: Callable[[str], None], engine=None) -> None:
    from ..engines import Engine
    from ..forge import tables as t
    from ..forge.reports import skipped_temp_note
    from ..forge.ingest import ingest_forge
    from ..forge.reports import harvest_days, routing_text, survival_document, survival_frame, survival_text
    from ..forge.survival import harvest_horizons, record
    from .forge import store_routing

    ingested = ingest_forge(store, store_path, engine=engine or Engine())
    outcome.rejected += ingested.rejected
    step(f"ingest forge: {ingested.stored} new events ({ingested.read} read, {ingested.rejected} rejected)")
    routing, srm = store_routing(store)
    pairs = sum(1 for row in routing["randomized"] if "note" not in row)
    step(f"report routing: {len(routing['observational'])} observational rows, {pairs} randomized pairs")
    horizons = [horizon_days] if isinstance(horizon_days, int) else list(horizon_days)
    harvested = harvest_horizons(store, horizons=horizons, now=now, include_temp=include_temp)
    recorded = record(store, harvested)
    outcome.unharvested += harvested.problems
    skipped = skipped_temp_note(harvested)
    if skipped:
        outcome.notes.append(skipped)
    already = sum(result.counts.get("already", 0) for result in harvested.results)
    step(f"harvest survival: {recorded} outcomes recorded at {harvest_days([r.horizon_days for r in harvested.results])}"
         + (f" ({already} recorded before)" if already else "")
         + (f"; {harvested.problems} could not be measured" if harvested.problems else ""))
    survival = survival_document(store)
    store.write_table(t.SURVIVAL, survival_frame(survival))
    outcome.texts += [routing_text(routing, srm=srm), survival_text(survival)]


def demo(data: str | os.PathLike = "data", *, warehouse: str | os.PathLike | Warehouse | None = None,
         wait: bool = False, on_step: Callable[[str], None] = lambda line: None) -> AllStages:
    """The sample data made once in `data/sample/` (deterministic), and every stage run on it."""
    store = open_warehouse(warehouse, writing=True)
    sample = Path(data).expanduser().resolve() / "sample"
    refuse_inside_warehouse("--data", Path(data).expanduser(), store.root,
                            hint="the sample goes in DATA/sample: give a folder outside the warehouse (by default its "
                                 "parent, data/)")
    if is_marked(sample.parent):
        raise usage_error(f"--data {shown_path(sample.parent)} is a loopmeter warehouse, whose entries are loopmeter's: "
                          "give a folder of its own for the sample")
    made = []

    def step(line: str) -> None:
        made.append(line)
        on_step(line)

    kept = (sample / "forgeloop" / "raw").is_dir()
    results = make_forgeloop_sample(sample / "forgeloop")
    step(f"sample ForgeLoop run sets: {'kept from before' if kept else 'made'} in {results}")
    kept = (sample / "forge" / "sample.json").exists()
    forge_store, now = make_forge_sample(sample / "forge")
    step(f"sample Forge store and git repositories: {'kept from before' if kept else 'made'} in {forge_store.parent}")
    outcome = _run_all(store, results=results, scenarios=results / "scenarios", forge_store=forge_store, out=None,
                       tier=None, horizon_days=list(HORIZONS), now=now, include_temp=True, wait=wait, on_step=on_step)
    outcome.steps[:0] = made
    outcome.sample = sample
    return outcome


def make_forgeloop_sample(directory: Path) -> Path:
    """ForgeLoop run sets in ForgeLoop's layout (deterministic; made once)."""
    from ..forgeloop.samples import RunSetPlan, write_results
    from ..storage.files import remove_tree

    if not (directory / "raw").is_dir():
        # made aside and renamed into place whole: a demo stopped meanwhile leaves no half sample to keep
        partial = directory.with_name(f".{directory.name}.partial")
        remove_tree(partial)
        write_results(partial, [RunSetPlan(run_set, runs, version) for run_set, runs, version in SAMPLE_PLANS], seed=2026)
        remove_tree(directory)  # what an earlier demo stopped before the rename left
        os.rename(partial, directory)
    return directory


def make_forge_sample(directory: Path) -> tuple[Path, float]:
    """A Forge store and its git repositories (made once); returns the store and the moment the
    sample's survival is measured at."""
    from ..forge.samples import write_sample
    from ..storage.files import remove_tree

    marker = directory / "sample.json"
    if not marker.exists():
        # its store names its repositories by absolute path, so it is made in place, its record last: a
        # folder without the record is a demo stopped midway (repositories half made), made again from nothing
        remove_tree(directory)
        info = write_sample(directory, runs=FORGE_RUNS)
        marker.write_text(json.dumps({"now": info["now"], "events": info["events"]}) + "\n")
    try:
        return directory / "dataset.sqlite", json.loads(marker.read_text())["now"]
    except (OSError, ValueError, KeyError, TypeError):
        raise LoopmeterError(f"{marker} is not the sample's record; remove {directory} to make the sample again") from None
