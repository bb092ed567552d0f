-- forge_outcomes: one row per survival outcome event (written by `harvest survival`, or found in the store).
-- Inputs: forge_events.
-- Output: rid, run, task, repo, src, recorded, status, candidate, reviewed, base_ref, branch, horizon_days,
-- integrated, integrated_unix, horizon_rev, horizon, integrate_run, added, surviving, file_paths,
-- file_added, file_surviving (per file, in the outcome's order), reverted_by.
WITH events AS (
  SELECT rid, run, task, repo, src, ts_unix, data,
         json_extract(data, ['$.status', '$.candidate', '$.reviewed', '$.base_ref', '$.branch', '$.horizon_days',
                             '$.integrated_ts', '$.horizon_rev', '$.horizon_ts', '$.integrate_run', '$.added',
                             '$.surviving', '$.reverted_by', '$.files']) AS f
  FROM forge_events WHERE kind = 'outcome'
),
files AS (
  SELECT *, CASE WHEN json_type(f[14]) = 'OBJECT' THEN TRY_CAST(f[14] AS MAP(VARCHAR, BIGINT[])) END AS file_map
  FROM events
)
SELECT rid, run, task, repo, src, to_timestamp(ts_unix) AS recorded,
       json_extract_string(f[1], '$') AS status,
       json_extract_string(f[2], '$') AS candidate,
       json_extract_string(f[3], '$') AS reviewed,
       json_extract_string(f[4], '$') AS base_ref,
       json_extract_string(f[5], '$') AS branch,
       CASE WHEN json_type(f[6]) IN ('UBIGINT', 'BIGINT') THEN CAST(f[6] AS BIGINT) END AS horizon_days,
       CASE WHEN json_type(f[7]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN to_timestamp(CAST(f[7] AS DOUBLE)) END AS integrated,
       CASE WHEN json_type(f[7]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN CAST(f[7] AS DOUBLE) END AS integrated_unix,
       json_extract_string(f[8], '$') AS horizon_rev,
       CASE WHEN json_type(f[9]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN to_timestamp(CAST(f[9] AS DOUBLE)) END AS horizon,
       json_extract_string(f[10], '$') AS integrate_run,
       CASE WHEN json_type(f[11]) IN ('UBIGINT', 'BIGINT') THEN CAST(f[11] AS BIGINT) END AS added,
       CASE WHEN json_type(f[12]) IN ('UBIGINT', 'BIGINT') THEN CAST(f[12] AS BIGINT) END AS surviving,
       map_keys(file_map) AS file_paths,
       list_transform(map_values(file_map), lambda v: v[1]) AS file_added,
       list_transform(map_values(file_map), lambda v: v[2]) AS file_surviving,
       CASE WHEN json_type(f[13]) = 'ARRAY' THEN json_extract_string(f[13], '$[*]') END AS reverted_by
FROM files
ORDER BY ts_unix, rid
