"""The four ForgeLoop reports users know: outliers, tail, summary, regression.

Each `*_report` returns the exact JSON document ForgeLoop's script prints (keys in its
order), made as it is printed (`streamed.Streamed`: a report of every run set holds one run
set's part at a time); each `render_*` prints it for people. Reports cover the scenarios that have a
scenario file (given at ingest), in file-name order; runs of other scenarios are left out.
"""
from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, Any

from ..streamed import Streamed, parts
from .contract import MODES, OUTLIER_POLICY

if TYPE_CHECKING:
    import polars as pl
    from rich.console import Console

    from .aggregation import Aggregated
    from .stored import RunSetDocuments

OUTLIER_NOTE = "Outlier classification is a benchmark diagnostic. It never changes lifecycle truth or completion validity."
CLAIM_POLICY = "No efficiency claim is allowed when trusted measurements are unavailable or non-comparable."
REGRESSION_POLICY = (
    "EFFICIENCY_REGRESSION is an observational release-quality warning and never a ForgeLoop lifecycle failure."
)


def _with_file(result: Aggregated, scenario_ids: list[str]):
    """(run set documents, [scenario ids with a file that have runs in it]) per run set."""
    for docs in result.documents:
        yield docs, [s for s in scenario_ids if s in docs.scenarios]


def _run_count(docs: RunSetDocuments) -> int:
    return docs.summary["runCount"]


def outliers_report(result: Aggregated, scenario_ids: list[str]) -> Streamed:
    by_run_set = _by_run_set(result.analysis.outliers)
    counted = {"outliers": 0}

    def reports():
        for docs, scenarios in _with_file(result, scenario_ids):
            rows_by_key: dict[tuple, list[dict]] = {}
            for row in _rows(by_run_set, docs.run_set_id):
                rows_by_key.setdefault((row["scenario_id"], row["mode"]), []).append(row)
            for scenario in scenarios:
                rows = _outlier_rows(rows_by_key, scenario)
                if rows:
                    counted["outliers"] += len(rows)
                    yield {"runSetId": docs.run_set_id, "scenarioId": scenario, "outliers": rows}

    return Streamed("reports", reports(), lambda: {
        "schemaVersion": 1,
        "benchmarkVersion": "2",
        "policy": OUTLIER_POLICY,
        "runSetCount": len(result.documents),
        "outlierCount": counted["outliers"],
        "reports": None,
        "note": OUTLIER_NOTE,
    })


def _by_run_set(frame: pl.DataFrame) -> dict[tuple, pl.DataFrame]:
    """The frame's rows per run set: made into Python rows one run set at a time (`_rows`)."""
    return frame.partition_by("run_set_id", as_dict=True, maintain_order=True)


def _rows(by_run_set: dict[tuple, pl.DataFrame], run_set: str) -> list[dict]:
    part = by_run_set.get((run_set,))
    return [] if part is None else part.to_dicts()


def _outlier_rows(rows_by_key: dict[tuple, list[dict]], scenario: str) -> list[dict]:
    return [
        {
            "scenarioId": scenario,
            "mode": mode,
            "runId": row["run_id"],
            "totalTokens": row["total_tokens"],
            "scenarioMedianTokens": row["scenario_median_tokens"],
            "ratioToMedian": row["ratio_to_median"],
            "reasons": list(row["reasons"]),
            "diagnosticSignals": list(row["diagnostic_signals"]),
            "verificationCycles": row["verification_cycles"],
            "modelTurns": row["model_turns"],
            "toolCalls": row["tool_calls"],
            "retries": row["retries"],
            "correctionCycles": row["correction_cycles"],
        }
        for mode in MODES
        for row in rows_by_key.get((scenario, mode), [])
    ]


