"""Shared fixtures: the ForgeLoop corpus, the CLI as a user runs it, temporary warehouses."""
from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # the per-run port of ForgeLoop's aggregator: the oracle

# A command a test runs without --warehouse must never reach the project's own data/warehouse,
# where a user's `loopmeter demo` keeps its warehouse: every command (in this process or a child)
# finds $LOOPMETER_WAREHOUSE pointing at a place of this test process's own, which does not exist
# until a command writes there. A test may still set the variable itself (`env=`).
DEFAULT_WAREHOUSE = Path(tempfile.mkdtemp(prefix="loopmeter-tests-")) / "default-warehouse"
atexit.register(shutil.rmtree, DEFAULT_WAREHOUSE.parent, ignore_errors=True)
os.environ["LOOPMETER_WAREHOUSE"] = str(DEFAULT_WAREHOUSE)

# pytest-xdist's workers set COLUMNS=80 and LINES=24: a command a test starts would take them for
# the width a user asked for. Commands run as from a pipe unless a test sets a width itself (`env=`).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


# Started from a background job (`.ci/run &`), this process ignores Ctrl-C, and so would every
# command a test starts: the tests of Ctrl-C would send it to commands that ignore it. Commands
# start here as from a terminal's foreground (a handler set here is the default after exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def imported_packages(importtime_stderr: str) -> set[str]:
    """Top-level packages a `python -X importtime` run imported, from what it printed."""
    return {line.split("|")[-1].strip().split(".")[0] for line in importtime_stderr.splitlines() if "|" in line}


def corpus_dir() -> Path:
    configured = os.environ.get("LOOPMETER_CORPUS")
    return Path(configured) if configured else ROOT.parent / "shared" / "corpus" / "forgeloop"



@pytest.fixture(scope="session")
def corpus() -> Path:
    path = corpus_dir()
    if not (path / "results" / "raw").is_dir():
        pytest.fail(f"the ForgeLoop corpus is not at {path} (set LOOPMETER_CORPUS)")
    return path


START_DIRECTORY = os.getcwd()  # where pytest was started: every test starts there


@pytest.fixture(autouse=True)
def _working_directory_kept():
    """A test, or a fixture before it, that leaves the process in another working directory fails
    here, and the directory is put back: the next test would otherwise run there or, once that
    folder is removed, fail at `os.getcwd()` with no word of who moved it."""
    _put_back("a fixture before this test")
    yield
    _put_back("the test")


def _put_back(who: str) -> None:
    try:
        now = os.getcwd()
    except FileNotFoundError:
        now = "a folder since removed"
    if now != START_DIRECTORY:
        os.chdir(START_DIRECTORY)
        pytest.fail(f"{who} left the working directory at {now} (the tests run in {START_DIRECTORY})")


@dataclass
class Ran:
    """What a command did: as `subprocess.CompletedProcess` says it."""
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, warehouse: Path | None = None, check: int | None = 0, env: dict | None = None,
            timeout: float | None = None, cwd: Path = ROOT, process: bool = False) -> Ran:
    """Run `loopmeter ARGS` and return its exit code and output. In this process (`loopmeter.cli.run`,
    what the program runs, with stdout and stderr captured, `env` set and `cwd` the working directory
    while it runs) unless `process` or `timeout` asks for a process of its own, as a user starts it:
    where the process is the point (signals, its exit, what it imports) or the command could hang."""
    command = [*args, *(["--warehouse", str(warehouse)] if warehouse is not None else [])]
    if process or timeout is not None or "LOOPMETER_CRASH_AT" in (env or {}):  # a crash point kills its process
        environment = dict(os.environ, **(env or {}))
        done = subprocess.run([sys.executable, "-m", "loopmeter", *command], capture_output=True, text=True,
                              env=environment, cwd=cwd, timeout=timeout)
        result = Ran(command, done.returncode, done.stdout, done.stderr)
    else:
        result = _in_process(command, env or {}, cwd)
    if check is not None and result.returncode != check:
        raise AssertionError(
            f"loopmeter {' '.join(args)} exited {result.returncode} (expected {check})\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


# A command run in this process changes what the whole process shares (its working directory, its
# environment, sys.stdout and sys.stderr), so one runs at a time: commands a test starts side by
# side in threads would otherwise put back each other's directory (one since removed, say).
_IN_PROCESS = threading.Lock()


def _in_process(command: list[str], env: dict, cwd: Path) -> Ran:
    with _IN_PROCESS:
        return _run_here(command, env, cwd)


def _run_here(command: list[str], env: dict, cwd: Path) -> Ran:
    from loopmeter import progress
    from loopmeter.cli import run
    from loopmeter.commands import common

    saved_environment, saved_directory = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.update({name: str(value) for name, value in env.items()})
    os.chdir(cwd)
    progress.QUIET, common.DEBUG = False, False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(command)
    finally:
        os.environ.clear()
        os.environ.update(saved_environment)
        os.chdir(saved_directory)
    return Ran(command, code, out.getvalue(), err.getvalue())


def wait_for(condition, what: str, bound: float = 60.0):
    """Poll `condition` until it holds and return its value (a generous bound: a slow machine is not a
    failure; the event is waited for, never a fixed time)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"waited {bound} s for {what}")


@pytest.fixture(scope="session")
def corpus_warehouse(tmp_path_factory, corpus) -> Path:
    """A warehouse with both corpus run sets and their scenarios ingested and aggregated (read-only for tests)."""
    warehouse = tmp_path_factory.mktemp("corpus") / "warehouse"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--aggregate",
            warehouse=warehouse)
    return warehouse


@pytest.fixture(scope="session")
def demo_warehouse(tmp_path_factory) -> Path:
    """The warehouse `loopmeter demo` builds from the project's own sample data."""
    base = tmp_path_factory.mktemp("demo")
    run_cli("demo", "--data", str(base / "data"), "--quiet", warehouse=base / "warehouse")
    return base / "warehouse"


@contextlib.contextmanager
def resource_warnings():
    """The messages of the ResourceWarnings the block leaves (a file or pipe left open for the
    garbage collector to close), filled in as the block ends."""
    import gc
    import warnings

    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
        gc.collect()
    found += [str(warning.message) for warning in caught if issubclass(warning.category, ResourceWarning)]


def run_as_a_user(command: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `command` without the power to read any file (root's CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH dropped from the bounding set before the exec, so a file of mode 000
    cannot be read, as for any user)."""
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, preexec_fn=file_powers_dropper(),
                          timeout=300, env=None if env is None else dict(os.environ, **env))


def file_powers_dropper():
    """For `preexec_fn`: as root, drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set
    before the exec, so the command meets file permissions as any user does (a folder of mode 0555
    cannot be written); None for any other user, whom permissions stop already."""
    if os.geteuid() != 0:
        return None

    def drop() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    return drop
