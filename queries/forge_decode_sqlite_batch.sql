-- forge_decode_sqlite_batch: a SQLite batch read as bytes (some text was not UTF-8), decoded column by column.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- Inputs: forge_raw_batch(position, rid, kind, src, ts, run, task, repo, mode, data) with BLOB text columns.
-- Output: the same columns as VARCHAR, and bad_text: the first column whose bytes are not UTF-8 (else null).
SELECT position,
       try(decode(rid)) AS rid, try(decode(kind)) AS kind, try(decode(src)) AS src, ts,
       try(decode(run)) AS run, try(decode(task)) AS task, try(decode(repo)) AS repo,
       try(decode(mode)) AS mode, try(decode(data)) AS data,
       CASE WHEN rid IS NOT NULL AND try(decode(rid)) IS NULL THEN 'rid'
            WHEN kind IS NOT NULL AND try(decode(kind)) IS NULL THEN 'kind'
            WHEN src IS NOT NULL AND try(decode(src)) IS NULL THEN 'src'
            WHEN run IS NOT NULL AND try(decode(run)) IS NULL THEN 'run'
            WHEN task IS NOT NULL AND try(decode(task)) IS NULL THEN 'task'
            WHEN repo IS NOT NULL AND try(decode(repo)) IS NULL THEN 'repo'
            WHEN mode IS NOT NULL AND try(decode(mode)) IS NULL THEN 'mode'
            WHEN data IS NOT NULL AND try(decode(data)) IS NULL THEN 'data'
       END AS bad_text
FROM forge_raw_batch
