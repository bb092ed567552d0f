-- forgeloop_context_pairs: adaptive runs that resolved to light, paired by runIndex with balanced runs,
-- both with a complete HOST_REPORTED context total (all six items present) — the context-inflation check.
-- Inputs: the runs table; $run_set (a run set id, or NULL for all).
-- Output: run_set_id, scenario_id, run_index, light_context_tokens, balanced_context_tokens, inflated.
SELECT
  light.run_set_id,
  light.scenario_id,
  light.run_index,
  light.context_total_tokens AS light_context_tokens,
  balanced.context_total_tokens AS balanced_context_tokens,
  light.context_total_tokens > balanced.context_total_tokens AS inflated
FROM runs AS light
JOIN runs AS balanced
  ON balanced.run_set_id = light.run_set_id
 AND balanced.scenario_id = light.scenario_id
 AND balanced.run_index = light.run_index
 AND balanced.mode = 'forgeloopBalanced'
WHERE ($run_set::VARCHAR IS NULL OR light.run_set_id = $run_set::VARCHAR)
  AND light.mode = 'forgeloopAdaptive'
  AND light.meta_resolved_profile = 'light'
  AND light.context_total_tokens IS NOT NULL
  AND balanced.context_total_tokens IS NOT NULL
ORDER BY light.run_set_id, light.scenario_id, light.run_index
