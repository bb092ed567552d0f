"""`ingest forge --engine local|pool|spark --part-rows N`: the summary tables computed a part of whole
runs at a time, by this process, worker processes or Spark, are the tables one computation of every
run gives, row for row and in order; with the same parts, every engine writes the same files, byte for
byte."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import run_cli
from loopmeter import operations
from loopmeter.engines import Engine
from loopmeter.forge import derive, samples
from loopmeter.forge import tables as t
from loopmeter.operations import forge as forge_operations
from loopmeter.storage import Warehouse

SUMMARIES = (t.ATTEMPTS, t.DECISIONS, t.TASKS)
REPOS = [("api", "/repos/api"), ("web", "/repos/web"), ("infra", "/repos/infra")]
PART_ROWS = "150"  # a few hundred input rows per summary: several parts each


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path]:
    """A store of 60 generated runs, and the same store with the events of 20 more runs appended."""
    tmp = tmp_path_factory.mktemp("forge-engines")
    events = samples.routing_events(80, seed=19)
    runs = sorted({event["run"] for event in events})
    first = [event for event in events if event["run"] in set(runs[:60])]
    return (samples.write_sqlite(tmp / "first.sqlite", REPOS, first),
            samples.write_sqlite(tmp / "appended.sqlite", REPOS, events))


def forge_tables(warehouse: Path) -> dict[str, pl.DataFrame]:
    """Every forge_* table as stored, rows in their stored order (`ingested_at` and `computed_at`, the times of the ingest, left out)."""
    store = Warehouse(warehouse)
    names = [name for name in store.table_names() if name.startswith("forge_")]
    return {name: store.read(name).drop("ingested_at", "computed_at", strict=False) for name in names}


def summary_files(warehouse: Path) -> dict[str, str]:
    """The summary tables' files (table/name -> the digest of its bytes)."""
    store = Warehouse(warehouse)
    return {f"{name}/{path.name}": hashlib.sha256(path.read_bytes()).hexdigest()
            for name in SUMMARIES for path in store.table_files(name)}


def ingested(stores: tuple[Path, Path], place: Path, *options: str, cwd: Path | None = None) -> list[tuple[dict, dict]]:
    """The store ingested into a new warehouse at `place`, then the store with events appended: the
    forge tables and the summaries' files after each. Another engine than this process in a process
    of its own, as users run it: Spark's Java gateway and multiprocessing's resource tracker live as
    long as the process that started them."""
    found = []
    for store in stores:
        given = Path(os.path.relpath(place, cwd)) if cwd is not None else place  # a relative --warehouse
        run_cli("ingest", "forge", str(store), "--quiet", *options, warehouse=given, cwd=cwd or Path.cwd(),
                process="--engine" in options)
        found.append((forge_tables(place), summary_files(place)))
    return found


def same_tables(tables: dict[str, pl.DataFrame], theirs: dict[str, pl.DataFrame], appended: bool) -> list[str]:
    """The tables that differ: the summaries and the routing tables row for row, in order; the
    per-event tables a re-ingest (`appended`) rewrote as sets of rows (the rows stored before and the
    new ones are not written in one fixed order)."""
    assert sorted(tables) == sorted(theirs)
    ordered = [*SUMMARIES, t.OBSERVATIONAL, t.RANDOMIZED, t.SRM]
    return [name for name, frame in tables.items()
            if not (frame.equals(theirs[name]) if name in ordered or not appended
                    else frame.sort(pl.all()).equals(theirs[name].sort(pl.all())))]


def assert_same_tables(whole: list[tuple[dict, dict]], parted: list[tuple[dict, dict]]) -> None:
    for appended, ((tables, _), (theirs, files)) in enumerate(zip(whole, parted)):
        assert same_tables(tables, theirs, bool(appended)) == []
        assert tables[t.TASKS]["task_order"].to_list() == list(range(1, tables[t.TASKS].height + 1))
        assert sum(name.startswith(f"{t.TASKS}/") for name in files) > 3  # computed in parts


