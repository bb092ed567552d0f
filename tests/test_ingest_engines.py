"""`ingest forgeloop --engine local|pool|spark`: whoever reads the run files, the same exit code, the
same answer (`--json`, the rejection lines) and the same runs and manifest tables, row for row, on a
tree of more than one batch with bad files of every kind, and again after one file changed."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import run_cli
from loopmeter import operations as lm
from loopmeter.forgeloop.reader import BATCH, ToRead, read_batch
from loopmeter.forgeloop.reader_spark import _unshipped, read_batch_shipped
from loopmeter.forgeloop.samples import RunSetPlan, write_results
from loopmeter.storage import Warehouse

BIG = RunSetPlan("rs-big", 125, "2")  # 125 runs x 3 modes x 6 scenarios: 2,250 files, two batches
SMALL = RunSetPlan("rs-small", 4, "2", ("api-feature", "small-bug-fix"))
LIMIT_MB = "0.01"  # --max-file-mb: 10,485 bytes, five times a run file
TABLES = ("runs", "ingest_manifest", "scenarios")


def bad_tree(root: Path) -> Path:
    """Generated run sets and, among them, a file of each kind an ingest rejects."""
    write_results(root, [BIG, SMALL], seed=7)
    raw = root / "raw"
    assert sum(1 for _ in (raw / "rs-big").rglob("*.json")) > BATCH
    (raw / "rs-big/api-feature/direct/run-bad.json").write_text('{"runSetId": "rs-big", ')  # invalid JSON
    run = json.loads((raw / "rs-big/api-feature/direct/run-003.json").read_text())
    run.update(runIndex=999, verification="MAYBE")  # a field rule broken
    (raw / "rs-big/api-feature/direct/run-zz-field.json").write_text(json.dumps(run))
    # a duplicate met a batch after its first (path order: zz/ comes after every scenario folder) ...
    (raw / "rs-big/zz").mkdir()
    shutil.copy(raw / "rs-big/api-feature/direct/run-001.json", raw / "rs-big/zz/run-001.json")
    # ... and one in the batch of its first
    shutil.copy(raw / "rs-small/api-feature/direct/run-002.json", raw / "rs-small/api-feature/direct/run-002z.json")
    (raw / "rs-small/small-bug-fix/direct/run-huge.json").write_text("{" + " " * 20_000 + "}")  # over --max-file-mb
    return root


def answered(ran, warehouse: Path) -> dict:
    """What an ingest printed and left: exit code, output (the warehouse's path taken out), tables
    (their rows in stored order; the moment of the ingest taken out)."""
    store = Warehouse(warehouse)
    tables = {}
    for name in TABLES:
        frame = store.read(name)
        tables[name] = frame.drop([column for column, dtype in frame.schema.items() if isinstance(dtype, pl.Datetime)])
    return {"code": ran.returncode, "stdout": ran.stdout.replace(str(warehouse), "W"),
            "stderr": [line for line in ran.stderr.splitlines() if line.startswith(("rejected", "loopmeter:"))],
            "tables": tables}


def ingests(results: Path, place: Path, engines: dict[str, tuple[str, ...]], first_only: bool = False) -> dict[str, list[dict]]:
    """Per engine, into a warehouse of its own: an ingest (--json), one file changed, an ingest again
    (the rejection lines), then every file read again (--full --json). Another engine than local in a
    process of its own, as users run it."""
    steps = [("--json",)] if first_only else [("--json",), None, (), ("--full", "--json")]
    seen: dict[str, list[dict]] = {name: [] for name in engines}
    for step in steps:
        if step is None:  # the same change for every engine: a run file now an array
            changed = results / "raw/rs-big/small-bug-fix/forgeloopAdaptive/run-010.json"
            changed.write_text("[]")
            continue
        for name, options in engines.items():
            warehouse = place / name
            ran = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"),
                          "--max-file-mb", LIMIT_MB, *step, *options, warehouse=warehouse, check=None,
                          process=bool(options))
            seen[name].append(answered(ran, warehouse))
    return seen


def assert_same(seen: dict[str, list[dict]]) -> None:
    first, *others = seen
    for step, expected in enumerate(seen[first]):
        assert expected["code"] == 3, expected  # some files rejected, the rest stored
        for name in others:
            got = seen[name][step]
            assert (got["code"], got["stdout"], got["stderr"]) == (expected["code"], expected["stdout"], expected["stderr"]), (name, step)
            for table, frame in expected["tables"].items():
                assert frame.height > 0 and frame.equals(got["tables"][table]), (name, step, table)


@pytest.mark.slow
def test_local_and_pool_give_the_same_answer_and_tables(tmp_path):
    results = bad_tree(tmp_path / "results")
    seen = ingests(results, tmp_path, {"local": (), "pool": ("--engine", "pool", "--workers", "2")})
    assert_same(seen)
    first, again, full = seen["local"]
    document = json.loads(first["stdout"])
    rejections = {(item["path"], item["field"]) for item in document["rejections"]}
    assert rejections == {
        ("raw/rs-big/api-feature/direct/run-bad.json", "file"),
        ("raw/rs-big/api-feature/direct/run-zz-field.json", "verification"),
        ("raw/rs-big/zz/run-001.json", "duplicate"),
        ("raw/rs-small/api-feature/direct/run-002z.json", "duplicate"),
        ("raw/rs-small/small-bug-fix/direct/run-huge.json", "file"),
    }
    assert document["accepted"] == 2250 + 24 and document["seen"] == 2250 + 24 + 5
    assert first["tables"]["runs"].height == 2274
    assert again["tables"]["runs"].height == full["tables"]["runs"].height == 2273
    assert again["stderr"] == [
        "rejected raw/rs-big/api-feature/direct/run-bad.json: file: is not valid JSON (unexpected end of data: line 1 "
        "column 24 (char 23))",
        "rejected raw/rs-big/api-feature/direct/run-zz-field.json: verification: must be one of PASS, FAIL, NOT_AVAILABLE",
        "rejected raw/rs-big/small-bug-fix/forgeloopAdaptive/run-010.json: run: must be an object",
        "rejected raw/rs-big/zz/run-001.json: duplicate: repeats the run set, scenario, mode and runIndex of "
        "raw/rs-big/api-feature/direct/run-001.json (the first in path order is kept)",
        "rejected raw/rs-small/api-feature/direct/run-002z.json: duplicate: repeats the run set, scenario, mode and "
        "runIndex of raw/rs-small/api-feature/direct/run-002.json (the first in path order is kept)",
        "rejected raw/rs-small/small-bug-fix/direct/run-huge.json: file: is larger than the 10485-byte limit (20002 bytes)",
        "loopmeter: 6 of 2285 files rejected; the rest is stored",
    ]
    manifest = full["tables"]["ingest_manifest"].filter(pl.col("kind") == "run")
    assert manifest["status"].value_counts().sort("status").rows() == [("accepted", 2273), ("rejected", 6)]


@pytest.mark.slow
def test_spark_gives_the_same_answer_and_tables(tmp_path):
    """A local Spark session (two cores, bound to 127.0.0.1, UI off): its tasks read the batches."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs a Java runtime and none is installed (.ci/run installs one)")
    results = bad_tree(tmp_path / "results")
    # the first ingest only (every kind of bad file, both batches): each command starts a Java
    # process of its own, and the re-ingests read as the pool's test shows
    assert_same(ingests(results, tmp_path, {"local": (), "spark": ("--engine", "spark", "--spark-master", "local[2]")},
                        first_only=True))
    # two batches: Spark reads them (a master that does not exist fails the ingest, in one line)
    ran = run_cli("ingest", "forgeloop", str(results), "--engine", "spark", "--spark-master", "nowhere://", "--quiet",
                  warehouse=tmp_path / "nowhere", check=1, process=True)
    assert ran.stderr.splitlines() == ["loopmeter: error: --engine spark: --spark-master 'nowhere://': Spark did not "
                                       "start a session: Master must either be yarn or start with spark, k8s, or local"]
    assert not Warehouse(tmp_path / "nowhere").has_table("runs")


