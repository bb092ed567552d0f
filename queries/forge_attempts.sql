-- forge_attempts: one row per attempt of a task, from its attempt events in event order (ts, then rid).
-- An attempt passes if any of its events passed, fails if one failed, else has no outcome (censored):
-- its reason is the last reason given, else the status of its last event.
-- Inputs: forge_attempt_events.
-- Output: run, task, attempt, repo, dwarf, started, started_unix, first_rid, passed, reason, last_status,
-- events, reviewed_commit, base_ref (from the last event naming both; else the last reviewed_commit alone),
-- reviewed_ts_unix, reviewed_rid (that event's time and rid).
-- Event order is (ts_unix, rid) (rids are unique), numbered within each attempt: the aggregates then compare
-- a number, not a struct (a numbering per attempt costs less than ten struct-keyed aggregates).
WITH typed AS (
  SELECT rid, run, task, repo, ts_unix, attempt, dwarf, status, reason, reviewed_commit, base_ref,
         row_number() OVER (PARTITION BY run, task, attempt ORDER BY ts_unix, rid) AS seq  -- event order in the attempt
  FROM forge_attempt_events
),
grouped AS (
  SELECT run, task, attempt,
         arg_min_null(repo, seq) AS repo,
         arg_min_null(dwarf, seq) AS dwarf,
         min(ts_unix) AS started_unix,
         arg_min(rid, seq) AS first_rid,
         CASE WHEN bool_or(status = 'passed') THEN true WHEN bool_or(status = 'failed') THEN false END AS passed,
         arg_max(reason, seq) FILTER (WHERE reason <> '') AS last_reason,
         arg_max_null(status, seq) AS last_status,
         count(*) AS events,
         arg_max(reviewed_commit, seq) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS paired_reviewed,
         arg_max(base_ref, seq) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS paired_base,
         arg_max(ts_unix, seq) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS reviewed_ts_unix,
         arg_max(rid, seq) FILTER (WHERE reviewed_commit <> '' AND base_ref <> '') AS reviewed_rid,
         arg_max(reviewed_commit, seq) FILTER (WHERE reviewed_commit <> '') AS any_reviewed
  FROM typed
  GROUP BY run, task, attempt
)
SELECT run, task, attempt, repo, dwarf, to_timestamp(started_unix) AS started, started_unix, first_rid, passed,
       CASE WHEN passed IS NULL THEN coalesce(last_reason, last_status) END AS reason,
       last_status, events,
       coalesce(paired_reviewed, any_reviewed) AS reviewed_commit, paired_base AS base_ref,
       reviewed_ts_unix, reviewed_rid
FROM grouped
