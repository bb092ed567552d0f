"""A warehouse someone else has written into: a publish journal loopmeter did not write, and
symbolic links where its folders belong. No command creates, changes or removes anything
outside the warehouse; the journal is not followed in any part, and one line names it and why."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from forge_fixtures import tree_fingerprint
from runs import run, write_tree

JOURNAL = Path(".state") / "publishing.json"


@pytest.fixture
def place(demo_warehouse, tmp_path) -> tuple[Path, Path]:
    """(a copy of the demo warehouse, a folder beside it holding a user's files)."""
    warehouse = tmp_path / "base" / "warehouse"
    shutil.copytree(demo_warehouse, warehouse, symlinks=True)
    run_cli("sql", "SELECT 1", warehouse=warehouse)  # settled: its catalog rebuilt for the new place
    outside = tmp_path / "outside"
    (outside / "victim" / "deep").mkdir(parents=True)
    (outside / "victim" / "deep" / "kept.txt").write_text("a user's file\n")
    (outside / "victim" / "notes.txt").write_text("notes\n")
    return warehouse, outside


def tables(warehouse: Path) -> dict[str, str]:
    """Every file of the warehouse but the journal, the lock, the catalog (which `loopmeter catalog`
    rebuilds, and a reader may) and the records of the files verified and written (which every writer
    writes: inodes and times, new in a copy) with its state."""
    return {path: value for path, value in tree_fingerprint(warehouse).items()
            if path not in (".lock", str(JOURNAL), "loopmeter.duckdb", ".state/verified.json", ".state/written.json")
            and not path.startswith(".state/catalog")}


def forged(warehouse: Path, outside: Path) -> dict[str, tuple[str, str]]:
    version = os.readlink(warehouse / "runs")
    return {
        "a name climbing out": ('{"tables": {"state/../../../x": "VERSION"}, "folders": []}', '"state/../../../x" is not a table'),
        "a name out at once": ('{"tables": {"../x": "VERSION"}, "folders": []}', '"../x" is not a table'),
        "an absolute name": ('{"tables": {"OUTSIDE/x": "VERSION"}, "folders": []}', 'is not a table loopmeter knows'),
        "a name inside the state": ('{"tables": {".state/x": "VERSION"}, "folders": []}', '".state/x" is not a table'),
        "an absolute version": ('{"tables": {"runs": "OUTSIDE/victim"}, "folders": []}', "the version of runs"),
        "a version climbing out": ('{"tables": {"runs": ".versions/runs/../../../outside/victim"}, "folders": []}',
                                   "the version of runs"),
        "another table's version": ('{"tables": {"runs": "SCENARIOS"}, "folders": []}', "the version of runs"),
        "a version that is a link": ('{"tables": {"runs": ".versions/runs/linked"}, "folders": []}',
                                     "is not a real directory of .versions/runs/"),
        "an earlier loopmeter's form": ('{"../../x": "VERSION"}', 'it holds no tables and folders to publish'),
        "a staged folder that is a link": (json.dumps({"tables": {}, "folders": [{
            "staged": "OUTSIDE/.victim.0000.loopmeter-new", "target": "OUTSIDE/victim", "inode": [1, 2]}]}),
            "is a symbolic link"),
        "not JSON": ("{", "is not JSON"),
    }, version


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    "a name climbing out", "a name out at once", "an absolute name", "a name inside the state", "an absolute version",
    "a version climbing out", "another table's version", "a version that is a link", "an earlier loopmeter's form",
    "a staged folder that is a link", "not JSON",
])
@pytest.mark.parametrize("who", ["reader", "writer"])
def test_a_forged_journal_is_named_not_followed_and_removed(place, case, who):
    warehouse, outside = place
    cases, version = forged(warehouse, outside)
    text, rule = cases[case]
    (warehouse / ".versions" / "runs" / "linked").symlink_to(outside / "victim")
    (outside / ".victim.0000.loopmeter-new").symlink_to(outside / "victim" / "deep")
    text = (text.replace("VERSION", version).replace("SCENARIOS", os.readlink(warehouse / "scenarios"))
            .replace("OUTSIDE", str(outside)))
    journal = warehouse / JOURNAL
    journal.write_text(text)
    before, beside = tables(warehouse), tree_fingerprint(outside)
    if who == "reader":
        result = run_cli("sql", "SELECT count(*) AS n FROM runs", "--format", "csv", warehouse=warehouse)
        assert result.stdout == "n\n720\n"
        assert tables(warehouse) == before
    else:
        result = run_cli("catalog", warehouse=warehouse)  # a writer: it takes the lock, collects garbage
        assert not (warehouse / ".versions" / "runs" / "linked").is_symlink()  # the link went, not what it named
        del before[".versions/runs/linked"]
        before.pop(".scratch", None)  # a writer removes the scratch space a killed writer may have left
        assert tables(warehouse) == before
    (warning,) = [line for line in result.stderr.splitlines() if str(journal) in line]
    assert warning.startswith(f"loopmeter: warning: {journal}: ") and rule in warning, warning
    assert warning.endswith("; loopmeter did not write it: nothing it names was done, and it is removed"), warning
    assert not journal.exists()
    assert tree_fingerprint(outside) == beside
    # nothing beside the warehouse either, nor above it, where the names climbing out lead
    assert os.listdir(warehouse.parent) == ["warehouse"] and sorted(os.listdir(outside.parent)) == ["base", "outside"]


