"""Parity with ForgeLoop itself: every aggregate file of the corpus, byte for byte, and the reports."""
from __future__ import annotations

import json

import forgeloop_port as port
import pytest

from conftest import run_cli
from loopmeter.jsjson import dumps

RUN_SETS = {"codex-quality-repeat5-20260831": None, "codex-tail-repeat20-20260831": "tail"}


def _key_order(value):
    """The document with key order made visible, so == compares it too."""
    if isinstance(value, dict):
        return [(key, _key_order(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_key_order(item) for item in value]
    return value


@pytest.mark.parametrize("run_set", sorted(RUN_SETS))
def test_aggregate_files_equal_forgeloops_own(corpus, corpus_warehouse, tmp_path, run_set):
    out = tmp_path / "aggregate"
    args = ["aggregate", "--run-set", run_set, "--out", str(out), "--quiet"]
    if RUN_SETS[run_set]:
        args += ["--tier", RUN_SETS[run_set]]
    run_cli(*args, warehouse=corpus_warehouse)
    expected_dir = corpus / "results" / "aggregate" / run_set
    expected_files = sorted(path.name for path in expected_dir.glob("*.json"))
    assert sorted(path.name for path in (out / run_set).glob("*.json")) == expected_files
    assert len(expected_files) == 8
    for name in expected_files:
        ours = (out / run_set / name).read_text()
        theirs = (expected_dir / name).read_text()
        assert _key_order(json.loads(ours)) == _key_order(json.loads(theirs)), name
        assert ours == theirs, f"{name}: same values but different text"


def test_python_port_also_equals_forgeloop(corpus):
    """The oracle the property tests lean on is itself right on the corpus."""
    run_sets = port.read_run_sets(corpus / "results")
    profiles = port.read_profiles(corpus / "scenarios")
    for run_set, (documents, summary) in port.aggregate_run_sets(run_sets, profiles, "tail").items():
        expected_dir = corpus / "results" / "aggregate" / run_set
        for scenario, document in documents.items():
            assert dumps(document, 2) + "\n" == (expected_dir / f"{scenario}.json").read_text()
        assert dumps(summary, 2) + "\n" == (expected_dir / "summary.json").read_text()


@pytest.mark.parametrize("report", ["outliers", "tail", "summary", "regression"])
def test_reports_print_what_the_seed_scripts_print(corpus, corpus_warehouse, report):
    run_sets = port.read_run_sets(corpus / "results")
    profiles = port.read_profiles(corpus / "scenarios")
    expected = port.REPORTS[report](run_sets, profiles)
    printed = run_cli("report", report, "--json", warehouse=corpus_warehouse).stdout
    indent = 2 if report == "tail" else None  # the tail script pretty-prints, the others do not
    assert printed == dumps(expected, indent) + "\n"


def test_reports_for_one_run_set(corpus, corpus_warehouse):
    run_sets = port.read_run_sets(corpus / "results")
    profiles = port.read_profiles(corpus / "scenarios")
    only = {"codex-tail-repeat20-20260831": run_sets["codex-tail-repeat20-20260831"]}
    printed = run_cli("report", "outliers", "--json", "--run-set", "codex-tail-repeat20-20260831", warehouse=corpus_warehouse).stdout
    report = json.loads(printed)
    assert report == json.loads(dumps(port.report_outliers(only, profiles)))
    assert report["runSetCount"] == 1 and report["outlierCount"] == sum(len(r["outliers"]) for r in report["reports"]) > 0


def test_unknown_run_set_is_an_error(corpus_warehouse):
    result = run_cli("report", "tail", "--run-set", "no-such-set", warehouse=corpus_warehouse, check=1)
    assert "no run set 'no-such-set'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_aggregating_one_run_set_keeps_the_others_tables(corpus_warehouse, tmp_path):
    from loopmeter.storage import Warehouse

    run_cli("aggregate", "--out", str(tmp_path / "all"), "--quiet", warehouse=corpus_warehouse)
    run_cli("aggregate", "--run-set", "codex-quality-repeat5-20260831", "--out", str(tmp_path / "one"), "--quiet", warehouse=corpus_warehouse)
    store = Warehouse(corpus_warehouse)
    for table in ("forgeloop_mode_runs", "forgeloop_comparisons", "forgeloop_mode_stats"):
        counts = dict(store.read(table).group_by("run_set_id").len().iter_rows())
        assert set(counts) == set(RUN_SETS), table
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["codex-quality-repeat5-20260831"]


@pytest.mark.slow
def test_without_tier_the_runners_own_is_read_from_its_summary(corpus, corpus_warehouse, tmp_path):
    """ForgeLoop's summary.json beside the raw runs names the tier it ran at: ingest reads it, so a
    plain `aggregate` writes ForgeLoop's files, tier included; --tier still decides when given."""
    out = tmp_path / "aggregate"
    run_cli("aggregate", "--out", str(out), "--quiet", warehouse=corpus_warehouse)
    for run_set in sorted(RUN_SETS):
        for path in sorted((corpus / "results" / "aggregate" / run_set).glob("*.json")):
            assert (out / run_set / path.name).read_text() == path.read_text(), (run_set, path.name)
    given = tmp_path / "given"
    run_cli("aggregate", "--out", str(given), "--tier", "smoke", "--quiet", warehouse=corpus_warehouse)
    assert json.loads((given / "codex-tail-repeat20-20260831" / "summary.json").read_text())["tier"] == "smoke"


@pytest.mark.slow
def test_a_summary_that_names_no_known_tier_gives_none(tmp_path, corpus):
    import os
    import shutil

    results = tmp_path / "results"
    shutil.copytree(corpus / "results" / "raw", results / "raw")
    tail, quality = "codex-tail-repeat20-20260831", "codex-quality-repeat5-20260831"
    (results / "aggregate" / tail).mkdir(parents=True)
    (results / "aggregate" / tail / "summary.json").write_text('{"tier": "enormous"}')
    (results / "aggregate" / quality).mkdir(parents=True)
    os.symlink(corpus / "results" / "aggregate" / tail / "summary.json", results / "aggregate" / quality / "summary.json")
    run_cli("ingest", "forgeloop", str(results), "--quiet", warehouse=tmp_path / "w")
    stored = run_cli("sql", "SELECT count(*) AS n FROM run_set_tiers", "--format", "json", warehouse=tmp_path / "w",
                     check=None)
    assert stored.returncode == 1 or json.loads(stored.stdout) == [{"n": 0}]  # a link is never followed
    run_cli("aggregate", "--out", str(tmp_path / "out"), "--quiet", warehouse=tmp_path / "w")
    assert json.loads((tmp_path / "out" / tail / "summary.json").read_text())["tier"] is None
