"""`report confidence`: intervals on ForgeLoop's overhead figures, and the light objectives judged
on them.

For each run set, scenario and ForgeLoop mode (not direct):
- the paired token and time overhead p50 and p95: percentiles of one sample (the comparable pairs'
  overheads), whose interval is exact and needs no resampling: two of the sample's own values, the
  order statistics the binomial law of their ranks picks (`intervals.order_statistic_ends`);
- the token distribution delta p50 and p95 (benchmarkVersion 2 scenarios, as ForgeLoop has it), a
  difference of two percentiles, for which no exact interval exists: the percentile bootstrap, the
  token pairs resampled together (direct and mode tokens of a pair stay in one resample).
The estimate of each row is ForgeLoop's own rounded figure (`analysis.compare` computes both); an end
the sample cannot bound is open, and the other end is then a one-sided bound at (1 + level) / 2
(`sides`). An objective of a light scenario (adaptive token overhead p50 <= 35, p95 <= 60) is MET
when the interval's high end is at most the threshold, VIOLATED when its low end is above it, else
INCONCLUSIVE, with the pairs at which it would resolve with an 80 % chance (`intervals.repeats_to_resolve`);
NOT_VERIFIED, as ForgeLoop's own status says it, where the adaptive comparison allows no claim (it
has no token pair or no time pair).
"""
from __future__ import annotations

import math
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
# (metric, statistic, the sample of a paired percentile or None for a distribution delta, fraction,
#  the comparisons column of its estimate, pair count)
STATISTICS = (
    ("tokens", "pairedOverheadP50", "token_overhead_percent", 0.5, "token_overhead_p50", "token_comparable_pairs"),
    ("tokens", "pairedOverheadP95", "token_overhead_percent", 0.95, "token_overhead_p95", "token_comparable_pairs"),
    ("tokens", "distributionDeltaP50", None, 0.5, "distribution_delta_p50", "token_comparable_pairs"),
    ("tokens", "distributionDeltaP95", None, 0.95, "distribution_delta_p95", "token_comparable_pairs"),
    ("time", "pairedOverheadP50", "time_overhead_percent", 0.5, "time_overhead_p50", "time_comparable_pairs"),
    ("time", "pairedOverheadP95", "time_overhead_percent", 0.95, "time_overhead_p95", "time_comparable_pairs"),
)
# the objective, the statistic of the adaptive tokens it is judged on, and that statistic's fraction
OBJECTIVES = (("p50TokenOverheadPercent", "pairedOverheadP50", 0.5), ("p95TokenOverheadPercent", "pairedOverheadP95", 0.95))
SAMPLE_OF = {"token_overhead_percent": "token_pair", "time_overhead_percent": "time_pair"}
NOT_VERIFIED = "NOT_VERIFIED"  # the adaptive comparison allows no claim: ForgeLoop's lightObjectives status
EXACT = "order statistics, exact"
INDICATIVE_PAIRS = 20  # up to this many pairs a distribution delta's bootstrap ends can miss far more than they say
BOOTSTRAP = "bootstrap, pairs resampled together"
REPEATS_METHOD = (f"{intervals.REPEATS_CHANCE * 100:g} % chance to resolve, from the measured pairs "
                  f"(beta-binomial), at most {intervals.REPEATS_MAXIMUM}")


@dataclass(frozen=True)
class Settings:
    level: float = intervals.DEFAULT_LEVEL
    resamples: int = intervals.DEFAULT_RESAMPLES
    seed: int = intervals.DEFAULT_SEED


