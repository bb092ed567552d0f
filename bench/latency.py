"""Benchmark: loopmeter's answers at the size real run sets have (the ForgeLoop corpus, 525 runs).

    python bench/latency.py [--corpus DIR] [--rounds 5] [--against CHECKOUT] [--json FILE]

Each measurement is a fresh process, start included, timed as a user waits for it:

  floor             python -c "import polars, duckdb, pyarrow"  (what any such tool pays first)
  report NAME       loopmeter report NAME on the corpus's aggregated warehouse, piped, and with --json
  ingest+aggregate  loopmeter ingest forgeloop of the corpus into an empty warehouse, then aggregate
                    (two processes: each part is printed too, and the total beside two floors)
  ingest --aggregate  loopmeter ingest forgeloop --aggregate of the corpus into an empty warehouse: the
                    same two steps in one process
  ingest again      loopmeter ingest forgeloop of the corpus again, nothing changed
  run-all           loopmeter run-all of the corpus into an empty warehouse: ingest, aggregate, the
                    catalog and the HTML page in one process
  port aggregate    bench/forgeloop_port.py: a per-run Python port of ForgeLoop's aggregator
  port tail         the port's tail report, reading the raw run files as ForgeLoop's script does

Targets: each report at most 1.2x the floor; ingest+aggregate under 0.8 s, and faster than the
port as the aim. ForgeLoop's own Node scripts are not part of the corpus: where `node` is installed the
benchmark says so, and the port stands in for them. `--against CHECKOUT` times the reports
and ingest+aggregate of another checkout's `pipeline` too (e.g. an older commit, `git
worktree add`), interleaved with these. The machine is shared: every round measures every
item once, in turn, and the medians of the rounds are printed, wall and CPU time (user +
system); only ratios measured in the same run mean anything. Every process finds its bytecode
compiled (in a folder of the run's own), as an installed loopmeter does. `--json FILE` writes
the medians for `bench/all.py --markdown`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
REPORTS = ("tail", "summary", "outliers", "regression")
FLOOR_RATIO = 1.2
INGEST_AGGREGATE_TARGET = 0.8

# prints the wall and CPU seconds of each command, run one after the other
MEASURE = """
import resource, subprocess, sys, time
commands = [[]]
for part in sys.argv[2:]:
    if part == "--then":
        commands.append([])
    else:
        commands[-1].append(part)
def cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
for command in commands:
    start, used = time.perf_counter(), cpu()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=sys.argv[1])
    if done.returncode != 0:
        sys.stderr.write(done.stderr.decode()); sys.exit(done.returncode)
    print(time.perf_counter() - start, cpu() - used)
"""

PORT_TAIL = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import forgeloop_port as port
from loopmeter.jsjson import dumps
print(dumps(port.REPORTS["tail"](port.read_run_sets(Path(sys.argv[2])), port.read_profiles(Path(sys.argv[3]))), 2))
"""


def measure(cwd: Path, *commands: list[str], env: dict[str, str]) -> list[tuple[float, float]]:
    """(wall seconds, CPU seconds) of each of `commands`, run one after the other, each a fresh process."""
    arguments = [part for number, command in enumerate(commands) for part in ([] if number == 0 else ["--then"]) + command]
    output = subprocess.run([PYTHON, "-c", MEASURE, str(cwd), *arguments], capture_output=True, text=True, env=env)
    if output.returncode != 0:
        raise SystemExit(f"{' '.join(commands[0])}: exited {output.returncode}\n{output.stderr}")
    return [(float(wall), float(cpu)) for wall, cpu in (line.split() for line in output.stdout.splitlines())]


def ingest_and_aggregate(corpus: Path, warehouse: Path) -> list[list[str]]:
    loopmeter = [PYTHON, "-m", "loopmeter"]
    return [
        [*loopmeter, "ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"),
         "--warehouse", str(warehouse), "--quiet"],
        [*loopmeter, "aggregate", "--warehouse", str(warehouse), "--quiet"],
    ]


