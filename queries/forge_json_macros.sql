-- forge_json_macros: the JSON helpers of the Forge staging queries (macros, not a query), so a value is parsed once.
-- Runs inside: loopmeter ingest forge, on the batch it stages (not against the warehouse).
-- Each x is one value as JSON text, as json_extract(doc, [paths]) returns it (null when the path is missing);
-- its type shows in its first character, so most checks need no second parse.
-- Defines: j_missing_or_null(x), j_is_text(x), j_text_or_null(x), j_is_number(x), j_number_or_null(x),
-- j_is_integer(x), j_text(x) (the string's value), j_double(x), j_bigint(x), j_type(x) (a word for messages).
CREATE OR REPLACE TEMP MACRO j_missing_or_null(x) AS (x IS NULL OR x = 'null');
CREATE OR REPLACE TEMP MACRO j_is_text(x) AS (coalesce(x[1] = '"', false));
CREATE OR REPLACE TEMP MACRO j_text_or_null(x) AS (x IS NULL OR x = 'null' OR x[1] = '"');
CREATE OR REPLACE TEMP MACRO j_is_number(x) AS (coalesce(x[1] IN ('-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'), false));
CREATE OR REPLACE TEMP MACRO j_number_or_null(x) AS (x IS NULL OR x = 'null' OR j_is_number(x));
CREATE OR REPLACE TEMP MACRO j_is_integer(x) AS (j_is_number(x) AND TRY_CAST(x AS DOUBLE) = floor(TRY_CAST(x AS DOUBLE))
                                                 AND abs(TRY_CAST(x AS DOUBLE)) < 9.0e18);
CREATE OR REPLACE TEMP MACRO j_text(x) AS (CASE WHEN NOT j_is_text(x) THEN NULL
                                                WHEN contains(x, '\') THEN json_extract_string(x, '$')
                                                ELSE x[2:-2] END);
CREATE OR REPLACE TEMP MACRO j_double(x) AS (CASE WHEN j_is_number(x) THEN TRY_CAST(x AS DOUBLE) END);
CREATE OR REPLACE TEMP MACRO j_bigint(x) AS (CASE WHEN j_is_integer(x) THEN CAST(TRY_CAST(x AS DOUBLE) AS BIGINT) END);
CREATE OR REPLACE TEMP MACRO j_type(x) AS (CASE WHEN x IS NULL THEN 'nothing' WHEN x[1] = '"' THEN 'a string'
                                                WHEN x[1] = '{' THEN 'an object' WHEN x[1] = '[' THEN 'a list'
                                                WHEN x IN ('true', 'false') THEN 'a boolean' WHEN x = 'null' THEN 'null'
                                                ELSE 'a number' END);