def load_pairs(warehouse: Warehouse, run_set: str | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The comparable pairs and the per-mode counts of the run set (or of all), from `runs`."""
    from .buckets import columns_used, runs_in_duckdb

    with runs_in_duckdb(warehouse, columns_used(QUERIES), run_set) as connection:
        return run_query(connection, "forgeloop_pairs"), run_query(connection, "forgeloop_mode_runs")


def sample_groups(long: pl.DataFrame, by: list[str]) -> tuple[list[tuple], np.ndarray, np.ndarray]:
    """The finite `value`s of each group of `long` (by the columns `by`), sorted within the group and
    laid end to end: (the groups' keys, the values, each group's count)."""
    ordered = long.filter(pl.col("value").is_finite()).sort([*by, "value"])
    sizes = ordered.group_by(by, maintain_order=True).len()
    return list(sizes.drop("len").iter_rows()), ordered["value"].to_numpy(), sizes["len"].to_numpy()


def sorted_samples(long: pl.DataFrame, by: list[str]) -> dict[tuple, np.ndarray]:
    """The finite `value`s of each group of `long` (by the columns `by`), sorted: group key -> values."""
    keys, values, sizes = sample_groups(long, by)
    ends = np.cumsum(sizes)
    return {key: values[end - size:end] for key, size, end in zip(keys, sizes, ends)}


def _exact_ends(pairs: pl.DataFrame, level: float) -> tuple[dict[tuple, tuple], dict[tuple, np.ndarray]]:
    """The exact interval of every paired percentile at once, (run set, scenario, mode, sample,
    fraction) -> (low, high), NaN for an open end; and each sample's values, sorted."""
    keys, values, sizes = sample_groups(pl.concat([
        pairs.filter(pl.col(flag)).select(*MODE, pl.lit(name).alias("sample"), pl.col(name).cast(pl.Float64).alias("value"))
        for name, flag in SAMPLE_OF.items()
    ]), [*MODE, "sample"])
    ends = {}
    for fraction in sorted({statistic[3] for statistic in STATISTICS}):
        low, high = intervals.order_statistic_ends(values, sizes, fraction, level)
        ends.update({(*key, fraction): pair for key, pair in zip(keys, zip(low.tolist(), high.tolist()))})
    starts = np.cumsum(sizes) - sizes
    return ends, {key: values[start:start + size] for key, start, size in zip(keys, starts, sizes)}


def _token_pairs(pairs: pl.DataFrame) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """(run set, scenario, mode) -> the direct and the mode tokens of its token pairs, in run index order."""
    token = pairs.filter(pl.col("token_pair")).sort([*MODE, "run_index"])
    sizes = token.group_by(MODE, maintain_order=True).len()
    direct, candidate = (token[name].cast(pl.Float64).to_numpy() for name in ("direct_tokens", "candidate_tokens"))
    starts = np.cumsum(sizes["len"].to_numpy()) - sizes["len"].to_numpy()
    return {key: (direct[start:start + size], candidate[start:start + size])
            for key, start, size in zip(sizes.drop("len").iter_rows(), starts, sizes["len"])}


def _delta_draws(tokens: dict, key: tuple, fraction: float, settings: Settings) -> tuple[np.ndarray, bool, bool] | None:
    """A distribution delta's bootstrap draws, (mode pK - direct pK) / direct pK * 100 over resamples of
    the token pairs, and whether its low and high ends are open; None without pairs. Each side is one
    sample's percentile whose error the other side shares (`open_ends(two_sample=True)`); the delta
    rises with the mode's percentile and falls with direct's."""
    found = tokens.get(key)
    if found is None or len(found[0]) == 0:
        return None
    direct, candidate = found
    rng = intervals.generator(settings.seed, *key, "token pairs", repr(fraction))
    draws = (intervals.paired_ratio_draws(direct, candidate, fraction, settings.resamples, rng) - 1.0) * 100.0
    low_open, high_open = intervals.open_ends(len(direct), fraction, settings.level, two_sample=True)
    return draws, low_open or high_open, high_open or low_open


def sides(low: float | None, high: float | None, level: float, *, approximate: bool = False) -> str:
    """What an interval's ends claim: both at `level` together, or one alone at (1 + level) / 2; for
    the bootstrap's (`approximate`), only about that (docs/statistics.md: far less on few pairs)."""
    one_sided = intervals.level_text((1.0 + level) / 2).replace("%", " %")  # 99.99995 %, never rounded to 100
    if low is None and high is None:
        return "unbounded"
    claim = ("two-sided" if low is not None and high is not None else
             f"one-sided lower bound at {one_sided}" if low is not None else f"one-sided upper bound at {one_sided}")
    return claim + (", approximate" if approximate else "")


def confidence_rows(pairs: pl.DataFrame, mode_runs: pl.DataFrame, settings: Settings) -> tuple[list[dict], dict, dict]:
    """The report's rows; the exact ends of each paired percentile as computed, before the rows round them
    (`_exact_ends`); and the sorted paired overheads of each (run set, scenario, mode, sample)."""
    comparisons, _ = compare(pairs, mode_runs)
    every_run_version_1 = mode_runs.group_by(["run_set_id", "scenario_id"]).agg(pl.col("all_version_1").all())
    version_1 = {(run_set, scenario) for run_set, scenario, every in every_run_version_1.iter_rows() if every}
    exact, samples = _exact_ends(pairs, settings.level)
    tokens = _token_pairs(pairs)
    ran = set(mode_runs.select(MODE).iter_rows())
    rows, drawn = [], []  # drawn: (row, draws, low open, high open) of the distribution deltas with an estimate
    for comparison in comparisons.iter_rows(named=True):
        key = (comparison["run_set_id"], comparison["scenario_id"], comparison["mode"])
        if key not in ran:
            continue  # the mode has no run in the scenario: nothing to say of it
        for metric, statistic, sample, fraction, column, count in STATISTICS:
            if sample is None and key[:2] in version_1:
                continue  # ForgeLoop's version-1 comparisons have no distribution deltas
            estimate = comparison[column]
            row = {"runSetId": key[0], "scenarioId": key[1], "mode": key[2], "metric": metric, "statistic": statistic,
                   "estimate": estimate, "low": None, "high": None, "pairs": comparison[count],
                   "sides": "unbounded", "method": EXACT if sample is not None else BOOTSTRAP}
            rows.append(row)
            if estimate is None:
                continue
            if sample is not None:
                low, high = exact.get((*key, sample, fraction), (math.nan, math.nan))
                row["low"] = None if math.isnan(low) else js_round4(low)
                row["high"] = None if math.isnan(high) else js_round4(high)
                row["sides"] = sides(row["low"], row["high"], settings.level)
                continue
            found = _delta_draws(tokens, key, fraction, settings)
            if found is not None:
                drawn.append((row, *found))
            if len(drawn) == BATCH:
                _set_ends(drawn, settings.level)
    _set_ends(drawn, settings.level)
    return rows, exact, samples


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
        row["sides"] = sides(row["low"], row["high"], level, approximate=True)
    drawn.clear()


def objective_rows(rows: list[dict], profiles: dict[str, str], settings: Settings, exact: dict[tuple, tuple],
                   samples: dict[tuple, np.ndarray]) -> list[dict]:
    """The light objectives of every light scenario, judged on the exact ends of the adaptive token
    rows' intervals as `confidence_rows` computed them (`exact`: the rows show them rounded);
    `samples`: the sorted paired overheads, from which an INCONCLUSIVE objective's repeats are computed."""
    by_key = {(row["runSetId"], row["scenarioId"], row["statistic"]): row for row in rows
              if row["mode"] == "forgeloopAdaptive" and row["metric"] == "tokens"}
    # ForgeLoop's claim policy: a comparison allows claims with at least one token pair and one time pair
    timed = {(row["runSetId"], row["scenarioId"]) for row in rows if row["mode"] == "forgeloopAdaptive"
             and row["metric"] == "time" and row["statistic"] == "pairedOverheadP50" and row["pairs"]}
    scenarios = dict.fromkeys((row["runSetId"], row["scenarioId"]) for row in rows)
    objectives = []
    for run_set, scenario in scenarios:
        if profiles.get(scenario) != "light":
            continue
        for objective, statistic, fraction in OBJECTIVES:
            row = by_key.get((run_set, scenario, statistic))
            threshold = LIGHT_OBJECTIVES[objective]
            sample = (run_set, scenario, "forgeloopAdaptive", "token_overhead_percent")
            ends = exact.get((*sample, fraction))
            needed = method = None
            if row is None or not row["pairs"] or ends is None or (run_set, scenario) not in timed:
                verdict = NOT_VERIFIED
            else:
                interval = intervals.Interval(*(None if math.isnan(end) else end for end in ends))
                if interval.at_most(threshold):
                    verdict = "MET"
                elif interval.above(threshold):
                    verdict = "VIOLATED"
                else:
                    verdict = "INCONCLUSIVE"
                    if row["estimate"] is not None:
                        needed = intervals.repeats_to_resolve(samples[sample], threshold, fraction, settings.level)
                        method = REPEATS_METHOD
            objectives.append({"runSetId": run_set, "scenarioId": scenario, "objective": objective,
                               "threshold": threshold, "verdict": verdict, "repeatsNeeded": needed,
                               "repeatsNeededMethod": method})
    return objectives


def confidence_report(warehouse: Warehouse, run_set: str | None = None, settings: Settings = Settings(),
                      profiles: dict[str, str] | None = None) -> dict:
    """The `report confidence --json` document of the run set (or of all)."""
    from .stored import expected_profiles

    pairs, mode_runs = load_pairs(warehouse, run_set)
    rows, exact, samples = confidence_rows(pairs, mode_runs, settings)
    profiles = expected_profiles(warehouse) if profiles is None else profiles
    return {"level": settings.level, "resamples": settings.resamples, "seed": settings.seed, "rows": rows,
            "objectives": objective_rows(rows, profiles, settings, exact, samples)}


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
                                        "estimate": "estimate", "low": "low", "high": "high", "pairs": "pairs",
                                        "sides": "sides", "method": "method"},
                       {"run_set_id": pl.String, "scenario_id": pl.String, "mode": pl.String, "metric": pl.String,
                        "statistic": pl.String, "estimate": pl.Float64, "low": pl.Float64, "high": pl.Float64,
                        "pairs": pl.Int64, "sides": pl.String, "method": pl.String})
    objectives = frame(report["objectives"], {**keys, "objective": "objective", "threshold": "threshold",
                                              "verdict": "verdict", "repeatsNeeded": "repeats_needed",
                                              "repeatsNeededMethod": "repeats_needed_method"},
                       {"run_set_id": pl.String, "scenario_id": pl.String, "objective": pl.String,
                        "threshold": pl.Float64, "verdict": pl.String, "repeats_needed": pl.Int64,
                        "repeats_needed_method": pl.String})
    return {CONFIDENCE_TABLE: confidence, OBJECTIVES_TABLE: objectives}


