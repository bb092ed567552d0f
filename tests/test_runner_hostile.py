"""`loopmeter execute` against adapters that misbehave: a Python adapter calling sys.exit(), two
executes of one run set at once, answers beyond what JSON numbers hold here, and command adapters
that ignore signals or leave processes behind (real processes: the process is the point)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_cli, wait_for
from test_runner import execute, expected_files, run_files, scenarios, target  # noqa: F401 - fixtures

ADAPTERS = Path(__file__).parent / "runner_adapters"

EXITING_ADAPTER = f'''
import os
import sys

sys.path.insert(0, {str(ADAPTERS)!r})
from deterministic import run_benchmark as deterministic_run


def _exit_in(hook):
    if os.environ["EXIT_IN"] == hook:
        code = os.environ["EXIT_CODE"]
        sys.exit(int(code) if code.isdigit() else code)


def run_benchmark(request):
    if request["mode"] == "forgeloopBalanced":
        _exit_in("run_benchmark")
    return deterministic_run(request)


def finalize_benchmark(payload):
    _exit_in("finalize_benchmark")


def cleanup():
    _exit_in("cleanup")
'''


@pytest.fixture
def exiting_adapter(tmp_path) -> Path:
    path = tmp_path / "exiting_adapter.py"
    path.write_text(EXITING_ADAPTER)
    return path


@pytest.mark.parametrize("code", ["0", "the host is gone"])
def test_sys_exit_in_run_benchmark_is_a_failed_call(tmp_path, scenarios, target, exiting_adapter, code):
    env = {"EXIT_IN": "run_benchmark", "EXIT_CODE": code}
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-exit",
                     adapter=exiting_adapter, env=env, check=1)
    results = tmp_path / "results"
    assert result.stderr.strip().splitlines()[-1] == (
        f"loopmeter: error: small-bug-fix/forgeloopBalanced/run 1: SystemExit: {code} (stopped; 1 runs kept in "
        f"{results / 'raw' / 'rs-exit'}; rerun with --resume --run-set rs-exit to finish, or --keep-going to go past failures)"
    )
    assert sorted(run_files(results, "rs-exit")) == ["small-bug-fix/direct/run-001.json"]
    failures = [json.loads(line) for line in (results / "runner/rs-exit/failures.jsonl").read_text().splitlines()]
    assert [(f["runId"], f["error"]) for f in failures] == [("run-small-bug-fix-forgeloopBalanced-001", f"SystemExit: {code}")]


def test_sys_exit_in_finalize_fails_the_command_with_the_runs_kept(tmp_path, scenarios, target, exiting_adapter):
    env = {"EXIT_IN": "finalize_benchmark", "EXIT_CODE": "0"}
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-fin",
                     adapter=exiting_adapter, env=env, check=1)
    assert result.stderr.strip().splitlines()[-1] == (
        "loopmeter: error: finalize_benchmark failed: SystemExit: 0 (the runs are kept; rerun with --resume to finalize again)")
    assert sorted(run_files(tmp_path / "results", "rs-fin")) == expected_files(["small-bug-fix"], 1)


def test_sys_exit_in_cleanup_is_a_warning_and_the_run_set_is_ingested(tmp_path, scenarios, target, exiting_adapter):
    env = {"EXIT_IN": "cleanup", "EXIT_CODE": "cleanup gave up"}
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-clean",
                     "--json", adapter=exiting_adapter, env=env, check=0)
    output = json.loads(result.stdout)
    assert output["cleanupError"] == "SystemExit: cleanup gave up" and output["runCount"] == 3
    assert "warning: the adapter's cleanup failed: SystemExit: cleanup gave up" in result.stderr
    assert output["aggregateDirectory"] == str(tmp_path / "results/aggregate/rs-clean")
    assert sorted(p.name for p in (tmp_path / "results/aggregate/rs-clean").iterdir()) == ["small-bug-fix.json", "summary.json"]


# ---- numbers beyond 64 bits ---------------------------------------------------------------------
COMMAND_ADAPTER = f"{sys.executable} {ADAPTERS / 'command_adapter.py'}"


def test_an_integer_beyond_64_bits_is_judged_by_the_contract_not_called_not_json(tmp_path, scenarios, target):
    log = tmp_path / "methods.txt"
    env = {"CMD_TEST_LOG": str(log), "CMD_TEST_HUGE": "small-bug-fix/forgeloopBalanced/1",
           "CMD_TEST_HUGE_EXTRA": "small-bug-fix/direct/1"}
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-huge",
                     "--keep-going", "--json", adapter=COMMAND_ADAPTER, env=env, check=3)
    output = json.loads(result.stdout)
    assert [(f["runId"], f["error"]) for f in output["failures"]] == [
        ("run-small-bug-fix-forgeloopBalanced-001", "answer rejected: usage.inputTokens: must be at most 2^53 - 1")]
    # the run whose answer holds a huge number outside the contract is written, and its answer handed
    # back to finalizeBenchmark whole
    assert sorted(run_files(tmp_path / "results", "rs-huge")) == [
        "small-bug-fix/direct/run-001.json", "small-bug-fix/forgeloopAdaptive/run-001.json"]
    assert log.read_text().splitlines() == ["runBenchmark"] * 3 + ["finalizeBenchmark", "cleanup"]
    assert output["qualityFinalization"] == {"status": "MEASURED"}


def test_an_integer_of_more_digits_than_python_converts_is_judged_by_the_contract(tmp_path, scenarios, target):
    env = {"CMD_TEST_HUGE": "small-bug-fix/forgeloopBalanced/1", "CMD_TEST_DIGITS": "50000"}
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-digits",
                     "--keep-going", "--json", adapter=COMMAND_ADAPTER, env=env, check=3)
    assert [f["error"] for f in json.loads(result.stdout)["failures"]] == [
        "answer rejected: usage.inputTokens: must be at most 2^53 - 1"]


RAISING_ADAPTER = f'''
import sys
import threading
import time

sys.path.insert(0, {str(ADAPTERS)!r})
from deterministic import run_benchmark as deterministic_run


class HostGone(BaseException):
    pass


def run_benchmark(request):
    if request["mode"] == "forgeloopBalanced" and sys.argv_kind != "thread":
        raise {{"generator": GeneratorExit("g"), "own": HostGone("the host is gone")}}[sys.argv_kind]
    if request["mode"] == "forgeloopAdaptive" and sys.argv_kind == "thread":
        threading.Thread(target=time.sleep, args=(10**6,)).start()  # never ends, not a daemon
    return deterministic_run(request)
'''


@pytest.mark.parametrize("kind, told", [("generator", "GeneratorExit: g"), ("own", "HostGone: the host is gone")])
def test_any_exception_a_python_adapter_raises_is_a_failed_call(tmp_path, scenarios, target, kind, told):
    adapter = tmp_path / "raising_adapter.py"
    adapter.write_text(RAISING_ADAPTER.replace("sys.argv_kind", repr(kind)))
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-raise",
                     "--keep-going", "--json", adapter=adapter, check=3)
    assert [f["error"] for f in json.loads(result.stdout)["failures"]] == [told] and "Traceback" not in result.stderr


def test_a_thread_a_python_adapter_leaves_running_does_not_hold_the_command(tmp_path, scenarios, target):
    adapter = tmp_path / "thread_adapter.py"
    adapter.write_text(RAISING_ADAPTER.replace("sys.argv_kind", repr("thread")))
    runner = loopmeter_process(tmp_path, scenarios, target, adapter, "--runs", "1", "--scenario", "small-bug-fix",
                               "--run-set", "rs-thread", "--quiet")
    try:
        out, err = runner.communicate(timeout=SECOND_BOUND)  # a hang's bound: without the fix it never ends
        assert runner.returncode == 0, err
    finally:
        runner.kill()
        runner.wait()


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_claim_file_that_is_no_regular_file_is_refused(tmp_path, scenarios, target, kind):
    import os

    claim = tmp_path / "results" / "runner" / "rs-claim" / ".execute.lock"
    claim.parent.mkdir(parents=True)
    outside = tmp_path / "outside"
    os.mkfifo(claim) if kind == "fifo" else os.symlink(outside, claim)
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-claim",
                     check=None, timeout=SECOND_BOUND)
    told = "a FIFO or device, not a regular file" if kind == "fifo" else "a symbolic link"
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        f"loopmeter: error: run set rs-claim cannot be started in {tmp_path / 'results'}: {claim}: {told}"]
    assert not outside.exists()


HUGE_PYTHON_ADAPTER = f'''
import sys

sys.path.insert(0, {str(ADAPTERS)!r})
from deterministic import run_benchmark as deterministic_run


def run_benchmark(request):
    answer = deterministic_run(request)
    if request["mode"] == "forgeloopBalanced":
        answer["usage"]["costUsd"] = 10**400
    return answer
'''


def test_a_python_adapter_s_number_beyond_any_double_is_a_rejected_answer(tmp_path, scenarios, target):
    adapter = tmp_path / "huge_adapter.py"
    adapter.write_text(HUGE_PYTHON_ADAPTER)
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-big",
                     "--keep-going", "--json", adapter=adapter, check=3)
    assert [f["error"] for f in json.loads(result.stdout)["failures"]] == [
        "answer rejected: usage.costUsd: must be a finite number >= 0 or null"]


# ---- what execute ingests -----------------------------------------------------------------------
def test_execute_ingests_its_own_run_set_only(tmp_path, scenarios, target):
    """runner.md: the other run sets in RESULTS are left as stored; `ingest forgeloop` takes them."""
    from conftest import run_cli

    results = tmp_path / "results"
    run_cli("execute", "--adapter", str(ADAPTERS / "deterministic.py"), "--scenarios", str(scenarios), "--target",
            str(target[0]), "--output", str(results), "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-before",
            warehouse=tmp_path / "another-warehouse")
    execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-mine")
    ingested = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), warehouse=tmp_path / "warehouse")
    assert "6 run files: 3 accepted, 3 unchanged, 0 rejected; run sets rs-before" in ingested.stdout, ingested.stdout


# ---- one execute per run set ------------------------------------------------------------------
WAITING_ADAPTER = f'''
import os
import sys
import time

sys.path.insert(0, {str(ADAPTERS)!r})
from deterministic import run_benchmark as deterministic_run


def run_benchmark(request):
    with open(os.environ["WAIT_LOG"], "a") as log:
        log.write(f"{{os.getpid()}} {{request['runId']}}\\n")
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["WAIT_GO"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return deterministic_run(request)
'''


def loopmeter_process(tmp_path, scenarios, target, adapter, *args, env=None):
    import os
    import subprocess

    command = [sys.executable, "-m", "loopmeter", "execute", "--adapter", str(adapter), "--scenarios", str(scenarios),
               "--target", str(target[0]), "--output", str(tmp_path / "results"), *args,
               "--warehouse", str(tmp_path / "warehouse")]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})), cwd=Path(__file__).parent.parent)


SECOND_BOUND = 120


def test_a_second_execute_of_a_run_set_being_executed_is_refused(tmp_path, scenarios, target):
    adapter = tmp_path / "waiting_adapter.py"
    adapter.write_text(WAITING_ADAPTER)
    log, go = tmp_path / "calls.txt", tmp_path / "go"
    env = {"WAIT_LOG": str(log), "WAIT_GO": str(go)}
    args = ("--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-twice")
    first = loopmeter_process(tmp_path, scenarios, target, adapter, *args, env=env)
    try:
        wait_for(lambda: log.exists() and log.read_text(), "the first execute's first call")
        for extra in ((), ("--wait",), ("--resume",)):
            # a process of its own, bounded: an execute that is not refused waits on the first's adapter
            second = execute(tmp_path, scenarios, target, *args, *extra, adapter=adapter, env=env, check=1, timeout=SECOND_BOUND)
            assert second.stderr.strip() == (
                f"loopmeter: error: run set rs-twice is being executed by another loopmeter execute (it holds "
                f"{tmp_path / 'results/runner/rs-twice/.execute.lock'}); wait for it to end, or choose another --run-set")
        assert len(log.read_text().splitlines()) == 1  # the refused ones made no call
    finally:
        go.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert [line.split()[1] for line in log.read_text().splitlines()] == [
        f"run-small-bug-fix-{mode}-001" for mode in ("direct", "forgeloopBalanced", "forgeloopAdaptive")]
    # once it has ended the run set is free again: --resume finds it whole
    resumed = execute(tmp_path, scenarios, target, *args, "--resume", adapter=adapter, env=env)
    assert "Runs: 3 (0 executed, 3 already written, 0 failed)" in resumed.stdout
    again = execute(tmp_path, scenarios, target, *args, adapter=adapter, env=env, check=1)
    assert "run set rs-twice already exists" in again.stderr


# ---- no process outlives execute ----------------------------------------------------------------
def alive(pid: int) -> bool:
    """The process runs (a zombie nobody reaped yet, in a container without an init, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def recorded(path: Path, what: str) -> list[int]:
    if not path.exists():
        return []
    return [int(line.split()[1]) for line in path.read_text().splitlines() if line.startswith(f"{what} ")]


def end_leftovers(pids_file: Path) -> None:
    """A failing test leaves no process behind either."""
    import os
    import signal

    for pid in recorded(pids_file, "adapter") + recorded(pids_file, "child"):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def busy_adapter_env(tmp_path) -> tuple[Path, dict]:
    pids = tmp_path / "pids.txt"
    return pids, {"CMD_TEST_PIDS": str(pids), "CMD_TEST_CHILD": "1", "CMD_TEST_CLEANUP": str(tmp_path / "cleanup.txt"),
                  "CMD_TEST_BUSY": "small-bug-fix/forgeloopBalanced/1"}


@pytest.mark.slow  # waits out the adapter's 10 s to answer cleanup
@pytest.mark.parametrize(("signal_name", "code", "how"), [("SIGINT", 130, "interrupted"),
                                                          ("SIGTERM", 143, "terminated (SIGTERM)")])
def test_a_signal_while_the_adapter_is_stuck_ends_it_and_its_children(tmp_path, scenarios, target, signal_name, code, how):
    """Ctrl-C or SIGTERM while the command adapter is stuck in a call and deaf to Ctrl-C: its cleanup
    answer is awaited a bounded time, then the adapter and what it started are ended; the runs stay."""
    import os
    import signal

    pids, env = busy_adapter_env(tmp_path)
    runner = loopmeter_process(tmp_path, scenarios, target, COMMAND_ADAPTER, "--runs", "1", "--scenario", "small-bug-fix",
                               "--run-set", "rs-stuck", env=env)
    try:
        wait_for(lambda: pids.exists() and "busy " in pids.read_text(), "the adapter to be stuck")
        os.kill(runner.pid, getattr(signal, signal_name))
        out, err = runner.communicate(timeout=120)  # the bound of a hang, far above cleanup's 10 s + 5 s
        assert runner.returncode == code, err
        results = tmp_path / "results"
        assert err.strip().splitlines()[-1] == (
            f"loopmeter: {how}; 1 runs kept in {results / 'raw/rs-stuck'}; rerun with --resume --run-set rs-stuck "
            "to finish")
        assert sorted(run_files(results, "rs-stuck")) == ["small-bug-fix/direct/run-001.json"]
        assert "the adapter did not answer cleanup within 10 s; it was terminated" in err
        left = [pid for pid in recorded(pids, "adapter") + recorded(pids, "child") if alive(pid)]
        assert left == []
        # the run set is free again: --resume finishes it
        resumed = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set",
                          "rs-stuck", "--resume", adapter=COMMAND_ADAPTER)
        assert "Runs: 3 (2 executed, 1 already written, 0 failed)" in resumed.stdout
    finally:
        runner.kill()
        runner.wait()
        end_leftovers(pids)


