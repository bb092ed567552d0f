"""Reports read what `aggregate` stored, and only while it is what the runs give now.

The reports never analyse the runs: they read the documents `aggregate` stored (the table
forgeloop_documents, text for text what it wrote to the files) and the analysis tables. Each run
set's documents carry the digest of the runs they were computed from; a run set ingested or
changed since makes the report refuse, in one line saying to run `loopmeter aggregate`. The digest
follows the runs' content, so a copied warehouse, or runs read again, report without aggregating.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli

REPORTS = ("tail", "summary", "outliers", "regression")
QUALITY = "codex-quality-repeat5-20260831"
TAIL = "codex-tail-repeat20-20260831"


def every_report(warehouse: Path) -> dict[tuple[str, str], str]:
    return {(name, json): run_cli("report", name, *([json] if json else []), warehouse=warehouse).stdout
            for name in REPORTS for json in ("", "--json")}


def ingest(warehouse: Path, corpus: Path, *run_sets: str, full: bool = False) -> None:
    chosen = [option for run_set in run_sets for option in ("--run-set", run_set)]
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), *chosen,
            *(["--full"] if full else []), warehouse=warehouse)


def stale(warehouse: Path, *run_sets: str) -> None:
    """Every report refuses in one line naming the run sets and what to run."""
    for name in REPORTS:
        refused = run_cli("report", name, "--json", warehouse=warehouse, check=1)
        (line,) = refused.stderr.splitlines()
        assert line.startswith(f"loopmeter: error: the stored aggregate is older than the runs in {warehouse} (run set")
        assert all(run_set in line for run_set in run_sets) and line.endswith("run `loopmeter aggregate` (it computes "
                                                                               "only what changed)"), line
        assert refused.stdout == ""


@pytest.mark.slow
def test_reports_print_the_aggregate_s_documents_and_refuse_once_the_runs_changed(tmp_path, corpus):
    warehouse = tmp_path / "warehouse"
    ingest(warehouse, corpus, QUALITY)
    refused = run_cli("report", "tail", warehouse=warehouse, check=1)
    assert refused.stderr.strip().endswith("are not aggregated yet; run `loopmeter aggregate` first")
    run_cli("aggregate", warehouse=warehouse)
    before = every_report(warehouse)
    assert [entry["runSetId"] for entry in json.loads(before[("tail", "--json")])["runSets"]] == [QUALITY]
    # the summary the report prints is the summary.json aggregate wrote, run set for run set
    written = json.loads((warehouse / "aggregate" / QUALITY / "summary.json").read_text())
    assert json.loads(before[("summary", "--json")])["runSets"][0]["runCount"] == written["runCount"]

    ingest(warehouse, corpus, TAIL)  # a run set ingested since: the stored numbers do not hold it
    stale(warehouse, TAIL)
    one = run_cli("report", "tail", "--json", "--run-set", QUALITY, warehouse=warehouse).stdout  # still current
    assert [entry["runSetId"] for entry in json.loads(one)["runSets"]] == [QUALITY]
    run_cli("aggregate", warehouse=warehouse)
    after = every_report(warehouse)
    assert [entry["runSetId"] for entry in json.loads(after[("tail", "--json")])["runSets"]] == [QUALITY, TAIL]

    run_cli("aggregate", "--run-set", QUALITY, warehouse=warehouse)  # one run set again: the others stay current
    assert every_report(warehouse) == after


@pytest.mark.slow
def test_a_copied_or_re_read_warehouse_reports_without_aggregating(tmp_path, corpus_warehouse, corpus):
    reports = every_report(corpus_warehouse)
    copy = tmp_path / "copy"
    shutil.copytree(corpus_warehouse, copy, symlinks=True, copy_function=shutil.copy)  # new inodes and times
    assert every_report(copy) == reports
    ingest(copy, corpus, full=True)  # every run file read and every run set written again: the same runs
    assert every_report(copy) == reports


@pytest.mark.slow
@pytest.mark.parametrize("how", ["a run changed", "a run removed"])
def test_a_changed_run_file_makes_its_run_set_stale_until_the_next_aggregate(tmp_path, corpus, how):
    results = tmp_path / "results"
    shutil.copytree(corpus / "results", results)
    warehouse = tmp_path / "warehouse"
    ingest_args = ("ingest", "forgeloop", str(results), "--scenarios", str(corpus / "scenarios"))
    run_cli(*ingest_args, "--aggregate", warehouse=warehouse)
    run_file = sorted((results / "raw" / TAIL).rglob("*.json"))[0]
    if how == "a run changed":
        document = json.loads(run_file.read_text())
        document["usage"]["totalTokens"] += 1
        document["usage"]["inputTokens"] += 1
        run_file.write_text(json.dumps(document))
    else:
        run_file.unlink()
    run_cli(*ingest_args, warehouse=warehouse)
    stale(warehouse, TAIL)
    assert QUALITY in run_cli("report", "tail", "--json", "--run-set", QUALITY, warehouse=warehouse).stdout
    aggregated = json.loads(run_cli("aggregate", "--json", warehouse=warehouse).stdout)
    assert [(entry["runSetId"], entry["recomputed"]) for entry in aggregated["runSets"]] == [(QUALITY, False), (TAIL, True)]
    assert run_cli("report", "tail", "--json", warehouse=warehouse).returncode == 0
