"""`loopmeter execute --until-resolved`: rounds through a real adapter whose token overheads come from a
known law (tests/runner_adapters/known_law.py), the stopping record, resume, and the run set read
back by ingest, aggregate and `report confidence` as any run set."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import ROOT, run_cli
from loopmeter.forgeloop import sequential
from loopmeter.numbers import js_round4
from test_runner import MODES, SCENARIOS, expected_files, load, run_files, scenarios, target  # noqa: F401 (fixtures)

sys.path.insert(0, str(ROOT / "tests" / "runner_adapters"))
import known_law  # noqa: E402

ADAPTER = ROOT / "tests" / "runner_adapters" / "known_law.py"


def execute(tmp_path, scenarios, target, *args, env=None, check=0):
    return run_cli("execute", "--adapter", str(ADAPTER), "--scenarios", str(scenarios), "--target", str(target[0]),
                   "--output", str(tmp_path / "results"), *args, warehouse=tmp_path / "warehouse", env=env, check=check)


def overheads(scenario: str, mode: str, n: int) -> np.ndarray:
    """The first n paired token overheads the adapter's law gives, sorted (from its own function)."""
    direct = np.array([known_law.tokens(scenario, "direct", i) for i in range(1, n + 1)], dtype=np.float64)
    other = np.array([known_law.tokens(scenario, mode, i) for i in range(1, n + 1)], dtype=np.float64)
    return np.sort((other - direct) / direct * 100)


def expected_stop(scenario: str, profile: str, max_runs: int = 30) -> tuple[int, dict]:
    """The round the clear law settles a scenario, from the sequence's ranks alone: both modes' median
    low end above the 10-point margin (MORE) and, light, the adaptive median's high end at most 35
    (MET; the p95's MET is out of reach of 30 pairs from the first round). Also each question's ends."""
    low, high = sequential.sequence_ranks(max_runs, 0.5)
    for n in range(1, max_runs + 1):
        values = {mode: overheads(scenario, mode, n) for mode in MODES[1:]}
        more = all(low[n] >= 1 and values[mode][low[n] - 1] > 10 for mode in MODES[1:])
        met = profile != "light" or (high[n] >= 1 and values["forgeloopAdaptive"][high[n] - 1] <= 35)
        if more and met:
            return n, {mode: (js_round4(values[mode][low[n] - 1]), js_round4(values[mode][high[n] - 1])) for mode in values}
    raise AssertionError("the clear law settles within 30 rounds")