@pytest.mark.slow  # waits out the adapter's 10 s to answer cleanup
def test_a_run_set_stopped_in_its_first_call_is_resumed_at_its_own_size(tmp_path, scenarios, target):
    """Stopped before any run is written, the run set still has its plan: --resume without --runs runs the
    size it was started with (1 a mode here), not the tier's default."""
    import os
    import signal

    pids, env = busy_adapter_env(tmp_path)
    env["CMD_TEST_BUSY"] = "small-bug-fix/direct/1"
    runner = loopmeter_process(tmp_path, scenarios, target, COMMAND_ADAPTER, "--runs", "1", "--scenario", "small-bug-fix",
                               "--run-set", "rs-first", env=env)
    try:
        wait_for(lambda: pids.exists() and "busy " in pids.read_text(), "the adapter to be stuck")
        os.kill(runner.pid, signal.SIGTERM)
        runner.communicate(timeout=SECOND_BOUND)
        assert runner.returncode == 143
        assert json.loads((tmp_path / "results/runner/rs-first/plan.json").read_text())
        resumed = execute(tmp_path, scenarios, target, "--scenario", "small-bug-fix", "--run-set", "rs-first", "--resume",
                          adapter=COMMAND_ADAPTER)
        assert "Runs: 3 (3 executed, 0 already written, 0 failed)" in resumed.stdout
    finally:
        runner.kill()
        runner.wait()
        end_leftovers(pids)


