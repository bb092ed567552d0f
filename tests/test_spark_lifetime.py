"""`--engine spark` ends what it starts: the Java process of a session is gone when the command is,
whether it finished, was stopped by Ctrl-C while the session started or while a job ran, or Spark
refused its master; and what the user sees is loopmeter's one line. Each command is a process of its
own, as users run it, marked by a variable of its environment that the Java process and Spark's
Python workers inherit, so that what it started is told apart from any other Spark on the machine."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import run_cli, wait_for

BOUND = 180  # seconds: the longest wait for an event (a Java process to start, a command to end)


def started_by(marker: str, word: bytes) -> list[int]:
    """Live processes whose environment holds `marker` and whose command line holds `word`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ, open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in environ.read() and word in cmdline.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def aggregate(warehouse: Path, marker: str, *options: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "loopmeter", "--warehouse", str(warehouse), "aggregate", "--full", "--quiet",
               "--engine", "spark", "--bucket-runs", "40", *options]
    return subprocess.Popen(command, cwd=warehouse.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **{marker: "1"}))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, corpus) -> Path:
    place = tmp_path_factory.mktemp("spark-lifetime") / "w"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
            warehouse=place)
    return place


@pytest.mark.slow
def test_ctrl_c_while_the_session_starts_leaves_no_java_process(warehouse):
    marker = f"LOOPMETER_TEST_{uuid.uuid4().hex}"
    process = aggregate(warehouse, marker, "--spark-master", "local[2]")
    wait_for(lambda: started_by(marker, b"pyspark-shell"), "Java process", BOUND)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=BOUND)
    assert process.returncode == 130 and stderr.startswith("loopmeter: interrupted"), stderr
    assert started_by(marker, b"pyspark-shell") == []  # ended before the command was


@pytest.mark.slow
def test_ctrl_c_while_a_job_runs_is_one_line_and_a_finished_command_leaves_no_java_process(warehouse):
    marker = f"LOOPMETER_TEST_{uuid.uuid4().hex}"
    process = aggregate(warehouse, marker, "--spark-master", "local[2]")
    wait_for(lambda: started_by(marker, b"pyspark.daemon") or process.poll() is not None, "Spark Python worker", BOUND)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=BOUND)
    assert process.returncode == 130, stderr
    assert stderr.splitlines() == ["loopmeter: interrupted; no table was replaced: the warehouse keeps its previous "
                                   "tables"], stderr
    assert started_by(marker, b"pyspark-shell") == []
    finished = aggregate(warehouse, marker, "--spark-master", "local[2]")
    _, stderr = finished.communicate(timeout=BOUND)
    assert finished.returncode == 0, stderr
    assert started_by(marker, b"pyspark-shell") == []  # waited for, not left to notice the command's end


@pytest.mark.slow
@pytest.mark.parametrize("master, told", [
    ("local[abc]", "--spark-master 'local[abc]': Spark did not start a session: Could not parse Master URL: 'local[abc]'"),
    ("garbage", "--spark-master 'garbage': Spark did not start a session: Master must either be yarn or start with "
                "spark, k8s, or local"),
    ("spark://127.0.0.1:1", "--spark-master 'spark://127.0.0.1:1' cannot be reached (127.0.0.1:1: Connection refused)"),
])
def test_a_master_spark_refuses_is_told_with_its_reason(warehouse, master, told):
    marker = f"LOOPMETER_TEST_{uuid.uuid4().hex}"
    process = aggregate(warehouse, marker, "--spark-master", master)
    _, stderr = process.communicate(timeout=BOUND)
    assert process.returncode == 1 and stderr.splitlines() == [f"loopmeter: error: --engine spark: {told}"], stderr
    assert started_by(marker, b"pyspark-shell") == []
