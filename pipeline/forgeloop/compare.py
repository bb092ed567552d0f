"""`loopmeter compare BASELINE CANDIDATE`: two run sets, per scenario and mode, for tokens and
wall time, and pooled over the scenarios per mode: the ratio candidate / baseline with an
interval, the smallest change the runs could have detected, and a verdict against a margin.

- `baselineMedian`, `candidateMedian`, `ratio`: ForgeLoop's `modeAggregates.<mode>.totalTokens.p50`
  (`wallClockMs.p50`) of each side and their ratio, as ForgeLoop rounds them.
- `baselineRuns`, `candidateRuns`, `estimate`, `low`, `high`, `mde`, `regressedAt`: on the log
  values of each side's runs (positive values only, counted): the ratio of the geometric means,
  its t interval (`power.welch`), the true ratio whose interval would lie above 1 80 % of the time
  (`power.py`) and the one that would be REGRESSED 80 % of the time. With `adjust="direct"`, a
  ForgeLoop mode's figures for an adjusted metric are its log ratio minus the same scenario's
  direct-mode log ratio (the plain ones kept beside; the direct rows become ungated controls).
- The pooled rows weigh the scenario rows of a mode and metric by inverse variance.
- The intervals of the rows the gate reads hold all at once at `level` (Bonferroni,
  `power.family_levels`); each row says its own level. REGRESSED: the interval lies above
  1 + margin; IMPROVED: below 1 - margin; NO_CHANGE: inside both; INCONCLUSIVE otherwise.
- `gate`: what `--fail-on` reads: the gated rows that regressed, are inconclusive or are
  underpowered (an MDE above 1 + margin, or none: none either where neither side's runs vary).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from ..errors import LoopmeterError, usage_error
from ..numbers import js_round4
from . import power
from .contract import MODES
from .stats import metric_statistics, rounded
from .tables import RUNS

if TYPE_CHECKING:
    from ..storage import Warehouse

METRICS = (("tokens", "total_tokens"), ("time", "wall_clock_ms"))
VERDICTS = ("REGRESSED", "IMPROVED", "NO_CHANGE", "INCONCLUSIVE")
FAIL_ON = ("regression", "inconclusive", "underpowered")
ADJUSTMENTS = ("direct",)
METHOD = ("t on log values (the larger of Welch's and Student's variances, Welch's degrees of freedom); "
          "Bonferroni over the gated rows; inverse-variance pooled rows")
KEY = ["run_set_id", "scenario_id", "mode"]
_EMPTY = {"estimate": None, "low": None, "high": None, "mde": None, "regressedAt": None, "verdict": "INCONCLUSIVE"}


def _runs(warehouse: Warehouse, baseline: str, candidate: str) -> pl.DataFrame:
    present = warehouse.partitions(RUNS, "run_set_id") if warehouse.has_table(RUNS) else {}
    missing = [run_set for run_set in (baseline, candidate) if run_set not in present]
    if missing:
        known = ", ".join(sorted(present)[:10]) or "none"
        raise LoopmeterError(f"no run set {', '.join(map(repr, missing))} in {warehouse.root} (run sets: {known})")
    files = warehouse.partition_files(RUNS, "run_set_id", sorted({baseline, candidate}))
    return warehouse.read_files(RUNS, files, ["run_set_id", "scenario_id", "mode", *(column for _, column in METRICS)])


def verdict(low: float | None, high: float | None, margin: float) -> str:
    if low is not None and low > 1 + margin:
        return "REGRESSED"
    if high is not None and high < 1 - margin:
        return "IMPROVED"
    if low is not None and high is not None and low >= 1 - margin and high <= 1 + margin:
        return "NO_CHANGE"
    return "INCONCLUSIVE"


def _ratio(log_value: float) -> float | None:
    """exp(log_value) rounded as ForgeLoop rounds, None where it is beyond any double."""
    return js_round4(math.exp(log_value)) if log_value < 700 else None


def figures(estimate: float, variance: float, df: float, level: float, margin: float) -> dict:
    """A row's ratio, interval, minimum detectable effect and verdict, from its log estimate, the
    estimate's variance and degrees of freedom. An end beyond any double is None (open)."""
    if not (math.isfinite(estimate) and math.isfinite(variance) and df > 0):
        return dict(_EMPTY)
    half = power.half_width(variance, df, level)
    low, high = _ratio(estimate - half), _ratio(estimate + half)
    judged = (math.inf if low is None else low, math.inf if high is None else high)  # None: above any double
    row = {"estimate": _ratio(estimate), "low": low, "high": high, "mde": None, "regressedAt": None,
           "verdict": verdict(*judged, margin)}
    if variance > 0:  # runs without spread on either side say nothing of how far repeated runs fall apart
        detectable = power.detectable(variance, df, level)
        row.update(mde=_ratio(detectable), regressedAt=_ratio(math.log1p(margin) + detectable))
    return row


