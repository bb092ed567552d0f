-- forge_plan_tasks: one row per task of a plan revision, with its declared tier.
-- Inputs: forge_plan_task_values.
-- Output: run, task, plan_rid, revision, plan_ts_unix, position, declared_difficulty, difficulty, tier
-- (declared_difficulty when it is a non-empty string, else difficulty — Python's `a or b`), route_length.
WITH fields AS (
  SELECT *,
         json_extract_string(value, '$.declared_difficulty') AS declared_difficulty,
         json_extract_string(value, '$.difficulty') AS difficulty
  FROM forge_plan_task_values
)
SELECT run, task, plan_rid, revision, plan_ts_unix, position, declared_difficulty, difficulty,
       CASE WHEN declared_difficulty <> '' THEN declared_difficulty ELSE difficulty END AS tier,
       CASE WHEN json_type(value, '$.route') = 'ARRAY' THEN CAST(json_array_length(value, '$.route') AS BIGINT) ELSE 0 END AS route_length
FROM fields
ORDER BY plan_ts_unix, plan_rid, position
