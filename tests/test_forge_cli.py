"""The Forge commands as a user runs them: demo data, ingest, reports, harvest; and the named queries."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import run_cli
from forge_fixtures import ROOT, seed_json, seed_routing
from loopmeter.forge import samples


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    directory = tmp_path_factory.mktemp("demo")
    info = samples.write_sample(directory, runs=150)
    return directory, info


@pytest.mark.slow
def test_the_demo_as_a_user_runs_it(demo):
    directory, info = demo
    warehouse = directory / "warehouse"
    ingest = run_cli("ingest", "forge", str(directory / "dataset.sqlite"), warehouse=warehouse, process=True, check=None)
    assert ingest.returncode == 0, ingest.stderr
    assert re.match(r"\d+ rows read: \d+ new events, 0 already stored, 0 rejected, 3 repositories", ingest.stdout)
    again = run_cli("ingest", "forge", str(directory / "export.jsonl"), "--json", warehouse=warehouse, process=True, check=None)
    assert again.returncode == 0 and json.loads(again.stdout)["stored"] == 0

    routing = run_cli("report", "routing", "--json", warehouse=warehouse, process=True, check=None)
    assert routing.returncode == 0, routing.stderr
    assert routing.stdout == seed_json(seed_routing(directory / "dataset.sqlite")) + "\n"

    harvest = run_cli("harvest", "survival", "--include-temp", "--now", str(info["now"]), "--json", warehouse=warehouse, process=True, check=None)
    assert harvest.returncode == 0, harvest.stderr
    document = json.loads(harvest.stdout)
    assert document["recorded"] == 6 and document["counts"] == {"ok": 5, "lost": 1, "pending": 1}
    survival = run_cli("report", "survival", "--json", warehouse=warehouse, process=True, check=None)
    assert survival.returncode == 0 and sum(g["tasks"] for g in json.loads(survival.stdout)["groups"]) == 5

    listed = run_cli("queries", process=True, check=None)
    assert listed.returncode == 0 and "forge_routing_observational" in listed.stdout


@pytest.mark.slow
def test_harvest_time_can_be_given_as_iso(demo, tmp_path):
    directory, info = demo
    warehouse = tmp_path / "w"
    assert run_cli("ingest", "forge", str(directory / "dataset.sqlite"), "-q", warehouse=warehouse, process=True, check=None).returncode == 0
    result = run_cli("harvest", "survival", "--include-temp", "--dry-run", "--now", "2026-02-14T08:00:00Z",
                      warehouse=warehouse, process=True, check=None)
    assert result.returncode == 0 and result.stdout.startswith("would record 6 survival outcome(s) at 14 days")
    bad = run_cli("harvest", "survival", "--now", "tomorrow-ish", warehouse=warehouse, process=True, check=None)
    assert bad.returncode == 2 and "give unix seconds or an ISO 8601 time" in bad.stderr


def test_every_forge_query_says_what_it_answers_inputs_and_output():
    for path in sorted((ROOT / "queries").glob("forge_*.sql")):
        lines = path.read_text().splitlines()
        assert lines[0].startswith(f"-- {path.stem}: "), path.name
        header = "\n".join(line for line in lines if line.startswith("--"))
        assert "Inputs:" in header or "Defines:" in header, path.name
        assert "Output:" in header or "Defines:" in header, path.name


def test_the_format_is_documented():
    text = (ROOT / "docs" / "forge-format.md").read_text()
    for needle in ("version 1", "dataset.sqlite", "JSON Lines", "propensity", "integrate_advanced", "outcome:survival:"):
        assert needle in text


@pytest.mark.slow
def test_a_demo_stopped_while_it_made_its_sample_makes_it_whole_next_time(tmp_path):
    """A demo stopped midway leaves the ForgeLoop sample only in a folder aside (renamed into place whole),
    and the Forge sample without its record (its repositories half made): the next demo makes each again,
    and gives what a demo that was never stopped gives."""
    data, warehouse = tmp_path / "data", tmp_path / "warehouse"
    first = json.loads(run_cli("demo", "--data", str(data), "--json", "--quiet", warehouse=warehouse).stdout)
    (data / "sample" / "forge" / "sample.json").unlink()  # stopped after the repositories, before the record
    (data / "sample" / "forgeloop").rename(data / "sample" / ".forgeloop.partial")  # stopped before the rename
    shutil.rmtree(data / "sample" / ".forgeloop.partial" / "raw" / "sample-tail-30")  # a run set half written
    again = json.loads(run_cli("demo", "--data", str(data), "--json", "--quiet", warehouse=tmp_path / "again").stdout)
    made = [step for step in again["steps"] if step.startswith("sample ")]
    assert all(" made in " in step for step in made), made
    assert [step.replace(str(tmp_path / "again"), str(warehouse)) for step in again["steps"]] == first["steps"]
    assert not (data / "sample" / ".forgeloop.partial").exists()
