"""`loopmeter compare BASELINE CANDIDATE`: medians as ForgeLoop's aggregate has them, the ratio's
interval against scipy's bootstrap, the verdicts, the Markdown, and --fail-on's exit code."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from conftest import run_cli
from loopmeter import intervals
from loopmeter.forgeloop.compare import _ratio_interval, verdict
from loopmeter.forgeloop.confidence import Settings
from runs import run, write_tree

FACTORS = {"direct": 1.0, "forgeloopBalanced": 0.7, "forgeloopAdaptive": 1.3}  # candidate tokens / baseline tokens


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> Path:
    """Run sets `before` and `after` of one scenario, 20 runs per mode: after a release, balanced
    spends 30 % fewer tokens, adaptive 30 % more, direct and every wall time as before."""
    rng = np.random.default_rng(42)
    root = tmp_path_factory.mktemp("releases")
    documents = []
    for run_set, after in (("before", False), ("after", True)):
        for mode, factor in FACTORS.items():
            tokens = np.exp(rng.normal(np.log(50_000), 0.05, 20)) * (factor if after else 1.0)
            wall = np.exp(rng.normal(np.log(20_000), 0.03, 20))
            documents += [run("s1", mode, index + 1, int(tokens[index]), run_set=run_set, wall=float(wall[index]))
                          for index in range(20)]
    # a second scenario with four runs a side: too few to bound a median
    for run_set in ("before", "after"):
        documents += [run("s2", "direct", index + 1, 1000 + 10 * index, run_set=run_set) for index in range(4)]
    write_tree(root / "results", documents, {"s1": "light", "s2": "light"})
    warehouse = root / "w"
    run_cli("ingest", "forgeloop", str(root / "results"), "--scenarios", str(root / "results" / "scenarios"), "--quiet",
            warehouse=warehouse)
    return warehouse


def test_medians_ratios_and_verdicts(releases):
    report = json.loads(run_cli("compare", "before", "after", "--json", warehouse=releases).stdout)
    assert (report["baseline"], report["candidate"], report["margin"]) == ("before", "after", 0.1)
    rows = {(r["scenarioId"], r["mode"], r["metric"]): r for r in report["rows"]}
    assert set(rows) == {("s1", m, k) for m in FACTORS for k in ("tokens", "time")} | {("s2", "direct", "tokens"), ("s2", "direct", "time")}
    assert rows[("s1", "forgeloopAdaptive", "tokens")]["verdict"] == "REGRESSED"
    assert rows[("s1", "forgeloopBalanced", "tokens")]["verdict"] == "IMPROVED"
    for mode in FACTORS:
        assert rows[("s1", mode, "time")]["verdict"] == "NO_CHANGE"
    assert rows[("s1", "direct", "tokens")]["verdict"] == "NO_CHANGE"
    four = rows[("s2", "direct", "tokens")]
    assert four["ratio"] is not None and four["low"] is None and four["high"] is None and four["verdict"] == "INCONCLUSIVE"
    for row in report["rows"]:
        if row["low"] is not None:
            assert row["low"] <= row["high"]
            assert row["ratio"] == round(row["candidateMedian"] / row["baselineMedian"], 4)


def test_each_median_is_forgeloops_mode_aggregate_p50(releases, tmp_path):
    out = tmp_path / "aggregate"
    run_cli("aggregate", "--out", str(out), "--quiet", warehouse=releases)
    report = json.loads(run_cli("compare", "before", "after", "--json", warehouse=releases).stdout)
    for row in report["rows"]:
        field = "totalTokens" if row["metric"] == "tokens" else "wallClockMs"
        for side in ("baseline", "candidate"):
            document = json.loads((out / report[side] / f"{row['scenarioId']}.json").read_text())
            assert row[f"{side}Median"] == document["modeAggregates"][row["mode"]][field]["p50"]


def test_the_ratio_interval_is_scipys_two_sample_percentile_bootstrap():
    rng = np.random.default_rng(8)
    base, cand = np.sort(rng.lognormal(10, 0.3, 15)), np.sort(rng.lognormal(10.2, 0.4, 25))
    ours = _ratio_interval(base, cand, ("k",), Settings(resamples=100_000))
    theirs = stats.bootstrap((base, cand), lambda b, c, axis: np.median(c, axis=axis) / np.median(b, axis=axis),
                             n_resamples=100_000, method="percentile", rng=np.random.default_rng(1)).confidence_interval
    assert abs(ours.low - theirs.low) < 0.01 and abs(ours.high - theirs.high) < 0.01, (ours, theirs)


def test_verdicts_by_hand():
    assert verdict(1.11, 1.3, 0.10) == "REGRESSED"
    assert verdict(1.10, 1.3, 0.10) == "INCONCLUSIVE"  # touches 1 + margin: not above it
    assert verdict(0.5, 0.89, 0.10) == "IMPROVED"
    assert verdict(0.9, 1.1, 0.10) == "NO_CHANGE"
    assert verdict(0.85, 1.05, 0.10) == "INCONCLUSIVE"
    assert verdict(None, 1.05, 0.10) == "INCONCLUSIVE" and verdict(1.2, None, 0.10) == "REGRESSED"
    assert verdict(None, None, 0.10) == "INCONCLUSIVE"


def test_fail_on_regression_exits_5_and_markdown_is_a_table(releases):
    run_cli("compare", "before", "after", warehouse=releases)  # a regression alone is no failure
    failed = run_cli("compare", "before", "after", "--format", "markdown", "--fail-on", "regression",
                     warehouse=releases, check=5)
    lines = failed.stdout.splitlines()
    assert lines[0] == "### `after` against `before`"
    header = next(i for i, line in enumerate(lines) if line.startswith("| Scenario |"))
    assert lines[header + 1].startswith("| --- | --- | --- | ---: |")
    body = [line for line in lines[header + 2:] if line.startswith("| ")]
    assert len(body) == 8 and all(line.count(" | ") == 8 for line in body)
    assert any("**REGRESSED**" in line and "forgeloopAdaptive" in line for line in body)
    assert "1 regressed, 1 improved, 4 unchanged, 2 inconclusive" in failed.stdout
    run_cli("compare", "after", "after", "--fail-on", "regression", warehouse=releases, check=0)


def test_text_fits_and_wrong_calls_are_one_line(releases):
    text = run_cli("compare", "before", "after", warehouse=releases, env={"COLUMNS": "80"}).stdout
    assert all(len(line) <= 80 for line in text.splitlines()) and "REGRESSED" in text
    missing = run_cli("compare", "before", "nosuch", warehouse=releases, check=1)
    assert "no run set 'nosuch'" in missing.stderr and missing.stderr.count("\n") == 1
    for args in (["--json", "--format", "markdown"], ["--margin", "1.5"], ["--format", "html"], ["--fail-on", "x"]):
        wrong = run_cli("compare", "before", "after", *args, warehouse=releases, check=2)
        assert wrong.stderr.count("\n") == 1 and wrong.stdout == ""


def test_open_ends_follow_the_two_sample_rule():
    for n in (4, 5):
        values = np.arange(1.0, n + 1)
        found = _ratio_interval(values, values, ("n", str(n)), Settings(resamples=500))
        assert (found.low is None) == (n <= 4) and (found.high is None) == (n <= 4)
        assert intervals.open_ends(n, 0.5, 0.95, two_sample=True) == ((n <= 4), (n <= 4))
