"""The ForgeLoop tables of the warehouse: what each holds, and every column's meaning and unit."""
from __future__ import annotations

from .scenarios import SCENARIO_COLUMNS
from .schema import RUN_COLUMNS, SOURCE_COLUMNS

Column = tuple[str, str, str]

RUNS = "runs"
MANIFEST = "ingest_manifest"
SCENARIOS = "scenarios"
RUN_SET_TIERS = "run_set_tiers"

_MODE_KEY: list[Column] = [
    ("run_set_id", "str", "run set id"),
    ("scenario_id", "str", "scenario id"),
    ("mode", "str", "direct, forgeloopBalanced or forgeloopAdaptive"),
]
_STAT_COLUMNS: list[Column] = [
    ("count", "i64", "values counted (finite, non-null)"),
    ("average", "f64", "mean, rounded to 4 decimals as ForgeLoop rounds"),
    ("minimum", "f64", "smallest value, unrounded"),
    ("p25", "f64", "25th percentile (linear), rounded"),
    ("p50", "f64", "median (linear), rounded"),
    ("p75", "f64", "75th percentile (linear), rounded"),
    ("p90", "f64", "90th percentile (linear), rounded"),
    ("p95", "f64", "95th percentile (linear), rounded"),
    ("maximum", "f64", "largest value, unrounded"),
    ("iqr", "f64", "p75 - p25 from unrounded quartiles, rounded"),
    ("mad", "f64", "median absolute deviation from the median, rounded"),
    ("outlier_count", "i64", "values above p75 + 1.5 * iqr (unrounded quartiles)"),
]

MANIFEST_COLUMNS: list[Column] = [
    ("kind", "str", "run or scenario"),
    ("source_root", "str", "the results (or scenarios) directory given to ingest, absolute"),
    ("path", "str", "the file, relative to source_root"),
    ("run_set_id", "str", "run set folder the file lies in (null outside one)"),
    ("status", "str", "accepted (stored now), unchanged (stored before, same bytes) or rejected"),
    ("field", "str", "for a rejection: the field that broke a rule (file for unreadable files)"),
    ("reason", "str", "for a rejection: the rule, in words"),
    ("size_bytes", "i64", "file size, bytes"),
    ("mtime_ns", "i64", "file modification time, nanoseconds since the epoch"),
    ("content_hash", "str", "sha256 of the file's bytes (null when not read)"),
    ("ingested_at", "datetime", "when this ingest ran (UTC)"),
]

