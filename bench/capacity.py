"""What one machine holds: loopmeter's stages at ten times the other benchmarks' sizes.

    python bench/capacity.py [--runs 1000000] [--forge-runs 420000] [--keep DIR] [--only forgeloop|forge]

ForgeLoop: RUNS generated runs (1M: ten times forgeloop_bench.py's largest), then `ingest
forgeloop`, `aggregate`, `report tail --json` and a `sql` count over `runs`. Forge: a store of
FORGE_RUNS routed runs (420k runs, about 10M events: ten times the routing benchmark's), written
in chunks of 42k runs, then `ingest forge`, `report routing --json` and a `sql` count over
`forge_events`. Each command runs in a fresh process, as a user runs it; printed: wall time,
CPU time (user + system, worker processes included) and peak memory (max RSS of the process
and its workers), as a Markdown table. Generated inputs are kept in --keep between runs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from forgeloop_bench import PYTHON, generate, measure  # noqa: E402

CHUNK = 42_000  # routed runs generated at a time (a chunk's events are held in memory)


def forge_store(directory: Path, runs: int) -> tuple[Path, int]:
    """A SQLite store of `runs` routed runs, written a chunk at a time (run ids and rids carry the chunk)."""
    from loopmeter.forge import samples

    store = directory / "dataset.sqlite"
    marker = directory / "events.txt"
    if store.exists() and marker.exists():
        return store, int(marker.read_text())
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / "dataset.sqlite.partial"
    temporary.unlink(missing_ok=True)
    db = sqlite3.connect(temporary)
    db.execute("CREATE TABLE repos(repo TEXT PRIMARY KEY, path TEXT)")
    db.execute("CREATE TABLE events(rid TEXT PRIMARY KEY, kind TEXT, src TEXT, ts REAL, run TEXT, task TEXT, "
               "repo TEXT, mode TEXT, data TEXT)")
    db.executemany("INSERT INTO repos VALUES (?, ?)", [("api", "/x/api"), ("web", "/x/web"), ("infra", "/x/infra")])
    total = 0
    for number, start in enumerate(range(0, runs, CHUNK)):
        size = min(CHUNK, runs - start)
        events = samples.routing_events(size, seed=7 + number, start=samples.START + number * 120 * 86400)
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (
            (f"c{number}-{e['rid']}", e["kind"], e["src"], e["ts"], None if e["run"] is None else f"c{number}-{e['run']}",
             e["task"], e["repo"], e["mode"], json.dumps(e["data"], separators=(",", ":"))) for e in events))
        db.commit()
        total += len(events)
        print(f"  forge store: {start + size} runs, {total} events", file=sys.stderr, flush=True)
    db.close()
    os.replace(temporary, store)
    marker.write_text(str(total))
    return store, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--forge-runs", type=int, default=420_000)
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "loopmeter-capacity")
    parser.add_argument("--only", choices=("forgeloop", "forge"))
    options = parser.parse_args()
    loopmeter = [PYTHON, "-m", "loopmeter"]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="loopmeter-capacity-", dir=options.keep.parent))
    try:
        if options.only in (None, "forgeloop"):
            data = options.keep / f"forgeloop-{options.runs}"
            written = generate(data, options.runs)
            warehouse = work / "forgeloop"
            size = f"{written:,} runs"
            for name, command in [
                ("ingest forgeloop", ["ingest", "forgeloop", str(data), "--scenarios", str(data / "scenarios")]),
                ("aggregate", ["aggregate", "--full"]),
                ("report tail --json", ["report", "tail", "--json"]),
                ("sql: count(*) by run set", ["sql", "SELECT run_set_id, count(*) FROM runs GROUP BY ALL", "--format", "csv"]),
            ]:
                rows.append((name, size, *_measured([*loopmeter, *command, "--warehouse", str(warehouse), "--quiet"])))
            rows.append(("warehouse on disk", size, _size(warehouse), None, None))
        if options.only in (None, "forge"):
            store, events = forge_store(options.keep / f"forge-{options.forge_runs}", options.forge_runs)
            warehouse = work / "forge"
            size = f"{events:,} events"
            for name, command in [
                ("ingest forge", ["ingest", "forge", str(store)]),
                ("report routing --json", ["report", "routing", "--json"]),
                ("sql: count(*) by month", ["sql", "SELECT month, count(*) FROM forge_events GROUP BY ALL", "--format", "csv"]),
            ]:
                rows.append((name, size, *_measured([*loopmeter, *command, "--warehouse", str(warehouse), "--quiet"])))
            rows.append(("warehouse on disk", size, _size(warehouse), None, None))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
    print("| step | input | wall | CPU | peak memory |")
    print("|---|---|---:|---:|---:|")
    for name, size, seconds, rss, cpu in rows:
        if seconds is None:
            print(f"| {name} | {size} | failed | | |")
        elif rss is None:
            print(f"| {name} | {size} | {seconds / 2**30:.1f} GiB | | |")
        else:
            print(f"| {name} | {size} | {seconds:.1f} s | {cpu:.1f} s | {rss:,.0f} MiB |")
    return 0


def _measured(command: list[str]) -> tuple:
    """`measure`'s (wall, peak MiB, CPU) of one fresh process; (None, None, None) when it failed, its error shown."""
    try:
        result = measure(command, 1)
    except subprocess.CalledProcessError as error:
        print(f"  {' '.join(command[2:4])} failed: {(error.stderr or '').strip()[-2000:]}", file=sys.stderr, flush=True)
        return None, None, None
    print(f"  {' '.join(command[2:4])}: {result}", file=sys.stderr, flush=True)
    return result


def _size(directory: Path) -> float:
    return float(sum(os.lstat(os.path.join(folder, name)).st_size for folder, _, names in os.walk(directory) for name in names))


if __name__ == "__main__":
    sys.exit(main())
