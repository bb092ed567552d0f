"""`aggregate` computes only the run sets that changed since the last one, and its result is
exactly what a full aggregate gives: the same documents, byte for byte, and the same tables."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from loopmeter.engines import Engine
from loopmeter.forgeloop.incremental import TABLES
from loopmeter.forgeloop.ingest import ingest_forgeloop
from loopmeter.forgeloop.samples import RunSetPlan, write_results
from loopmeter.forgeloop.aggregation import aggregate
from loopmeter.storage import Warehouse

PLANS = [RunSetPlan(f"rs-{index}", 4, "1" if index == 2 else "2", ("api-feature", "small-bug-fix")) for index in range(4)]


@pytest.fixture
def tree(tmp_path) -> Path:
    results = tmp_path / "results"
    write_results(results, PLANS, seed=3)
    return results


def ingest(warehouse: Warehouse, results: Path) -> None:
    with warehouse.lock():
        ingest_forgeloop(warehouse, results, results / "scenarios")


def run_aggregate(warehouse: Warehouse, out: Path, **options):
    with warehouse.lock():
        return aggregate(warehouse, out, **options)


def assert_same_as_full(warehouse: Warehouse, out: Path, tmp_path: Path) -> None:
    """Documents and tables equal those of a full aggregate made afresh in another warehouse."""
    tables = {name: warehouse.read(name) for name in TABLES}
    fresh = Warehouse(tmp_path / "fresh")
    shutil.rmtree(fresh.root, ignore_errors=True)
    shutil.copytree(warehouse.root, fresh.root, symlinks=True)
    shutil.rmtree(fresh.root / ".state")
    run_aggregate(fresh, tmp_path / "full")
    differences = subprocess.run(["diff", "-r", str(out), str(tmp_path / "full")], capture_output=True, text=True)
    assert differences.returncode == 0, differences.stdout[:2000]
    for name in TABLES:
        assert tables[name].equals(fresh.read(name)), name


@pytest.mark.slow
def test_only_changed_run_sets_are_computed_and_the_result_equals_a_full_aggregate(tree, tmp_path):
    warehouse, out = Warehouse(tmp_path / "w"), tmp_path / "out"
    ingest(warehouse, tree)
    first = run_aggregate(warehouse, out)
    assert first.plan.full and [docs.run_set_id for docs in first.documents] == ["rs-0", "rs-1", "rs-2", "rs-3"]
    versions = {name: os.readlink(warehouse.root / name) for name in TABLES}

    again = run_aggregate(warehouse, out)
    assert not again.plan.full and again.documents == [] and sorted(again.plan.kept) == ["rs-0", "rs-1", "rs-2", "rs-3"]
    assert {name: os.readlink(warehouse.root / name) for name in TABLES} == versions  # nothing written

    # one run changed in rs-1, a new run set rs-9, every run of rs-3 rejected (its rows go)
    changed = tree / "raw" / "rs-1" / "api-feature" / "direct" / "run-002.json"
    document = json.loads(changed.read_text())
    document["usage"]["totalTokens"] += 12345
    changed.write_text(json.dumps(document))
    write_results(tmp_path / "more", [RunSetPlan("rs-9", 4, "2", ("api-feature", "docs-update"))], seed=5)
    shutil.copytree(tmp_path / "more" / "raw" / "rs-9", tree / "raw" / "rs-9")
    shutil.copy(tmp_path / "more" / "scenarios" / "api-feature.json", tree / "scenarios" / "api-feature.json")
    for path in (tree / "raw" / "rs-3").rglob("*.json"):
        path.write_text("{")
    ingest(warehouse, tree)
    third = run_aggregate(warehouse, out)
    assert not third.plan.full
    assert [docs.run_set_id for docs in third.documents] == ["rs-1", "rs-9"]
    assert sorted(third.plan.kept) == ["rs-0", "rs-2"] and third.plan.removed == ["rs-3"]
    shutil.rmtree(out / "rs-3")  # a full aggregate does not remove documents either; compare the rest
    assert_same_as_full(warehouse, out, tmp_path)


@pytest.mark.slow
def test_adding_a_run_set_takes_the_files_of_the_kept_ones_as_they_are(tree, tmp_path):
    """Files holding only kept run sets are hard-linked into the new versions (same inode, not
    rewritten); one holding a changed run set beside kept ones is read and filtered. Either way
    the tables equal a full aggregate's."""
    warehouse, out = Warehouse(tmp_path / "w"), tmp_path / "out"
    ingest(warehouse, tree)
    one_per_file = Engine(bucket_runs=1)  # a bucket, so a file per table, per run set
    run_aggregate(warehouse, out, engine=one_per_file)
    before = {name: [os.stat(file).st_ino for file in warehouse.table_file_list(name)]
              for name in TABLES if name != "forgeloop_documents"}
    assert len(before["forgeloop_mode_runs"]) == 4 and len(before["forgeloop_mode_stats"]) == 4

    write_results(tmp_path / "more", [RunSetPlan("rs-9", 4, "2", ("api-feature", "small-bug-fix"))], seed=5)
    shutil.copytree(tmp_path / "more" / "raw" / "rs-9", tree / "raw" / "rs-9")
    ingest(warehouse, tree)
    added = run_aggregate(warehouse, out, engine=one_per_file)
    assert [docs.run_set_id for docs in added.documents] == ["rs-9"]
    for name, inodes in before.items():
        now = [os.stat(file).st_ino for file in warehouse.table_file_list(name)]
        assert now[:len(inodes)] == inodes and len(now) >= len(inodes), name
    assert_same_as_full(warehouse, out, tmp_path)


