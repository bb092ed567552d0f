-- forge_integrations: one row per integrate_advanced event — the user's branch advanced to a candidate.
-- Inputs: forge_events.
-- Output: rid, run, repo, ts, ts_unix, branch, parent, candidate, target.
WITH events AS (
  SELECT rid, run, repo, ts_unix, json_extract(data, ['$.branch', '$.parent', '$.candidate', '$.target']) AS f
  FROM forge_events WHERE kind = 'event' AND name = 'integrate_advanced'
)
SELECT rid, run, repo, to_timestamp(ts_unix) AS ts, ts_unix,
       json_extract_string(f[1], '$') AS branch, json_extract_string(f[2], '$') AS parent,
       json_extract_string(f[3], '$') AS candidate, json_extract_string(f[4], '$') AS target
FROM events
ORDER BY ts_unix, rid
