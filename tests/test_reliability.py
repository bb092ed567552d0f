"""Interrupted stages, concurrent writers, hostile documents, determinism."""
from __future__ import annotations

import fcntl
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_as_a_user, run_cli
from loopmeter.forgeloop.ingest import ingest_forgeloop
from loopmeter.forgeloop.samples import RunSetPlan, write_results
from loopmeter.storage import Warehouse
from loopmeter.storage.lock import FINISHING
from runs import run

CRASH_POINTS = [
    "wrote-file:runs",  # half-way through writing the runs table's partitions
    "before-publish:runs",
    "after-publish:runs",  # runs replaced, manifest not yet
    "before-publish:ingest_manifest",
    "publishing:journal",  # every new version complete and named in the journal, no link swapped yet
    "publishing:swapped:runs",  # runs' link swapped, the others' not yet
    "before-publish:catalog",
    "ingest:read",
]


def snapshot(warehouse: Path) -> dict:
    """What a reader sees: every table's rows (sorted), minus the times of day; a file is
    'stored' whether this ingest or an earlier one parsed it."""
    store = Warehouse(warehouse)
    seen = {}
    for name in store.table_names():
        frame = store.read(name)
        frame = frame.drop([c for c in frame.columns if c in ("ingested_at", "computed_at")])
        if "status" in frame.columns:
            frame = frame.with_columns(pl.col("status").replace({"accepted": "stored", "unchanged": "stored"}))
        keys = [column for column, dtype in frame.schema.items() if not dtype.is_nested()]
        seen[name] = frame.sort(keys, nulls_last=True).to_dicts() if frame.height else []
    return seen


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("trees")
    before = base / "before"
    write_results(before, [RunSetPlan("set-a", 5), RunSetPlan("set-b", 5, "1")], seed=3)
    after = base / "after"
    shutil.copytree(before, after)
    changed = after / "raw" / "set-a" / "api-feature" / "direct" / "run-001.json"
    document = json.loads(changed.read_text())
    document["usage"]["totalTokens"] += 1
    document["usage"]["inputTokens"] += 1
    changed.write_text(json.dumps(document))
    (after / "raw" / "set-b" / "api-feature" / "direct" / "run-002.json").unlink()
    write_results(after / "extra", [RunSetPlan("set-c", 3)], seed=4)
    shutil.move(str(after / "extra" / "raw" / "set-c"), str(after / "raw" / "set-c"))
    clean = base / "clean"  # the states a clean ingest of before, then of after, leaves
    states = []
    for tree in (before, after):
        run_cli("ingest", "forgeloop", str(tree), "--scenarios", str(tree / "scenarios"), "--quiet", warehouse=clean)
        states.append(snapshot(clean))
    run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet", warehouse=base / "only-after")
    return before, after, *states, snapshot(base / "only-after")


@pytest.mark.slow
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_killed_ingest_leaves_the_previous_warehouse_and_the_next_run_completes(tmp_path, trees, point):
    before, after, expected_before, expected_after, _ = trees
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(before), "--scenarios", str(before / "scenarios"), "--quiet", warehouse=warehouse)
    if point == "before-publish:catalog":  # the catalog is rebuilt only when its record does not match
        (warehouse / ".state" / "catalog.json").unlink()
    killed = run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet",
                     warehouse=warehouse, check=-9, env={"LOOPMETER_CRASH_AT": point})
    assert killed.returncode == -9
    # every table is whole: each one is either the old or the new version, never a mix
    for name, rows in snapshot(warehouse).items():
        assert rows in (expected_before[name], expected_after.get(name)), name
    # and the set is one ingest's: a reader finishes a publish the killed writer left half done
    assert run_cli("sql", "SELECT count(*) AS n FROM runs", "--format", "json", warehouse=warehouse).stdout
    assert snapshot(warehouse) in (expected_before, expected_after)
    assert not (warehouse / ".state" / "publishing.json").exists()
    # and the next run completes, ending where a clean ingest ends
    run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet", warehouse=warehouse)
    assert snapshot(warehouse) == expected_after
    leftovers = [p.name for p in warehouse.iterdir() if p.name.endswith((".tmp", ".link"))]
    versions = {table.name: len(list(table.iterdir())) for table in (warehouse / ".versions").iterdir()}
    assert leftovers == [] and set(versions.values()) == {1}, (leftovers, versions)


