-- forge_classify_staged: the events an ingest staged that are not new — a rid already stored, or repeated within the ingest.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- A rid is one event: the stored event (else the first staged one) is kept; a repeat with the same content
-- (data compared as minified JSON) is a duplicate, with other content a conflict (rejected). Every staged
-- event not listed here is new.
-- The joins carry 128-bit digests of the envelope's text fields and of data, never the text itself, so a
-- second ingest of a large store (every event a repeat) needs little memory; data whose text differs (a
-- store and its export) is compared again minified, for those events only.
-- Inputs: forge_staged (this ingest's well-formed events: position, line, rid, kind, src, ts_unix, run,
-- task, repo, mode, data), forge_stored (forge_events as stored).
-- Output: position, line, rid, kind, verdict (duplicate or conflict), was_stored (the kept event is a stored
-- one: its source is looked up for the few conflicts) and other_line (the kept event's line).
WITH staged AS (
  SELECT position, line, rid, kind, ts_unix, md5_number(to_json([kind, src, run, task, repo, mode])) AS envelope,
         md5_number(data) AS digest
  FROM forge_staged
),
repeated AS (
  SELECT rid, min(position) AS first_position FROM staged GROUP BY rid HAVING count(*) > 1
),
stored AS (
  SELECT s.rid, s.ts_unix, md5_number(to_json([s.kind, s.src, s.run, s.task, s.repo, s.mode])) AS envelope,
         md5_number(s.data) AS digest, s.line
  FROM forge_stored s SEMI JOIN staged f ON f.rid = s.rid
),
staged_again AS (  -- each staged event whose rid was stored before, or that repeats an earlier staged one
  SELECT f.position, f.line, f.rid, f.kind,
         s.rid IS NOT NULL AS was_stored, k.position AS first_position,
         f.envelope = coalesce(s.envelope, k.envelope) AND f.ts_unix IS NOT DISTINCT FROM coalesce(s.ts_unix, k.ts_unix)
           AS same_envelope,
         f.digest = coalesce(s.digest, k.digest) AS same_text,
         CASE WHEN s.rid IS NOT NULL THEN s.line ELSE k.line END AS other_line
  FROM staged f
  LEFT JOIN stored s ON s.rid = f.rid
  LEFT JOIN repeated r ON r.rid = f.rid
  LEFT JOIN staged k ON k.position = r.first_position AND s.rid IS NULL
  WHERE s.rid IS NOT NULL OR (r.rid IS NOT NULL AND f.position <> r.first_position)
),
unsure AS (  -- same envelope, data text differs: compare the minified JSON of both
  SELECT position, rid, was_stored, first_position FROM staged_again WHERE same_envelope AND NOT same_text
),
minified AS (
  SELECT u.position,
         md5_number(json(f.data)) = coalesce(md5_number(json(s.data)), md5_number(json(k.data))) AS same_json
  FROM unsure u
  JOIN forge_staged f ON f.position = u.position
  LEFT JOIN forge_stored s ON u.was_stored AND s.rid = u.rid
  LEFT JOIN forge_staged k ON NOT u.was_stored AND k.position = u.first_position
),
judged AS (
  SELECT a.*, CASE WHEN a.same_envelope AND (a.same_text OR coalesce(m.same_json, false)) THEN 'duplicate'
                   ELSE 'conflict' END AS verdict
  FROM staged_again a
  LEFT JOIN minified m ON m.position = a.position
)
SELECT position, line, rid, kind, verdict, was_stored, other_line FROM judged
