"""`loopmeter execute` against adapters that misbehave: a Python adapter calling sys.exit(), two
executes of one run set at once, answers beyond what JSON numbers hold here, and command adapters
that ignore signals or leave processes behind (real processes: the process is the point)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

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