GATED_ADAPTER = f'''
import os
import sys
import time

sys.path.insert(0, {str(ADAPTERS)!r})
from deterministic import run_benchmark as deterministic_run


def run_benchmark(request):
    open(os.environ["STARTED"], "a").close()
    while not os.path.exists(os.environ["GO_ON"]):
        time.sleep(0.02)
    return deterministic_run(request)
'''


def test_a_sigterm_the_runner_was_started_ignoring_stays_ignored(tmp_path, scenarios, target):
    import os
    import signal
    import subprocess

    adapter = tmp_path / "gated_adapter.py"
    adapter.write_text(GATED_ADAPTER)
    started, go_on = tmp_path / "started", tmp_path / "go-on"
    command = [sys.executable, "-m", "loopmeter", "execute", "--adapter", str(adapter), "--scenarios", str(scenarios),
               "--target", str(target[0]), "--output", str(tmp_path / "results"), "--runs", "1", "--scenario",
               "small-bug-fix", "--run-set", "rs-ignored", "--quiet", "--warehouse", str(tmp_path / "warehouse")]
    runner = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, STARTED=str(started), GO_ON=str(go_on)),
                              preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    try:
        wait_for(started.exists, "the first call")
        runner.send_signal(signal.SIGTERM)
        go_on.touch()
        out, err = runner.communicate(timeout=SECOND_BOUND)
        assert runner.returncode == 0, err
        assert len(run_files(tmp_path / "results", "rs-ignored")) == 3
    finally:
        runner.kill()
        runner.wait()


