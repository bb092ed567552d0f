-- forge_stage_events: each event envelope with its data parsed once into the typed fields its kind's forge_* table needs, and the first rule its data breaks.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- The rules reject what the seed's scripts could not read (an attempt without its number, a wall_started
-- that is not a time, a plan's tasks that are not an object, ...); values the seed tolerates (an unknown
-- status, a duration that is not a number) are kept. Kinds this version does not know are kept unchecked.
-- Each kind first tests all its rules at once with cheap text checks (`ok`); only the rare event that
-- fails is examined rule by rule for the message. Rules inside a plan's tasks and routes:
-- forge_stage_plan_tasks, forge_stage_route_entries.
-- Inputs: forge_envelopes (the output of forge_jsonl_envelopes or forge_sqlite_envelopes); the macros
-- of forge_json_macros.
-- Output: position, line, rid, kind, src, ts, ts_unix, run, task, repo, mode, name, data (the data object's
-- JSON text as loaded), month, problem_field, problem_rule; and per kind (null elsewhere) — attempt:
-- attempt (data.n), dwarf, status, reason, reviewed_commit, base_ref; dispatch: role, attempt, spec, model,
-- effort, harness, wall_started, wall_started_unix, duration_s; event merge: status, commit (data.commit,
-- else data.reviewed_commit), integration; event integrate_advanced: branch, parent, candidate, target;
-- outcome: status, candidate, reviewed, base_ref, branch, horizon_days, integrated, integrated_unix,
-- horizon_rev, horizon, integrate_run, added, surviving, file_paths, file_added, file_surviving,
-- reverted_by, recorded; plan: revision, fractal (fractal_selection.enabled is truthy, as Python reads it),
-- task_count, tasks (the tasks object as JSON text).
WITH base AS (
  SELECT position, line, rid, kind, src, ts_unix, run, task, repo, mode, data
  FROM forge_envelopes
  WHERE problem_field IS NULL AND NOT repo_line
),
attempts AS (
  SELECT * EXCLUDE (f, ok), f[1] AS name_json, f IS NULL AS unparsable,
    CASE WHEN ok THEN NULL
      WHEN NOT j_is_integer(f[2]) THEN {'field': 'data.n', 'rule': 'must be the attempt number, an integer'}
      WHEN NOT j_text_or_null(f[3]) THEN {'field': 'data.dwarf', 'rule': 'must be a spec (a string) or null'}
      WHEN NOT j_text_or_null(f[4]) THEN {'field': 'data.status', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[5]) THEN {'field': 'data.reason', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[6]) THEN {'field': 'data.reviewed_commit', 'rule': 'must be a commit (a string) or null'}
      WHEN NOT j_text_or_null(f[7]) THEN {'field': 'data.base_ref', 'rule': 'must be a commit (a string) or null'}
    END AS kind_problem,
    CASE WHEN ok THEN TRY_CAST(f[2] AS BIGINT) ELSE j_bigint(f[2]) END AS attempt,
    j_text(f[3]) AS dwarf, j_text(f[4]) AS status, j_text(f[5]) AS reason,
    j_text(f[6]) AS reviewed_commit, j_text(f[7]) AS base_ref
  -- an integer's text is its number's (TRY_CAST alone takes '1.5' for 2, and 2.0 goes the long way)
  FROM (SELECT *, f IS NOT NULL AND coalesce(f[2] = CAST(TRY_CAST(f[2] AS BIGINT) AS VARCHAR), false)
                  AND j_text_or_null(f[3]) AND j_text_or_null(f[4]) AND j_text_or_null(f[5])
                  AND j_text_or_null(f[6]) AND j_text_or_null(f[7]) AS ok
        FROM (SELECT *, CAST(try(json_extract(data, ['$.name', '$.n', '$.dwarf', '$.status', '$.reason',
                                                     '$.reviewed_commit', '$.base_ref'])) AS VARCHAR[]) AS f
              FROM base WHERE kind = 'attempt'))
),
dispatches AS (
  SELECT * EXCLUDE (f, ok), f[1] AS name_json, f IS NULL AS unparsable,
    CASE WHEN ok THEN NULL
      WHEN NOT j_text_or_null(f[2]) THEN {'field': 'data.role', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[4]) THEN {'field': 'data.spec', 'rule': 'must be a spec (a string) or null'}
      WHEN NOT j_text_or_null(f[5]) THEN {'field': 'data.model', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[6]) THEN {'field': 'data.effort', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[7]) THEN {'field': 'data.harness', 'rule': 'must be a string or null'}
      WHEN NOT j_number_or_null(f[8]) THEN {'field': 'data.wall_started', 'rule': 'must be unix seconds, a number, or null'}
      WHEN j_double(f[8]) < 0 OR j_double(f[8]) >= 253402300800
        THEN {'field': 'data.wall_started', 'rule': 'must be unix seconds between 1970 and 9999'}
    END AS kind_problem,
    j_text(f[2]) AS role, j_bigint(f[3]) AS attempt, j_text(f[4]) AS spec, j_text(f[5]) AS model,
    j_text(f[6]) AS effort, j_text(f[7]) AS harness, j_double(f[8]) AS wall_started_unix, j_double(f[9]) AS duration_s
  FROM (SELECT *, f IS NOT NULL AND j_text_or_null(f[2]) AND j_text_or_null(f[4]) AND j_text_or_null(f[5])
                  AND j_text_or_null(f[6]) AND j_text_or_null(f[7])
                  AND (f[8] IS NULL OR TRY_CAST(f[8] AS DOUBLE) BETWEEN 0 AND 253402300799.999999) AS ok
        FROM (SELECT *, CAST(try(json_extract(data, ['$.name', '$.role', '$.attempt', '$.spec', '$.model', '$.effort',
                                                     '$.harness', '$.wall_started', '$.duration_s'])) AS VARCHAR[]) AS f
              FROM base WHERE kind = 'dispatch'))
),
events AS (
  SELECT * EXCLUDE (f, ok, event_name), f[1] AS name_json, f IS NULL AS unparsable,
    CASE WHEN ok THEN NULL
      WHEN event_name = 'merge' AND NOT j_text_or_null(f[2]) THEN {'field': 'data.status', 'rule': 'must be a string or null'}
      WHEN event_name = 'merge' AND NOT j_text_or_null(f[3]) THEN {'field': 'data.commit', 'rule': 'must be a commit (a string) or null'}
      WHEN event_name = 'merge' AND NOT j_text_or_null(f[4]) THEN {'field': 'data.reviewed_commit', 'rule': 'must be a commit (a string) or null'}
      WHEN event_name = 'merge' AND NOT j_text_or_null(f[5]) THEN {'field': 'data.integration', 'rule': 'must be a commit (a string) or null'}
      WHEN event_name = 'integrate_advanced' AND NOT j_text_or_null(f[6]) THEN {'field': 'data.branch', 'rule': 'must be a string or null'}
      WHEN event_name = 'integrate_advanced' AND NOT j_text_or_null(f[7]) THEN {'field': 'data.parent', 'rule': 'must be a commit (a string) or null'}
      WHEN event_name = 'integrate_advanced' AND NOT j_text_or_null(f[8]) THEN {'field': 'data.candidate', 'rule': 'must be a commit (a string) or null'}
      WHEN event_name = 'integrate_advanced' AND NOT j_text_or_null(f[9]) THEN {'field': 'data.target', 'rule': 'must be a string or null'}
    END AS kind_problem,
    CASE WHEN event_name = 'merge' THEN j_text(f[2]) END AS status,
    CASE WHEN event_name = 'merge' THEN CASE WHEN j_text(f[3]) <> '' THEN j_text(f[3]) ELSE j_text(f[4]) END END AS commit,
    CASE WHEN event_name = 'merge' THEN j_text(f[5]) END AS integration,
    CASE WHEN event_name = 'integrate_advanced' THEN j_text(f[6]) END AS branch,
    CASE WHEN event_name = 'integrate_advanced' THEN j_text(f[7]) END AS parent,
    CASE WHEN event_name = 'integrate_advanced' THEN j_text(f[8]) END AS candidate,
    CASE WHEN event_name = 'integrate_advanced' THEN j_text(f[9]) END AS target
  FROM (SELECT *, f IS NOT NULL AND (event_name IS DISTINCT FROM 'merge' OR (j_text_or_null(f[2]) AND j_text_or_null(f[3])
                                      AND j_text_or_null(f[4]) AND j_text_or_null(f[5])))
                  AND (event_name IS DISTINCT FROM 'integrate_advanced' OR (j_text_or_null(f[6]) AND j_text_or_null(f[7])
                                      AND j_text_or_null(f[8]) AND j_text_or_null(f[9]))) AS ok
        FROM (SELECT *, j_text(f[1]) AS event_name
              FROM (SELECT *, CAST(try(json_extract(data, ['$.name', '$.status', '$.commit', '$.reviewed_commit',
                                                           '$.integration', '$.branch', '$.parent', '$.candidate',
                                                           '$.target'])) AS VARCHAR[]) AS f
                    FROM base WHERE kind = 'event')))
),
outcomes AS (  -- the files' lists computed here, for outcomes only
  SELECT * EXCLUDE (file_map), map_keys(file_map) AS file_paths,
         list_transform(map_values(file_map), lambda v: v[1]) AS file_added,
         list_transform(map_values(file_map), lambda v: v[2]) AS file_surviving
  FROM (
  SELECT * EXCLUDE (f), f[1] AS name_json, f IS NULL AS unparsable,
    CASE
      WHEN NOT j_text_or_null(f[1]) THEN {'field': 'data.name', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[2]) THEN {'field': 'data.status', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[3]) THEN {'field': 'data.candidate', 'rule': 'must be a commit (a string) or null'}
      WHEN NOT j_text_or_null(f[4]) THEN {'field': 'data.reviewed', 'rule': 'must be a commit (a string) or null'}
      WHEN NOT j_text_or_null(f[5]) THEN {'field': 'data.base_ref', 'rule': 'must be a commit (a string) or null'}
      WHEN NOT j_text_or_null(f[6]) THEN {'field': 'data.branch', 'rule': 'must be a string or null'}
      WHEN NOT j_text_or_null(f[7]) THEN {'field': 'data.horizon_rev', 'rule': 'must be a commit (a string) or null'}
      WHEN NOT j_text_or_null(f[8]) THEN {'field': 'data.integrate_run', 'rule': 'must be a string or null'}
      WHEN NOT (j_missing_or_null(f[9]) OR (j_is_integer(f[9]) AND j_bigint(f[9]) BETWEEN 0 AND 9007199254740991))
        THEN {'field': 'data.horizon_days', 'rule': 'must be a whole number of days from 0 to 2^53 - 1, or null'}
      WHEN NOT (j_missing_or_null(f[10]) OR (j_is_integer(f[10]) AND j_bigint(f[10]) BETWEEN 0 AND 9007199254740991))
        THEN {'field': 'data.added', 'rule': 'must be a count of lines from 0 to 2^53 - 1, or null'}
      WHEN NOT (j_missing_or_null(f[11]) OR (j_is_integer(f[11]) AND j_bigint(f[11]) BETWEEN 0 AND 9007199254740991))
        THEN {'field': 'data.surviving', 'rule': 'must be a count of lines from 0 to 2^53 - 1, or null'}
      WHEN j_bigint(f[11]) > j_bigint(f[10]) THEN {'field': 'data.surviving', 'rule': 'must be at most data.added (lines surviving of those added)'}
      WHEN j_text(f[1]) = 'survival' AND coalesce(j_text(f[2]) NOT IN ('ok', 'no_additions', 'lost'), true)
        THEN {'field': 'data.status', 'rule': 'must be ok, no_additions or lost (a survival outcome)'}
      WHEN NOT j_number_or_null(f[12]) OR j_double(f[12]) < 0 OR j_double(f[12]) >= 253402300800
        THEN {'field': 'data.integrated_ts', 'rule': 'must be unix seconds between 1970 and 9999, or null'}
      WHEN NOT j_number_or_null(f[13]) OR j_double(f[13]) < 0 OR j_double(f[13]) >= 253402300800
        THEN {'field': 'data.horizon_ts', 'rule': 'must be unix seconds between 1970 and 9999, or null'}
      WHEN NOT (j_missing_or_null(f[14]) OR f[14][1] = '[') THEN {'field': 'data.reverted_by', 'rule': 'must be a list of commits or null'}
      WHEN f[14][1] = '[' AND len(list_filter(json_type(f[14], '$[*]'), lambda x: x <> 'VARCHAR')) > 0
        THEN {'field': 'data.reverted_by', 'rule': 'must be a list of commits (strings)'}
      WHEN NOT (j_missing_or_null(f[15]) OR f[15][1] = '{') THEN {'field': 'data.files', 'rule': 'must be an object of path -> [added, surviving] or null'}
      WHEN f[15][1] = '{' AND TRY_CAST(CAST(f[15] AS JSON) AS MAP(VARCHAR, BIGINT[])) IS NULL
        THEN {'field': 'data.files', 'rule': 'must be an object of path -> [added, surviving] (whole numbers)'}
    END AS kind_problem,
    j_text(f[2]) AS status, j_text(f[3]) AS candidate, j_text(f[4]) AS reviewed, j_text(f[5]) AS base_ref,
    j_text(f[6]) AS branch, j_text(f[7]) AS horizon_rev, j_text(f[8]) AS integrate_run,
    j_bigint(f[9]) AS horizon_days, j_bigint(f[10]) AS added, j_bigint(f[11]) AS surviving,
    j_double(f[12]) AS integrated_unix, j_double(f[13]) AS horizon_unix,
    CASE WHEN f[14][1] = '[' THEN json_extract_string(f[14], '$[*]') END AS reverted_by,
    CASE WHEN f[15][1] = '{' THEN TRY_CAST(CAST(f[15] AS JSON) AS MAP(VARCHAR, BIGINT[])) END AS file_map
  FROM (SELECT *, CAST(try(json_extract(data, ['$.name', '$.status', '$.candidate', '$.reviewed', '$.base_ref', '$.branch',
                                               '$.horizon_rev', '$.integrate_run', '$.horizon_days', '$.added', '$.surviving',
                                               '$.integrated_ts', '$.horizon_ts', '$.reverted_by', '$.files'])) AS VARCHAR[]) AS f
        FROM base WHERE kind = 'outcome'))
),
plans AS (
  SELECT * EXCLUDE (f), f[1] AS name_json, f IS NULL AS unparsable,
    CASE
      WHEN NOT (j_missing_or_null(f[3]) OR f[3][1] = '{') THEN {'field': 'data.fractal_selection', 'rule': 'must be an object or null'}
      WHEN NOT (j_missing_or_null(f[5]) OR f[5][1] = '{') THEN {'field': 'data.tasks', 'rule': 'must be an object of task id -> task'}
    END AS kind_problem,
    j_bigint(f[2]) AS revision,
    -- Python's truthiness of fractal_selection.enabled
    CASE WHEN f[4] IS NULL OR f[4] IN ('null', 'false', '""', '[]', '{}') THEN false
         WHEN j_is_number(f[4]) THEN TRY_CAST(f[4] AS DOUBLE) <> 0
         ELSE true END AS fractal,
    CASE WHEN f[5][1] = '{' THEN CAST(len(json_keys(f[5])) AS BIGINT) ELSE 0 END AS task_count,
    CASE WHEN f[5][1] = '{' THEN f[5] END AS tasks
  FROM (SELECT *, CAST(try(json_extract(data, ['$.name', '$.revision', '$.fractal_selection',
                                               '$.fractal_selection.enabled', '$.tasks'])) AS VARCHAR[]) AS f
        FROM base WHERE kind = 'plan')
),
others AS (
  SELECT * EXCLUDE (f), f[1] AS name_json, f IS NULL AS unparsable, CAST(NULL AS STRUCT(field VARCHAR, rule VARCHAR)) AS kind_problem
  FROM (SELECT *, CAST(try(json_extract(data, ['$.name'])) AS VARCHAR[]) AS f
        FROM base WHERE kind NOT IN ('attempt', 'dispatch', 'event', 'outcome', 'plan'))
),
everything AS (
  SELECT * FROM attempts
  UNION ALL BY NAME SELECT * FROM dispatches
  UNION ALL BY NAME SELECT * FROM events
  UNION ALL BY NAME SELECT * FROM outcomes
  UNION ALL BY NAME SELECT * FROM plans
  UNION ALL BY NAME SELECT * FROM others
),
judged AS (
  SELECT *,
    CASE
      WHEN unparsable THEN {'field': 'data', 'rule': 'must be a JSON object (it is not valid JSON)'}
      -- DuckDB's parser also takes NaN, Infinity and a trailing comma, which JSON has not: outside strings, refused
      WHEN (contains(data, 'NaN') OR contains(data, 'Infinity') OR regexp_matches(data, ',\s*[}\]]'))
           AND regexp_matches(data, '^(?:[^"]|"(?:[^"\\]|\\.)*")*?(?:[\[:,]\s*[-+]?(?:NaN|Infinity)|,\s*[}\]])')
        THEN {'field': 'data', 'rule': 'must be a JSON object (it is not valid JSON: NaN, Infinity or a trailing comma)'}
      WHEN ltrim(data)[1] <> '{' THEN {'field': 'data', 'rule': 'must be a JSON object (found ' || j_type(ltrim(data)) || ')'}
      ELSE kind_problem
    END AS problem
  FROM everything
)
SELECT position, line, rid, kind, src, to_timestamp(ts_unix) AS ts, ts_unix, run, task, repo, mode,
       j_text(name_json) AS name, data,
       left(CAST(CAST(to_timestamp(ts_unix) AS DATE) AS VARCHAR), 7) AS month,  -- YYYY-MM (ts is within 1970-9999)
       problem.field AS problem_field, problem.rule AS problem_rule,
       attempt, dwarf, status, reason, reviewed_commit, base_ref,
       role, spec, model, effort, harness,
       CASE WHEN problem IS NULL THEN to_timestamp(wall_started_unix) END AS wall_started, wall_started_unix, duration_s,
       commit, integration, branch, parent, candidate, target,
       reviewed, horizon_days,
       CASE WHEN problem IS NULL THEN to_timestamp(integrated_unix) END AS integrated, integrated_unix,
       horizon_rev,
       CASE WHEN problem IS NULL THEN to_timestamp(horizon_unix) END AS horizon,
       integrate_run, added, surviving,
       file_paths, file_added, file_surviving,
       reverted_by,
       to_timestamp(ts_unix) AS recorded,
       revision, fractal, task_count, tasks
FROM judged