@pytest.mark.slow
@pytest.mark.parametrize("point, told", [
    ("wrote-file:runs", "no table was replaced: the warehouse keeps its previous tables"),
    ("publishing:journal", "tables already replaced keep their new version (ingest_manifest, runs, scenarios), "
                           "the others their previous one; run the command again to finish"),
])
def test_sigterm_is_answered_as_ctrl_c_with_143(tmp_path, trees, point, told):
    """What a service manager, `timeout` or Kubernetes sends: the command unwinds as after a Ctrl-C
    (nothing half made left behind, a publish begun finished) and says so in one line, exit 143."""
    before, after, expected_before, expected_after, _ = trees
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(before), "--scenarios", str(before / "scenarios"), "--quiet", warehouse=warehouse)
    stopped = run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet",
                      warehouse=warehouse, check=143,
                      env={"LOOPMETER_CRASH_AT": point, "LOOPMETER_CRASH_SIGNAL": "TERM"})
    assert stopped.stderr.splitlines() == [f"loopmeter: terminated (SIGTERM); {told}"]
    assert snapshot(warehouse) == (expected_before if point == "wrote-file:runs" else expected_after)
    assert not (warehouse / ".state" / "publishing.json").exists()
    # a writer's thread the signal left may still have written a file of its version: the next writer removes it
    run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet", warehouse=warehouse)
    assert snapshot(warehouse) == expected_after
    versions = {table.name: len(list(table.iterdir())) for table in (warehouse / ".versions").iterdir()}
    assert set(versions.values()) == {1}, versions


@pytest.mark.slow
@pytest.mark.parametrize("signal_name, code", [("INT", 130), ("TERM", 143)])
def test_a_first_forge_ingest_stopped_leaves_no_folder_of_its_tables(tmp_path, trees, signal_name, code):
    """The Forge tables' first versions, written and then given up: neither they nor their tables'
    folders of versions stay in the warehouse (only the ForgeLoop tables it held before)."""
    from loopmeter.forge import samples

    before = trees[0]
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(before), "--quiet", warehouse=warehouse)
    held = sorted(path.name for path in (warehouse / ".versions").iterdir())
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", [], samples.routing_events(60))
    stopped = run_cli("ingest", "forge", str(store), "--quiet", warehouse=warehouse, check=code,
                      env={"LOOPMETER_CRASH_AT": "wrote-file:forge_tasks", "LOOPMETER_CRASH_SIGNAL": signal_name})
    assert stopped.stderr.splitlines()[-1].endswith("no table was replaced: the warehouse keeps its previous tables")
    assert sorted(path.name for path in (warehouse / ".versions").iterdir()) == held


