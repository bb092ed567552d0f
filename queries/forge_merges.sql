-- forge_merges: one row per merge event (data.name = merge).
-- Inputs: forge_events.
-- Output: rid, run, task, repo, ts, ts_unix, status, commit (data.commit when non-empty, else
-- data.reviewed_commit), integration.
WITH events AS (
  SELECT rid, run, task, repo, ts_unix,
         json_extract(data, ['$.status', '$.commit', '$.reviewed_commit', '$.integration']) AS f
  FROM forge_events WHERE kind = 'event' AND name = 'merge'
)
SELECT rid, run, task, repo, to_timestamp(ts_unix) AS ts, ts_unix,
       json_extract_string(f[1], '$') AS status,
       CASE WHEN json_extract_string(f[2], '$') <> '' THEN json_extract_string(f[2], '$')
            ELSE json_extract_string(f[3], '$') END AS commit,
       json_extract_string(f[4], '$') AS integration
FROM events
ORDER BY ts_unix, rid
