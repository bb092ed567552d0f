"""Forge benchmarks: loopmeter against the seed's path on the same data.

    .venv/bin/python tests/forge_oracle/benchmark.py routing [--runs 42000] [--dir /tmp/forge-bench]
    .venv/bin/python tests/forge_oracle/benchmark.py survival [--extra-runs 20]

routing: the seed's path is load rows, parse data, build task records in Python, then its
observational and randomized; loopmeter's is `ingest forge` then `report routing` (and
`report routing` alone on the ingested warehouse). The two documents must be equal. Each round
prints both ratios with their targets; then the median round, and the peak RSS of `loopmeter
ingest forge` run once more in a fresh process (the ingest's own memory).
survival: git processes and time of the seed's harvest against loopmeter's, same outcomes.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from forge_oracle import export, routing as oracle_routing  # noqa: E402
from loopmeter.forge import samples  # noqa: E402


def seed_path(store: Path) -> tuple[dict, float]:
    started = time.perf_counter()
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    runs = export.Runs(export.Store(db))
    db.close()
    records = oracle_routing.tasks(runs)
    document = dict(observational=oracle_routing.observational(records), randomized=oracle_routing.randomized(records))
    return document, time.perf_counter() - started


# runs the CLI with the given arguments, then prints the process's peak RSS (VmHWM, KiB) on stderr
_CLI_PEAK = """
import sys
from loopmeter.cli import main
sys.argv = ["loopmeter", *sys.argv[1:]]
try:
    main()
except SystemExit as exit_:
    if exit_.code not in (0, None):
        raise
finally:
    print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0], file=sys.stderr)
"""


def routing(args) -> None:
    from loopmeter.forge.ingest import ingest_forge
    from loopmeter.forge.reports import routing_document, routing_scope
    from loopmeter.storage import Warehouse

    directory = Path(args.dir)
    store = directory / "dataset.sqlite"
    if not store.exists():
        directory.mkdir(parents=True, exist_ok=True)
        events = samples.routing_events(args.runs)
        samples.write_sqlite(store, [("api", "/x/api"), ("web", "/x/web"), ("infra", "/x/infra")], events)
    events = sqlite3.connect(f"file:{store}?mode=ro", uri=True).execute("SELECT count(*) FROM events").fetchall()[0][0]
    print(f"store: {events} events ({store.stat().st_size / 1e6:.0f} MB)")
    results = []
    for round_ in range(args.rounds):
        expected, seed_seconds = seed_path(store)
        shutil.rmtree(directory / "warehouse", ignore_errors=True)
        warehouse = Warehouse(directory / "warehouse")
        started = time.perf_counter()
        ingest = ingest_forge(warehouse, store)
        ingested = time.perf_counter()
        document = routing_document(warehouse, routing_scope(None, None))
        reported = time.perf_counter()
        assert json.dumps(document, sort_keys=True) == json.dumps(expected, sort_keys=True), "documents differ"
        report_seconds, total = reported - ingested, reported - started
        results.append((seed_seconds, ingested - started, report_seconds))
        print(f"round {round_ + 1}: seed path {seed_seconds:.2f} s | ingest {ingested - started:.2f} s "
              f"{ {k: round(v, 2) for k, v in ingest.timings.items()} } | report {report_seconds:.2f} s | "
              f"report {seed_seconds / report_seconds:.1f}x faster (target >= 10x), "
              f"ingest + report {seed_seconds / total:.1f}x faster (target >= 3x)")
    seeds, ingests, reports = (sorted(column)[len(column) // 2] for column in zip(*results))
    print(f"median of {len(results)}: seed path {seeds:.2f} s | ingest {ingests:.2f} s | report {reports:.2f} s | "
          f"report {seeds / reports:.1f}x faster (target >= 10x), "
          f"ingest + report {seeds / (ingests + reports):.1f}x faster (target >= 3x)")
    print(f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (this process, both paths)")
    # the ingest's own memory: `loopmeter ingest forge` in a fresh process, as a user runs it
    shutil.rmtree(directory / "warehouse-cli", ignore_errors=True)
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", _CLI_PEAK, "ingest", "forge", str(store), "--quiet",
                            "--warehouse", str(directory / "warehouse-cli")],
                           check=True, cwd=HERE.parent.parent, capture_output=True, text=True)
    cli_seconds = time.perf_counter() - started
    peak = int(child.stderr.strip().splitlines()[-1]) / 1024  # VmHWM, KiB (getrusage of a child counts the fork)
    print(f"ingest peak RSS {peak:.0f} MiB (`loopmeter ingest forge` in a fresh process, {cli_seconds:.2f} s "
          f"with interpreter start; target: bounded, a few hundred MiB)")


def survival(args) -> None:
    sys.path.insert(0, str(HERE.parent))
    from forge_fixtures import seed_harvest
    from loopmeter.forge.ingest import ingest_forge
    from loopmeter.forge.survival import harvest
    from loopmeter.storage import Warehouse

    root = Path(tempfile.mkdtemp(prefix="forge-survival-bench-"))
    sample = samples.build_git_sample(root / "repos", extra_runs=args.extra_runs, tasks_per_run=args.tasks_per_run,
                                      files=args.files)
    store = samples.write_sqlite(root / "store" / "dataset.sqlite", sample.repos, sample.events)
    warehouse = Warehouse(root / "warehouse")
    ingest_forge(warehouse, store)
    started = time.perf_counter()
    events, counts, processes = seed_harvest(store.parent, include_temp=True, now=sample.now)
    seed_seconds = time.perf_counter() - started
    started = time.perf_counter()
    mine = harvest(warehouse, include_temp=True, now=sample.now)
    mine_seconds = time.perf_counter() - started
    same = [(e["rid"], e["data"]) for _, e in events] == [(o["rid"], o["data"]) for o in mine.outcomes]
    print(f"{len(events)} outcomes, same as the seed: {same}")
    print(f"seed: {processes} git processes, {seed_seconds:.2f} s | loopmeter: {mine.git_processes} git processes, "
          f"{mine_seconds:.2f} s | {processes / mine.git_processes:.1f}x fewer processes (target >= 3x)")
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("routing")
    r.add_argument("--runs", type=int, default=42000, help="routed runs (about 23 events each)")
    r.add_argument("--dir", default="/tmp/forge-bench")
    r.add_argument("--rounds", type=int, default=3)
    s = sub.add_parser("survival")
    s.add_argument("--extra-runs", type=int, default=20)
    s.add_argument("--tasks-per-run", type=int, default=5)
    s.add_argument("--files", type=int, default=4)
    args = parser.parse_args()
    {"routing": routing, "survival": survival}[args.what](args)


if __name__ == "__main__":
    main()