@pytest.mark.slow
def test_a_second_writer_is_told_who_holds_the_lock_and_can_wait(tmp_path, trees):
    before = trees[0]
    warehouse = Warehouse(tmp_path / "warehouse")
    with warehouse.lock(command="test holder"):
        busy = run_cli("ingest", "forgeloop", str(before), warehouse=warehouse.root, check=4)
        assert f"is locked by pid {os.getpid()}" in busy.stderr and "(test holder)" in busy.stderr
        assert "pass --wait" in busy.stderr
        waiting = subprocess.Popen(
            [sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(before), "--wait", "--quiet", "--warehouse", str(warehouse.root)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        # its first line says it waits: read it (however long the machine takes to start the process),
        # then the lock is let go
        ready = selectors.DefaultSelector()
        ready.register(waiting.stderr, selectors.EVENT_READ)
        assert ready.select(timeout=120), "the waiting ingest said nothing in 120 s"
        first = waiting.stderr.readline()
        assert "waiting for the warehouse lock held by" in first and "(test holder)" in first
        assert waiting.poll() is None, "the waiting ingest must not run while the lock is held"
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, first + err
    assert Warehouse(warehouse.root).read("runs").height == 180


@pytest.mark.slow
def test_a_writer_waits_for_a_reader_finishing_a_killed_writers_publish(tmp_path, trees):
    """A reader that finds a half-done publish finishes it under the writer lock; a writer that
    starts then, without --wait, waits for that moment instead of saying the lock is held."""
    before, after = trees[0], trees[1]
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(before), "--quiet", warehouse=warehouse)
    run_cli("ingest", "forgeloop", str(after), "--quiet", warehouse=warehouse, check=-9,
            env={"LOOPMETER_CRASH_AT": "publishing:swapped:runs"})
    assert (warehouse / ".state" / "publishing.json").exists()
    run_cli("sql", "SELECT count(*) FROM runs", warehouse=warehouse)  # the reader finishes it
    assert not (warehouse / ".state" / "publishing.json").exists()
    assert f"({FINISHING})" in (warehouse / ".lock").read_text()  # what a writer finds meanwhile
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    killed_writers_line = f"pid {gone} on {socket.gethostname()} (ingest forgeloop) since 2026-11-30T00:00:00Z\n"
    with open(warehouse / ".lock", "a+") as handle:  # such a reader, holding the lock a moment
        fcntl.flock(handle, fcntl.LOCK_EX)
        # first as it has just taken the lock: the file still names the killed writer, a process gone
        handle.seek(0)
        handle.truncate()
        handle.write(killed_writers_line)
        handle.flush()
        writer = subprocess.Popen([sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(after), "--quiet",
                                   "--warehouse", str(warehouse)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} ({FINISHING})\n")
        handle.flush()
        time.sleep(1.5)
        assert writer.poll() is None, writer.communicate()
    _, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert "waiting" not in err and "locked" not in err
    # a holder that never says who it is: told after a moment
    with open(warehouse / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(killed_writers_line)
        handle.flush()
        started = time.monotonic()
        busy = run_cli("ingest", "forgeloop", str(after), warehouse=warehouse, check=4)
        assert f"locked by pid {gone}" in busy.stderr and time.monotonic() - started < 30
    # any other holder: told at once
    with Warehouse(warehouse).lock(command="test holder"):
        busy = run_cli("ingest", "forgeloop", str(after), warehouse=warehouse, check=4)
        assert "(test holder)" in busy.stderr


@pytest.mark.slow
def test_two_ingests_at_once_end_in_one_consistent_warehouse(tmp_path, trees):
    after, expected_after = trees[1], trees[4]
    warehouse = tmp_path / "warehouse"
    processes = [
        subprocess.Popen([sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(tree), "--scenarios", str(tree / "scenarios"),
                          "--wait", "--quiet", "--warehouse", str(warehouse)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for tree in (after, after)
    ]
    said = [p.communicate(timeout=180) for p in processes]  # read to the end: a full pipe would stop a writer
    assert [p.returncode for p in processes] == [0, 0], said
    assert snapshot(warehouse) == expected_after


# ---- hostile documents: never a traceback, every file accounted for ------------------------
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=8))
json_values = st.recursive(json_scalars, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)), max_leaves=8)


def _paths(document, prefix=()):
    yield prefix
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _paths(value, (*prefix, key))


@st.composite
def mutated_runs(draw):
    document = run(index=draw(st.integers(1, 40)), tokens=draw(st.integers(0, 10**6)),
                   diagnostics={"modelTurns": 1, "flags": []}, quality={"source": "EXTERNAL_REPORTED", "scores": {"accessibility": 4.0}})
    for _ in range(draw(st.integers(0, 3))):
        paths = [p for p in _paths(document) if p]
        path = draw(st.sampled_from(paths))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.booleans()):
            parent[path[-1]] = draw(json_values)
        else:
            del parent[path[-1]]
    return document


