"""Hand-computed cases for the rules the corpus does not reach."""
from __future__ import annotations

import pytest

from loopmeter.forgeloop.ingest import ingest_forgeloop
from loopmeter.forgeloop.aggregation import compute
from loopmeter.storage import Warehouse
from runs import context, quality, run, write_tree

SCENARIO = "small-bug-fix"


def aggregate(tmp_path, runs, profiles=None, tier=None):
    """Ingest `runs`, aggregate; returns {(run set, scenario): document} and the summaries."""
    profiles = profiles if profiles is not None else {SCENARIO: "balanced"}
    results = write_tree(tmp_path / "results", runs, profiles)
    warehouse = Warehouse(tmp_path / "warehouse")
    outcome = ingest_forgeloop(warehouse, results, results / "scenarios" if profiles else None)
    assert outcome.rejections == []
    result = compute(warehouse, tier=tier)
    documents = {(d.run_set_id, s): doc for d in result.documents for s, doc in d.scenarios.items()}
    summaries = {d.run_set_id: d.summary for d in result.documents}
    return documents, summaries


def only(documents):
    (document,) = documents.values()
    return document


def pairs(direct, candidate, mode="forgeloopBalanced", **kwargs):
    runs = [run(mode="direct", index=i + 1, tokens=t, **kwargs) for i, t in enumerate(direct)]
    runs += [run(mode=mode, index=i + 1, tokens=t, **kwargs) for i, t in enumerate(candidate)]
    return runs


def test_fewer_than_four_measured_runs_are_not_enough(tmp_path):
    runs = [run(index=1, tokens=100), run(index=2, tokens=200), run(index=3, tokens=300), run(index=4, source="UNKNOWN")]
    document = only(aggregate(tmp_path, runs)[0])
    assert document["outlierAnalysis"]["modes"]["direct"] == {
        "sampleCount": 4, "measuredCount": 3, "status": "NOT_ENOUGH_SAMPLES",
        "q1": None, "q3": None, "iqr": None, "median": None, "upperFence": None, "outliers": [],
    }
    assert document["outlierAnalysis"]["modes"]["forgeloopAdaptive"]["sampleCount"] == 0


def test_exact_ties_round_away_from_zero_like_tofixed(tmp_path):
    # 1.03125 is exact in binary; toFixed(4) gives 1.0313 where Python's round() gives 1.0312
    runs = [
        run(index=1, tokens=33, steps=32, quality=quality(1.0)),
        run(index=2, tokens=33, steps=32, quality=quality(1.0625)),
    ]
    assert round(1.03125, 4) == 1.0312
    mode = only(aggregate(tmp_path, runs)[0])["modeAggregates"]["direct"]
    assert mode["tokensPerComparableStep"]["average"] == 1.0313
    assert mode["tokensPerComparableStep"]["minimum"] == 1.03125  # minimum and maximum are not rounded
    scores = mode["quality"]["scores"]["visualQuality"]
    assert (scores["average"], scores["p50"], scores["p25"], scores["p75"]) == (1.0313, 1.0313, 1.0156, 1.0469)
    # p25 = 1 + 0.0625 * 0.25 = 1.015625 -> 1.0156 (below the tie), p75 = 1.046875 -> 1.0469
    assert mode["quality"]["sources"] == ["EXTERNAL_REPORTED"]


def test_low_baseline_pairs_and_paired_runs(tmp_path):
    document = only(aggregate(tmp_path, pairs([100, 1000, 1000, 1000], [200, 1100, 1100, 1100]))[0])
    comparison = document["comparisons"]["forgeloopBalanced"]
    assert comparison["pairedRatioDiagnostics"] == {
        "pairCount": 4, "baselineMinimum": 100, "baselineP25": 775, "baselineP50": 1000,
        "lowBaselineThreshold": 600, "lowBaselinePairCount": 1,
    }
    assert comparison["pairedRuns"][0] == {
        "runIndex": 1, "directTokens": 100, "candidateTokens": 200, "absoluteDeltaTokens": 100,
        "pairedOverheadPercent": 100, "baselineRegime": "LOW_BASELINE_TOKEN_REGIME",
    }
    assert [p["baselineRegime"] for p in comparison["pairedRuns"][1:]] == ["NORMAL"] * 3
    # overheads [10, 10, 10, 100]: p50 10, p95 = 10 + 90 * 0.85 = 86.5
    assert comparison["tokenOverheadPercent"] == {"p50": 10, "p95": 86.5}
    assert comparison["distributionDeltaPercent"] == {"p50": 10, "p95": 10}
    assert comparison["claimAllowed"] is True and comparison["claimStatus"] == "OBSERVATIONAL"


