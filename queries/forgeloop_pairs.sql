-- forgeloop_pairs: comparable pairs — a ForgeLoop mode's run and the direct run with the same runIndex.
-- Both runs must be trusted (PROVIDER_/HOST_REPORTED usage, PASS, metadata model, provider,
-- promptSpecFingerprint and projectRevision present, comparableSteps > 0) and agree on the metadata
-- that makes runs comparable (a missing value counts as null).
-- Inputs: the runs table; $run_set (a run set id, or NULL for all).
-- Output: run_set_id, scenario_id, mode, run_index, direct and candidate tokens and wall-clock ms,
-- token_pair / time_pair (the pair has usable tokens / times: both present, direct > 0), and the
-- overheads in percent, (mode - direct) / direct * 100, unrounded (NULL where the pair is not usable).
WITH judged AS (
  SELECT
    *,
    usage_source IN ('PROVIDER_REPORTED', 'HOST_REPORTED')
      AND verification = 'PASS'
      AND meta_model IS NOT NULL
      AND meta_provider IS NOT NULL
      AND meta_prompt_spec_fingerprint IS NOT NULL
      AND meta_project_revision IS NOT NULL
      AND coalesce(comparable_steps > 0, false) AS trusted
  FROM runs
  WHERE $run_set::VARCHAR IS NULL OR run_set_id = $run_set::VARCHAR
),
paired AS (
  SELECT
    candidate.run_set_id,
    candidate.scenario_id,
    candidate.mode,
    candidate.run_index,
    direct.total_tokens AS direct_tokens,
    candidate.total_tokens AS candidate_tokens,
    direct.wall_clock_ms AS direct_wall_clock_ms,
    candidate.wall_clock_ms AS candidate_wall_clock_ms,
    coalesce(candidate.total_tokens IS NOT NULL AND direct.total_tokens > 0, false) AS token_pair,
    coalesce(candidate.wall_clock_ms IS NOT NULL AND direct.wall_clock_ms > 0, false) AS time_pair
  FROM judged AS candidate
  JOIN judged AS direct
    ON direct.run_set_id = candidate.run_set_id
   AND direct.scenario_id = candidate.scenario_id
   AND direct.run_index = candidate.run_index
   AND direct.mode = 'direct'
  WHERE candidate.mode <> 'direct'
    AND candidate.trusted
    AND direct.trusted
    AND candidate.meta_model IS NOT DISTINCT FROM direct.meta_model
    AND candidate.meta_provider IS NOT DISTINCT FROM direct.meta_provider
    AND candidate.meta_prompt_spec_fingerprint IS NOT DISTINCT FROM direct.meta_prompt_spec_fingerprint
    AND candidate.meta_project_revision IS NOT DISTINCT FROM direct.meta_project_revision
    AND candidate.benchmark_version IS NOT DISTINCT FROM direct.benchmark_version
    AND candidate.meta_environment_class IS NOT DISTINCT FROM direct.meta_environment_class
    AND candidate.meta_node_version IS NOT DISTINCT FROM direct.meta_node_version
    AND candidate.meta_os IS NOT DISTINCT FROM direct.meta_os
    AND candidate.meta_arch IS NOT DISTINCT FROM direct.meta_arch
)
SELECT
  *,
  CASE WHEN token_pair
    THEN (candidate_tokens - direct_tokens)::DOUBLE / direct_tokens::DOUBLE * 100 END AS token_overhead_percent,
  CASE WHEN time_pair
    THEN (candidate_wall_clock_ms - direct_wall_clock_ms) / direct_wall_clock_ms * 100 END AS time_overhead_percent
FROM paired
ORDER BY run_set_id, scenario_id, mode, run_index