@pytest.mark.slow
def test_touched_documents_other_options_and_other_writers_are_noticed(tree, tmp_path):
    warehouse, out = Warehouse(tmp_path / "w"), tmp_path / "out"
    ingest(warehouse, tree)
    run_aggregate(warehouse, out)
    (out / "rs-2" / "summary.json").unlink()
    (out / "rs-0" / "api-feature.json").write_text("edited by hand\n")
    touched = run_aggregate(warehouse, out)
    assert [docs.run_set_id for docs in touched.documents] == ["rs-0", "rs-2"]
    assert_same_as_full(warehouse, out, tmp_path)
    assert run_aggregate(warehouse, out, tier="tail").plan.full  # the tier is in summary.json
    assert run_aggregate(warehouse, tmp_path / "elsewhere", tier="tail").plan.full
    assert run_aggregate(warehouse, tmp_path / "elsewhere", tier="tail").documents == []
    assert run_aggregate(warehouse, out, tier="tail", full=True).plan.full
    # another command rewrote the tables (an aggregate of one run set): all again
    run_cli("aggregate", "--run-set", "rs-1", "--out", str(out), "--quiet", warehouse=warehouse.root)
    assert run_aggregate(warehouse, out, tier="tail").plan.full
    # a changed scenario profile changes lightObjectives: all again
    scenario = tree / "scenarios" / "api-feature.json"
    scenario.write_text(scenario.read_text().replace('"balanced"', '"light"'))
    ingest(warehouse, tree)
    assert run_aggregate(warehouse, out, tier="tail").plan.full


@pytest.mark.slow
@pytest.mark.parametrize("copy", [shutil.copy2, shutil.copy], ids=["times-kept", "times-new"])
def test_a_warehouse_copied_or_moved_whole_computes_nothing_again(tree, tmp_path, copy):
    """Its documents inside it (the default place), copied as `cp -a` (times kept) or `cp -r` (times new)."""
    first = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(tree), "--scenarios", str(tree / "scenarios"), "--quiet", warehouse=first)
    run_cli("aggregate", "--quiet", warehouse=first)
    copied = tmp_path / "moved" / "w"
    shutil.copytree(first, copied, symlinks=True, copy_function=copy)
    shutil.rmtree(first)
    again = json.loads(run_cli("aggregate", "--json", warehouse=copied).stdout)
    assert [entry["recomputed"] for entry in again["runSets"]] == [False] * 4 and again["written"] == []
    # a document whose bytes changed (its size kept) is computed again, and only its run set
    summary = copied / "aggregate" / "rs-1" / "summary.json"
    text = summary.read_text()
    summary.write_text(text.replace('"runCount": 24', '"runCount": 25'))
    assert summary.read_text() != text
    touched = json.loads(run_cli("aggregate", "--json", warehouse=copied).stdout)
    assert [entry["runSetId"] for entry in touched["runSets"] if entry["recomputed"]] == ["rs-1"]
    assert summary.read_text() == text


@pytest.mark.slow
def test_the_command_says_what_it_computed(tree, tmp_path):
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(tree), "--scenarios", str(tree / "scenarios"), warehouse=warehouse)
    first = run_cli("aggregate", "--out", str(tmp_path / "out"), warehouse=warehouse)
    assert "rs-0: 2 scenarios, 24 runs" in first.stdout and "unchanged" not in first.stdout
    second = run_cli("aggregate", "--out", str(tmp_path / "out"), warehouse=warehouse)
    assert "0 run sets computed, 4 unchanged since the last aggregate" in second.stdout
    listed = json.loads(run_cli("aggregate", "--out", str(tmp_path / "out"), "--json", warehouse=warehouse).stdout)
    assert [(entry["runSetId"], entry["recomputed"]) for entry in listed["runSets"]] == [
        ("rs-0", False), ("rs-1", False), ("rs-2", False), ("rs-3", False)]
    assert listed["runSets"][0]["scenarios"] == ["api-feature", "small-bug-fix"] and listed["written"] == []
    full = json.loads(run_cli("aggregate", "--out", str(tmp_path / "out"), "--json", "--full", warehouse=warehouse).stdout)
    assert all(entry["recomputed"] for entry in full["runSets"]) and len(full["written"]) == 12


