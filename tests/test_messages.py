"""One line naming the path and what to do: a full disk, a damaged table file, a damaged
loopmeter.duckdb, a repository another user owns, names holding a line break."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from forge_fixtures import retarget
from loopmeter.forge import samples
from loopmeter.storage import Warehouse


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def ingested(corpus: Path, warehouse: Path) -> subprocess.CompletedProcess:
    return run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "-q",
                    warehouse=warehouse, process=True, check=None)


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100k", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("a small file system needs root's mount")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_names_the_warehouse_and_what_to_do(small_disk, corpus):
    result = ingested(corpus, small_disk / "warehouse")
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith(f"loopmeter: error: no space left on the device holding {small_disk / 'warehouse'}; ")
    assert "free some space there" in line and "run the command again" in line


def zero_pages(path: Path) -> None:
    """Damage the pages of a Parquet file, its footer left whole."""
    data = bytearray(path.read_bytes())
    data[8:len(data) // 2] = bytes(len(data) // 2 - 8)
    path.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("command", [("report", "tail"), ("aggregate", "--out", "{out}")])
def test_a_table_file_with_damaged_pages_is_named(tmp_path, corpus, command):
    warehouse = tmp_path / "warehouse"
    assert ingested(corpus, warehouse).returncode == 0
    run_cli("aggregate", "--quiet", warehouse=warehouse)  # a report reads the runs' identity: their pages too
    damaged = sorted((warehouse / "runs").glob("*/*.parquet"))[0]
    zero_pages(damaged)
    result = run_cli(*[part.format(out=tmp_path / "out") for part in command], warehouse=warehouse, process=True, check=None)
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith(f"loopmeter: error: {damaged}: a file of table runs is damaged: cannot be read as Parquet")
    assert "loopmeter check --repair" in line


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_catalog_is_rebuilt_by_the_next_command(tmp_path, corpus, damage):
    import duckdb

    warehouse = tmp_path / "warehouse"
    assert ingested(corpus, warehouse).returncode == 0
    database = warehouse / "loopmeter.duckdb"
    size = database.stat().st_size
    database.write_bytes({"garbage": os.urandom(size + 4096), "truncated": database.read_bytes()[:size // 3],
                          "empty": b""}[damage])
    result = run_cli("sql", "SELECT count(*) AS n FROM runs", "--format", "json", warehouse=warehouse, process=True, check=None)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"n": 525}] and "Corrupt" not in result.stderr
    connection = duckdb.connect(str(database), read_only=True)  # the file itself is whole again
    assert connection.execute("SELECT count(*) FROM runs").fetchall() == [(525,)]
    connection.close()


@pytest.mark.slow
def test_a_repository_another_user_owns_is_said_to_be_so(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a repository to another user needs root")
    sample = samples.build_git_sample(tmp_path / "repos")
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", sample.repos, sample.events)
    theirs = tmp_path / "theirs"
    shutil.copytree(sample.repos[0][1], theirs)
    subprocess.run(["chown", "-R", "12345:12345", str(theirs)], check=True)
    warehouse = Warehouse(tmp_path / "warehouse")
    retarget(warehouse, store, "api", theirs)
    result = run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), "--json",
                      warehouse=warehouse.root, process=True, check=None)
    assert result.returncode == 3
    reasons = {e["detail"] for e in json.loads(result.stdout)["unharvested"]}
    assert reasons == {f"owned by uid 12345, not by this user (uid 0): git refuses to read it; run loopmeter as its "
                       f"owner, or trust it with `git config --global --add safe.directory {theirs.resolve()}`"}
    text = run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), "--dry-run",
                    warehouse=warehouse.root, process=True, check=None)
    assert "owned by uid 12345" in text.stderr and "not a git repository" not in text.stderr


def test_a_name_holding_a_line_break_stays_on_one_line(tmp_path):
    missing = tmp_path / "results\nloopmeter: error: forged"
    result = run_cli("ingest", "forgeloop", str(missing), warehouse=tmp_path / "warehouse", process=True, check=None)
    assert result.returncode != 0
    line = one_line(result)
    assert "results\\nloopmeter: error: forged" in line
    warehouse = tmp_path / "ware\nhouse"
    result = run_cli("check", warehouse=warehouse, process=True, check=None)
    assert result.returncode == 1
    assert one_line(result) == f"loopmeter: {tmp_path}/ware\\nhouse: no such directory"
