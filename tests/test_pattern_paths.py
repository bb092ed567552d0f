"""A warehouse, an input and an output whose paths hold `[`, `*` or `?`.

DuckDB expands `*`, `?` and `[...]` in every path it reads, and polars expands them by default:
a warehouse at `/data/w[1]` read as a pattern finds no file, or another folder's. Every stage
runs here on folders named with those characters and must give what it gives under a plain name.
A `?` cannot be in the path of a DuckDB database (DuckDB takes what follows it as options), nor a
`\\` in a path DuckDB reads (a folder separator to it), so a warehouse there is refused in one line
before anything is made.
"""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from conftest import run_cli

REPORTS = [("report", "summary"), ("report", "tail"), ("report", "outliers"), ("report", "regression"),
           ("report", "routing"), ("report", "srm"), ("report", "survival"), ("report", "confidence")]


def reports(warehouse: Path) -> dict[str, object]:
    """Every report's --json, the warehouse's own path taken out."""
    found = {}
    for command in REPORTS:
        done = run_cli(*command, "--json", warehouse=warehouse)
        found[" ".join(command)] = json.loads(done.stdout.replace(json.dumps(str(warehouse))[1:-1], "WAREHOUSE"))
    return found


def test_every_stage_works_in_folders_named_like_patterns(tmp_path, demo_warehouse, corpus_warehouse):
    base = tmp_path / "a[1]*b"
    base.mkdir()
    (tmp_path / "a1b").mkdir()  # what `a[1]*b/w[h]` matches as a pattern: another warehouse (the corpus')
    (tmp_path / "a1b" / "wh").symlink_to(corpus_warehouse)
    warehouse, data = base / "w[h]", base / "data[0]"
    run_cli("demo", "--data", str(data), "--quiet", warehouse=warehouse)
    assert reports(warehouse) == reports(demo_warehouse)
    # the catalog's views read the files, for DuckDB as its users open it (from a folder of its own)
    database = duckdb.connect(str(warehouse / "loopmeter.duckdb"), read_only=True)
    try:
        assert database.sql("SELECT count(*) FROM runs").fetchall() == [(720,)]
        assert database.sql("SELECT count(DISTINCT run_set_id) FROM forgeloop_documents").fetchall() == [(3,)]
    finally:
        database.close()
    count = ("sql", "SELECT count(*) AS n, count(DISTINCT month) AS months FROM forge_events", "--format", "json")
    assert run_cli(*count, warehouse=warehouse).stdout == run_cli(*count, warehouse=demo_warehouse).stdout
    run_cli("check", warehouse=warehouse)
    # again, on what is stored: the kept files are read back (the manifest merged, the events matched)
    results = data / "sample" / "forgeloop"
    changed = sorted((results / "raw").rglob("*.json"))[0]
    changed.write_text(changed.read_text().replace('"runIndex"', '"runIndex" ', 1))
    again = run_cli("ingest", "forgeloop", str(results), "--aggregate", "--quiet", warehouse=warehouse)
    assert "1 accepted, 719 unchanged, 0 rejected" in again.stdout
    run_cli("aggregate", "--full", "--engine", "pool", "--workers", "2", "--quiet", warehouse=warehouse)
    forge = run_cli("ingest", "forge", str(data / "sample" / "forge" / "export.jsonl"), warehouse=warehouse)
    assert " 0 new events, " in forge.stdout and " 0 rejected" in forge.stdout, forge.stdout
    assert reports(warehouse) == reports(demo_warehouse)
    out = base / "page[1].html"
    run_cli("report", "html", "--out", str(out), warehouse=warehouse)
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "sample-tail-30" in page


@pytest.mark.parametrize("character", ["?", "\\"])
def test_a_warehouse_path_with_a_question_mark_or_a_backslash_is_refused_before_anything_is_made(
        tmp_path, corpus, character):
    """DuckDB takes what follows a `?` in a database's path as options, and a `\\` in a path it reads
    for a folder separator (`a\\b` would read the warehouse at `a/b`)."""
    place = tmp_path / f"is{character}it"
    (tmp_path / "is" / "it" / "w").mkdir(parents=True)  # what `is\it/w` would reach
    done = run_cli("ingest", "forgeloop", str(corpus / "results"), warehouse=place / "w", check=1)
    assert done.stderr.count("\n") == 1 and f"`{character}`" in done.stderr and "rename the folder" in done.stderr
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["is", "it", "w"]
    # through a link too: the path the warehouse really is at is the one DuckDB is given
    place.mkdir()
    (tmp_path / "plain").symlink_to(place)
    done = run_cli("sql", "SELECT 1", warehouse=tmp_path / "plain" / "w", check=1)
    assert f"`{character}`" in done.stderr and str(place / "w") in done.stderr, done.stderr
    assert list(place.iterdir()) == []
