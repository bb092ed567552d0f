"""ForgeLoop's numbers for whole warehouses at once: query results in, tidy frames out.

`analyse(connection, run_set)` runs the named queries and turns them, with the polars
statistics of `stats.py`, into the frames `aggregate.py` assembles documents from and the
warehouse stores for BI tools:

- mode_runs      per run set, scenario, mode: counts and sorted source lists
- mode_stats     per run set, scenario, mode, metric: robustStatistic, rounded as ForgeLoop does
- comparisons    per run set, scenario, candidate mode: pair counts, overheads, deltas, tail classes
- paired_runs    per token pair: tokens, rounded overhead, baseline regime
- outlier_modes  per run set, scenario, mode: the TOKEN_IQR_1_5 fence
- outliers       per outlying run: tokens, ratio to the median, runaway signals
- inflation      per run set and scenario: the light/balanced context comparison
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..duckdb_module import duckdb
from ..numbers import js_round4_expr
from ..sql.queries import run_query
from .contract import (
    CANDIDATE_MODES,
    LOW_BASELINE_RATIO,
    OUTLIER_MINIMUM_SAMPLES,
    RUNAWAY_SIGNALS,
    TAIL_REGRESSION_PERCENT,
    TAIL_SAMPLE_MINIMUM,
)
from .stats import metric_statistics, rounded, statistics

SCENARIO = ["run_set_id", "scenario_id"]
MODE = [*SCENARIO, "mode"]
round4 = js_round4_expr
QUERIES = ("forgeloop_mode_runs", "forgeloop_run_metrics", "forgeloop_outlier_candidates", "forgeloop_pairs", "forgeloop_context_pairs")


@dataclass
class Analysis:
    mode_runs: pl.DataFrame
    mode_stats: pl.DataFrame
    comparisons: pl.DataFrame
    paired_runs: pl.DataFrame
    outlier_modes: pl.DataFrame
    outliers: pl.DataFrame
    inflation: pl.DataFrame
    inflation_stats: pl.DataFrame


def analyse(connection: duckdb.DuckDBPyConnection, run_set: str | None = None) -> Analysis:
    """The analysis of the `runs` a session holds (registered as `runs`)."""
    metrics = run_query(connection, "forgeloop_run_metrics", run_set=run_set)
    names = [name for name in metrics.columns if name not in (*MODE, "run_index")]
    mode_stats = rounded(metric_statistics(metrics, MODE, names)).collect()
    results = {name: run_query(connection, name, run_set=run_set) for name in QUERIES if name != "forgeloop_run_metrics"}
    mode_runs = results["forgeloop_mode_runs"].with_columns(
        pl.when(pl.col("run_count") > 0)
        .then(round4(pl.col("pass_count") / pl.col("run_count")))
        .alias("verification_success_rate")
    )
    outlier_modes, outliers = token_outliers(results["forgeloop_outlier_candidates"], mode_runs)
    comparisons, paired_runs = compare(results["forgeloop_pairs"], mode_runs)
    comparisons = classify_tails(comparisons, outlier_modes)
    inflation, inflation_stats = context_inflation(results["forgeloop_context_pairs"], mode_runs)
    return Analysis(mode_runs, mode_stats, comparisons, paired_runs, outlier_modes, outliers, inflation, inflation_stats)


def _metric(stats: pl.DataFrame, metric: str, **columns: str) -> pl.LazyFrame:
    """One metric's rows of a `metric_statistics` table: the mode key and `columns` (field -> name)."""
    return stats.lazy().filter(pl.col("metric") == metric).select(*MODE, *(pl.col(k).alias(v) for k, v in columns.items()))