@pytest.mark.slow
def test_garbage_collection_removes_links_where_versions_belong_not_what_they_name(place):
    warehouse, outside = place
    versions = warehouse / ".versions"
    (versions / "evil").symlink_to(outside)  # the whole table folder a link
    (versions / "runs" / "old-version").symlink_to(outside / "victim")  # a version a link
    shutil.rmtree(warehouse / ".scratch", ignore_errors=True)  # a writer may have left it, or not
    (warehouse / ".scratch").symlink_to(outside / "victim")  # the scratch space a link
    beside, before = tree_fingerprint(outside), tables(warehouse)
    run_cli("catalog", warehouse=warehouse)  # a writer
    assert tree_fingerprint(outside) == beside
    assert not any(os.path.lexists(path) for path in (versions / "evil", versions / "runs" / "old-version",
                                                      warehouse / ".scratch"))
    for gone in (".versions/evil", ".versions/runs/old-version", ".scratch"):
        before.pop(gone)
    assert tables(warehouse) == before


@pytest.mark.slow
def test_a_table_link_pointing_outside_is_replaced_and_what_it_named_is_kept(place, tmp_path):
    warehouse, outside = place
    link = warehouse / "runs"
    link.unlink()
    link.symlink_to(outside / "victim")
    beside = tree_fingerprint(outside)
    results = write_tree(tmp_path / "results", [run(run_set="rs-new")])
    # a writer would take runs for absent and drop its versions: it refuses, naming the repair
    refused = run_cli("ingest", "forgeloop", str(results), "--quiet", warehouse=warehouse, check=1)
    assert "table runs has no link to its versions" in refused.stderr and "check --repair" in refused.stderr
    run_cli("check", "--repair", "--quiet", warehouse=warehouse)  # the link points at runs' version again
    run_cli("ingest", "forgeloop", str(results), "--quiet", warehouse=warehouse)
    assert tree_fingerprint(outside) == beside
    assert os.readlink(link).startswith(".versions/runs/")
    rows = run_cli("sql", "SELECT run_set_id, count(*) AS n FROM runs GROUP BY ALL ORDER BY ALL", "--format", "csv",
                   warehouse=warehouse)
    assert rows.stdout.startswith("run_set_id,n\n") and "rs-new,1\n" in rows.stdout and len(rows.stdout.splitlines()) > 2


@pytest.mark.slow
@pytest.mark.parametrize("folder", [".state", ".versions"])
@pytest.mark.parametrize("command", [("sql", "SELECT 1"), ("catalog",), ("check",)])
def test_a_state_or_versions_folder_that_is_a_link_is_refused_in_one_line(place, folder, command):
    """loopmeter writes and removes inside .state and .versions: a link there would take that outside."""
    warehouse, outside = place
    target = outside / "elsewhere"
    shutil.move(str(warehouse / folder), str(target))
    (warehouse / folder).symlink_to(target)
    beside = tree_fingerprint(outside)
    result = run_cli(*command, warehouse=warehouse, check=1)
    assert result.stderr.splitlines() == [
        f"loopmeter: error: {warehouse / folder} is a symbolic link; loopmeter keeps its own files there and never "
        "follows a link out of the warehouse: remove the link (what it points to is not touched)"], result.stderr
    assert tree_fingerprint(outside) == beside


@pytest.mark.parametrize("name", ["publishing.json", "verified.json", "catalog.json", "forgeloop-aggregate.json"])
def test_a_state_file_nested_too_deep_to_parse_is_named_and_taken_as_absent(place, name):
    """JSON nested 200,000 deep (Python's parser gives up on it with a RecursionError, not a
    ValueError): named in a warning, what it would record done again, and the command answers."""
    warehouse, _ = place
    expected = run_cli("report", "summary", "--json", warehouse=warehouse).stdout
    state = warehouse / ".state" / name
    state.write_text("[" * 200_000 + "]" * 200_000)
    state.chmod(0o600)  # as the verified record must be to be read at all
    answered = run_cli("report", "summary", "--json", warehouse=warehouse)
    assert answered.stdout == expected
    aggregated = run_cli("aggregate", "--quiet", warehouse=warehouse)  # what reads the aggregate's record
    told = answered.stderr + aggregated.stderr
    assert f"{state}" in told and "RecursionError" not in told
    assert run_cli("check", "--quiet", warehouse=warehouse).returncode == 0


@pytest.mark.parametrize("name", ["publishing.json", "verified.json", "catalog.json", "forgeloop-aggregate.json"])
def test_a_folder_in_place_of_a_state_file_is_named_by_check_and_removed_by_writers(place, name):
    """A folder named like a state file is never read, and is in the way of the file a writer renames
    there: `check` names it (exit 1), `--repair` removes it, and a writer (or a reader's moment of
    writing) replaces it; every command answers."""
    warehouse, _ = place
    expected = run_cli("report", "summary", "--json", warehouse=warehouse).stdout
    state = warehouse / ".state" / name

    def make_folder():
        if state.exists() and not state.is_dir():
            state.unlink()
        (state / "inside").mkdir(parents=True, exist_ok=True)

    make_folder()
    found = run_cli("check", warehouse=warehouse, check=1).stderr
    told = (f"{state}: it is a directory, not a regular file" if name == "publishing.json" else
            f"{state}: is a folder where loopmeter keeps a file; `loopmeter check --repair` removes it")
    assert f"loopmeter: {told}\n" in found, found
    repaired = run_cli("check", "--repair", warehouse=warehouse)
    assert "checked again: all whole" in repaired.stdout + repaired.stderr and not state.is_dir()
    for command in (("report", "summary", "--json"), ("catalog", "--quiet"), ("aggregate", "--quiet"),
                    ("sql", "SELECT count(*) FROM runs")):
        make_folder()
        answered = run_cli(*command, warehouse=warehouse)
        assert command[0] != "report" or answered.stdout == expected
    run_cli("check", "--repair", "--quiet", warehouse=warehouse)  # a folder no command wrote over since
    run_cli("check", "--quiet", warehouse=warehouse)
