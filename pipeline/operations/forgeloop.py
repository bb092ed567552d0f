"""ForgeLoop's use cases: ingest run files, aggregate them, read the reports, run a benchmark."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..config import DEFAULT_MAX_FILE_BYTES
from ..errors import LoopmeterError, shown_path, usage_error
from ..storage import Warehouse
from ..streamed import Streamed
from .checks import (
    AGGREGATE_HINT, check_choice, check_number, check_text, check_utf8_path, inside_aggregate, refuse_inside_warehouse,
)
from .common import open_warehouse, writing

REPORT_NAMES = ("outliers", "tail", "summary", "regression")
MAX_FILE_MB = 1024.0 * 1024  # 1 TiB: a limit beyond any run file, and still a count of bytes


@dataclass
class Ingested:
    """What `ingest_forgeloop` did: the ingest's result, and the aggregate when it aggregated too."""
    ingest: Any  # forgeloop.ingest.IngestResult
    aggregated: Any  # forgeloop.aggregation.Aggregated, or None
    warehouse: Path
    notes: list[str] = field(default_factory=list)  # for people

    def as_dict(self) -> dict:
        document = self.ingest.as_dict()
        if self.aggregated is not None:
            document["aggregate"] = self.aggregated.as_dict()
        return document


class Shown:
    """What a report shows: its document (what `--json` prints), and notes for people. `body` is the
    document, or a `Streamed` one (ForgeLoop's reports) that `print_json` prints as it is made,
    holding one run set's part at a time; reading `document` makes it whole."""

    def __init__(self, body: Any, notes: list[str] | None = None):
        self.body, self.notes = body, notes or []

    @property
    def document(self) -> Any:
        if isinstance(self.body, Streamed):
            self.body = self.body.document()
        return self.body


def ingest_forgeloop(results: str | os.PathLike, scenarios: str | os.PathLike | None = None, *,
                     warehouse: str | os.PathLike | Warehouse | None = None, max_file_mb: float = 16.0,
                     run_sets: list[str] | None = None, full: bool = False, then_aggregate: bool = False,
                     engine: str = "local", workers: int | None = None, spark_master: str | None = None,
                     batch_files: int | None = None, wait: bool = False) -> Ingested:
    """Read ForgeLoop's run files (`RESULTS/raw/<runSetId>/**/*.json`) and scenario files into the
    warehouse; with `then_aggregate`, aggregate them too (into `<warehouse>/aggregate`, its buckets
    computed by the same engine). The run files are read in batches of at most `batch_files` files
    (default 2000) or about 32 MiB, by this machine's worker processes once two batches wait
    (`engine="local"`: one per usable core), by exactly `workers` of them (`engine="pool"`, default
    one per usable core), or by the tasks of Spark jobs (`engine="spark"`, at `spark_master`, the
    executors reading the files at the same absolute paths): the same verdicts and tables whatever
    the engine."""
    check_number("--max-file-mb", max_file_mb, minimum=0, inclusive=False, maximum=MAX_FILE_MB)
    check_number("batch_files", batch_files, minimum=1)
    check_utf8_path(results, "RESULTS")
    check_utf8_path(scenarios, "--scenarios")
    from ..engines import Engine
    from ..forgeloop.ingest import ingest_forgeloop as ingest
    from ..forgeloop.tables import SCENARIOS
    from ..forgeloop.walk import no_raw_folder

    reading = Engine(engine, workers, master=spark_master)
    if not (Path(results) / "raw").is_dir():  # told before the warehouse is made
        raise no_raw_folder(Path(results))
    store = open_warehouse(warehouse, writing=True)
    with writing(store, wait=wait, command="ingest forgeloop"):
        result = ingest(store, Path(results), None if scenarios is None else Path(scenarios),
                        max_file_bytes=max(1, int(max_file_mb * 1024 * 1024)), run_sets=run_sets, full=full,
                        engine=reading, batch_files=None if batch_files is None else int(batch_files))
        aggregated = None
        if then_aggregate and store.has_table("runs"):
            from ..forgeloop import aggregation  # here: an ingest alone, of a tree unchanged, imports no engine

            aggregated = aggregation.aggregate(store, store.root / "aggregate", engine=reading)
    notes = []
    if scenarios is None and not store.has_table(SCENARIOS) and store.has_table("runs"):
        notes.append("note: no scenario files stored: report tail and summary list only scenarios with one, and "
                     "no light objective is judged; pass --scenarios DIR (ForgeLoop's scenario files)")
    return Ingested(result, aggregated, store.root, notes)


