"""Every benchmark, side by side with the paths loopmeter replaces; each ratio printed with its target.

    .venv/bin/python bench/all.py [--scale 1.0]

--scale multiplies the sizes: 10k and 100k ForgeLoop runs and a Forge store of about 1M
events at 1.0 (about 11 minutes on 2 cores); 0.1 for a quick look.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    options = parser.parse_args()
    scale = options.scale
    runs = [str(max(1000, int(10_000 * scale))), str(max(2000, int(100_000 * scale)))]
    steps = [
        ("ForgeLoop ingest and aggregate", [str(ROOT / "bench" / "forgeloop_bench.py"), "--runs", *runs, "--repeat", "2"]),
        ("Forge routing: ingest + report against the seed's path",
         # three rounds: the seed's path varies by a third from round to round on a shared machine; the median tells
         [str(ROOT / "tests" / "forge_oracle" / "benchmark.py"), "routing", "--rounds", "3", "--runs", str(max(500, int(42_000 * scale))),
          "--dir", f"/tmp/loopmeter-forge-bench-{max(500, int(42_000 * scale))}"]),
        ("Forge survival: git processes against the seed's harvest", [str(ROOT / "tests" / "forge_oracle" / "benchmark.py"), "survival"]),
        ("Latency at the corpus's size: reports and ingest + aggregate against the import floor",
         [str(ROOT / "bench" / "latency.py"), "--rounds", "5"]),
    ]
    failed = 0
    for title, command in steps:
        print(f"\n== {title}", flush=True)
        failed |= subprocess.run([sys.executable, *command], cwd=ROOT).returncode
    return failed


if __name__ == "__main__":
    sys.exit(main())
