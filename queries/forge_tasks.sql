-- forge_tasks: one record per (run, task) a plan held — what the routing tables need, as the seed builds it.
-- tier comes from the last plan revision holding the task; attempt 1 is the lowest attempt number; it
-- started at its dwarf dispatch's first truthy wall_started, else at its first event; the decision it ran
-- under is the latest (by at, null as 0; ties by first listing) at or before that start + 1 s, or the
-- last one when the task never started. model is model:effort of attempt 1's last dwarf dispatch.
-- Inputs: forge_plans, forge_plan_tasks, forge_decisions, forge_attempts, forge_dispatches, forge_acceptances.
-- Output: the columns of the forge_tasks table (pipeline/forge/tables.py); task_order gives the seed's order.
WITH runs AS (
  SELECT run, bool_or(fractal) AS fractal, min((ts_unix, rid)) AS first_plan FROM forge_plans GROUP BY run
),
grouped_rows AS (
  SELECT run, task,
         arg_max_null(tier, (plan_ts_unix, plan_rid)) AS tier,
         min((plan_ts_unix, plan_rid, place)) AS first_seen
  FROM forge_plan_tasks GROUP BY run, task
),
rows AS (  -- the seed's order, numbered on the narrow rows (the sort carries no other column)
  SELECT r.*, row_number() OVER (ORDER BY u.first_plan, r.first_seen) AS task_order
  FROM grouped_rows r LEFT JOIN runs u ON u.run IS NOT DISTINCT FROM r.run
),
attempt_counts AS (
  SELECT run, task, min(attempt) AS first_n, count(*) AS attempts, bool_or(passed) AS any_passed,
         arg_min(repo, (started_unix, first_rid)) AS first_event_repo, min(started_unix) AS first_event_unix
  FROM forge_attempts GROUP BY run, task
),
first_attempt AS (
  SELECT a.*, c.attempts, c.any_passed, c.first_event_repo, c.first_event_unix
  FROM forge_attempts a JOIN attempt_counts c
    ON a.run IS NOT DISTINCT FROM c.run AND a.task IS NOT DISTINCT FROM c.task AND a.attempt = c.first_n
),
dwarf AS (SELECT * FROM forge_dispatches WHERE role = 'dwarf'),
first_dwarf AS (
  SELECT f.run, f.task,
         arg_min(d.wall_started_unix, (d.ts_unix, d.rid))
           FILTER (WHERE d.wall_started_unix IS NOT NULL AND d.wall_started_unix <> 0) AS wall_started_unix,
         arg_max_null(d.model, (d.ts_unix, d.rid)) AS model,
         arg_max_null(d.effort, (d.ts_unix, d.rid)) AS effort
  FROM first_attempt f JOIN dwarf d
    ON d.run IS NOT DISTINCT FROM f.run AND d.task IS NOT DISTINCT FROM f.task AND d.attempt = f.attempt
  GROUP BY f.run, f.task
),
runtimes AS (
  -- summed in event order, as the seed does: the same float whatever the threads did (one or two
  -- durations add up the same in any order: only a task with more is summed in order, apart)
  SELECT run, task, CASE WHEN count(*) <= 2 THEN sum(duration_s) END AS runtime_s, count(*) > 2 AS ordered
  FROM dwarf WHERE duration_s IS NOT NULL GROUP BY run, task
),
ordered_runtimes AS (
  SELECT d.run, d.task, sum(d.duration_s ORDER BY d.ts_unix, d.rid) AS runtime_s
  FROM dwarf d SEMI JOIN (SELECT run, task FROM runtimes WHERE ordered) o
    ON d.run IS NOT DISTINCT FROM o.run AND d.task IS NOT DISTINCT FROM o.task
  WHERE d.duration_s IS NOT NULL GROUP BY d.run, d.task
),
accepted AS (SELECT DISTINCT run, task FROM forge_acceptances),
records AS (
  SELECT r.run, r.task, coalesce(u.fractal, false) AS fractal, r.tier, r.task_order,
         f.attempt AS first_n, f.dwarf AS ran, f.passed AS first_pass, f.reason AS first_reason,
         coalesce(f.attempts, 0) AS attempts, coalesce(f.any_passed, false) AS any_passed,
         CASE WHEN f.attempt IS NOT NULL THEN coalesce(d.wall_started_unix, f.started_unix) END AS started_unix,
         f.first_event_repo, f.first_event_unix,
         CASE WHEN d.model <> '' AND d.effort <> '' THEN d.model || ':' || d.effort
              WHEN d.model <> '' THEN d.model
              WHEN d.effort <> '' THEN d.effort END AS model,
         coalesce(t.runtime_s, o.runtime_s) AS runtime_s,
         a.task IS NOT NULL AS accepted
  FROM rows r
  LEFT JOIN runs u ON u.run IS NOT DISTINCT FROM r.run
  LEFT JOIN first_attempt f ON f.run IS NOT DISTINCT FROM r.run AND f.task = r.task
  LEFT JOIN first_dwarf d ON d.run IS NOT DISTINCT FROM r.run AND d.task = r.task
  LEFT JOIN runtimes t ON t.run IS NOT DISTINCT FROM r.run AND t.task = r.task
  LEFT JOIN ordered_runtimes o ON o.run IS NOT DISTINCT FROM r.run AND o.task = r.task
  LEFT JOIN accepted a ON a.run IS NOT DISTINCT FROM r.run AND a.task = r.task
),
decided AS (  -- the position of the decision each task ran under (then its fields, joined: no struct per row)
  SELECT c.run, c.task, arg_max(d.position, (coalesce(d.at_unix, 0), d.position)) AS position
  FROM records c JOIN forge_decisions d ON d.run IS NOT DISTINCT FROM c.run AND d.task = c.task
  WHERE c.started_unix IS NULL OR coalesce(d.at_unix, 0) <= c.started_unix + 1
  GROUP BY c.run, c.task
),
chosen AS (
  SELECT x.run, x.task, CASE WHEN d.decision <> '' THEN d.decision ELSE d.decision_key END AS decision,
         d.at_unix, d.tier, d.default_spec, d.chosen, d.alternative, d.propensity, d.paired
  FROM decided x JOIN forge_decisions d ON d.run IS NOT DISTINCT FROM x.run AND d.task = x.task AND d.position = x.position
)
SELECT c.run, c.task,
       c.task_order,
       c.fractal, c.tier, c.ran, c.model, c.first_pass,
       CASE WHEN c.first_n IS NULL THEN 'not_run' WHEN c.first_pass IS NULL THEN c.first_reason END AS censored,
       c.any_passed OR c.accepted AS passed,
       c.attempts, c.runtime_s, c.started_unix, c.first_event_repo, c.first_event_unix,
       x.decision, x.at_unix AS decision_at_unix, x.tier AS decision_tier,
       x.default_spec AS decision_default, x.chosen AS decision_chosen,
       x.alternative AS decision_alternative, x.propensity AS decision_propensity,
       x.paired AS decision_paired
FROM records c
LEFT JOIN chosen x ON x.run IS NOT DISTINCT FROM c.run AND x.task = c.task
