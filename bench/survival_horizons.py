"""What several horizons cost beside as many harvests: one `harvest_horizons` against one
`harvest` per horizon, on a repository with many integrations.

    .venv/bin/python bench/survival_horizons.py [--extra-runs 60] [--tasks-per-run 4] [--files 6]
                                                [--horizons 7 14 30] [--later-days 60]

The git sample (`samples.build_git_sample`) with EXTRA_RUNS more integrations, harvested
--later-days after the sample's own moment (so no horizon is still ahead). Printed per way:
wall time, git processes and blames; the outcomes of both ways must be equal.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loopmeter.forge import samples  # noqa: E402
from loopmeter.forge.git import Git  # noqa: E402
from loopmeter.forge.ingest import ingest_forge  # noqa: E402
from loopmeter.forge.survival import harvest, harvest_horizons  # noqa: E402
from loopmeter.storage import Warehouse  # noqa: E402


class Blames:
    """Counts `Git.blame_counts` calls (the real method still runs)."""

    def __init__(self):
        self.calls = 0
        self._real = Git.blame_counts

    def __enter__(self):
        counter = self

        def counted(git, rev, path):
            counter.calls += 1
            return counter._real(git, rev, path)

        Git.blame_counts = counted
        return self

    def __exit__(self, *exc):
        Git.blame_counts = self._real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra-runs", type=int, default=60)
    parser.add_argument("--tasks-per-run", type=int, default=4)
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--horizons", type=int, nargs="+", default=[7, 14, 30])
    parser.add_argument("--later-days", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="survival-horizons-bench-"))
    try:
        sample = samples.build_git_sample(root / "repos", extra_runs=args.extra_runs, tasks_per_run=args.tasks_per_run,
                                          files=args.files)
        store = samples.write_sqlite(root / "store" / "dataset.sqlite", sample.repos, sample.events)
        warehouse = Warehouse(root / "warehouse")
        ingest_forge(warehouse, store)
        now = sample.now + args.later_days * 86400
        options = dict(include_temp=True, now=now, workers=args.workers)
        harvest(warehouse, horizon_days=args.horizons[0], **options)  # warm the page cache and imports
        singles, processes, started = [], 0, time.perf_counter()
        with Blames() as single_blames:
            for days in args.horizons:
                result = harvest(warehouse, horizon_days=days, **options)
                singles.append(result)
                processes += result.git_processes
        single_seconds = time.perf_counter() - started
        started = time.perf_counter()
        with Blames() as multi_blames:
            found = harvest_horizons(warehouse, horizons=args.horizons, **options)
        multi_seconds = time.perf_counter() - started
        same = [(o["rid"], o["data"]) for r in singles for o in r.outcomes] == [(o["rid"], o["data"]) for o in found.outcomes]
        integrations = len(sample.expected["runs"])
        print(f"{integrations} integrations, {len(found.outcomes)} outcomes at {args.horizons} days; "
              f"the same as one harvest per horizon: {same}")
        print(f"one harvest per horizon: {single_seconds:.2f} s, {processes} git processes, {single_blames.calls} blames")
        print(f"one harvest of all:      {multi_seconds:.2f} s, {found.git_processes} git processes, "
              f"{multi_blames.calls} blames")
        print(f"ratio: {multi_seconds / single_seconds:.2f} of the time, {found.git_processes / processes:.2f} of the processes")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