@pytest.mark.slow
@given(st.lists(mutated_runs(), min_size=1, max_size=8), st.lists(st.binary(max_size=40), max_size=2))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzzed_documents_never_crash_and_are_all_accounted_for(documents, raw_bytes):
    directory = Path(tempfile.mkdtemp())
    try:
        folder = directory / "results" / "raw" / "rs-test"
        folder.mkdir(parents=True)
        for index, document in enumerate(documents):
            (folder / f"doc-{index:02d}.json").write_text(json.dumps(document))
        for index, content in enumerate(raw_bytes):
            (folder / f"bytes-{index}.json").write_bytes(content)
        outcome = ingest_forgeloop(Warehouse(directory / "warehouse"), directory / "results")
        assert outcome.seen == len(documents) + len(raw_bytes)
        manifest = Warehouse(directory / "warehouse").read("ingest_manifest")
        assert manifest.height == outcome.seen
        rejected = manifest.filter(pl.col("status") == "rejected")
        assert rejected["field"].null_count() == 0 and rejected["reason"].null_count() == 0
        assert all("\n" not in reason for reason in rejected["reason"])
        stored = Warehouse(directory / "warehouse").read("runs")
        accepted = manifest.filter(pl.col("status") == "accepted")["path"].sort().to_list()
        assert (stored["source_path"].sort().to_list() if stored is not None else []) == accepted
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_same_inputs_give_byte_identical_documents_and_the_same_rows(tmp_path, trees):
    before = trees[0]
    outputs = []
    for attempt in range(2):
        warehouse = tmp_path / f"warehouse-{attempt}"
        run_cli("ingest", "forgeloop", str(before), "--scenarios", str(before / "scenarios"), "--quiet", warehouse=warehouse)
        run_cli("aggregate", "--out", str(tmp_path / f"out-{attempt}"), "--quiet", warehouse=warehouse)
        outputs.append(warehouse)
    files = sorted(p.relative_to(tmp_path / "out-0") for p in (tmp_path / "out-0").rglob("*.json"))
    assert len(files) == 14
    for relative in files:
        assert (tmp_path / "out-0" / relative).read_bytes() == (tmp_path / "out-1" / relative).read_bytes()
    assert snapshot(outputs[0]) == snapshot(outputs[1])


# ---- the Forge ingest, killed half way ---------------------------------------------------------
FORGE_CRASH_POINTS = [
    "after-publish:forge_attempt_events",  # some per-event tables stored, forge_events not yet
    "after-publish:forge_tasks",
    "wrote-file:forge_events",  # forge_events half-written
    "after-publish:forge_events",  # the first month of events stored, the others not
    "publishing:journal",
    "publishing:swapped:forge_plans",
]


@pytest.fixture(scope="module")
def forge_store(tmp_path_factory):
    from loopmeter.forge.samples import write_sample

    base = tmp_path_factory.mktemp("forge")
    write_sample(base, runs=40, git=False)
    clean = base / "clean"
    run_cli("ingest", "forge", str(base / "dataset.sqlite"), "--quiet", warehouse=clean)
    return base / "dataset.sqlite", snapshot(clean)


@pytest.mark.slow
@pytest.mark.parametrize("point", FORGE_CRASH_POINTS)
def test_a_killed_forge_ingest_is_completed_by_the_next_run(tmp_path, forge_store, point):
    store, expected = forge_store
    warehouse = tmp_path / "warehouse"
    killed = run_cli("ingest", "forge", str(store), "--quiet", warehouse=warehouse, check=-9, env={"LOOPMETER_CRASH_AT": point})
    assert killed.returncode == -9
    for name in Warehouse(warehouse).table_names():  # whatever was stored reads whole
        assert Warehouse(warehouse).read(name) is not None
    # the tables are published together: none before the journal, all once a reader finishes its swaps
    run_cli("sql", "SELECT 1 AS one", "--format", "json", warehouse=warehouse, check=None)  # no catalog yet: exits 1
    assert snapshot(warehouse) == (expected if point.startswith("publishing:") else {})
    run_cli("ingest", "forge", str(store), "--quiet", warehouse=warehouse)
    seen = snapshot(warehouse)
    assert set(seen) == set(expected)
    for name in expected:
        assert seen[name] == expected[name], name


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after-publish:forge_outcomes", "wrote-file:forge_events"])
def test_a_killed_harvest_records_each_outcome_once_next_time(tmp_path, point):
    from loopmeter.forge.samples import write_sample

    info = write_sample(tmp_path / "forge", runs=20)
    outcomes = {}
    for name, crash in (("clean", None), ("killed", point)):
        warehouse = tmp_path / name
        run_cli("ingest", "forge", str(tmp_path / "forge" / "dataset.sqlite"), "--quiet", warehouse=warehouse)
        harvest = ["harvest", "survival", "--now", str(info["now"]), "--include-temp", "--quiet"]
        if crash:
            assert run_cli(*harvest, warehouse=warehouse, check=-9, env={"LOOPMETER_CRASH_AT": crash}).returncode == -9
        run_cli(*harvest, warehouse=warehouse)
        store = Warehouse(warehouse)
        events = store.read("forge_events").filter(pl.col("kind") == "outcome")["rid"].sort().to_list()
        recorded = store.read("forge_outcomes")["rid"].sort().to_list()
        assert events == recorded and len(set(events)) == len(events) > 0
        outcomes[name] = recorded
    assert outcomes["killed"] == outcomes["clean"]


