"""`report confidence`: bootstrap intervals on ForgeLoop's overhead figures, and the light
objectives judged on them.

For each run set, scenario and ForgeLoop mode (not direct):
- the paired token and time overhead p50 and p95, from the comparable pairs resampled;
- the token distribution delta p50 and p95 (benchmarkVersion 2 scenarios, as ForgeLoop has it),
  from the direct and the mode tokens of the token pairs, each resampled on its own.
The estimate of each row is ForgeLoop's own rounded figure (`analysis.compare` computes both);
the interval is `intervals.py`'s percentile interval, an end the sample cannot bound left open.
An objective of a light scenario (adaptive token overhead p50 <= 35, p95 <= 60) is MET when the
interval's high end is at most the threshold, VIOLATED when its low end is above it, else
INCONCLUSIVE, with the repeats that would settle it if the spread stayed as measured.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from .. import intervals
from ..numbers import js_round4
from ..sql.queries import run_query
from .analysis import MODE, compare
from .contract import LIGHT_OBJECTIVES

if TYPE_CHECKING:
    from rich.console import Console

    from ..storage import Warehouse

QUERIES = ("forgeloop_pairs", "forgeloop_mode_runs")
CONFIDENCE_TABLE = "forgeloop_confidence"
OBJECTIVES_TABLE = "forgeloop_objectives"
# (metric, statistic, the pair sample(s) it resamples, fraction, the comparisons column of its estimate, pair count)
STATISTICS = (
    ("tokens", "pairedOverheadP50", ("token_overhead_percent",), 0.5, "token_overhead_p50", "token_comparable_pairs"),
    ("tokens", "pairedOverheadP95", ("token_overhead_percent",), 0.95, "token_overhead_p95", "token_comparable_pairs"),
    ("tokens", "distributionDeltaP50", ("direct_tokens", "candidate_tokens"), 0.5, "distribution_delta_p50",
     "token_comparable_pairs"),
    ("tokens", "distributionDeltaP95", ("direct_tokens", "candidate_tokens"), 0.95, "distribution_delta_p95",
     "token_comparable_pairs"),
    ("time", "pairedOverheadP50", ("time_overhead_percent",), 0.5, "time_overhead_p50", "time_comparable_pairs"),
    ("time", "pairedOverheadP95", ("time_overhead_percent",), 0.95, "time_overhead_p95", "time_comparable_pairs"),
)
# the objective, the statistic of the adaptive tokens it is judged on, and that statistic's fraction
OBJECTIVES = (("p50TokenOverheadPercent", "pairedOverheadP50", 0.5), ("p95TokenOverheadPercent", "pairedOverheadP95", 0.95))
SAMPLE_OF = {"token_overhead_percent": "token_pair", "direct_tokens": "token_pair", "candidate_tokens": "token_pair",
             "time_overhead_percent": "time_pair"}


@dataclass(frozen=True)
class Settings:
    level: float = intervals.DEFAULT_LEVEL
    resamples: int = intervals.DEFAULT_RESAMPLES
    seed: int = intervals.DEFAULT_SEED


def load_pairs(warehouse: Warehouse, run_set: str | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The comparable pairs and the per-mode counts of the run set (or of all), from `runs`."""
    from .aggregation import columns_used, runs_in_duckdb

    with runs_in_duckdb(warehouse, columns_used(QUERIES), run_set) as connection:
        return run_query(connection, "forgeloop_pairs"), run_query(connection, "forgeloop_mode_runs")


def sorted_samples(long: pl.DataFrame, by: list[str]) -> dict[tuple, np.ndarray]:
    """The finite `value`s of each group of `long` (by the columns `by`), sorted: group key -> values."""
    ordered = long.filter(pl.col("value").is_finite()).sort([*by, "value"])
    sizes = ordered.group_by(by, maintain_order=True).len()
    values = ordered["value"].to_numpy()
    ends = np.cumsum(sizes["len"].to_numpy())
    return {key: values[end - size:end] for key, size, end in zip(sizes.drop("len").iter_rows(), sizes["len"], ends)}


def _samples(pairs: pl.DataFrame) -> dict[tuple, np.ndarray]:
    """(run set, scenario, mode, sample) -> the sample's values, sorted: each sample column where
    its pair counts (token or time pair), finite."""
    return sorted_samples(pl.concat([
        pairs.filter(pl.col(flag)).select(*MODE, pl.lit(name).alias("sample"), pl.col(name).cast(pl.Float64).alias("value"))
        for name, flag in SAMPLE_OF.items()
    ]), [*MODE, "sample"])