def _tail_scenario(document: dict, comparison_row: dict | None) -> dict:
    direct = document["modeAggregates"]["direct"]
    adaptive = document["modeAggregates"]["forgeloopAdaptive"]
    comparison = document["comparisons"]["forgeloopAdaptive"]
    paired = comparison.get("pairedOverheadPercent", {})
    distribution = comparison.get("distributionDeltaPercent", {})
    tail = comparison.get("tail", {})
    diagnostics = comparison.get("pairedRatioDiagnostics", {})
    direct_p50 = diagnostics.get("baselineP50")
    if direct_p50 is None:
        direct_p50 = direct["totalTokens"].get("p50")
    direct_p95, adaptive_p50, adaptive_p95 = direct["totalTokens"].get("p95"), adaptive["totalTokens"].get("p50"), adaptive["totalTokens"].get("p95")
    if comparison.get("pairedRuns"):
        # over the paired runs' own tokens, which the comparison computed already
        direct_p50, direct_p95 = comparison_row["baseline_p50"], comparison_row["baseline_p95"]
        adaptive_p50, adaptive_p95 = comparison_row["candidate_p50"], comparison_row["candidate_p95"]
    rate = adaptive.get("verificationSuccessRate")
    return {
        "scenarioId": document["scenarioId"],
        "expectedProfile": document["expectedProfile"],
        "totalRunsPerMode": direct.get("runCount", 0),
        "verificationSuccessRate": 1 if rate is None else rate,
        "directP50": direct_p50,
        "adaptiveP50": adaptive_p50,
        "distributionP50DeltaPercent": distribution.get("p50"),
        "directP95": direct_p95,
        "adaptiveP95": adaptive_p95,
        "distributionP95DeltaPercent": distribution.get("p95"),
        "pairedOverheadP50Percent": paired.get("p50"),
        "pairedOverheadP95Percent": paired.get("p95"),
        "lowBaselinePairCount": diagnostics.get("lowBaselinePairCount", 0),
        "comparablePairCount": comparison.get("tokenComparablePairs", 0),
        "pairedStatus": tail.get("pairedStatus", "NOT_ENOUGH_SAMPLES"),
        "distributionStatus": tail.get("distributionStatus", "NOT_ENOUGH_SAMPLES"),
        "combinedInterpretation": tail.get("combinedInterpretation", "TAIL_UNRESOLVED"),
        "pairedRuns": comparison.get("pairedRuns", []),
    }


def tail_report(result: Aggregated, scenario_ids: list[str]) -> Streamed:
    by_run_set = _by_run_set(result.analysis.comparisons.filter(mode="forgeloopAdaptive"))

    def run_sets():
        for docs, scenarios in _with_file(result, scenario_ids):
            comparison_rows = {row["scenario_id"]: row for row in _rows(by_run_set, docs.run_set_id)}
            yield {
                "runSetId": docs.run_set_id,
                "runCount": _run_count(docs),
                "scenarios": [
                    _tail_scenario(docs.scenarios[s], comparison_rows.get(s)) for s in scenarios
                ],
            }

    return Streamed("runSets", run_sets(), lambda: {
        "schemaVersion": 1,
        "benchmarkVersion": "2",
        "status": "MEASURED" if len(result.documents) else "NOT_MEASURED",  # an item per run set
        "runSets": None,
    })


def summary_report(result: Aggregated, scenario_ids: list[str]) -> Streamed:
    counted = {"claims allowed": False}

    def run_sets():
        for docs, scenarios in _with_file(result, scenario_ids):
            documents = [docs.scenarios[s] for s in scenarios]
            claims = any(doc["claimsAllowed"] for doc in documents)
            counted["claims allowed"] |= claims
            yield {
                "runSetId": docs.run_set_id,
                "runCount": _run_count(docs),
                "scenarioCount": len(documents),
                "claimsAllowed": claims,
                "scenarios": [
                    {
                        "scenarioId": doc["scenarioId"],
                        "expectedProfile": doc["expectedProfile"],
                        "claimsAllowed": doc["claimsAllowed"],
                        "comparisons": doc["comparisons"],
                        "lightObjectives": doc["lightObjectives"],
                        "modeAggregates": doc["modeAggregates"],
                        "contextInflation": doc.get("contextInflation"),
                    }
                    for doc in documents
                ],
            }

    return Streamed("runSets", run_sets(), lambda: {
        "schemaVersion": 1,
        "benchmarkVersion": "2",
        "status": "MEASURED" if len(result.documents) else "NOT_MEASURED",  # an item per run set
        "claimsAllowed": counted["claims allowed"],
        "scenarioCount": len(scenario_ids),
        "runSets": None,
        "claimPolicy": CLAIM_POLICY,
    })