def test_no_comparable_pair(tmp_path):
    runs = pairs([1000, 1000], [1000, 1000])
    runs[2]["verification"] = "FAIL"  # not trusted
    runs[3]["metadata"]["environmentClass"] = "another-machine"  # metadata differs
    document = only(aggregate(tmp_path, runs)[0])
    comparison = document["comparisons"]["forgeloopBalanced"]
    assert comparison["comparablePairs"] == 0 and comparison["pairedRuns"] == []
    assert comparison["claimAllowed"] is False and comparison["claimStatus"] == "NOT_COMPARABLE"
    assert comparison["reason"].startswith("Efficiency claims require trusted usage")
    assert comparison["tokenOverheadPercent"] == {"p50": None, "p95": None}
    assert comparison["pairedRatioDiagnostics"] == {
        "pairCount": 0, "baselineMinimum": None, "baselineP25": None, "baselineP50": None,
        "lowBaselineThreshold": None, "lowBaselinePairCount": 0,
    }
    assert document["claimsAllowed"] is False
    assert comparison["tail"]["combinedInterpretation"] == "TAIL_UNRESOLVED"


def test_unknown_usage_counts_as_a_run_but_not_a_measurement(tmp_path):
    runs = pairs([1000, 1000], [1100, 1100])
    runs[0] = run(mode="direct", index=1, source="UNKNOWN")
    document = only(aggregate(tmp_path, runs)[0])
    direct = document["modeAggregates"]["direct"]
    assert direct["runCount"] == 2 and direct["totalTokens"]["count"] == 1
    assert direct["usageSources"] == ["HOST_REPORTED", "UNKNOWN"]
    assert document["comparisons"]["forgeloopBalanced"]["comparablePairs"] == 1


@pytest.mark.slow
def test_missing_diagnostics_and_the_signals_of_outliers(tmp_path):
    quiet = {"modelTurns": 1, "toolCalls": 4}
    runs = [run(index=i, tokens=1000, diagnostics=quiet) for i in range(1, 6)]
    runs.append(run(index=6, tokens=5000, diagnostics={"modelTurns": 3, "toolCalls": 4, "retries": 1, "flags": ["MODEL_STALL"]}))
    runs.append(run(index=7, tokens=6000))  # no diagnostics: only the run's own verification cycles count
    runs.append(run(index=8, tokens=7000, cycles=2))
    document = only(aggregate(tmp_path, runs)[0])
    direct = document["outlierAnalysis"]["modes"]["direct"]
    # tokens [1000 x5, 5000, 6000, 7000]: q1 = 1000, q3 = 5000 + 1000 * 0.25 = 5250, iqr 4250, fence 11625
    assert (direct["q1"], direct["q3"], direct["iqr"], direct["median"], direct["upperFence"]) == (1000, 5250, 4250, 1000, 11625)
    assert direct["outliers"] == []
    runs.append(run(index=9, tokens=40000))
    runs.append(run(index=10, tokens=50000, diagnostics={"modelTurns": 3, "toolCalls": 9, "correctionCycles": 2, "contextRefreshes": 2, "flags": ["UNKNOWN_TOKEN_SPIKE", "HOST_RETRY", "MODEL_STALL"]}))
    document = only(aggregate(tmp_path / "second", runs)[0])
    direct = document["outlierAnalysis"]["modes"]["direct"]
    # tokens [1000 x5, 5000, 6000, 7000, 40000, 50000]: q1 = 1000, q3 = 6000 + 1000 * 0.75 = 6750, fence = 6750 + 1.5 * 5750
    assert (direct["q3"], direct["iqr"], direct["upperFence"], direct["median"]) == (6750, 5750, 15375, 3000)
    assert direct["outliers"] == [
        {"runId": "run-small-bug-fix-direct-009", "runIndex": 9, "totalTokens": 40000, "scenarioMedianTokens": 3000,
         "ratioToMedian": 13.3333, "reasons": ["TOKEN_IQR_OUTLIER"], "diagnosticSignals": ["UNKNOWN_TOKEN_SPIKE"]},
        {"runId": "run-small-bug-fix-direct-010", "runIndex": 10, "totalTokens": 50000, "scenarioMedianTokens": 3000,
         "ratioToMedian": 16.6667, "reasons": ["TOKEN_IQR_OUTLIER"],
         # median modelTurns 1 (3 > 2), median toolCalls 4 (9 > 8), host flags kept (UNKNOWN_TOKEN_SPIKE too), in ForgeLoop's order
         "diagnosticSignals": ["EXCESSIVE_MODEL_TURNS", "EXCESSIVE_TOOL_CALLS", "REPEATED_CONTEXT_REFRESH", "CORRECTION_LOOP",
                               "HOST_RETRY", "MODEL_STALL", "UNKNOWN_TOKEN_SPIKE"]},
    ]
    diagnostics = document["modeAggregates"]["direct"]["diagnostics"]
    assert diagnostics["modelTurns"]["count"] == 7 and diagnostics["filesRead"]["count"] == 0
    assert document["comparisons"]["forgeloopAdaptive"]["tail"]["outlierCount"] == 0


