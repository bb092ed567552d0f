"""The warehouse for people: the DuckDB database, ad hoc SQL, the named queries, BI-ready Parquet."""
from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, run_cli
from loopmeter.storage import registry
from loopmeter.storage.documentation import schema_markdown
from loopmeter.sql.queries import list_queries, runs_inside


def test_database_has_a_documented_view_per_table(demo_warehouse):
    previous = os.getcwd()
    os.chdir(demo_warehouse)  # the views read Parquet paths relative to the warehouse
    try:
        connection = duckdb.connect(str(demo_warehouse / "loopmeter.duckdb"), read_only=True)
        views = {name: comment for name, comment in connection.sql(
            "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert {"runs", "scenarios", "ingest_manifest", "forgeloop_mode_stats", "forgeloop_comparisons"} <= set(views)
        assert all(comment and comment != "(undocumented table)" for comment in views.values()), views
        columns = connection.sql(
            "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE database_name = current_database()"
        ).fetchall()
        assert len(columns) > 150
        undocumented = [(t, c) for t, c, comment in columns if not comment or comment == "(undocumented)"]
        assert undocumented == []
        assert connection.sql("SELECT count(*) FROM runs").fetchall()[0][0] == (30 + 5 + 5) * 6 * 3
        assert connection.sql("SELECT count(*) FROM forge_tasks").fetchall()[0][0] > 1000
    finally:
        os.chdir(previous)


def test_schema_page_is_generated_from_the_documentation():
    assert (ROOT / "docs" / "schema.md").read_text() == schema_markdown(), "regenerate: loopmeter schema --markdown > docs/schema.md"
    for name, table in registry.tables().items():
        description, columns = table.description, table.columns
        assert description and columns, name
        assert len({column for column, _, _ in columns}) == len(columns), name


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, _ in list_queries() if not runs_inside(name)])
def test_every_named_query_runs_against_the_sample_warehouse(demo_warehouse, name):
    result = run_cli("sql", "--query", name, "--format", "json", warehouse=demo_warehouse)
    rows = json.loads(result.stdout)
    assert isinstance(rows, list) and rows and isinstance(rows[0], dict)
    csv = run_cli("sql", "--query", name, "--format", "csv", warehouse=demo_warehouse).stdout
    assert pl.read_csv(csv.encode()).height == len(rows)


@pytest.mark.parametrize("name", [name for name, _ in list_queries() if runs_inside(name)])
def test_every_stage_step_is_used_by_its_stage_and_refused_ad_hoc(demo_warehouse, name):
    sources = "".join(path.read_text() for path in (ROOT / "pipeline").rglob("*.py"))
    assert f"query_text('{name}')" in sources or f'query_text("{name}")' in sources, f"{name} is not run by any stage"
    refused = run_cli("sql", "--query", name, warehouse=demo_warehouse, check=1)
    assert "is a step of a stage, not a query of the warehouse" in refused.stderr


def test_queries_are_listed_with_their_header():
    listed = dict(list_queries())
    assert listed["forgeloop_pairs"].startswith("comparable pairs")
    printed = run_cli("queries").stdout
    assert "forgeloop_run_metrics" in printed and "every per-run value ForgeLoop summarises" in printed


def test_sql_formats(demo_warehouse, tmp_path):
    text = "SELECT mode, count(*) AS runs FROM runs WHERE run_set_id = $run_set GROUP BY mode ORDER BY mode"
    as_json = json.loads(run_cli("sql", text, "--param", "run_set=sample-legacy-5", "--format", "json", warehouse=demo_warehouse).stdout)
    assert as_json == [{"mode": "direct", "runs": 30}, {"mode": "forgeloopAdaptive", "runs": 30}, {"mode": "forgeloopBalanced", "runs": 30}]
    as_csv = run_cli("sql", text, "--param", "run_set=sample-legacy-5", "--format", "csv", warehouse=demo_warehouse).stdout
    assert as_csv.splitlines() == ["mode,runs", "direct,30", "forgeloopAdaptive,30", "forgeloopBalanced,30"]
    run_cli("sql", text, "--param", "run_set=sample-legacy-5", "--format", "parquet", "--out", str(tmp_path / "r.parquet"), warehouse=demo_warehouse)
    assert pl.read_parquet(tmp_path / "r.parquet")["runs"].to_list() == [30, 30, 30]
    query_file = tmp_path / "q.sql"
    query_file.write_text("SELECT count(*) AS n FROM scenarios")
    assert json.loads(run_cli("sql", "--file", str(query_file), "--format", "json", warehouse=demo_warehouse).stdout) == [{"n": 6}]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("CREATE TABLE x AS SELECT 1", "loopmeter sql is read-only: a CREATE statement is refused"),
        ("COPY runs TO 'x.csv'", "loopmeter sql is read-only: a COPY statement is refused"),
        ("INSERT INTO runs SELECT * FROM runs", "loopmeter sql is read-only: an INSERT statement is refused"),
        ("SELECT * FROM read_text('../../../../etc/passwd')", "Permission Error"),
        ("SELECT * FROM read_text('/etc/passwd')", "Permission Error"),
        ("SELEC 1", "SQL does not parse"),
    ],
)
def test_sql_refuses_writes_and_files_outside_the_warehouse(demo_warehouse, statement, message):
    result = run_cli("sql", statement, warehouse=demo_warehouse, check=1)
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_every_parquet_file_reads_on_its_own_in_duckdb_polars_and_pyarrow(demo_warehouse):
    files = sorted(Path(demo_warehouse).glob("*/**/*.parquet"))
    assert len(files) >= 10
    connection = duckdb.connect()
    for file in files:
        table = pq.read_table(file)
        assert pq.read_metadata(file).metadata[b"loopmeter.schema_version"] == b"2"  # the footer's key-value metadata, whoever wrote it
        assert pl.read_parquet(file).height == table.num_rows
        assert connection.sql(f"SELECT count(*) FROM read_parquet('{file}')").fetchall()[0][0] == table.num_rows
        for field in table.schema:
            assert field.name == field.name.lower() and " " not in field.name, (file, field.name)


def test_every_writer_builds_the_catalog_anew_with_a_view_of_each_table(tmp_path):
    """The catalog is built from nothing by every writer (a view loopmeter did not write never stays), and
    again by a reader when it is missing."""
    import duckdb

    from runs import run, write_tree

    results = write_tree(tmp_path / "results", [run()])
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(results), warehouse=warehouse)
    database = warehouse / "loopmeter.duckdb"
    forged = duckdb.connect(str(database))
    forged.execute("CREATE VIEW forged AS SELECT 42 AS answer")
    forged.close()
    run_cli("aggregate", "--quiet", warehouse=warehouse)  # a writer: new tables, and the forged view gone
    catalog = duckdb.connect(str(database), read_only=True)
    try:
        views = {name for (name,) in catalog.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        catalog.close()
    assert "forged" not in views and {"runs", "forgeloop_mode_stats", "forgeloop_documents"} <= views
    assert run_cli("check", warehouse=warehouse).returncode == 0
    database.unlink()
    run_cli("sql", "SELECT 1", warehouse=warehouse)  # a reader rebuilds the missing catalog
    assert database.exists()