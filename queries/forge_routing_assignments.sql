-- forge_routing_assignments: tasks that ran under a routing decision, each in the arm it was assigned (intent to treat).
-- Inputs: forge_routing_scope (the task records in scope).
-- Output: task_order, run, paired (two candidates and a propensity; unpaired ones are older all-spec
-- draws, only counted), tier, default_spec, alternative (of the decision), arm, propensity, at_unix
-- (the decision's time, null as 0), first_pass, runtime_s, followed (the spec that ran was the chosen one;
-- null when nothing ran). In task_order.
SELECT task_order, run, coalesce(decision_paired, false) AS paired,
       decision_tier AS tier, decision_default AS default_spec, decision_alternative AS alternative,
       CASE WHEN decision_paired THEN
         CASE WHEN decision_chosen = decision_alternative THEN 'alternative' ELSE 'default' END END AS arm,
       decision_propensity AS propensity,
       coalesce(decision_at_unix, 0) AS at_unix,
       first_pass, runtime_s,
       CASE WHEN ran <> '' THEN ran IS NOT DISTINCT FROM decision_chosen END AS followed
FROM forge_routing_scope
WHERE decision IS NOT NULL
ORDER BY task_order