@pytest.fixture(scope="module")
def whole(stores, tmp_path_factory) -> list[tuple[dict, dict]]:
    """The default ingest: every summary one query, one file."""
    found = ingested(stores, tmp_path_factory.mktemp("whole") / "w")
    for tables, files in found:
        assert sorted(files) == [f"{name}/part-0.parquet" for name in SUMMARIES]
        assert tables[t.TASKS].height > 200 and tables[t.DECISIONS].height > 100
    return found


@pytest.mark.slow
def test_parts_computed_here_and_by_a_pool_give_the_tables_of_one_computation(stores, whole, tmp_path):
    local = ingested(stores, tmp_path / "local", "--part-rows", PART_ROWS)
    assert_same_tables(whole, local)
    # the pool's workers read the warehouse by the paths this process gives them: a relative --warehouse too
    pool = ingested(stores, tmp_path / "pool", "--engine", "pool", "--workers", "2", "--part-rows", PART_ROWS,
                    cwd=tmp_path)
    assert_same_tables(whole, pool)
    assert [files for _, files in pool] == [files for _, files in local]  # the same parts, the same bytes


@pytest.mark.slow
def test_spark_gives_the_tables_of_one_computation(stores, whole, tmp_path):
    """A local Spark session (two cores, bound to 127.0.0.1, UI off) computes the parts."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs a Java runtime and none is installed (.ci/run installs one)")
    # the first store only: each command starts a Java process of its own (the pool's test re-ingests)
    # and larger parts (four of forge_tasks): each wave of tasks is a Spark job of its own
    local = ingested(stores[:1], tmp_path / "local", "--part-rows", "400")
    spark = ingested(stores[:1], tmp_path / "spark", "--engine", "spark", "--spark-master", "local[2]",
                     "--part-rows", "400")
    assert_same_tables(whole[:1], spark)
    assert [files for _, files in spark] == [files for _, files in local]


@pytest.mark.slow
def test_one_part_is_computed_here_whatever_the_engine(stores, whole, tmp_path):
    """Inputs within --part-rows: one query, one file per summary, as the default ingest writes it
    (a pool is never started: `Engine('pool')` in this process)."""
    warehouse = Warehouse(tmp_path / "w")
    for store, (tables, files) in zip(stores, whole):
        operations.ingest_forge(store, warehouse=warehouse, engine=Engine("pool", 2), part_rows=1_000_000)
        assert summary_files(warehouse.root) == files
        assert same_tables(tables, forge_tables(warehouse.root), store == stores[1]) == []


@pytest.mark.slow
def test_the_python_api_takes_an_engine_and_part_rows(stores, whole, tmp_path):
    warehouse = Warehouse(tmp_path / "w")
    found = []
    for store in stores:
        operations.ingest_forge(store, warehouse=warehouse, engine=Engine("local"), part_rows=int(PART_ROWS))
        found.append((forge_tables(warehouse.root), summary_files(warehouse.root)))
    assert_same_tables(whole, found)


@pytest.mark.parametrize("options, message", [
    (("--part-rows", "0"), "--part-rows must be at least 1 (got 0)"),
    (("--part-rows", "-3"), "--part-rows must be at least 1 (got -3)"),
    (("--part-rows", "many"), "Invalid value for '--part-rows': "),  # then typer's own words, which vary by version
    (("--engine", "ray"), "--engine must be one of local, pool, spark (got 'ray')"),
    (("--engine", "pool", "--workers", "0"), "--workers must be between 1 and 256 (got 0)"),
])
def test_a_wrong_option_is_told_in_one_line_and_nothing_is_written(stores, tmp_path, options, message):
    ran = run_cli("ingest", "forge", str(stores[0]), *options, warehouse=tmp_path / "w", check=2)
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1
    if message.startswith("Invalid"):
        assert lines[0].startswith(f"loopmeter: error: {message}") and lines[0].endswith(" (see 'loopmeter ingest forge --help')")
    else:
        assert lines == [f"loopmeter: error: {message}"]
    assert not (tmp_path / "w").exists()


def test_the_default_part_size_is_the_summaries_own():
    assert forge_operations.PART_ROWS == derive.PART_ROWS
