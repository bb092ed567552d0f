"""A killed ingest takes its worker processes with it: nothing is left holding the warehouse lock.

Real processes, no mocks: `python -m loopmeter ingest forgeloop` is SIGKILLed (as the OOM
killer would) while its reader's worker processes exist; within a few seconds none of them
may be alive, the lock must be free and the next ingest into the same warehouse must work.
"""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from loopmeter.forgeloop.reader import BATCH
from loopmeter.forgeloop.samples import scaled_plans, write_results
from loopmeter.lifetime import usable_cores
from loopmeter.storage.marker import MARKER, MARKER_TEXT

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/task") or usable_cores() < 2,
    reason="needs Linux /proc, and more than one core (else the ingest reads in its own process)",
)

RUNS = 2 * BATCH + 360  # one chunk of a few batches: read by worker processes
GONE_WITHIN = 5.0  # seconds the workers get to end once the ingest is killed


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lifetime") / "results"
    written = write_results(root, scaled_plans(RUNS), indent=None)
    assert written > 2 * BATCH
    return root


# The ingest, its workers' batches slowed as on a slow disk: they live long enough to be seen
# (on a loaded machine a look every 5 ms could miss all of them, three times in a row)
SLOW_READS = """
import sys, time
import loopmeter.forgeloop.reader as reader
read_batch = reader.read_batch
def slowly(*args):
    time.sleep(0.5)
    return read_batch(*args)
reader.read_batch = slowly
sys.argv[0] = "loopmeter"
from loopmeter.cli import main
main()
"""


def ingest_command(results: Path, warehouse: Path) -> list[str]:
    return [sys.executable, "-c", SLOW_READS, "ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"),
            "--quiet", "--warehouse", str(warehouse)]


def start(results: Path, warehouse: Path, stderr: Path, **extra: str) -> subprocess.Popen:
    """The ingest, its stderr to a file (a pipe would be held open by orphaned workers)."""
    env = dict(os.environ, **extra)
    with open(stderr, "wb") as errors:
        return subprocess.Popen(ingest_command(results, warehouse), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=errors)


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            pass
    return found


