"""ForgeLoop's aggregate documents (`<scenario>.json`, `summary.json`) from an `Analysis`.

Only assembly happens here: every number comes computed (and rounded) from `analysis.py`.
Keys, their order and the version-1/version-2 layouts are ForgeLoop's.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Iterator

import orjson
import polars as pl

from . import fragments
from .analysis import Analysis
from .contract import (
    CANDIDATE_MODES,
    CLAIM_REASON_ALLOWED,
    CLAIM_REASON_DENIED,
    CONTEXT_ITEMS,
    DIAGNOSTIC_COUNTS,
    INFLATION_REASONS,
    LIGHT_OBJECTIVES,
    MODE_METRICS,
    MODES,
    OUTLIER_MINIMUM_SAMPLES,
    OUTLIER_POLICY,
    QUALITY_SCORES,
    SOURCE_POLICY,
    TAIL_SAMPLE_MINIMUM,
)
from .stats import LEGACY_FIELDS, ROBUST_FIELDS
from .stored import RunSetDocuments

EMPTY_ROBUST = {name: (0 if name in ("count", "outlierCount") else None) for name in ROBUST_FIELDS}
EMPTY_LEGACY = {name: (0 if name == "count" else None) for name in LEGACY_FIELDS}


def _index(rows: Iterable[dict], *keys: str) -> dict[tuple, dict]:
    return {tuple(row[k] for k in keys): row for row in rows}


def _group(rows: Iterable[dict], *keys: str) -> dict[tuple, list[dict]]:
    grouped: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[tuple(row[k] for k in keys)].append(row)
    return grouped


class _Tables:
    """The analysis frames as dictionaries keyed the way documents are walked. `rendered`: the
    mode aggregates, statistic blocks and pairedRuns lists as JSON text (`fragments.py`), for
    documents that are only written (with an indent of 2); else as dicts and lists, for documents
    that are read."""

    def __init__(self, analysis: Analysis, rendered: bool = False):
        self.rendered = rendered
        self.mode_runs = _index(analysis.mode_runs.iter_rows(named=True), "run_set_id", "scenario_id", "mode")
        self.empty: dict[tuple[str, bool], Any] = {}
        self.modes: dict[tuple, orjson.Fragment] = {}  # rendered: modeAggregates.<mode> of each document
        if rendered:
            self._rendered(analysis)
        else:
            # robustStatistic dicts, made straight from row tuples (the bulk of every document)
            stats = analysis.mode_stats.select("run_set_id", "scenario_id", "mode", "metric", *ROBUST_FIELDS)
            self.stats = {tuple(row[:4]): dict(zip(ROBUST_FIELDS, row[4:])) for row in stats.iter_rows()}
            self.paired_runs = _group(analysis.paired_runs.iter_rows(named=True), "run_set_id", "scenario_id", "mode")
        self.comparisons = _index(analysis.comparisons.iter_rows(named=True), "run_set_id", "scenario_id", "mode")
        self.outlier_modes = _index(analysis.outlier_modes.iter_rows(named=True), "run_set_id", "scenario_id", "mode")
        self.outliers = _group(analysis.outliers.iter_rows(named=True), "run_set_id", "scenario_id", "mode")
        self.inflation = _index(analysis.inflation.iter_rows(named=True), "run_set_id", "scenario_id")
        self.inflation_stats = _index(analysis.inflation_stats.iter_rows(named=True), "run_set_id", "scenario_id", "side")
        self.scenarios: dict[str, list[str]] = defaultdict(list)
        for run_set, scenario, _ in self.mode_runs:
            if scenario not in self.scenarios[run_set]:
                self.scenarios[run_set].append(scenario)

    def _rendered(self, analysis: Analysis) -> None:
        """modes: key -> the mode's aggregate as its document holds it (a Fragment), where it can be
        rendered whole; stats, for the other modes: key -> the block (a Fragment; the dict where a
        number needs the slow path); paired_runs: key -> the pairedRuns list (a Fragment, or the dicts)."""
        flags = analysis.mode_runs.group_by("run_set_id", "scenario_id").agg(
            pl.col("all_version_1").all().alias("legacy"), pl.col("any_context_usage").any().alias("with_context"),
            pl.col("any_quality").any().alias("with_quality"))
        blocks = fragments.statistic_blocks(analysis.mode_stats, flags.select("run_set_id", "scenario_id", "legacy"))
        modes = fragments.mode_aggregates(analysis.mode_runs, blocks, flags)
        keys = modes.select("run_set_id", "scenario_id", "mode").rows()
        self.modes = {key: orjson.Fragment(text) for key, text in zip(keys, modes["text"].to_list()) if text is not None}
        unrendered = modes.filter(pl.col("text").is_null()).select("run_set_id", "scenario_id", "mode")
        blocks = blocks.join(unrendered, on=["run_set_id", "scenario_id", "mode"], how="semi")
        keys = blocks.select("run_set_id", "scenario_id", "mode", "metric").rows()
        self.stats = {key: orjson.Fragment(text) for key, text in zip(keys, blocks["text"].to_list()) if text is not None}
        slow = blocks.filter(pl.col("text").is_null())
        if slow.height:
            rows = analysis.mode_stats[slow["row"]].select("run_set_id", "scenario_id", "mode", "metric", *ROBUST_FIELDS)
            for row, version_1 in zip(rows.iter_rows(), slow["legacy"]):
                self.stats[tuple(row[:4])] = _block(dict(zip(ROBUST_FIELDS, row[4:])), version_1)
        lists = fragments.paired_runs_lists(analysis.paired_runs)
        keys = lists.select("run_set_id", "scenario_id", "mode").rows()
        self.paired_runs = {key: orjson.Fragment(text) for key, text in zip(keys, lists["text"].to_list()) if text is not None}
        slow_keys = lists.filter(pl.col("text").is_null()).select("run_set_id", "scenario_id", "mode")
        if slow_keys.height:
            rows = analysis.paired_runs.join(slow_keys, on=["run_set_id", "scenario_id", "mode"], maintain_order="left")
            self.paired_runs.update(_group(rows.iter_rows(named=True), "run_set_id", "scenario_id", "mode"))

    def statistic(self, key: tuple, metric: str, legacy: bool) -> Any:
        """The statistic block of `metric` in the document of mode `key`."""
        row = self.stats.get((*key, metric))
        if self.rendered:
            if row is not None:
                return row
            depth = metric.count(".") + 3
            if (metric, legacy) not in self.empty:
                self.empty[(metric, legacy)] = fragments.empty_statistic(depth, legacy)
            return self.empty[(metric, legacy)]
        return _block(row, legacy)

    def paired_list(self, key: tuple) -> Any:
        """The pairedRuns list of the comparison `key`."""
        pairs = self.paired_runs.get(key, [])
        if type(pairs) is orjson.Fragment:
            return pairs
        return [{key: pair[column] for key, column in fragments.PAIR_FIELDS.items()} for pair in pairs]


def _block(row: dict | None, legacy: bool) -> dict:
    """The statistic block a document holds for a robustStatistic row (None: no row)."""
    if legacy or row is None or row["count"] == 0:
        return _statistic(row, legacy)
    return row  # made for this document alone: no copy


def _statistic(row: dict | None, legacy: bool) -> dict:
    fields, empty = (LEGACY_FIELDS, EMPTY_LEGACY) if legacy else (ROBUST_FIELDS, EMPTY_ROBUST)
    if row is None or row["count"] == 0:
        return dict(empty)
    return {name: row[name] for name in fields}


def _mode_aggregate(t: _Tables, key: tuple, legacy: bool, with_context: bool, with_quality: bool) -> dict:
    info = t.mode_runs.get(key)

    def stat(metric: str) -> Any:
        return t.statistic(key, metric, legacy)

    document: dict[str, Any] = {
        "runCount": info["run_count"] if info else 0,
        "verificationSuccessRate": info["verification_success_rate"] if info else None,
        "usageSources": list(info["usage_sources"]) if info else [],
    }
    for metric in MODE_METRICS:
        document[metric] = stat(metric)
    if not legacy:
        document["diagnostics"] = {name: stat(f"diagnostics.{name}") for name in DIAGNOSTIC_COUNTS}
    if with_context:
        document["contextUsage"] = {
            "sources": list(info["context_sources"]) if info else [],
            "profiles": list(info["context_profiles"]) if info else [],
            "measuredRuns": info["context_measured_runs"] if info else 0,
            "totalTokens": stat("contextUsage.totalTokens"),
            "items": {name: stat(f"contextUsage.items.{name}") for name in CONTEXT_ITEMS},
        }
    if with_quality:
        document["quality"] = {
            "sources": list(info["quality_sources"]) if info else [],
            "scores": {name: stat(f"quality.scores.{name}") for name in QUALITY_SCORES},
        }
    return document


def _comparison(t: _Tables, key: tuple, legacy: bool) -> dict:
    row = t.comparisons[key]
    allowed = row["claim_allowed"]
    token = {"p50": row["token_overhead_p50"], "p95": row["token_overhead_p95"]}
    time = {"p50": row["time_overhead_p50"], "p95": row["time_overhead_p95"]}
    document: dict[str, Any] = {
        "comparablePairs": row["comparable_pairs"],
        "tokenComparablePairs": row["token_comparable_pairs"],
        "timeComparablePairs": row["time_comparable_pairs"],
        "tokenOverheadPercent": token,
    }
    if not legacy:
        document["pairedOverheadPercent"] = dict(token)
        document["distributionDeltaPercent"] = {"p50": row["distribution_delta_p50"], "p95": row["distribution_delta_p95"]}
    document["timeOverheadPercent"] = time
    if not legacy:
        document["pairedRatioDiagnostics"] = {
            "pairCount": row["comparable_pairs"],
            "baselineMinimum": row["baseline_minimum"],
            "baselineP25": row["baseline_p25"],
            "baselineP50": row["baseline_p50"],
            "lowBaselineThreshold": row["low_baseline_threshold"],
            "lowBaselinePairCount": row["low_baseline_pair_count"],
        }
        document["pairedRuns"] = t.paired_list(key)
    document["claimStatus"] = "OBSERVATIONAL" if allowed else "NOT_COMPARABLE"
    document["claimAllowed"] = allowed
    document["reason"] = CLAIM_REASON_ALLOWED if allowed else CLAIM_REASON_DENIED
    if not legacy:
        document["tail"] = {
            "sampleMinimum": TAIL_SAMPLE_MINIMUM,
            "sampleCount": row["token_comparable_pairs"],
            "p95TokenOverheadPercent": token["p95"],
            "pairedOverheadP95Percent": token["p95"],
            "distributionP95DeltaPercent": row["distribution_delta_p95"],
            "outlierCount": row["tail_outlier_count"],
            "status": row["paired_status"],
            "pairedStatus": row["paired_status"],
            "distributionStatus": row["distribution_status"],
            "combinedInterpretation": row["combined_interpretation"],
        }
    return document


def _light_objectives(expected_profile: str | None, adaptive: dict) -> dict | None:
    if expected_profile != "light":
        return None
    p50, p95 = adaptive["tokenOverheadPercent"]["p50"], adaptive["tokenOverheadPercent"]["p95"]
    return {
        **LIGHT_OBJECTIVES,
        "status": "OBSERVATIONAL" if adaptive["claimAllowed"] else "NOT_VERIFIED",
        "p50Pass": None if p50 is None else p50 <= LIGHT_OBJECTIVES["p50TokenOverheadPercent"],
        "p95Pass": None if p95 is None else p95 <= LIGHT_OBJECTIVES["p95TokenOverheadPercent"],
    }


def _context_inflation(t: _Tables, key: tuple) -> dict:
    row = t.inflation[key]
    return {
        "status": row["status"],
        "comparablePairs": row["comparable_pairs"],
        "inflatedPairs": row["inflated_pairs"],
        "lightContextTokens": _statistic(t.inflation_stats.get((*key, "light")), legacy=True),
        "balancedContextTokens": _statistic(t.inflation_stats.get((*key, "balanced")), legacy=True),
        "blocking": False,
        "reason": INFLATION_REASONS[row["reason_key"]],
    }


def _outlier_analysis(t: _Tables, key: tuple) -> dict:
    modes = {}
    for mode in MODES:
        row = t.outlier_modes.get((*key, mode))
        modes[mode] = {
            "sampleCount": row["sample_count"] if row else 0,
            "measuredCount": row["measured_count"] if row else 0,
            "status": row["status"] if row else "NOT_ENOUGH_SAMPLES",
            "q1": row["q1"] if row else None,
            "q3": row["q3"] if row else None,
            "iqr": row["iqr"] if row else None,
            "median": row["median"] if row else None,
            "upperFence": row["upper_fence"] if row else None,
            "outliers": [
                {
                    "runId": outlier["run_id"],
                    "runIndex": outlier["run_index"],
                    "totalTokens": outlier["total_tokens"],
                    "scenarioMedianTokens": outlier["scenario_median_tokens"],
                    "ratioToMedian": outlier["ratio_to_median"],
                    "reasons": list(outlier["reasons"]),
                    "diagnosticSignals": list(outlier["diagnostic_signals"]),
                }
                for outlier in t.outliers.get((*key, mode), [])
            ],
        }
    return {"policy": OUTLIER_POLICY, "minimumSamples": OUTLIER_MINIMUM_SAMPLES, "modes": modes}


def scenario_document(t: _Tables, run_set: str, scenario: str, expected_profile: str | None) -> dict:
    infos = [t.mode_runs[(run_set, scenario, mode)] for mode in MODES if (run_set, scenario, mode) in t.mode_runs]
    legacy = all(info["all_version_1"] for info in infos)
    with_context = any(info["any_context_usage"] for info in infos)
    with_quality = any(info["any_quality"] for info in infos)
    comparisons: dict[str, Any] = {"direct": None}
    for mode in CANDIDATE_MODES:
        comparisons[mode] = _comparison(t, (run_set, scenario, mode), legacy)
    document: dict[str, Any] = {
        "schemaVersion": 1,
        "benchmarkVersion": "1" if legacy else "2",
        "runSetId": run_set,
        "scenarioId": scenario,
        "expectedProfile": expected_profile,
        "modeAggregates": {
            mode: t.modes.get((run_set, scenario, mode)) or _mode_aggregate(t, (run_set, scenario, mode), legacy, with_context,
                                                                            with_quality)
            for mode in MODES
        },
        "comparisons": comparisons,
        "lightObjectives": _light_objectives(expected_profile, comparisons["forgeloopAdaptive"]),
        "sourcePolicy": SOURCE_POLICY,
        "claimsAllowed": any(c["claimAllowed"] for c in comparisons.values() if c is not None),
        "generatedFromRunCount": sum(info["run_count"] for info in infos),
    }
    if with_context:
        document["contextInflation"] = _context_inflation(t, (run_set, scenario))
    if not legacy:
        document["outlierAnalysis"] = _outlier_analysis(t, (run_set, scenario))
    return document


def summary_document(run_set: str, documents: list[dict], tier: str | None) -> dict:
    legacy = all(doc["benchmarkVersion"] == "1" for doc in documents)
    summary: dict[str, Any] = {"schemaVersion": 1, "benchmarkVersion": "1" if legacy else "2", "runSetId": run_set}
    if not legacy:
        summary["tier"] = tier
    summary["scenarioCount"] = len(documents)
    summary["runCount"] = sum(doc["generatedFromRunCount"] for doc in documents)
    summary["claimsAllowed"] = any(doc["claimsAllowed"] for doc in documents)
    entries = []
    for doc in documents:
        entry = {
            "scenarioId": doc["scenarioId"],
            "expectedProfile": doc["expectedProfile"],
            "claimsAllowed": doc["claimsAllowed"],
            "lightObjectives": doc["lightObjectives"],
            "contextInflation": doc.get("contextInflation"),
        }
        if not legacy:
            entry["outlierAnalysis"] = doc.get("outlierAnalysis")
        entries.append(entry)
    summary["scenarios"] = entries
    return summary


def iter_documents(analysis: Analysis, expected_profiles: dict[str, str], tier: str | dict[str, str] | None = None,
                   rendered: bool = False) -> Iterator[RunSetDocuments]:
    """Every run set's scenario documents (scenarios in id order, as file names sort) and summary,
    run set by run set in id order. `rendered`: documents only to be written
    (`jsjson.dumps_bytes(document, 2)`), their mode aggregates and pairedRuns lists JSON text
    already (`fragments.py`); the summaries are plain."""
    tables = _Tables(analysis, rendered)
    for run_set in sorted(tables.scenarios):
        documents = RunSetDocuments(run_set)
        for scenario in sorted(tables.scenarios[run_set]):
            if scenario not in expected_profiles:
                documents.unknown_scenarios.append(scenario)
            documents.scenarios[scenario] = scenario_document(tables, run_set, scenario, expected_profiles.get(scenario))
        recorded = tier.get(run_set) if isinstance(tier, dict) else tier  # one for all, or per run set
        documents.summary = summary_document(run_set, list(documents.scenarios.values()), recorded)
        yield documents


def build_documents(analysis: Analysis, expected_profiles: dict[str, str], tier: str | dict[str, str] | None = None,
                    rendered: bool = False) -> list[RunSetDocuments]:
    """`iter_documents`, as a list."""
    return list(iter_documents(analysis, expected_profiles, tier, rendered))