# ---- hostile Forge store rows ------------------------------------------------------------------
@st.composite
def mutated_streams(draw):
    from loopmeter.forge.samples import routing_events

    events = [dict(event, data=dict(event["data"])) for event in routing_events(3, seed=draw(st.integers(0, 5)))]
    for _ in range(draw(st.integers(1, 6))):
        event = events[draw(st.integers(0, len(events) - 1))]
        target = event["data"] if draw(st.booleans()) and isinstance(event.get("data"), dict) and event["data"] else event
        key = draw(st.sampled_from(sorted(target)))
        if draw(st.booleans()):
            target[key] = draw(json_values)
        else:
            del target[key]
    lines = [json.dumps(event) for event in events]
    for _ in range(draw(st.integers(0, 2))):  # a line that is not a JSON object at all
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["{", "[1, 2]", "null", '"text"', "{\"rid\": 5}"])))
    return lines


@pytest.mark.slow
@given(mutated_streams())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzzed_forge_lines_never_crash_and_are_all_accounted_for(lines):
    from loopmeter.forge.ingest import ingest_forge

    directory = Path(tempfile.mkdtemp())
    try:
        export = directory / "export.jsonl"
        export.write_text("\n".join(lines) + "\n")
        warehouse = Warehouse(directory / "warehouse")
        with warehouse.lock():
            result = ingest_forge(warehouse, export)
        assert result.read == len(lines)
        assert result.stored + result.duplicates + result.rejected + result.repo_lines == result.read
        assert all(r.field and r.rule and "\n" not in r.rule for r in result.rejections)
        assert all(r.line is not None and 1 <= r.line <= len(lines) for r in result.rejections)
        stored = Warehouse(directory / "warehouse").read("forge_events")
        assert stored.height == result.stored and stored["rid"].n_unique() == stored.height
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_a_jsonl_export_whose_first_line_is_broken_still_loads(tmp_path):
    from loopmeter.forge.samples import routing_events

    events = routing_events(1)
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join(["[1, 2]", *(json.dumps(event) for event in events)]) + "\n")
    result = run_cli("ingest", "forge", str(export), "--json", warehouse=tmp_path / "w", check=3)
    outcome = json.loads(result.stdout)
    assert outcome["stored"] == len(events) and outcome["rejected"] == 1
    assert outcome["rejections"][0]["line"] == 1


@pytest.mark.slow
def test_a_killed_ingest_leaves_no_scratch_behind_the_next_writer(tmp_path, trees):
    before = trees[0]
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(before), "--quiet", warehouse=warehouse, check=-9,
            env={"LOOPMETER_CRASH_AT": "ingest:read"})
    assert list((warehouse / ".scratch").iterdir())  # the killed ingest's spooled manifest
    run_cli("ingest", "forgeloop", str(before), "--quiet", warehouse=warehouse)
    assert list((warehouse / ".scratch").iterdir()) == []


# ---- the aggregate, killed half way ------------------------------------------------------------
AGGREGATE_CRASH_POINTS = [
    ("staged:set-b", None),  # documents being staged beside their folders, nothing swapped
    ("publishing:journal", None),  # tables and folders named in the journal, nothing swapped
    ("publishing:swapped:forgeloop_mode_runs", None),  # a table swapped, the folders not
    ("publishing:swapped-folder:set-a", None),  # a folder swapped, the others not
    ("publishing:swapped-folder:set-a", "1"),  # the same, the folders swapped by renaming aside
    ("aside:set-b", "1"),  # set-b's old folder renamed aside, its new one not yet in place
]


