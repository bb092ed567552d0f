"""`loopmeter check --repair` where a table's damage once sent the user round in a circle, and where
Ctrl-C stops a repair midway."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_cli


@pytest.fixture
def copy(demo_warehouse, tmp_path) -> Path:
    target = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, target, symlinks=True)
    run_cli("catalog", "--quiet", warehouse=target)  # its views of this place
    return target


def table_file(warehouse: Path, table: str, partition: str = "") -> Path:
    return sorted((warehouse / table / partition).glob("*.parquet"))[0]


def damage_or_remove(warehouse: Path, table: str, how: str) -> None:
    """`damaged`: the table's first file cut short; `gone`: its link and every version removed."""
    if how == "damaged":
        damaged = table_file(warehouse, table)
        damaged.write_bytes(damaged.read_bytes()[:-50])
    else:
        shutil.rmtree(warehouse / ".versions" / table)
        (warehouse / table).unlink()


def test_a_damaged_ingest_manifest_is_read_again_from_the_recorded_run_files(copy):
    rows = run_cli("sql", "SELECT kind, status, count(*) AS n FROM ingest_manifest GROUP BY ALL ORDER BY ALL",
                   "--format", "json", warehouse=copy).stdout
    summary = run_cli("report", "summary", "--json", warehouse=copy).stdout
    damaged = table_file(copy, "ingest_manifest")
    damaged.write_bytes(damaged.read_bytes()[:-50])
    named = run_cli("check", warehouse=copy, check=1).stderr.splitlines()
    assert len(named) == 1 and "ingest_manifest/part-0.parquet: cannot be read as Parquet" in named[0], named

    repaired = run_cli("check", "--repair", "--json", warehouse=copy)
    report = json.loads(repaired.stdout)
    assert report["ok"] and report["notRepaired"] == [], report
    assert any(line.startswith("ingest_manifest: read again from") for line in report["repaired"]), report["repaired"]
    assert run_cli("sql", "SELECT kind, status, count(*) AS n FROM ingest_manifest GROUP BY ALL ORDER BY ALL",
                   "--format", "json", warehouse=copy).stdout == rows
    assert run_cli("report", "summary", "--json", warehouse=copy).stdout == summary


def test_ctrl_c_as_a_repair_builds_the_catalog_names_the_tables_it_replaced_and_exits_130(copy):
    damaged = table_file(copy, "runs", "run_set_id=sample-tail-30")
    damaged.write_bytes(damaged.read_bytes()[:-100])
    stopped = run_cli("check", "--repair", warehouse=copy, check=130,
                      env={"LOOPMETER_CRASH_AT": "before-publish:catalog", "LOOPMETER_CRASH_SIGNAL": "INT"})
    last = stopped.stderr.splitlines()[-1]
    assert last.startswith("loopmeter: interrupted; tables already replaced keep their new version (")
    assert "runs" in last.split("(")[1].split(")")[0].split(", ")
    assert "not repaired" not in stopped.stderr
    run_cli("check", "--repair", warehouse=copy)  # the catalog, built now
    assert run_cli("check", warehouse=copy).returncode == 0