def test_a_single_batch_is_read_here_whatever_the_engine(tmp_path):
    """No Spark session for one batch: the master is never asked for (this one does not exist)."""
    results = tmp_path / "results"
    write_results(results, [SMALL], seed=1)
    ran = run_cli("ingest", "forgeloop", str(results), "--engine", "spark", "--spark-master", "nowhere://", "--json",
                  warehouse=tmp_path / "w")
    assert json.loads(ran.stdout)["accepted"] == 24 and Warehouse(tmp_path / "w").read("runs").height == 24


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_many_small_batches_come_back_in_order_from_any_number_of_workers(tmp_path, workers):
    """Batches of 7 files: many more than the workers and those read ahead, in chunk after chunk."""
    results = bad_tree(tmp_path / "results")
    shutil.rmtree(results / "raw/rs-big")
    write_results(tmp_path / "more", [RunSetPlan(f"rs-{index}", 2 + index, "2") for index in range(4)], seed=3)
    for folder in (tmp_path / "more/raw").iterdir():
        shutil.move(folder, results / "raw" / folder.name)
    frames = {}
    for engine in ("local", "pool"):
        lm.ingest_forgeloop(results, results / "scenarios", warehouse=tmp_path / engine, max_file_mb=0.01,
                            engine=engine, workers=workers if engine == "pool" else None, batch_files=7)
        store = Warehouse(tmp_path / engine)
        frames[engine] = [store.read(name).drop("ingested_at", strict=False) for name in ("runs", "ingest_manifest")]
    lm.ingest_forgeloop(results, results / "scenarios", warehouse=tmp_path / "whole", max_file_mb=0.01)
    store = Warehouse(tmp_path / "whole")
    whole = [store.read(name).drop("ingested_at", strict=False) for name in ("runs", "ingest_manifest")]
    for engine, tables in frames.items():
        assert all(frame.equals(expected) for frame, expected in zip(tables, whole)), engine
    assert whole[0].height == 24 + 18 * (2 + 3 + 4 + 5)


