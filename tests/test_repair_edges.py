"""`loopmeter check --repair` where a table's damage once sent the user round in a circle, and where
Ctrl-C stops a repair midway."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli


@pytest.fixture
def copy(demo_warehouse, tmp_path) -> Path:
    target = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, target, symlinks=True)
    run_cli("catalog", "--quiet", warehouse=target)  # its views of this place
    return target


def table_file(warehouse: Path, table: str, partition: str = "") -> Path:
    return sorted((warehouse / table / partition).glob("*.parquet"))[0]


def test_a_damaged_ingest_manifest_is_read_again_from_the_recorded_run_files(copy):
    rows = run_cli("sql", "SELECT kind, status, count(*) AS n FROM ingest_manifest GROUP BY ALL ORDER BY ALL",
                   "--format", "json", warehouse=copy).stdout
    summary = run_cli("report", "summary", "--json", warehouse=copy).stdout
    damaged = table_file(copy, "ingest_manifest")
    damaged.write_bytes(damaged.read_bytes()[:-50])
    named = run_cli("check", warehouse=copy, check=1).stderr.splitlines()
    assert len(named) == 1 and "ingest_manifest/part-0.parquet: cannot be read as Parquet" in named[0], named

    repaired = run_cli("check", "--repair", "--json", warehouse=copy)
    report = json.loads(repaired.stdout)
    assert report["ok"] and report["notRepaired"] == [], report
    assert any(line.startswith("ingest_manifest: read again from") for line in report["repaired"]), report["repaired"]
    assert run_cli("sql", "SELECT kind, status, count(*) AS n FROM ingest_manifest GROUP BY ALL ORDER BY ALL",
                   "--format", "json", warehouse=copy).stdout == rows
    assert run_cli("report", "summary", "--json", warehouse=copy).stdout == summary


def test_ctrl_c_as_a_repair_builds_the_catalog_names_the_tables_it_replaced_and_exits_130(copy):
    damaged = table_file(copy, "runs", "run_set_id=sample-tail-30")
    damaged.write_bytes(damaged.read_bytes()[:-100])
    stopped = run_cli("check", "--repair", warehouse=copy, check=130,
                      env={"LOOPMETER_CRASH_AT": "before-publish:catalog", "LOOPMETER_CRASH_SIGNAL": "INT"})
    last = stopped.stderr.splitlines()[-1]
    assert last.startswith("loopmeter: interrupted; tables already replaced keep their new version (")
    assert "runs" in last.split("(")[1].split(")")[0].split(", ")
    assert "not repaired" not in stopped.stderr
    run_cli("check", "--repair", warehouse=copy)  # the catalog, built now
    assert run_cli("check", warehouse=copy).returncode == 0