def damage_a_page(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("table", ["forgeloop_mode_stats", "forgeloop_documents"])
def test_a_damaged_table_aggregate_computes_is_emptied_and_the_next_aggregate_computes_it(copy, table):
    summary = run_cli("report", "summary", "--json", warehouse=copy).stdout
    partition = "run_set_id=sample-tail-30" if table == "forgeloop_documents" else ""
    damaged = table_file(copy, table, partition)
    damaged.write_bytes(damaged.read_bytes()[:-50])
    report = json.loads(run_cli("check", "--repair", "--json", warehouse=copy).stdout)
    assert report["ok"] and report["notRepaired"] == [], report
    assert f"table {table}: emptied (damaged); `loopmeter aggregate` computes it again" in report["repaired"]
    assert run_cli("aggregate", "--json", warehouse=copy).returncode == 0
    assert run_cli("report", "summary", "--json", warehouse=copy).stdout == summary
    assert run_cli("check", warehouse=copy).returncode == 0


def test_a_damaged_month_of_forge_events_is_set_aside_and_read_again_from_the_store(copy, demo_warehouse):
    counted = ("SELECT (SELECT count(*) FROM forge_events) AS events, (SELECT count(*) FROM forge_plans) AS plans, "
               "(SELECT count(*) FROM forge_tasks) AS tasks")
    before = run_cli("sql", counted, "--format", "json", warehouse=copy).stdout
    routing = run_cli("report", "routing", "--json", warehouse=copy).stdout
    month = sorted(path.name for path in (copy / "forge_events").iterdir())[0]
    damage_a_page(table_file(copy, "forge_events", month))
    named = run_cli("sql", "SELECT * FROM forge_events", "--format", "csv", warehouse=copy, check=1).stderr
    assert named.startswith(f"loopmeter: error: {copy}/forge_events/{month}/part-0.parquet: a file of table forge_events "
                            "is damaged"), named
    report = json.loads(run_cli("check", "--repair", "--json", warehouse=copy).stdout)
    assert report["ok"], report
    store = demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"
    assert f"table forge_events: the damaged months set aside ({month.split('=')[1]}); `loopmeter ingest forge` of " \
           f"each store ingested ({store}) reads their events again, and `loopmeter harvest survival` measures " \
           "again any outcome it had stored there" in report["repaired"], report["repaired"]
    run_cli("ingest", "forge", str(demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"), "--quiet",
            warehouse=copy)
    assert run_cli("sql", counted, "--format", "json", warehouse=copy).stdout == before
    assert run_cli("report", "routing", "--json", warehouse=copy).stdout == routing


def test_a_writer_refuses_a_table_whose_link_is_gone_and_repair_links_it_back(copy, demo_warehouse):
    """A table's link removed by hand: a writer took the table for absent, wrote it anew and removed its
    versions (the survival outcomes a harvest stored, gone). It now refuses in one line, naming the
    table and `check --repair`, which links it back."""
    counted = "SELECT count(*) AS n FROM forge_outcomes"
    before = run_cli("sql", counted, "--format", "csv", warehouse=copy).stdout
    (copy / "forge_outcomes").unlink()
    refused = run_cli("ingest", "forge", str(demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"),
                      "--quiet", warehouse=copy, check=1)
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"loopmeter: error: {copy}/forge_outcomes: table forge_outcomes has no link to its versions")
    assert "run `loopmeter check --repair` to link it back" in line
    assert list((copy / ".versions" / "forge_outcomes").iterdir())
    run_cli("check", "--repair", warehouse=copy)
    assert run_cli("sql", counted, "--format", "csv", warehouse=copy).stdout == before


def test_a_fifo_in_place_of_a_run_set_s_file_is_removed_and_the_run_set_read_again(copy):
    counted = "SELECT run_set_id, count(*) AS n FROM runs GROUP BY ALL ORDER BY ALL"
    before = run_cli("sql", counted, "--format", "csv", warehouse=copy).stdout
    replaced = table_file(copy, "runs", "run_set_id=sample-legacy-5")
    replaced.unlink()
    os.mkfifo(replaced)
    found = run_cli("check", warehouse=copy, check=1, timeout=120).stderr.splitlines()
    assert found == [f"loopmeter: {replaced}: is a FIFO, not a table file; `loopmeter check --repair` removes it (never "
                     "what a link names) and stores the table again"], found
    report = json.loads(run_cli("check", "--repair", "--json", warehouse=copy).stdout)
    assert report["ok"] and any(line.startswith("runs: read again from") for line in report["repaired"]), report
    assert run_cli("sql", counted, "--format", "csv", warehouse=copy).stdout == before


FORGE_COUNTS = ("SELECT (SELECT count(*) FROM forge_events) AS events, (SELECT count(*) FROM forge_plans) AS plans, "
                "(SELECT count(*) FROM forge_plan_tasks) AS plan_tasks, (SELECT count(*) FROM forge_route_entries) AS "
                "entries, (SELECT count(*) FROM forge_attempt_events) AS attempt_events, (SELECT count(*) FROM "
                "forge_outcomes) AS outcomes, (SELECT count(*) FROM forge_attempts) AS attempts, (SELECT count(*) FROM "
                "forge_decisions) AS decisions, (SELECT count(*) FROM forge_tasks) AS tasks")


def _stored_again(copy: Path, demo_warehouse: Path) -> None:
    """What the repair's lines say to run: the demo's store ingested again, and its harvest (its horizons, its time)."""
    sample = demo_warehouse.parent / "data" / "sample" / "forge"
    run_cli("ingest", "forge", str(sample / "dataset.sqlite"), "--quiet", warehouse=copy)
    now = json.loads((sample / "sample.json").read_text())["now"]
    run_cli("harvest", "survival", "--horizon-days", "7", "--horizon-days", "14", "--horizon-days", "30", "--now",
            str(now), "--include-temp", "--quiet", warehouse=copy)


@pytest.mark.parametrize("how", ["damaged", "gone"])
@pytest.mark.parametrize("table", ["forge_plans", "forge_route_entries", "forge_outcomes"])
def test_a_per_event_forge_table_damaged_or_gone_is_emptied_and_its_events_read_again(copy, demo_warehouse, table, how):
    """Its rows come only from events new to an ingest: repair empties it and sets its events aside from
    forge_events, so the ingest (and the harvest) the line names store every row again; nothing counted twice."""
    before = run_cli("sql", FORGE_COUNTS, "--format", "json", warehouse=copy).stdout
    routing = run_cli("report", "routing", "--json", warehouse=copy).stdout
    survival = json.loads(run_cli("report", "survival", "--json", warehouse=copy).stdout)
    damage_or_remove(copy, table, how)
    found = run_cli("check", warehouse=copy, check=1).stderr
    assert f"table {table} is gone" in found if how == "gone" else f"{copy}/{table}/part-0.parquet" in found, found
    report = json.loads(run_cli("check", "--repair", "--json", warehouse=copy).stdout)
    assert report["ok"] and report["notRepaired"] == [], report
    line = next(line for line in report["repaired"] if line.startswith(f"table {table}: "))
    store = demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"
    told = ("`loopmeter harvest survival` measures again, at the horizons given it, the outcomes it had stored"
            if table == "forge_outcomes" else f"`loopmeter ingest forge` of {store} stores them again")
    assert line == (f"table {table}: {'emptied (damaged)' if how == 'damaged' else 'made again, empty'}, and the events "
                    f"it is made of set aside from forge_events; {told}"), line
    _stored_again(copy, demo_warehouse)
    assert run_cli("sql", FORGE_COUNTS, "--format", "json", warehouse=copy).stdout == before
    assert run_cli("report", "routing", "--json", warehouse=copy).stdout == routing
    again = json.loads(run_cli("report", "survival", "--json", warehouse=copy).stdout)
    assert again == survival
    assert run_cli("check", warehouse=copy).returncode == 0


def test_a_table_gone_whole_is_named_until_the_command_that_writes_it_stores_it_again(copy, demo_warehouse):
    """No link, no version: `check` names it (it once said only that the catalog held a view of no
    table, and nothing after the catalog was rebuilt); a table of the ForgeLoop ingest is stored again by
    the ingest the line names, into this warehouse (nothing of it is damaged)."""
    counted = "SELECT run_set_id, count(*) AS n FROM runs GROUP BY ALL ORDER BY ALL"
    before = run_cli("sql", counted, "--format", "csv", warehouse=copy).stdout
    shutil.rmtree(copy / ".versions" / "runs")
    (copy / "runs").unlink()
    gone = (f"loopmeter: {copy}/runs: table runs is gone (no link, no version in .versions/runs/), though the last "
            "writer's records name it: `loopmeter check --repair` stores it again where the warehouse holds its "
            "inputs, else says what to run")
    assert run_cli("check", warehouse=copy, check=1).stderr.splitlines() == [gone]
    repaired = run_cli("check", "--repair", warehouse=copy, check=1).stderr.splitlines()
    results = demo_warehouse.parent / "data" / "sample" / "forgeloop"
    assert (f"loopmeter: not repaired: runs: cannot be rebuilt from the warehouse; its rows come from run files: "
            f"`loopmeter ingest forgeloop {results} --scenarios {results / 'scenarios'}`") in repaired, repaired
    assert run_cli("check", warehouse=copy, check=1).stderr.splitlines() == [gone]  # the records still name it
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"), "--quiet", warehouse=copy)
    assert run_cli("sql", counted, "--format", "csv", warehouse=copy).stdout == before
    assert run_cli("check", warehouse=copy).returncode == 0


REPORT_TABLES = {  # table -> what it holds, compared before and after (computed_at aside)
    "forge_routing_srm": "SELECT * EXCLUDE (computed_at) FROM forge_routing_srm ORDER BY ALL",
    "forge_routing_observational": "SELECT * EXCLUDE (computed_at) FROM forge_routing_observational ORDER BY ALL",
    "forge_survival": "SELECT * EXCLUDE (computed_at) FROM forge_survival ORDER BY ALL",
    "forge_repos": "SELECT repo, path FROM forge_repos ORDER BY ALL",
    "forgeloop_confidence": "SELECT * EXCLUDE (computed_at) FROM forgeloop_confidence ORDER BY ALL",
    "forgeloop_objectives": "SELECT * EXCLUDE (computed_at) FROM forgeloop_objectives ORDER BY ALL",
}


@pytest.mark.parametrize("how", ["damaged", "gone"])
@pytest.mark.parametrize("table", list(REPORT_TABLES))
def test_a_table_a_report_stores_damaged_or_gone_is_computed_again(copy, demo_warehouse, table, how):
    """A report's table is computed from others: repair computes it again (the routing tables, survival,
    confidence), or empties forge_repos for the ingest the line names; it once named a command that
    refused while the damaged file was there."""
    query = REPORT_TABLES[table]
    before = run_cli("sql", query, "--format", "json", warehouse=copy).stdout
    assert json.loads(before), table
    damage_or_remove(copy, table, how)
    report = json.loads(run_cli("check", "--repair", "--json", warehouse=copy).stdout)
    assert report["ok"] and report["notRepaired"] == [], report
    line = next(line for line in report["repaired"] if line.startswith(f"table {table}: "))
    if table == "forge_repos":
        assert line.endswith("`loopmeter ingest forge <store>` stores each store's repositories again"), line
        run_cli("ingest", "forge", str(demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"),
                "--quiet", warehouse=copy)
    else:
        assert line.startswith(f"table {table}: computed again from "), line
    assert run_cli("sql", query, "--format", "json", warehouse=copy).stdout == before
    assert run_cli("check", warehouse=copy).returncode == 0


def test_ctrl_c_after_a_set_aside_still_says_what_to_run(copy, demo_warehouse):
    """Stopped as it builds the catalog, after forge_plans was emptied and its events set aside: the lines of
    what was done, with the ingest that stores them again, come before the interruption's."""
    damaged = table_file(copy, "forge_plans")
    damaged.write_bytes(damaged.read_bytes()[:-50])
    stopped = run_cli("check", "--repair", warehouse=copy, check=130,
                      env={"LOOPMETER_CRASH_AT": "before-publish:catalog", "LOOPMETER_CRASH_SIGNAL": "INT"})
    store = demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"
    lines = stopped.stderr.splitlines()
    assert (f"loopmeter: repaired: table forge_plans: emptied (damaged), and the events it is made of set aside from "
            f"forge_events; `loopmeter ingest forge` of {store} stores them again") in lines, lines
    assert lines[-1].startswith("loopmeter: interrupted; tables already replaced keep their new version (")


def test_the_events_of_a_store_no_longer_there_are_kept_and_their_rows_named_until_it_is_back(copy, demo_warehouse,
                                                                                             tmp_path):
    """Two stores; the second moved away, then forge_plans damaged: repair sets aside the events of the
    store that is there, keeps the other's (forge_events holds their only copy) and names the rows the
    table lacks until that store is back; then repair sets them aside too, and its ingest stores them."""
    sample = demo_warehouse.parent / "data" / "sample" / "forge"
    second = tmp_path / "second.jsonl"
    second.write_text("".join(line.replace("run-0", "rux-0") for line in (sample / "export.jsonl").read_text()
                              .splitlines(keepends=True)[:3000]))
    run_cli("ingest", "forge", str(second), "--quiet", warehouse=copy)
    before = run_cli("sql", FORGE_COUNTS, "--format", "json", warehouse=copy).stdout
    away = tmp_path / "away.jsonl"
    second.rename(away)
    damaged = table_file(copy, "forge_plans")
    damaged.write_bytes(damaged.read_bytes()[:-50])
    repaired = run_cli("check", "--repair", "--json", warehouse=copy, check=1)
    report = json.loads(repaired.stdout)
    line = next(line for line in report["repaired"] if line.startswith("table forge_plans: "))
    assert line == (f"table forge_plans: emptied (damaged), and the events it is made of set aside from forge_events; "
                    f"`loopmeter ingest forge` of {sample / 'dataset.sqlite'} stores them again; the events of {second} "
                    "stay in forge_events (that store is not at its path now): put it back, then run `loopmeter check "
                    "--repair` again"), line
    run_cli("ingest", "forge", str(sample / "dataset.sqlite"), "--quiet", warehouse=copy)
    lines = run_cli("check", warehouse=copy, check=1).stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loopmeter: {copy}/forge_plans: table forge_plans holds no row for ")
    assert lines[0].endswith(f"(from {second}): `loopmeter check --repair` sets them aside for their store's next "
                             f"`loopmeter ingest forge` (or `harvest survival`) to read again; {second} is not at its "
                             "path: put it back first"), lines
    away.rename(second)
    again = json.loads(run_cli("check", "--repair", "--json", warehouse=copy).stdout)
    assert again["ok"] and any(line.startswith("table forge_plans: the events it holds no row for set aside from "
                                               f"forge_events; `loopmeter ingest forge` of {second}")
                               for line in again["repaired"]), again
    run_cli("ingest", "forge", str(second), "--quiet", warehouse=copy)
    assert run_cli("sql", FORGE_COUNTS, "--format", "json", warehouse=copy).stdout == before
    assert run_cli("check", warehouse=copy).returncode == 0


def test_forge_events_gone_names_each_store_and_the_harvest(copy, demo_warehouse):
    shutil.rmtree(copy / ".versions" / "forge_events")
    (copy / "forge_events").unlink()
    report = json.loads(run_cli("check", "--repair", "--json", warehouse=copy, check=1).stdout)
    store = demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"
    assert (f"table forge_events: read from the Forge stores: `loopmeter ingest forge` of each store ingested ({store}) "
            "stores its events again, and `loopmeter harvest survival` measures again the outcomes a harvest had "
            "stored") in report["notRepaired"], report["notRepaired"]


@pytest.mark.parametrize("table", ["forge_dispatches", "runs", "forgeloop_mode_stats"])
def test_bytes_changed_in_place_are_named_and_the_table_stored_again(copy, demo_warehouse, table):
    """Eight bytes overwritten inside a page often still decode (Parquet pages carry no checksum): the
    digest the writer recorded names the file, and repair stores the table again as for any damage."""
    counted = {"forge_dispatches": "SELECT rid, ts_unix, model FROM forge_dispatches ORDER BY rid",
               "runs": "SELECT run_set_id, run_id, total_tokens FROM runs ORDER BY ALL",
               "forgeloop_mode_stats": "SELECT * FROM forgeloop_mode_stats ORDER BY ALL"}[table]
    before = run_cli("sql", counted, "--format", "json", warehouse=copy).stdout
    run_cli("aggregate", "--quiet", warehouse=copy)  # a writer: the record of what it wrote, at this place
    from loopmeter.storage.integrity import file_problem

    changed = max((copy / table).rglob("*.parquet"), key=lambda path: path.stat().st_size)
    original = changed.read_bytes()
    for offset in range(len(original) // 2, len(original) - 64, 97):  # the first place where the file still decodes
        changed.write_bytes(original[:offset] + b"XXXXXXXX" + original[offset + 8:])
        if file_problem(table, changed) is None:
            break
    assert file_problem(table, changed) is None and changed.read_bytes() != original
    found = run_cli("check", warehouse=copy, check=1).stderr.splitlines()
    assert found == [f"loopmeter: {changed}: does not hold the bytes loopmeter wrote there: it changed in place since "
                     "(its digest is not the one the writer recorded in .state/written.json)"], found
    run_cli("check", "--repair", "--quiet", warehouse=copy, check=None)
    sample = demo_warehouse.parent / "data" / "sample"
    if table == "forge_dispatches":
        run_cli("ingest", "forge", str(sample / "forge" / "dataset.sqlite"), "--quiet", warehouse=copy)
    elif table == "forgeloop_mode_stats":
        run_cli("aggregate", "--quiet", warehouse=copy)
    assert run_cli("sql", counted, "--format", "json", warehouse=copy).stdout == before
    assert run_cli("check", warehouse=copy).returncode == 0