def _sides(runs: pl.DataFrame, baseline: str, candidate: str) -> pl.DataFrame:
    """One row per scenario, mode and metric of either run set: each side's median (ForgeLoop's),
    and the count, mean and variance of its positive values' logarithms."""
    names = {column: metric for metric, column in METRICS}
    medians = (rounded(metric_statistics(runs, KEY, list(names))).select(*KEY, "metric", "p50").collect()
               .with_columns(pl.col("metric").replace_strict(names)))
    long = pl.concat([runs.select(*KEY, pl.lit(metric).alias("metric"), pl.col(column).cast(pl.Float64).alias("value"))
                      for metric, column in METRICS])
    logs = (long.filter(pl.col("value").is_finite() & (pl.col("value") > 0))
            .group_by(*KEY, "metric")
            .agg(pl.len().alias("n"), pl.col("value").log().mean().alias("mean"), pl.col("value").log().var(ddof=1).alias("var")))
    both = medians.join(logs, on=[*KEY, "metric"], how="full", coalesce=True)
    side = {name: both.filter(pl.col("run_set_id") == run_set).drop("run_set_id").rename(
        {"p50": f"median_{name}", "n": f"n_{name}", "mean": f"mean_{name}", "var": f"var_{name}"})
        for run_set, name in ((baseline, "b"), (candidate, "c"))}
    rows = side["b"].join(side["c"], on=["scenario_id", "mode", "metric"], how="full", coalesce=True)
    order = {mode: index for index, mode in enumerate(MODES)}
    return (rows.with_columns(pl.col("mode").replace_strict(order, return_dtype=pl.Int32).alias("mode_order"),
                              (pl.col("metric") == "time").alias("metric_order"))
            .sort("scenario_id", "mode_order", "metric_order").drop("mode_order", "metric_order"))


