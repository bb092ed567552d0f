"""Benchmark: `report confidence` over many runs and `compare` of two large run sets, beside the
ForgeLoop figures they build on, measured in the same run.

    python bench/statistics_bench.py [--runs 100000] [--compare-runs 20000] [--keep DIR] [--json FILE]

Generates (deterministically, kept in --keep or the temporary directory) `--runs` runs in run
sets of 20 runs per scenario and mode, and two run sets of `--compare-runs` runs each; ingests
them; then times, each in a fresh process (start-up included):

  aggregate            loopmeter aggregate --full: every ForgeLoop figure of every run set (the baseline)
  report confidence    loopmeter report confidence --json: 6 intervals of 2000 resamples per scenario and mode
  report tail          loopmeter report tail --json, beside it
  compare              loopmeter compare BASE CAND --json on the two large run sets
  aggregate (2 sets)   loopmeter aggregate --full of those two run sets (the baseline of compare)

and prints wall time, CPU time, peak memory (max RSS) and the ratios to the baselines
(`--json FILE` writes them for `bench/all.py --markdown`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forgeloop_bench import PYTHON, ROOT, generate, measure  # noqa: E402


def _large_pair(directory: Path, runs: int) -> int:
    sys.path.insert(0, str(ROOT))
    from loopmeter.forgeloop.contract import MODES
    from loopmeter.forgeloop.samples import SCENARIOS, RunSetPlan, write_results

    marker = directory / "runs.txt"
    if marker.exists():
        return int(marker.read_text())
    per_mode = max(1, round(runs / (len(MODES) * len(SCENARIOS))))
    plans = [RunSetPlan(name, per_mode, "2", tuple(SCENARIOS)) for name in ("baseline", "candidate")]
    written = write_results(directory, plans, seed=5)
    marker.write_text(str(written))
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--compare-runs", type=int, default=20_000, help="runs of each of the two compared run sets")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="where generated run sets are kept between runs")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    options = parser.parse_args()
    keep = options.keep or Path(tempfile.gettempdir()) / "loopmeter-bench"
    loopmeter = [PYTHON, "-m", "loopmeter"]
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="loopmeter-bench-statistics-"))

    many = keep / f"forgeloop-{options.runs}"
    written = generate(many, options.runs)
    warehouse = work / "many"
    subprocess.run([*loopmeter, "ingest", "forgeloop", str(many), "--scenarios", str(many / "scenarios"), "--warehouse",
                    str(warehouse), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    rows = {
        "aggregate": measure([*loopmeter, "aggregate", "--full", "--warehouse", str(warehouse), "--out",
                              str(work / "documents"), "--quiet"], options.repeat),
        "report confidence": measure([*loopmeter, "report", "confidence", "--json", "--warehouse", str(warehouse)],
                                     options.repeat),
        "report tail": measure([*loopmeter, "report", "tail", "--json", "--warehouse", str(warehouse)], options.repeat),
    }
    pair = keep / f"forgeloop-compare-{options.compare_runs}"
    pair_runs = _large_pair(pair, options.compare_runs)
    compared = work / "pair"
    subprocess.run([*loopmeter, "ingest", "forgeloop", str(pair), "--scenarios", str(pair / "scenarios"), "--warehouse",
                    str(compared), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    rows["aggregate (2 sets)"] = measure([*loopmeter, "aggregate", "--full", "--warehouse", str(compared), "--out",
                                          str(work / "pair-documents"), "--quiet"], options.repeat)
    rows["compare"] = measure([*loopmeter, "compare", "baseline", "candidate", "--json", "--warehouse", str(compared)],
                              options.repeat)
    print(f"{written} runs in run sets of 20 per scenario and mode; two run sets of {pair_runs // 2} runs to compare")
    for name, (seconds, rss, cpu) in rows.items():
        print(f"  {name:<20} {seconds:7.2f} s   cpu {cpu:7.2f} s   peak {rss:6.0f} MiB")
    confidence, aggregate = rows["report confidence"], rows["aggregate"]
    print(f"  report confidence / aggregate   {confidence[0] / aggregate[0]:.2f}x wall, {confidence[2] / aggregate[2]:.2f}x cpu")
    compare, pair_aggregate = rows["compare"], rows["aggregate (2 sets)"]
    print(f"  compare / aggregate (2 sets)    {compare[0] / pair_aggregate[0]:.2f}x wall, {compare[2] / pair_aggregate[2]:.2f}x cpu")
    if options.json is not None:  # (wall s, peak MiB, cpu s) per row
        options.json.write_text(json.dumps({"runs": written, "compare_runs": pair_runs // 2, "rows": rows}, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