def test_an_adapter_dies_with_a_runner_killed_by_sigkill(tmp_path, scenarios, target):
    import os
    import signal

    pids, env = busy_adapter_env(tmp_path)
    runner = loopmeter_process(tmp_path, scenarios, target, COMMAND_ADAPTER, "--runs", "1", "--scenario", "small-bug-fix",
                               "--run-set", "rs-killed", env=env)
    try:
        wait_for(lambda: pids.exists() and "busy " in pids.read_text(), "the adapter to be stuck")
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        [adapter] = recorded(pids, "adapter")
        wait_for(lambda: not alive(adapter), "the adapter to end with the runner", bound=30)
    finally:
        end_leftovers(pids)


@pytest.mark.parametrize("how", ["python", "bash"])
def test_what_a_command_adapter_starts_in_the_background_ends_with_it(tmp_path, scenarios, target, how):
    pids = tmp_path / "pids.txt"
    env = {"CMD_TEST_PIDS": str(pids), "CMD_TEST_CHILD": "1" if how == "python" else ""}
    adapter = COMMAND_ADAPTER
    if how == "bash":  # a wrapper script leaving a process behind, then handing over to the host
        script = tmp_path / "host-adapter.sh"
        script.write_text(f'#!/bin/bash\nsleep 303 &\necho "child $!" >> "$CMD_TEST_PIDS"\nexec {COMMAND_ADAPTER}\n')
        script.chmod(0o755)
        adapter = script
    try:
        execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-bg",
                adapter=adapter, env=env)
        children = recorded(pids, "child")
        assert len(children) == 1 and len(recorded(pids, "adapter")) == 1
        assert [pid for pid in children if alive(pid)] == []
    finally:
        end_leftovers(pids)


