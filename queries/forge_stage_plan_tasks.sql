-- forge_stage_plan_tasks: the tasks of each staged plan event, as Python's json.loads keeps them, with the first rule a task breaks.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- A task id repeated inside one tasks object keeps its first place and its last value (json.loads does).
-- Inputs: forge_staged_plans(position, rid, run, ts_unix, revision, tasks) — plan events without a problem
-- so far, tasks the JSON text of their tasks object; the macros of forge_json_macros.
-- Output: position, run, task, plan_rid, revision, plan_ts_unix, node (the task's place in the object,
-- document order: 1, 2, ...), declared_difficulty, difficulty, tier (declared_difficulty when a non-empty string, else
-- difficulty: Python's `a or b`), route_length, route (the route list as JSON text), problem_field, problem_rule.
-- The members are listed from json_keys and the '$.*' values (in document order, repeated keys too),
-- not with json_each: joined laterally, that copies the tasks text into every task's row, so a plan
-- of a few thousand tasks ran the session out of memory.
WITH members AS (
  SELECT position, rid, run, ts_unix, revision, json_keys(tasks) AS keys, json_extract(tasks, '$.*') AS "values"
  FROM forge_staged_plans
),
listed AS (
  SELECT position, rid, run, ts_unix, revision, unnest(keys) AS task, unnest("values") AS value,
         unnest(range(1, len(keys) + 1)) AS node
  FROM members
),
kept AS (
  SELECT position, task, any_value(rid) AS plan_rid, any_value(run) AS run, any_value(ts_unix) AS plan_ts_unix,
         any_value(revision) AS revision, min(node) AS node, arg_max(value, node) AS value
  FROM listed
  GROUP BY position, task
),
fields AS (
  SELECT *, CAST(json_extract(value, ['$.declared_difficulty', '$.difficulty', '$.route']) AS VARCHAR[]) AS f
  FROM kept
),
judged AS (
  SELECT *,
         CASE
           WHEN CAST(value AS VARCHAR)[1] <> '{' THEN {'field': 'data.tasks.' || task, 'rule': 'must be an object'}
           WHEN NOT j_text_or_null(f[1]) THEN {'field': 'data.tasks.' || task || '.declared_difficulty', 'rule': 'must be a string or null'}
           WHEN NOT j_text_or_null(f[2]) THEN {'field': 'data.tasks.' || task || '.difficulty', 'rule': 'must be a string or null'}
           WHEN NOT (j_missing_or_null(f[3]) OR f[3][1] = '[')
             THEN {'field': 'data.tasks.' || task || '.route', 'rule': 'must be a list of routing decisions or null'}
         END AS problem
  FROM fields
)
SELECT position, run, task, plan_rid, revision, plan_ts_unix, node,
       j_text(f[1]) AS declared_difficulty,
       j_text(f[2]) AS difficulty,
       CASE WHEN j_text(f[1]) <> '' THEN j_text(f[1]) ELSE j_text(f[2]) END AS tier,
       CASE WHEN f[3][1] = '[' THEN CAST(json_array_length(f[3]) AS BIGINT) ELSE 0 END AS route_length,
       CASE WHEN f[3][1] = '[' THEN f[3] END AS route,
       problem.field AS problem_field, problem.rule AS problem_rule
FROM judged
