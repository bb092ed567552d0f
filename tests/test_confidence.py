"""`loopmeter report confidence`: ForgeLoop's figures as the estimates, intervals that cover the
truth of simulated run sets, the objectives judged on them, and the command as users run it."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import run_cli
from loopmeter.forgeloop.confidence import Settings, confidence_report
from loopmeter.storage import Warehouse
from runs import run, write_tree

CORPUS_FIGURES = {  # statistic -> (comparison key, field) of ForgeLoop's aggregate document
    ("tokens", "pairedOverheadP50"): ("tokenOverheadPercent", "p50"),
    ("tokens", "pairedOverheadP95"): ("tokenOverheadPercent", "p95"),
    ("tokens", "distributionDeltaP50"): ("distributionDeltaPercent", "p50"),
    ("tokens", "distributionDeltaP95"): ("distributionDeltaPercent", "p95"),
    ("time", "pairedOverheadP50"): ("timeOverheadPercent", "p50"),
    ("time", "pairedOverheadP95"): ("timeOverheadPercent", "p95"),
}


@pytest.fixture(scope="module")
def corpus_report(corpus_warehouse) -> dict:
    return json.loads(run_cli("report", "confidence", "--json", warehouse=corpus_warehouse).stdout)


def test_every_estimate_is_forgeloops_own_figure(corpus_report, corpus):
    rows = corpus_report["rows"]
    assert rows and {row["runSetId"] for row in rows} == {p.name for p in (corpus / "results" / "aggregate").iterdir()}
    for row in rows:
        document = json.loads((corpus / "results" / "aggregate" / row["runSetId"] / f"{row['scenarioId']}.json").read_text())
        comparison = document["comparisons"][row["mode"]]
        key, field = CORPUS_FIGURES[(row["metric"], row["statistic"])]
        assert row["estimate"] == comparison[key][field], row
        assert row["pairs"] == comparison["tokenComparablePairs" if row["metric"] == "tokens" else "timeComparablePairs"]
    for run_set in {row["runSetId"] for row in rows}:
        document = json.loads((corpus / "results" / "aggregate" / run_set / "summary.json").read_text())
        statistics = {row["statistic"] for row in rows if row["runSetId"] == run_set}
        has_deltas = document["benchmarkVersion"] == "2"  # version 1 comparisons have no distribution deltas
        assert any(s.startswith("distribution") for s in statistics) == has_deltas


def test_the_intervals_hold_their_estimates_and_open_where_the_pairs_cannot_bound(corpus_report):
    for row in corpus_report["rows"]:
        if row["low"] is not None and row["high"] is not None:
            assert row["low"] <= row["high"]
        if row["statistic"] == "pairedOverheadP95" and row["pairs"] < 72:
            assert row["high"] is None, row  # the p95 of fewer than 72 pairs has no upper bound at 95 %
        if row["statistic"] == "pairedOverheadP50" and row["pairs"] >= 6:
            assert row["low"] is not None and row["high"] is not None, row
        if row["statistic"] == "pairedOverheadP50" and 0 < row["pairs"] <= 5:
            assert row["low"] is None and row["high"] is None, row


def test_objectives_are_judged_on_the_intervals(corpus_report, corpus):
    light = {p.stem for p in (corpus / "scenarios").glob("*.json") if json.loads(p.read_text())["expectedProfile"] == "light"}
    objectives = corpus_report["objectives"]
    assert {o["scenarioId"] for o in objectives} == light
    rows = {(r["runSetId"], r["scenarioId"], r["statistic"]): r for r in corpus_report["rows"]
            if r["mode"] == "forgeloopAdaptive" and r["metric"] == "tokens"}
    for objective in objectives:
        statistic = "pairedOverheadP50" if objective["objective"] == "p50TokenOverheadPercent" else "pairedOverheadP95"
        row = rows[(objective["runSetId"], objective["scenarioId"], statistic)]
        threshold = {"p50TokenOverheadPercent": 35, "p95TokenOverheadPercent": 60}[objective["objective"]]
        assert objective["threshold"] == threshold
        expected = ("MET" if row["high"] is not None and row["high"] <= threshold else
                    "VIOLATED" if row["low"] is not None and row["low"] > threshold else "INCONCLUSIVE")
        assert objective["verdict"] == expected
        assert (objective["repeatsNeeded"] is None) == (expected != "INCONCLUSIVE" or row["estimate"] is None)
        if objective["repeatsNeeded"] is not None:
            assert objective["repeatsNeeded"] > row["pairs"]
    verdicts = {o["verdict"] for o in objectives}
    assert {"MET", "INCONCLUSIVE", "VIOLATED"} <= verdicts  # the corpus shows each


def test_the_same_seed_gives_the_same_report_and_another_seed_other_intervals(corpus_warehouse, corpus_report):
    again = json.loads(run_cli("report", "confidence", "--json", warehouse=corpus_warehouse).stdout)
    assert again == corpus_report and corpus_report["seed"] == 0 and corpus_report["resamples"] == 2000
    other = json.loads(run_cli("report", "confidence", "--json", "--seed", "9", warehouse=corpus_warehouse).stdout)
    assert [r["estimate"] for r in other["rows"]] == [r["estimate"] for r in corpus_report["rows"]]
    assert [r["low"] for r in other["rows"]] != [r["low"] for r in corpus_report["rows"]]
    one = json.loads(run_cli("report", "confidence", "--json", "--run-set", "codex-tail-repeat20-20260831",
                             warehouse=corpus_warehouse).stdout)
    # a row's interval does not depend on which other run sets are computed beside it
    assert one["rows"] == [r for r in corpus_report["rows"] if r["runSetId"] == "codex-tail-repeat20-20260831"]


def test_the_report_fits_the_terminal_and_aggregate_stores_it_for_bi_tools(tmp_path, corpus):
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--quiet",
            warehouse=warehouse)
    text = run_cli("report", "confidence", "--level", "0.9", warehouse=warehouse, env={"COLUMNS": "80"}).stdout
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)
    assert "90% low" in text and "INCONCLUSIVE" in text and "open" in text
    assert "forgeloop_confidence" not in os.listdir(warehouse)  # a report only reads
    run_cli("aggregate", "--confidence", "--quiet", warehouse=warehouse)
    stored = run_cli("sql", "SELECT statistic, count(*) AS n, min(level) AS level FROM forgeloop_confidence "
                     "GROUP BY ALL ORDER BY statistic", "--format", "json", warehouse=warehouse).stdout
    counts = {row["statistic"]: (row["n"], row["level"]) for row in json.loads(stored)}
    assert counts["pairedOverheadP50"] == (56, 0.95) and counts["distributionDeltaP95"] == (14, 0.95)
    verdicts = run_cli("sql", "SELECT verdict FROM forgeloop_objectives", "--format", "csv", warehouse=warehouse).stdout
    assert "MET" in verdicts


def test_wrong_settings_are_refused_in_one_line(corpus_warehouse):
    for args in (["--level", "1"], ["--level", "0"], ["--resamples", "10"], ["--seed", "-1"]):
        result = run_cli("report", "confidence", *args, warehouse=corpus_warehouse, check=2)
        assert result.stderr.count("\n") == 1 and result.stdout == ""
    missing = run_cli("report", "confidence", "--run-set", "nosuch", warehouse=corpus_warehouse, check=1)
    assert "no run set 'nosuch'" in missing.stderr


# ---- coverage on simulated run sets with a known true overhead ----------------------------------
RUN_SETS, PAIRS = 120, 20
MEAN, SPREAD = 20.0, 10.0  # paired token overhead ~ Normal(20 %, 10 %); time overhead the same law


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> tuple[dict, dict]:
    """RUN_SETS run sets of PAIRS direct/adaptive pairs each, with known overheads, ingested."""
    rng = np.random.default_rng(2026)
    root = tmp_path_factory.mktemp("simulated")
    documents = []
    for number in range(RUN_SETS):
        direct = np.round(np.exp(rng.normal(np.log(50_000), 0.3, PAIRS)))
        overhead = rng.normal(MEAN, SPREAD, PAIRS)
        wall = rng.uniform(10_000, 30_000, PAIRS)
        time_overhead = rng.normal(MEAN, SPREAD, PAIRS)
        for index in range(PAIRS):
            run_set = f"sim-{number:03d}"
            documents.append(run("sim", "direct", index + 1, int(direct[index]), run_set=run_set, wall=float(wall[index])))
            documents.append(run("sim", "forgeloopAdaptive", index + 1, int(round(direct[index] * (1 + overhead[index] / 100))),
                                 run_set=run_set, resolved="light", wall=float(wall[index] * (1 + time_overhead[index] / 100))))
    write_tree(root / "results", documents, {"sim": "light"})
    warehouse = root / "w"
    run_cli("ingest", "forgeloop", str(root / "results"), "--scenarios", str(root / "results" / "scenarios"), "--quiet",
            warehouse=warehouse)
    report = confidence_report(Warehouse(warehouse), settings=Settings(resamples=1000))
    # the truths: the overhead's median and p95, and the delta of the two token distributions' medians
    big = np.random.default_rng(1)
    direct = np.exp(big.normal(np.log(50_000), 0.3, 2_000_000))
    candidate = direct * (1 + big.normal(MEAN, SPREAD, 2_000_000) / 100)
    truths = {
        "pairedOverheadP50": MEAN, "pairedOverheadP95": MEAN + SPREAD * 1.6448536269514722,
        "distributionDeltaP50": (np.median(candidate) - np.median(direct)) / np.median(direct) * 100,
        "distributionDeltaP95": (np.quantile(candidate, 0.95) - np.quantile(direct, 0.95)) / np.quantile(direct, 0.95) * 100,
    }
    return report, truths


def _rows(report: dict, metric: str, statistic: str) -> list[dict]:
    return [r for r in report["rows"] if r["metric"] == metric and r["statistic"] == statistic]


@pytest.mark.parametrize("metric, statistic", [("tokens", "pairedOverheadP50"), ("time", "pairedOverheadP50"),
                                               ("tokens", "pairedOverheadP95"), ("time", "pairedOverheadP95"),
                                               ("tokens", "distributionDeltaP50"), ("tokens", "distributionDeltaP95")])
def test_at_20_pairs_the_95_interval_covers_the_truth_in_at_least_85_percent_of_run_sets(simulated, metric, statistic):
    report, truths = simulated
    rows = _rows(report, metric, statistic)
    assert len(rows) == RUN_SETS and all(r["pairs"] == PAIRS for r in rows)
    truth = truths[statistic]
    covered = [(r["low"] is None or r["low"] <= truth) and (r["high"] is None or truth <= r["high"]) for r in rows]
    assert sum(covered) / len(rows) >= 0.85, sum(covered) / len(rows)


def test_the_median_intervals_are_no_wider_than_they_need_to_be(simulated):
    """Bounded at 20 pairs, and on average no wider than 1.5 times the central 95 % of the sample
    median's own sampling distribution (which an interval of that coverage needs)."""
    report, _ = simulated
    rng = np.random.default_rng(3)
    medians = np.median(rng.normal(MEAN, SPREAD, (50_000, PAIRS)), axis=1)
    needed = np.diff(np.quantile(medians, [0.025, 0.975]))[0]
    for metric in ("tokens", "time"):
        rows = _rows(report, metric, "pairedOverheadP50")
        assert all(r["low"] is not None and r["high"] is not None for r in rows)
        width = np.mean([r["high"] - r["low"] for r in rows])
        assert 0.5 * needed < width <= 1.5 * needed, (width, needed)


def test_a_p95_of_20_pairs_is_open_above_and_its_objective_never_met(simulated):
    report, _ = simulated
    assert all(r["high"] is None and r["low"] is not None for r in _rows(report, "tokens", "pairedOverheadP95"))
    p95 = [o for o in report["objectives"] if o["objective"] == "p95TokenOverheadPercent"]
    assert len(p95) == RUN_SETS and all(o["verdict"] == "INCONCLUSIVE" and o["repeatsNeeded"] >= 72 for o in p95)
    p50 = [o["verdict"] for o in report["objectives"] if o["objective"] == "p50TokenOverheadPercent"]
    assert p50.count("MET") / len(p50) >= 0.85  # the true median, 20 %, is well below 35 %