# ---- answers and files that never end ---------------------------------------------------------
def test_an_answer_line_that_never_ends_fails_its_call_with_memory_bounded(tmp_path, scenarios, target):
    """A command adapter writing bytes without a line break for ever: the call fails once the line passes
    the largest run file (the runner's memory holds that much at most; it once grew without end, deaf to
    Ctrl-C), the adapter is ended, and the next call starts a new one."""
    env = {"CMD_TEST_ENDLESS": "small-bug-fix/forgeloopBalanced/1"}
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-endless",
                     "--keep-going", "--json", adapter=COMMAND_ADAPTER, env=env, check=3, timeout=300)
    assert [(f["runId"], f["error"]) for f in json.loads(result.stdout)["failures"]] == [
        ("run-small-bug-fix-forgeloopBalanced-001", "the adapter's answer to runBenchmark is longer than 16 MiB (the "
         "largest run file `ingest forgeloop` takes); it was ended")]
    assert sorted(run_files(tmp_path / "results", "rs-endless")) == [
        "small-bug-fix/direct/run-001.json", "small-bug-fix/forgeloopAdaptive/run-001.json"]


def test_an_answer_whose_id_is_true_is_no_answer_to_request_1(tmp_path, scenarios, target):
    env = {"CMD_TEST_BOOL_ID": "small-bug-fix/direct/1"}
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-bool",
                     "--keep-going", "--json", adapter=COMMAND_ADAPTER, env=env, check=3)
    assert [(f["runId"], f["error"]) for f in json.loads(result.stdout)["failures"]] == [
        ("run-small-bug-fix-direct-001", "the adapter answered request True, expected 1")]


