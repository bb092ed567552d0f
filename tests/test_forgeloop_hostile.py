"""`ingest forgeloop` handed hostile files: timestamps at the calendar's edges, huge sparse
scenario files, edits that keep a file's size and modification time, Ctrl-C at its stages.

Each case runs `loopmeter` as a user does (a fresh process): the one bad file is named with
its field and rule, everything else is stored, and the exit code says so."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import ROOT, run_cli
from loopmeter.forgeloop.ingest import ingest_forgeloop
from loopmeter.forgeloop.reader import PARALLEL_FROM
from loopmeter.forgeloop.samples import scaled_plans, write_results
from loopmeter.lifetime import usable_cores
from loopmeter.storage import Warehouse
from runs import run, write_tree

RANGE_RULE = "must lie between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z once in UTC"
LEAP_RULE = "must be a parseable timestamp (ISO 8601): second 60, a leap second, is no instant a timestamp holds"
BAD = "raw/rs-test/small-bug-fix/direct/run-002.json"
LIMIT = 16 * 1024 * 1024  # --max-file-mb's default, in bytes


def stored(warehouse: Path, table: str = "runs") -> pl.DataFrame:
    return Warehouse(warehouse).read(table).sort("source_path")


def manifest(warehouse: Path) -> pl.DataFrame:
    return Warehouse(warehouse).read("ingest_manifest").sort("kind", "path")


# --- timestamps the runs table cannot hold --------------------------------------------------

@pytest.mark.parametrize(("recorded_at", "rule"), [
    ("9999-12-31T23:00:00-05:00", RANGE_RULE),  # 10000-01-01T04:00Z: past the calendar's end
    ("0001-01-01T00:00:00+01:00", RANGE_RULE),  # 0000-12-31T23:00Z: before year 1
    ("9999-12-31T23:59:59.999999-00:01", RANGE_RULE),  # one minute past the end
    ("0001-01-01T00:00:00.000001+00:01", RANGE_RULE),  # a minute less a microsecond before the start
    ("0000-01-01T00:00:00Z", RANGE_RULE),
    ("0000-06-15T12:00:00", RANGE_RULE),
    ("10000-01-01T00:00:00Z", RANGE_RULE),
    ("+010000-01-01T00:00:00Z", RANGE_RULE),  # JavaScript's expanded year
    ("-000001-01-01T00:00:00Z", RANGE_RULE),
    ("2016-12-31T23:59:60Z", LEAP_RULE),
    ("9999-12-31T23:59:60Z", LEAP_RULE),
])
def test_a_recorded_at_the_runs_table_cannot_hold_is_that_run_s_rejection(tmp_path, recorded_at, rule):
    bad = run(index=2)
    bad["recordedAt"] = recorded_at
    results = write_tree(tmp_path / "results", [run(), bad, run(mode="forgeloopBalanced")])
    result = run_cli("ingest", "forgeloop", str(results), warehouse=tmp_path / "w", check=3)
    assert f"rejected {BAD}: recordedAt: {rule}" in result.stderr.splitlines()
    assert "3 run files: 2 accepted, 0 unchanged, 1 rejected" in result.stdout
    assert "1 of 3 files rejected; the rest is stored" in result.stderr and "Traceback" not in result.stderr
    assert stored(tmp_path / "w")["run_index"].to_list() == [1, 1]


def test_the_calendar_s_own_edges_are_stored_to_the_microsecond(tmp_path):
    edges = {  # recordedAt -> microseconds since 1970 in UTC
        "0001-01-01T00:00:00Z": -62135596800000000,
        "0001-01-01T00:00:00-23:59": -62135596800000000 + (23 * 60 + 59) * 60 * 1000000,
        "0001-01-01T00:59:59.999999+00:59:59.999999": -62135596800000000,
        "9999-12-31T23:59:59.999999Z": 253402300799999999,
        "9999-12-31T23:59:59.999999": 253402300799999999,  # no offset: UTC
        "9999-12-31T23:59:59.999999+00:00": 253402300799999999,
        "9999-12-31T00:00:00-23:59": 253402300799999999 - 59999999,
    }
    documents = []
    for index, recorded_at in enumerate(edges, start=1):
        documents.append(run(index=index))
        documents[-1]["recordedAt"] = recorded_at
    outcome = ingest_forgeloop(Warehouse(tmp_path / "w"), write_tree(tmp_path / "results", documents))
    assert outcome.rejections == [] and outcome.accepted == len(edges)
    runs = stored(tmp_path / "w").sort("run_index")
    assert runs["recorded_at"].dt.epoch("us").to_list() == list(edges.values())


# --- scenario files of any size ----------------------------------------------------------------

def _scenarios(tmp_path: Path) -> tuple[Path, Path]:
    results = write_tree(tmp_path / "results", [run(), run(index=2)], {"small-bug-fix": "balanced", "api-feature": "full"})
    return results, results / "scenarios"


@pytest.mark.slow
@pytest.mark.parametrize("size", [50 * 1024**3, 3 * 1024**3, LIMIT + 1])
def test_a_sparse_huge_scenario_file_is_rejected_unread_and_the_rest_stored(tmp_path, size):
    results, scenarios = _scenarios(tmp_path)
    huge = scenarios / "api-feature.json"
    with open(huge, "r+b") as handle:
        handle.truncate(size)  # sparse: its size, none of its blocks
    command = [sys.executable, "-c", ALONE, str(tmp_path / "peak"), sys.executable, "-m", "loopmeter", "ingest",
               "forgeloop", str(results), "--scenarios", str(scenarios), "--warehouse", str(tmp_path / "w")]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ))  # this process's environment, as conftest left it
    out, err = process.communicate(timeout=300)
    peak_kib = int((tmp_path / "peak").read_text())
    assert process.returncode == 3, err
    assert f"rejected {huge}: file: is larger than the {LIMIT}-byte limit ({size} bytes)" in err.splitlines()
    assert "2 scenario files: 1 accepted, 1 rejected" in out and "2 run files: 2 accepted" in out
    assert stored(tmp_path / "w", "scenarios")["scenario_id"].to_list() == ["small-bug-fix"]
    assert stored(tmp_path / "w")["run_index"].to_list() == [1, 2]
    assert peak_kib < 1024 * 1024, f"the ingest peaked at {peak_kib} KiB"


# the command as the only child of a fresh process, which writes the child's peak resident memory
# (KiB) to the file named first: this test process's own RUSAGE_CHILDREN would be the largest of
# every child it ever waited for (a Spark or install test's run by the same worker included)
ALONE = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def test_a_scenario_file_is_held_to_max_file_mb_like_a_run_file(tmp_path):
    results, scenarios = _scenarios(tmp_path)
    text = (scenarios / "api-feature.json").read_text()
    limit = int(0.002 * 1024 * 1024)
    (scenarios / "api-feature.json").write_text(text[:-1] + " " * (limit - len(text)) + "}")  # exactly the limit
    padded = json.loads((scenarios / "small-bug-fix.json").read_text())
    padded["description"] = "x" * limit
    (scenarios / "small-bug-fix.json").write_text(json.dumps(padded))
    size = (scenarios / "small-bug-fix.json").stat().st_size
    result = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), "--max-file-mb", "0.002",
                     warehouse=tmp_path / "w", check=3)
    assert (f"rejected {scenarios / 'small-bug-fix.json'}: file: is larger than the {limit}-byte limit ({size} bytes)"
            in result.stderr.splitlines())
    assert stored(tmp_path / "w", "scenarios")["scenario_id"].to_list() == ["api-feature"]
    again = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), warehouse=tmp_path / "w")
    assert "2 scenario files: 2 accepted, 0 rejected" in again.stdout  # the default limit: judged again
    assert "scenario file" in run_cli("ingest", "forgeloop", "--help").stdout  # the limit is told


# --- an edit that keeps the size and the modification time -------------------------------------

def _edit_keeping_stat(path: Path, old: bytes, new: bytes) -> None:
    assert len(old) == len(new)
    before = path.stat()
    content = path.read_bytes()
    assert content.count(old) == 1
    path.write_bytes(content.replace(old, new))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def _clean(results: Path, scenarios: Path, tmp_path: Path) -> Path:
    clean = tmp_path / "clean"
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), "-q", warehouse=clean, check=None)
    return clean


def assert_same_as_a_clean_ingest(warehouse: Path, clean: Path) -> None:
    assert stored(warehouse).equals(stored(clean))
    assert stored(warehouse, "scenarios").drop("source_path").equals(stored(clean, "scenarios").drop("source_path"))
    assert manifest(warehouse).drop("ingested_at").equals(manifest(clean).drop("ingested_at"))


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--full", "--reread"])
@pytest.mark.parametrize(("target", "old", "new", "expected"), [
    (BAD, b'"totalTokens": 1000', b'"totalTokens": 1001', "stored"),  # a value changed
    (BAD, b'"verification": "PASS"', b'"verification": "FAIL"', "stored"),
    (BAD, b'"verification": "PASS"', b'"verification": "OKAY"', "rejected"),  # now broken
    ("scenarios/small-bug-fix.json", b'"balanced"', b'"full"    ', "scenario"),  # a scenario file too
])
def test_full_reads_a_same_size_edit_whose_mtime_was_restored(tmp_path, option, target, old, new, expected):
    results, scenarios = _scenarios(tmp_path)
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), "-q", warehouse=warehouse)
    _edit_keeping_stat(results / target, old, new)
    before = stored(warehouse), stored(warehouse, "scenarios")
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), "-q", warehouse=warehouse)
    # size and time say "unchanged": not read
    assert stored(warehouse).equals(before[0]) and stored(warehouse, "scenarios").equals(before[1])

    code = 3 if expected == "rejected" else 0
    result = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), option, warehouse=warehouse,
                     check=code)
    assert "2 run files: " + ("1 accepted, 0 unchanged, 1 rejected" if code else "2 accepted, 0 unchanged, 0 rejected") in result.stdout
    assert_same_as_a_clean_ingest(warehouse, _clean(results, scenarios, tmp_path))
    runs = stored(warehouse)
    if expected == "stored":
        edited = runs.filter(pl.col("source_path") == BAD).row(0, named=True)
        assert (edited["total_tokens"], edited["verification"]) in ((1001, "PASS"), (1000, "FAIL"))
    elif expected == "rejected":
        assert f"rejected {BAD}: verification: must be one of PASS, FAIL, NOT_AVAILABLE" in result.stderr
        assert runs["source_path"].to_list() == ["raw/rs-test/small-bug-fix/direct/run-001.json"]
    else:
        profiles = dict(stored(warehouse, "scenarios").select("scenario_id", "expected_profile").iter_rows())
        assert profiles == {"small-bug-fix": "full", "api-feature": "full"}
    # the next plain ingest trusts what --full recorded: nothing read, nothing changed
    after = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), warehouse=warehouse, check=code)
    assert "0 accepted, " in after.stdout
    assert_same_as_a_clean_ingest(warehouse, tmp_path / "clean")


def test_full_judges_a_rejected_file_again_once_it_was_mended_in_place(tmp_path):
    broken = run(index=2, verification="PASS")
    broken["verification"] = "OKAY"
    results = write_tree(tmp_path / "results", [run(), broken], {"small-bug-fix": "balanced"})
    warehouse, scenarios = tmp_path / "w", results / "scenarios"
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), "-q", warehouse=warehouse, check=3)
    _edit_keeping_stat(results / BAD, b'"OKAY"', b'"PASS"')
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), "-q", warehouse=warehouse, check=3)  # the verdict on those bytes stands
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), "--full", "-q", warehouse=warehouse)
    assert stored(warehouse)["run_index"].to_list() == [1, 2]
    assert_same_as_a_clean_ingest(warehouse, _clean(results, scenarios, tmp_path))


# --- Ctrl-C ----------------------------------------------------------------------------------



def _children(pid: int) -> list[str]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += handle.read().split()
    except OSError:
        pass
    return found


def _wait_until(process: subprocess.Popen, ready) -> bool:
    """Poll `ready()` until it holds (True) or the process ended (False)."""
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.002)
    return False


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many") / "results"
    assert write_results(root, scaled_plans(3 * PARALLEL_FROM), indent=None) >= 2 * PARALLEL_FROM
    return root


STAGES = {
    # another writer holds the lock and the ingest (--wait) said it waits
    "waiting for the lock": lambda process, warehouse, lines: any("waiting for the warehouse lock" in line for line in lines),
    # the reader's worker processes run
    "reading in workers": lambda process, warehouse, lines: len(_children(process.pid)) >= 2,
    # the first chunk's partitions are being written: the new version of runs has a partition folder
    "writing the tables": lambda process, warehouse, lines: any((warehouse / ".versions" / "runs").glob("*/run_set_id=*")),
}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or usable_cores() < 2, reason="needs Linux /proc and two cores")
@pytest.mark.parametrize("stage", list(STAGES))
def test_ctrl_c_at_a_stage_is_answered_with_exit_130_and_one_line(tmp_path, many, stage):
    ready = STAGES[stage]
    seen = []
    for attempt in range(5):
        warehouse = tmp_path / f"w{attempt}"
        errors = tmp_path / f"stderr{attempt}"
        holder = Warehouse(warehouse)
        command = [sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(many), "--wait", "--warehouse", str(warehouse)]
        locking = holder.lock(command="a test") if stage == "waiting for the lock" else None
        if locking is not None:
            locking.__enter__()
        try:
            with open(errors, "w") as handle:
                process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=handle, env=dict(
                    os.environ, COLUMNS="200"))
            try:
                if _wait_until(process, lambda: ready(process, warehouse, errors.read_text().splitlines())):
                    sent = time.monotonic()
                    process.send_signal(signal.SIGINT)
                    process.wait(timeout=60)
                    answered = time.monotonic() - sent
                else:
                    process.wait(timeout=60)
                    answered = None
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        finally:
            if locking is not None:
                locking.__exit__(None, None, None)
        lines = [line for line in errors.read_text().splitlines() if not line.startswith("waiting for the warehouse lock")]
        if answered is None:  # it ended before the stage could be seen: again
            seen.append((process.returncode, lines[-1:]))
            continue
        assert process.returncode == 130, (stage, lines)
        assert len(lines) == 1 and lines[0].startswith("loopmeter: interrupted; "), (stage, lines)
        assert not (warehouse / "runs").exists()  # nothing was published
        return
    pytest.fail(f"the ingest never showed the stage {stage!r}: {seen}")