FORGELOOP_TABLES: dict[str, tuple[str, list[Column]]] = {
    "runs": ("One row per accepted ForgeLoop benchmark run, flattened; partitioned by run set.", [*RUN_COLUMNS, *SOURCE_COLUMNS]),
    "scenarios": ("One row per ForgeLoop scenario specification file given to ingest.", SCENARIO_COLUMNS),
    "ingest_manifest": (
        "One row per file the last ingest of its source saw: accepted, unchanged or rejected with the reason.",
        MANIFEST_COLUMNS,
    ),
    "run_set_tiers": (
        "The runner's tier of each run set that ForgeLoop's own summary.json beside its raw runs names "
        "(RESULTS/aggregate/<runSetId>/summary.json, read by `ingest forgeloop`): what `aggregate` records as "
        "the tier when --tier is not given.",
        [
            ("run_set_id", "str", "run set id"),
            ("tier", "str", "smoke, evidence or tail"),
            ("source_path", "str", "the summary.json it was read from, absolute"),
        ],
    ),
    "forgeloop_mode_runs": (
        "Per run set, scenario and mode: run counts and the sources seen.",
        [
            *_MODE_KEY,
            ("run_count", "i64", "runs of the mode"),
            ("pass_count", "i64", "runs with verification PASS"),
            ("usage_sources", "list_str", "distinct usage sources, sorted"),
            ("context_sources", "list_str", "distinct context usage sources, sorted"),
            ("context_profiles", "list_str", "distinct context profiles, sorted"),
            ("context_measured_runs", "i64", "runs with a complete HOST_REPORTED context total"),
            ("quality_sources", "list_str", "distinct quality sources, sorted"),
            ("light_runs", "i64", "runs whose resolved profile is light"),
            ("any_context_usage", "bool", "some run has a contextUsage key"),
            ("any_quality", "bool", "some run has a quality key"),
            ("all_version_1", "bool", "every run is benchmarkVersion 1"),
            ("measured_usage_runs", "i64", "runs with trusted usage and totalTokens"),
            ("verification_success_rate", "f64", "pass_count / run_count, rounded to 4 decimals"),
        ],
    ),
    "forgeloop_mode_stats": (
        "Per run set, scenario, mode and metric: ForgeLoop's robustStatistic of the runs' values.",
        [*_MODE_KEY, ("metric", "str", "ForgeLoop's key below modeAggregates.<mode>, e.g. totalTokens, diagnostics.toolCalls"), *_STAT_COLUMNS],
    ),
    "forgeloop_comparisons": (
        "Per run set, scenario and candidate mode: the paired comparison with direct, and its tail classes.",
        [
            *_MODE_KEY,
            ("comparable_pairs", "i64", "comparable pairs (trusted runs with matching metadata)"),
            ("token_comparable_pairs", "i64", "pairs with usable tokens (direct > 0)"),
            ("time_comparable_pairs", "i64", "pairs with usable wall-clock times (direct > 0)"),
            ("token_overhead_p50", "f64", "median paired token overhead, percent, rounded"),
            ("token_overhead_p95", "f64", "95th percentile paired token overhead, percent, rounded"),
            ("time_overhead_p50", "f64", "median paired wall-clock overhead, percent, rounded"),
            ("time_overhead_p95", "f64", "95th percentile paired wall-clock overhead, percent, rounded"),
            ("baseline_minimum", "f64", "smallest direct tokens over token pairs"),
            ("baseline_p25", "f64", "25th percentile of direct tokens over token pairs, rounded"),
            ("baseline_p50", "f64", "median direct tokens over token pairs, rounded"),
            ("baseline_p95", "f64", "95th percentile direct tokens over token pairs, rounded"),
            ("candidate_p50", "f64", "median candidate tokens over token pairs, rounded"),
            ("candidate_p95", "f64", "95th percentile candidate tokens over token pairs, rounded"),
            ("distribution_delta_p50", "f64", "(candidate p50 - direct p50) / direct p50, percent, rounded"),
            ("distribution_delta_p95", "f64", "(candidate p95 - direct p95) / direct p95, percent, rounded"),
            ("low_baseline_threshold", "f64", "0.60 x direct p50, tokens, rounded"),
            ("claim_allowed", "bool", "at least one token pair and one time pair"),
            ("low_baseline_pair_count", "i64", "token pairs whose direct tokens are below the threshold"),
            ("tail_outlier_count", "i64", "token outliers of the mode (TOKEN_IQR_1_5)"),
            ("paired_status", "str", "paired tail class: TAIL_STABLE, TAIL_WARNING, TAIL_REGRESSION, NOT_ENOUGH_SAMPLES"),
            ("distribution_status", "str", "distribution tail class: TAIL_ACCEPTABLE, TAIL_REGRESSION, NOT_ENOUGH_SAMPLES"),
            ("combined_interpretation", "str", "TAIL_CONSISTENT, TAIL_PAIRED_RATIO_SENSITIVE, TAIL_DISTRIBUTION_REGRESSION or TAIL_UNRESOLVED"),
        ],
    ),
    "forgeloop_paired_runs": (
        "One row per token pair: a candidate mode's run and the direct run with the same runIndex.",
        [
            *_MODE_KEY,
            ("run_index", "i64", "runIndex shared by both runs"),
            ("direct_tokens", "i64", "direct run's total tokens"),
            ("candidate_tokens", "i64", "candidate run's total tokens"),
            ("absolute_delta_tokens", "i64", "candidate - direct, tokens"),
            ("paired_overhead_percent", "f64", "(candidate - direct) / direct, percent, rounded"),
            ("baseline_regime", "str", "LOW_BASELINE_TOKEN_REGIME below the threshold, else NORMAL"),
        ],
    ),
    "forgeloop_outliers": (
        "One row per token outlier (TOKEN_IQR_1_5) with its runaway signals.",
        [
            *_MODE_KEY,
            ("run_index", "i64", "runIndex"),
            ("run_id", "str", "run id"),
            ("total_tokens", "i64", "the run's total tokens"),
            ("scenario_median_tokens", "f64", "median tokens of the mode's measured runs, rounded"),
            ("ratio_to_median", "f64", "total tokens / median, rounded"),
            ("reasons", "list_str", "why it is an outlier (TOKEN_IQR_OUTLIER)"),
            ("diagnostic_signals", "list_str", "runaway signals, in ForgeLoop's order"),
            ("verification_cycles", "i64", "the run's verification cycles, else its diagnostics'"),
            ("model_turns", "i64", "diagnostics.modelTurns"),
            ("tool_calls", "i64", "diagnostics.toolCalls"),
            ("retries", "i64", "diagnostics.retries"),
            ("correction_cycles", "i64", "diagnostics.correctionCycles"),
        ],
    ),
    "forgeloop_outlier_fences": (
        "Per run set, scenario and mode: the TOKEN_IQR_1_5 fence over measured runs.",
        [
            *_MODE_KEY,
            ("sample_count", "i64", "runs of the mode"),
            ("measured_count", "i64", "runs with total tokens"),
            ("q1", "f64", "25th percentile tokens, rounded (null under 4 measured runs)"),
            ("q3", "f64", "75th percentile tokens, rounded"),
            ("iqr", "f64", "interquartile range, tokens, rounded"),
            ("median", "f64", "median tokens, rounded"),
            ("median_model_turns", "f64", "median diagnostics.modelTurns of measured runs"),
            ("median_tool_calls", "f64", "median diagnostics.toolCalls of measured runs"),
            ("status", "str", "MEASURED or NOT_ENOUGH_SAMPLES"),
            ("outlier_count", "i64", "runs above the fence"),
            ("upper_fence", "f64", "rounded q3 + 1.5 x rounded iqr, tokens, rounded"),
        ],
    ),
    "forgeloop_context_inflation": (
        "Per run set and scenario: do adaptive runs that resolved to light use more context than balanced runs?",
        [
            ("run_set_id", "str", "run set id"),
            ("scenario_id", "str", "scenario id"),
            ("light_runs", "i64", "adaptive runs resolved to light"),
            ("comparable_pairs", "i64", "light/balanced pairs with complete host-reported context"),
            ("inflated_pairs", "i64", "pairs where light context > balanced context"),
            ("reason_key", "str", "NO_LIGHT, INCOMPLETE, CONTEXT_INFLATION or NOT_DETECTED"),
            ("status", "str", "NOT_COMPARABLE, CONTEXT_INFLATION or NOT_DETECTED"),
        ],
    ),
    "forgeloop_documents": (
        "ForgeLoop's aggregate documents as the last `aggregate` wrote them (what the reports read): one row per run "
        "set and file; partitioned by run set.",
        [
            ("run_set_id", "str", "run set id"),
            ("file", "str", "<scenarioId>.json or summary.json"),
            ("document", "str", "the document's JSON text, exactly as written to the file"),
            ("runs_digest", "str", "digest of the run set's runs (the bytes of its partition of `runs`) the "
                                   "documents were computed from: the reports compare it with the runs stored now"),
        ],
    ),
    "forgeloop_confidence": (
        "Intervals on the overhead figures per run set, scenario and ForgeLoop mode (last `aggregate "
        "--confidence`, which `run-all` and `demo` run): exact for the paired percentiles, bootstrap for the "
        "distribution deltas.",
        [
            *_MODE_KEY,
            ("metric", "str", "tokens or time"),
            ("statistic", "str", "pairedOverheadP50, pairedOverheadP95, distributionDeltaP50 or distributionDeltaP95"),
            ("estimate", "f64", "ForgeLoop's own figure, percent, rounded (null without pairs)"),
            ("low", "f64", "low end of the interval, percent, rounded (null: the pairs cannot bound it)"),
            ("high", "f64", "high end of the interval, percent, rounded (null: the pairs cannot bound it)"),
            ("pairs", "i64", "token (tokens) or time (time) comparable pairs"),
            ("sides", "str", "what the ends claim: two-sided (at level), one-sided lower or upper bound at (1 + level) / 2 "
                             "(other end open) or unbounded; ', approximate' for the bootstrap"),
            ("method", "str", "order statistics, exact (paired percentiles) or bootstrap, pairs resampled together "
                              "(distribution deltas)"),
            ("level", "f64", "confidence level of the interval"),
            ("resamples", "i64", "bootstrap resamples (distribution deltas only)"),
            ("seed", "i64", "seed of the resampling (distribution deltas only)"),
            ("computed_at", "datetime", "when the report was computed (UTC)"),
        ],
    ),
    "forgeloop_objectives": (
        "Light objectives judged on the intervals: MET, VIOLATED, INCONCLUSIVE or NOT_VERIFIED (last "
        "`aggregate --confidence`).",
        [
            ("run_set_id", "str", "run set id"),
            ("scenario_id", "str", "scenario id (expectedProfile light)"),
            ("objective", "str", "p50TokenOverheadPercent or p95TokenOverheadPercent (adaptive against direct)"),
            ("threshold", "f64", "the objective's limit, percent (35 or 60)"),
            ("verdict", "str", "MET (high end at most the threshold), VIOLATED (low end above it), INCONCLUSIVE or "
                               "NOT_VERIFIED (no claim: no token or no time pair)"),
            ("repeats_needed", "i64", "for INCONCLUSIVE: the pairs at which it resolves with an 80 % chance, from the "
                                      "pairs measured (null: none measured, or more than the maximum)"),
            ("repeats_needed_method", "str", "how repeats_needed was computed, with its maximum (null: not computed)"),
            ("level", "f64", "confidence level of the interval"),
            ("resamples", "i64", "bootstrap resamples of the report (not used by the objectives)"),
            ("seed", "i64", "seed of the report's resampling (not used by the objectives)"),
            ("computed_at", "datetime", "when the report was computed (UTC)"),
        ],
    ),
}

# columns declared after a loopmeter that wrote the table without them: such a file is rewritten with
# them null by the next writer (`storage/rewrite.py`), whose own rows then hold them
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "forgeloop_confidence": ("sides", "method"),
    "forgeloop_objectives": ("repeats_needed_method",),
}
