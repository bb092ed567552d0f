-- forge_dispatches: one row per dispatch event — which model and effort really ran an attempt, and how long.
-- Inputs: forge_events.
-- Output: rid, run, task, ts, ts_unix, role, attempt (when an integer), spec, model, effort, harness,
-- wall_started, wall_started_unix, duration_s (when a number; booleans and strings are not durations).
WITH events AS (
  SELECT rid, run, task, ts_unix,
         json_extract(data, ['$.role', '$.attempt', '$.spec', '$.model', '$.effort', '$.harness', '$.wall_started', '$.duration_s']) AS f
  FROM forge_events WHERE kind = 'dispatch'
)
SELECT rid, run, task, to_timestamp(ts_unix) AS ts, ts_unix,
       json_extract_string(f[1], '$') AS role,
       CASE WHEN json_type(f[2]) IN ('UBIGINT', 'BIGINT') THEN CAST(f[2] AS BIGINT)
            WHEN json_type(f[2]) = 'DOUBLE' AND CAST(f[2] AS DOUBLE) = floor(CAST(f[2] AS DOUBLE))
                 AND abs(CAST(f[2] AS DOUBLE)) < 9.0e18 THEN CAST(CAST(f[2] AS DOUBLE) AS BIGINT) END AS attempt,
       json_extract_string(f[3], '$') AS spec,
       json_extract_string(f[4], '$') AS model,
       json_extract_string(f[5], '$') AS effort,
       json_extract_string(f[6], '$') AS harness,
       CASE WHEN json_type(f[7]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN to_timestamp(CAST(f[7] AS DOUBLE)) END AS wall_started,
       CASE WHEN json_type(f[7]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN CAST(f[7] AS DOUBLE) END AS wall_started_unix,
       CASE WHEN json_type(f[8]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN CAST(f[8] AS DOUBLE) END AS duration_s
FROM events
ORDER BY ts_unix, rid
