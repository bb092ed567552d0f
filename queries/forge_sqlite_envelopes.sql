-- forge_sqlite_envelopes: each row of a Forge SQLite store's events table as an event envelope, with the first container rule it breaks.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- Inputs: forge_batch(position, rid, kind, src, ts, run, task, repo, mode, data, bad_text) — rows as read
-- (ts a number or null, rid and kind text or null: a row whose ts is text or a blob, or whose rid or kind
-- is a number or a blob, is rejected while reading; bad_text: a column whose bytes are not UTF-8, else null).
-- Output: position, line (null), rid, kind, src, ts_unix, run, task, repo, mode, data (text, judged by
-- forge_stage_events), repo_line (false), repo_path (null), problem_field, problem_rule.
WITH judged AS (
  SELECT *,
         CASE
           WHEN bad_text IS NOT NULL THEN {'field': bad_text, 'rule': 'is not valid UTF-8'}
           -- a null rid or kind as the rows read one by one say it (store.py: _row_problem)
           WHEN rid IS NULL THEN {'field': 'rid', 'rule': 'must be text (found null)'}
           WHEN rid = '' THEN {'field': 'rid', 'rule': 'must be a non-empty string'}
           WHEN kind IS NULL THEN {'field': 'kind', 'rule': 'must be text (found null)'}
           WHEN kind = '' THEN {'field': 'kind', 'rule': 'must be a non-empty string'}
           WHEN ts IS NULL THEN {'field': 'ts', 'rule': 'must be unix seconds, a number (found null)'}
           WHEN NOT isfinite(ts) OR ts < 0 OR ts >= 253402300800 THEN {'field': 'ts', 'rule': 'must be unix seconds between 1970 and 9999'}
         END AS problem
  FROM forge_batch
)
SELECT position, CAST(NULL AS BIGINT) AS line, rid, kind, src, ts AS ts_unix, run, task, repo, mode, data,
       false AS repo_line, CAST(NULL AS VARCHAR) AS repo_path,
       problem.field AS problem_field, problem.rule AS problem_rule
FROM judged
