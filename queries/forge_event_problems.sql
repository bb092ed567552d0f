-- forge_event_problems: the first rule of the Forge format (version 1) each event's data breaks, by kind.
-- The rules reject what the seed's scripts could not read (a plan's tasks that are not an object, an
-- attempt without its number, a propensity that is not a probability, ...); values the seed tolerates
-- (an unknown status, a duration that is not a number) are kept. Unknown kinds have no rules.
-- Inputs: forge_candidates(position, kind, name, data) — envelopes that passed the container rules.
-- Output: position, field (a path like data.tasks.t1.route[0].propensity), rule.
WITH
texts AS (  -- data fields that must be strings or null, per kind (and event name)
  SELECT position, ['dwarf', 'status', 'reason', 'reviewed_commit', 'base_ref'] AS fields, json_extract(data, ['$.dwarf', '$.status', '$.reason', '$.reviewed_commit', '$.base_ref']) AS f
  FROM forge_candidates WHERE kind = 'attempt'
  UNION ALL
  SELECT position, ['role', 'spec', 'model', 'effort', 'harness'] AS fields, json_extract(data, ['$.role', '$.spec', '$.model', '$.effort', '$.harness']) AS f
  FROM forge_candidates WHERE kind = 'dispatch'
  UNION ALL
  SELECT position, ['status', 'commit', 'reviewed_commit', 'integration'] AS fields, json_extract(data, ['$.status', '$.commit', '$.reviewed_commit', '$.integration']) AS f
  FROM forge_candidates WHERE kind = 'event' AND name = 'merge'
  UNION ALL
  SELECT position, ['branch', 'parent', 'candidate', 'target'] AS fields, json_extract(data, ['$.branch', '$.parent', '$.candidate', '$.target']) AS f
  FROM forge_candidates WHERE kind = 'event' AND name = 'integrate_advanced'
  UNION ALL
  SELECT position, ['name', 'status', 'candidate', 'reviewed', 'base_ref', 'branch', 'horizon_rev', 'integrate_run'] AS fields, json_extract(data, ['$.name', '$.status', '$.candidate', '$.reviewed', '$.base_ref', '$.branch', '$.horizon_rev', '$.integrate_run']) AS f
  FROM forge_candidates WHERE kind = 'outcome'
),
text_values AS (
  SELECT position, fields, list_transform(f, lambda x: coalesce(json_type(x), 'NULL') IN ('VARCHAR', 'NULL')) AS ok
  FROM texts
),
text_problems AS (
  SELECT position, 1 AS step, 'data.' || fields[list_position(ok, false)] AS field, 'must be a string or null' AS rule
  FROM text_values WHERE list_position(ok, false) IS NOT NULL
),
numbers AS (  -- single values with their own rules
  SELECT position, kind,
         json_extract(data, ['$.n', '$.wall_started', '$.horizon_days', '$.added', '$.surviving',
                             '$.integrated_ts', '$.horizon_ts', '$.reverted_by', '$.files']) AS f
  FROM forge_candidates WHERE kind IN ('attempt', 'dispatch', 'outcome')
),
number_types AS (
  SELECT position, kind, f, list_transform(f, lambda x: coalesce(json_type(x), 'NULL')) AS t FROM numbers
),
number_problems AS (
  SELECT position, 2 AS step, problem.field, problem.rule FROM (
    SELECT position, CASE
      WHEN kind = 'attempt' AND NOT (t[1] IN ('UBIGINT', 'BIGINT')
                                     OR (t[1] = 'DOUBLE' AND CAST(f[1] AS DOUBLE) = floor(CAST(f[1] AS DOUBLE))))
        THEN {'field': 'data.n', 'rule': 'must be the attempt number, an integer'}
      WHEN kind = 'dispatch' AND t[2] NOT IN ('NULL', 'UBIGINT', 'BIGINT', 'DOUBLE')
        THEN {'field': 'data.wall_started', 'rule': 'must be unix seconds, a number, or null'}
      WHEN kind = 'dispatch' AND t[2] <> 'NULL' AND (CAST(f[2] AS DOUBLE) < 0 OR CAST(f[2] AS DOUBLE) >= 253402300800)
        THEN {'field': 'data.wall_started', 'rule': 'must be unix seconds between 1970 and 9999'}
      WHEN kind = 'outcome' AND t[3] NOT IN ('NULL', 'UBIGINT', 'BIGINT')
        THEN {'field': 'data.horizon_days', 'rule': 'must be a whole number of days or null'}
      WHEN kind = 'outcome' AND t[4] NOT IN ('NULL', 'UBIGINT', 'BIGINT')
        THEN {'field': 'data.added', 'rule': 'must be a count of lines or null'}
      WHEN kind = 'outcome' AND t[5] NOT IN ('NULL', 'UBIGINT', 'BIGINT')
        THEN {'field': 'data.surviving', 'rule': 'must be a count of lines or null'}
      WHEN kind = 'outcome' AND (t[6] NOT IN ('NULL', 'UBIGINT', 'BIGINT', 'DOUBLE')
                                 OR (t[6] <> 'NULL' AND (CAST(f[6] AS DOUBLE) < 0 OR CAST(f[6] AS DOUBLE) >= 253402300800)))
        THEN {'field': 'data.integrated_ts', 'rule': 'must be unix seconds between 1970 and 9999, or null'}
      WHEN kind = 'outcome' AND (t[7] NOT IN ('NULL', 'UBIGINT', 'BIGINT', 'DOUBLE')
                                 OR (t[7] <> 'NULL' AND (CAST(f[7] AS DOUBLE) < 0 OR CAST(f[7] AS DOUBLE) >= 253402300800)))
        THEN {'field': 'data.horizon_ts', 'rule': 'must be unix seconds between 1970 and 9999, or null'}
      WHEN kind = 'outcome' AND t[8] NOT IN ('NULL', 'ARRAY')
        THEN {'field': 'data.reverted_by', 'rule': 'must be a list of commits or null'}
      WHEN kind = 'outcome' AND t[8] = 'ARRAY' AND list_position(list_transform(json_type(f[8], '$[*]'), lambda x: x = 'VARCHAR'), false) IS NOT NULL
        THEN {'field': 'data.reverted_by', 'rule': 'must be a list of commits (strings)'}
      WHEN kind = 'outcome' AND t[9] NOT IN ('NULL', 'OBJECT')
        THEN {'field': 'data.files', 'rule': 'must be an object of path -> [added, surviving] or null'}
      WHEN kind = 'outcome' AND t[9] = 'OBJECT' AND TRY_CAST(f[9] AS MAP(VARCHAR, BIGINT[])) IS NULL
        THEN {'field': 'data.files', 'rule': 'must be an object of path -> [added, surviving] (whole numbers)'}
    END AS problem
    FROM number_types
  ) WHERE problem IS NOT NULL
),
plans AS (
  SELECT position, data, json_type(data, '$.tasks') AS tasks_t, json_type(data, '$.fractal_selection') AS fractal_t
  FROM forge_candidates WHERE kind = 'plan'
),
plan_problems AS (
  SELECT position, 3 AS step, problem.field, problem.rule FROM (
    SELECT position, CASE
      WHEN coalesce(fractal_t, 'NULL') NOT IN ('OBJECT', 'NULL')
        THEN {'field': 'data.fractal_selection', 'rule': 'must be an object or null'}
      WHEN coalesce(tasks_t, 'NULL') NOT IN ('OBJECT', 'NULL')
        THEN {'field': 'data.tasks', 'rule': 'must be an object of task id -> task'}
    END AS problem
    FROM plans
  ) WHERE problem IS NOT NULL
),
plan_tasks AS (
  SELECT p.position, t.key AS task, t.id AS node, t.type AS task_t, t.value
  FROM plans p, json_each(p.data, '$.tasks') t
  WHERE p.tasks_t = 'OBJECT'
),
task_problems AS (
  SELECT position, 4 AS step, 'data.tasks.' || task || problem.suffix AS field, problem.rule FROM (
    SELECT position, task, node, CASE
      WHEN task_t <> 'OBJECT' THEN {'suffix': '', 'rule': 'must be an object'}
      WHEN coalesce(json_type(value, '$.declared_difficulty'), 'NULL') NOT IN ('VARCHAR', 'NULL')
        THEN {'suffix': '.declared_difficulty', 'rule': 'must be a string or null'}
      WHEN coalesce(json_type(value, '$.difficulty'), 'NULL') NOT IN ('VARCHAR', 'NULL')
        THEN {'suffix': '.difficulty', 'rule': 'must be a string or null'}
      WHEN coalesce(json_type(value, '$.route'), 'NULL') NOT IN ('ARRAY', 'NULL')
        THEN {'suffix': '.route', 'rule': 'must be a list of routing decisions or null'}
    END AS problem
    FROM plan_tasks
  ) WHERE problem IS NOT NULL
),
decisions AS (
  SELECT t.position, t.task, t.node, r.key AS idx, r.type AS decision_t, r.value,
         json_extract(r.value, ['$.decision', '$.at', '$.tier', '$.default', '$.chosen', '$.candidates', '$.propensity']) AS f
  FROM plan_tasks t, json_each(t.value, '$.route') r
  WHERE t.task_t = 'OBJECT' AND json_type(t.value, '$.route') = 'ARRAY'
),
decision_types AS (
  SELECT *, list_transform(f, lambda x: coalesce(json_type(x), 'NULL')) AS t FROM decisions
),
decision_problems AS (
  SELECT position, 5 AS step, 'data.tasks.' || task || '.route[' || idx || ']' || problem.suffix AS field, problem.rule FROM (
    SELECT position, task, idx, CASE
      WHEN decision_t <> 'OBJECT' OR value = '{}' THEN {'suffix': '', 'rule': 'must be a non-empty routing decision object'}
      WHEN t[1] NOT IN ('VARCHAR', 'UBIGINT', 'BIGINT', 'DOUBLE', 'NULL') THEN {'suffix': '.decision', 'rule': 'must be an id (a string) or null'}
      WHEN t[2] NOT IN ('UBIGINT', 'BIGINT', 'DOUBLE', 'NULL') THEN {'suffix': '.at', 'rule': 'must be unix seconds, a number, or null'}
      WHEN t[2] <> 'NULL' AND (CAST(f[2] AS DOUBLE) < 0 OR CAST(f[2] AS DOUBLE) >= 253402300800)
        THEN {'suffix': '.at', 'rule': 'must be unix seconds between 1970 and 9999'}
      WHEN t[3] NOT IN ('VARCHAR', 'NULL') THEN {'suffix': '.tier', 'rule': 'must be a string or null'}
      WHEN t[4] NOT IN ('VARCHAR', 'NULL') THEN {'suffix': '.default', 'rule': 'must be a spec (a string) or null'}
      WHEN t[5] NOT IN ('VARCHAR', 'NULL') THEN {'suffix': '.chosen', 'rule': 'must be a spec (a string) or null'}
      WHEN t[6] NOT IN ('ARRAY', 'NULL') THEN {'suffix': '.candidates', 'rule': 'must be a list of specs or null'}
      WHEN t[6] = 'ARRAY' AND list_position(list_transform(json_type(f[6], '$[*]'), lambda x: x = 'VARCHAR'), false) IS NOT NULL
        THEN {'suffix': '.candidates', 'rule': 'must be a list of specs (strings)'}
      WHEN t[7] NOT IN ('UBIGINT', 'BIGINT', 'DOUBLE', 'NULL') THEN {'suffix': '.propensity', 'rule': 'must be a probability, a number in [0, 1], or null'}
      WHEN t[7] <> 'NULL' AND (CAST(f[7] AS DOUBLE) < 0 OR CAST(f[7] AS DOUBLE) > 1)
        THEN {'suffix': '.propensity', 'rule': 'must be a probability, a number in [0, 1]'}
      WHEN t[6] = 'ARRAY' AND json_array_length(f[6]) = 2 AND t[7] <> 'NULL' AND CAST(f[7] AS DOUBLE) <> 0
           AND len(list_filter(json_extract_string(f[6], '$[*]'),
                               lambda c: c IS DISTINCT FROM json_extract_string(f[4], '$'))) = 0
        THEN {'suffix': '.candidates', 'rule': 'a two-candidate draw needs a candidate other than the default'}
    END AS problem
    FROM decision_types
  ) WHERE problem IS NOT NULL
),
everything AS (
  SELECT * FROM text_problems
  UNION ALL SELECT * FROM number_problems
  UNION ALL SELECT * FROM plan_problems
  UNION ALL SELECT * FROM task_problems
  UNION ALL SELECT * FROM decision_problems
)
SELECT position, arg_min(field, (step, field)) AS field, arg_min(rule, (step, field)) AS rule
FROM everything
GROUP BY position
ORDER BY position