def _draws(samples: dict, key: tuple, names: tuple[str, ...], fraction: float,
           settings: Settings) -> tuple[np.ndarray, bool, bool] | None:
    """One statistic's bootstrap draws (a paired percentile, or a distribution delta) and whether
    its low and high ends are open; None without values."""
    drawn, ends = [], []
    for name in names:
        values = samples.get((*key, name))
        if values is None or len(values) == 0:
            return None
        rng = intervals.generator(settings.seed, *key, name, repr(fraction))
        drawn.append(intervals.percentile_draws(values, fraction, settings.resamples, rng))
        ends.append(intervals.open_ends(len(values), fraction, settings.level, two_sample=len(names) == 2))
    if len(drawn) == 1:
        return drawn[0], *ends[0]
    (direct, candidate), ((direct_low, direct_high), (candidate_low, candidate_high)) = drawn, ends
    # the delta rises with the mode's percentile and falls with direct's
    return (candidate - direct) / direct * 100.0, candidate_low or direct_high, candidate_high or direct_low


def confidence_rows(pairs: pl.DataFrame, mode_runs: pl.DataFrame, settings: Settings) -> list[dict]:
    comparisons, _ = compare(pairs, mode_runs)
    every_run_version_1 = mode_runs.group_by(["run_set_id", "scenario_id"]).agg(pl.col("all_version_1").all())
    version_1 = {(run_set, scenario) for run_set, scenario, every in every_run_version_1.iter_rows() if every}
    samples = _samples(pairs)
    ran = set(mode_runs.select(MODE).iter_rows())
    rows, drawn = [], []  # drawn: (row, draws, low open, high open) of the rows with an estimate
    for comparison in comparisons.iter_rows(named=True):
        key = (comparison["run_set_id"], comparison["scenario_id"], comparison["mode"])
        if key not in ran:
            continue  # the mode has no run in the scenario: nothing to say of it
        for metric, statistic, names, fraction, column, count in STATISTICS:
            if statistic.startswith("distribution") and key[:2] in version_1:
                continue  # ForgeLoop's version-1 comparisons have no distribution deltas
            estimate = comparison[column]
            row = {"runSetId": key[0], "scenarioId": key[1], "mode": key[2], "metric": metric, "statistic": statistic,
                   "estimate": estimate, "low": None, "high": None, "pairs": comparison[count]}
            rows.append(row)
            found = None if estimate is None else _draws(samples, key, names, fraction, settings)
            if found is not None:
                drawn.append((row, *found))
            if len(drawn) == BATCH:
                _set_ends(drawn, settings.level)
    _set_ends(drawn, settings.level)
    return rows


BATCH = 256  # intervals whose quantiles are taken in one pass (256 x 2000 draws: 4 MB)


def _set_ends(drawn: list, level: float) -> None:
    """The interval ends of the rows in `drawn` (row, draws, low open, high open), which it empties."""
    if not drawn:
        return
    tail = (1.0 - level) / 2.0
    ends = np.quantile(np.stack([draws for _, draws, _, _ in drawn]), [tail, 1.0 - tail], axis=1)
    for (row, _, low_open, high_open), low, high in zip(drawn, ends[0], ends[1]):
        row["low"] = None if low_open else js_round4(float(low))
        row["high"] = None if high_open else js_round4(float(high))
    drawn.clear()


def objective_rows(rows: list[dict], profiles: dict[str, str], settings: Settings) -> list[dict]:
    """The light objectives of every light scenario, judged on the adaptive token rows."""
    by_key = {(row["runSetId"], row["scenarioId"], row["statistic"]): row for row in rows
              if row["mode"] == "forgeloopAdaptive" and row["metric"] == "tokens"}
    scenarios = dict.fromkeys((row["runSetId"], row["scenarioId"]) for row in rows)
    objectives = []
    for run_set, scenario in scenarios:
        if profiles.get(scenario) != "light":
            continue
        for objective, statistic, fraction in OBJECTIVES:
            row = by_key.get((run_set, scenario, statistic))
            threshold = LIGHT_OBJECTIVES[objective]
            estimate = None if row is None else row["estimate"]
            interval = intervals.Interval(None, None) if row is None else intervals.Interval(row["low"], row["high"])
            if interval.at_most(threshold):
                verdict, needed = "MET", None
            elif interval.above(threshold):
                verdict, needed = "VIOLATED", None
            else:
                verdict = "INCONCLUSIVE"
                needed = intervals.repeats_needed(0 if row is None else row["pairs"], estimate, interval, threshold,
                                                  fraction, settings.level)
            objectives.append({"runSetId": run_set, "scenarioId": scenario, "objective": objective,
                               "threshold": threshold, "verdict": verdict, "repeatsNeeded": needed})
    return objectives