def documents(out: Path) -> dict[str, bytes]:
    """What a reader of the documents sees (hidden entries are not documents)."""
    return {str(path.relative_to(out)): path.read_bytes()
            for path in sorted(out.rglob("*.json")) if not any(part.startswith(".") for part in path.relative_to(out).parts)}


@pytest.fixture(scope="module")
def aggregated(trees, tmp_path_factory):
    """The documents an aggregate writes for the tree before, and for the tree after."""
    before, after = trees[:2]
    base = tmp_path_factory.mktemp("aggregated")
    states = []
    for name, tree in (("before", before), ("after", after)):
        run_cli("ingest", "forgeloop", str(tree), "--scenarios", str(tree / "scenarios"), "--quiet", warehouse=base / name)
        run_cli("aggregate", "--out", str(base / f"out-{name}"), "--quiet", warehouse=base / name)
        states.append(documents(base / f"out-{name}"))
    return states


@pytest.mark.slow
@pytest.mark.parametrize(("point", "no_exchange"), AGGREGATE_CRASH_POINTS)
def test_a_killed_aggregate_leaves_whole_folders_and_the_next_command_one_aggregate(tmp_path, trees, aggregated, point, no_exchange):
    before, after = trees[:2]
    old, new = aggregated
    warehouse, out = tmp_path / "warehouse", tmp_path / "out"
    run_cli("ingest", "forgeloop", str(before), "--scenarios", str(before / "scenarios"), "--quiet", warehouse=warehouse)
    run_cli("aggregate", "--out", str(out), "--quiet", warehouse=warehouse)
    (out / "set-a" / "notes.txt").write_text("a user's")  # not a document: kept through everything
    run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet", warehouse=warehouse)
    env = {"LOOPMETER_CRASH_AT": point, **({"LOOPMETER_NO_EXCHANGE": no_exchange} if no_exchange else {})}
    # --out relative to where the aggregate ran: the journal still holds when the next command runs elsewhere
    run_cli("aggregate", "--out", "out", "--quiet", warehouse=warehouse, check=-9, env=env, cwd=tmp_path)
    seen = documents(out)
    for run_set in ("set-a", "set-b", "set-c"):  # every folder is one aggregate's, never a mix
        mine, *whole = ({path: text for path, text in files.items() if path.startswith(f"{run_set}/")}
                        for files in (seen, old, new))
        if point == f"aside:{run_set}":
            whole.append({})  # renamed aside, the new one not in place yet: absent, until the next command
        assert mine in whole, run_set
    # a reader finishes a publish the killed writer left half done: documents and tables, one aggregate's
    rows = json.loads(run_cli("sql", "SELECT DISTINCT run_set_id FROM forgeloop_mode_runs ORDER BY 1", "--format", "json",
                              warehouse=warehouse).stdout)
    tables_new = [row["run_set_id"] for row in rows] == ["set-a", "set-b", "set-c"]
    assert documents(out) == (new if tables_new else old)
    assert tables_new == (point.startswith("publishing:") or point.startswith("aside:"))
    assert not (warehouse / ".state" / "publishing.json").exists()
    assert (out / "set-a" / "notes.txt").read_text() == "a user's"
    run_cli("aggregate", "--out", str(out), "--quiet", warehouse=warehouse)
    assert documents(out) == new
    assert sorted(p.name for p in out.iterdir()) == ["set-a", "set-b", "set-c"]  # nothing left beside them
    assert (out / "set-a" / "notes.txt").read_text() == "a user's"
    run_cli("aggregate", "--out", str(out), "--full", "--quiet", warehouse=warehouse)
    assert documents(out) == new