@pytest.mark.parametrize(
    ("light_items", "balanced_items", "resolved", "status", "reason_start", "pairs_"),
    [
        (100, 90, "light", "CONTEXT_INFLATION", "Host-reported LIGHT context exceeded", 1),
        (100, 100, "light", "NOT_DETECTED", "Comparable host-reported LIGHT and BALANCED", 1),
        (100, 100, "balanced", "NOT_COMPARABLE", "The adaptive mode did not resolve to LIGHT", 0),
        (100, None, "light", "NOT_COMPARABLE", "Context inflation requires complete HOST_REPORTED", 0),
    ],
)
def test_context_inflation(tmp_path, light_items, balanced_items, resolved, status, reason_start, pairs_):
    def items(value):
        return context({name: value for name in ("taskContext", "guides", "history", "protocolInstructions", "repositoryContext", "other")})

    light = items(light_items)
    light["profile"] = resolved
    balanced = items(balanced_items) if balanced_items is not None else context(items={"taskContext": 5}, profile="balanced")
    balanced["profile"] = "balanced"
    runs = [
        run(mode="direct", index=1, tokens=1000),
        run(mode="forgeloopBalanced", index=1, tokens=1000, context=balanced),
        run(mode="forgeloopAdaptive", index=1, tokens=900, resolved=resolved, context=light),
    ]
    document = only(aggregate(tmp_path, runs, {SCENARIO: "light"})[0])
    inflation = document["contextInflation"]
    assert (inflation["status"], inflation["comparablePairs"], inflation["blocking"]) == (status, pairs_, False)
    assert inflation["reason"].startswith(reason_start)
    assert inflation["inflatedPairs"] == (1 if status == "CONTEXT_INFLATION" else 0)
    if pairs_:
        assert inflation["lightContextTokens"] == {"count": 1, "average": 600, "p50": 600, "p95": 600, "minimum": 600, "maximum": 600}
    context_usage = document["modeAggregates"]["forgeloopAdaptive"]["contextUsage"]
    assert context_usage["profiles"] == [resolved] and context_usage["measuredRuns"] == 1
    assert document["modeAggregates"]["direct"]["contextUsage"]["sources"] == ["UNKNOWN"]
    # a light scenario: the adaptive comparison decides the light objectives (overhead -10 %)
    assert document["lightObjectives"] == {
        "p50TokenOverheadPercent": 35, "p95TokenOverheadPercent": 60, "status": "OBSERVATIONAL", "p50Pass": True, "p95Pass": True,
    }


def test_context_totals_are_added_as_javascript_adds_them(tmp_path):
    """Beyond 2^53 each addition of doubles rounds: light [2^53-1, 1, 1, 1, 0, 0] and balanced
    [2^53-1, 1, 0, 0, 0, 0] both add up to 2^53 in item order, so light is not above balanced
    (node: [2**53-1, 1, 1, 1, 0, 0].reduce((s, x) => s + x, 0) === 2**53). The exact sums differ."""
    names = ("taskContext", "guides", "history", "protocolInstructions", "repositoryContext", "other")
    light = context(dict(zip(names, (2**53 - 1, 1, 1, 1, 0, 0))), profile="light")
    balanced = context(dict(zip(names, (2**53 - 1, 1, 0, 0, 0, 0))), profile="balanced")
    runs = [
        run(mode="direct", index=1, tokens=1000),
        run(mode="forgeloopBalanced", index=1, tokens=1000, context=balanced),
        run(mode="forgeloopAdaptive", index=1, tokens=900, resolved="light", context=light),
    ]
    document = only(aggregate(tmp_path, runs, {SCENARIO: "light"})[0])
    inflation = document["contextInflation"]
    assert (inflation["status"], inflation["comparablePairs"], inflation["inflatedPairs"]) == ("NOT_DETECTED", 1, 0)
    assert document["modeAggregates"]["forgeloopAdaptive"]["contextUsage"]["totalTokens"]["maximum"] == 2**53