def _welch_of(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    column = {name: frame[name].fill_null(0 if name.startswith("n_") else np.nan).to_numpy().astype(float)
              for name in ("n_b", "mean_b", "var_b", "n_c", "mean_c", "var_c")}
    return power.welch(column["n_b"], column["mean_b"], np.nan_to_num(column["var_b"], nan=0.0),
                       column["n_c"], column["mean_c"], np.nan_to_num(column["var_c"], nan=0.0))


def compare_run_sets(warehouse: Warehouse, baseline: str, candidate: str, margin: float = 0.10, level: float = 0.95,
                     adjust: str | None = None, adjust_tokens: bool = False, fail_on: tuple[str, ...] = ()) -> dict:
    """The `compare --json` document: a row per scenario, mode and metric of either run set, a
    pooled row per mode and metric, and what the gate (`fail_on`) reads of them."""
    frame = _sides(_runs(warehouse, baseline, candidate), baseline, candidate)
    plain = _welch_of(frame)
    adjusted_metrics = ({"time", "tokens"} if adjust_tokens else {"time"}) if adjust == "direct" else set()
    modes, metrics, scenarios = frame["mode"].to_list(), frame["metric"].to_list(), frame["scenario_id"].to_list()
    direct_at = {(s, k): i for i, (s, m, k) in enumerate(zip(scenarios, modes, metrics)) if m == "direct"}
    # the direct row of the same scenario and metric, for each row an adjustment applies to
    adjusted = np.array([k in adjusted_metrics and m != "direct" for m, k in zip(modes, metrics)])
    partner = np.array([direct_at.get((s, k), -1) for s, k in zip(scenarios, metrics)])
    nan = np.full(len(frame), np.nan)
    control = tuple(np.where(partner >= 0, part[np.maximum(partner, 0)], nan) for part in plain)
    both = power.difference(plain, control)
    read = tuple(np.where(adjusted, b, p) for b, p in zip(both, plain))  # the figures the gate reads
    gated = np.array([not (k in adjusted_metrics and m == "direct") for m, k in zip(modes, metrics)])

    pools = {}
    for mode in MODES:
        for metric, _ in METRICS:
            chosen = np.array([m == mode and k == metric for m, k in zip(modes, metrics)]) & gated
            found = power.pooled(*(part[chosen] for part in read)) if chosen.any() else (np.nan, np.nan, np.nan, 0)
            unadjusted = power.pooled(*(part[chosen] for part in plain)) if chosen.any() else found
            if found[3] >= 2:
                pools[(mode, metric)] = (found, unadjusted, chosen & adjusted)
    scenario_rows = int(np.sum(gated & np.isfinite(read[1])))
    row_level, pool_level = power.family_levels(level, scenario_rows, len(pools))
    if max(row_level, pool_level) >= 1.0:
        raise usage_error(f"--level {level!r} is too close to 1 for {scenario_rows} gated scenario rows and "
                          f"{len(pools)} pooled rows: each row's share of the error allowed, 1 - level, rounds to "
                          "nothing in a double; give a level further from 1")

    rows = []
    for i, record in enumerate(frame.iter_rows(named=True)):
        row = {"scenarioId": record["scenario_id"], "mode": record["mode"], "metric": record["metric"],
               "baselineMedian": record["median_b"], "candidateMedian": record["median_c"], "ratio": None,
               "baselineRuns": int(record["n_b"] or 0), "candidateRuns": int(record["n_c"] or 0)}
        if row["baselineMedian"] is not None and row["candidateMedian"] is not None and row["baselineMedian"] > 0:
            row["ratio"] = js_round4(row["candidateMedian"] / row["baselineMedian"])
        row.update(figures(read[0][i], read[1][i], read[2][i], row_level, margin), level=row_level,
                   gated=bool(gated[i]), adjusted=bool(adjusted[i]))
        row.update(_unadjusted(figures(plain[0][i], plain[1][i], plain[2][i], row_level, margin) if adjusted[i] else None))
        rows.append(row)
    pooled_rows = []
    for (mode, metric), (found, unadjusted, adjusted_rows) in pools.items():
        row = {"mode": mode, "metric": metric, "scenarios": found[3]}
        row.update(figures(found[0], found[1], found[2], pool_level, margin), level=pool_level, gated=True,
                   adjusted=bool(adjusted_rows.any()))
        row.update(_unadjusted(figures(unadjusted[0], unadjusted[1], unadjusted[2], pool_level, margin)
                               if adjusted_rows.any() else None))
        pooled_rows.append(row)
    report = {"baseline": baseline, "candidate": candidate, "margin": margin, "level": level, "method": METHOD,
              "adjust": adjust, "adjustedMetrics": sorted(adjusted_metrics),
              "family": {"scenarioRows": scenario_rows, "pooledRows": len(pools), "scenarioLevel": row_level,
                         "pooledLevel": pool_level},
              "rows": rows, "pooled": pooled_rows}
    report["gate"] = gate(report, fail_on)
    return report


def _unadjusted(found: dict | None) -> dict:
    keys = ("estimate", "low", "high", "verdict")
    return {f"unadjusted{key[0].upper()}{key[1:]}": None if found is None else found[key] for key in keys}


def underpowered(row: dict, margin: float) -> bool:
    return row["mde"] is None or row["mde"] > 1 + margin


def gate(report: dict, fail_on: tuple[str, ...] | list[str]) -> dict:
    """What `--fail-on` reads: among the gated rows (scenario and pooled), how many regressed, are
    inconclusive, are underpowered; `failed` when any condition named in `fail_on` holds."""
    gated = [row for row in (*report["rows"], *report["pooled"]) if row["gated"]]
    found = {"regression": sum(row["verdict"] == "REGRESSED" for row in gated),
             "inconclusive": sum(row["verdict"] == "INCONCLUSIVE" for row in gated),
             "underpowered": sum(underpowered(row, report["margin"]) for row in gated)}
    return {"failOn": list(fail_on), "rows": len(gated), "regressed": found["regression"],
            "inconclusive": found["inconclusive"], "underpowered": found["underpowered"],
            "failed": any(found[condition] for condition in fail_on)}


def counts(rows: list[dict]) -> dict[str, int]:
    return {name: sum(row["verdict"] == name for row in rows) for name in VERDICTS}
