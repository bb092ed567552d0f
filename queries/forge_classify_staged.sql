-- forge_classify_staged: each event an ingest staged, judged by its rid against the events stored before and the other staged events.
-- A rid is one event: the stored event (else the first staged one) is kept; a repeat with the same content
-- (data compared as minified JSON) is a duplicate, with other content a conflict (rejected).
-- Inputs: forge_staged (this ingest's well-formed events: position, line, rid, kind, src, ts_unix, run,
-- task, repo, mode, data), forge_stored (forge_events as stored).
-- Output: position, line, rid, kind, verdict (new, duplicate or conflict), other_source and other_line
-- (where the kept event came from, for a duplicate or conflict).
WITH counted AS (
  SELECT rid, min(position) AS first_position, count(*) AS copies FROM forge_staged GROUP BY rid
),
firsts AS (
  SELECT s.position, s.line, s.rid, s.kind, s.src, s.ts_unix, s.run, s.task, s.repo, s.mode, s.data
  FROM forge_staged s JOIN counted c ON c.rid = s.rid AND c.first_position = s.position
),
stored AS (
  SELECT rid AS stored_rid, kind AS s_kind, src AS s_src, ts_unix AS s_ts_unix, run AS s_run, task AS s_task,
         repo AS s_repo, mode AS s_mode, data AS s_data, source AS s_source, line AS s_line
  FROM forge_stored
  WHERE rid IN (SELECT rid FROM forge_staged)
),
repeats AS (
  SELECT s.position, s.line, s.rid, s.kind, s.src, s.ts_unix, s.run, s.task, s.repo, s.mode, s.data
  FROM forge_staged s JOIN counted c ON c.rid = s.rid AND c.copies > 1 AND s.position <> c.first_position
)
SELECT f.position, f.line, f.rid, f.kind,
       CASE WHEN s.stored_rid IS NULL THEN 'new'
            WHEN f.kind IS NOT DISTINCT FROM s.s_kind AND f.src IS NOT DISTINCT FROM s.s_src
             AND f.ts_unix IS NOT DISTINCT FROM s.s_ts_unix AND f.run IS NOT DISTINCT FROM s.s_run
             AND f.task IS NOT DISTINCT FROM s.s_task AND f.repo IS NOT DISTINCT FROM s.s_repo
             AND f.mode IS NOT DISTINCT FROM s.s_mode AND (f.data = s.s_data OR json(f.data) = json(s.s_data)) THEN 'duplicate'
            ELSE 'conflict' END AS verdict,
       s.s_source AS other_source, s.s_line AS other_line
FROM firsts f LEFT JOIN stored s ON s.stored_rid = f.rid
UNION ALL
SELECT r.position, r.line, r.rid, r.kind,
       CASE WHEN r.kind IS NOT DISTINCT FROM f.kind AND r.src IS NOT DISTINCT FROM f.src
             AND r.ts_unix IS NOT DISTINCT FROM f.ts_unix AND r.run IS NOT DISTINCT FROM f.run
             AND r.task IS NOT DISTINCT FROM f.task AND r.repo IS NOT DISTINCT FROM f.repo
             AND r.mode IS NOT DISTINCT FROM f.mode AND (r.data = f.data OR json(r.data) = json(f.data)) THEN 'duplicate'
            ELSE 'conflict' END AS verdict,
       NULL AS other_source, f.line AS other_line
FROM repeats r JOIN firsts f ON f.rid = r.rid
