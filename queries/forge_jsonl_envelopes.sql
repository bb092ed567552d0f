-- forge_jsonl_envelopes: each line of a Forge JSON Lines export as an event envelope, with the first container rule it breaks.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- Inputs: forge_batch(position, line, text BLOB) — the export's non-blank lines, undecoded.
-- Output: position, line, rid, kind, src, ts_unix, run, task, repo, mode, data (the data value as JSON
-- text), repo_line (a {"kind": "repo", "repo", "path"} line), repo_path, problem_field and problem_rule
-- (null when the envelope is well formed; data itself is judged by forge_stage_events).
WITH decoded AS (
  SELECT position, line, try(decode(text)) AS text FROM forge_batch
),
documents AS (
  SELECT position, line, text, text IS NOT NULL AS utf8,
         try(json_extract(text, ['$.rid', '$.kind', '$.src', '$.ts', '$.run', '$.task', '$.repo', '$.mode', '$.data', '$.path'])) AS f,
         starts_with(ltrim(text), '{') AS object
  FROM decoded
),
typed AS (
  SELECT position, line, text, utf8, f IS NOT NULL AS valid, object,
         json_type(f[1]) AS rid_t, json_type(f[2]) AS kind_t, json_type(f[3]) AS src_t, json_type(f[4]) AS ts_t,
         json_type(f[5]) AS run_t, json_type(f[6]) AS task_t, json_type(f[7]) AS repo_t, json_type(f[8]) AS mode_t,
         json_type(f[10]) AS path_t,
         json_extract_string(f[1], '$') AS rid, json_extract_string(f[2], '$') AS kind,
         json_extract_string(f[3], '$') AS src,
         CASE WHEN json_type(f[4]) IN ('UBIGINT', 'BIGINT', 'DOUBLE') THEN CAST(f[4] AS DOUBLE) END AS ts_unix,
         json_extract_string(f[5], '$') AS run, json_extract_string(f[6], '$') AS task,
         json_extract_string(f[7], '$') AS repo, json_extract_string(f[8], '$') AS mode,
         CAST(f[9] AS VARCHAR) AS data, json_extract_string(f[10], '$') AS path
  FROM documents
),
judged AS (
  SELECT *,
         coalesce(kind_t = 'VARCHAR' AND kind = 'repo', false) AS repo_line,
         CASE
           WHEN NOT utf8 THEN {'field': 'line', 'rule': 'is not valid UTF-8'}
           WHEN NOT valid THEN {'field': 'line', 'rule': 'is not valid JSON'}
           -- DuckDB's parser also takes NaN, Infinity and a trailing comma, which JSON has not: outside strings, refused
           -- (as forge_stage_events refuses them in a SQLite store's data; here the line is the JSON read)
           WHEN (contains(text, 'NaN') OR contains(text, 'Infinity') OR regexp_matches(text, ',\s*[}\]]'))
                AND regexp_matches(text, '^(?:[^"]|"(?:[^"\\]|\\.)*")*?(?:[\[:,]\s*[-+]?(?:NaN|Infinity)|,\s*[}\]])')
             THEN {'field': 'line', 'rule': 'is not valid JSON (NaN, Infinity or a trailing comma)'}
           WHEN NOT object THEN {'field': 'line', 'rule': 'must be a JSON object'}
           WHEN coalesce(kind_t = 'VARCHAR' AND kind = 'repo', false) THEN CASE
             WHEN coalesce(repo_t, '') <> 'VARCHAR' OR repo = '' THEN {'field': 'repo', 'rule': 'a repo line needs repo, a non-empty string'}
             WHEN coalesce(path_t, '') <> 'VARCHAR' OR path = '' THEN {'field': 'path', 'rule': 'a repo line needs path, a non-empty string'}
             WHEN contains(path, chr(0)) THEN {'field': 'path', 'rule': 'holds a NUL character, which no path on a file system can'}
           END
           WHEN coalesce(rid_t, '') <> 'VARCHAR' OR rid = '' THEN {'field': 'rid', 'rule': 'must be a non-empty string'}
           WHEN coalesce(kind_t, '') <> 'VARCHAR' OR kind = '' THEN {'field': 'kind', 'rule': 'must be a non-empty string'}
           WHEN ts_unix IS NULL THEN {'field': 'ts', 'rule': 'must be unix seconds, a number'}
           WHEN NOT isfinite(ts_unix) OR ts_unix < 0 OR ts_unix >= 253402300800 THEN {'field': 'ts', 'rule': 'must be unix seconds between 1970 and 9999'}
           WHEN coalesce(src_t, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN {'field': 'src', 'rule': 'must be a string or null'}
           WHEN coalesce(run_t, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN {'field': 'run', 'rule': 'must be a string or null'}
           WHEN coalesce(task_t, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN {'field': 'task', 'rule': 'must be a string or null'}
           WHEN coalesce(repo_t, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN {'field': 'repo', 'rule': 'must be a string or null'}
           WHEN coalesce(mode_t, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN {'field': 'mode', 'rule': 'must be a string or null'}
         END AS problem
  FROM typed
)
SELECT position, line, CASE WHEN rid_t = 'VARCHAR' THEN rid END AS rid, kind, src, ts_unix, run, task, repo, mode,
       data, repo_line, path AS repo_path, problem.field AS problem_field, problem.rule AS problem_rule
FROM judged
