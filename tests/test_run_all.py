"""`loopmeter run-all`: every stage on real data, in one command."""
from __future__ import annotations

import json

import pytest
from conftest import run_cli
from loopmeter.forge.samples import write_sample


@pytest.mark.slow
def test_run_all_on_the_corpus_and_a_forge_store(tmp_path, corpus):
    info = write_sample(tmp_path / "forge", runs=60)
    warehouse = tmp_path / "warehouse"
    result = run_cli(
        "run-all", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), "--forge", str(tmp_path / "forge" / "dataset.sqlite"),
        "--include-temp", "--tier", "tail", warehouse=warehouse,
    )
    for stage in ("ingest forgeloop: 525 runs in 2 run sets", "aggregate: 16 ForgeLoop documents", "ingest forge:",
                  "report routing:", "harvest survival:", "report html:"):
        assert stage in result.stdout, stage
    expected = corpus / "results" / "aggregate" / "codex-tail-repeat20-20260831"
    for path in expected.glob("*.json"):
        assert (warehouse / "aggregate" / "codex-tail-repeat20-20260831" / path.name).read_text() == path.read_text()
    report = (warehouse / "report.html").read_text()
    assert "First-pass rate per model and tier" in report and "Token distributions" in report
    tasks = json.loads(run_cli("sql", "SELECT count(*) AS n FROM forge_tasks", "--format", "json", warehouse=warehouse).stdout)
    assert tasks[0]["n"] > 100 and info["events"] > 1000


def test_run_all_needs_something_to_run(tmp_path):
    result = run_cli("run-all", "--json", warehouse=tmp_path / "w", check=2)
    assert "give RESULTS (ForgeLoop), --forge STORE (Forge), or both" in result.stderr


def test_run_all_json_lists_the_stages(tmp_path):
    write_sample(tmp_path / "forge", runs=20, git=False)
    printed = run_cli("run-all", "--forge", str(tmp_path / "forge" / "export.jsonl"), "--json", warehouse=tmp_path / "w").stdout
    outcome = json.loads(printed)
    assert [step.split(":")[0] for step in outcome["steps"]] == [
        "ingest forge", "report routing", "harvest survival", "report html"]
    assert outcome["rejected"] == 0 and outcome["report"].endswith("report.html")
    assert outcome["aggregate"] is None and outcome["notes"] == []  # no ForgeLoop data: no aggregate folder named


@pytest.mark.slow
def test_run_all_says_what_it_left_out(tmp_path, corpus):
    """Without --scenarios the reports list no scenario, and without --include-temp the harvest skips
    repositories under the temporary directory: run-all says both, as aggregate and harvest do."""
    write_sample(tmp_path / "forge", runs=20)
    command = ["run-all", str(corpus / "results"), "--forge", str(tmp_path / "forge" / "dataset.sqlite")]
    result = run_cli(*command, warehouse=tmp_path / "w")
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 2, result.stderr
    assert notes[0].startswith("note: no scenario file for ") and "(pass --scenarios DIR)" in notes[0]
    assert "in repositories under the temporary directory were not harvested (pass --include-temp" in notes[1]
    outcome = json.loads(run_cli(*command, "--json", warehouse=tmp_path / "w2").stdout)
    assert outcome["notes"] == notes
    quiet = run_cli(*command, "--quiet", warehouse=tmp_path / "w3")
    assert "note:" not in quiet.stderr
