-- forge_harvest_bases: the commit each reviewed commit started from (base_ref), from the last attempt event naming both.
-- Inputs: forge_attempt_events.
-- Output: reviewed_commit, base_ref.
SELECT reviewed_commit, arg_max(base_ref, (ts_unix, rid)) AS base_ref
FROM forge_attempt_events
WHERE reviewed_commit <> '' AND base_ref <> ''
GROUP BY reviewed_commit
