-- forgeloop_outlier_candidates: the measured runs (totalTokens present) the TOKEN_IQR_1_5 rule looks at,
-- with what the runaway signals are derived from.
-- Inputs: the runs table; $run_set (a run set id, or NULL for all).
-- Output: run_set_id, scenario_id, mode, run_index, run_id, total_tokens, the diagnostics counts
-- (NULL without diagnostics), verification_cycles (the run's own), diag_flags (host-reported signals).
SELECT
  run_set_id,
  scenario_id,
  mode,
  run_index,
  run_id,
  total_tokens,
  diag_model_turns,
  diag_tool_calls,
  diag_retries,
  diag_correction_cycles,
  diag_context_refreshes,
  diag_verification_cycles,
  verification_cycles,
  diag_flags
FROM runs
WHERE ($run_set::VARCHAR IS NULL OR run_set_id = $run_set::VARCHAR)
  AND total_tokens IS NOT NULL
ORDER BY run_set_id, scenario_id, mode, run_index
