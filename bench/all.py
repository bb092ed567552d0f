"""Every benchmark, side by side with the paths loopmeter replaces; each ratio printed with its target.

    .venv/bin/python bench/all.py [--scale 1.0] [--markdown]

--scale multiplies the sizes: 40k and 100k ForgeLoop runs and a Forge store of about 1M
events at 1.0 (about 15 minutes on 2 cores); 0.1 for a quick look. --markdown prints one
Markdown table of what a user waits for (docs/performance.md holds it), with the command and
the machine above it; the benchmarks' own output then goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ("tail", "summary", "outliers", "regression")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--markdown", action="store_true", help="print one Markdown table (the benchmarks' output on stderr)")
    options = parser.parse_args()
    scale = options.scale
    runs = [str(max(1000, int(40_000 * scale))), str(max(2000, int(100_000 * scale)))]
    forge_runs = max(500, int(42_000 * scale))
    scratch = Path(tempfile.mkdtemp(prefix="loopmeter-all-"))
    latency_json, statistics_json = scratch / "latency.json", scratch / "statistics.json"
    load = os.getloadavg()[0]
    steps = [
        ("forgeloop", "ForgeLoop ingest and aggregate",
         [str(ROOT / "bench" / "forgeloop_bench.py"), "--runs", *runs, "--repeat", "2", "--json"]),
        ("routing", "Forge routing: ingest + report against the seed's path",
         # three rounds: the seed's path varies by a third from round to round on a shared machine; the median tells
         [str(ROOT / "tests" / "forge_oracle" / "benchmark.py"), "routing", "--rounds", "3", "--runs", str(forge_runs),
          "--dir", f"/tmp/loopmeter-forge-bench-{forge_runs}"]),
        ("survival", "Forge survival: git processes against the seed's harvest",
         [str(ROOT / "tests" / "forge_oracle" / "benchmark.py"), "survival"]),
        ("latency", "Latency at the corpus's size: reports and ingest + aggregate against the import floor",
         [str(ROOT / "bench" / "latency.py"), "--rounds", "5", "--json", str(latency_json)]),
        ("statistics", "Statistics: report confidence and compare beside the aggregate they build on",
         [str(ROOT / "bench" / "statistics_bench.py"), "--runs", runs[1], "--compare-runs", str(max(2000, int(20_000 * scale))),
          "--json", str(statistics_json)]),
    ]
    failed = 0
    printed: dict[str, list[str]] = {}
    out = sys.stderr if options.markdown else sys.stdout
    for key, title, command in steps:
        print(f"\n== {title}", file=out, flush=True)
        with subprocess.Popen([sys.executable, *command], cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
            printed[key] = []
            for line in process.stdout:
                out.write(line)
                out.flush()
                printed[key].append(line.rstrip("\n"))
        failed |= process.returncode
    if options.markdown:
        latency = json.loads(latency_json.read_text()) if latency_json.exists() else {}
        measured = json.loads(statistics_json.read_text()) if statistics_json.exists() else {}
        print("\n".join(markdown(printed, latency, options.scale, load, measured)))
    for written in (latency_json, statistics_json):
        written.unlink(missing_ok=True)
    scratch.rmdir()
    return failed


def seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def ratio(ours: float, theirs: float) -> str:
    value = ours / theirs
    return f"{value:.2f}x" if value < 10 else f"{value:.0f}x"


def row(what: str, ours: float | None, baseline: float | None, baseline_is: str, by: str) -> str:
    if ours is None or baseline is None:
        return f"| {what} | not measured | | | {by} |"
    return f"| {what} | {seconds(ours)} | {seconds(baseline)}: {baseline_is} | {ratio(ours, baseline)} | {by} |"


def markdown(printed: dict[str, list[str]], latency: dict, scale: float, load: float, measured: dict) -> list[str]:
    """The table of docs/performance.md: what a user waits for, loopmeter's time, the baseline's, the
    ratio, and the benchmark that measured it; the command and the machine above it."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    rounds = latency.get("rounds", "?")
    command = "python bench/all.py --markdown" + ("" if scale == 1.0 else f" --scale {scale}")
    lines = [
        f"`{command}` on {os.cpu_count()} cores and {memory:.0f} GiB, Python {sys.version.split()[0]}, "
        f"load average {load:.1f} as it started.",
        f"The corpus's rows are medians of {rounds} interleaved rounds (a report: the slower of its table and "
        "`--json`), the larger ForgeLoop sizes' the best of 2, the Forge routing's the median of 3.",
        "",
        "| what a user waits for | loopmeter | baseline | loopmeter ÷ baseline | measured by |",
        "|---|---:|---|---:|---|",
    ]
    wall = {name: values[0] for name, values in latency.get("median", {}).items()}
    floor, port = wall.get("floor"), wall.get("port aggregate")
    latency_by = "`bench/latency.py`"
    for name in REPORTS:
        slower = max((wall[key] for key in (f"report {name}", f"report {name} --json") if key in wall), default=None)
        lines.append(row(f"`report {name}`, the corpus (525 runs)", slower, floor,
                         "importing polars, DuckDB and pyarrow", latency_by))
    lines.append(row("`ingest forgeloop` + `aggregate`, the corpus, into an empty warehouse",
                     wall.get("ingest+aggregate"), port, "a per-run Python port of ForgeLoop's aggregator", latency_by))
    lines.append(row("`ingest forgeloop --aggregate` (both in one process), the same", wall.get("ingest --aggregate"),
                     port, "the same port", latency_by))
    lines.append(row("`run-all` (both in one process, and the HTML page), the same", wall.get("run-all"), port,
                     "the same port", latency_by))
    lines.append(row("`ingest forgeloop` again, the corpus unchanged", wall.get("ingest again"),
                     wall.get("ingest+aggregate[1]"), "its first ingest", latency_by))
    forgeloop = _last_json(printed.get("forgeloop", []))
    bench_by = "`bench/forgeloop_bench.py`"
    for sized in forgeloop:
        runs = f"{sized['runs']:,}"
        lines.append(row(f"`ingest forgeloop`, {runs} runs", sized["ingest"][0], sized["read+parse"][0],
                         "reading and `json.loads` of every run file", bench_by))
        lines.append(row(f"`aggregate --full`, {runs} runs", sized["aggregate"][0], sized["port"][0],
                         "the per-run port", bench_by))
    if forgeloop:
        largest = forgeloop[-1]
        lines.append(row(f"`ingest forgeloop` + `aggregate` of one more run set (360 runs), {largest['runs']:,} stored",
                         largest["ingest +1"][0] + largest["aggregate +1"][0], largest["port"][0],
                         "the port, which aggregates everything again", bench_by))
    routing = _routing(printed.get("routing", []))
    routing_by = "`tests/forge_oracle/benchmark.py`"
    if routing:
        events, seed, ingest, report = routing
        lines.append(row(f"`ingest forge` + `report routing`, {events:,} events", ingest + report, seed,
                         "the seed scripts (load, parse, task records, both tables)", routing_by))
        lines.append(row(f"`report routing`, {events:,} events ingested", report, seed, "the same scripts", routing_by))
    else:
        lines.append(row("`ingest forge` + `report routing`", None, None, "", routing_by))
    survival = _survival(printed.get("survival", []))
    survival_by = "`tests/forge_oracle/benchmark.py`"
    if survival:
        outcomes, seed_processes, seed, ours_processes, ours = survival
        lines.append(row(f"`harvest survival`, {outcomes} outcomes ({ours_processes:,} git processes)", ours, seed,
                         f"the seed's harvest ({seed_processes:,} git processes)", survival_by))
    else:
        lines.append(row("`harvest survival`", None, None, "", survival_by))
    timed = measured.get("rows", {})
    statistics_by = "`bench/statistics_bench.py`"
    if timed:
        (confidence, confidence_peak, _), (aggregate, _, _) = timed["report confidence"], timed["aggregate"]
        lines.append(row(f"`report confidence`, {measured['runs']:,} runs (peak {confidence_peak:,.0f} MiB)", confidence,
                         aggregate, "`aggregate --full` of the same runs", statistics_by))
        (compare, compare_peak, _), (both, _, _) = timed["compare"], timed["aggregate (2 sets)"]
        lines.append(row(f"`compare` of two run sets of {measured['compare_runs']:,} runs (peak {compare_peak:,.0f} MiB)",
                         compare, both, "`aggregate --full` of the two", statistics_by))
    else:
        lines.append(row("`report confidence`, `compare`", None, None, "", statistics_by))
    return lines


