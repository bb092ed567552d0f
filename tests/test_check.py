"""`loopmeter check` on real damaged warehouses, and what `--repair` rebuilds."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from loopmeter.forge import samples
from loopmeter.forge.ingest import ingest_forge
from loopmeter.storage import Warehouse


@pytest.fixture(scope="module")
def forge_warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("check")
    sample = samples.build_git_sample(root / "repos")
    store = samples.write_sqlite(root / "dataset.sqlite", sample.repos, sample.events)
    ingest_forge(Warehouse(root / "warehouse"), store)
    assert run_cli("catalog", warehouse=root / "warehouse", process=True, check=None).returncode == 0
    return root / "warehouse"


@pytest.fixture
def copy(forge_warehouse, tmp_path) -> Path:
    target = tmp_path / "warehouse"
    shutil.copytree(forge_warehouse, target, symlinks=True)
    assert run_cli("catalog", warehouse=target, process=True, check=None).returncode == 0  # built for this place
    return target


def checked(warehouse: Path, *options: str) -> tuple[int, dict]:
    result = run_cli("check", "--json", *options, warehouse=warehouse, process=True, check=None)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def count(warehouse: Path, table: str) -> int:
    result = run_cli("sql", f"SELECT count(*) AS n FROM {table}", "--format", "json", warehouse=warehouse, process=True, check=None)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]["n"]


@pytest.mark.slow
def test_a_whole_warehouse_checks_whole(copy):
    code, report = checked(copy)
    assert code == 0 and report["ok"] and report["problems"] == [] and report["tables"] == 15
    plain = run_cli("check", warehouse=copy, process=True, check=None)
    assert plain.returncode == 0 and plain.stderr.strip().endswith("journal and catalog: all whole")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "pages"])
def test_a_damaged_summary_file_is_named_and_rebuilt(copy, damage):
    before = count(copy, "forge_attempts")
    damaged = sorted((copy / "forge_attempts").glob("*.parquet"))[0]
    data = damaged.read_bytes()
    damaged.write_bytes(data[:100] if damage == "truncated" else data[:8] + bytes(len(data) // 2) + data[8 + len(data) // 2:])
    code, report = checked(copy)
    assert code == 1 and not report["ok"]
    # the catalog's views are not run (they read the files named already): only the file is named
    assert [(p["kind"], p["path"], p["table"]) for p in report["problems"]] == [("table file", str(damaged), "forge_attempts")]
    assert report["problems"][0]["problem"].startswith("cannot be read as Parquet (")
    plain = run_cli("check", warehouse=copy, process=True, check=None)
    assert plain.returncode == 1 and plain.stderr.splitlines()[0].startswith(f"loopmeter: {damaged}: cannot be read")
    code, repaired = checked(copy, "--repair")
    assert code == 0 and repaired["ok"] and repaired["problems"] == [] and len(repaired["found"]) == 1
    assert repaired["repaired"][0] == "table forge_attempts: rebuilt from forge_attempt_events"
    assert count(copy, "forge_attempts") == before
    assert checked(copy)[0] == 0


@pytest.mark.slow
def test_a_damaged_catalog_is_named_and_rebuilt(copy):
    database = copy / "loopmeter.duckdb"
    database.write_bytes(b"not a database" * 100)
    code, report = checked(copy)
    assert code == 1 and [(p["kind"], p["path"]) for p in report["problems"]] == [("catalog", str(database))]
    assert report["problems"][0]["problem"] == "is not a DuckDB database (its first bytes are not DuckDB's header)"
    code, repaired = checked(copy, "--repair")
    assert code == 0 and repaired["repaired"] == [f"catalog {database}: rebuilt"]
    assert checked(copy)[0] == 0


@pytest.mark.slow
def test_a_journal_naming_a_table_loopmeter_does_not_know_is_named_and_removed(copy):
    journal = copy / ".state" / "publishing.json"
    journal.write_text(json.dumps({"tables": {"state/../../../x": ".versions/x/1"}, "folders": []}))
    code, report = checked(copy)
    assert code == 1
    assert [p["problem"] for p in report["problems"]] == ['"state/../../../x" is not a table loopmeter knows']
    code, repaired = checked(copy, "--repair")
    assert code == 0 and not journal.exists()
    assert repaired["repaired"][0].startswith(f"journal {journal}: removed")
    assert not (copy.parent.parent.parent / "x").exists()


def test_a_damaged_month_of_a_table_read_from_outside_is_set_aside_to_be_read_again(copy):
    damaged = sorted((copy / "forge_events").glob("*/*.parquet"))[0]
    damaged.write_bytes(damaged.read_bytes()[:50])
    month = damaged.parent.name.split("=")[1]
    code, report = checked(copy, "--repair")
    assert code == 0 and report["problems"] == [] and report["notRepaired"] == []
    assert [p["path"] for p in report["found"]] == [str(damaged)]
    (line,) = [line for line in report["repaired"] if line.startswith("table forge_events: ")]
    assert line.startswith(f"table forge_events: the damaged months set aside ({month}); `loopmeter ingest forge` of "
                           "each store ingested (") and line.endswith(
        ") reads their events again, and `loopmeter harvest survival` measures again any outcome it had stored there")
    assert not damaged.parent.exists()  # the month left out of the table, to be read again from the store


@pytest.fixture(scope="module")
def forgeloop_warehouse(tmp_path_factory, corpus) -> tuple[Path, str]:
    """The corpus ingested and aggregated, and its tail report."""
    root = tmp_path_factory.mktemp("check-forgeloop") / "warehouse"
    for args in (("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "-q"),
                 ("aggregate", "-q")):
        assert run_cli(*args, warehouse=root, process=True, check=None).returncode == 0
    tail = run_cli("report", "tail", "--json", warehouse=root, process=True, check=None)
    assert tail.returncode == 0
    return root, tail.stdout


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "pages"])
def test_a_damaged_runs_file_is_read_again_from_the_recorded_run_files(forgeloop_warehouse, tmp_path, damage):
    original, tail = forgeloop_warehouse
    copy = tmp_path / "warehouse"
    shutil.copytree(original, copy, symlinks=True)
    damaged = sorted((copy / "runs").glob("*/*.parquet"))[-1]
    data = damaged.read_bytes()
    damaged.write_bytes(data[:100] if damage == "truncated" else data[:100] + bytes(3900) + data[4000:])
    code, report = checked(copy)
    assert code == 1 and ("table file", str(damaged), "runs") in [(p["kind"], p["path"], p["table"]) for p in report["problems"]]
    code, repaired = checked(copy, "--repair")
    assert code == 0 and repaired["ok"] and repaired["problems"] == [], repaired
    assert repaired["repaired"][0].startswith("runs: read again from ")
    assert run_cli("report", "tail", "--json", warehouse=copy, process=True, check=None).stdout == tail


@pytest.mark.slow
def test_a_damaged_scenarios_file_is_read_again_from_the_scenario_folder(forgeloop_warehouse, tmp_path, corpus):
    original, tail = forgeloop_warehouse
    copy = tmp_path / "warehouse"
    shutil.copytree(original, copy, symlinks=True)
    scenarios = count(copy, "scenarios")
    (damaged,) = (copy / "scenarios").glob("*.parquet")
    damaged.write_bytes(damaged.read_bytes()[:100])
    code, repaired = checked(copy, "--repair")
    assert code == 0 and repaired["ok"] and repaired["problems"] == [], repaired
    assert repaired["repaired"][0] == f"scenarios: read again from {corpus / 'results'}"
    assert count(copy, "scenarios") == scenarios > 0
    assert run_cli("report", "tail", "--json", warehouse=copy, process=True, check=None).stdout == tail


@pytest.mark.slow
def test_a_damaged_scenarios_file_whose_folder_is_gone_is_left_as_it_was(forgeloop_warehouse, tmp_path):
    original, _ = forgeloop_warehouse
    copy = tmp_path / "warehouse"
    shutil.copytree(original, copy, symlinks=True)
    for name in (p.name for p in (copy / ".state").glob("forgeloop-ingest-*.json")):
        record = json.loads((copy / ".state" / name).read_text())
        record["key"]["scenarios"] = str(tmp_path / "gone")
        (copy / ".state" / name).write_text(json.dumps(record))
    (damaged,) = (copy / "scenarios").glob("*.parquet")
    damaged.write_bytes(damaged.read_bytes()[:100])
    code, repaired = checked(copy, "--repair")
    assert code == 1 and [p["path"] for p in repaired["problems"]] == [str(damaged)]
    assert damaged.stat().st_size == 100  # left as it was