def aggregate(*, warehouse: str | os.PathLike | Warehouse | None = None, out: str | os.PathLike | None = None,
              run_set: str | None = None, tier: str | None = None, full: bool = False, confidence: bool = False,
              engine: str = "local", workers: int | None = None, bucket_runs: int = 20_000,
              spark_master: str | None = None, wait: bool = False):
    """ForgeLoop's aggregate documents (`<out>/<runSetId>/*.json`, default `<warehouse>/aggregate`) and
    the forgeloop_* tables, of the run sets that changed since the last aggregate (every one with
    `full`, one with `run_set`); with `confidence`, the intervals of `report_confidence` stored as
    forgeloop_confidence and forgeloop_objectives too. The run sets are computed in buckets of whole
    run sets of about `bucket_runs` runs, by this process (`engine="local"`), by `workers` worker
    processes (`engine="pool"`) or on Spark (`engine="spark"`, at `spark_master`): the same documents
    and tables whatever the engine. Returns
    `forgeloop.aggregation.Aggregated`."""
    from ..forgeloop.contract import TIERS

    check_choice("--tier", tier, TIERS)
    check_text("--run-set", run_set)
    from ..forgeloop import aggregation
    from ..engines import Engine

    computing = Engine(engine, workers, bucket_runs, spark_master)

    store = open_warehouse(warehouse)
    if out is not None:
        check_utf8_path(out, "--out")
        refuse_inside_warehouse("--out", Path(out), store.root, inside_aggregate, AGGREGATE_HINT)
    destination = Path(out) if out is not None else store.root / "aggregate"
    aggregation.require_runs(store, tier)
    with writing(store, wait=wait, command="aggregate"):
        result = aggregation.aggregate(store, destination, tier, full, run_set, computing)
        if confidence:
            store_confidence(store, run_set)
    return result


def store_confidence(store: Warehouse, run_set: str | None = None, settings=None) -> dict:
    """The intervals of every run set (or `run_set`) stored as forgeloop_confidence and
    forgeloop_objectives (the caller holds the lock); returns their document."""
    from ..forgeloop.confidence import Settings, confidence_frames, confidence_report

    document = confidence_report(store, run_set, settings or Settings())
    with store.publishing():
        for name, frame in confidence_frames(document).items():
            store.write_table(name, frame)
    return document


def forgeloop_report(name: str, *, warehouse: str | os.PathLike | Warehouse | None = None,
                     run_set: str | None = None) -> Shown:
    """One of ForgeLoop's reports (outliers, tail, summary, regression): the document ForgeLoop's
    script prints, read from what the last aggregate stored."""
    from ..forgeloop.reports import FRAMES_USED, REPORTS
    from ..forgeloop.stored import expected_profiles, stored_result

    check_choice("report", name, REPORT_NAMES, required=True)
    check_text("--run-set", run_set)
    store = open_warehouse(warehouse)
    profiles = expected_profiles(store)
    stored = stored_result(store, run_set, FRAMES_USED[name], profiles)
    notes = [] if profiles else ["note: no scenario files were ingested (ingest forgeloop --scenarios DIR): "
                                 "the report has no scenarios"]
    build, _, _ = REPORTS[name]
    return Shown(build(stored, sorted(profiles)), notes)


def report_html(*, warehouse: str | os.PathLike | Warehouse | None = None, out: str | os.PathLike | None = None,
                run_set: str | None = None) -> Path:
    """One self-contained HTML page of charts (default `<warehouse>/report.html`); returns where."""
    from ..forge.tables import TASKS
    from ..html import build_page
    from ..storage.files import write_output
    from ..storage.remote import is_mirror

    check_text("--run-set", run_set)
    store = open_warehouse(warehouse)
    if out is not None and os.fspath(out) == "-":
        raise usage_error("--out -: give the HTML file to write (e.g. report.html); the page is a file, never printed")
    if out is None and is_mirror(store.root):
        raise usage_error(f"{shown_path(store.root)} is on object storage, which keeps no page: give --out FILE "
                          "(a local file) for the report")
    page_path = store.root / "report.html" if out is None else Path(out)
    check_utf8_path(page_path, "--out")
    # the warehouse's own page (demo and run-all write it there) may be written again; nothing else inside
    refuse_inside_warehouse("--out", page_path, store.root, lambda relative: relative == Path("report.html"),
                            "inside it, only its own report.html (where demo and run-all write the page); or write it outside")
    if page_path.name in ("", ".", ".."):
        raise LoopmeterError(f"--out {shown_path(page_path)}: give the HTML file to write (e.g. report.html)")
    if page_path.is_dir():
        raise LoopmeterError(f"--out {shown_path(page_path)} is a directory; give the HTML file to write "
                             f"(e.g. {shown_path(page_path / 'report.html')})")
    if not store.has_table("runs") and not store.has_table(TASKS):
        raise LoopmeterError(f"no ForgeLoop runs and no Forge data in {shown_path(store.root)}; run `loopmeter ingest "
                             "forgeloop RESULTS` or `loopmeter ingest forge STORE` first (is --warehouse right?)")
    page = build_page(store, run_set)
    write_output(page_path, lambda path: path.write_text(page, encoding="utf-8"))
    return page_path.resolve()


