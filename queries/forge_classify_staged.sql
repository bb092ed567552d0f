-- forge_classify_staged: the events an ingest staged that are not new — a rid already stored, or repeated within the ingest.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- A rid is one event: the stored event (else the first staged one) is kept; a repeat with the same content
-- (data compared as minified JSON) is a duplicate, with other content a conflict (rejected). Every staged
-- event not listed here is new.
-- Inputs: forge_staged (this ingest's well-formed events: position, line, rid, kind, src, ts_unix, run,
-- task, repo, mode, data), forge_stored (forge_events as stored).
-- Output: position, line, rid, kind, verdict (duplicate or conflict), other_source and other_line (where
-- the kept event came from).
WITH repeated AS (
  SELECT rid, min(position) AS first_position FROM forge_staged GROUP BY rid HAVING count(*) > 1
),
stored AS (
  SELECT s.rid, s.kind, s.src, s.ts_unix, s.run, s.task, s.repo, s.mode, s.data, s.source, s.line
  FROM forge_stored s SEMI JOIN forge_staged f ON f.rid = s.rid
),
staged_again AS (  -- each staged event whose rid was stored before, or that repeats an earlier staged one
  SELECT f.position, f.line, f.rid, f.kind, f.src, f.ts_unix, f.run, f.task, f.repo, f.mode, f.data,
         coalesce(s.kind, k.kind) AS o_kind, coalesce(s.src, k.src) AS o_src, coalesce(s.ts_unix, k.ts_unix) AS o_ts_unix,
         coalesce(s.run, k.run) AS o_run, coalesce(s.task, k.task) AS o_task, coalesce(s.repo, k.repo) AS o_repo,
         coalesce(s.mode, k.mode) AS o_mode, coalesce(s.data, k.data) AS o_data,
         CASE WHEN s.rid IS NOT NULL THEN s.source END AS other_source,
         CASE WHEN s.rid IS NOT NULL THEN s.line ELSE k.line END AS other_line
  FROM forge_staged f
  LEFT JOIN stored s ON s.rid = f.rid
  LEFT JOIN repeated r ON r.rid = f.rid
  LEFT JOIN forge_staged k ON k.position = r.first_position AND s.rid IS NULL
  WHERE s.rid IS NOT NULL OR (r.rid IS NOT NULL AND f.position <> r.first_position)
)
SELECT position, line, rid, kind,
       CASE WHEN kind IS NOT DISTINCT FROM o_kind AND src IS NOT DISTINCT FROM o_src
             AND ts_unix IS NOT DISTINCT FROM o_ts_unix AND run IS NOT DISTINCT FROM o_run
             AND task IS NOT DISTINCT FROM o_task AND repo IS NOT DISTINCT FROM o_repo
             AND mode IS NOT DISTINCT FROM o_mode AND (data = o_data OR json(data) = json(o_data))
            THEN 'duplicate' ELSE 'conflict' END AS verdict,
       other_source, other_line
FROM staged_again