def items(corpus: Path, warehouse: Path, work: Path, checkouts: dict[str, Path]) -> dict[str, tuple[Path, list[list[str]]]]:
    """name -> (working directory, the commands timed together)."""
    found: dict[str, tuple[Path, list[list[str]]]] = {"floor": (ROOT, [[PYTHON, "-c", "import polars, duckdb, pyarrow"]])}
    for label, checkout in checkouts.items():
        suffix = "" if label == "" else f" ({label})"
        for name in REPORTS:
            for options in ([], ["--json"]):
                command = [PYTHON, "-m", "loopmeter", "report", name, *options, "--warehouse", str(warehouse)]
                found[f"report {name}{' --json' if options else ''}{suffix}"] = (checkout, [command])
        found[f"ingest+aggregate{suffix}"] = (checkout, ingest_and_aggregate(corpus, work / f"fresh{label or '-here'}"))
    found["ingest --aggregate"] = (ROOT, [[*ingest_and_aggregate(corpus, work / "in-one")[0], "--aggregate"]])
    found["ingest again"] = (ROOT, ingest_and_aggregate(corpus, warehouse)[:1])
    found["run-all"] = (ROOT, [[PYTHON, "-m", "loopmeter", "run-all", str(corpus / "results"), "--scenarios",
                                str(corpus / "scenarios"), "--warehouse", str(work / "run-all"), "--quiet"]])
    found["port aggregate"] = (ROOT, [[PYTHON, str(ROOT / "bench" / "forgeloop_port.py"), str(corpus / "results"),
                                       str(corpus / "scenarios"), str(work / "port")]])
    found["port tail"] = (ROOT, [[PYTHON, "-c", PORT_TAIL, str(ROOT / "bench"), str(corpus / "results"), str(corpus / "scenarios")]])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path(os.environ.get("LOOPMETER_CORPUS", ROOT.parent / "shared" / "corpus" / "forgeloop")))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another checkout whose reports and ingest+aggregate are timed too")
    parser.add_argument("--json", type=Path, help="also write the medians here, for bench/all.py --markdown")
    options = parser.parse_args()
    corpus = options.corpus.resolve()
    if not (corpus / "results" / "raw").is_dir():
        print(f"latency: no ForgeLoop corpus at {corpus} (--corpus DIR)", file=sys.stderr)
        return 2
    checkouts = {"": ROOT}
    if options.against is not None:
        checkouts["against"] = options.against.resolve()
    node = shutil.which("node")
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, node: "
          f"{'installed, but the corpus holds no ForgeLoop scripts: the port stands in' if node else 'not installed: the port stands in'}",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="loopmeter-latency-"))
    # bytecode compiled once, as an installed loopmeter has it (pip compiles at install) and the
    # floor's packages have it: kept under `work`, whatever PYTHONDONTWRITEBYTECODE says here
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "bytecode")
    try:
        warehouse = work / "warehouse"
        for command in ingest_and_aggregate(corpus, warehouse):  # the warehouse the reports read
            subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
        timed = items(corpus, warehouse, work, checkouts)
        samples: dict[str, list[list[tuple[float, float]]]] = {name: [] for name in timed}
        for round_number in range(options.rounds + 1):  # the first round only warms the caches up
            for name, (cwd, commands) in timed.items():
                if name.startswith(("ingest+aggregate", "ingest --aggregate", "run-all")):
                    shutil.rmtree(commands[0][commands[0].index("--warehouse") + 1], ignore_errors=True)
                sample = measure(cwd, *commands, env=env)
                if round_number:
                    samples[name].append(sample)
        median = medians(samples)
        print("\n".join(lines(median, options.rounds)))
        if options.json is not None:
            options.json.write_text(json.dumps({"rounds": options.rounds, "runs": 525, "median": median}, indent=1) + "\n")
        missed = [name for name in median if name.startswith("report ") and "(" not in name
                  and median[name][0] > FLOOR_RATIO * median["floor"][0]]
        return 1 if missed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def medians(samples: dict[str, list[list[tuple[float, float]]]]) -> dict[str, tuple[float, float]]:
    """name -> (median wall, median CPU); an item of several commands also gives each command's
    medians, as `name[1]`, `name[2]`, ... (the whole is the median of the rounds' sums)."""
    median = {}
    for name, rounds in samples.items():
        parts = len(rounds[0])
        median[name] = (statistics.median(sum(w for w, _ in r) for r in rounds), statistics.median(sum(c for _, c in r) for r in rounds))
        if parts > 1:
            for part in range(parts):
                median[f"{name}[{part + 1}]"] = (statistics.median(r[part][0] for r in rounds), statistics.median(r[part][1] for r in rounds))
    return median


def targets(wall: float, port_wall: float) -> str:
    """The target (under 0.8 s) and the aim (faster than the port, which Python's own start and
    imports alone exceed), each met or not."""
    return (f"target < {INGEST_AGGREGATE_TARGET} s {'ok' if wall < INGEST_AGGREGATE_TARGET else 'MISSED'}, "
            f"aim < port {'ok' if wall < port_wall else 'no'}")


PARTS = {"[1]": "ingest forgeloop (empty warehouse)", "[2]": "aggregate (after it)"}


def lines(median: dict[str, tuple[float, float]], rounds: int) -> list[str]:
    floor_wall, floor_cpu = median["floor"]
    port_wall, port_cpu = median["port aggregate"]
    out = [f"corpus: 525 runs; medians of {rounds} rounds (wall s, cpu s); ratios measured in this run"]
    for name, (wall, cpu) in median.items():
        label = name
        if name.startswith("report "):
            verdict = "" if "(" in name else ("ok" if wall <= FLOOR_RATIO * floor_wall else "MISSED")
            note = f"{wall / floor_wall:5.2f}x floor (cpu {cpu / floor_cpu:4.2f}x)  target <= {FLOOR_RATIO}x {verdict}"
        elif name.startswith("ingest+aggregate") and not name.endswith("]"):
            verdict = "" if "(" in name else f"  {targets(wall, port_wall)}"
            note = (f"{wall / port_wall:5.2f}x port aggregate (cpu {cpu / port_cpu:4.2f}x), {wall / (2 * floor_wall):4.2f}x two floors"
                    f"{verdict}")
        elif name.endswith("]"):
            label = "  " + PARTS[name[name.index("["):]]
            note = f"{wall / floor_wall:5.2f}x floor (cpu {cpu / floor_cpu:4.2f}x)"
        elif name == "ingest --aggregate":
            note = (f"{wall / port_wall:5.2f}x port aggregate (cpu {cpu / port_cpu:4.2f}x), {wall / floor_wall:4.2f}x floor"
                    f"  {targets(wall, port_wall)}")
        elif name == "run-all":
            note = (f"{wall / port_wall:5.2f}x port aggregate (cpu {cpu / port_cpu:4.2f}x), {wall / floor_wall:4.2f}x floor"
                    f"  (one process: ingest, aggregate, catalog, HTML page)")
        elif name == "ingest again":
            note = f"{wall / floor_wall:5.2f}x floor: nothing changed: no table written"
        elif name == "port tail":
            note = f"{wall / floor_wall:5.2f}x floor: the per-run script path a report replaces"
        else:
            note = ""
        out.append(f"  {label:<36} {wall:6.2f} s  cpu {cpu:6.2f} s  {note}".rstrip())
    return out


if __name__ == "__main__":
    sys.exit(main())