def regression_report(result: Aggregated, scenario_ids: list[str]) -> Streamed:
    measured = {}
    for row in result.analysis.mode_runs.iter_rows(named=True):
        key = (row["run_set_id"], row["scenario_id"])
        measured[key] = measured.get(key, 0) + row["measured_usage_runs"]
    statuses: set[str] = set()

    def reports():
        for docs in result.documents:
            for scenario in scenario_ids:
                entry = _regression_entry(docs.run_set_id, scenario, docs.scenarios.get(scenario), measured)
                statuses.add(entry["status"])
                yield entry

    def fields() -> dict:
        if "EFFICIENCY_REGRESSION" in statuses:
            overall = "EFFICIENCY_REGRESSION"
        elif "NOT_COMPARABLE" in statuses:
            overall = "NOT_COMPARABLE"
        elif statuses <= {"NOT_MEASURED"}:
            overall = "NOT_MEASURED"
        else:
            overall = "OK"
        return {
            "status": overall,
            "blocking": False,
            "runSetCount": len(result.documents),
            "scenarioCount": len(scenario_ids),
            "reports": None,
            "policy": REGRESSION_POLICY,
        }

    return Streamed("reports", reports(), fields)


def _regression_entry(run_set: str, scenario: str, document: dict | None, measured: dict) -> dict:
    if document is None:
        return {"runSetId": run_set, "scenarioId": scenario, "status": "NOT_COMPARABLE"}
    objectives = document["lightObjectives"]
    if not measured.get((run_set, scenario)):
        status = "NOT_MEASURED"
    elif not document["claimsAllowed"]:
        status = "NOT_COMPARABLE"
    elif objectives and (objectives["p50Pass"] is False or objectives["p95Pass"] is False):
        status = "EFFICIENCY_REGRESSION"
    else:
        status = "OK"
    inflation = document.get("contextInflation")
    return {
        "runSetId": run_set,
        "scenarioId": scenario,
        "expectedProfile": document["expectedProfile"],
        "status": status,
        "claimsAllowed": document["claimsAllowed"],
        "contextInflation": inflation["status"] if inflation else None,
    }


# ---- for people (rich and the table helpers load only here: --json needs neither) -----------
def new_table(*args, **kwargs):
    from ..tables_text import new_table

    return new_table(*args, **kwargs)


def add_row(*args, **kwargs):
    from ..tables_text import add_row

    return add_row(*args, **kwargs)


def print_table(*args, **kwargs):
    from ..tables_text import print_table

    return print_table(*args, **kwargs)


def _text(value: Any) -> str:
    from ..jsjson import js_number_text

    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return js_number_text(value)
    return str(value)


def _percent(value: Any) -> str:
    if value is None:
        return "N/A"
    return ("+" if value > 0 else "") + _text(value) + "%"


def render_outliers(report: dict | Streamed, console: Console) -> None:
    entries, fields = parts(report, "reports")
    headers = ("Scenario", "Mode", "Run ID", "Tokens", "Median", "Ratio", "VerCycles", "Turns", "ToolCalls", "Retries", "Corrections", "Signals")
    shown = False
    for run_set, same_run_set in groupby(entries, key=lambda entry: entry["runSetId"]):  # a run set's entries come together
        table = new_table(headers, f"Token outliers in {run_set} ({OUTLIER_POLICY})", right=headers[3:11])
        for entry in same_run_set:
            for row in entry["outliers"]:
                add_row(table, (
                    row["scenarioId"], row["mode"], row["runId"],
                    *(_text(row[k]) for k in ("totalTokens", "scenarioMedianTokens", "ratioToMedian", "verificationCycles", "modelTurns", "toolCalls", "retries", "correctionCycles")),
                    ",".join(row["diagnosticSignals"]) or "-",
                ))
        print_table(console, table, key=(2,))  # the run id names the row
        shown = True
    if not shown:
        console.print("No token outliers detected under the TOKEN_IQR_1_5 policy.")
        return
    console.print(fields()["note"], markup=False)


