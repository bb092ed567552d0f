-- forge_plans: one row per plan event (a plan revision of a run), and whether it used fractal selection.
-- Inputs: forge_events.
-- Output: rid, run, revision (data.revision when an integer), ts, ts_unix, fractal (data.fractal_selection.enabled
-- is truthy, as Python reads it: true, a non-zero number, a non-empty string, list or object), task_count.
WITH plans AS (
  SELECT rid, run, ts_unix, data,
         json_extract(data, '$.fractal_selection.enabled') AS enabled,
         json_type(data, '$.fractal_selection.enabled') AS enabled_t
  FROM forge_events WHERE kind = 'plan'
)
SELECT rid, run,
       CASE WHEN json_type(data, '$.revision') IN ('UBIGINT', 'BIGINT') THEN CAST(json_extract(data, '$.revision') AS BIGINT) END AS revision,
       to_timestamp(ts_unix) AS ts, ts_unix,
       CASE enabled_t
         WHEN 'BOOLEAN' THEN CAST(enabled AS BOOLEAN)
         WHEN 'VARCHAR' THEN json_extract_string(enabled, '$') <> ''
         WHEN 'UBIGINT' THEN CAST(enabled AS DOUBLE) <> 0
         WHEN 'BIGINT' THEN CAST(enabled AS DOUBLE) <> 0
         WHEN 'DOUBLE' THEN CAST(enabled AS DOUBLE) <> 0
         WHEN 'ARRAY' THEN json_array_length(enabled) > 0
         WHEN 'OBJECT' THEN CAST(enabled AS VARCHAR) <> '{}'
         ELSE false
       END AS fractal,
       CASE WHEN json_type(data, '$.tasks') = 'OBJECT' THEN len(json_keys(data, '$.tasks')) ELSE 0 END AS task_count
FROM plans
ORDER BY ts_unix, rid
