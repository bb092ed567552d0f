-- forge_acceptances: one row per accepted event — a person accepted the task.
-- Inputs: forge_events.
-- Output: rid, run, task, ts.
SELECT rid, run, task, to_timestamp(ts_unix) AS ts
FROM forge_events
WHERE kind = 'event' AND name = 'accepted'
ORDER BY ts_unix, rid
