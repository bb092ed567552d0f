"""Benchmark: the peak memory of `loopmeter ingest forgeloop` against the size of its input.

    python bench/ingest_memory.py [--sizes 10 30 60] [--file-mb 15] [--keep DIR]

For each size it builds a RESULTS tree (deterministic) of that many run files of about
`--file-mb` MB each, all in one run set (the worst case for an ingest that holds a run set
at once), and runs `python -m loopmeter ingest forgeloop` on it into a fresh warehouse under
`/usr/bin/time -v`. It prints the peak RSS of each (the largest of the ingest and its worker
processes) and the ratios to the smallest size. An ingest that streams has a peak set by the
largest file and its fixed batch, not by the input: target, the 60-file peak within 2x of the
10-file peak. Only ratios measured in one run mean anything (the machines are shared).

What makes a run file large: the `runs` table stores `diagnostics.hostWarnings` (and
`guideIds`) whole, as lists of strings, and the run contract bounds neither their number nor
their length. Each file here is a valid run whose hostWarnings fill it to the size asked for,
so its row in `runs` is as large as the file.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from loopmeter.forgeloop.samples import RunSetPlan, make_run, scenario_document

ROOT = Path(__file__).resolve().parent.parent

RUN_SET = "memory-bench"
SCENARIO = "small-bug-fix"
MODES = ("direct", "forgeloopBalanced", "forgeloopAdaptive")
WORDS = ("tool", "call", "exceeded", "budget", "retrying", "stale", "context", "guide", "refresh", "timeout",
         "sandbox", "denied", "network", "patch", "rejected", "hunk", "offset", "file", "lint", "warning")
_PICK = random.Random(1)
PHRASES = [" ".join(_PICK.choice(WORDS) for _ in range(_PICK.randint(8, 40))) for _ in range(4096)]


def large_run(number: int, file_bytes: int) -> bytes:
    """Run file `number` (from 0): a valid version-2 run whose diagnostics.hostWarnings make
    it about `file_bytes` bytes."""
    rng = random.Random(number)
    mode = MODES[number % len(MODES)]
    run = make_run(rng, RunSetPlan(RUN_SET, 1), SCENARIO, mode, number // len(MODES) + 1,
                   datetime(2026, 9, 1, 8, 0, tzinfo=timezone.utc))
    warnings, size = [], len(json.dumps(run))
    while size < file_bytes:  # host warnings of 60 to 300 characters, as a noisy host writes them
        text = f"w{len(warnings):07d} run {number}: {PHRASES[(len(warnings) * 7919 + number * 104729) % len(PHRASES)]}"
        warnings.append(text)
        size += len(text) + 4
    run["diagnostics"]["hostWarnings"] = warnings
    return json.dumps(run).encode() + b"\n"


def build(results: Path, files: int, file_bytes: int) -> int:
    """RESULTS/raw/<run set>/<scenario>/<mode>/run-NNN.json and the scenario file; returns the bytes written."""
    (results / "scenarios").mkdir(parents=True, exist_ok=True)
    (results / "scenarios" / f"{SCENARIO}.json").write_text(json.dumps(scenario_document(SCENARIO), indent=2) + "\n")
    total = 0
    for number in range(files):
        content = large_run(number, file_bytes)
        mode = MODES[number % len(MODES)]
        directory = results / "raw" / RUN_SET / SCENARIO / mode
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"run-{number // len(MODES) + 1:03d}.json").write_bytes(content)
        total += len(content)
    return total


def peak_rss_mib(results: Path, warehouse: Path) -> float:
    """The peak RSS (MiB) of one ingest, as `/usr/bin/time -v` reports it."""
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(results),
               "--scenarios", str(results / "scenarios"), "--quiet", "--warehouse", str(warehouse)]
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the ingest failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found.group(1)) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 60], help="run files per tree")
    parser.add_argument("--file-mb", type=float, default=15.0, help="size of each run file, MB (10^6 bytes)")
    parser.add_argument("--keep", type=Path, help="build the trees here and keep them (else a temporary folder)")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="loopmeter-ingest-memory-"))
    try:
        peaks: dict[int, float] = {}
        print(f"{'files':>6} {'input MB':>9} {'peak RSS MiB':>13} {'peak / input':>13}")
        for files in args.sizes:
            results, warehouse = base / f"results-{files}", base / f"warehouse-{files}"
            shutil.rmtree(warehouse, ignore_errors=True)
            written = build(results, files, int(args.file_mb * 1e6))
            peaks[files] = peak_rss_mib(results, warehouse)
            print(f"{files:>6} {written / 1e6:>9.0f} {peaks[files]:>13.0f} {peaks[files] * 2**20 / written:>13.2f}",
                  flush=True)
            if args.keep is None:
                shutil.rmtree(results)
                shutil.rmtree(warehouse)
        smallest = min(args.sizes)
        for files in sorted(args.sizes):
            if files != smallest:
                print(f"peak {files}/{smallest}: {peaks[files] / peaks[smallest]:.2f} (target: at most 2)")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
