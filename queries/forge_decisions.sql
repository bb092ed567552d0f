-- forge_decisions: routing decisions per (run, task), deduplicated across plan revisions as the seed does.
-- A decision is identified by its id (when truthy), else by its whole JSON text; its place is its first
-- listing (revisions in event order, then route order) and its values are its last listing's.
-- Inputs: forge_route_entries.
-- Output: run, task, decision, decision_key, position, occurrences, at, at_unix, tier, default_spec,
-- candidates, chosen, propensity, paired (exactly two candidates and a non-zero propensity), alternative
-- (first candidate that is not the default), arm (alternative when the alternative was chosen, else default).
WITH keyed AS (
  SELECT run, task, plan_ts_unix, plan_rid, task_place, entry, decision, decision_key, at_unix, tier,
         default_spec, candidates, chosen, propensity
  FROM forge_route_entries
),
sequenced AS (
  SELECT *, row_number() OVER (PARTITION BY run, task ORDER BY plan_ts_unix, plan_rid, task_place, entry) AS seq FROM keyed
),
deduplicated AS (  -- each decision's first place, and where its last listing is (its values joined after: no struct per row)
  SELECT run, task, decision_key, min(seq) AS first_seq, count(*) AS occurrences, max(seq) AS last_seq
  FROM sequenced
  GROUP BY run, task, decision_key
),
judged AS (
  SELECT x.run, x.task, x.decision_key, x.first_seq, x.occurrences, s.decision, s.at_unix, s.tier, s.default_spec,
         s.candidates, s.chosen, s.propensity,
         coalesce(len(s.candidates) = 2 AND s.propensity <> 0, false) AS paired
  FROM deduplicated x JOIN sequenced s
    ON s.run IS NOT DISTINCT FROM x.run AND s.task IS NOT DISTINCT FROM x.task AND s.seq = x.last_seq
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