def _last_json(lines: list[str]) -> list[dict]:
    for line in reversed(lines):
        if line.startswith("["):
            return json.loads(line)
    return []


def _routing(lines: list[str]) -> tuple[int, float, float, float] | None:
    """(events, seed path s, ingest s, report s) from the routing benchmark's store line and median line."""
    text = "\n".join(lines)
    store = re.search(r"^store: (\d+) events", text, re.M)
    median = re.search(r"^median of \d+: seed path ([\d.]+) s \| ingest ([\d.]+) s \| report ([\d.]+) s", text, re.M)
    if store is None or median is None:
        return None
    return int(store.group(1)), float(median.group(1)), float(median.group(2)), float(median.group(3))


def _survival(lines: list[str]) -> tuple[int, int, float, int, float] | None:
    """(outcomes, the seed's git processes, its seconds, loopmeter's git processes, its seconds)."""
    text = "\n".join(lines)
    outcomes = re.search(r"^(\d+) outcomes", text, re.M)
    times = re.search(r"^seed: (\d+) git processes, ([\d.]+) s \| loopmeter: (\d+) git processes, ([\d.]+) s", text, re.M)
    if outcomes is None or times is None:
        return None
    return (int(outcomes.group(1)), int(times.group(1)), float(times.group(2)), int(times.group(3)), float(times.group(4)))


if __name__ == "__main__":
    sys.exit(main())
