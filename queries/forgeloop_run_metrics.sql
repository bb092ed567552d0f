-- forgeloop_run_metrics: every per-run value ForgeLoop summarises per mode, one row per run, a column per metric.
-- Inputs: the runs table; $run_set (a run set id, or NULL for all).
-- Output: run_set_id, scenario_id, mode, run_index, then one DOUBLE column per metric (NULL when the run
-- has no value), named as ForgeLoop's key below modeAggregates.<mode>: totalTokens, wallClockMs,
-- verificationCycles, comparableSteps, tokensPerComparableStep (tokens / steps where steps > 0),
-- diagnostics.<count>, contextUsage.totalTokens (complete HOST_REPORTED totals), contextUsage.items.<item>,
-- quality.scores.<score>.
SELECT
  run_set_id, scenario_id, mode, run_index,
  total_tokens::DOUBLE AS "totalTokens",
  wall_clock_ms AS "wallClockMs",
  verification_cycles::DOUBLE AS "verificationCycles",
  comparable_steps::DOUBLE AS "comparableSteps",
  CASE WHEN comparable_steps > 0 THEN total_tokens::DOUBLE / comparable_steps::DOUBLE END AS "tokensPerComparableStep",
  diag_verification_cycles::DOUBLE AS "diagnostics.verificationCycles",
  diag_model_turns::DOUBLE AS "diagnostics.modelTurns",
  diag_tool_calls::DOUBLE AS "diagnostics.toolCalls",
  diag_retries::DOUBLE AS "diagnostics.retries",
  diag_correction_cycles::DOUBLE AS "diagnostics.correctionCycles",
  diag_files_read::DOUBLE AS "diagnostics.filesRead",
  diag_files_written::DOUBLE AS "diagnostics.filesWritten",
  diag_context_refreshes::DOUBLE AS "diagnostics.contextRefreshes",
  context_total_tokens::DOUBLE AS "contextUsage.totalTokens",
  context_task_context::DOUBLE AS "contextUsage.items.taskContext",
  context_guides::DOUBLE AS "contextUsage.items.guides",
  context_history::DOUBLE AS "contextUsage.items.history",
  context_protocol_instructions::DOUBLE AS "contextUsage.items.protocolInstructions",
  context_repository_context::DOUBLE AS "contextUsage.items.repositoryContext",
  context_other::DOUBLE AS "contextUsage.items.other",
  quality_visual_quality AS "quality.scores.visualQuality",
  quality_responsive_quality AS "quality.scores.responsiveQuality",
  quality_accessibility AS "quality.scores.accessibility",
  quality_interaction_polish AS "quality.scores.interactionPolish",
  quality_requirements_completeness AS "quality.scores.requirementsCompleteness"
FROM runs
WHERE $run_set::VARCHAR IS NULL OR run_set_id = $run_set::VARCHAR
ORDER BY run_set_id, scenario_id, mode, run_index