def execute(*, adapter: str, scenarios: str | os.PathLike, output: str | os.PathLike | None = None,
            target: str | os.PathLike | None = None, tier: str | None = None, runs: int | None = None,
            run_set: str | None = None, only_scenarios: list[str] | None = None, resume: bool = False,
            keep_going: bool = False, until_resolved: bool = False, max_runs: int | None = None,
            warehouse: str | os.PathLike | Warehouse | None = None, wait: bool = False,
            on_note: Callable[[str], None] = lambda message: None):
    """Run a benchmark with an adapter (ForgeLoop's runner, without Node): the run files written in
    ForgeLoop's layout under `output` (default `<scenarios>/results`), then ingested and the run set
    aggregated into `<output>/aggregate`. With `until_resolved`, in rounds that stop each scenario
    once its objectives and overheads are settled on confidence sequences, at most `max_runs` (default
    30) runs per scenario and mode (docs/runner.md). Returns the runner's `Execution` (its
    `stopping`: each scenario's runs and why it stopped)."""
    from ..config import warehouse_dir
    from ..forgeloop.runner import execute as run_benchmark

    check_text("--run-set", run_set)
    store = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse_dir(warehouse))
    # absolute now: a Python adapter runs in this process, and may change its working directory
    scenarios = Path(scenarios).absolute()
    results = Path(output).absolute() if output is not None else scenarios / "results"
    check_utf8_path(scenarios, "--scenarios")
    check_utf8_path(results, "--output")
    refuse_inside_warehouse("--output", results, store.root)
    execution = run_benchmark(adapter_spec=adapter, scenarios_dir=Path(scenarios), results=results, target=target,
                              tier=tier, runs=runs, run_set_id=run_set, only_scenarios=only_scenarios, resume=resume,
                              keep_going=keep_going, until_resolved=until_resolved, max_runs=max_runs, on_note=on_note)
    if execution.documents:
        _aggregate_run_set(execution, Path(scenarios), store, wait)
    return execution


def _aggregate_run_set(execution, scenarios: Path, store: Warehouse, wait: bool) -> None:
    """Ingest the benchmark's RESULTS into the warehouse, then aggregate its run set into RESULTS/aggregate/."""
    from ..errors import WarehouseBusy
    from ..forgeloop import aggregation
    from ..forgeloop.ingest import ingest_forgeloop as ingest

    prefix = f"raw/{execution.run_set_id}/"
    try:
        with writing(store, wait=wait, command=f"execute {execution.run_set_id}"):
            ingested = ingest(store, execution.paths.results, scenarios, run_sets=[execution.run_set_id])
            own = [r for r in ingested.rejections if r[0].startswith(prefix)]
            if own:
                path, field_name, reason = own[0]
                raise LoopmeterError(f"ingest rejected {path}: {field_name}: {reason} ({len(own)} rejected in the run set)")
            execution.other_rejections = len(ingested.rejections)
            result = aggregation.aggregate(store, execution.paths.results / "aggregate", execution.tier,
                                     run_set=execution.run_set_id)
    except WarehouseBusy as error:  # only the lock raises it
        raise WarehouseBusy(
            f"{error}; the {execution.run_count} runs are written in {execution.paths.raw}: aggregate them later "
            f"with `loopmeter execute --resume --run-set {execution.run_set_id}` and the same options"
        ) from None
    execution.claims_allowed = result.documents[0].summary["claimsAllowed"]
    execution.aggregated = True


DEFAULT_MAX_FILE_MB = DEFAULT_MAX_FILE_BYTES / (1024 * 1024)
