-- forge_routing_scope: the task records routing reads — fractal runs left out, limited to a repository and a start time.
-- Inputs: forge_tasks, forge_repos; $repo (a repository path, compared with forge_repos.path of the task's
-- first attempt event; NULL: all), $since (unix seconds; tasks whose first attempt event is earlier, or that
-- never ran, are left out; NULL: no limit).
-- Output: the forge_tasks columns of the tasks in scope, in task_order.
SELECT t.*
FROM forge_tasks AS t
LEFT JOIN forge_repos AS r ON r.repo = t.first_event_repo
WHERE NOT t.fractal
  AND ($repo::VARCHAR IS NULL OR r.path = $repo::VARCHAR)
  AND ($since::DOUBLE IS NULL OR t.first_event_unix >= $since::DOUBLE)
ORDER BY t.task_order