# ---- for people ---------------------------------------------------------------------------------
STATISTIC_NAMES = {"pairedOverheadP50": "paired p50", "pairedOverheadP95": "paired p95",
                   "distributionDeltaP50": "distribution Δ p50", "distributionDeltaP95": "distribution Δ p95"}
MODE_NAMES = {"forgeloopBalanced": "balanced", "forgeloopAdaptive": "adaptive"}


def render_confidence(report: dict, console: Console) -> None:
    """A title per run set, then a table per scenario: mode, statistic, estimate, the interval, pairs."""
    from ..tables_text import add_row, fit_line, new_table, print_table
    from .reports import _percent, _text

    level = intervals.level_text(report["level"])

    def end(value: float | None) -> str:
        return "open" if value is None else _percent(value)

    headers = ("Mode", "Statistic", "Estimate", f"{level} low", f"{level} high", "Pairs")
    by_scenario: dict[str, dict[str, list[dict]]] = {}
    for row in report["rows"]:
        by_scenario.setdefault(row["runSetId"], {}).setdefault(row["scenarioId"], []).append(row)
    width = console.width if console.is_terminal else None
    for run_set, scenarios in by_scenario.items():
        console.print(fit_line(f"Run set {run_set}: overhead against direct, {level} intervals (paired: exact, "
                               f"from the order statistics; distribution Δ: bootstrap of the pairs, "
                               f"{report['resamples']} resamples, seed {report['seed']})", width), markup=False)
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
                            entry["verdict"], repeats_text(entry)))
        print_table(console, table, key=(0, 1, 2))  # run set, scenario and objective name a verdict
    one_sided = intervals.level_text((1.0 + report["level"]) / 2)
    console.print(fit_line(f"open: the pairs cannot bound that end at {level}, whatever their distribution; the "
                           f"other end is then a one-sided {one_sided} bound (docs/statistics.md).", width), markup=False)
    if any(row["method"] == BOOTSTRAP and row["sides"] != "unbounded" for row in report["rows"]):
        console.print(fit_line(f"distribution Δ: the bootstrap's ends hold about {level}, not exactly: with "
                               f"{INDICATIVE_PAIRS} pairs or fewer read them as indicative (where the mode's overheads "
                               "form two clusters, the p50's high end lies below the truth 24% of the time at 5 pairs, "
                               "12% at 10; docs/statistics.md).", width), markup=False)
    if report["objectives"]:
        console.print(fit_line(f"Repeats needed: the pairs at which the objective resolves with an "
                               f"{intervals.REPEATS_CHANCE * 100:g}% chance, from the pairs measured.", width),
                      markup=False)
    if any(entry["verdict"] == NOT_VERIFIED for entry in report["objectives"]):
        console.print(fit_line("NOT_VERIFIED: the adaptive comparison allows no claim (ForgeLoop's claim policy: it "
                               "needs a token pair and a time pair, trusted usage and actual timing), so no verdict, "
                               "as ForgeLoop's lightObjectives status says.", width), markup=False)


def repeats_text(entry: dict) -> str:
    """An objective's repeats for people: the number, more than the maximum, or - (not computed)."""
    if entry["repeatsNeeded"] is None and entry["repeatsNeededMethod"] is not None:
        return f"> {intervals.REPEATS_MAXIMUM}"
    return "-" if entry["repeatsNeeded"] is None else str(entry["repeatsNeeded"])
