"""`aggregate` computed in buckets of whole run sets, by this process or a pool of workers, gives
what one computation of all the runs gives: the same documents byte for byte, the same table rows
in the same order."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from loopmeter.forgeloop.buckets import cut
from loopmeter.forgeloop.incremental import TABLES
from loopmeter.forgeloop.samples import RunSetPlan, write_results
from loopmeter.storage import Warehouse

PLANS = [RunSetPlan(f"rs-{index}", 3 + index % 3, "2", ("api-feature", "small-bug-fix", "documentation-correction"))
         for index in range(7)]


def test_run_sets_are_cut_into_buckets_of_whole_run_sets_in_id_order():
    counts = {"b": 5, "a": 30, "d": 1, "c": 10, "e": 40}
    assert cut(counts, 30) == [["a"], ["b", "c", "d", "e"]]
    assert cut(counts, 12) == [["a"], ["b", "c"], ["d", "e"]]
    assert cut(counts, 1) == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert cut(counts, 1000) == [["a", "b", "c", "d", "e"]]
    assert cut({}, 10) == []


def aggregated(source: Path, place: Path, *options: str, env: dict | None = None) -> tuple[Path, dict]:
    """A copy of the warehouse `source` aggregated in full with `options`: its documents, its tables.
    Another engine than this process in a process of its own, as users run it: Spark's Java gateway
    and multiprocessing's resource tracker live as long as the process that started them."""
    shutil.copytree(source, place, symlinks=True)
    out = place.parent / (place.name + "-out")
    run_cli("aggregate", "--full", "--out", str(out), "--quiet", *options, warehouse=place, process="--engine" in options,
            env=env)
    warehouse = Warehouse(place)
    return out, {name: warehouse.read(name) for name in TABLES if name != "forgeloop_documents"}


def ingested(tmp_path: Path, corpus: Path, source: str) -> Path:
    warehouse = tmp_path / "w"
    if source == "generated":
        results = tmp_path / "results"
        write_results(results, PLANS, seed=11)
        run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"), "--quiet",
                warehouse=warehouse)
    else:
        run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
                warehouse=warehouse)
    return warehouse


def assert_same_whatever_the_engine(tmp_path: Path, warehouse: Path, engines: dict[str, tuple[str, ...]],
                                    env: dict | None = None) -> None:
    whole_out, whole = aggregated(warehouse, tmp_path / "whole")
    for name, options in engines.items():
        out, tables = aggregated(warehouse, tmp_path / name, *options, env=env)
        differences = subprocess.run(["diff", "-r", str(whole_out), str(out)], capture_output=True, text=True)
        assert differences.returncode == 0, (name, differences.stdout[:2000])
        assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in whole_out.iterdir())
        for table, frame in whole.items():
            assert frame.height > 0 and frame.equals(tables[table]), (name, table)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["generated", "corpus"])
def test_every_engine_and_cut_gives_the_same_documents_and_tables(tmp_path, corpus, source):
    assert_same_whatever_the_engine(tmp_path, ingested(tmp_path, corpus, source), {
        "local-cut": ("--bucket-runs", "1"), "pool": ("--engine", "pool", "--workers", "2", "--bucket-runs", "40")})


@pytest.mark.slow
def test_spark_gives_the_same_documents_and_tables(tmp_path, corpus):
    """A local Spark session (two cores, bound to 127.0.0.1, UI off) runs the buckets' computation."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs a Java runtime and none is installed (.ci/run installs one)")
    assert_same_whatever_the_engine(tmp_path, ingested(tmp_path, corpus, "corpus"), {
        "spark": ("--engine", "spark", "--spark-master", "local[2]", "--bucket-runs", "40")})


@pytest.mark.slow
def test_spark_connect_gives_the_same_documents_and_tables(tmp_path, corpus):
    """Spark Connect: `SPARK_REMOTE=local[2]` has pyspark start a Connect server (on 127.0.0.1, port
    15002) in the command's process, and the buckets go to it as to any Connect endpoint."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs a Java runtime and none is installed (.ci/run installs one)")
    warehouse = ingested(tmp_path, corpus, "corpus")
    assert_same_whatever_the_engine(tmp_path, warehouse, {
        "spark-connect": ("--engine", "spark", "--workers", "3", "--bucket-runs", "40")}, env={"SPARK_REMOTE": "local[2]"})
    # an endpoint nobody answers at is told at once (pyspark's client would retry it for minutes)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    refused = run_cli("aggregate", "--full", "--engine", "spark", "--bucket-runs", "40", "--out", str(tmp_path / "unreached"),
                      warehouse=warehouse,
                      env={"SPARK_REMOTE": f"sc://127.0.0.1:{port}"}, check=1)
    assert refused.stderr.splitlines() == [f"loopmeter: error: --engine spark: Spark Connect at 127.0.0.1:{port} "
                                           "(SPARK_REMOTE) cannot be reached: Connection refused"]
    assert not (tmp_path / "unreached").exists()