def test_version_1_run_sets_keep_the_version_1_layout(tmp_path):
    runs = pairs([1000, 1000], [1100, 1300], mode="forgeloopAdaptive", version="1")
    documents, summaries = aggregate(tmp_path, runs, {SCENARIO: "light"}, tier="evidence")
    document = only(documents)
    assert document["benchmarkVersion"] == "1" and "outlierAnalysis" not in document
    assert list(document["comparisons"]["forgeloopAdaptive"]) == [
        "comparablePairs", "tokenComparablePairs", "timeComparablePairs", "tokenOverheadPercent",
        "timeOverheadPercent", "claimStatus", "claimAllowed", "reason",
    ]
    assert list(document["modeAggregates"]["direct"]) == [
        "runCount", "verificationSuccessRate", "usageSources", "totalTokens", "wallClockMs",
        "verificationCycles", "comparableSteps", "tokensPerComparableStep",
    ]
    assert list(document["modeAggregates"]["direct"]["totalTokens"]) == ["count", "average", "p50", "p95", "minimum", "maximum"]
    # overheads [10, 30]: p50 20, p95 = 10 + 20 * 0.95 = 29
    assert document["comparisons"]["forgeloopAdaptive"]["tokenOverheadPercent"] == {"p50": 20, "p95": 29}
    assert document["lightObjectives"]["p50Pass"] is True
    summary = summaries["rs-test"]
    assert list(summary) == ["schemaVersion", "benchmarkVersion", "runSetId", "scenarioCount", "runCount", "claimsAllowed", "scenarios"]
    assert list(summary["scenarios"][0]) == ["scenarioId", "expectedProfile", "claimsAllowed", "lightObjectives", "contextInflation"]


def test_scenario_without_a_file_has_no_expected_profile(tmp_path):
    documents, _ = aggregate(tmp_path, pairs([1000], [1000]), profiles={})
    document = only(documents)
    assert document["expectedProfile"] is None and document["lightObjectives"] is None


TWENTY = range(20)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("direct", "candidate", "paired", "distribution", "combined"),
    [
        ([1000] * 20, [1000] * 20, "TAIL_STABLE", "TAIL_ACCEPTABLE", "TAIL_CONSISTENT"),
        ([1000] * 20, [1000] * 19 + [1500], "TAIL_WARNING", "TAIL_ACCEPTABLE", "TAIL_CONSISTENT"),
        ([100, 100] + [1000] * 18, [1000] * 20, "TAIL_REGRESSION", "TAIL_ACCEPTABLE", "TAIL_PAIRED_RATIO_SENSITIVE"),
        ([1000] * 20, [2000] * 20, "TAIL_REGRESSION", "TAIL_REGRESSION", "TAIL_DISTRIBUTION_REGRESSION"),
        ([1000, 2000] * 10, [2000, 1000] * 10, "TAIL_REGRESSION", "TAIL_ACCEPTABLE", "TAIL_UNRESOLVED"),
        ([1000] * 19, [1000] * 19, "NOT_ENOUGH_SAMPLES", "NOT_ENOUGH_SAMPLES", "TAIL_UNRESOLVED"),
    ],
)
def test_tail_classes(tmp_path, direct, candidate, paired, distribution, combined):
    document = only(aggregate(tmp_path, pairs(direct, candidate, mode="forgeloopAdaptive"))[0])
    tail = document["comparisons"]["forgeloopAdaptive"]["tail"]
    assert (tail["pairedStatus"], tail["distributionStatus"], tail["combinedInterpretation"]) == (paired, distribution, combined)
    assert tail["status"] == paired and tail["sampleCount"] == len(direct) and tail["sampleMinimum"] == 20
    if paired == "TAIL_WARNING":
        # overheads [0 x19, 50]: p95 = 0 + 50 * 0.05 = 2.5; the 1500-token run is above the fence 1000
        assert tail["p95TokenOverheadPercent"] == 2.5 and tail["outlierCount"] == 1
        assert tail["distributionP95DeltaPercent"] == 2.5


def test_summary_lists_scenarios_in_file_name_order_with_the_tier(tmp_path):
    runs = pairs([1000], [1000]) + [run(scenario="api-feature", index=1, tokens=50)]
    documents, summaries = aggregate(tmp_path, runs, {SCENARIO: "balanced", "api-feature": "balanced"}, tier="smoke")
    summary = summaries["rs-test"]
    assert [s["scenarioId"] for s in summary["scenarios"]] == ["api-feature", SCENARIO]
    assert (summary["tier"], summary["scenarioCount"], summary["runCount"]) == ("smoke", 2, 3)
    assert summary["scenarios"][0]["outlierAnalysis"]["modes"]["direct"]["status"] == "NOT_ENOUGH_SAMPLES"


