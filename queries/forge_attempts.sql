-- forge_attempts: one row per attempt of a task, from its attempt events in event order (ts, then rid).
-- An attempt passes if any of its events passed, fails if one failed, else has no outcome (censored):
-- its reason is the last reason given, else the status of its last event.
-- Inputs: forge_events.
-- Output: run, task, attempt, repo, dwarf, started, started_unix, first_rid, passed, reason, last_status,
-- events, reviewed_commit, base_ref (from the last event naming both; else the last reviewed_commit alone),
-- reviewed_ts_unix, reviewed_rid (that event's time and rid).
WITH events AS (
  SELECT rid, run, task, repo, ts_unix,
         json_extract(data, ['$.n', '$.dwarf', '$.status', '$.reason', '$.reviewed_commit', '$.base_ref']) AS f
  FROM forge_events WHERE kind = 'attempt'
),
typed AS (
  SELECT rid, run, task, repo, ts_unix,
         CAST(CAST(f[1] AS DOUBLE) AS BIGINT) AS attempt,
         json_extract_string(f[2], '$') AS dwarf,
         json_extract_string(f[3], '$') AS status,
         json_extract_string(f[4], '$') AS reason,
         json_extract_string(f[5], '$') AS reviewed_commit,
         json_extract_string(f[6], '$') AS base_ref
  FROM events
),
grouped AS (
  SELECT run, task, attempt,
         first(repo ORDER BY ts_unix, rid) AS repo,
         first(dwarf ORDER BY ts_unix, rid) AS dwarf,
         min(ts_unix) AS started_unix,
         first(rid ORDER BY ts_unix, rid) AS first_rid,
         CASE WHEN bool_or(status = 'passed') THEN true WHEN bool_or(status = 'failed') THEN false END AS passed,
         last(reason ORDER BY ts_unix, rid) FILTER (WHERE reason <> '') AS last_reason,
         last(status ORDER BY ts_unix, rid) AS last_status,
         count(*) AS events,
         last(reviewed_commit ORDER BY ts_unix, rid) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS paired_reviewed,
         last(base_ref ORDER BY ts_unix, rid) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS paired_base,
         last(ts_unix ORDER BY ts_unix, rid) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS reviewed_ts_unix,
         last(rid ORDER BY ts_unix, rid) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS reviewed_rid,
         last(reviewed_commit ORDER BY ts_unix, rid) FILTER (WHERE reviewed_commit <> '') AS any_reviewed
  FROM typed
  GROUP BY run, task, attempt
)
SELECT run, task, attempt, repo, dwarf, to_timestamp(started_unix) AS started, started_unix, first_rid, passed,
       CASE WHEN passed IS NULL THEN coalesce(last_reason, last_status) END AS reason,
       last_status, events,
       coalesce(paired_reviewed, any_reviewed) AS reviewed_commit, paired_base AS base_ref,
       reviewed_ts_unix, reviewed_rid
FROM grouped
ORDER BY run, task, attempt
