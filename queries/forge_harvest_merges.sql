-- forge_harvest_merges: the merged tasks a survival harvest can attribute landed commits to, one per (repository, commit).
-- The last MERGED merge event of a commit wins (split/combine copies keep their run); the order is each
-- (repository, commit)'s first appearance, as the seed's dict keeps it.
-- Inputs: forge_merges.
-- Output: repo, commit, run, task, integration, first_ts_unix, first_rid.
SELECT repo, commit,
       arg_max_null(run, (ts_unix, rid)) AS run,
       arg_max_null(task, (ts_unix, rid)) AS task,
       arg_max_null(integration, (ts_unix, rid)) AS integration,
       min(ts_unix) AS first_ts_unix,
       arg_min(rid, (ts_unix, rid)) AS first_rid
FROM forge_merges
WHERE status = 'MERGED' AND task <> '' AND commit <> ''
GROUP BY repo, commit
ORDER BY first_ts_unix, first_rid
