-- forge_survival: survival of merged work per model, tier and horizon — surviving share of added lines and reverts.
-- Each outcome counts once per (reviewed commit, horizon), at its first integration. It belongs to the
-- attempt whose reviewed_commit it names (the one of the outcome's own run and task first, then the
-- lowest attempt), and through that attempt's last dwarf dispatch to a model (model:effort, else the
-- attempt's spec); its tier is the task's. Outcomes no attempt names keep the outcome's task's tier and
-- a null model (counted as unmatched).
-- Inputs: forge_outcomes, forge_attempts, forge_dispatches, forge_tasks.
-- Output: model, tier, horizon_days, tasks (status ok or no_additions), lines_added, lines_surviving,
-- reverted (tasks with a reverting commit), lost (outcomes whose candidate left the branch), unmatched.
WITH outcomes AS (
  SELECT * FROM forge_outcomes WHERE status IN ('ok', 'no_additions', 'lost')
  QUALIFY row_number() OVER (PARTITION BY reviewed, horizon_days ORDER BY integrated_unix, rid) = 1
),
matched AS (
  SELECT o.rid,
         arg_min(struct_pack(run := a.run, task := a.task, attempt := a.attempt, dwarf := a.dwarf),
                 (a.run IS DISTINCT FROM o.run OR a.task IS DISTINCT FROM o.task, a.attempt)) AS attempt
  FROM outcomes o JOIN forge_attempts a ON a.reviewed_commit = o.reviewed
  GROUP BY o.rid
),
dwarf AS (
  SELECT run, task, attempt, arg_max_null(model, (ts_unix, rid)) AS model, arg_max_null(effort, (ts_unix, rid)) AS effort
  FROM forge_dispatches WHERE role = 'dwarf'
  GROUP BY run, task, attempt
),
attributed AS (
  SELECT o.*, m.attempt IS NOT NULL AS is_matched,
         CASE WHEN m.attempt IS NULL THEN NULL
              WHEN d.model <> '' AND d.effort <> '' THEN d.model || ':' || d.effort
              WHEN d.model <> '' THEN d.model
              WHEN d.effort <> '' THEN d.effort
              ELSE m.attempt.dwarf END AS model,
         t.tier
  FROM outcomes o
  LEFT JOIN matched m ON m.rid = o.rid
  LEFT JOIN dwarf d ON d.run = m.attempt.run AND d.task = m.attempt.task AND d.attempt = m.attempt.attempt
  LEFT JOIN forge_tasks t ON t.run = coalesce(m.attempt.run, o.run) AND t.task = coalesce(m.attempt.task, o.task)
)
SELECT model, tier, horizon_days,
       count(*) FILTER (WHERE status IN ('ok', 'no_additions')) AS tasks,
       CAST(coalesce(sum(added) FILTER (WHERE status IN ('ok', 'no_additions')), 0) AS BIGINT) AS lines_added,
       CAST(coalesce(sum(surviving) FILTER (WHERE status IN ('ok', 'no_additions')), 0) AS BIGINT) AS lines_surviving,
       count(*) FILTER (WHERE status IN ('ok', 'no_additions') AND len(reverted_by) > 0) AS reverted,
       count(*) FILTER (WHERE status = 'lost') AS lost,
       count(*) FILTER (WHERE NOT is_matched) AS unmatched
FROM attributed
GROUP BY model, tier, horizon_days
ORDER BY coalesce(model, '~'), coalesce(tier, '~'), horizon_days