def identity(pid: int) -> tuple[int, str] | None:
    """(pid, start time) of a live (not zombie) process: a reused pid is another process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else (pid, fields[19])


def holders(path: Path) -> list[int]:
    """The processes (of this user) with `path` open."""
    target = os.path.realpath(path)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            descriptors = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(f"/proc/{entry}/fd/{descriptor}") == target:
                    found.append(int(entry))
                    break
            except OSError:
                pass
    return found


def lock_is_free(lock: Path) -> bool:
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def assert_left_nothing_behind(workers: list[tuple[int, str]], warehouse: Path, results: Path) -> None:
    alive = lambda: [worker for worker in workers if identity(worker[0]) == worker]  # noqa: E731
    lock = warehouse / ".lock"
    try:
        assert wait_until(lambda: not alive(), GONE_WITHIN), f"workers still alive after the ingest was killed: {alive()}"
        assert wait_until(lambda: lock_is_free(lock), GONE_WITHIN), f"the lock is still held, open in {holders(lock)}"
    finally:
        for pid, _ in alive():  # never leave orphans to later tests
            os.kill(pid, signal.SIGKILL)
    again = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"), "--json",
                    warehouse=warehouse)
    assert '"accepted"' in again.stdout


def all_workers(ingest: subprocess.Popen) -> list[tuple[int, str]]:
    """The ingest's worker processes once all of them run (they fork together on the first batch);
    none when the ingest ended first."""
    deadline = time.monotonic() + 60
    while ingest.poll() is None and time.monotonic() < deadline:
        found = [identity(pid) for pid in children(ingest.pid)]
        if found and len(found) >= usable_cores() and all(found):
            return found
        time.sleep(0.005)
    return []


@pytest.mark.slow
def test_workers_end_when_the_ingest_is_killed_while_they_read(tmp_path, results):
    for attempt in range(3):  # the ingest could end between two looks on a fast machine: try again
        warehouse = tmp_path / f"warehouse-{attempt}"
        ingest = start(results, warehouse, tmp_path / f"stderr-{attempt}")
        try:
            workers = all_workers(ingest)
            if workers:
                ingest.kill()
        finally:
            if ingest.poll() is None:
                ingest.kill()
            ingest.wait(timeout=30)
        stderr = (tmp_path / f"stderr-{attempt}").read_text()
        if workers:
            assert ingest.returncode == -signal.SIGKILL, stderr
            assert_left_nothing_behind(workers, warehouse, results)
            return
        assert ingest.returncode == 0, stderr
    pytest.fail("the ingest never showed its worker processes before it ended")


@pytest.mark.slow
def test_workers_end_when_the_ingest_dies_with_them_waiting_for_work(tmp_path, results):
    """Killed after reading, the pool not yet shut down: its workers wait on its queue (as QA found them)."""
    warehouse = tmp_path / "warehouse"
    ingest = start(results, warehouse, tmp_path / "stderr", LOOPMETER_CRASH_AT="ingest:read")
    try:
        workers: list[tuple[int, str]] = []
        deadline = time.monotonic() + 60
        while ingest.poll() is None and time.monotonic() < deadline:
            workers = [found for found in map(identity, children(ingest.pid)) if found] or workers
            time.sleep(0.005)
    finally:
        if ingest.poll() is None:
            ingest.kill()
        ingest.wait(timeout=30)
    stderr = (tmp_path / "stderr").read_text()
    assert ingest.returncode == -signal.SIGKILL, stderr
    assert workers, "the ingest read its files without worker processes"
    assert_left_nothing_behind(workers, warehouse, results)


@pytest.mark.slow
def test_ctrl_c_to_the_terminal_s_process_group_is_answered_by_one_line(tmp_path, results):
    """A terminal sends Ctrl-C to the whole process group: each worker printed its own KeyboardInterrupt
    traceback before the ingest's one line (a QA pass's random-kill trials). Workers ignore it now."""
    seen = []
    for attempt in range(3):
        warehouse = tmp_path / f"warehouse-{attempt}"
        errors = tmp_path / f"stderr-{attempt}"
        with open(errors, "wb") as handle:
            ingest = subprocess.Popen(ingest_command(results, warehouse), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=handle,
                                      start_new_session=True)  # its own process group, as a terminal's job
        try:
            workers = all_workers(ingest)
            if workers:
                os.killpg(ingest.pid, signal.SIGINT)
            ingest.wait(timeout=60)
        finally:
            if ingest.poll() is None:
                os.killpg(ingest.pid, signal.SIGKILL)
                ingest.wait(timeout=30)
        stderr = errors.read_text()
        if workers and ingest.returncode == 130:
            assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("loopmeter: interrupted; "), stderr
            assert_left_nothing_behind(workers, warehouse, results)
            return
        assert ingest.returncode == 0, stderr  # it ended before the Ctrl-C came: try again
        seen.append((len(workers), ingest.returncode, stderr[-500:]))
    # what the attempts saw, and what this process passes on to its children (ignored or blocked signals)
    pytest.fail(f"no attempt interrupted the ingest with its workers running: (workers, exit, stderr) {seen}; "
                f"SIGINT here: {signal.getsignal(signal.SIGINT)}, blocked: {signal.pthread_sigmask(signal.SIG_BLOCK, [])}")


AFTER_THE_END = """
import os, signal, sys
import loopmeter.cli as cli
leave = sys.exit
def exit_after_a_ctrl_c(code):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the interpreter is about to leave
    leave(code)
