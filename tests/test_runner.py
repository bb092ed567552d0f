"""`loopmeter execute`: the benchmark runner, with a deterministic Python adapter and a
command adapter (a real subprocess speaking JSON lines), against a real git repository."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import ROOT, imported_packages, resource_warnings, run_cli
from loopmeter.forgeloop import run_document, run_set
from loopmeter.forgeloop.schema import RunRejected
from loopmeter.jsjson import dumps
from loopmeter.storage import Warehouse

ADAPTERS = ROOT / "tests" / "runner_adapters"
PYTHON_ADAPTER = ADAPTERS / "deterministic.py"
COMMAND_SCRIPT = ADAPTERS / "command_adapter.py"
MODES = ("direct", "forgeloopBalanced", "forgeloopAdaptive")
SCENARIOS = {"small-bug-fix": "balanced", "static-landing-page": "light"}


@pytest.fixture
def target(tmp_path) -> tuple[Path, str]:
    """A git repository with one commit at a fixed date; returns (path, HEAD)."""
    repo = tmp_path / "target"
    repo.mkdir()
    env = dict(os.environ, GIT_AUTHOR_DATE="2026-08-01T10:00:00Z", GIT_COMMITTER_DATE="2026-08-01T10:00:00Z",
               GIT_AUTHOR_NAME="Runner Test", GIT_AUTHOR_EMAIL="runner@example.com",
               GIT_COMMITTER_NAME="Runner Test", GIT_COMMITTER_EMAIL="runner@example.com")
    (repo / "app.txt").write_text("the project the agent works on\n")
    for command in (["init", "-q"], ["add", "app.txt"], ["-c", "commit.gpgsign=false", "commit", "-q", "-m", "start"]):
        subprocess.run(["git", *command], cwd=repo, env=env, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    return repo, head


@pytest.fixture
def scenarios(tmp_path) -> Path:
    directory = tmp_path / "scenarios"
    directory.mkdir()
    for scenario_id, profile in SCENARIOS.items():
        (directory / f"{scenario_id}.json").write_text(json.dumps({
            "schemaVersion": 1, "benchmarkVersion": "2", "scenarioId": scenario_id, "description": "test scenario",
            "input": {"workType": "x", "surfaces": [], "risks": [], "platforms": []},
            "expectedProfile": profile, "measurements": {},
        }))
    return directory


def execute(tmp_path, scenarios, target, *args, adapter=PYTHON_ADAPTER, env=None, check=0, output=True, timeout=None):
    extra = ["--output", str(tmp_path / "results")] if output else []
    return run_cli("execute", "--adapter", str(adapter), "--scenarios", str(scenarios), "--target", str(target[0]),
                   *extra, *args, warehouse=tmp_path / "warehouse", env=env, check=check, timeout=timeout)


def run_files(results: Path, run_set: str) -> dict[str, bytes]:
    raw = results / "raw" / run_set
    return {str(path.relative_to(raw)): path.read_bytes() for path in sorted(raw.rglob("*.json"))}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def key_paths(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield prefix + key
            yield from key_paths(item, f"{prefix}{key}.")


def expected_files(scenario_ids, runs):
    return sorted(f"{s}/{m}/run-{i:03d}.json" for s in scenario_ids for m in MODES for i in range(1, runs + 1))


# ---- a whole run set, as a user runs it --------------------------------------------------
def test_smoke_run_set_has_forgeloops_layout_values_and_aggregate(tmp_path, scenarios, target, corpus):
    log, marker = tmp_path / "inputs.jsonl", tmp_path / "cleanup.txt"
    env = {"RUNNER_TEST_LOG": str(log), "RUNNER_TEST_CLEANUP": str(marker), "RUNNER_TEST_SLEEP_MS": "50"}
    result = execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-smoke", env=env)
    results = tmp_path / "results"

    assert result.stdout.splitlines() == [
        "Benchmark run set: rs-smoke",
        "Tier: smoke (1 runs per scenario and mode)",
        "Scenarios: 2",
        "Runs: 6 (6 executed, 0 already written, 0 failed)",
        f"Project revision: {target[1]}",
        "Claims allowed: yes (observational only)",
        "Quality finalization: NOT_CONFIGURED",
        f"Results: {results}",
    ]  # the adapter's own prints went to stderr, not here
    assert "adapter chatter for small-bug-fix/direct/1" in result.stderr
    files = run_files(results, "rs-smoke")
    assert sorted(files) == expected_files(SCENARIOS, 1)

    adaptive = load(results / "raw/rs-smoke/static-landing-page/forgeloopAdaptive/run-001.json")
    # ForgeLoop's createBenchmarkRun layout: same keys in the same order as a real run with diagnostics
    real = load(corpus / "results/raw/codex-tail-repeat20-20260831/novatask-saas-landing-page/forgeloopAdaptive/run-001.json")
    assert list(key_paths(adaptive)) == list(key_paths(real))
    for name, text in files.items():
        assert text.decode() == dumps(json.loads(text), 2) + "\n", name  # JSON.stringify(run, null, 2) + "\n"

    assert adaptive["runId"] == "run-static-landing-page-forgeloopAdaptive-001"
    assert adaptive["usage"] == {"inputTokens": 125007, "outputTokens": 1000, "cacheReadTokens": 0, "cacheWriteTokens": 0,
                                 "totalTokens": 126007, "costUsd": None, "model": "test-model", "provider": "test-host",
                                 "source": "HOST_REPORTED"}
    assert adaptive["comparableSteps"] == 4 and isinstance(adaptive["comparableSteps"], int)
    assert adaptive["diagnostics"]["flags"] == ["HOST_RETRY", "MODEL_STALL"]  # ForgeLoop's signal order
    assert adaptive["diagnostics"]["toolCalls"] == 6 and adaptive["diagnostics"]["retries"] is None
    assert adaptive["contextUsage"] == {"source": "HOST_REPORTED", "profile": "light", "items": {
        "taskContext": 100, "guides": 200, "history": None, "protocolInstructions": None, "repositoryContext": None, "other": None}}
    assert adaptive["quality"]["source"] == "UNKNOWN" and set(adaptive["quality"]["scores"].values()) == {None}
    assert adaptive["metadata"] == {
        "scenarioId": "static-landing-page", "mode": "forgeloopAdaptive", "model": "test-model", "provider": "test-host",
        "promptSpecFingerprint": "fp-static-landing-page",
        "projectRevision": target[1],  # git HEAD of --target, not what the adapter claimed
        "benchmarkVersion": "2", "environmentClass": "test-env", "requestedProfile": "auto", "resolvedProfile": "light",
        "verificationCycles": 1, "comparableSteps": 4,
        "nodeVersion": platform.python_version(), "os": sys.platform, "arch": adaptive["metadata"]["arch"],
    }
    assert adaptive["metadata"]["arch"] in ("x64", "arm64", platform.machine().lower())
    profiles = {(s, m): (d["metadata"]["requestedProfile"], d["metadata"]["resolvedProfile"])
                for s in SCENARIOS for m in MODES
                for d in [load(results / f"raw/rs-smoke/{s}/{m}/run-001.json")]}
    assert profiles == {
        ("small-bug-fix", "direct"): (None, None),
        ("small-bug-fix", "forgeloopBalanced"): ("balanced", "balanced"),
        ("small-bug-fix", "forgeloopAdaptive"): ("auto", "balanced"),  # the scenario's expectedProfile
        ("static-landing-page", "direct"): (None, None),
        ("static-landing-page", "forgeloopBalanced"): ("balanced", "balanced"),
        ("static-landing-page", "forgeloopAdaptive"): ("auto", "light"),
    }
    direct = load(results / "raw/rs-smoke/static-landing-page/direct/run-001.json")
    assert "diagnostics" not in direct  # only when the adapter gave one
    # the runner times each call itself: the adaptive calls sleep 50 ms, the direct ones do not
    assert 50 <= adaptive["wallClockMs"] < 5000 and direct["wallClockMs"] < 50
    assert round(adaptive["wallClockMs"], 4) == adaptive["wallClockMs"]
    assert datetime.fromisoformat(direct["recordedAt"].replace("Z", "+00:00")).tzinfo is not None

    inputs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(i["scenario"]["scenarioId"], i["mode"], i["runIndex"]) for i in inputs] == [
        (s, m, 1) for s in SCENARIOS for m in MODES]
    assert {(i["benchmarkVersion"], i["projectRevision"], i["target"], i["runSetId"]) for i in inputs} == {
        ("2", target[1], str(target[0].resolve()), "rs-smoke")}
    assert inputs[0]["runId"] == "run-small-bug-fix-direct-001"
    assert inputs[0]["scenario"] == load(scenarios / "small-bug-fix.json")
    assert marker.read_text() == "cleanup\n"

    summary = load(results / "aggregate/rs-smoke/summary.json")
    assert (summary["tier"], summary["scenarioCount"], summary["runCount"], summary["claimsAllowed"]) == ("smoke", 2, 6, True)
    # what it writes is accepted by `ingest forgeloop`, and its aggregate is what `aggregate` makes of it
    fresh = tmp_path / "fresh-warehouse"
    ingested = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), warehouse=fresh)
    assert "6 run files: 6 accepted, 0 unchanged, 0 rejected; run sets rs-smoke" in ingested.stdout
    run_cli("aggregate", "--out", str(tmp_path / "again"), "--run-set", "rs-smoke", "--tier", "smoke", warehouse=fresh)
    written = sorted(p.name for p in (results / "aggregate/rs-smoke").iterdir())
    assert written == ["small-bug-fix.json", "static-landing-page.json", "summary.json"]
    for name in written:
        assert (results / "aggregate/rs-smoke" / name).read_bytes() == (tmp_path / "again/rs-smoke" / name).read_bytes()


def test_command_adapter_runs_in_a_subprocess_with_finalize_and_cleanup(tmp_path, scenarios, target):
    log, marker = tmp_path / "methods.txt", tmp_path / "cleanup.txt"
    env = {"CMD_TEST_LOG": str(log), "CMD_TEST_CLEANUP": str(marker)}
    result = execute(tmp_path, scenarios, target, "--runs", "2", "--scenario", "small-bug-fix", "--run-set", "rs-cmd",
                     "--json", adapter=f"{sys.executable} {COMMAND_SCRIPT}", env=env, output=False)
    results = scenarios / "results"  # ForgeLoop's default: next to the scenario files
    output = json.loads(result.stdout)
    assert output["status"] == "MEASURED" and output["outputDirectory"] == str(results)
    assert (output["runCount"], output["executed"], output["failed"], output["tier"]) == (6, 6, 0, None)
    assert output["qualityFinalization"] == {"status": "MEASURED"}
    assert sorted(run_files(results, "rs-cmd")) == expected_files(["small-bug-fix"], 2)
    assert log.read_text().splitlines() == ["runBenchmark"] * 6 + ["finalizeBenchmark", "cleanup"]
    assert marker.read_text() == "cleanup\n"

    adaptive = load(results / "raw/rs-cmd/small-bug-fix/forgeloopAdaptive/run-002.json")
    assert adaptive["usage"]["totalTokens"] == 42500 and adaptive["usage"]["inputTokens"] is None
    assert adaptive["metadata"]["resolvedProfile"] == "full"  # the adapter reported it
    assert adaptive["contextUsage"]["profile"] == "full"
    assert (adaptive["metadata"]["nodeVersion"], adaptive["metadata"]["os"], adaptive["metadata"]["arch"]) == ("22.4.0", "linux", "x64")
    assert adaptive["quality"] == {"source": "EXTERNAL_REPORTED", "scores": {
        "visualQuality": None, "responsiveQuality": None, "accessibility": None, "interactionPolish": None,
        "requirementsCompleteness": 4}}
    balanced = load(results / "raw/rs-cmd/small-bug-fix/forgeloopBalanced/run-001.json")
    assert balanced["metadata"]["resolvedProfile"] == "balanced" and balanced["quality"]["source"] == "UNKNOWN"
    aggregate = load(results / "aggregate/rs-cmd/small-bug-fix.json")
    assert aggregate["modeAggregates"]["forgeloopAdaptive"]["quality"]["sources"] == ["EXTERNAL_REPORTED"]
    assert aggregate["modeAggregates"]["direct"]["quality"]["sources"] == ["UNKNOWN"]
    assert aggregate["comparisons"]["forgeloopAdaptive"]["tokenComparablePairs"] == 2
    assert aggregate["comparisons"]["forgeloopAdaptive"]["pairedRuns"][0]["pairedOverheadPercent"] == 1.2195  # 500/41000


def test_tail_tier_runs_twenty_per_mode_through_an_executable(tmp_path, scenarios, target):
    executable = tmp_path / "host-adapter"
    shutil.copy(COMMAND_SCRIPT, executable)
    executable.chmod(0o755)
    result = execute(tmp_path, scenarios, target, "--tier", "tail", "--scenario", "small-bug-fix", "--run-set", "rs-tail",
                     "--json", adapter=executable)
    assert json.loads(result.stdout)["runCount"] == 60
    results = tmp_path / "results"
    assert sorted(run_files(results, "rs-tail")) == expected_files(["small-bug-fix"], 20)
    assert load(results / "aggregate/rs-tail/summary.json")["tier"] == "tail"
    tail = load(results / "aggregate/rs-tail/small-bug-fix.json")["comparisons"]["forgeloopAdaptive"]["tail"]
    # 500 more tokens on 41000..60000: a small, even overhead, enough samples for a tail verdict
    assert (tail["sampleCount"], tail["pairedStatus"], tail["distributionStatus"]) == (20, "TAIL_STABLE", "TAIL_ACCEPTABLE")


# ---- the command line's rules --------------------------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (["--tier", "smoke", "--runs", "4"], "--runs must be between 1 and 3 for the smoke tier (got 4)"),
    (["--tier", "evidence", "--runs", "11"], "--runs must be between 5 and 10 for the evidence tier (got 11)"),
    (["--tier", "tail", "--runs", "19"], "--runs must be between 20 and 30 for the tail tier (got 19)"),
    (["--runs", "0"], "--runs must be an integer from 1 through 100 (got 0)"),
    (["--runs", "101"], "--runs must be an integer from 1 through 100 (got 101)"),
    (["--tier", "huge"], "--tier must be one of smoke, evidence, tail (got 'huge')"),
    (["--run-set", "bad id"], "--run-set 'bad id' must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"),
    (["--run-set", "-leading"], "--run-set '-leading' must match"),
    (["--run-set", "a" * 65], "must match ^[A-Za-z0-9]"),
    (["--resume"], "--resume needs --run-set"),
])
def test_bad_command_lines_exit_2_and_write_nothing(tmp_path, scenarios, target, args, message):
    result = execute(tmp_path, scenarios, target, *args, check=2)
    assert result.stderr.startswith("loopmeter: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_tier_defaults_and_bounds():
    assert [run_set.resolve_runs(tier, None) for tier in (None, "smoke", "evidence", "tail")] == [5, 1, 5, 20]
    assert [run_set.resolve_runs("tail", 30), run_set.resolve_runs(None, 100), run_set.resolve_runs("smoke", 3)] == [30, 100, 3]
    assert run_set.generated_run_set_id(datetime(2026, 8, 31, 7, 36, 38, 108000, tzinfo=timezone.utc)) == "20260831T073638108Z"


def test_execute_help_and_usage_errors_do_not_import_the_heavy_libraries(tmp_path, scenarios):
    for args, code in ((["execute", "--help"], 0), (["execute", "--adapter", "x", "--scenarios", str(scenarios), "--tier", "huge"], 2)):
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopmeter", *args], capture_output=True, text=True, cwd=ROOT)
        assert result.returncode == code
        imported = imported_packages(result.stderr)
        assert imported.isdisjoint({"polars", "duckdb", "pyarrow"})


def test_bad_adapters_and_scenarios_are_one_line_errors(tmp_path, scenarios, target):
    not_executable = tmp_path / "plain.sh"
    not_executable.write_text("echo\n")
    no_function = tmp_path / "empty_adapter.py"
    no_function.write_text("VALUE = 1\n")
    broken = tmp_path / "broken_adapter.py"
    broken.write_text("def run_benchmark(request)\n")
    cases = [
        (tmp_path / "missing.py", "does not exist"),
        (not_executable, "is not executable"),
        ("no_such_adapter_module", "is neither a file, an importable Python module, nor a command on PATH"),
        (no_function, "does not define run_benchmark(input)"),
        (broken, "cannot be loaded: SyntaxError"),
        ("no-such-command --flag", "adapter command 'no-such-command' is not found"),
    ]
    for adapter, message in cases:
        result = execute(tmp_path, scenarios, target, "--run-set", "rs-bad", adapter=adapter, check=1)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "results" / "raw").exists() and not (tmp_path / "results" / "runner" / "rs-bad" / "plan.json").exists()
    (scenarios / "broken.json").write_text('{"schemaVersion": 1, "benchmarkVersion": "2", "scenarioId": "other"}')
    result = execute(tmp_path, scenarios, target, check=1)
    assert result.stderr.strip() == f"loopmeter: error: scenario file {scenarios / 'broken.json'}: scenarioId: must match the file name (broken.json)"


# ---- never overwrite; stop, resume, keep going ----------------------------------------------
def test_an_existing_run_set_is_never_overwritten(tmp_path, scenarios, target):
    execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-once")
    results = tmp_path / "results"
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in results.rglob("*.json")}
    result = execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-once", check=1)
    assert result.stderr.strip() == (
        f"loopmeter: error: run set rs-once already exists ({results / 'raw' / 'rs-once'}) and will not be overwritten; "
        "pass --resume to finish it, or choose another --run-set"
    )
    assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in results.rglob("*.json")} == before
    # an aggregate alone (ForgeLoop's own runner refuses that too) also marks the run set as taken
    (results / "aggregate" / "rs-agg").mkdir(parents=True)
    result = execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-agg", check=1)
    assert "run set rs-agg already exists" in result.stderr and not (results / "raw" / "rs-agg").exists()


def test_a_failing_adapter_stops_cleanly_and_resume_finishes(tmp_path, scenarios, target):
    log, marker = tmp_path / "inputs.jsonl", tmp_path / "cleanup.txt"
    env = {"RUNNER_TEST_LOG": str(log), "RUNNER_TEST_CLEANUP": str(marker),
           "RUNNER_TEST_FAIL": "static-landing-page/forgeloopBalanced/1"}
    result = execute(tmp_path, scenarios, target, "--runs", "2", "--run-set", "rs-stop", env=env, check=1)
    results = tmp_path / "results"
    raw = results / "raw" / "rs-stop"
    assert result.stderr.strip().splitlines()[-1] == (
        "loopmeter: error: static-landing-page/forgeloopBalanced/run 1: RuntimeError: host session crashed on "
        f"static-landing-page/forgeloopBalanced/1 (stopped; 8 runs kept in {raw}; rerun with --resume --run-set "
        "rs-stop to finish, or --keep-going to go past failures)"
    )
    assert result.stdout == ""
    kept = run_files(results, "rs-stop")
    assert sorted(kept) == expected_files(["small-bug-fix"], 2) + [
        "static-landing-page/direct/run-001.json", "static-landing-page/direct/run-002.json"]
    assert not (results / "aggregate" / "rs-stop").exists()
    assert marker.read_text() == "cleanup\n"  # cleanup runs when the run set stops too
    failure = json.loads((results / "runner/rs-stop/failures.jsonl").read_text())
    assert (failure["runId"], failure["error"]) == (
        "run-static-landing-page-forgeloopBalanced-001", "RuntimeError: host session crashed on static-landing-page/forgeloopBalanced/1")

    # a leftover temporary file of an interrupted write is neither a run nor a problem
    (raw / "static-landing-page" / "direct" / ".run-003.json.1a2b3c4d.tmp").write_text("{")
    refused = execute(tmp_path, scenarios, target, "--runs", "2", "--run-set", "rs-stop", check=1)
    assert "already exists" in refused.stderr
    conflict = execute(tmp_path, scenarios, target, "--resume", "--runs", "3", "--run-set", "rs-stop", check=2)
    assert "was started with 2 runs per mode" in conflict.stderr

    log.unlink()
    env.pop("RUNNER_TEST_FAIL")
    resumed = execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-stop", "--json", env=env)
    output = json.loads(resumed.stdout)
    assert (output["executed"], output["resumed"], output["runCount"], output["runsPerMode"]) == (4, 8, 12, 2)
    calls = [(i["scenario"]["scenarioId"], i["mode"], i["runIndex"]) for i in map(json.loads, log.read_text().splitlines())]
    assert calls == [("static-landing-page", m, i) for m in MODES[1:] for i in (1, 2)]  # only what was missing
    after = run_files(results, "rs-stop")
    assert sorted(after) == expected_files(SCENARIOS, 2)
    assert {name: after[name] for name in kept} == kept  # the runs already written are untouched
    assert load(results / "aggregate/rs-stop/summary.json")["runCount"] == 12
    assert marker.read_text() == "cleanup\ncleanup\n"


def test_resume_refuses_a_damaged_run_file(tmp_path, scenarios, target):
    execute(tmp_path, scenarios, target, "--runs", "1", "--run-set", "rs-damaged", env={"RUNNER_TEST_FAIL": "static-landing-page/direct/1"}, check=1)
    damaged = tmp_path / "results/raw/rs-damaged/small-bug-fix/forgeloopBalanced/run-001.json"
    document = load(damaged)
    damaged.write_text(json.dumps({**document, "runIndex": 2}))
    result = execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-damaged", check=1)
    assert result.stderr.strip() == (
        "loopmeter: error: raw/rs-damaged/small-bug-fix/forgeloopBalanced/run-001.json holds run "
        "run-small-bug-fix-forgeloopBalanced-001 of run set rs-damaged, not the run its path names")
    damaged.write_text(json.dumps({**document, "verification": "MAYBE"}))
    result = execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-damaged", check=1)
    assert "is not a valid run: verification: must be one of PASS, FAIL, NOT_AVAILABLE; remove it to run it again" in result.stderr


def test_keep_going_records_failures_outside_raw_and_exits_3(tmp_path, scenarios, target):
    env = {"RUNNER_TEST_FAIL": "small-bug-fix/direct/1,static-landing-page/forgeloopAdaptive/1",
           "RUNNER_TEST_BAD": "small-bug-fix/forgeloopBalanced/1"}
    result = execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-keep", "--keep-going", "--json", env=env, check=3)
    output = json.loads(result.stdout)
    assert (output["status"], output["runCount"], output["executed"], output["failed"]) == ("INCOMPLETE", 3, 3, 3)
    results = tmp_path / "results"
    failures = [json.loads(line) for line in (results / "runner/rs-keep/failures.jsonl").read_text().splitlines()]
    assert [(f["scenarioId"], f["mode"], f["runIndex"], f["error"]) for f in failures] == [
        ("small-bug-fix", "direct", 1, "RuntimeError: host session crashed on small-bug-fix/direct/1"),
        ("small-bug-fix", "forgeloopBalanced", 1, "answer rejected: usage.totalTokens: must be an integer >= 0 or null"),
        ("static-landing-page", "forgeloopAdaptive", 1, "RuntimeError: host session crashed on static-landing-page/forgeloopAdaptive/1"),
    ]
    assert output["failures"] == failures
    assert sorted(run_files(results, "rs-keep")) == [
        "small-bug-fix/forgeloopAdaptive/run-001.json", "static-landing-page/direct/run-001.json",
        "static-landing-page/forgeloopBalanced/run-001.json"]
    assert "failed small-bug-fix/direct/run 1: RuntimeError" in result.stderr
    assert "3 adapter calls failed" in result.stderr.splitlines()[-1]
    summary = load(results / "aggregate/rs-keep/summary.json")
    assert summary["runCount"] == 3
    # small-bug-fix lost its direct run, so nothing pairs; the landing page kept direct and balanced
    assert [(s["scenarioId"], s["claimsAllowed"]) for s in summary["scenarios"]] == [
        ("small-bug-fix", False), ("static-landing-page", True)]
    ingested = run_cli("ingest", "forgeloop", str(results), warehouse=tmp_path / "fresh")
    assert "3 run files: 3 accepted, 0 unchanged, 0 rejected" in ingested.stdout

    resumed = json.loads(execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-keep", "--json").stdout)
    assert (resumed["status"], resumed["executed"], resumed["resumed"], resumed["tier"]) == ("MEASURED", 3, 3, "smoke")
    assert [s["claimsAllowed"] for s in load(results / "aggregate/rs-keep/summary.json")["scenarios"]] == [True, True]


def test_command_adapter_errors_and_crashes_are_failures_and_the_process_restarts(tmp_path, scenarios, target):
    marker = tmp_path / "cleanup.txt"
    env = {"CMD_TEST_FAIL": "small-bug-fix/direct/2", "CMD_TEST_CRASH": "small-bug-fix/forgeloopBalanced/1",
           "CMD_TEST_CLEANUP": str(marker)}
    with resource_warnings() as left_open:
        result = execute(tmp_path, scenarios, target, "--runs", "2", "--scenario", "small-bug-fix", "--run-set", "rs-crash",
                         "--keep-going", "--json", adapter=f"{sys.executable} {COMMAND_SCRIPT}", env=env, check=3)
    assert left_open == []  # the dead process's pipes closed
    output = json.loads(result.stdout)
    assert [(f["mode"], f["runIndex"], f["error"]) for f in output["failures"]] == [
        ("direct", 2, "ValueError: host refused small-bug-fix/direct/2"),
        ("forgeloopBalanced", 1, "the adapter process exited (code 3) without answering; its last stderr line: "
                                 "host process died on small-bug-fix/forgeloopBalanced/1"),
    ]
    assert output["runCount"] == 4  # the runs after the crash ran in a new adapter process
    assert marker.read_text() == "cleanup\n"
    assert "host process died" in (tmp_path / "results/runner/rs-crash/adapter-stderr.log").read_text()


def test_a_stray_stdout_line_fails_one_call_and_the_answers_after_it_are_taken(tmp_path, scenarios, target):
    env = {"CMD_TEST_STRAY": "hello there"}
    result = execute(tmp_path, scenarios, target, "--runs", "2", "--scenario", "small-bug-fix", "--run-set", "rs-stray",
                     "--keep-going", "--json", adapter=f"{sys.executable} {COMMAND_SCRIPT}", env=env, check=3)
    output = json.loads(result.stdout)
    assert [(f["mode"], f["runIndex"], f["error"]) for f in output["failures"]] == [
        ("direct", 1, "the adapter answered with a line that is not JSON: 'hello there'")]
    assert output["runCount"] == 5  # the late answer to the first call is skipped, not taken for the second's


def test_finalize_attaches_quality_by_run_id(tmp_path, scenarios, target):
    result = execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-quality", "--json",
                     env={"RUNNER_TEST_FINALIZE": "quality"})
    assert json.loads(result.stdout)["qualityFinalization"] == {"status": "EVALUATED", "evaluated": 3}
    results = tmp_path / "results"
    for mode in MODES:
        landing = load(results / f"raw/rs-quality/static-landing-page/{mode}/run-001.json")
        assert landing["quality"] == {"source": "EXTERNAL_REPORTED", "scores": {
            "visualQuality": 4.5, "responsiveQuality": None, "accessibility": 1, "interactionPolish": None,
            "requirementsCompleteness": None}}
        assert load(results / f"raw/rs-quality/small-bug-fix/{mode}/run-001.json")["quality"]["source"] == "UNKNOWN"
    aggregate = load(results / "aggregate/rs-quality/static-landing-page.json")
    assert aggregate["modeAggregates"]["direct"]["quality"]["scores"]["visualQuality"]["p50"] == 4.5


@pytest.mark.parametrize(("how", "message"), [
    ("unknown", "finalize_benchmark returned an unknown runId: run-nowhere-direct-001"),
    ("invalid", "finalize_benchmark: quality of run-small-bug-fix-direct-001: quality.scores.visualQuality: "
                "must be a number from 0 to 5 or null"),
])
def test_a_bad_finalize_fails_and_keeps_the_runs_as_written(tmp_path, scenarios, target, how, message):
    marker = tmp_path / "cleanup.txt"
    result = execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-final", check=1,
                     env={"RUNNER_TEST_FINALIZE": how, "RUNNER_TEST_CLEANUP": str(marker)})
    assert result.stderr.strip().splitlines()[-1] == f"loopmeter: error: {message}"
    files = run_files(tmp_path / "results", "rs-final")
    assert len(files) == 6
    assert json.loads(files["small-bug-fix/direct/run-001.json"])["quality"]["source"] == "UNKNOWN"
    assert marker.read_text() == "cleanup\n"


def test_a_locked_warehouse_keeps_the_runs_and_says_how_to_finish(tmp_path, scenarios, target):
    with Warehouse(tmp_path / "warehouse").lock(command="a test"):
        result = execute(tmp_path, scenarios, target, "--tier", "smoke", "--run-set", "rs-locked", check=4)
    assert "is locked by" in result.stderr and "the 6 runs are written in" in result.stderr
    assert "loopmeter execute --resume --run-set rs-locked" in result.stderr
    finished = json.loads(execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-locked", "--json").stdout)
    assert (finished["executed"], finished["resumed"], finished["claimsAllowed"]) == (0, 6, True)


# ---- the run document, in process ----------------------------------------------------------
SCENARIO = {"scenarioId": "small-bug-fix", "expectedProfile": "light"}
ENVIRONMENT = {"environmentClass": "py-env", "nodeVersion": "3.11.7", "os": "linux", "arch": "x64"}


def build(answer, mode="forgeloopAdaptive", revision="abc123"):
    return run_document.build_run(answer=answer, run_set_id="rs", scenario=SCENARIO, mode=mode, run_index=3,
                            wall_clock_ms=12.5, recorded_at="2026-09-01T00:00:00.000Z", revision=revision,
                            environment=ENVIRONMENT)


GOOD = {"usage": {"totalTokens": 10, "model": "m", "provider": "p", "source": "PROVIDER_REPORTED"},
        "verification": "PASS", "comparableSteps": 2, "promptSpecFingerprint": "fp"}


def test_the_runner_fills_what_it_owns():
    document = build(GOOD)
    assert document["runId"] == "run-small-bug-fix-forgeloopAdaptive-003"
    assert document["metadata"]["resolvedProfile"] == "light" and document["contextUsage"]["profile"] == "light"
    assert {k: document["metadata"][k] for k in ENVIRONMENT} == ENVIRONMENT
    assert document["verificationCycles"] is None and document["metadata"]["verificationCycles"] is None
    answer = {**GOOD, "verification": None, "metadata": {"projectRevision": "adapter-rev", "os": "", "model": "other"}}
    without_git = build(answer, revision=None)
    assert without_git["metadata"]["projectRevision"] == "adapter-rev"  # only where there is no repository
    assert without_git["metadata"]["model"] == "m"  # usage's model wins
    assert without_git["verification"] == "NOT_AVAILABLE"
    assert "os" not in without_git["metadata"]  # an empty value is dropped, as ForgeLoop does
    assert build(answer)["metadata"]["projectRevision"] == "abc123"
    # normalizeUsage's nine keys only; "" is null; a numeric cost string is its number
    shaped = build({**GOOD, "usage": {**GOOD["usage"], "reasoningTokens": 3, "inputTokens": "", "costUsd": "0.25"},
                    "contextUsage": {"source": "HOST_REPORTED", "note": "x", "items": {"guides": 5}}})
    assert list(shaped["usage"]) == ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "totalTokens",
                                     "costUsd", "model", "provider", "source"]
    assert (shaped["usage"]["inputTokens"], shaped["usage"]["costUsd"]) == (None, 0.25)
    assert shaped["contextUsage"] == {"source": "HOST_REPORTED", "profile": "light", "items": {
        "taskContext": None, "guides": 5, "history": None, "protocolInstructions": None, "repositoryContext": None, "other": None}}


@pytest.mark.parametrize(("answer", "mode", "field", "rule"), [
    ([], "direct", "answer", "must be an object"),
    ({**GOOD, "metadata": {"resolvedProfile": "light"}}, "direct", "metadata.resolvedProfile", "must be null for direct runs"),
    ({**GOOD, "metadata": {"resolvedProfile": "huge"}}, "forgeloopBalanced", "metadata.resolvedProfile", "must be one of light, balanced, full"),
    ({**GOOD, "promptSpecFingerprint": None}, "direct", "metadata.promptSpecFingerprint", "must be a non-empty string"),
    ({**GOOD, "usage": {"totalTokens": 5}}, "direct", "usage", "UNKNOWN usage must keep every measured value and identity field null"),
    ({**GOOD, "usage": {"totalTokens": 2.5, "source": "HOST_REPORTED"}}, "direct", "usage.totalTokens", "must be an integer >= 0 or null"),
    ({**GOOD, "usage": {"source": "GUESSED"}}, "direct", "usage.source", "must be one of PROVIDER_REPORTED, HOST_REPORTED, UNKNOWN"),
    ({**GOOD, "contextUsage": {"profile": "full"}}, "forgeloopAdaptive", "contextUsage.profile", "must equal metadata.resolvedProfile (light)"),
    ({**GOOD, "diagnostics": {"mood": 1}}, "direct", "diagnostics.mood", "is not a diagnostics field"),
    ({**GOOD, "diagnostics": {"flags": ["PANIC"]}}, "direct", "diagnostics.flags", "'PANIC' is not a runaway signal"),
    ({**GOOD, "quality": {"scores": {"visualQuality": 6}}}, "direct", "quality.scores.visualQuality", "must be a number from 0 to 5 or null"),
    ({**GOOD, "verification": "OK"}, "direct", "verification", "must be one of PASS, FAIL, NOT_AVAILABLE"),
    ({**GOOD, "metadata": {"environmentClass": 7}}, "direct", "metadata.environmentClass", "must be a non-empty string"),
])
def test_answers_that_break_the_contract_are_rejected_with_field_and_rule(answer, mode, field, rule):
    with pytest.raises(RunRejected) as caught:
        build(answer, mode)
    assert (caught.value.field, caught.value.rule) == (field, rule)


def test_project_revision_is_git_head_or_none(tmp_path, target):
    assert run_set.project_revision(target[0]) == target[1]
    assert run_set.project_revision(tmp_path / "scenarios-none") is None
    plain = tmp_path / "plain"
    plain.mkdir()
    assert run_set.project_revision(plain) is None
