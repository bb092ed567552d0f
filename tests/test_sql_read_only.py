"""`loopmeter sql` reads and never writes: what a statement is, DuckDB's parser decides (its
statement types and syntax tree); only reads run, EXPLAIN ANALYZE in no spelling; `--file` is read
to a limit whatever it is; Ctrl-C during a query ends it with exit 130 and the interrupted line."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_cli
from forge_fixtures import tree_fingerprint
from loopmeter.sql.output import SQL_FILE_LIMIT
from loopmeter.sql.run import run_sql
from loopmeter.errors import LoopmeterError
from loopmeter.storage import Warehouse

REFUSED = "loopmeter: error: loopmeter sql is read-only: "


def private_copy(demo: Path, base: Path) -> Path:
    """A copy of the demo warehouse of this test's own (beside it: `outside`, a folder a statement
    must not reach either), settled: its catalog rebuilt for the new place."""
    warehouse = base / "warehouse"
    shutil.copytree(demo, warehouse, symlinks=True)
    (base / "outside").mkdir()
    (base / "outside" / "kept.txt").write_text("a user's file\n")
    run_cli("sql", "SELECT 1", warehouse=warehouse)
    return warehouse


@pytest.fixture(scope="module")
def warehouse(demo_warehouse, tmp_path_factory) -> Path:
    return private_copy(demo_warehouse, tmp_path_factory.mktemp("read-only"))


def fingerprints(warehouse: Path) -> tuple[dict, dict]:
    return tree_fingerprint(warehouse), tree_fingerprint(warehouse.parent / "outside")


def a_runs_file(warehouse: Path) -> str:
    return str(sorted((warehouse / "runs").glob("*/*.parquet"))[0])


FORGED_JOURNAL = '{"tables": {"state/../../../x": ".versions/runs/forged"}, "folders": []}'
# Statements the read-only check let through (each wrote, or ran something it should not have).
HOSTILE = [
    "EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO 'file.csv'",
    "EXPLAIN ANALYZE COPY (SELECT * REPLACE ('FAIL' AS verification) FROM read_parquet('RUNS_FILE')) TO 'RUNS_FILE' "
    "(FORMAT parquet)",
    f"EXPLAIN ANALYZE COPY (SELECT '{FORGED_JOURNAL}') TO '.state/publishing.json' (FORMAT csv, HEADER false, QUOTE '')",
    "explain analyse copy (select 42 as x) to 'file.csv'",
    "EXPLAIN /* a comment */ ANALYZE COPY (SELECT 42 AS x) TO 'file.csv'",
    "EXPLAIN -- a comment\nANALYZE COPY (SELECT 42 AS x) TO 'file.csv'",
    "EXPLAIN (ANALYZE) COPY (SELECT 42 AS x) TO 'file.csv'",
    "EXPLAIN (FORMAT JSON, ANALYZE true) COPY (SELECT 42 AS x) TO 'file.csv'",
    "EXPLAIN (ANALYZE, FORMAT JSON) COPY (SELECT 42 AS x) TO 'file.csv' (FORMAT json)",
    'EXPLAIN ("analyze") COPY (SELECT 42 AS x) TO \'file.csv\'',
    "EXPLAIN ANALYZE SELECT count(*) FROM runs",
    "EXPLAIN ANALYZE COPY runs TO 'runs.csv'",
    "WITH t AS (COPY (SELECT 42 AS x) TO 'file.csv') SELECT 1",
    "with t as (copy (select 42 as x) to 'file.csv') select * from t",
    "WITH a AS (SELECT 1), t AS (COPY (SELECT 42 AS x) TO 'file.csv' (FORMAT parquet)) SELECT * FROM a",
    "SELECT * FROM query('COPY (SELECT 42 AS x) TO ''file.csv''')",
    "FROM query('WITH t AS (COPY (SELECT 42 AS x) TO ''file.csv'') SELECT 1')",
    "SELECT 1; EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO 'file.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO 'file.csv'; SELECT 1",
    "CALL checkpoint()",
    "CALL force_checkpoint()",
    "CALL enable_profiling()",
    "CALL enable_logging()",
    "SELECT * FROM enable_logging()",
    "PRAGMA enable_profiling",
    "PRAGMA disable_optimizer",
    "PRAGMA import_database('dump')",
    "CALL query('SELECT 1')",
    "SELECT write_log('x')",
]


@pytest.mark.slow
@pytest.mark.parametrize("statement", HOSTILE)
def test_a_statement_that_is_not_a_read_is_refused_and_nothing_changes(warehouse, statement):
    statement = statement.replace("RUNS_FILE", a_runs_file(warehouse))
    before = fingerprints(warehouse)
    result = run_cli("sql", statement, warehouse=warehouse, check=1)
    assert result.stderr.startswith(REFUSED), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
    assert fingerprints(warehouse) == before
    assert not (ROOT / "file.csv").exists() and not (warehouse / "file.csv").exists()


def test_explain_analyze_is_named_as_such_and_explain_alone_still_shows_the_plan(warehouse):
    refused = run_cli("sql", "EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO 'file.csv'", warehouse=warehouse, check=1)
    assert refused.stderr == (f"{REFUSED}an EXPLAIN ANALYZE statement is refused (it runs the statement it explains; "
                              "EXPLAIN alone shows the plan)\n")
    in_a_cte = run_cli("sql", "WITH t AS (COPY (SELECT 42 AS x) TO 'file.csv') SELECT 1", warehouse=warehouse, check=1)
    assert in_a_cte.stderr.startswith(f"{REFUSED}a COPY statement is refused (to save a result, use --out FILE.csv")
    plan = run_cli("sql", "EXPLAIN SELECT count(*) FROM runs", "--format", "csv", warehouse=warehouse)
    assert plan.stdout.startswith("explain_key,explain_value\nphysical_plan,")
    as_json = run_cli("sql", "EXPLAIN (FORMAT JSON) SELECT 1", "--format", "csv", warehouse=warehouse)
    assert as_json.stdout.startswith("explain_key,explain_value\nphysical_plan,")


@pytest.mark.parametrize(("statement", "expected"), [
    ("SELECT count(*) AS n FROM runs", "n\n720\n"),
    ("WITH t AS (SELECT count(*) AS n FROM scenarios) SELECT n FROM t", "n\n6\n"),
    ("FROM (SELECT 1 AS n) -- a comment\n", "n\n1\n"),
    ("SELECT count(*) AS n FROM (DESCRIBE runs) WHERE column_name = 'verification'", "n\n1\n"),
    ("SELECT count(*) AS n FROM (SUMMARIZE scenarios)", "n\n10\n"),
    ("SELECT name FROM (SHOW TABLES) WHERE name = 'runs'", "name\nruns\n"),
    ("SELECT name FROM pragma_table_info('scenarios') WHERE cid = 0", "name\nscenario_id\n"),
    ("CALL pragma_table_info('scenarios')", None),
    ("PRAGMA table_info('scenarios')", None),
    ("SELECT count(*) AS n FROM read_parquet('runs/*/*.parquet')", "n\n720\n"),
    ("SELECT count(*) AS n FROM query_table('scenarios')", "n\n6\n"),
])
def test_reads_still_answer(warehouse, statement, expected):
    result = run_cli("sql", statement, "--format", "csv", warehouse=warehouse)
    if expected is None:
        assert result.stdout.startswith("cid,name,type,notnull,dflt_value,pk\n0,scenario_id,VARCHAR,")
    else:
        assert result.stdout == expected



@pytest.mark.parametrize("statement", [
    "SELECT comment FROM duckdb_views() WHERE view_name = 'scenarios'",
    'SELECT comment FROM "DUCKDB_VIEWS"() WHERE view_name = \'scenarios\'',
    "SELECT comment FROM system.main.duckdb_columns() WHERE table_name = 'scenarios' AND column_index = 1",
    "SELECT TABLE_COMMENT AS comment FROM Information_Schema.tables WHERE table_name = 'scenarios'",
    "SELECT description AS comment FROM pg_description WHERE description LIKE 'One row per ForgeLoop scenario spec%'",
    "SELECT comment FROM query_table('duck' || 'db_views') WHERE view_name = 'scenarios'",
    "SELECT comment FROM query_table($t) WHERE view_name = 'scenarios'",
])
def test_every_way_sql_reads_a_comment_finds_the_registry_s(warehouse, statement):
    from loopmeter.storage import registry

    table = registry.table("scenarios")
    expected = table.columns[0][2] if "column_index" in statement else table.description
    given = ("--param", "t=duckdb_views") if "$t" in statement else ()
    result = run_cli("sql", statement, *given, "--format", "json", warehouse=warehouse)
    assert json.loads(result.stdout) == [{"comment": expected}]

# ---- the property: statements of every kind DuckDB's parser knows ---------------------------
# One statement (or more) of each type, writing where a write would be seen: in the warehouse, in
# its state, over a table file, and beside it.
BY_TYPE = {
    "SELECT": ["SELECT count(*) AS n FROM runs", "FROM scenarios SELECT scenario_id", "VALUES (1, 'a')",
               "SHOW TABLES", "DESCRIBE runs", "SUMMARIZE scenarios", "SELECT * FROM read_blob('loopmeter.duckdb')"],
    "INSERT": ["INSERT INTO runs SELECT * FROM runs", "INSERT INTO t VALUES (1)"],
    "UPDATE": ["UPDATE runs SET verification = 'FAIL'"],
    "CREATE": ["CREATE TABLE t AS SELECT 1", "CREATE VIEW v AS SELECT 1", "CREATE SECRET s (TYPE s3)",
               "CREATE TEMP TABLE t AS SELECT 1"],
    "DELETE": ["DELETE FROM runs"],
    "PREPARE": ["PREPARE p AS SELECT 1"],
    "EXECUTE": ["EXECUTE p"],
    "ALTER": ["ALTER VIEW runs RENAME TO r"],
    "TRANSACTION": ["BEGIN TRANSACTION", "COMMIT", "ROLLBACK"],
    "COPY": ["COPY (SELECT 42 AS x) TO 'file.csv'", "COPY runs TO 'RUNS_FILE' (FORMAT parquet)",
             "COPY (SELECT 1) TO '.state/publishing.json'", "COPY (SELECT 1) TO 'OUTSIDE/file.csv'",
             "COPY (SELECT 1) TO 'dir' (FORMAT parquet, PARTITION_BY (a))"],
    "ANALYZE": ["ANALYZE"],
    "VARIABLE_SET": ["SET VARIABLE x = 1"],
    "CREATE_FUNC": ["CREATE MACRO m(a) AS a"],
    "EXPLAIN": ["EXPLAIN SELECT 1"],
    "DROP": ["DROP VIEW runs"],
    "EXPORT": ["EXPORT DATABASE 'dump'"],
    "PRAGMA": ["PRAGMA table_info('runs')", "PRAGMA enable_profiling", "PRAGMA version"],
    "VACUUM": ["VACUUM"],
    "CALL": ["CALL pragma_table_info('runs')", "CHECKPOINT", "CALL checkpoint()"],
    "SET": ["SET profiling_output = 'p.json'", "RESET threads", "USE memory", "PRAGMA profiling_output = 'p.json'"],
    "LOAD": ["LOAD parquet", "INSTALL httpfs", "FORCE INSTALL json"],
    "ATTACH": ["ATTACH 'other.db'"],
    "DETACH": ["DETACH other"],
    "MULTI": ["PIVOT (SELECT 1 AS a, 2 AS b) ON a USING sum(b)"],
    "COPY_DATABASE": ["COPY FROM DATABASE memory TO other"],
    "MERGE_INTO": ["MERGE INTO runs USING scenarios ON false WHEN NOT MATCHED THEN INSERT DEFAULT VALUES"],
}
# Types the parser of this DuckDB gives no text: the relational API's own; one its Python module
# cannot name (UPDATE EXTENSIONS: a ValueError for the type, INVALID here); and those whose
# statements it gives another type (the example, and that type).
NOT_FROM_TEXT = {"RELATION": None, "LOGICAL_PLAN": None, "INVALID": None, "EXTENSION": None,
                 "ANALYZE": ("ANALYZE", "VACUUM"), "VARIABLE_SET": ("SET VARIABLE x = 1", "SET"),
                 "CREATE_FUNC": ("CREATE MACRO m(a) AS a", "CREATE"),
                 "COPY_DATABASE": ("COPY FROM DATABASE memory TO other", "PRAGMA")}
READS = [(kind, text) for kind in ("SELECT",) for text in BY_TYPE[kind]] + [
    ("PRAGMA", "PRAGMA table_info('runs')"), ("CALL", "CALL pragma_table_info('runs')")]
ALL = [text for texts in BY_TYPE.values() for text in texts] + ["UPDATE EXTENSIONS"]


def test_the_examples_cover_every_statement_type_of_duckdb():
    connection = duckdb.connect()
    seen = {}
    for text in ALL:
        try:
            (statement,) = connection.extract_statements(text)
            seen[text] = statement.type.name
        except ValueError:  # UPDATE EXTENSIONS: a type the Python module has no name for
            seen[text] = "INVALID"
    assert set(duckdb.StatementType.__members__) - set(NOT_FROM_TEXT) <= set(seen.values())
    for example in filter(None, NOT_FROM_TEXT.values()):
        assert seen[example[0]] == example[1], example


ANALYZE = ["EXPLAIN ANALYZE ", "explain analyse ", "EXPLAIN /* x */ ANALYZE ", "EXPLAIN --x\n ANALYZE ",
           "EXPLAIN (ANALYZE) ", "EXPLAIN (FORMAT JSON, ANALYZE true) ", "EXPLAIN (ANALYZE false) "]
PLAIN = ["", "EXPLAIN ", "explain /* x */ ", "EXPLAIN (FORMAT JSON) "]


def _in_a_cte(text: str) -> str:
    return f"WITH c AS ({text}) SELECT * FROM c"


def _quoted(text: str) -> str:
    return text.replace("'", "''")


WRAPS = {
    "as it is": lambda text: text,
    "in a CTE": _in_a_cte,
    "in a subquery": lambda text: f"SELECT * FROM ({text})",
    "through query()": lambda text: f"SELECT * FROM query('{_quoted(text)}')",
    "after a read": lambda text: f"SELECT 1; {text}",
    "before a read": lambda text: f"{text};\nSELECT 1",
    "commented": lambda text: f"/* leading */ {text} -- trailing",
}


@st.composite
def statements(draw):
    """(SQL text, whether it only reads and should answer)."""
    if draw(st.booleans()):
        _, base = draw(st.sampled_from(READS))
        reads = True
    else:
        base, reads = draw(st.sampled_from(ALL)), False
    prefix = draw(st.sampled_from(ANALYZE + PLAIN))
    analyzed = prefix in ANALYZE
    text = prefix + base
    wrap = draw(st.sampled_from(sorted(WRAPS)))
    text = WRAPS[wrap](text)
    if draw(st.booleans()):  # another case for every keyword
        text = draw(st.sampled_from([text.upper(), text.lower()])) if "'" not in text else text
    answers = reads and not analyzed and wrap in ("as it is", "commented") and (
        prefix == "" or base.startswith(("SELECT", "FROM", "VALUES")))
    return text, answers


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=statements())
def test_no_statement_of_any_kind_changes_a_file_inside_or_outside_and_reads_answer(warehouse, case):
    text, answers = case
    text = text.replace("RUNS_FILE", a_runs_file(warehouse)).replace("OUTSIDE", str(warehouse.parent / "outside"))
    before = fingerprints(warehouse)
    try:
        frame = run_sql(Warehouse(warehouse), text)
    except LoopmeterError as error:
        assert not answers, (text, str(error))
        assert "\n" not in str(error)
    else:
        assert frame.height >= 1, text
    assert fingerprints(warehouse) == before, text


# ---- --file: a limit, whatever the file is --------------------------------------------------
def test_sql_file_from_a_device_that_never_ends_is_refused_in_one_line(warehouse):
    result = run_cli("sql", "--file", "/dev/zero", warehouse=warehouse, check=1, timeout=60)
    assert result.stderr == (f"loopmeter: error: --file /dev/zero: larger than {SQL_FILE_LIMIT >> 20} MiB, the most "
                             "loopmeter sql reads as SQL\n")


@pytest.mark.slow
def test_sql_file_beyond_the_limit_is_refused_and_one_within_it_runs(warehouse, tmp_path):
    sparse = tmp_path / "huge.sql"
    with open(sparse, "wb") as handle:
        handle.truncate(50 << 30)  # 50 GB of nothing, on no disk
    result = run_cli("sql", "--file", str(sparse), warehouse=warehouse, check=1, timeout=60)
    assert result.stderr == (f"loopmeter: error: --file {sparse}: larger than {SQL_FILE_LIMIT >> 20} MiB, the most "
                             "loopmeter sql reads as SQL\n")
    at_the_limit = tmp_path / "padded.sql"
    at_the_limit.write_text("SELECT 42 AS x" + " " * (SQL_FILE_LIMIT - len("SELECT 42 AS x")))
    assert run_cli("sql", "--file", str(at_the_limit), "--format", "csv", warehouse=warehouse).stdout == "x\n42\n"
    not_text = tmp_path / "latin1.sql"
    not_text.write_bytes(b"SELECT '\xe9'")
    refused = run_cli("sql", "--file", str(not_text), warehouse=warehouse, check=1)
    assert refused.stderr == f"loopmeter: error: --file {not_text}: not UTF-8 text (byte 8: invalid continuation byte)\n"


def test_sql_file_from_a_fifo_or_a_pipe_is_read_to_the_same_limit(warehouse, tmp_path):
    fifo = tmp_path / "sql.fifo"
    os.mkfifo(fifo)
    endless = threading.Thread(target=_feed, args=(fifo,), daemon=True)
    endless.start()
    result = run_cli("sql", "--file", str(fifo), warehouse=warehouse, check=1, timeout=60)
    assert result.stderr == (f"loopmeter: error: --file {fifo}: larger than {SQL_FILE_LIMIT >> 20} MiB, the most "
                             "loopmeter sql reads as SQL\n")
    endless.join(timeout=30)
    command = [sys.executable, "-m", "loopmeter", "sql", "--file", "/dev/stdin", "--format", "csv", "--warehouse", str(warehouse)]
    piped = subprocess.run(command, input="SELECT 42 AS x", capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, "x\n42\n", "")


def _feed(fifo: Path) -> None:
    """Write to the FIFO until its reader leaves."""
    try:
        with open(fifo, "wb") as handle:
            while True:
                handle.write(b" " * (1 << 20))
    except (BrokenPipeError, OSError):
        pass


# ---- Ctrl-C ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_during_a_long_query_ends_it_at_once_with_exit_130(demo_warehouse, tmp_path):
    warehouse = private_copy(demo_warehouse, tmp_path)
    ready = warehouse / "ready.fifo"  # DuckDB opens it as the query starts running
    os.mkfifo(ready)
    query = ("SELECT (SELECT max(length(content)) FROM read_text('ready.fifo')) + sum(range % 7) AS s "
             "FROM range(10000000000000)")  # hours of work
    process = subprocess.Popen([sys.executable, "-m", "loopmeter", "sql", query, "--warehouse", str(warehouse)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        opened = threading.Thread(target=lambda: open(ready, "w").close(), daemon=True)
        opened.start()
        opened.join(timeout=120)  # the query is running once its FIFO is open
        if opened.is_alive():
            os.close(os.open(ready, os.O_RDONLY | os.O_NONBLOCK))  # let the opener go
            pytest.fail(f"the query did not start: {process.communicate(timeout=60)}")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, (process.returncode, stderr)
    assert stderr == "loopmeter: interrupted; no table was replaced: the warehouse keeps its previous tables\n"
    assert stdout == ""


def test_a_file_in_the_working_directory_s_tmp_folder_is_outside_too(warehouse, tmp_path):
    """DuckDB's default folder for spilled data, `.tmp` under the working directory, is no folder of the
    warehouse's: a query reads nothing there (and would write nothing there)."""
    place = tmp_path / "elsewhere"
    (place / ".tmp").mkdir(parents=True)
    (place / ".tmp" / "notes.csv").write_text("outside,secret\n")
    refused = run_cli("sql", f"SELECT * FROM read_csv('{place}/.tmp/notes.csv', header=false)", warehouse=warehouse,
                      cwd=place, check=1)
    assert "secret" not in refused.stdout and len(refused.stderr.strip().splitlines()) == 1
    settings = run_cli("sql", "SELECT value FROM duckdb_settings() WHERE name = 'temp_directory'", "--format", "csv",
                       warehouse=warehouse, cwd=place)
    assert settings.stdout.splitlines() == ["value", '""']  # no folder: nothing spills, nothing is read there


def test_an_out_of_memory_error_is_one_line_without_advice_sql_refuses():
    """DuckDB's own error (a real one: a session held to 20 MB) advises SET statements `sql` refuses:
    the line keeps what failed and says what the user can do."""
    import duckdb

    from loopmeter.sql.run import out_of_memory

    connection = duckdb.connect()
    connection.execute("SET memory_limit = '20MB'")
    connection.execute("SET threads = 1")
    with pytest.raises(duckdb.OutOfMemoryException) as raised:
        connection.execute("SELECT list(range) FROM range(30000000)").fetchall()
    line = out_of_memory(raised.value)
    assert line.startswith("the query needs more memory than DuckDB may take on this machine (Out of Memory Error: "
                           "failed to allocate "), line
    assert line.endswith("): ask for less at once (filter or aggregate its rows, fewer columns, a LIMIT)")
    assert "\n" not in line and "SET" not in line
