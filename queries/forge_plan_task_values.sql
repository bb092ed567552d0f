-- forge_plan_task_values: each task object of each plan revision, as Python's json.loads would keep it.
-- A task id repeated inside one tasks object keeps its first place and its last value (json.loads does).
-- Inputs: forge_events.
-- Output: run, task, plan_rid, revision, plan_ts_unix, position (document order of the task in the
-- revision), value (the task object as JSON text).
WITH listed AS (
  SELECT e.run, t.key AS task, e.rid AS plan_rid, e.ts_unix AS plan_ts_unix, t.id AS node, t.value,
         CASE WHEN json_type(e.data, '$.revision') IN ('UBIGINT', 'BIGINT') THEN CAST(json_extract(e.data, '$.revision') AS BIGINT) END AS revision
  FROM forge_events e, json_each(e.data, '$.tasks') t
  WHERE e.kind = 'plan' AND json_type(e.data, '$.tasks') = 'OBJECT'
)
SELECT any_value(run) AS run, task, plan_rid, any_value(revision) AS revision, any_value(plan_ts_unix) AS plan_ts_unix,
       min(node) AS position, arg_max(value, node) AS value
FROM listed
GROUP BY plan_rid, task