@pytest.mark.slow
def test_an_endpoint_that_is_no_spark_connect_server_is_told_in_one_line(tmp_path, corpus):
    """An address that is none is a usage error (the token after `;` never shown). A web server takes
    the connection but speaks no gRPC (pyspark's client would retry it for many minutes): told within
    10 s. A gRPC server without Spark Connect answers the session's first call with an error: told
    with gRPC's status and details."""
    import http.server
    import threading
    from concurrent import futures

    import grpc

    class Silent(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    warehouse = ingested(tmp_path, corpus, "corpus")
    wrong = run_cli("aggregate", "--full", "--engine", "spark", "--bucket-runs", "40", warehouse=warehouse,
                    env={"SPARK_REMOTE": "spark.example.com:15002;token=secret"}, check=2)
    assert wrong.stderr == ("loopmeter: error: SPARK_REMOTE='spark.example.com:15002' is not a Spark Connect address "
                            "(sc://host:port) nor local[N] (a Connect server pyspark starts here)\n")
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    other = grpc.server(futures.ThreadPoolExecutor(2))
    other_port = other.add_insecure_port("127.0.0.1:0")
    other.start()
    try:
        expected = {web.server_address[1]: "takes a connection but does not answer as a Spark Connect (gRPC) server "
                                           "within 10 s",
                    other_port: "did not start a session: UNIMPLEMENTED: Method not found!"}
        for port, told in expected.items():
            out = tmp_path / f"out-{port}"
            result = run_cli("aggregate", "--full", "--engine", "spark", "--bucket-runs", "40", "--out", str(out),
                             warehouse=warehouse, env={"SPARK_REMOTE": f"sc://127.0.0.1:{port}"}, check=1, timeout=300)
            at = f"127.0.0.1:{port} (SPARK_REMOTE)" if "takes" in told else f"Spark Connect at 127.0.0.1:{port} (SPARK_REMOTE)"
            assert result.stderr.splitlines() == [f"loopmeter: error: --engine spark: {at} {told}"]
            assert not out.exists()
    finally:
        web.shutdown()
        other.stop(None)


def test_a_wrong_engine_is_told_and_nothing_is_written(tmp_path):
    results = tmp_path / "results"
    write_results(results, PLANS[:2], seed=1)
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"), "--quiet", warehouse=warehouse)
    for options, message in [(("--engine", "ray"), "--engine must be one of local, pool, spark (got 'ray')"),
                             (("--engine", "pool", "--workers", "0"), "--workers must be between 1 and 256 (got 0)"),
                             (("--bucket-runs", "0"), "--bucket-runs must be at least 1 (got 0)"),
                             (("--spark-master", "local[2]"), "--spark-master applies to --engine spark only (got "
                                                              "--engine local)"),
                             (("--workers", "3"), "--workers applies to --engine pool or spark (got --engine local)")]:
        ran = run_cli("aggregate", *options, warehouse=warehouse, check=2)
        assert message in ran.stderr
    assert not (warehouse / "aggregate").exists()


@pytest.mark.slow
def test_run_all_computes_its_aggregate_with_the_engine_given(tmp_path, corpus):
    outs = {}
    for name, options in {"local": (), "pool": ("--engine", "pool", "--workers", "2", "--bucket-runs", "40")}.items():
        warehouse = tmp_path / name
        run_cli("run-all", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet", *options,
                warehouse=warehouse, process=bool(options))
        outs[name] = warehouse / "aggregate"
    differences = subprocess.run(["diff", "-r", str(outs["local"]), str(outs["pool"])], capture_output=True, text=True)
    assert differences.returncode == 0 and len(list(outs["pool"].rglob("*.json"))) == 16, differences.stdout[:2000]
    wrong = run_cli("run-all", str(corpus / "results"), "--engine", "ray", warehouse=tmp_path / "never", check=2)
    assert "--engine must be one of local, pool, spark (got 'ray')" in wrong.stderr
    assert not (tmp_path / "never").exists()
