"""`ingest forge` on a file that is no Forge store, and on a store of which nothing is stored.

A file that is neither SQLite nor JSON Lines (a pretty-printed JSON document such as a ForgeLoop
run file, a JSON array, text) is refused before anything is written: exit 1, one line naming the
file and why. An export whose lines are all rejected, or a store without events, still publishes
every Forge table, forge_events included, empty (no row, not a row of nulls), and the closing
message does not say that "the rest is stored".
"""
from __future__ import annotations

import json
import sqlite3

import polars as pl
import pytest

from conftest import run_cli
from forge_fixtures import event
from runs import run as forgeloop_run
from loopmeter.forge import samples
from loopmeter.forge import store as store_module
from loopmeter.forge import tables as t
from loopmeter.forge.ingest import IngestResult, ingest_forge
from loopmeter.forge.store import StoreError, detect_format
from loopmeter.storage.registry import polars_type as polars_dtype
from loopmeter.storage import Warehouse

MIB = store_module.HEAD_BYTES

# the tables an ingest writes (harvest's and the routing reports' are not its own)
INGEST_TABLES = [t.EVENTS, t.REPOS, t.REJECTIONS, t.PLANS, t.PLAN_TASKS, t.ROUTE_ENTRIES, t.ATTEMPT_EVENTS,
                 t.DISPATCHES, t.MERGES, t.INTEGRATIONS, t.ACCEPTANCES, t.OUTCOMES, t.ATTEMPTS, t.DECISIONS, t.TASKS]


def events_lines(count: int = 1) -> list[str]:
    return [json.dumps(e) for e in samples.routing_events(count)]


def refused(tmp_path, path, *reasons: str):
    """`ingest forge PATH` is refused before anything is written: exit 1, one line naming the file."""
    warehouse = tmp_path / "w"
    result = run_cli("ingest", "forge", str(path), warehouse=warehouse, check=None)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(path) in lines[0] and "is neither a SQLite Forge store nor a JSON Lines export" in lines[0], lines[0]
    for reason in reasons:
        assert reason in lines[0], lines[0]
    assert not warehouse.exists()  # not even the warehouse directory
    return lines[0]


# ---- (a) a file that is no Forge store --------------------------------------------------

def test_a_forgeloop_run_file_is_refused_naming_the_file_and_why(tmp_path):
    path = tmp_path / "run-001.json"
    text = json.dumps(forgeloop_run(), indent=2)
    path.write_text(text + "\n")
    lines = len(text.splitlines())
    refused(tmp_path, path, "not SQLite", "no line of it is a JSON object with a kind",
            f"it is one JSON document spread over {lines} lines")