def test_a_batch_read_for_spark_is_the_batch_read_here(tmp_path):
    """What a Spark task sends back (its verdicts, its rows as Arrow IPC bytes) is what this process
    reads; a task that does not find RESULTS fails in one line naming it."""
    results = bad_tree(tmp_path / "results")
    paths = sorted(str(path.relative_to(results)) for path in (results / "raw/rs-small").rglob("*.json"))
    batch = ToRead(paths, ["rs-small"] * len(paths), [(results / path).stat().st_size for path in paths], [None] * len(paths))
    here = read_batch(str(results), batch, 10_485)
    verdicts, shipped = read_batch_shipped(str(results), batch, 10_485)
    assert verdicts == here[0] and _unshipped(shipped).equals(here[1]) and here[1].num_rows == 25  # the duplicate too: a batch is judged alone
    assert sorted(verdicts[0]) == ["accepted"] * 25 + ["rejected"]
    with pytest.raises(FileNotFoundError, match=f"cannot read RESULTS {tmp_path / 'elsewhere'}: the executors read the run "
                                                "files at the paths this machine sees"):
        read_batch_shipped(str(tmp_path / "elsewhere"), batch, 10_485)


def test_a_wrong_engine_is_told_in_one_line_and_nothing_is_written(tmp_path):
    results = tmp_path / "results"
    write_results(results, [SMALL], seed=1)
    for command in (("ingest", "forgeloop", str(results)), ("run-all", str(results))):
        for options, message in [(("--engine", "ray"), "--engine must be one of local, pool, spark (got 'ray')"),
                                 (("--engine", "pool", "--workers", "0"), "--workers must be between 1 and 256 (got 0)"),
                                 (("--engine", "pool", "--workers", "300"), "--workers must be between 1 and 256 (got 300)")]:
            ran = run_cli(*command, *options, warehouse=tmp_path / "w", check=2)
            assert ran.stderr.strip().splitlines() == [f"loopmeter: error: {message}"], ran.stderr
    assert not (tmp_path / "w").exists()
    with pytest.raises(Exception, match="batch_files must be a finite number at least 1"):
        lm.ingest_forgeloop(results, warehouse=tmp_path / "w", batch_files=0)
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_run_all_reads_with_the_engine_given(tmp_path):
    results = bad_tree(tmp_path / "results")
    tables = {}
    for name, options in {"local": (), "pool": ("--engine", "pool", "--workers", "2")}.items():
        warehouse = tmp_path / name
        ran = run_cli("run-all", str(results), "--scenarios", str(results / "scenarios"), "--quiet", *options,
                      warehouse=warehouse, check=3, process=bool(options))
        assert "5 inputs rejected" in ran.stderr
        store = Warehouse(warehouse)
        tables[name] = [store.read(table).drop("ingested_at", strict=False) for table in ("runs", "ingest_manifest")]
    assert all(frame.equals(other) for frame, other in zip(tables["local"], tables["pool"]))
    assert tables["pool"][0].height == 2274
