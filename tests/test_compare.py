"""`loopmeter compare BASELINE CANDIDATE` through the real command on a real warehouse built from
run files: the medians as ForgeLoop's aggregate has them, each row's interval and MDE against
scipy's Welch t test on the runs' logarithms, the pooled rows, `--adjust direct` as a difference
in differences, each `--fail-on`, the Markdown and the text, wrong calls, and the gate's rate when
nothing changed."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from conftest import run_cli
from loopmeter.forgeloop import power
from loopmeter.forgeloop.compare import underpowered
from runs import run, write_tree

FACTORS = {"direct": 1.0, "forgeloopBalanced": 0.7, "forgeloopAdaptive": 1.3}  # candidate tokens / baseline tokens
MACHINE = 1.25  # every wall time of `after`: a slower machine
MODES = tuple(FACTORS)


def _documents(run_set: str, scenario: str, mode: str, tokens, walls) -> list[dict]:
    return [run(scenario, mode, index + 1, int(tokens[index]), run_set=run_set, wall=float(walls[index]))
            for index in range(len(tokens))]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, dict]:
    """One warehouse, and the values each run set's runs were given, by (run set, scenario, mode).

    - `before`, `after`: scenarios s1 (20 runs per mode) and s3 (12 runs per mode, twice the
      tokens); after a release balanced spends 30 % fewer tokens, adaptive 30 % more, direct as
      before, and every wall time is 25 % longer (the machine). s2: direct only, 4 identical runs
      a side with one wall time. s4: direct only, a single run in `before` (nothing to measure).
    - `steady1`, `steady2`: scenario s9, 20 runs per mode, one law (log-sd 0.02).
    - `few1`, `few2`: scenario s9, 3 runs per mode, one law (log-sd 0.3).
    """
    rng = np.random.default_rng(42)
    root = tmp_path_factory.mktemp("compare")
    documents, values = [], {}

    def add(run_set, scenario, mode, tokens, walls):
        tokens, walls = np.rint(tokens).astype(int), np.round(walls, 4)
        values[(run_set, scenario, mode)] = (tokens, walls)
        documents.extend(_documents(run_set, scenario, mode, tokens, walls))

    for run_set, after in (("before", False), ("after", True)):
        for scenario, runs, scale in (("s1", 20, 1.0), ("s3", 12, 2.0)):
            for mode, factor in FACTORS.items():
                tokens = np.exp(rng.normal(np.log(50_000 * scale), 0.05, runs)) * (factor if after else 1.0)
                walls = np.exp(rng.normal(np.log(20_000), 0.03, runs)) * (MACHINE if after else 1.0)
                add(run_set, scenario, mode, tokens, walls)
        add(run_set, "s2", "direct", 1000 + 10 * np.arange(4), np.full(4, 1000.0))
    add("before", "s4", "direct", np.array([500]), np.array([800.0]))
    for names, runs, sd in ((("steady1", "steady2"), 20, 0.02), (("few1", "few2"), 3, 0.3)):
        for run_set in names:
            for mode in MODES:
                add(run_set, "s9", mode, np.exp(rng.normal(np.log(30_000), sd, runs)),
                    np.exp(rng.normal(np.log(10_000), sd, runs)))
    write_tree(root / "results", documents, {scenario: "light" for scenario in ("s1", "s2", "s3", "s4", "s9")})
    warehouse = root / "w"
    run_cli("ingest", "forgeloop", str(root / "results"), "--scenarios", str(root / "results" / "scenarios"), "--quiet",
            warehouse=warehouse)
    return warehouse, values


def compared(warehouse: Path, *args: str, check: int = 0) -> dict:
    return json.loads(run_cli("compare", *args, "--json", warehouse=warehouse, check=check).stdout)


def by_key(report: dict) -> dict:
    return {(row["scenarioId"], row["mode"], row["metric"]): row for row in report["rows"]}


def welch_logs(values: dict, baseline: str, candidate: str, scenario: str, mode: str, metric: str):
    """scipy's Welch t test of the candidate's log values against the baseline's, the difference of
    their means and its variance."""
    column = 0 if metric == "tokens" else 1
    b, c = (np.log(values[(run_set, scenario, mode)][column].astype(float)) for run_set in (baseline, candidate))
    variance = b.var(ddof=1) / len(b) + c.var(ddof=1) / len(c)
    return stats.ttest_ind(c, b, equal_var=False), c.mean() - b.mean(), variance


def test_rows_verdicts_and_the_medians_kept(store):
    warehouse, _ = store
    report = compared(warehouse, "before", "after")
    assert (report["baseline"], report["candidate"], report["margin"], report["level"]) == ("before", "after", 0.1, 0.95)
    assert report["adjust"] is None and report["adjustedMetrics"] == []
    rows = by_key(report)
    assert set(rows) == ({(s, m, k) for s in ("s1", "s3") for m in MODES for k in ("tokens", "time")}
                         | {(s, "direct", k) for s in ("s2", "s4") for k in ("tokens", "time")})
    for scenario in ("s1", "s3"):
        assert rows[(scenario, "forgeloopAdaptive", "tokens")]["verdict"] == "REGRESSED"
        assert rows[(scenario, "forgeloopBalanced", "tokens")]["verdict"] == "IMPROVED"
        assert rows[(scenario, "direct", "tokens")]["verdict"] == "NO_CHANGE"
        for mode in MODES:  # the machine: every wall time 25 % longer
            assert rows[(scenario, mode, "time")]["verdict"] == "REGRESSED"
    # s2: both sides the same four values; its wall times do not vary at all: an exact interval, and no
    # MDE (a spread of 0 says nothing of how far repeated runs fall apart): underpowered
    assert [rows[("s2", "direct", "tokens")][k] for k in ("estimate", "verdict")] == [1, "NO_CHANGE"]
    still = rows[("s2", "direct", "time")]
    assert [still[k] for k in ("estimate", "low", "high", "mde", "regressedAt")] == [1, 1, 1, None, None]
    assert underpowered(still, 0.1)
    single = rows[("s4", "direct", "tokens")]
    assert (single["baselineRuns"], single["candidateRuns"], single["candidateMedian"]) == (1, 0, None)
    assert [single[k] for k in ("ratio", "estimate", "low", "high", "mde", "verdict")] == [None] * 5 + ["INCONCLUSIVE"]
    for row in report["rows"]:
        if row["ratio"] is not None:
            assert row["ratio"] == round(row["candidateMedian"] / row["baselineMedian"], 4)
        assert row["gated"] and not row["adjusted"] and row["unadjustedEstimate"] is None


def test_each_median_is_forgeloops_mode_aggregate_p50(store, tmp_path):
    warehouse, _ = store
    out = tmp_path / "aggregate"
    run_cli("aggregate", "--out", str(out), "--quiet", warehouse=warehouse)
    report = compared(warehouse, "before", "after")
    for row in report["rows"]:
        field = "totalTokens" if row["metric"] == "tokens" else "wallClockMs"
        for side in ("baseline", "candidate"):
            path = out / report[side] / f"{row['scenarioId']}.json"
            if row[f"{side}Runs"]:
                document = json.loads(path.read_text())
                assert row[f"{side}Median"] == document["modeAggregates"][row["mode"]][field]["p50"]


def test_each_row_is_scipys_welch_t_on_log_values_at_the_family_level(store):
    warehouse, values = store
    report = compared(warehouse, "before", "after")
    family = report["family"]
    # 2 scenarios x 3 modes x 2 metrics + s2's two rows measured (s4's are not); 6 pooled rows
    assert (family["scenarioRows"], family["pooledRows"]) == (14, 6)
    assert family["scenarioLevel"] == pytest.approx(1 - 0.025 / 14)
    assert family["pooledLevel"] == pytest.approx(1 - 0.025 / 6)
    for (scenario, mode, metric), row in by_key(report).items():
        if scenario not in ("s1", "s3"):
            continue
        test, difference, variance = welch_logs(values, "before", "after", scenario, mode, metric)
        interval = test.confidence_interval(family["scenarioLevel"])
        assert row["level"] == family["scenarioLevel"]
        assert row["estimate"] == round(math.exp(difference), 4)
        assert (row["low"], row["high"]) == (round(math.exp(interval.low), 4), round(math.exp(interval.high), 4))
        standard_error = math.sqrt(variance)
        assert difference / standard_error == pytest.approx(test.statistic, rel=1e-12)
        critical = stats.t.ppf(1 - (1 - family["scenarioLevel"]) / 2, test.df)
        # the MDE: scipy's noncentral t passes the interval's quantile 80 % of the time there
        shift = math.log(row["mde"]) / standard_error
        assert stats.nct.sf(critical, test.df, shift) == pytest.approx(0.8, abs=0.002)
        assert row["regressedAt"] == pytest.approx(1.1 * row["mde"], abs=2e-4)


@pytest.mark.filterwarnings("ignore:Precision loss")  # s2: both sides the same four values
def test_pooled_rows_weigh_the_scenarios_by_inverse_variance(store):
    warehouse, values = store
    report = compared(warehouse, "before", "after")
    pooled = {(row["mode"], row["metric"]): row for row in report["pooled"]}
    assert set(pooled) == {(m, k) for m in MODES for k in ("tokens", "time")}
    assert pooled[("forgeloopAdaptive", "tokens")]["verdict"] == "REGRESSED"
    assert pooled[("forgeloopBalanced", "tokens")]["verdict"] == "IMPROVED"
    assert pooled[("direct", "tokens")]["verdict"] == "NO_CHANGE"
    for (mode, metric), row in pooled.items():
        scenarios = ["s1", "s3"] + (["s2"] if mode == "direct" else [])
        parts = [welch_logs(values, "before", "after", s, mode, metric) for s in scenarios]
        d = np.array([difference for _, difference, _ in parts])
        v = np.array([variance for _, _, variance in parts])
        f = np.array([test.df if variance > 0 else np.nan for test, _, variance in parts])
        usable = np.isfinite(v) & (v > 0)  # s2's wall times do not vary: no weight
        d, v, f = d[usable], v[usable], f[usable]
        weights = 1 / (v * f / (f - 2))
        estimate = weights @ d / weights.sum()
        share = weights / weights.sum()
        df = (share ** 2 / weights).sum() ** 2 / ((share ** 2 / weights) ** 2 / f).sum()
        half = stats.t.ppf(1 - (1 - row["level"]) / 2, df) / math.sqrt(weights.sum())
        assert row["scenarios"] == usable.sum() and row["level"] == report["family"]["pooledLevel"]
        assert row["estimate"] == round(math.exp(estimate), 4)
        assert (row["low"], row["high"]) == (round(math.exp(estimate - half), 4), round(math.exp(estimate + half), 4))


def test_adjust_direct_is_a_difference_in_differences(store):
    warehouse, values = store
    plain = by_key(compared(warehouse, "before", "after"))
    report = compared(warehouse, "before", "after", "--adjust", "direct")
    assert report["adjust"] == "direct" and report["adjustedMetrics"] == ["time"]
    rows = by_key(report)
    for scenario in ("s1", "s3"):
        control = rows[(scenario, "direct", "time")]
        assert not control["gated"] and not control["adjusted"]
        assert control["estimate"] == plain[(scenario, "direct", "time")]["estimate"]
        for mode in ("forgeloopBalanced", "forgeloopAdaptive"):
            row, before = rows[(scenario, mode, "time")], plain[(scenario, mode, "time")]
            assert row["adjusted"] and row["gated"] and row["verdict"] == "NO_CHANGE"
            assert (row["unadjustedEstimate"], row["unadjustedVerdict"]) == (before["estimate"], "REGRESSED")
            assert row["ratio"] == before["ratio"]  # the medians' ratio stays as measured
            # (log c_mode - log b_mode) - (log c_direct - log b_direct); Satterthwaite over the four run sets' sides
            sides = [np.log(values[(run_set, scenario, m)][1]) for m in (mode, "direct") for run_set in ("before", "after")]
            parts = np.array([side.var(ddof=1) / len(side) for side in sides])
            estimate = (sides[1].mean() - sides[0].mean()) - (sides[3].mean() - sides[2].mean())
            df = parts.sum() ** 2 / np.sum(parts ** 2 / (np.array([len(side) for side in sides]) - 1))
            half = stats.t.ppf(1 - (1 - row["level"]) / 2, df) * math.sqrt(parts.sum())
            assert row["estimate"] == round(math.exp(estimate), 4)
            assert (row["low"], row["high"]) == (round(math.exp(estimate - half), 4), round(math.exp(estimate + half), 4))
        for metric_mode in MODES:  # tokens are not adjusted without --adjust-tokens
            assert rows[(scenario, metric_mode, "tokens")]["estimate"] == plain[(scenario, metric_mode, "tokens")]["estimate"]
    # the direct time rows are controls, not gated: 14 - 2 (s1, s3) - 1 (s2) scenario rows
    assert report["family"]["scenarioRows"] == 11
    assert {(r["mode"], r["metric"]) for r in report["pooled"]} == {(m, k) for m in MODES for k in ("tokens", "time")} - {("direct", "time")}
    both = compared(warehouse, "before", "after", "--adjust", "direct", "--adjust-tokens")
    assert both["adjustedMetrics"] == ["time", "tokens"]
    adaptive = by_key(both)[("s1", "forgeloopAdaptive", "tokens")]
    assert adaptive["adjusted"] and adaptive["unadjustedEstimate"] == plain[("s1", "forgeloopAdaptive", "tokens")]["estimate"]
    assert adaptive["estimate"] == pytest.approx(plain[("s1", "forgeloopAdaptive", "tokens")]["estimate"]
                                                 / plain[("s1", "direct", "tokens")]["estimate"], abs=2e-4)


def test_fail_on_each_condition(store):
    warehouse, _ = store
    # a regression alone is no failure; --fail-on regression makes it exit 5
    assert not compared(warehouse, "before", "after")["gate"]["failed"]
    gate = compared(warehouse, "before", "after", "--fail-on", "regression", check=5)["gate"]
    # scenario rows: 6 wall times and 2 adaptive token rows; pooled: 3 wall times and adaptive tokens
    assert (gate["failOn"], gate["regressed"], gate["failed"]) == (["regression"], 12, True)
    run_cli("compare", "before", "after", "--adjust", "direct", "--fail-on", "regression", warehouse=warehouse, check=5)
    # steady: 20 runs, log-sd 0.02, one law: no regression, nothing inconclusive, every row powered
    for condition in ("regression", "inconclusive", "underpowered", "regression,inconclusive,underpowered"):
        gate = compared(warehouse, "steady1", "steady2", "--fail-on", condition)["gate"]
        assert not gate["failed"] and gate["rows"] == 6  # one scenario: no pooled row
    # few: 3 runs, log-sd 0.3: nothing regressed, but nothing could have been seen either
    few = compared(warehouse, "few1", "few2", "--fail-on", "regression")
    assert not few["gate"]["failed"] and few["gate"]["underpowered"] == 6
    assert all(row["mde"] > 1.1 for row in few["rows"])
    for condition in ("inconclusive", "underpowered"):
        assert compared(warehouse, "few1", "few2", "--fail-on", condition, check=5)["gate"]["failed"]
    repeated = compared(warehouse, "few1", "few2", "--fail-on", "regression", "--fail-on", "underpowered", check=5)
    comma = compared(warehouse, "few1", "few2", "--fail-on", "regression,underpowered,regression", check=5)
    assert repeated["gate"] == comma["gate"] and comma["gate"]["failOn"] == ["regression", "underpowered"]


def test_resamples_and_seed_are_accepted_and_change_nothing(store):
    warehouse, _ = store
    plain = run_cli("compare", "before", "after", "--json", warehouse=warehouse).stdout
    assert run_cli("compare", "before", "after", "--json", "--resamples", "500", "--seed", "7",
                   warehouse=warehouse).stdout == plain
    shown = run_cli("compare", "--help", env={"COLUMNS": "200"}).stdout
    assert "--fail-on" in shown and "--adjust" in shown and "--resamples" not in shown and "--seed" not in shown


def test_markdown_is_two_tables_and_the_gate(store):
    warehouse, _ = store
    failed = run_cli("compare", "before", "after", "--format", "markdown", "--fail-on", "regression",
                     warehouse=warehouse, check=5)
    lines = failed.stdout.splitlines()
    assert lines[0] == "### `after` against `before`"
    header = lines.index("| Scenario | Mode | Metric | Baseline median | Candidate median | GM ratio | Low | High | MDE | Regressed at "
                         "| Verdict |")
    assert lines[header + 1] == "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    body = [line for line in lines[header + 2:lines.index("All scenarios, pooled:")] if line.startswith("| ")]
    assert len(body) == 16 and all(line.count(" | ") == 10 for line in body)
    assert any("**REGRESSED**" in line and "| adaptive | tokens |" in line for line in body)
    pooled = lines.index("| Mode | Metric | Scenarios | GM ratio | Low | High | MDE | Regressed at | Verdict |")
    assert len([line for line in lines[pooled + 2:] if line.startswith("| ")]) == 6
    assert "Scenario rows: 8 regressed, 2 improved, 4 unchanged, 2 inconclusive." in failed.stdout
    # s4 has one run in `before`: its rows show - and the summary says what - is; what the gate catches is told
    assert "-: not computed (a side has fewer than 2 runs with a value)." in failed.stdout
    assert "Regressed at: the true ratio judged REGRESSED 80% of the time (MDE × (1 + margin))" in failed.stdout
    assert lines[-1] == ("Gate --fail-on regression: FAILED (12 regressed of 22 gated rows; 2 inconclusive, which "
                         "--fail-on inconclusive would fail on).")
    adjusted = run_cli("compare", "before", "after", "--format", "markdown", "--adjust", "direct", warehouse=warehouse)
    assert "| Verdict | Unadjusted |" in adjusted.stdout and "| control |" in adjusted.stdout


def test_text_fits_and_wrong_calls_are_one_line(store):
    warehouse, _ = store
    text = run_cli("compare", "before", "after", "--adjust", "direct", "--fail-on", "regression", warehouse=warehouse,
                   env={"COLUMNS": "80"}, check=5).stdout
    assert all(len(line) <= 80 for line in text.splitlines()) and "REGRESSED" in text
    assert "All scenarios, pooled" in text and "Gate --fail-on regression: FAILED" in text
    missing = run_cli("compare", "before", "nosuch", warehouse=warehouse, check=1)
    assert "no run set 'nosuch'" in missing.stderr and missing.stderr.count("\n") == 1
    for args in (["--json", "--format", "markdown"], ["--margin", "1.5"], ["--format", "html"], ["--fail-on", "x"],
                 ["--fail-on", "regression,x"], ["--adjust", "tokens"], ["--adjust-tokens"], ["--level", "1.5"]):
        wrong = run_cli("compare", "before", "after", *args, warehouse=warehouse, check=2)
        assert wrong.stderr.count("\n") == 1 and wrong.stdout == "", args


@pytest.mark.slow
def test_the_gate_rarely_fails_when_nothing_changed(tmp_path):
    """A/A through the command: 41 run sets drawn from one law (3 scenarios x 3 modes, 5 runs,
    token log-sd up to 0.4, wall-time log-sd up to 0.17 as in the corpus); 40 comparisons of
    neighbours, `--fail-on regression`. The family-wise error allowed is 2.5 % for a regression."""
    rng = np.random.default_rng(7)
    token_sd = np.linspace(0.05, 0.40, 9).reshape(3, 3)
    time_sd = np.linspace(0.03, 0.17, 9).reshape(3, 3)
    documents = []
    for index in range(41):
        for i, scenario in enumerate(("a", "b", "c")):
            for j, mode in enumerate(MODES):
                tokens = np.rint(np.exp(rng.normal(np.log(50_000), token_sd[i, j], 5)))
                walls = np.round(np.exp(rng.normal(np.log(20_000), time_sd[i, j], 5)), 4)
                documents += _documents(f"aa-{index}", scenario, mode, tokens, walls)
    write_tree(tmp_path / "results", documents, {scenario: "light" for scenario in ("a", "b", "c")})
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(tmp_path / "results"), "--scenarios", str(tmp_path / "results" / "scenarios"),
            "--quiet", warehouse=warehouse)
    failed = sum(run_cli("compare", f"aa-{i}", f"aa-{i + 1}", "--fail-on", "regression", "--json",
                         warehouse=warehouse, check=None).returncode == 5 for i in range(40))
    assert failed <= 2  # 40 draws at the allowed 2.5 %: more than 2 has probability 0.08
    assert power.family_levels(0.95, 18, 6)[0] == pytest.approx(1 - 0.025 / 18)


def test_a_run_set_compared_with_itself_is_told(corpus_warehouse):
    run_set = "codex-tail-repeat20-20260831"
    same = run_cli("compare", run_set, run_set, warehouse=corpus_warehouse)
    assert f"note: {run_set} is compared with itself: every ratio is 1" in same.stderr
    other = run_cli("compare", "codex-quality-repeat5-20260831", run_set, warehouse=corpus_warehouse)
    assert "compared with itself" not in other.stderr


def test_a_ratio_beyond_any_double_is_judged_a_level_near_1_told_and_no_pooled_row_said(tmp_path):
    """Wall times of 1e-4 ms against 1.7e308 ms (the contract's finite numbers): the log ratio, about 719,
    lies beyond any double's exp, so the ratio and its ends are open (null), and the interval, wholly
    above 1 + margin, is REGRESSED (IMPROVED the other way round). One scenario: no pooled row."""
    documents = (_documents("b", "s", "direct", [1000, 1100, 1200], [1e-4, 1e-4, 2e-4])
                 + _documents("c", "s", "direct", [1000, 1100, 1200], [1.7e308, 1.7e308, 1.6e308]))
    write_tree(tmp_path / "results", documents, {"s": "light"})
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(tmp_path / "results"), "--quiet", warehouse=warehouse)
    forward = compared(warehouse, "b", "c")
    row = by_key(forward)[("s", "direct", "time")]
    assert (row["estimate"], row["low"], row["high"], row["verdict"]) == (None, None, None, "REGRESSED")
    assert row["mde"] is not None and forward["pooled"] == [] and forward["family"]["pooledRows"] == 0
    back = by_key(compared(warehouse, "c", "b"))[("s", "direct", "time")]
    assert (back["estimate"], back["low"], back["high"], back["verdict"]) == (0, 0, 0, "IMPROVED")
    text = " ".join(run_cli("compare", "b", "c", warehouse=warehouse, env={"COLUMNS": "100"}).stdout.split())
    assert "not computed" not in text and "open: beyond any number at this level" in text
    assert "Pooled rows: none (a mode and metric is pooled over at least 2 scenario rows that weigh" in text
    # two gated rows at 0.99999: each at 1 - 0.00001 / 2, shown as itself, not as 100 %
    near = " ".join(run_cli("compare", "b", "c", "--level", "0.99999", warehouse=warehouse,
                            env={"COLUMNS": "100"}).stdout.split())
    assert "each scenario row at 99.9995%" in near
    # a level whose share per row is below what a double holds next to 1
    wrong = run_cli("compare", "b", "c", "--level", "0.9999999999999999", warehouse=warehouse, check=2)
    assert wrong.stdout == "" and wrong.stderr.count("\n") == 1
    assert "--level 0.9999999999999999 is too close to 1 for 2 gated scenario rows" in wrong.stderr