def compare(pairs: pl.DataFrame, mode_runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per candidate mode: paired token/time overhead, distribution deltas, low baselines."""
    keys = (
        mode_runs.select(SCENARIO).unique(maintain_order=True)
        .join(pl.DataFrame({"mode": list(CANDIDATE_MODES)}), how="cross")
    )
    token_pairs = pairs.filter("token_pair")
    # the four statistics in one pass: each value where its pair counts (a group without: count 0, as absent)
    masked = pairs.select(
        *MODE,
        *(pl.when("token_pair").then(pl.col(name)).alias(name)
          for name in ("token_overhead_percent", "direct_tokens", "candidate_tokens")),
        pl.when("time_pair").then(pl.col("time_overhead_percent")).alias("time_overhead_percent"),
    )
    stats = rounded(metric_statistics(masked, MODE, masked.columns[len(MODE):])).collect()
    overhead = _metric(stats, "token_overhead_percent", count="token_comparable_pairs", p50="token_overhead_p50",
                       p95="token_overhead_p95")
    time = _metric(stats, "time_overhead_percent", count="time_comparable_pairs", p50="time_overhead_p50",
                   p95="time_overhead_p95")
    baseline = _metric(stats, "direct_tokens", minimum="baseline_minimum", p25="baseline_p25", p50="baseline_p50",
                       p95="baseline_p95")
    candidate = _metric(stats, "candidate_tokens", p50="candidate_p50", p95="candidate_p95")
    counts = pairs.lazy().group_by(MODE).agg(pl.len().cast(pl.Int64).alias("comparable_pairs"))

    def delta(fraction: str) -> pl.Expr:
        base, cand = pl.col(f"baseline_{fraction}"), pl.col(f"candidate_{fraction}")
        return pl.when(base > 0).then(round4((cand - base) / base * 100))

    comparisons = (
        keys.lazy()
        .join(counts, on=MODE, how="left", maintain_order="left")
        .join(overhead, on=MODE, how="left", maintain_order="left")
        .join(time, on=MODE, how="left", maintain_order="left")
        .join(baseline, on=MODE, how="left", maintain_order="left")
        .join(candidate, on=MODE, how="left", maintain_order="left")
        .with_columns(
            pl.col("comparable_pairs", "token_comparable_pairs", "time_comparable_pairs").fill_null(0),
            delta("p50").alias("distribution_delta_p50"),
            delta("p95").alias("distribution_delta_p95"),
            pl.when(pl.col("baseline_p50") > 0)
            .then(round4(pl.col("baseline_p50") * LOW_BASELINE_RATIO))
            .alias("low_baseline_threshold"),
        )
        .with_columns(
            ((pl.col("token_comparable_pairs") > 0) & (pl.col("time_comparable_pairs") > 0)).alias("claim_allowed")
        )
        .collect()
    )
    paired_runs = (
        token_pairs.join(comparisons.select(*MODE, "low_baseline_threshold"), on=MODE, how="left")
        .select(
            *MODE,
            "run_index",
            "direct_tokens",
            "candidate_tokens",
            (pl.col("candidate_tokens") - pl.col("direct_tokens")).alias("absolute_delta_tokens"),
            round4(pl.col("token_overhead_percent")).alias("paired_overhead_percent"),
            pl.when(pl.col("direct_tokens") < pl.col("low_baseline_threshold"))
            .then(pl.lit("LOW_BASELINE_TOKEN_REGIME"))
            .otherwise(pl.lit("NORMAL"))
            .alias("baseline_regime"),
        )
        .sort([*MODE, "run_index"])
    )
    low_counts = paired_runs.group_by(MODE).agg(
        (pl.col("baseline_regime") == "LOW_BASELINE_TOKEN_REGIME").sum().cast(pl.Int64).alias("low_baseline_pair_count")
    )
    comparisons = comparisons.join(low_counts, on=MODE, how="left", maintain_order="left").with_columns(
        pl.col("low_baseline_pair_count").fill_null(0)
    )
    return comparisons, paired_runs


def token_outliers(candidates: pl.DataFrame, mode_runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """TOKEN_IQR_1_5 per mode: fence from the rounded p75 and iqr; outliers above it, with signals."""
    # the three statistics in one pass
    stats = rounded(metric_statistics(candidates, MODE, ["total_tokens", "diag_model_turns", "diag_tool_calls"])).collect()
    tokens = _metric(stats, "total_tokens", count="measured_count", p25="q1", p75="q3", iqr="iqr", p50="median")
    turns = _metric(stats, "diag_model_turns", p50="median_model_turns")
    tools = _metric(stats, "diag_tool_calls", p50="median_tool_calls")
    measured = pl.col("measured_count") >= OUTLIER_MINIMUM_SAMPLES
    fence = pl.col("q3") + 1.5 * pl.col("iqr")
    modes = (
        mode_runs.lazy()
        .select(*MODE, pl.col("run_count").alias("sample_count"))
        .join(tokens, on=MODE, how="left", maintain_order="left")
        .join(turns, on=MODE, how="left", maintain_order="left")
        .join(tools, on=MODE, how="left", maintain_order="left")
        .with_columns(pl.col("measured_count").fill_null(0))
        .with_columns(
            pl.when(measured).then(pl.lit("MEASURED")).otherwise(pl.lit("NOT_ENOUGH_SAMPLES")).alias("status"),
            *[pl.when(measured).then(pl.col(name)).alias(name) for name in ("q1", "q3", "iqr", "median")],
            pl.when(measured).then(fence).alias("fence"),
        )
        .collect()
    )
    outliers = (
        candidates.join(modes.filter(pl.col("status") == "MEASURED"), on=MODE, how="inner")
        .filter(pl.col("total_tokens") > pl.col("fence"))
        .with_columns(runaway_signals().alias("diagnostic_signals"))
        .select(
            *MODE,
            "run_index",
            "run_id",
            "total_tokens",
            pl.col("median").alias("scenario_median_tokens"),
            pl.when(pl.col("median") > 0).then(round4(pl.col("total_tokens") / pl.col("median"))).alias("ratio_to_median"),
            pl.lit(["TOKEN_IQR_OUTLIER"]).alias("reasons"),
            "diagnostic_signals",
            pl.coalesce("verification_cycles", "diag_verification_cycles").alias("verification_cycles"),
            pl.col("diag_model_turns").alias("model_turns"),
            pl.col("diag_tool_calls").alias("tool_calls"),
            pl.col("diag_retries").alias("retries"),
            pl.col("diag_correction_cycles").alias("correction_cycles"),
        )
        .sort([*MODE, "run_index"])
    )
    outlier_counts = outliers.group_by(MODE).agg(pl.len().cast(pl.Int64).alias("outlier_count"))
    modes = (
        modes.join(outlier_counts, on=MODE, how="left", maintain_order="left")
        .with_columns(round4(pl.col("fence")).alias("upper_fence"), pl.col("outlier_count").fill_null(0))
        .drop("fence")
    )
    return modes, outliers


def runaway_signals() -> pl.Expr:
    """The run's signals in ForgeLoop's order: host flags plus what its diagnostics show; a token
    outlier with none of them is an UNKNOWN_TOKEN_SPIKE."""
    def doubled(value: str, median: str) -> pl.Expr:
        return (pl.col(median) > 0) & (pl.col(value) > pl.col(median) * 2)

    derived = {
        "EXCESSIVE_MODEL_TURNS": doubled("diag_model_turns", "median_model_turns"),
        "EXCESSIVE_TOOL_CALLS": doubled("diag_tool_calls", "median_tool_calls"),
        "EXCESSIVE_VERIFICATION_CYCLES": pl.coalesce("diag_verification_cycles", "verification_cycles") > 1,
        "REPEATED_CONTEXT_REFRESH": pl.col("diag_context_refreshes") > 1,
        "UNEXPECTED_RETRY": pl.col("diag_retries") > 0,
        "CORRECTION_LOOP": pl.col("diag_correction_cycles") > 1,
    }
    present = [  # a host's own UNKNOWN_TOKEN_SPIKE flag is one of its flags, kept as the others are
        pl.when(pl.col("diag_flags").list.contains(pl.lit(signal)) | derived.get(signal, pl.lit(False)).fill_null(False))
        .then(pl.lit(signal))
        for signal in RUNAWAY_SIGNALS
    ]
    signals = pl.concat_list(present).list.drop_nulls()
    return pl.when(signals.list.len() > 0).then(signals).otherwise(pl.lit(["UNKNOWN_TOKEN_SPIKE"]))


def classify_tails(comparisons: pl.DataFrame, outlier_modes: pl.DataFrame) -> pl.DataFrame:
    """Paired, distribution and combined tail classes (v2) for every comparison."""
    enough = pl.col("token_comparable_pairs") >= TAIL_SAMPLE_MINIMUM
    paired = (
        pl.when(~enough | pl.col("token_overhead_p95").is_null()).then(pl.lit("NOT_ENOUGH_SAMPLES"))
        .when(pl.col("token_overhead_p95") > TAIL_REGRESSION_PERCENT).then(pl.lit("TAIL_REGRESSION"))
        .when(pl.col("tail_outlier_count") > 0).then(pl.lit("TAIL_WARNING"))
        .otherwise(pl.lit("TAIL_STABLE"))
    )
    distribution = (
        pl.when(~enough | pl.col("distribution_delta_p95").is_null()).then(pl.lit("NOT_ENOUGH_SAMPLES"))
        .when(pl.col("distribution_delta_p95") > TAIL_REGRESSION_PERCENT).then(pl.lit("TAIL_REGRESSION"))
        .otherwise(pl.lit("TAIL_ACCEPTABLE"))
    )
    p, d = pl.col("paired_status"), pl.col("distribution_status")
    combined = (
        pl.when(~enough | (p == "NOT_ENOUGH_SAMPLES") | (d == "NOT_ENOUGH_SAMPLES")).then(pl.lit("TAIL_UNRESOLVED"))
        .when(d == "TAIL_REGRESSION").then(pl.lit("TAIL_DISTRIBUTION_REGRESSION"))
        .when((p == "TAIL_REGRESSION") & (d == "TAIL_ACCEPTABLE") & (pl.col("low_baseline_pair_count") > 0))
        .then(pl.lit("TAIL_PAIRED_RATIO_SENSITIVE"))
        .when(p.is_in(["TAIL_STABLE", "TAIL_WARNING"]) & (d == "TAIL_ACCEPTABLE")).then(pl.lit("TAIL_CONSISTENT"))
        .when(p == d).then(pl.lit("TAIL_CONSISTENT"))
        .otherwise(pl.lit("TAIL_UNRESOLVED"))
    )
    outlier_counts = outlier_modes.select(*MODE, "outlier_count")
    return (
        comparisons.join(outlier_counts, on=MODE, how="left", maintain_order="left")
        .with_columns(pl.col("outlier_count").fill_null(0).alias("tail_outlier_count"))
        .drop("outlier_count")
        .with_columns(paired.alias("paired_status"), distribution.alias("distribution_status"))
        .with_columns(combined.alias("combined_interpretation"))
    )


def context_inflation(pairs: pl.DataFrame, mode_runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Light adaptive runs against balanced runs: status per scenario, and the two statistics."""
    light_runs = (
        mode_runs.filter(pl.col("mode") == "forgeloopAdaptive").select(*SCENARIO, "light_runs")
    )
    counts = pairs.group_by(SCENARIO).agg(
        pl.len().cast(pl.Int64).alias("comparable_pairs"), pl.col("inflated").sum().cast(pl.Int64).alias("inflated_pairs")
    )
    scenarios = mode_runs.select(SCENARIO).unique(maintain_order=True)
    inflation = (
        scenarios.join(light_runs, on=SCENARIO, how="left", maintain_order="left")
        .join(counts, on=SCENARIO, how="left", maintain_order="left")
        .with_columns(pl.col("light_runs", "comparable_pairs", "inflated_pairs").fill_null(0))
        .with_columns(
            pl.when(pl.col("light_runs") == 0).then(pl.lit("NO_LIGHT"))
            .when(pl.col("comparable_pairs") == 0).then(pl.lit("INCOMPLETE"))
            .when(pl.col("inflated_pairs") > 0).then(pl.lit("CONTEXT_INFLATION"))
            .otherwise(pl.lit("NOT_DETECTED"))
            .alias("reason_key")
        )
        .with_columns(
            pl.when(pl.col("reason_key").is_in(["NO_LIGHT", "INCOMPLETE"])).then(pl.lit("NOT_COMPARABLE"))
            .otherwise(pl.col("reason_key"))
            .alias("status")
        )
    )
    long = pl.concat(
        [
            pairs.select(*SCENARIO, pl.lit("light").alias("side"), pl.col("light_context_tokens").alias("value")),
            pairs.select(*SCENARIO, pl.lit("balanced").alias("side"), pl.col("balanced_context_tokens").alias("value")),
        ]
    )
    inflation_stats = rounded(statistics(long, [*SCENARIO, "side"]), ("average", "p50", "p95")).collect()
    return inflation, inflation_stats