@pytest.mark.slow
def test_a_folder_the_next_command_cannot_swap_in_stays_in_the_journal_and_the_writer_says_why(tmp_path, trees, aggregated):
    before, after = trees[:2]
    old, new = aggregated
    warehouse, out = tmp_path / "warehouse", tmp_path / "out"
    run_cli("ingest", "forgeloop", str(before), "--scenarios", str(before / "scenarios"), "--quiet", warehouse=warehouse)
    run_cli("aggregate", "--out", str(out), "--quiet", warehouse=warehouse)
    run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet", warehouse=warehouse)
    run_cli("aggregate", "--out", str(out), "--quiet", warehouse=warehouse, check=-9,
            env={"LOOPMETER_CRASH_AT": "publishing:journal"})
    journal = warehouse / ".state" / "publishing.json"
    out.chmod(0o555)  # the folders cannot be renamed in it (for a user without root's override)
    try:
        failed = run_as_a_user([sys.executable, "-m", "loopmeter", "aggregate", "--out", str(out), "--warehouse", str(warehouse)])
        assert failed.returncode == 1, failed.stderr
        last = failed.stderr.strip().splitlines()[-1]
        assert "an interrupted aggregate's documents could not be swapped in" in last and str(journal) in last, last
        assert "Traceback" not in failed.stderr
        assert json.loads(journal.read_text())["tables"] == {}  # the tables were finished; the folders wait
        assert len(json.loads(journal.read_text())["folders"]) == 3
        assert documents(out) == old
    finally:
        out.chmod(0o755)
    run_cli("sql", "SELECT 1", warehouse=warehouse)  # a reader finishes it now
    assert not journal.exists() and documents(out) == new


@pytest.mark.parametrize("journal_text", [
    '[1, 2]', '{"folders": [{"bad": 1}, 7]}', '{"folders": "x"}', '{"tables": null, "folders": null}',
    '{"runs": null}', '{"folders": [{"staged": "/nowhere/.a.1.loopmeter-new", "target": "/nowhere/a", "inode": [1, 2]}]}',
    '{"folders": [{"staged": "STAGED", "target": "TARGET", "inode": "INODE"}]}',  # not a staged folder of it: untouched
])
def test_a_journal_loopmeter_did_not_write_is_dropped_without_a_crash(tmp_path, trees, journal_text):
    before = trees[0]
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(before), "--quiet", warehouse=warehouse)
    expected = snapshot(warehouse)
    journal = warehouse / ".state" / "publishing.json"
    elsewhere, target = tmp_path / "someone's", tmp_path / "target"
    for folder in (elsewhere, target):
        folder.mkdir()
        (folder / "file").write_text(folder.name)
    status = elsewhere.stat()
    journal.write_text(journal_text.replace("STAGED", str(elsewhere)).replace("TARGET", str(target))
                       .replace('"INODE"', json.dumps([status.st_dev, status.st_ino])))
    run_cli("sql", "SELECT count(*) FROM runs", warehouse=warehouse)
    assert not journal.exists() and snapshot(warehouse) == expected
    assert [(folder / "file").read_text() for folder in (elsewhere, target)] == ["someone's", "target"]


@pytest.mark.slow
def test_a_journal_of_another_form_is_named_not_followed_and_the_tables_stay_whole(tmp_path, trees):
    """A journal of tables only ({table: version}) is none loopmeter writes: its swaps are not made, it is
    named and removed, and every table keeps the version its link holds (whole, swapped in one rename)."""
    before, after, expected_before, _, _ = trees
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(before), "--scenarios", str(before / "scenarios"), "--quiet", warehouse=warehouse)
    run_cli("ingest", "forgeloop", str(after), "--scenarios", str(after / "scenarios"), "--quiet", warehouse=warehouse,
            check=-9, env={"LOOPMETER_CRASH_AT": "publishing:journal"})
    journal = warehouse / ".state" / "publishing.json"
    journal.write_text(json.dumps(json.loads(journal.read_text())["tables"]))
    answered = run_cli("sql", "SELECT count(*) FROM runs", warehouse=warehouse)
    assert f"loopmeter: warning: {journal}: it holds no tables and folders to publish; loopmeter did not write it" \
        in answered.stderr
    assert not journal.exists() and snapshot(warehouse) == expected_before


def _forgeloop_tables(warehouse: Path) -> dict:
    return {name: rows for name, rows in snapshot(warehouse).items() if name.startswith("forgeloop_")}