def render_tail(report: dict | Streamed, console: Console) -> None:
    run_sets, _ = parts(report, "runSets")
    headers = ("Scenario", "Profile", "Direct P50", "Adaptive P50", "Dist P50 Δ", "Direct P95", "Adaptive P95", "Dist P95 Δ",
               "Paired P50", "Paired P95", "Low-base pairs", "Pairs", "Paired tail", "Distribution tail", "Combined")
    shown = False
    for run_set in run_sets:
        table = new_table(headers, f"Run set {run_set['runSetId']} ({run_set['runCount']} runs): adaptive vs direct tokens",
                          right=headers[2:12])
        for s in run_set["scenarios"]:
            add_row(table, (
                s["scenarioId"], _text(s["expectedProfile"]), _text(s["directP50"]), _text(s["adaptiveP50"]),
                _percent(s["distributionP50DeltaPercent"]), _text(s["directP95"]), _text(s["adaptiveP95"]),
                _percent(s["distributionP95DeltaPercent"]), _percent(s["pairedOverheadP50Percent"]),
                _percent(s["pairedOverheadP95Percent"]), str(s["lowBaselinePairCount"]), str(s["comparablePairCount"]),
                s["pairedStatus"], s["distributionStatus"], s["combinedInterpretation"],
            ))
        print_table(console, table)
        shown = True
    if not shown:
        console.print("No run sets measured.")


def render_summary(report: dict | Streamed, console: Console) -> None:
    from ..tables_text import aside

    run_sets, fields = parts(report, "runSets")
    headers = ("Scenario", "Profile", "Claims", "Direct p50 tokens", "Balanced overhead p50/p95", "Adaptive overhead p50/p95", "Light objectives")
    count = 0
    with aside(console) as (tables, copy):  # the line above the tables counts them
        for run_set in run_sets:
            table = new_table(headers, f"Run set {run_set['runSetId']} ({run_set['runCount']} runs)", right=headers[3:4])
            for s in run_set["scenarios"]:
                direct = s["modeAggregates"]["direct"]["totalTokens"]["p50"]
                overhead = {
                    mode: f"{_percent(s['comparisons'][mode]['tokenOverheadPercent']['p50'])} / {_percent(s['comparisons'][mode]['tokenOverheadPercent']['p95'])}"
                    for mode in ("forgeloopBalanced", "forgeloopAdaptive")
                }
                objectives = s["lightObjectives"]
                light = "-" if objectives is None else f"{objectives['status']} p50 {_text(objectives['p50Pass'])}, p95 {_text(objectives['p95Pass'])}"
                add_row(table, (s["scenarioId"], _text(s["expectedProfile"]), _text(s["claimsAllowed"]), _text(direct),
                                overhead["forgeloopBalanced"], overhead["forgeloopAdaptive"], light))
            print_table(tables, table)
            count += 1
        document = fields()
        console.print(f"Benchmark status: {document['status']}   run sets: {count}   "
                      f"claims allowed: {'yes (observational only)' if document['claimsAllowed'] else 'no'}", markup=False)
        copy()
    console.print(f"Claims policy: {document['claimPolicy']}", markup=False)


def render_regression(report: dict | Streamed, console: Console) -> None:
    entries, fields = parts(report, "reports")
    table = new_table(("Run set", "Scenario", "Profile", "Status", "Claims", "Context inflation"))  # one table: held whole
    for entry in entries:
        add_row(table, (entry["runSetId"], entry["scenarioId"], _text(entry.get("expectedProfile")), entry["status"],
                        _text(entry.get("claimsAllowed")), _text(entry.get("contextInflation"))))
    document = fields()
    console.print(f"Efficiency regression status: {document['status']}   run sets: {document['runSetCount']}", markup=False)
    print_table(console, table, key=(0, 1))
    console.print("This report is observational and does not change lifecycle completion.")


# the analysis frames each report reads beside the documents (`stored.TABLE_OF`)
FRAMES_USED = {"outliers": ("outliers",), "tail": ("comparisons",), "summary": (), "regression": ("mode_runs",)}

REPORTS = {
    "outliers": (outliers_report, render_outliers, None),
    "tail": (tail_report, render_tail, 2),
    "summary": (summary_report, render_summary, None),
    "regression": (regression_report, render_regression, None),
}
