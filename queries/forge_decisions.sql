-- forge_decisions: routing decisions per (run, task), deduplicated across plan revisions as the seed does.
-- A decision is identified by its id (when truthy), else by its whole JSON text; its place is its first
-- listing (revisions in event order, then route order) and its values are its last listing's.
-- Inputs: forge_plan_task_values.
-- Output: run, task, decision, decision_key, position, occurrences, at, at_unix, tier, default_spec,
-- candidates, chosen, propensity, paired (exactly two candidates and a non-zero propensity), alternative
-- (first candidate that is not the default), arm (alternative when the alternative was chosen, else default).
WITH listed AS (
  SELECT v.run, v.task, v.plan_ts_unix, v.plan_rid, r.id AS node, r.value AS decision_json,
         json_extract(r.value, ['$.decision', '$.at', '$.tier', '$.default', '$.candidates', '$.chosen', '$.propensity']) AS f
  FROM forge_plan_task_values v, json_each(v.value, '$.route') r
  WHERE json_type(v.value, '$.route') = 'ARRAY'
),
keyed AS (
  SELECT run, task, plan_ts_unix, plan_rid, node,
         CASE WHEN json_type(f[1]) = 'VARCHAR' THEN json_extract_string(f[1], '$')
              WHEN json_type(f[1]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN CAST(f[1] AS VARCHAR) END AS decision,
         CASE WHEN (json_type(f[1]) = 'VARCHAR' AND json_extract_string(f[1], '$') <> '')
                   OR (json_type(f[1]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') AND CAST(f[1] AS DOUBLE) <> 0)
              THEN 'id:' || CAST(f[1] AS VARCHAR) ELSE 'json:' || CAST(decision_json AS VARCHAR) END AS decision_key,
         CASE WHEN json_type(f[2]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN CAST(f[2] AS DOUBLE) END AS at_unix,
         json_extract_string(f[3], '$') AS tier,
         json_extract_string(f[4], '$') AS default_spec,
         CASE WHEN json_type(f[5]) = 'ARRAY' THEN json_extract_string(f[5], '$[*]') END AS candidates,
         json_extract_string(f[6], '$') AS chosen,
         CASE WHEN json_type(f[7]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN CAST(f[7] AS DOUBLE) END AS propensity
  FROM listed
),
sequenced AS (
  SELECT *, row_number() OVER (PARTITION BY run, task ORDER BY plan_ts_unix, plan_rid, node) AS seq FROM keyed
),
deduplicated AS (
  SELECT run, task, decision_key, min(seq) AS first_seq, count(*) AS occurrences,
         arg_max(struct_pack(decision, at_unix, tier, default_spec, candidates, chosen, propensity), seq) AS last
  FROM sequenced
  GROUP BY run, task, decision_key
),
judged AS (
  SELECT run, task, decision_key, first_seq, occurrences, last.*,
         coalesce(len(last.candidates) = 2 AND last.propensity <> 0, false) AS paired
  FROM deduplicated
)
SELECT run, task, decision, decision_key,
       row_number() OVER (PARTITION BY run, task ORDER BY first_seq) AS position,
       occurrences,
       to_timestamp(at_unix) AS at, at_unix, tier, default_spec, candidates, chosen, propensity, paired,
       CASE WHEN paired THEN list_filter(candidates, lambda c: c IS DISTINCT FROM default_spec)[1] END AS alternative,
       CASE WHEN paired THEN
         CASE WHEN chosen = list_filter(candidates, lambda c: c IS DISTINCT FROM default_spec)[1] THEN 'alternative' ELSE 'default' END
       END AS arm
FROM judged
ORDER BY run, task, position