def confidence_report(warehouse: Warehouse, run_set: str | None = None, settings: Settings = Settings(),
                      profiles: dict[str, str] | None = None) -> dict:
    """The `report confidence --json` document of the run set (or of all)."""
    from .stored import expected_profiles

    pairs, mode_runs = load_pairs(warehouse, run_set)
    rows = confidence_rows(pairs, mode_runs, settings)
    profiles = expected_profiles(warehouse) if profiles is None else profiles
    return {"level": settings.level, "resamples": settings.resamples, "seed": settings.seed, "rows": rows,
            "objectives": objective_rows(rows, profiles, settings)}


def confidence_frames(report: dict) -> dict[str, pl.DataFrame]:
    """The report as the warehouse stores it: forgeloop_confidence and forgeloop_objectives."""
    computed_at = datetime.now(timezone.utc)
    run = {"level": report["level"], "resamples": report["resamples"], "seed": report["seed"], "computed_at": computed_at}

    def frame(rows: list[dict], names: dict[str, str], schema: dict[str, Any]) -> pl.DataFrame:
        columns = {snake: [row[camel] for row in rows] for camel, snake in names.items()}
        columns.update({name: [value] * len(rows) for name, value in run.items()})
        return pl.DataFrame(columns, schema={**schema, "level": pl.Float64, "resamples": pl.Int64, "seed": pl.Int64,
                                             "computed_at": pl.Datetime("us", "UTC")})

    keys = {"runSetId": "run_set_id", "scenarioId": "scenario_id"}
    confidence = frame(report["rows"], {**keys, "mode": "mode", "metric": "metric", "statistic": "statistic",
                                        "estimate": "estimate", "low": "low", "high": "high", "pairs": "pairs"},
                       {"run_set_id": pl.String, "scenario_id": pl.String, "mode": pl.String, "metric": pl.String,
                        "statistic": pl.String, "estimate": pl.Float64, "low": pl.Float64, "high": pl.Float64,
                        "pairs": pl.Int64})
    objectives = frame(report["objectives"], {**keys, "objective": "objective", "threshold": "threshold",
                                              "verdict": "verdict", "repeatsNeeded": "repeats_needed"},
                       {"run_set_id": pl.String, "scenario_id": pl.String, "objective": pl.String,
                        "threshold": pl.Float64, "verdict": pl.String, "repeats_needed": pl.Int64})
    return {CONFIDENCE_TABLE: confidence, OBJECTIVES_TABLE: objectives}


# ---- for people ---------------------------------------------------------------------------------
STATISTIC_NAMES = {"pairedOverheadP50": "paired p50", "pairedOverheadP95": "paired p95",
                   "distributionDeltaP50": "distribution Δ p50", "distributionDeltaP95": "distribution Δ p95"}
MODE_NAMES = {"forgeloopBalanced": "balanced", "forgeloopAdaptive": "adaptive"}


def render_confidence(report: dict, console: Console) -> None:
    """A title per run set, then a table per scenario: mode, statistic, estimate, the interval, pairs."""
    from ..tables_text import add_row, fit_line, new_table, print_table
    from .reports import _percent, _text

    level = f"{report['level'] * 100:g}%"

    def end(value: float | None) -> str:
        return "open" if value is None else _percent(value)

    headers = ("Mode", "Statistic", "Estimate", f"{level} low", f"{level} high", "Pairs")
    by_scenario: dict[str, dict[str, list[dict]]] = {}
    for row in report["rows"]:
        by_scenario.setdefault(row["runSetId"], {}).setdefault(row["scenarioId"], []).append(row)
    width = console.width if console.is_terminal else None
    for run_set, scenarios in by_scenario.items():
        console.print(fit_line(f"Run set {run_set}: overhead against direct, {level} bootstrap intervals "
                               f"({report['resamples']} resamples, seed {report['seed']})", width), markup=False)
        for scenario, rows in scenarios.items():
            table = new_table(headers, scenario, right=headers[2:])
            for row in rows:
                add_row(table, (MODE_NAMES.get(row["mode"], row["mode"]), f"{row['metric']} {STATISTIC_NAMES[row['statistic']]}",
                                _percent(row["estimate"]), end(row["low"]), end(row["high"]), _text(row["pairs"])))
            print_table(console, table, key=(0, 1))
    if not by_scenario:
        console.print("No run sets measured.")
    if report["objectives"]:
        headers = ("Run set", "Scenario", "Objective", "Verdict", "Repeats needed")
        table = new_table(headers, f"Light objectives (adaptive tokens), judged on the {level} intervals",
                          right=headers[4:])
        for entry in report["objectives"]:
            statistic = "p50" if entry["objective"].startswith("p50") else "p95"
            add_row(table, (entry["runSetId"], entry["scenarioId"], f"{statistic} ≤ {_text(entry['threshold'])}%",
                            entry["verdict"], _text(entry["repeatsNeeded"])))
        print_table(console, table, key=(0, 1))
    console.print(fit_line(f"open: the pairs cannot bound that end at {level}, whatever their distribution "
                           "(docs/statistics.md).", width), markup=False)