def test_a_full_aggregate_leaves_a_file_that_holds_its_text_already_as_it_is(tree, tmp_path):
    warehouse, out = Warehouse(tmp_path / "w"), tmp_path / "out"
    ingest(warehouse, tree)
    run_aggregate(warehouse, out)
    kept, damaged = out / "rs-0" / "api-feature.json", out / "rs-1" / "summary.json"
    text = damaged.read_bytes()
    damaged.write_bytes(text[:-2] + b"x\n")  # same length, other bytes
    for path in (kept, damaged):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    inode = kept.stat().st_ino
    result = run_aggregate(warehouse, out, full=True)
    assert kept in result.written and damaged in result.written
    assert kept.stat().st_mtime == 1_000_000_000 and kept.stat().st_ino == inode  # not written again
    assert damaged.read_bytes() == text and damaged.stat().st_mtime > 1_000_000_000  # replaced
    assert not [p for p in out.rglob(".*.tmp")]


@pytest.mark.slow
def test_an_out_directory_the_documents_cannot_go_to_is_told_before_anything_is_written(tree, tmp_path):
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(tree), "--scenarios", str(tree / "scenarios"), warehouse=warehouse)
    run_cli("aggregate", "--out", str(tmp_path / "out"), warehouse=warehouse)
    changed = tree / "raw" / "rs-1" / "api-feature" / "direct" / "run-002.json"
    document = json.loads(changed.read_text())
    document["usage"]["totalTokens"] += 12345
    changed.write_text(json.dumps(document))
    run_cli("ingest", "forgeloop", str(tree), "--scenarios", str(tree / "scenarios"), warehouse=warehouse)
    versions = {name: os.readlink(Path(warehouse) / name) for name in TABLES}
    shutil.rmtree(tmp_path / "out" / "rs-1")
    (tmp_path / "out" / "rs-1").write_text("in the way")
    failed = run_cli("aggregate", "--out", str(tmp_path / "out"), warehouse=warehouse, check=1)
    assert failed.stderr.strip().splitlines()[-1].endswith(
        f"{tmp_path / 'out' / 'rs-1'} is not a folder (a file, or a symbolic link: never written through); the documents of run set rs-1 go there")
    assert "Traceback" not in failed.stderr
    assert {name: os.readlink(Path(warehouse) / name) for name in TABLES} == versions  # the tables not replaced either
    (tmp_path / "a-file").write_text("")
    failed = run_cli("aggregate", "--out", str(tmp_path / "a-file" / "docs"), warehouse=warehouse, check=1)
    assert f"{tmp_path / 'a-file'} is not a directory" in failed.stderr and "Traceback" not in failed.stderr
    (tmp_path / "out" / "rs-1").unlink()
    run_cli("aggregate", "--out", str(tmp_path / "out"), warehouse=warehouse)  # the change is still to be computed
    assert json.loads((tmp_path / "out" / "rs-1" / "summary.json").read_text())


@pytest.mark.parametrize("name, facts", [
    ("../../../outside/secret.json", None), ("/proc/self/environ", None), ("rs-0/../summary.json", None),
    ("Summary.json", None), ("summary.json", {"runCount": "4"}), ("summary.json", {"extra": 1}),
])
def test_a_record_naming_what_an_aggregate_never_writes_is_not_used(tree, tmp_path, name, facts):
    """The record is the warehouse's, which may be anyone's: a document name that is not `summary.json` or
    `<scenario>.json` is never joined to a path (nothing outside is read), and facts of another shape are not
    printed; the record is not used, and every run set is computed again."""
    warehouse, out = Warehouse(tmp_path / "w"), tmp_path / "out"
    ingest(warehouse, tree)
    run_aggregate(warehouse, out)
    state = warehouse.root / ".state" / "forgeloop-aggregate.json"
    record = json.loads(state.read_text())
    entry = record["runSets"]["rs-1"]
    if facts is None:
        entry["documents"][name] = entry["documents"]["summary.json"]
    else:
        entry["facts"] = {**entry["facts"], **facts}
    state.write_text(json.dumps(record))
    again = run_aggregate(warehouse, out)
    assert again.plan.full and [docs.run_set_id for docs in again.documents] == ["rs-0", "rs-1", "rs-2", "rs-3"]
