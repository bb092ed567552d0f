-- forgeloop_mode_runs: what ForgeLoop counts per run set, scenario and mode, beside the statistics.
-- Inputs: the runs table; $run_set (a run set id, or NULL for all).
-- Output: run_set_id, scenario_id, mode, run_count, pass_count, usage_sources (sorted distinct),
-- context_sources, context_profiles (sorted distinct, nulls left out), context_measured_runs (runs with a
-- complete HOST_REPORTED context total), quality_sources, light_runs (runs that resolved to light),
-- any_context_usage / any_quality (some run has the key), all_version_1 (every run is benchmarkVersion "1"),
-- measured_usage_runs (runs with PROVIDER_/HOST_REPORTED usage and totalTokens).
SELECT
  run_set_id,
  scenario_id,
  mode,
  count(*) AS run_count,
  count(*) FILTER (WHERE verification = 'PASS') AS pass_count,
  list_sort(list(DISTINCT usage_source)) AS usage_sources,
  list_sort(list(DISTINCT context_source)) AS context_sources,
  coalesce(list_sort(list(DISTINCT context_profile) FILTER (WHERE context_profile IS NOT NULL)), []) AS context_profiles,
  count(context_total_tokens) AS context_measured_runs,
  list_sort(list(DISTINCT quality_source)) AS quality_sources,
  count(*) FILTER (WHERE meta_resolved_profile = 'light') AS light_runs,
  bool_or(has_context_usage) AS any_context_usage,
  bool_or(has_quality) AS any_quality,
  bool_and(benchmark_version = '1') AS all_version_1,
  count(*) FILTER (WHERE usage_source IN ('PROVIDER_REPORTED', 'HOST_REPORTED') AND total_tokens IS NOT NULL)
    AS measured_usage_runs
FROM runs
WHERE $run_set::VARCHAR IS NULL OR run_set_id = $run_set::VARCHAR
GROUP BY run_set_id, scenario_id, mode
ORDER BY run_set_id, scenario_id, mode