def test_an_adapters_stderr_is_kept_to_16_mib_each_time_it_starts(tmp_path, scenarios, target):
    """20 MiB on stderr for each of 3 calls: the log keeps the first 16 MiB and says how much more there was;
    every run is written."""
    execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-stderr",
            adapter=COMMAND_ADAPTER, env={"CMD_TEST_STDERR_MB": "20"})
    log = tmp_path / "results" / "runner" / "rs-stderr" / "adapter-stderr.log"
    size = log.stat().st_size
    assert 16 << 20 < size < (16 << 20) + 200, size
    with open(log, "rb") as handle:
        handle.seek(-200, 2)
        tail = handle.read().decode()
    dropped = 3 * ((20 << 20) + 1) - (16 << 20)
    assert tail.endswith(f"\n[loopmeter: {dropped} more bytes of stderr not kept: the log keeps 16 MiB each time the "
                         "adapter starts]\n"), tail
    assert len(run_files(tmp_path / "results", "rs-stderr")) == 3


@pytest.mark.parametrize("where", ["scenarios", "run file"])
def test_a_fifo_among_the_scenarios_or_where_a_run_file_belongs_is_named_never_opened(tmp_path, scenarios, target, where):
    """A FIFO would be waited on for ever: `execute` names it in one line, as `ingest forgeloop` does."""
    import os

    if where == "scenarios":
        fifo = scenarios / "zz-pipe.json"
        os.mkfifo(fifo)
    else:
        execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-fifo")
        fifo = tmp_path / "results" / "raw" / "rs-fifo" / "small-bug-fix" / "direct" / "run-001.json"
        fifo.unlink()
        os.mkfifo(fifo)
    resume = ["--resume"] if where == "run file" else []
    result = execute(tmp_path, scenarios, target, "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-fifo",
                     *resume, check=1, timeout=120)
    assert result.stderr.strip().splitlines()[-1] == (
        f"loopmeter: error: {fifo} is a FIFO, not a regular file; loopmeter never opens it (remove it or put the file "
        "back)"), result.stderr


CHDIR_ADAPTER = f'''
import os
import sys

sys.path.insert(0, {str(ADAPTERS)!r})
from deterministic import run_benchmark as deterministic_run


def run_benchmark(request):
    os.chdir(os.environ["ELSEWHERE"])
    return deterministic_run(request)
'''


def test_a_python_adapter_that_changes_the_working_directory_changes_no_path_given(tmp_path, scenarios, target):
    """Relative --scenarios, --output and --warehouse are the ones named at the start, wherever a Python
    adapter (run in the command's process) moves it: every run is ingested and aggregated."""
    import os

    adapter = tmp_path / "chdir_adapter.py"
    adapter.write_text(CHDIR_ADAPTER)
    (tmp_path / "elsewhere").mkdir()
    result = run_cli("execute", "--adapter", str(adapter), "--scenarios", "scenarios", "--target", str(target[0]),
                     "--output", "results", "--runs", "1", "--scenario", "small-bug-fix", "--run-set", "rs-cd",
                     "--warehouse", "warehouse", "--quiet", cwd=tmp_path, env={"ELSEWHERE": str(tmp_path / "elsewhere")},
                     process=True)
    assert result.returncode == 0, result.stderr
    assert sorted(run_files(tmp_path / "results", "rs-cd")) == expected_files(["small-bug-fix"], 1)
    assert (tmp_path / "results" / "aggregate" / "rs-cd").is_dir()
    assert os.listdir(tmp_path / "elsewhere") == []
