"""A straightforward per-run Python port of ForgeLoop's aggregator and report scripts.

The benchmark's baseline (what a team would write first: read every file, loop over runs
in Python) and the test suite's independent oracle for loopmeter's columnar pipeline. It
follows the spec run by run, with plain lists and dicts, and the JavaScript rules for
numbers (`toFixed(4)` rounding, ascending left-to-right sums). It trusts its input: runs
must already be valid (loopmeter's ingest is what validates).

    python bench/forgeloop_port.py RESULTS SCENARIOS OUT [--tier T]
"""
from __future__ import annotations

import json
import math
import os
import sys
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path

MODES = ["direct", "forgeloopBalanced", "forgeloopAdaptive"]
SIGNALS = [
    "EXCESSIVE_MODEL_TURNS", "EXCESSIVE_TOOL_CALLS", "EXCESSIVE_VERIFICATION_CYCLES", "REPEATED_CONTEXT_REFRESH",
    "REPEATED_FILE_READ", "REPEATED_GUIDE_LOAD", "UNEXPECTED_RETRY", "CORRECTION_LOOP", "HOST_RETRY", "MODEL_STALL",
    "UNKNOWN_TOKEN_SPIKE",
]
DIAGNOSTIC_COUNTS = ["verificationCycles", "modelTurns", "toolCalls", "retries", "correctionCycles", "filesRead", "filesWritten", "contextRefreshes"]
CONTEXT_ITEMS = ["taskContext", "guides", "history", "protocolInstructions", "repositoryContext", "other"]
QUALITY_SCORES = ["visualQuality", "responsiveQuality", "accessibility", "interactionPolish", "requirementsCompleteness"]
ALLOWED = "Trusted usage, actual timing, verification, and matching comparability metadata are present."
DENIED = "Efficiency claims require trusted usage, actual timing, PASS verification, positive comparable steps, and matching metadata."


def fixed4(x):
    """Number(x.toFixed(4))."""
    with localcontext() as context:
        context.prec = 400
        value = float(Decimal(x).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))
    return 0.0 if value == 0 else value


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def sorted_finite(values):
    return sorted(v for v in values if is_num(v))


def pct(s, f):
    position = (len(s) - 1) * f
    lo, hi = math.floor(position), math.ceil(position)
    if lo == hi:
        return s[lo]
    return s[lo] + (s[hi] - s[lo]) * (position - lo)


def js_sum(values):
    total = 0.0  # JavaScript's numbers are doubles: beyond 2^53 each addition rounds
    for v in values:
        total += v
    return total