@pytest.mark.slow
def test_until_resolved_stops_each_scenario_when_settled_and_records_why(tmp_path, scenarios, target):
    log = tmp_path / "calls.txt"
    result = execute(tmp_path, scenarios, target, "--until-resolved", "--max-runs", "30", "--run-set", "rs-until",
                     "--json", env={"LAW_TEST_LOG": str(log)})
    results = tmp_path / "results"
    stops = {scenario: expected_stop(scenario, profile) for scenario, profile in SCENARIOS.items()}
    assert {scenario: stop[0] for scenario, stop in stops.items()} == {"small-bug-fix": 7, "static-landing-page": 7}

    # the runs: rounds of one run index per mode of every scenario still running, direct first
    calls = log.read_text().splitlines()
    assert calls[:6] == [f"{s}/{m}/1" for s in SCENARIOS for m in MODES]
    assert calls == [f"{s}/{m}/{i}" for i in range(1, 8) for s in SCENARIOS for m in MODES]
    files = run_files(results, "rs-until")
    assert sorted(files) == expected_files(SCENARIOS, 7)

    # the stopping record, beside raw/ (ingest reads every *.json below raw/<runSetId>/)
    record = load(results / "runner/rs-until/stopping.json")
    assert (record["schemaVersion"], record["runSetId"], record["maxRuns"], record["level"], record["margin"]) == (
        1, "rs-until", 30, 0.95, 10)
    by_scenario = {entry["scenarioId"]: entry for entry in record["scenarios"]}
    assert [(s, by_scenario[s]["runs"], by_scenario[s]["stopped"]) for s in SCENARIOS] == [
        ("small-bug-fix", 7, "RESOLVED"), ("static-landing-page", 7, "OUT_OF_REACH")]
    light = by_scenario["static-landing-page"]["questions"]
    assert [(q["mode"], q["statistic"], q["objective"], q["status"], q["verdict"]) for q in light] == [
        ("forgeloopBalanced", "pairedOverheadP50", None, "RESOLVED", "MORE"),
        ("forgeloopAdaptive", "pairedOverheadP50", None, "RESOLVED", "MORE"),
        ("forgeloopAdaptive", "pairedOverheadP50", "p50TokenOverheadPercent", "RESOLVED", "MET"),
        ("forgeloopAdaptive", "pairedOverheadP95", "p95TokenOverheadPercent", "OUT_OF_REACH", None),
    ]
    assert light[3]["note"] == "MET needs the high end of the p95, which 30 pairs cannot bound (a fixed-size bound needs 72)"
    for scenario, (_, ends) in stops.items():
        for question in by_scenario[scenario]["questions"][:2]:  # the medians' ends, as the ranks give them
            assert (question["pairs"], question["low"], question["high"]) == (7, *ends[question["mode"]])

    # what the command prints: ForgeLoop's runner keys, the record's place and figures as a new key
    output = json.loads(result.stdout)
    assert (output["status"], output["tier"], output["runCount"], output["runsPerMode"], output["executed"]) == (
        "MEASURED", None, 42, None, 42)
    assert output["untilResolved"] == {**{key: record[key] for key in ("maxRuns", "level", "margin", "method", "scenarios")},
                                       "record": str(results / "runner/rs-until/stopping.json")}
    plan = load(results / "runner/rs-until/plan.json")
    assert (plan["tier"], plan["runsPerMode"], plan["untilResolved"]["maxRuns"]) == (None, None, 30)

    # the run set is a run set like any: ingested again, aggregated again to the same bytes
    fresh = tmp_path / "fresh-warehouse"
    ingested = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(scenarios), warehouse=fresh)
    assert "42 run files: 42 accepted, 0 unchanged, 0 rejected; run sets rs-until" in ingested.stdout
    run_cli("aggregate", "--out", str(tmp_path / "again"), "--run-set", "rs-until", warehouse=fresh)
    written = sorted(path.name for path in (results / "aggregate/rs-until").iterdir())
    assert written == ["small-bug-fix.json", "static-landing-page.json", "summary.json"]
    for name in written:
        assert (results / "aggregate/rs-until" / name).read_bytes() == (tmp_path / "again/rs-until" / name).read_bytes()
    assert load(results / "aggregate/rs-until/summary.json")["runCount"] == 42

    # report confidence pairs the runs as the record does, and its fixed-size intervals (within the
    # sequence's) give the verdicts the record gives
    confidence = json.loads(run_cli("report", "confidence", "--run-set", "rs-until", "--json", warehouse=fresh).stdout)
    rows = {(row["scenarioId"], row["mode"]): row for row in confidence["rows"]
            if row["metric"] == "tokens" and row["statistic"] == "pairedOverheadP50"}
    for scenario, entry in by_scenario.items():
        for question in entry["questions"][:2]:
            row = rows[(scenario, question["mode"])]
            assert (row["pairs"], row["estimate"]) == (question["pairs"], question["estimate"])
            assert question["low"] <= row["low"] <= row["high"] <= question["high"]
    objectives = {row["objective"]: row["verdict"] for row in confidence["objectives"]}
    assert objectives["p50TokenOverheadPercent"] == "MET"


def test_the_lines_printed_say_each_scenarios_runs_and_answers(tmp_path, scenarios, target):
    result = execute(tmp_path, scenarios, target, "--until-resolved", "--run-set", "rs-lines",
                     env={"LAW_TEST_LAW": "violated"})
    lines = result.stdout.splitlines()
    assert lines[:2] == ["Benchmark run set: rs-lines",
                         "Until resolved: at most 30 runs per scenario and mode (95% confidence sequences, margin 10 points)"]
    record = {entry["scenarioId"]: entry for entry in load(tmp_path / "results/runner/rs-lines/stopping.json")["scenarios"]}
    light = record["static-landing-page"]
    assert [q["verdict"] for q in light["questions"][:3]] == ["MORE", "MORE", "VIOLATED"]  # adaptive N(55, 10)
    assert lines[2:5] == [
        "Scenarios: 2",
        f"  small-bug-fix: {record['small-bug-fix']['runs']} runs per mode, resolved: balanced p50 vs direct MORE, "
        "adaptive p50 vs direct MORE",
        f"  static-landing-page: {light['runs']} runs per mode, "
        + ("resolved" if light["stopped"] == "RESOLVED" else "settled, the rest out of reach of the budget")
        + ": balanced p50 vs direct MORE, adaptive p50 vs direct MORE, adaptive p50 <= 35% VIOLATED, adaptive p95 <= 60% "
        + (light["questions"][3]["verdict"] or "out of reach"),
    ]
    total = 3 * sum(entry["runs"] for entry in record.values())
    assert lines[5] == f"Runs: {total} ({total} executed, 0 already written, 0 failed)"


