"""What `ingest forgeloop` and `aggregate` spend besides their work: the packages they load (never
pandas or numpy, which pyarrow would import where they are installed), the catalog statements a rebuild runs
(the views of the tables still present are kept), the manifest written without a DuckDB session
when it fits in memory. Seen from outside: `python -X importtime`, the catalog file, the tables."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb

from conftest import ROOT, run_cli
from loopmeter.catalog import table_docs

QUALITY = "codex-quality-repeat5-20260831"


def loaded_modules(importtime_stderr: str) -> set[str]:
    """Every module a `python -X importtime` run printed (an import that failed prints its line too)."""
    return {line.split("|")[-1].strip() for line in importtime_stderr.splitlines() if "|" in line} - {"imported package"}


def pandas_loaded(importtime_stderr: str) -> bool:
    """Whether pandas itself was loaded: its submodules (a failed `import pandas` prints one line, `pandas`)."""
    return any(name.startswith("pandas.") or name == "pyarrow.pandas_compat" for name in loaded_modules(importtime_stderr))


def test_ingest_aggregate_and_a_report_load_no_pandas_where_it_is_installed(tmp_path, corpus):
    assert importlib.util.find_spec("pandas") is not None, "the test environment installs pandas: else this proves nothing"
    warehouse = tmp_path / "w"
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    ingest = run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"),
                     warehouse=warehouse, env=env)
    aggregate = run_cli("aggregate", warehouse=warehouse, env=env)
    report = run_cli("report", "tail", "--json", warehouse=warehouse, env=env)
    # the ingest built its columns with pyarrow (where pyarrow would import pandas) and wrote through it
    assert {"pyarrow", "pyarrow.parquet"} <= loaded_modules(ingest.stderr)
    assert "pyarrow.parquet" in loaded_modules(aggregate.stderr)
    for name, result in (("ingest", ingest), ("aggregate", aggregate), ("report", report)):
        assert not pandas_loaded(result.stderr), name
        assert "numpy" not in loaded_modules(result.stderr), name
    assert json.loads(report.stdout)["runSets"][0]["runSetId"] == QUALITY


def test_the_commands_that_draw_with_numpy_load_it_and_a_program_importing_loopmeter_keeps_pyarrows_numpy(tmp_path, corpus):
    assert importlib.util.find_spec("numpy") is not None
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--aggregate",
            warehouse=warehouse)
    confidence = run_cli("report", "confidence", "--json", warehouse=warehouse, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert {"numpy", "pyarrow"} <= loaded_modules(confidence.stderr)
    assert json.loads(confidence.stdout)["rows"]
    # the command's own process loads pyarrow without numpy; a program using loopmeter's modules does not
    program = ("import sys; from loopmeter.warehouse import Warehouse; from loopmeter.forgeloop.stage import aggregate; "
               "import numpy, pyarrow; w = Warehouse(sys.argv[1]); print(w.read('forgeloop_mode_runs').height, "
               "pyarrow.array(numpy.arange(3)).to_pylist())")
    done = subprocess.run([sys.executable, "-c", program, str(warehouse)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 1)[1].strip() == "[0, 1, 2]"


def catalog_content(database: Path) -> dict:
    """What a client of loopmeter.duckdb sees: every view (SQL, comment) and column (type, comment)."""
    with duckdb.connect(str(database), read_only=True) as connection:
        return {
            "views": connection.sql("SELECT view_name, sql, comment FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall(),
            "columns": connection.sql("SELECT table_name, column_index, column_name, data_type, comment FROM duckdb_columns() "
                                      "WHERE database_name = current_database() ORDER BY 1, 2").fetchall(),
        }


def test_a_rebuild_for_new_tables_keeps_the_views_of_the_others_and_builds_what_a_whole_rebuild_builds(tmp_path, corpus):
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), warehouse=warehouse)
    database, state = warehouse / "loopmeter.duckdb", warehouse / ".state" / "catalog.json"
    assert json.loads(state.read_text())["tables"] == ["ingest_manifest", "runs", "scenarios"]
    # a mark on the runs view, and the record vouching for the file that carries it: a view kept as it
    # is keeps the mark, a view written again gets the documentation's comment
    with duckdb.connect(str(database)) as connection:
        connection.execute("COMMENT ON VIEW runs IS 'kept as it was'")
    record = json.loads(state.read_text())
    record["file"] = [database.stat().st_size, database.stat().st_mtime_ns]
    state.write_text(json.dumps(record))

    run_cli("aggregate", "--quiet", warehouse=warehouse)  # seven forgeloop_* tables: seven views added
    added = catalog_content(database)
    comments = {name: comment for name, _, comment in added["views"]}
    assert comments["runs"] == "kept as it was"
    assert len(comments) == 10 and comments["forgeloop_mode_stats"] == table_docs()["forgeloop_mode_stats"][0]
    assert json.loads(state.read_text())["tables"][:2] == ["forgeloop_comparisons", "forgeloop_context_inflation"]

    run_cli("catalog", "--quiet", warehouse=warehouse)  # the whole file again, from the documentation
    whole = catalog_content(database)
    assert {name: comment for name, _, comment in whole["views"]}["runs"] == table_docs()["runs"][0]
    unmarked = [(name, sql, comment) for name, sql, comment in added["views"] if name != "runs"]
    assert unmarked == [(name, sql, comment) for name, sql, comment in whole["views"] if name != "runs"]
    assert added["columns"] == whole["columns"] and len(whole["columns"]) > 150
    assert run_cli("sql", "SELECT count(*) AS n FROM runs", "--format", "csv", warehouse=warehouse).stdout.split() == ["n", "525"]


def test_a_moved_warehouse_keeps_no_view_of_the_place_it_left(tmp_path, corpus):
    warehouse = tmp_path / "w"
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"),
            "--run-set", QUALITY, warehouse=warehouse)
    moved = tmp_path / "moved"
    shutil.move(warehouse, moved)
    run_cli("aggregate", "--quiet", warehouse=moved)  # seven tables more, and another place: every view written again
    content = catalog_content(moved / "loopmeter.duckdb")
    assert len(content["views"]) == 10
    assert all(str(moved) in sql and str(warehouse) + "/" not in sql for _, sql, _ in content["views"])


def manifest_rows(warehouse: Path) -> list[tuple]:
    with duckdb.connect() as connection:
        return connection.sql(f"SELECT * EXCLUDE (ingested_at) FROM read_parquet('{warehouse}/ingest_manifest/**/*.parquet')").fetchall()


def test_the_manifest_is_the_same_whether_it_was_held_in_memory_or_spooled(tmp_path, corpus, monkeypatch):
    from loopmeter.forgeloop import manifest
    from loopmeter.forgeloop.ingest import ingest_forgeloop
    from loopmeter.warehouse import Warehouse

    held = Warehouse(tmp_path / "held")
    with held.lock():
        ingest_forgeloop(held, corpus / "results", corpus / "scenarios")
    monkeypatch.setattr(manifest, "IN_MEMORY_ROWS", 50)  # spooled every 50 rows: merged by DuckDB
    spooled = Warehouse(tmp_path / "spooled")
    with spooled.lock():
        ingest_forgeloop(spooled, corpus / "results", corpus / "scenarios")
    rows = manifest_rows(held.root)
    assert len(rows) == 532 and rows == manifest_rows(spooled.root)
    assert [row[:3] for row in rows] == sorted(row[:3] for row in rows)  # kind, source, path


def test_ingest_with_aggregate_writes_what_ingest_then_aggregate_write(corpus, tmp_path):
    """`ingest forgeloop --aggregate`: the two steps in one process, the same documents and tables."""
    one, two = tmp_path / "one", tmp_path / "two"
    arguments = ["ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios")]
    together = json.loads(run_cli(*arguments, "--aggregate", "--json", warehouse=one).stdout)
    run_cli(*arguments, "--quiet", warehouse=two)
    apart = json.loads(run_cli("aggregate", "--json", warehouse=two).stdout)
    assert [entry["runSetId"] for entry in together["aggregate"]["runSets"]] == [e["runSetId"] for e in apart["runSets"]]
    assert together["accepted"] == 525
    for path in sorted((two / "aggregate").rglob("*.json")):
        assert (one / "aggregate" / path.relative_to(two / "aggregate")).read_bytes() == path.read_bytes()
    query = "SELECT * FROM forgeloop_comparisons ORDER BY ALL"
    assert run_cli("sql", query, "--format", "csv", warehouse=one).stdout == run_cli("sql", query, "--format", "csv",
                                                                                     warehouse=two).stdout
    text = run_cli(*arguments, "--aggregate", warehouse=one).stdout
    assert "525 unchanged" in text and "2 unchanged since the last aggregate" in text
