"""Benchmark: what `aggregate` holds in memory as the warehouse grows, per engine, and what adding one
run set costs.

    python bench/aggregate_scale.py [--runs 10000 100000] [--keep DIR] [--workers 2] [--add-only]

For each size it generates run sets (deterministic, as bench/forgeloop_bench.py does; kept under
--keep between runs), ingests them into a warehouse, and measures, each in a fresh process:

  aggregate local    loopmeter aggregate --full (buckets of whole run sets, one after the other)
  aggregate pool     loopmeter aggregate --full --engine pool --workers W (peak: the largest process)
  add one run set    loopmeter ingest forgeloop of one new run set (2,520 runs), then loopmeter aggregate
                     (which computes that run set only): time and memory, each command's peak
  that run set alone the same two commands into an empty warehouse, and bench/forgeloop_port.py (a port
                     of ForgeLoop's per-run aggregator) on that run set alone

and prints wall time, CPU time (user + system, worker processes included), peak memory (max RSS of
one process), and the ratios between sizes. The machines are shared and noisy: only ratios measured
in the same run mean anything. With --add-only, only adding one run set is measured (after an
untimed full aggregate).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
sys.path.insert(0, str(ROOT / "bench"))

from forgeloop_bench import MEASURE, generate  # noqa: E402

LOOPMETER = [PYTHON, "-m", "loopmeter"]


def measure(command: list[str]) -> tuple[float, float, float] | str:
    """(wall seconds, peak MiB of the largest process, CPU seconds) of `command`, or the last line
    it printed when it failed."""
    output = subprocess.run([PYTHON, "-c", MEASURE, *command], capture_output=True, text=True)
    if output.returncode != 0:
        return (output.stderr.strip().splitlines() or ["failed"])[-1]
    seconds, rss_kib, cpu = output.stdout.split()
    return float(seconds), int(rss_kib) / 1024, float(cpu)


def added(place: Path) -> Path:
    """One new run set of 2,520 runs (7 scenarios, 3 modes, 120 repeats)."""
    from loopmeter.forgeloop.samples import SCENARIOS, RunSetPlan, write_results

    if not (place / "scenarios").exists():
        write_results(place, [RunSetPlan("added-run-set", 120, "2", tuple(SCENARIOS))], seed=101)
    return place


def add_one(warehouse: Path, extra: Path, out: Path) -> dict:
    ingest = measure([*LOOPMETER, "ingest", "forgeloop", str(extra), "--warehouse", str(warehouse), "--quiet"])
    aggregate = measure([*LOOPMETER, "aggregate", "--warehouse", str(warehouse), "--out", str(out), "--quiet"])
    return {"ingest": ingest, "aggregate": aggregate}


def bench(runs: int, keep: Path, workers: int, work: Path, add_only: bool = False) -> dict:
    data = keep / f"forgeloop-{runs}"
    written = generate(data, runs)
    stored = keep / f"warehouse-{runs}"
    if not (stored / ".loopmeter").exists():
        shutil.rmtree(stored, ignore_errors=True)
        subprocess.run([*LOOPMETER, "ingest", "forgeloop", str(data), "--scenarios", str(data / "scenarios"),
                        "--warehouse", str(stored), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    warehouse = work / f"w-{runs}"
    shutil.copytree(stored, warehouse, symlinks=True)
    results = {"runs": written}
    if add_only:  # the full aggregate the added run set is measured against, not timed
        subprocess.run([*LOOPMETER, "aggregate", "--full", "--warehouse", str(warehouse), "--out",
                        str(work / f"pool-{runs}"), "--quiet"], check=True, stdout=subprocess.DEVNULL)
        results["add one"] = add_one(warehouse, added(keep / "added"), work / f"pool-{runs}")
        shutil.rmtree(warehouse)
        return results
    results["aggregate local"] = measure([*LOOPMETER, "aggregate", "--full", "--warehouse", str(warehouse), "--out",
                                          str(work / f"local-{runs}"), "--quiet"])
    results["aggregate pool"] = measure([*LOOPMETER, "aggregate", "--full", "--engine", "pool", "--workers", str(workers),
                                         "--warehouse", str(warehouse), "--out", str(work / f"pool-{runs}"), "--quiet"])
    same = subprocess.run(["diff", "-rq", str(work / f"local-{runs}"), str(work / f"pool-{runs}")], capture_output=True)
    results["same documents"] = same.returncode == 0
    # into the place of the last aggregate (the pool's), so it computes the new run set only
    results["add one"] = add_one(warehouse, added(keep / "added"), work / f"pool-{runs}")
    shutil.rmtree(warehouse)
    return results


def alone(keep: Path, work: Path) -> dict:
    extra = added(keep / "added")
    results = add_one(work / "alone", extra, work / "alone-out")
    results["port"] = measure([PYTHON, str(ROOT / "bench" / "forgeloop_port.py"), str(extra), str(extra / "scenarios"),
                               str(work / "port-out")])
    return results


def line(name: str, sample: tuple[float, float, float] | str) -> str:
    if isinstance(sample, str):
        return f"  {name:<26} FAILED: {sample}"
    seconds, rss, cpu = sample
    return f"  {name:<26} {seconds:7.2f} s   cpu {cpu:7.2f} s   peak {rss:7.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "loopmeter-bench")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--add-only", action="store_true", help="measure adding one run set only")
    options = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="loopmeter-scale-"))
    try:
        base = alone(options.keep, work)
        print("one run set of 2,520 runs alone (an empty warehouse)", flush=True)
        print(line("ingest", base["ingest"]), line("aggregate", base["aggregate"]), line("port (aggregate)", base["port"]),
              sep="\n", flush=True)
        collected = []
        for runs in options.runs:
            results = bench(runs, options.keep, options.workers, work, options.add_only)
            collected.append(results)
            print(f"{results['runs']} runs stored", flush=True)
            for name in ("aggregate local", "aggregate pool"):
                if name in results:
                    print(line(name, results[name]))
            if "same documents" in results:
                print(f"  pool's documents identical to local's: {'yes' if results['same documents'] else 'NO'}")
            for step in ("ingest", "aggregate"):
                sample = results["add one"][step]
                print(line(f"add one run set: {step}", sample) + ("" if isinstance(sample, str) else
                      f"   ({sample[0] / base[step][0]:.2f}x time, {sample[1] / base[step][1]:.2f}x memory of alone)"))
            print(flush=True)
        for smaller, larger in zip(collected, collected[1:]):
            for name in ("aggregate local", "aggregate pool"):
                if name in larger and not isinstance(larger[name], str) and not isinstance(smaller[name], str):
                    print(f"  {name}: peak at {larger['runs']} runs / at {smaller['runs']}: "
                          f"{larger[name][1] / smaller[name][1]:.2f}x (runs {larger['runs'] / smaller['runs']:.0f}x)")
            for step in ("ingest", "aggregate"):
                big, small = larger["add one"][step], smaller["add one"][step]
                if not isinstance(big, str) and not isinstance(small, str):
                    print(f"  add one run set, {step}: at {larger['runs']} / at {smaller['runs']} stored: "
                          f"{big[0] / small[0]:.2f}x time, {big[1] / small[1]:.2f}x memory")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