def is_integer(value):
    """JavaScript's Number.isInteger: 4.0 is 4."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def statistic(values):
    s = sorted_finite(values)
    if not s:
        return {"count": 0, "average": None, "p50": None, "p95": None, "minimum": None, "maximum": None}
    return {"count": len(s), "average": fixed4(js_sum(s) / len(s)), "p50": fixed4(pct(s, 0.5)), "p95": fixed4(pct(s, 0.95)), "minimum": s[0], "maximum": s[-1]}


def robust(values):
    s = sorted_finite(values)
    if not s:
        return {k: (0 if k in ("count", "outlierCount") else None) for k in
                ["count", "average", "minimum", "p25", "p50", "p75", "p90", "p95", "maximum", "iqr", "mad", "outlierCount"]}
    q1, med, q3 = pct(s, 0.25), pct(s, 0.5), pct(s, 0.75)
    iqr = q3 - q1
    fence = q3 + 1.5 * iqr
    dev = sorted(abs(v - med) for v in s)
    return {"count": len(s), "average": fixed4(js_sum(s) / len(s)), "minimum": s[0], "p25": fixed4(q1), "p50": fixed4(med),
            "p75": fixed4(q3), "p90": fixed4(pct(s, 0.9)), "p95": fixed4(pct(s, 0.95)), "maximum": s[-1], "iqr": fixed4(iqr),
            "mad": fixed4(pct(dev, 0.5)), "outlierCount": sum(1 for v in s if v > fence)}


def usage(run):
    u = dict(run.get("usage") or {})
    u.setdefault("source", "UNKNOWN")
    if u["source"] is None:
        u["source"] = "UNKNOWN"
    return u


def trusted(run):
    m = run["metadata"]
    steps = m.get("comparableSteps")
    return (usage(run)["source"] in ("PROVIDER_REPORTED", "HOST_REPORTED") and run["verification"] == "PASS"
            and m.get("model") is not None and m.get("provider") is not None and m.get("promptSpecFingerprint") is not None
            and m.get("projectRevision") is not None and steps is not None and steps > 0)


def comparable(a, b):
    if not trusted(a) or not trusted(b):
        return False
    fields = ["scenarioId", "model", "provider", "promptSpecFingerprint", "projectRevision", "benchmarkVersion", "environmentClass", "nodeVersion", "os", "arch"]
    return all(a["metadata"].get(f) == b["metadata"].get(f) for f in fields)


def tokens(run):
    return usage(run).get("totalTokens")


def pairs_of(direct_runs, mode_runs):
    by_index = {r["runIndex"]: r for r in direct_runs}
    return [(by_index[r["runIndex"]], r) for r in mode_runs if r["runIndex"] in by_index and comparable(by_index[r["runIndex"]], r)]


def comparison(direct_runs, mode_runs, legacy):
    pairs = pairs_of(direct_runs, mode_runs)
    token_pairs = [(d, v) for d, v in pairs if is_num(tokens(d)) and is_num(tokens(v)) and tokens(d) > 0]
    time_pairs = [(d, v) for d, v in pairs if is_num(d.get("wallClockMs")) and is_num(v.get("wallClockMs")) and d["wallClockMs"] > 0]
    token_stats = statistic([(tokens(v) - tokens(d)) / tokens(d) * 100 for d, v in token_pairs])
    time_stats = statistic([(v["wallClockMs"] - d["wallClockMs"]) / d["wallClockMs"] * 100 for d, v in time_pairs])
    allowed = token_stats["count"] > 0 and time_stats["count"] > 0
    doc = {"comparablePairs": len(pairs), "tokenComparablePairs": token_stats["count"], "timeComparablePairs": time_stats["count"],
           "tokenOverheadPercent": {"p50": token_stats["p50"], "p95": token_stats["p95"]}}
    if not legacy:
        direct_stats = robust([tokens(d) for d, _ in token_pairs])
        cand_stats = robust([tokens(v) for _, v in token_pairs])

        def delta(k):
            b, c = direct_stats[k], cand_stats[k]
            return fixed4((c - b) / b * 100) if is_num(b) and is_num(c) and b > 0 else None

        threshold = fixed4(direct_stats["p50"] * 0.6) if is_num(direct_stats["p50"]) and direct_stats["p50"] > 0 else None
        paired = []
        for d, v in token_pairs:
            dt, ct = tokens(d), tokens(v)
            paired.append({"runIndex": v["runIndex"], "directTokens": dt, "candidateTokens": ct, "absoluteDeltaTokens": ct - dt,
                           "pairedOverheadPercent": fixed4((ct - dt) / dt * 100),
                           "baselineRegime": "LOW_BASELINE_TOKEN_REGIME" if threshold is not None and dt < threshold else "NORMAL"})
        doc["pairedOverheadPercent"] = {"p50": token_stats["p50"], "p95": token_stats["p95"]}
        doc["distributionDeltaPercent"] = {"p50": delta("p50"), "p95": delta("p95")}
        doc["timeOverheadPercent"] = {"p50": time_stats["p50"], "p95": time_stats["p95"]}
        doc["pairedRatioDiagnostics"] = {"pairCount": len(pairs), "baselineMinimum": direct_stats["minimum"], "baselineP25": direct_stats["p25"],
                                         "baselineP50": direct_stats["p50"], "lowBaselineThreshold": threshold,
                                         "lowBaselinePairCount": sum(1 for p in paired if p["baselineRegime"] != "NORMAL")}
        doc["pairedRuns"] = paired
    else:
        doc["timeOverheadPercent"] = {"p50": time_stats["p50"], "p95": time_stats["p95"]}
    doc["claimStatus"] = "OBSERVATIONAL" if allowed else "NOT_COMPARABLE"
    doc["claimAllowed"] = allowed
    doc["reason"] = ALLOWED if allowed else DENIED
    return doc


def context_usage(run):
    c = run.get("contextUsage")
    resolved = run["metadata"].get("resolvedProfile")
    if c is None:
        return {"source": "UNKNOWN", "profile": resolved, "items": {k: None for k in CONTEXT_ITEMS}}
    items = c.get("items") or {}
    return {"source": c.get("source") or "UNKNOWN", "profile": c.get("profile") or resolved, "items": {k: items.get(k) for k in CONTEXT_ITEMS}}


def context_total(c):
    if c["source"] != "HOST_REPORTED" or any(c["items"][k] is None for k in CONTEXT_ITEMS):
        return None
    return js_sum([c["items"][k] for k in CONTEXT_ITEMS])


def quality(run):
    q = run.get("quality")
    if q is None:
        return {"source": "UNKNOWN", "scores": {k: None for k in QUALITY_SCORES}}
    scores = q.get("scores") or {}
    return {"source": q.get("source") or "UNKNOWN", "scores": {k: scores.get(k) for k in QUALITY_SCORES}}


def mode_aggregate(runs, legacy, with_context, with_quality):
    stat = statistic if legacy else robust
    passes = sum(1 for r in runs if r["verification"] == "PASS")
    per_step = [tokens(r) / r["comparableSteps"] if is_num(tokens(r)) and is_integer(r.get("comparableSteps")) and r["comparableSteps"] > 0 else None for r in runs]
    doc = {"runCount": len(runs), "verificationSuccessRate": fixed4(passes / len(runs)) if runs else None,
           "usageSources": sorted({usage(r)["source"] for r in runs}),
           "totalTokens": stat([tokens(r) for r in runs]), "wallClockMs": stat([r.get("wallClockMs") for r in runs]),
           "verificationCycles": stat([r.get("verificationCycles") for r in runs]), "comparableSteps": stat([r.get("comparableSteps") for r in runs]),
           "tokensPerComparableStep": stat(per_step)}
    if not legacy:
        doc["diagnostics"] = {k: robust([(r.get("diagnostics") or {}).get(k) for r in runs]) for k in DIAGNOSTIC_COUNTS}
    if with_context:
        cs = [context_usage(r) for r in runs]
        totals = [context_total(c) for c in cs]
        doc["contextUsage"] = {"sources": sorted({c["source"] for c in cs}), "profiles": sorted({c["profile"] for c in cs if c["profile"]}),
                               "measuredRuns": sum(1 for t in totals if t is not None), "totalTokens": stat(totals),
                               "items": {k: stat([c["items"][k] for c in cs]) for k in CONTEXT_ITEMS}}
    if with_quality:
        qs = [quality(r) for r in runs]
        doc["quality"] = {"sources": sorted({q["source"] for q in qs}), "scores": {k: stat([q["scores"][k] for q in qs]) for k in QUALITY_SCORES}}
    return doc


def signals(run, median_turns, median_tools):
    d = run.get("diagnostics") or {}
    found = set(d.get("flags") or [])

    def doubled(value, median):
        return is_num(value) and is_num(median) and median > 0 and value > median * 2

    if doubled(d.get("modelTurns"), median_turns):
        found.add("EXCESSIVE_MODEL_TURNS")
    if doubled(d.get("toolCalls"), median_tools):
        found.add("EXCESSIVE_TOOL_CALLS")
    cycles = d.get("verificationCycles") if d.get("verificationCycles") is not None else run.get("verificationCycles")
    if cycles is not None and cycles > 1:
        found.add("EXCESSIVE_VERIFICATION_CYCLES")
    if d.get("contextRefreshes") is not None and d["contextRefreshes"] > 1:
        found.add("REPEATED_CONTEXT_REFRESH")
    if d.get("retries") is not None and d["retries"] > 0:
        found.add("UNEXPECTED_RETRY")
    if d.get("correctionCycles") is not None and d["correctionCycles"] > 1:
        found.add("CORRECTION_LOOP")
    if not found:
        found.add("UNKNOWN_TOKEN_SPIKE")
    return [s for s in SIGNALS if s in found]


def outliers_for_mode(runs):
    measured = [r for r in runs if is_num(tokens(r))]
    if len(measured) < 4:
        return {"sampleCount": len(runs), "measuredCount": len(measured), "status": "NOT_ENOUGH_SAMPLES", "q1": None, "q3": None,
                "iqr": None, "median": None, "upperFence": None, "outliers": []}
    stats = robust([tokens(r) for r in measured])
    turns = robust([(r.get("diagnostics") or {}).get("modelTurns") for r in measured])["p50"]
    tools = robust([(r.get("diagnostics") or {}).get("toolCalls") for r in measured])["p50"]
    fence = stats["p75"] + 1.5 * stats["iqr"]
    out = [{"runId": r["runId"], "runIndex": r["runIndex"], "totalTokens": tokens(r), "scenarioMedianTokens": stats["p50"],
            "ratioToMedian": fixed4(tokens(r) / stats["p50"]) if stats["p50"] > 0 else None, "reasons": ["TOKEN_IQR_OUTLIER"],
            "diagnosticSignals": signals(r, turns, tools)} for r in measured if tokens(r) > fence]
    out.sort(key=lambda o: o["runIndex"])
    return {"sampleCount": len(runs), "measuredCount": len(measured), "status": "MEASURED", "q1": stats["p25"], "q3": stats["p75"],
            "iqr": stats["iqr"], "median": stats["p50"], "upperFence": fixed4(fence), "outliers": out}


def tail_classes(sample, p95, outlier_count, dist_p95, low_pairs):
    if sample < 20 or p95 is None:
        paired = "NOT_ENOUGH_SAMPLES"
    elif p95 > 60:
        paired = "TAIL_REGRESSION"
    elif outlier_count > 0:
        paired = "TAIL_WARNING"
    else:
        paired = "TAIL_STABLE"
    if sample < 20 or dist_p95 is None:
        dist = "NOT_ENOUGH_SAMPLES"
    elif dist_p95 > 60:
        dist = "TAIL_REGRESSION"
    else:
        dist = "TAIL_ACCEPTABLE"
    if sample < 20 or "NOT_ENOUGH_SAMPLES" in (paired, dist):
        combined = "TAIL_UNRESOLVED"
    elif dist == "TAIL_REGRESSION":
        combined = "TAIL_DISTRIBUTION_REGRESSION"
    elif paired == "TAIL_REGRESSION" and dist == "TAIL_ACCEPTABLE" and low_pairs > 0:
        combined = "TAIL_PAIRED_RATIO_SENSITIVE"
    elif paired in ("TAIL_STABLE", "TAIL_WARNING") and dist == "TAIL_ACCEPTABLE":
        combined = "TAIL_CONSISTENT"
    elif paired == dist:
        combined = "TAIL_CONSISTENT"
    else:
        combined = "TAIL_UNRESOLVED"
    return paired, dist, combined


def context_inflation(balanced, adaptive):
    light = [r for r in adaptive if r["metadata"].get("resolvedProfile") == "light"]
    by_index = {r["runIndex"]: r for r in balanced}
    pairs = []
    for r in light:
        b = by_index.get(r["runIndex"])
        lt = context_total(context_usage(r))
        bt = context_total(context_usage(b)) if b else None
        if b is not None and lt is not None and bt is not None:
            pairs.append((lt, bt))
    inflated = [p for p in pairs if p[0] > p[1]]
    status = "NOT_COMPARABLE" if not light or not pairs else ("CONTEXT_INFLATION" if inflated else "NOT_DETECTED")
    if status == "CONTEXT_INFLATION":
        reason = "Host-reported LIGHT context exceeded the comparable BALANCED context in at least one repeated run."
    elif status == "NOT_DETECTED":
        reason = "Comparable host-reported LIGHT and BALANCED context values did not show inflation."
    elif not light:
        reason = "The adaptive mode did not resolve to LIGHT for this scenario."
    else:
        reason = "Context inflation requires complete HOST_REPORTED context items for matching LIGHT and BALANCED runs."
    return {"status": status, "comparablePairs": len(pairs), "inflatedPairs": len(inflated), "lightContextTokens": statistic([p[0] for p in pairs]),
            "balancedContextTokens": statistic([p[1] for p in pairs]), "blocking": False, "reason": reason}


def aggregate(expected_profile, runs):
    """aggregateBenchmarkRuns for one scenario of one run set."""
    by_mode = {m: sorted((r for r in runs if r["mode"] == m), key=lambda r: r["runIndex"]) for m in MODES}
    legacy = all(r["benchmarkVersion"] == "1" for r in runs)
    with_context = any("contextUsage" in r for r in runs)
    with_quality = any("quality" in r for r in runs)
    comparisons = {m: None if m == "direct" else comparison(by_mode["direct"], by_mode[m], legacy) for m in MODES}
    outliers = None if legacy else {"policy": "TOKEN_IQR_1_5", "minimumSamples": 4, "modes": {m: outliers_for_mode(by_mode[m]) for m in MODES}}
    if not legacy:
        for m in MODES[1:]:
            c = comparisons[m]
            count = len(outliers["modes"][m]["outliers"])
            paired, dist, combined = tail_classes(c["tokenComparablePairs"], c["tokenOverheadPercent"]["p95"], count,
                                                  c["distributionDeltaPercent"]["p95"], c["pairedRatioDiagnostics"]["lowBaselinePairCount"])
            c["tail"] = {"sampleMinimum": 20, "sampleCount": c["tokenComparablePairs"], "p95TokenOverheadPercent": c["tokenOverheadPercent"]["p95"],
                         "pairedOverheadP95Percent": c["pairedOverheadPercent"]["p95"], "distributionP95DeltaPercent": c["distributionDeltaPercent"]["p95"],
                         "outlierCount": count, "status": paired, "pairedStatus": paired, "distributionStatus": dist, "combinedInterpretation": combined}
    adaptive = comparisons["forgeloopAdaptive"]
    light = None
    if expected_profile == "light":
        p50, p95 = adaptive["tokenOverheadPercent"]["p50"], adaptive["tokenOverheadPercent"]["p95"]
        light = {"p50TokenOverheadPercent": 35, "p95TokenOverheadPercent": 60, "status": "OBSERVATIONAL" if adaptive["claimAllowed"] else "NOT_VERIFIED",
                 "p50Pass": None if p50 is None else p50 <= 35, "p95Pass": None if p95 is None else p95 <= 60}
    doc = {"schemaVersion": 1, "benchmarkVersion": "1" if legacy else "2", "runSetId": runs[0]["runSetId"], "scenarioId": runs[0]["scenarioId"],
           "expectedProfile": expected_profile,
           "modeAggregates": {m: mode_aggregate(by_mode[m], legacy, with_context, with_quality) for m in MODES},
           "comparisons": comparisons, "lightObjectives": light, "sourcePolicy": "PROVIDER_REPORTED_OR_HOST_REPORTED_ONLY",
           "claimsAllowed": any(c and c["claimAllowed"] for c in comparisons.values()), "generatedFromRunCount": len(runs)}
    if with_context:
        doc["contextInflation"] = context_inflation(by_mode["forgeloopBalanced"], by_mode["forgeloopAdaptive"])
    if not legacy:
        doc["outlierAnalysis"] = outliers
    return doc


def summary(run_set, documents, tier):
    legacy = all(d["benchmarkVersion"] == "1" for d in documents)
    s = {"schemaVersion": 1, "benchmarkVersion": "1" if legacy else "2", "runSetId": run_set}
    if not legacy:
        s["tier"] = tier
    s.update({"scenarioCount": len(documents), "runCount": sum(d["generatedFromRunCount"] for d in documents),
              "claimsAllowed": any(d["claimsAllowed"] for d in documents), "scenarios": []})
    for d in documents:
        entry = {"scenarioId": d["scenarioId"], "expectedProfile": d["expectedProfile"], "claimsAllowed": d["claimsAllowed"],
                 "lightObjectives": d["lightObjectives"], "contextInflation": d.get("contextInflation")}
        if not legacy:
            entry["outlierAnalysis"] = d.get("outlierAnalysis")
        s["scenarios"].append(entry)
    return s


def read_run_sets(results: Path) -> dict[str, list[dict]]:
    """Every run of every run set, files in path order (the runs must be valid)."""
    run_sets = {}
    raw = results / "raw"
    for run_set in sorted(os.listdir(raw)):
        runs = []
        for directory, folders, files in os.walk(raw / run_set):
            folders.sort()
            for name in sorted(files):
                if name.endswith(".json"):
                    with open(os.path.join(directory, name), encoding="utf-8") as handle:
                        runs.append(json.load(handle))
        run_sets[run_set] = runs
    return run_sets


def read_profiles(scenarios: Path) -> dict[str, str]:
    profiles = {}
    for path in sorted(scenarios.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        profiles[document["scenarioId"]] = document["expectedProfile"]
    return profiles


def aggregate_run_sets(run_sets: dict[str, list[dict]], profiles: dict[str, str], tier=None) -> dict[str, tuple[dict, dict]]:
    """run set -> ({scenario id: document}, summary)."""
    result = {}
    for run_set, runs in run_sets.items():
        by_scenario: dict[str, list] = {}
        for run in runs:
            by_scenario.setdefault(run["scenarioId"], []).append(run)
        documents = {s: aggregate(profiles.get(s), by_scenario[s]) for s in sorted(by_scenario)}
        result[run_set] = (documents, summary(run_set, list(documents.values()), tier))
    return result


# ---- the four report scripts, run by run ------------------------------------------------------
def report_outliers(run_sets, profiles):
    reports = []
    for run_set, runs in run_sets.items():
        for scenario in sorted(profiles):
            scenario_runs = [r for r in runs if r["scenarioId"] == scenario]
            if not scenario_runs:
                continue
            by_mode = {m: sorted((r for r in scenario_runs if r["mode"] == m), key=lambda r: r["runIndex"]) for m in MODES}
            by_id = {r["runId"]: r for r in scenario_runs}
            rows = []
            for m in MODES:
                for o in outliers_for_mode(by_mode[m])["outliers"]:
                    r = by_id[o["runId"]]
                    d = r.get("diagnostics") or {}
                    cycles = r.get("verificationCycles")
                    rows.append({"scenarioId": scenario, "mode": m, "runId": o["runId"], "totalTokens": o["totalTokens"],
                                 "scenarioMedianTokens": o["scenarioMedianTokens"], "ratioToMedian": o["ratioToMedian"],
                                 "reasons": o["reasons"], "diagnosticSignals": o["diagnosticSignals"],
                                 "verificationCycles": cycles if cycles is not None else d.get("verificationCycles"),
                                 "modelTurns": d.get("modelTurns"), "toolCalls": d.get("toolCalls"), "retries": d.get("retries"),
                                 "correctionCycles": d.get("correctionCycles")})
            if rows:
                reports.append({"runSetId": run_set, "scenarioId": scenario, "outliers": rows})
    return {"schemaVersion": 1, "benchmarkVersion": "2", "policy": "TOKEN_IQR_1_5", "runSetCount": len(run_sets),
            "outlierCount": sum(len(r["outliers"]) for r in reports), "reports": reports,
            "note": "Outlier classification is a benchmark diagnostic. It never changes lifecycle truth or completion validity."}


def _tail_entry(a):
    direct, adaptive = a["modeAggregates"]["direct"], a["modeAggregates"]["forgeloopAdaptive"]
    comp = a["comparisons"]["forgeloopAdaptive"]
    paired, dist, tail, diag = comp.get("pairedOverheadPercent", {}), comp.get("distributionDeltaPercent", {}), comp.get("tail", {}), comp.get("pairedRatioDiagnostics", {})
    first = lambda *values: next((v for v in values if v is not None), None)  # noqa: E731  (JavaScript's ??)
    d50 = first(diag.get("baselineP50"), direct["totalTokens"].get("p50"))
    d95, a50, a95 = direct["totalTokens"].get("p95"), adaptive["totalTokens"].get("p50"), adaptive["totalTokens"].get("p95")
    if comp.get("pairedRuns"):
        dt = sorted(p["directTokens"] for p in comp["pairedRuns"])
        at = sorted(p["candidateTokens"] for p in comp["pairedRuns"])
        d50, d95, a50, a95 = fixed4(pct(dt, 0.5)), fixed4(pct(dt, 0.95)), fixed4(pct(at, 0.5)), fixed4(pct(at, 0.95))
    return {"scenarioId": a["scenarioId"], "expectedProfile": a["expectedProfile"], "totalRunsPerMode": first(direct.get("runCount"), 0),
            "verificationSuccessRate": first(adaptive.get("verificationSuccessRate"), 1), "directP50": d50, "adaptiveP50": a50,
            "distributionP50DeltaPercent": dist.get("p50"), "directP95": d95, "adaptiveP95": a95, "distributionP95DeltaPercent": dist.get("p95"),
            "pairedOverheadP50Percent": paired.get("p50"), "pairedOverheadP95Percent": paired.get("p95"),
            "lowBaselinePairCount": first(diag.get("lowBaselinePairCount"), 0), "comparablePairCount": first(comp.get("tokenComparablePairs"), 0),
            "pairedStatus": first(tail.get("pairedStatus"), "NOT_ENOUGH_SAMPLES"), "distributionStatus": first(tail.get("distributionStatus"), "NOT_ENOUGH_SAMPLES"),
            "combinedInterpretation": first(tail.get("combinedInterpretation"), "TAIL_UNRESOLVED"), "pairedRuns": comp.get("pairedRuns", [])}


def report_tail(run_sets, profiles):
    out = []
    for run_set, runs in run_sets.items():
        entries = [_tail_entry(aggregate(profiles[s], [r for r in runs if r["scenarioId"] == s]))
                   for s in sorted(profiles) if any(r["scenarioId"] == s for r in runs)]
        out.append({"runSetId": run_set, "runCount": len(runs), "scenarios": entries})
    return {"schemaVersion": 1, "benchmarkVersion": "2", "status": "MEASURED" if out else "NOT_MEASURED", "runSets": out}


def report_summary(run_sets, profiles):
    summaries = []
    for run_set, runs in run_sets.items():
        aggregates = [aggregate(profiles[s], [r for r in runs if r["scenarioId"] == s]) for s in sorted(profiles) if any(r["scenarioId"] == s for r in runs)]
        summaries.append({"runSetId": run_set, "runCount": len(runs), "scenarioCount": len(aggregates),
                          "claimsAllowed": any(a["claimsAllowed"] for a in aggregates),
                          "scenarios": [{"scenarioId": a["scenarioId"], "expectedProfile": a["expectedProfile"], "claimsAllowed": a["claimsAllowed"],
                                         "comparisons": a["comparisons"], "lightObjectives": a["lightObjectives"],
                                         "modeAggregates": a["modeAggregates"], "contextInflation": a.get("contextInflation")} for a in aggregates]})
    return {"schemaVersion": 1, "benchmarkVersion": "2", "status": "MEASURED" if summaries else "NOT_MEASURED",
            "claimsAllowed": any(s["claimsAllowed"] for s in summaries), "scenarioCount": len(profiles), "runSets": summaries,
            "claimPolicy": "No efficiency claim is allowed when trusted measurements are unavailable or non-comparable."}


def report_regression(run_sets, profiles):
    reports = []
    for run_set, runs in run_sets.items():
        for s in sorted(profiles):
            scenario_runs = [r for r in runs if r["scenarioId"] == s]
            if not scenario_runs:
                reports.append({"runSetId": run_set, "scenarioId": s, "status": "NOT_COMPARABLE"})
                continue
            a = aggregate(profiles[s], scenario_runs)
            if not any(usage(r)["source"] in ("PROVIDER_REPORTED", "HOST_REPORTED") and tokens(r) is not None for r in scenario_runs):
                status = "NOT_MEASURED"
            elif not a["claimsAllowed"]:
                status = "NOT_COMPARABLE"
            elif a["lightObjectives"] and (a["lightObjectives"]["p50Pass"] is False or a["lightObjectives"]["p95Pass"] is False):
                status = "EFFICIENCY_REGRESSION"
            else:
                status = "OK"
            reports.append({"runSetId": run_set, "scenarioId": s, "expectedProfile": profiles[s], "status": status,
                            "claimsAllowed": a["claimsAllowed"], "contextInflation": (a.get("contextInflation") or {}).get("status")})
    statuses = [r["status"] for r in reports]
    if "EFFICIENCY_REGRESSION" in statuses:
        overall = "EFFICIENCY_REGRESSION"
    elif "NOT_COMPARABLE" in statuses:
        overall = "NOT_COMPARABLE"
    elif not statuses or all(x == "NOT_MEASURED" for x in statuses):
        overall = "NOT_MEASURED"
    else:
        overall = "OK"
    return {"status": overall, "blocking": False, "runSetCount": len(run_sets), "scenarioCount": len(profiles), "reports": reports,
            "policy": "EFFICIENCY_REGRESSION is an observational release-quality warning and never a ForgeLoop lifecycle failure."}


REPORTS = {"outliers": report_outliers, "tail": report_tail, "summary": report_summary, "regression": report_regression}


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from loopmeter.jsjson import dumps  # the same JSON text writer, so outputs compare byte for byte

    results, scenarios, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    tier = argv[argv.index("--tier") + 1] if "--tier" in argv else None
    for run_set, (documents, summary_doc) in aggregate_run_sets(read_run_sets(results), read_profiles(scenarios), tier).items():
        directory = out / run_set
        directory.mkdir(parents=True, exist_ok=True)
        for scenario, document in documents.items():
            (directory / f"{scenario}.json").write_text(dumps(document, 2) + "\n", encoding="utf-8")
        (directory / "summary.json").write_text(dumps(summary_doc, 2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
