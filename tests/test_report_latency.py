"""Reports read what `aggregate` stored while it is current, and print the very bytes an
analysis of the runs would print.

Which way a report went is seen from outside: reading the stored documents and tables
imports no DuckDB (`python -X importtime`); analysing the runs does.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import imported_packages, run_cli

REPORTS = ("tail", "summary", "outliers", "regression")
QUALITY = "codex-quality-repeat5-20260831"
TAIL = "codex-tail-repeat20-20260831"
RECORD = Path(".state") / "forgeloop-aggregate.json"


def report(warehouse: Path, name: str, *options: str) -> tuple[str, bool]:
    """(what `report NAME OPTIONS` prints, whether it analysed the runs: DuckDB was imported)."""
    result = run_cli("report", name, *options, warehouse=warehouse, env={"PYTHONPROFILEIMPORTTIME": "1"})
    return result.stdout, "duckdb" in imported_packages(result.stderr)


def every_report(warehouse: Path) -> dict[tuple[str, str], tuple[str, bool]]:
    return {(name, json): report(warehouse, name, *([json] if json else [])) for name in REPORTS for json in ("", "--json")}


def ingest(warehouse: Path, corpus: Path, *run_sets: str) -> None:
    chosen = [option for run_set in run_sets for option in ("--run-set", run_set)]
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), *chosen,
            warehouse=warehouse)


@pytest.fixture
def aggregated(tmp_path, corpus_warehouse) -> Path:
    """A copy of the corpus warehouse (its tables are links into it), aggregated."""
    warehouse = tmp_path / "warehouse"
    shutil.copytree(corpus_warehouse, warehouse, symlinks=True)
    run_cli("aggregate", warehouse=warehouse)
    return warehouse


def test_every_report_reads_what_aggregate_stored_and_prints_what_an_analysis_prints(aggregated):
    stored = every_report(aggregated)
    assert not any(analysed for _, analysed in stored.values()), [key for key, (_, analysed) in stored.items() if analysed]
    assert json.loads(stored[("tail", "--json")][0])["runSets"][1]["scenarios"][0]["scenarioId"] == "api-feature"
    one = {name: report(aggregated, name, "--json", "--run-set", TAIL) for name in ("tail", "regression")}
    assert not any(analysed for _, analysed in one.values())

    (aggregated / RECORD).unlink()  # nothing says what the stored numbers were computed from: analyse
    computed = every_report(aggregated)
    assert all(analysed for _, analysed in computed.values())
    for key, (text, _) in stored.items():
        assert text == computed[key][0], key
    for name, (text, _) in one.items():
        again, analysed = report(aggregated, name, "--json", "--run-set", TAIL)
        assert analysed and text == again, name
    assert [entry["runSetId"] for entry in json.loads(one["regression"][0])["reports"]] == [TAIL] * 7


def test_stored_numbers_are_read_only_while_they_are_what_the_runs_give(tmp_path, corpus):
    warehouse = tmp_path / "warehouse"
    ingest(warehouse, corpus, QUALITY)
    run_cli("aggregate", warehouse=warehouse)
    before, analysed = report(warehouse, "tail", "--json")
    assert not analysed and [entry["runSetId"] for entry in json.loads(before)["runSets"]] == [QUALITY]

    # a run set ingested since: the stored numbers do not hold it
    ingest(warehouse, corpus, TAIL)
    after, analysed = report(warehouse, "tail", "--json")
    assert analysed and [entry["runSetId"] for entry in json.loads(after)["runSets"]] == [QUALITY, TAIL]
    run_cli("aggregate", warehouse=warehouse)
    assert report(warehouse, "tail", "--json") == (after, False)

    # a document changed by hand is not what aggregate wrote: the runs say what it holds
    document = warehouse / "aggregate" / TAIL / "api-feature.json"
    text = document.read_text()
    assert '"expectedProfile": "balanced"' in text
    document.write_text(text.replace('"expectedProfile": "balanced"', '"expectedProfile": "edited"'))
    assert report(warehouse, "tail", "--json") == (after, True)
    run_cli("aggregate", warehouse=warehouse)
    assert report(warehouse, "tail", "--json") == (after, False)

    # a stored table written again by an aggregate of one run set (which keeps no record)
    run_cli("aggregate", "--run-set", QUALITY, warehouse=warehouse)
    assert report(warehouse, "outliers", "--json")[1]
    run_cli("aggregate", warehouse=warehouse)
    assert not report(warehouse, "outliers", "--json")[1]

    # --tier only names the tier in summary.json, which no report shows: what was stored still holds
    run_cli("aggregate", "--tier", "tail", warehouse=warehouse)
    summary, analysed = report(warehouse, "summary", "--json")
    (warehouse / RECORD).write_text('{"key": {"out": ')  # a record cut short: nothing is known
    assert not analysed and report(warehouse, "summary", "--json") == (summary, True)