@pytest.fixture(scope="module")
def interrupted_aggregates(tmp_path_factory):
    """A warehouse holding the runs of `after` and the aggregate (documents and tables) of
    `before`, and what the aggregate of each gives: twelve run sets, every document different."""
    base = tmp_path_factory.mktemp("interrupted")
    plans = [RunSetPlan(f"set-{index:02d}", 4) for index in range(12)]
    states = []
    for name, seed in (("before", 21), ("after", 22)):
        write_results(base / name, plans, seed=seed)
        run_cli("ingest", "forgeloop", str(base / name), "--scenarios", str(base / name / "scenarios"), "--quiet",
                warehouse=base / f"w-{name}")
        run_cli("aggregate", "--out", str(base / f"out-{name}"), "--quiet", warehouse=base / f"w-{name}")
        states.append((documents(base / f"out-{name}"), _forgeloop_tables(base / f"w-{name}")))
    run_cli("ingest", "forgeloop", str(base / "after"), "--scenarios", str(base / "after" / "scenarios"), "--quiet",
            warehouse=base / "w-before")
    assert states[0][0] != states[1][0] and states[0][1] != states[1][1]
    return base / "w-before", base / "out-before", states


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_an_aggregate_stopped_at_any_moment_leaves_one_aggregate_s_documents_and_tables(tmp_path, interrupted_aggregates, how):
    """No crash points: the aggregate is stopped after a range of delays, as a user's Ctrl-C or
    the OOM killer would, and what is left (once a reader finished any journal) is all the
    old aggregate or all the new, documents and tables alike."""
    prepared, prepared_out, ((old_documents, old_tables), (new_documents, new_tables)) = interrupted_aggregates
    number = getattr(signal, how)

    def start(attempt: int) -> tuple[subprocess.Popen, Path, Path]:
        warehouse, out = tmp_path / f"w-{attempt}", tmp_path / f"out-{attempt}"
        shutil.copytree(prepared, warehouse, symlinks=True)
        shutil.copytree(prepared_out, out)
        return subprocess.Popen([sys.executable, "-m", "loopmeter", "aggregate", "--full", "--out", str(out),
                                 "--warehouse", str(warehouse), "--quiet"], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), warehouse, out

    began = time.monotonic()
    start(99)[0].communicate(timeout=60)  # how long a whole one takes here, now: the stops spread over it
    whole = time.monotonic() - began
    outcomes = []
    for attempt, fraction in enumerate([0.35, 0.5, 0.6, 0.7, 0.8, 0.87, 0.94, 1.0]):
        process, warehouse, out = start(attempt)
        time.sleep(whole * fraction)
        process.send_signal(number)
        _, stderr = process.communicate(timeout=60)
        run_cli("sql", "SELECT 1", warehouse=warehouse)  # a reader: finishes a journal a killed writer left
        seen = (documents(out), _forgeloop_tables(warehouse))
        assert seen in ((old_documents, old_tables), (new_documents, new_tables)), (fraction, process.returncode, stderr)
        assert "Traceback" not in stderr.decode(), stderr
        outcomes.append("new" if seen[0] == new_documents else "old")
        run_cli("aggregate", "--out", str(out), "--quiet", warehouse=warehouse)
        assert (documents(out), _forgeloop_tables(warehouse)) == (new_documents, new_tables)
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert "old" in outcomes, outcomes  # some stops came before the end: the test saw interrupted aggregates


def test_an_out_the_documents_cannot_be_written_to_is_told_in_one_line_and_nothing_is_replaced(tmp_path, trees):
    before = trees[0]
    warehouse, out = tmp_path / "warehouse", tmp_path / "out"
    run_cli("ingest", "forgeloop", str(before), "--scenarios", str(before / "scenarios"), "--quiet", warehouse=warehouse)
    out.mkdir(mode=0o555)
    try:
        failed = run_as_a_user([sys.executable, "-m", "loopmeter", "aggregate", "--out", str(out), "--warehouse", str(warehouse)])
    finally:
        out.chmod(0o755)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith(
        f"loopmeter: error: --out {out}: the documents of run set set-a cannot be written (Permission denied: "), failed.stderr
    assert list(out.iterdir()) == [] and not any(name.startswith("forgeloop_") for name in os.listdir(warehouse))