@pytest.mark.parametrize("name, content, reason", [
    # events pretty-printed as one JSON array: no line holds a whole event
    ("events.json", json.dumps(samples.routing_events(1), indent=2), "it is one JSON document spread over"),
    # the name does not decide: a .jsonl file holding a pretty-printed document
    ("export.jsonl", json.dumps({"kind": "plan", "rid": "p1", "data": {}}, indent=4), "it is one JSON document spread over"),
    ("events.json", json.dumps(samples.routing_events(1)), "its one line is JSON array"),
    ("run.json", json.dumps(forgeloop_run()), "its one line is a JSON object without a kind"),
    ("notes.txt", "these are\nnot events\n{ nor this }\n", "no line of it is a JSON object with a kind"),
    ("dump.txt", '{"rid": "a", "ts": 1}\n{"kind": 7}\n{}\n', "no line of it is a JSON object with a kind"),
])
def test_json_that_is_not_json_lines_is_refused(tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_text(content)
    refused(tmp_path, path, reason)


def test_an_empty_file_is_refused_unless_named_as_an_export(tmp_path):
    empty = tmp_path / "run.json"
    empty.write_text("\n  \n")
    refused(tmp_path, empty, "it is empty")
    export = tmp_path / "export.jsonl"  # an export of a store without events
    export.write_text("")
    result = run_cli("ingest", "forge", str(export), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 0, result.stderr
    assert "0 lines read: 0 new events" in result.stdout


def test_the_library_refuses_it_too_and_writes_nothing(tmp_path):
    path = tmp_path / "run-001.json"
    path.write_text(json.dumps(forgeloop_run(), indent=2))
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        with pytest.raises(StoreError, match="is one JSON document spread over"):
            ingest_forge(warehouse, path)
    assert warehouse.table_names() == []


def pretty_document_over(size: int) -> str:
    """A pretty-printed JSON document (an array of objects) of at least `size` bytes."""
    records = [{"index": index, "name": f"record {index}", "values": [index, index + 1]} for index in range(size // 60 + 1)]
    return json.dumps(records, indent=4)


def test_only_the_first_mib_is_read_and_a_large_document_is_refused(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(pretty_document_over(3 * MIB))
    reason = refused(tmp_path, path, "of its first MiB is a JSON object with a kind",
                     "it starts like one JSON document spread over lines")
    assert "none of the " in reason


def test_a_large_document_cut_after_the_brace_opening_an_object_is_refused(tmp_path):
    """The first MiB ends right after an indented `{` (the line goes on past it): such a cut line is not taken
    for a long event line, only a first line is."""
    text = pretty_document_over(2 * MIB)
    opening = text.index("    {\n", MIB - 200)
    padding = MIB - (opening + len("    {"))  # move that `{` to the last byte read
    assert padding >= 0
    text = text[:opening] + " " * padding + text[opening:]
    assert text[MIB - 1] == "{" and text[MIB] == "\n"
    path = tmp_path / "cut.json"
    path.write_text(text)
    refused(tmp_path, path, "of its first MiB is a JSON object with a kind")


def test_an_event_line_past_the_first_mib_does_not_make_an_export(tmp_path):
    path = tmp_path / "late.jsonl"
    filler = "not an event line " * 50 + "\n"
    path.write_text(filler * (MIB // len(filler) + 10) + "\n".join(events_lines()) + "\n")
    refused(tmp_path, path, "of its first MiB is a JSON object with a kind")


# ---- real exports still load ---------------------------------------------------------------

def test_an_export_with_broken_first_lines_loads_its_good_lines(tmp_path):
    good = events_lines()
    path = tmp_path / "export.txt"  # any name: the content decides
    path.write_text("\n".join(["{", "[1, 2]", "this is not json", *good, "}"]) + "\n")
    assert detect_format(path) == "jsonl"
    result = run_cli("ingest", "forge", str(path), "--json", warehouse=tmp_path / "w", check=None)
    assert result.returncode == 3, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["stored"] == len(good) and outcome["rejected"] == 4
    assert [r["line"] for r in outcome["rejections"]] == [1, 2, 3, len(good) + 4]


def test_an_export_whose_first_line_is_longer_than_the_first_mib_loads(tmp_path):
    plan = event("p1", "plan", 100, run="r1",
                 data={"revision": 1, "tasks": {"t1": {"declared_difficulty": "low"}}, "notes": "n" * (MIB + 10)})
    line = json.dumps(plan)
    assert len(line) > MIB
    path = tmp_path / "export.jsonl"
    path.write_text(line + "\n" + "\n".join(events_lines()) + "\n")
    assert detect_format(path) == "jsonl"
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        result = ingest_forge(warehouse, path)
    assert result.rejected == 0 and result.stored == len(samples.routing_events(1)) + 1


# ---- (b) every table exists, empty when nothing is stored ------------------------------------

def assert_documented_and_empty(warehouse: Warehouse, table: str, rows: int = 0) -> None:
    frame = warehouse.read(table)
    assert frame is not None, f"{table} does not exist"
    assert frame.schema == pl.Schema({name: polars_dtype(dtype) for name, dtype, _ in t.columns(table)}), table
    assert frame.height == rows, f"{table}: {frame.height} rows, not {rows}"
    if rows:
        assert frame.null_count().row(0)[0] == 0, f"{table} holds a row of nulls"


def test_an_export_whose_every_line_is_rejected_publishes_every_table_forge_events_too(tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text('{"rid":"a1","kind":"attempt","ts":"yesterday","data":{"n":1}}\n'
                    '{"rid":"a2","kind":"attempt","ts":110,"data":[1,2]}\n')
    warehouse = tmp_path / "w"
    result = run_cli("ingest", "forge", str(path), warehouse=warehouse, check=None)
    assert result.returncode == 3, result.stderr
    assert "2 lines read: 0 new events, 0 already stored, 2 rejected" in result.stdout
    stored = Warehouse(warehouse)
    for table in INGEST_TABLES:
        assert_documented_and_empty(stored, table, rows=2 if table == t.REJECTIONS else 0)
    counted = run_cli("sql", "select count(*) AS n from forge_events", "--format", "csv", warehouse=warehouse, check=None)
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.split() == ["n", "0"]
    routing = run_cli("report", "routing", "--json", warehouse=warehouse, check=None)
    assert routing.returncode == 0, routing.stderr
    assert json.loads(routing.stdout)["observational"] == []


def test_a_store_without_events_publishes_every_table_empty(tmp_path):
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", [], [])
    warehouse = tmp_path / "w"
    result = run_cli("ingest", "forge", str(store), warehouse=warehouse, check=None)
    assert result.returncode == 0, result.stderr
    stored = Warehouse(warehouse)
    for table in INGEST_TABLES:
        assert_documented_and_empty(stored, table)


def test_a_clean_ingest_stores_no_row_of_nulls_among_the_rejections(tmp_path):
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", [("api", "/r/api")], samples.routing_events(1))
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        result = ingest_forge(warehouse, store)
    assert result.rejected == 0 and result.stored
    assert_documented_and_empty(warehouse, t.REJECTIONS)


def test_events_stored_after_an_empty_ingest_replace_the_empty_forge_events(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"rid":"a1","kind":"attempt","ts":"yesterday","data":{"n":1}}\n')
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(events_lines()) + "\n")
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        ingest_forge(warehouse, empty)
        assert_documented_and_empty(warehouse, t.EVENTS)
        result = ingest_forge(warehouse, good)
    assert result.stored == len(samples.routing_events(1))
    assert_documented_and_empty(warehouse, t.EVENTS, rows=result.stored)
    assert not list((tmp_path / "w" / t.EVENTS).glob("part-empty.parquet"))


def test_forge_events_is_written_when_only_it_is_missing(tmp_path):
    """A warehouse an earlier version left without forge_events (every other table there, empty)."""
    path = tmp_path / "export.jsonl"
    path.write_text('{"rid":"a1","kind":"attempt","ts":"yesterday","data":{"n":1}}\n')
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        ingest_forge(warehouse, path)
        (tmp_path / "w" / t.EVENTS).unlink()
        assert not warehouse.has_table(t.EVENTS)
        ingest_forge(warehouse, path)
    assert_documented_and_empty(warehouse, t.EVENTS)


# ---- the closing message ---------------------------------------------------------------------

@pytest.mark.parametrize("counts, said", [
    (dict(read=2, stored=0, rejected=2), "2 of 2 rejected; no event is stored"),
    (dict(read=5, stored=3, rejected=2), "2 of 5 rejected; the rest is stored"),
    (dict(read=5, stored=0, duplicates=3, rejected=2),
     "2 of 5 rejected; no new event is stored (the others were stored already or map repositories)"),
])
def test_the_closing_message_says_the_rest_is_stored_only_when_an_event_was(tmp_path, counts, said):
    rejected = counts.pop("rejected")
    result = IngestResult(source=tmp_path, format="jsonl", **counts)
    result.rejections = [None] * rejected
    assert result.rejected_summary() == said


def test_the_library_result_of_an_export_whose_every_line_is_rejected(tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text('{"rid":"a1","kind":"attempt","ts":"yesterday","data":{"n":1}}\n')
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        result = ingest_forge(warehouse, path)
    assert (result.read, result.stored, result.rejected) == (1, 0, 1)
    assert result.rejected_summary() == "1 of 1 rejected; no event is stored"


def test_the_command_does_not_say_the_rest_is_stored_when_nothing_was(tmp_path):
    path = tmp_path / "export.jsonl"
    path.write_text('{"rid":"a1","kind":"attempt","ts":"yesterday","data":{"n":1}}\n')
    result = run_cli("ingest", "forge", str(path), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 3
    assert result.stderr.strip().splitlines()[-1] == "loopmeter: 1 of 1 rejected; no event is stored"


def test_a_sqlite_store_is_still_told_by_its_header(tmp_path):
    store = tmp_path / "anything.bin"
    db = sqlite3.connect(store)
    db.execute("CREATE TABLE t(x)")
    db.commit()
    db.close()
    assert detect_format(store) == "sqlite"
