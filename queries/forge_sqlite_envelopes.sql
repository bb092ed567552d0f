-- forge_sqlite_envelopes: each row of a Forge SQLite store's events table as an event envelope, with the first container rule it breaks.
-- Inputs: forge_batch(position, rid, kind, src, ts, run, task, repo, mode, data, bad_text) — rows whose
-- storage classes are right (text columns as text, ts a number); bad_text names a column whose bytes
-- are not UTF-8 (null when all decode).
-- Output: position, line (null), rid, kind, src, ts_unix, run, task, repo, mode, name, data (the data
-- object as minified JSON text), repo_line (false), repo_path (null), problem_field, problem_rule.
WITH judged AS (
  SELECT *,
         CASE WHEN bad_text IS NULL AND data IS NOT NULL THEN json_valid(data) ELSE false END AS valid,
         CASE
           WHEN bad_text IS NOT NULL THEN {'field': bad_text, 'rule': 'is not valid UTF-8'}
           WHEN rid = '' THEN {'field': 'rid', 'rule': 'must be a non-empty string'}
           WHEN kind = '' THEN {'field': 'kind', 'rule': 'must be a non-empty string'}
           WHEN ts IS NULL OR NOT isfinite(ts) OR ts < 0 OR ts >= 253402300800 THEN {'field': 'ts', 'rule': 'must be unix seconds between 1970 and 9999'}
         END AS early
  FROM forge_batch
),
documents AS (
  SELECT *, CASE WHEN valid THEN json_type(data) END AS data_t FROM judged
)
SELECT position, CAST(NULL AS BIGINT) AS line, rid, kind, src, ts AS ts_unix, run, task, repo, mode,
       CASE WHEN data_t = 'OBJECT' AND json_type(data, '$.name') = 'VARCHAR' THEN json_extract_string(data, '$.name') END AS name,
       CASE WHEN data_t = 'OBJECT' THEN CAST(json(data) AS VARCHAR) END AS data,
       false AS repo_line, CAST(NULL AS VARCHAR) AS repo_path,
       coalesce(early.field, CASE WHEN NOT valid THEN 'data' WHEN data_t <> 'OBJECT' THEN 'data' END) AS problem_field,
       coalesce(early.rule, CASE WHEN NOT valid THEN 'must be a JSON object (it is not valid JSON)'
                                 WHEN data_t <> 'OBJECT' THEN 'must be a JSON object (found ' || lower(data_t) || ')' END) AS problem_rule
FROM documents
ORDER BY position