sys.exit = exit_after_a_ctrl_c
sys.argv = ["loopmeter", "queries"]
cli.main()
"""


def test_ctrl_c_after_the_command_ended_changes_nothing():
    """The work is done: the command's own exit code, no traceback (it ended killed by SIGINT, silent)."""
    done = subprocess.run([sys.executable, "-c", AFTER_THE_END], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and done.stderr == "" and "forgeloop_pairs" in done.stdout, (done.returncode, done.stderr)


INTERRUPTED = "loopmeter: interrupted; no table was replaced: the warehouse keeps its previous tables\n"


def on_a_new_warehouse(script: str, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """`script` run by Python with a new, empty warehouse (`tmp_path`) and `args`: exit code, stderr, stdout."""
    (tmp_path / MARKER).write_bytes(MARKER_TEXT)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    return done.returncode, done.stderr, done.stdout


SWALLOWED = """
import sys
import loopmeter.storage.catalog as catalog
from loopmeter.cli import main

warehouse, then = sys.argv[1:]

class Callback:
    def __del__(self):
        raise KeyboardInterrupt  # a Ctrl-C landing inside a native library's call back into Python

def native_call(store):
    Callback()  # the library can only hand it to sys.unraisablehook, and goes on
    if then == "fails":
        raise TypeError("the library's own error, from the callback's failure")
    for _ in range(10**9):  # the command's own work goes on, until the Ctrl-C comes again
        pass

catalog.repair_catalog = native_call
sys.argv = ["loopmeter", "sql", "SELECT 1", "--warehouse", warehouse]
main(restore_interrupt=True)
"""


@pytest.mark.parametrize("then", ["fails", "goes on"])
def test_a_ctrl_c_a_native_library_swallowed_is_answered_as_a_ctrl_c(tmp_path, then):
    """polars and pyarrow call back into Python (a dtype's conversion): a KeyboardInterrupt raised there
    cannot pass through them. It is still the interruption, told in one line with exit 130: neither
    Python's "Exception ignored" traceback nor the library's error that follows."""
    assert on_a_new_warehouse(SWALLOWED, tmp_path, then) == (130, INTERRUPTED, "")


WHILE_DUCKDB_LOADS = """
import enum, os, signal, sys
create = enum.EnumType.__call__
def create_with_a_ctrl_c(cls, *args, **kwargs):
    if args and args[0] == "PythonUDFType":  # DuckDB's native module making one of its enums
        os.kill(os.getpid(), signal.SIGINT)
        print("ctrl-c sent", file=sys.stderr)
    return create(cls, *args, **kwargs)
enum.EnumType.__call__ = create_with_a_ctrl_c
from loopmeter.entry import main
sys.argv = ["loopmeter", "sql", "SELECT 42", "--warehouse", sys.argv[1]]
main()
"""


def test_a_ctrl_c_while_duckdb_loads_is_answered_by_one_line(tmp_path):
    """DuckDB's loader calls back into Python; a KeyboardInterrupt raised there would abort the process
    ("Critical nanobind error" and a traceback). The Ctrl-C waits for the import, then ends the command."""
    assert on_a_new_warehouse(WHILE_DUCKDB_LOADS, tmp_path) == (130, "ctrl-c sent\n" + INTERRUPTED, "")


WHILE_DUCKDB_READS_ARROW = """
import os, signal, sys
import pyarrow as pa
import loopmeter.operations as operations
from loopmeter.duckdb_module import duckdb
from loopmeter.cli import main

def batches():
    yield pa.record_batch([pa.array([1])], names=["a"])
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while DuckDB pulls the stream, in its call back into Python
    for number in range(10**8):
        pass
    yield pa.record_batch([pa.array([2])], names=["a"])

def sql(*args, **options):  # the command's operation, reading a stream
    connection = duckdb.connect()
    connection.register("runs", pa.RecordBatchReader.from_batches(pa.schema([("a", pa.int64())]), batches()))
    return connection.execute("SELECT sum(a) FROM runs").pl()

operations.sql = sql
sys.argv = ["loopmeter", "sql", "SELECT 1", "--warehouse", sys.argv[1]]
main(restore_interrupt=True)
"""


def test_a_ctrl_c_a_native_library_wrapped_in_its_own_error_is_answered_as_a_ctrl_c(tmp_path):
    """DuckDB reading an Arrow stream calls back into Python for each batch: a KeyboardInterrupt raised there
    comes back as DuckDB's InvalidInputException naming it. Once a Ctrl-C came, that error is the interruption."""
    assert on_a_new_warehouse(WHILE_DUCKDB_READS_ARROW, tmp_path) == (130, INTERRUPTED, "")
