-- forge_stage_route_entries: every routing decision as each plan revision lists it, with the first rule it breaks.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- Inputs: forge_staged_plan_tasks(position, run, task, plan_rid, plan_ts_unix, node, route) — tasks of
-- staged plans without a problem so far; the macros of forge_json_macros.
-- Output: position, run, task, plan_rid, plan_ts_unix, task_node, entry (index in the route), decision (the
-- id as text), decision_key (the id's JSON text when truthy, else the decision's JSON text: the seed's
-- deduplication key), at_unix, tier, default_spec, candidates, chosen, propensity, problem_field, problem_rule.
WITH listed AS (
  SELECT position, run, task, plan_rid, plan_ts_unix, node AS task_node, CAST(CAST(route AS JSON) AS JSON[]) AS decisions
  FROM forge_staged_plan_tasks
),
unnested AS (
  SELECT position, run, task, plan_rid, plan_ts_unix, task_node,
         generate_subscripts(decisions, 1) - 1 AS entry, CAST(unnest(decisions) AS VARCHAR) AS value
  FROM listed
),
entries AS (
  SELECT *,
         CAST(json_extract(value, ['$.decision', '$.at', '$.tier', '$.default', '$.candidates', '$.chosen', '$.propensity'])
              AS VARCHAR[]) AS f
  FROM unnested
),
typed AS (
  SELECT *,
         CASE WHEN f[5][1] = '[' THEN json_extract_string(f[5], '$[*]') END AS candidates,
         CASE WHEN f[5][1] = '[' THEN json_type(f[5], '$[*]') END AS candidate_types,
         j_text(f[4]) AS default_spec,
         j_double(f[7]) AS p
  FROM entries
),
judged AS (
  SELECT *,
    'data.tasks.' || task || '.route[' || entry || ']' AS place,
    CASE
      WHEN value[1] <> '{' OR value = '{}' THEN {'suffix': '', 'rule': 'must be a non-empty routing decision object'}
      WHEN NOT (j_text_or_null(f[1]) OR j_is_number(f[1])) THEN {'suffix': '.decision', 'rule': 'must be an id (a string) or null'}
      WHEN NOT j_number_or_null(f[2]) THEN {'suffix': '.at', 'rule': 'must be unix seconds, a number, or null'}
      WHEN j_double(f[2]) < 0 OR j_double(f[2]) >= 253402300800 THEN {'suffix': '.at', 'rule': 'must be unix seconds between 1970 and 9999'}
      WHEN NOT j_text_or_null(f[3]) THEN {'suffix': '.tier', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[4]) THEN {'suffix': '.default', 'rule': 'must be a spec (a string) or null'}
      WHEN NOT j_text_or_null(f[6]) THEN {'suffix': '.chosen', 'rule': 'must be a spec (a string) or null'}
      WHEN NOT (j_missing_or_null(f[5]) OR f[5][1] = '[') THEN {'suffix': '.candidates', 'rule': 'must be a list of specs or null'}
      WHEN len(list_filter(candidate_types, lambda x: x <> 'VARCHAR')) > 0
        THEN {'suffix': '.candidates', 'rule': 'must be a list of specs (strings)'}
      WHEN NOT j_number_or_null(f[7]) THEN {'suffix': '.propensity', 'rule': 'must be a probability, a number in [0, 1], or null'}
      WHEN p < 0 OR p > 1 THEN {'suffix': '.propensity', 'rule': 'must be a probability, a number in [0, 1]'}
      WHEN len(candidates) = 2 AND p <> 0 AND candidates[1] IS NOT DISTINCT FROM default_spec
           AND candidates[2] IS NOT DISTINCT FROM default_spec
        THEN {'suffix': '.candidates', 'rule': 'a two-candidate draw needs a candidate other than the default'}
    END AS problem
  FROM typed
)
SELECT position, run, task, plan_rid, plan_ts_unix, task_node, entry,
       CASE WHEN j_is_text(f[1]) THEN j_text(f[1]) WHEN j_is_number(f[1]) THEN f[1] END AS decision,
       CASE WHEN (j_is_text(f[1]) AND j_text(f[1]) <> '') OR (j_is_number(f[1]) AND TRY_CAST(f[1] AS DOUBLE) <> 0)
            THEN 'id:' || f[1] ELSE 'json:' || value END AS decision_key,
       CASE WHEN problem IS NULL THEN j_double(f[2]) END AS at_unix,
       j_text(f[3]) AS tier,
       default_spec,
       candidates,
       j_text(f[6]) AS chosen,
       CASE WHEN problem IS NULL THEN p END AS propensity,
       CASE WHEN problem IS NOT NULL THEN place || problem.suffix END AS problem_field,
       problem.rule AS problem_rule
FROM judged