def test_a_budget_too_small_to_bound_a_median_stops_after_one_round(tmp_path, scenarios, target):
    execute(tmp_path, scenarios, target, "--until-resolved", "--max-runs", "3", "--run-set", "rs-three")
    assert sorted(run_files(tmp_path / "results", "rs-three")) == expected_files(SCENARIOS, 1)
    record = load(tmp_path / "results/runner/rs-three/stopping.json")
    assert [(entry["runs"], entry["stopped"]) for entry in record["scenarios"]] == [(1, "OUT_OF_REACH")] * 2
    notes = {question["note"] for entry in record["scenarios"] for question in entry["questions"]}
    assert "MORE needs the low end of the p50, which 3 pairs cannot bound (a fixed-size bound needs 6)" in notes


def test_an_interrupted_run_set_resumes_its_rounds_to_the_same_record(tmp_path, scenarios, target):
    log = tmp_path / "calls.txt"
    stopped = execute(tmp_path, scenarios, target, "--until-resolved", "--run-set", "rs-resume", check=1,
                      env={"LAW_TEST_LOG": str(log), "LAW_TEST_FAIL": "small-bug-fix/forgeloopAdaptive/4"})
    assert "small-bug-fix/forgeloopAdaptive/run 4: RuntimeError: host session crashed" in stopped.stderr
    results = tmp_path / "results"
    halfway = load(results / "runner/rs-resume/stopping.json")  # as the third round left it
    assert [(entry["runs"], entry["stopped"]) for entry in halfway["scenarios"]] == [(3, None), (3, None)]

    for args, message in ((["--tier", "smoke"], "was started with --until-resolved; resume it without --tier and --runs"),
                          (["--until-resolved", "--max-runs", "20"], "was started with --max-runs 30")):
        refused = execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-resume", *args, check=2)
        assert message in refused.stderr

    log.unlink()
    resumed = execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-resume", "--json",
                      env={"LAW_TEST_LOG": str(log)})
    calls = log.read_text().splitlines()
    # the run missing in the round it stopped in first, then each scenario's next round
    assert calls[0] == "small-bug-fix/forgeloopAdaptive/4"
    assert calls[1:7] == [f"small-bug-fix/{mode}/5" for mode in MODES] + [f"static-landing-page/{mode}/4" for mode in MODES]
    output = json.loads(resumed.stdout)
    assert (output["runCount"], output["resumed"], output["executed"]) == (42, 20, 22)
    fresh = tmp_path / "fresh"
    execute(fresh, scenarios, target, "--until-resolved", "--run-set", "rs-resume")
    again = load(fresh / "results/runner/rs-resume/stopping.json")
    assert load(results / "runner/rs-resume/stopping.json") == again  # what decides is in the run files alone


def test_a_fixed_size_run_set_writes_what_it_wrote_and_refuses_to_resume_until_resolved(tmp_path, scenarios, target):
    result = execute(tmp_path, scenarios, target, "--runs", "2", "--run-set", "rs-fixed", "--json")
    assert list(json.loads(result.stdout)) == [
        "status", "runSetId", "tier", "scenarioCount", "runCount", "outputDirectory", "claimsAllowed",
        "qualityFinalization", "runsPerMode", "executed", "resumed", "failed", "failures", "projectRevision",
        "rawDirectory", "aggregateDirectory", "cleanupError"]
    runner = tmp_path / "results/runner/rs-fixed"
    assert sorted(path.name for path in runner.iterdir()) == ["plan.json"]
    assert list(load(runner / "plan.json")) == ["schemaVersion", "benchmarkVersion", "runSetId", "tier", "runsPerMode",
                                                "scenarios", "modes", "adapter", "target", "startedAt"]
    refused = execute(tmp_path, scenarios, target, "--resume", "--run-set", "rs-fixed", "--until-resolved", check=2)
    assert "was started with a fixed size; resume it without --until-resolved" in refused.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--max-runs", "30"], "--max-runs needs --until-resolved (a fixed size is --runs)"),
    (["--until-resolved", "--tier", "tail"], "--until-resolved decides the runs itself: give --max-runs, not --tier or --runs"),
    (["--until-resolved", "--runs", "5"], "--until-resolved decides the runs itself"),
    (["--until-resolved", "--max-runs", "0"], "--max-runs must be an integer from 1 through 100 (got 0)"),
    (["--until-resolved", "--max-runs", "101"], "--max-runs must be an integer from 1 through 100 (got 101)"),
])
def test_bad_until_resolved_command_lines_exit_2_and_write_nothing(tmp_path, scenarios, target, args, message):
    result = execute(tmp_path, scenarios, target, *args, check=2)
    assert result.stderr.startswith("loopmeter: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()