def test_written_documents_take_the_slow_path_where_polars_would_print_an_exponent(tmp_path):
    """`aggregate` writes statistic blocks and pairedRuns rendered by polars (fragments.py); a block
    with a number polars prints with an exponent (1e-6) is encoded from its dict instead, and every
    file is byte for byte the text of the documents `compute` gives."""
    from loopmeter.forgeloop.aggregation import aggregate as aggregate_stage
    from loopmeter.jsjson import dumps

    runs = pairs([1000, 2000, 3000, 4000], [1100, 2100, 3300, 2**53 - 1])
    runs += [run(mode="forgeloopAdaptive", index=i + 1, tokens=1000 + i, wall=0.000001 * (i + 1)) for i in range(4)]
    runs += [run(scenario="legacy-one", index=i + 1, version="1", tokens=500 * (i + 1)) for i in range(3)]
    results = write_tree(tmp_path / "results", runs, {SCENARIO: "balanced"})
    warehouse = Warehouse(tmp_path / "warehouse")
    assert ingest_forgeloop(warehouse, results, results / "scenarios").rejections == []
    expected = compute(warehouse)
    written = aggregate_stage(warehouse, tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in written.written) == [
        "rs-test/legacy-one.json", "rs-test/small-bug-fix.json", "rs-test/summary.json"]
    (docs,) = expected.documents
    for scenario, document in docs.scenarios.items():
        text = (tmp_path / "out" / "rs-test" / f"{scenario}.json").read_text()
        assert text == dumps(document, 2) + "\n"
    assert (tmp_path / "out" / "rs-test" / "summary.json").read_text() == dumps(docs.summary, 2) + "\n"
    # what made the slow path: JavaScript prints these without an exponent
    document = docs.scenarios[SCENARIO]
    assert document["modeAggregates"]["forgeloopAdaptive"]["wallClockMs"]["minimum"] == 0.000001
    assert '"minimum": 0.000001,' in (tmp_path / "out" / "rs-test" / f"{SCENARIO}.json").read_text()
    assert '"candidateTokens": 9007199254740991,' in (tmp_path / "out" / "rs-test" / f"{SCENARIO}.json").read_text()
    assert (tmp_path / "out" / "rs-test" / "legacy-one.json").read_text().count('"p25"') == 0  # version 1 blocks


def test_a_paired_runs_list_with_a_number_polars_cannot_print_is_left_to_the_slow_path():
    import polars as pl

    from loopmeter.forgeloop.fragments import paired_runs_lists

    frame = pl.DataFrame({
        "run_set_id": ["a", "a", "b"], "scenario_id": ["s"] * 3, "mode": ["forgeloopBalanced"] * 3,
        "run_index": [1, 2, 1], "direct_tokens": [10.0, 20.0, 30.0], "candidate_tokens": [11.0, 22.0, 30.0],
        "absolute_delta_tokens": [1.0, 2.0, 1e-7], "paired_overhead_percent": [10.0, 10.0, 0.0],
        "baseline_regime": ["NORMAL", "LOW_BASELINE_TOKEN_REGIME", "NORMAL"],
    })
    lists = {row["run_set_id"]: row["text"] for row in paired_runs_lists(frame).iter_rows(named=True)}
    assert lists["b"] is None
    item = (',\n          "directTokens": 10,\n          "candidateTokens": 11,\n          "absoluteDeltaTokens": 1,'
            '\n          "pairedOverheadPercent": 10,\n          "baselineRegime": "NORMAL"\n        }')
    assert lists["a"].startswith('[\n        {\n          "runIndex": 1' + item + ',\n        {\n          "runIndex": 2,')
    assert lists["a"].endswith('"baselineRegime": "LOW_BASELINE_TOKEN_REGIME"\n        }\n      ]')


def test_a_mode_aggregate_with_a_string_that_needs_escaping_is_left_to_the_slow_path():
    import polars as pl

    from loopmeter.forgeloop.fragments import _string_list

    frame = pl.DataFrame({"sources": [[], ["HOST_REPORTED", "UNKNOWN"], ['say "hi"'], ["a\\b"], ["tab\there"], [None]]},
                         schema={"sources": pl.List(pl.String)})
    texts = frame.select(_string_list("sources", 3).alias("text"))["text"].to_list()
    assert texts == ["[]", '[\n        "HOST_REPORTED",\n        "UNKNOWN"\n      ]', None, None, None, None]
