-- forge_routing_observational: first attempts with an outcome by tier and the model that ran them (model:effort, else the spec).
-- Inputs: forge_routing_scope (the task records in scope).
-- Output: tier, spec, tasks, first_passes (attempt 1 passed), passed (passed at some attempt or accepted),
-- attempts_sum (attempts over the group's tasks), runtimes (the group's non-null runtime_s, sorted), and
-- runtime_median_s (statistics.median of them: the middle value, or the mean of the two middle ones).
-- Ordered as the seed orders its rows: by tier and spec as text (a missing tier sorts as 'None').
WITH cells AS (
  SELECT tier, CASE WHEN model <> '' THEN model ELSE ran END AS spec, first_pass, passed, attempts, runtime_s
  FROM forge_routing_scope
  WHERE (model <> '' OR ran <> '') AND first_pass IS NOT NULL
),
grouped AS (
  SELECT tier, spec, count(*) AS tasks,
         count(*) FILTER (WHERE first_pass) AS first_passes,
         count(*) FILTER (WHERE passed) AS passed,
         CAST(sum(attempts) AS BIGINT) AS attempts_sum,
         list_sort(list(runtime_s) FILTER (WHERE runtime_s IS NOT NULL)) AS runtimes
  FROM cells
  GROUP BY tier, spec
)
SELECT tier, spec, tasks, first_passes, passed, attempts_sum, runtimes,
       CASE WHEN len(runtimes) = 0 THEN NULL
            WHEN len(runtimes) % 2 = 1 THEN runtimes[(len(runtimes) + 1) // 2]
            ELSE (runtimes[len(runtimes) // 2] + runtimes[len(runtimes) // 2 + 1]) / 2 END AS runtime_median_s
FROM grouped
ORDER BY coalesce(tier, 'None'), spec
