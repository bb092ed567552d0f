"""ForgeLoop's reports are printed as they are made: the text is exactly the whole document's JSON,
and a report of every run set holds about one batch of run sets however many are stored."""
from __future__ import annotations

import json
import shutil
import tracemalloc
from contextlib import redirect_stdout

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from conftest import run_cli
from loopmeter.commands.common import print_json
from loopmeter.errors import named_in
from loopmeter.forgeloop import stored
from loopmeter.forgeloop.reports import REPORTS
from loopmeter.jsjson import dumps
from loopmeter.operations import forgeloop_report
from loopmeter.streamed import Streamed
from runs import run, write_tree

# text with escapes, C1 controls (shown as \xNN on a terminal), and characters of 2 to 4 UTF-8 bytes
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
NUMBERS = st.one_of(st.integers(-10**18, 10**18), st.floats(allow_nan=False, allow_infinity=False))
VALUES = st.recursive(st.none() | st.booleans() | NUMBERS | TEXT,
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(before=st.dictionaries(TEXT, VALUES, max_size=3), items=st.lists(VALUES, max_size=5),
       after=st.dictionaries(TEXT, VALUES, max_size=3), indent=st.sampled_from([None, 2]), chunk=st.integers(1, 9))
# a key that is the text which once stood for the list in the fields (the list went in its place)
@example(before={"\x00the list\x00": None}, items=[], after={}, indent=None, chunk=1)
def test_the_streamed_text_is_the_whole_document_s(before, items, after, indent, chunk):
    key = "the list"
    fields = {**{k: v for k, v in before.items() if k != key}, key: None, **{k: v for k, v in after.items() if k != key}}
    whole = Streamed(key, iter(json.loads(json.dumps(items))), lambda: json.loads(json.dumps(fields))).document()
    pieces: list[str] = []
    Streamed(key, iter(json.loads(json.dumps(items))), lambda: json.loads(json.dumps(fields))).write_json(
        pieces.append, indent, chunk=chunk)
    assert "".join(pieces) == dumps(whole, indent)
    assert list(whole) == list(fields) and whole[key] == items


def test_the_fields_are_made_after_the_last_item():
    seen = []

    def items():
        for number in range(3):
            seen.append(number)
            yield {"n": number}

    pieces: list[str] = []
    Streamed("items", items(), lambda: {"count": len(seen), "items": None}).write_json(pieces.append)
    assert "".join(pieces) == '{"count":3,"items":[{"n":0},{"n":1},{"n":2}]}'


RUN_SETS = 240


@pytest.fixture(scope="module")
def many_run_sets(tmp_path_factory):
    """Warehouses of 60 and of 240 small run sets (one scenario, five runs per mode, the fifth a token
    outlier), aggregated."""
    root = tmp_path_factory.mktemp("many")
    names = [f"rs-{number:04d}" for number in range(RUN_SETS)]
    runs = [run("small-bug-fix", mode, index, (1000 + 10 * index + number) * (8 if index == 5 else 1), run_set=name)
            for number, name in enumerate(names) for mode in ("direct", "forgeloopBalanced", "forgeloopAdaptive")
            for index in range(1, 6)]
    write_tree(root / "results", runs, {"small-bug-fix": "light"})
    warehouses = {}
    for count in (60, RUN_SETS):
        warehouse = root / f"w{count}"
        run_cli("ingest", "forgeloop", str(root / "results"), "--scenarios", str(root / "results" / "scenarios"),
                *[option for name in names[:count] for option in ("--run-set", name)], "--aggregate", "--quiet",
                warehouse=warehouse)
        warehouses[count] = warehouse
    return warehouses


def _printed(name: str, warehouse, into, whole: bool = False, text: bool = False, measure: bool = True) -> tuple[str, int]:
    """`report NAME --json` (`text`: the report for people, 100 columns wide) as the command prints it
    (into the file `into`), and the most memory Python's allocator took while it was printed, beyond
    what it held before (the run sets' documents are read then); `whole`: the document made whole
    first, as if not streamed; not `measure`: none measured (0)."""
    with open(into, "w", encoding="utf-8") as out, redirect_stdout(out):
        if measure:
            tracemalloc.start()
        try:
            shown = forgeloop_report(name, warehouse=warehouse)
            tracemalloc.reset_peak()
            held = tracemalloc.get_traced_memory()[0]
            body = shown.document if whole else shown.body
            if text:
                REPORTS[name][1](body, Console(file=out, width=100))
            else:
                print_json(body, 2 if name == "tail" else None)
            peak = tracemalloc.get_traced_memory()[1] - held
        finally:
            tracemalloc.stop()  # nothing when it was not started
    return into.read_text(encoding="utf-8"), peak


@pytest.mark.parametrize("name", ["outliers", "tail", "summary", "regression"])
def test_every_report_prints_its_whole_document_s_text(many_run_sets, tmp_path, name):
    text, _ = _printed(name, many_run_sets[RUN_SETS], tmp_path / "streamed.json")
    document = forgeloop_report(name, warehouse=many_run_sets[RUN_SETS]).document
    assert text == dumps(named_in(document), 2 if name == "tail" else None) + "\n"
    assert len(document["runSets" if name in ("tail", "summary") else "reports"]) >= RUN_SETS


@pytest.mark.parametrize("name", ["outliers", "tail", "summary", "regression"])
def test_the_report_for_people_is_the_same_made_whole_or_as_it_comes(many_run_sets, tmp_path, name):
    streamed, _ = _printed(name, many_run_sets[60], tmp_path / "streamed.txt", text=True, measure=False)
    whole, _ = _printed(name, many_run_sets[60], tmp_path / "whole.txt", whole=True, text=True, measure=False)
    assert streamed == whole and "rs-0059" in streamed


@pytest.mark.parametrize("name, text", [("tail", False), ("summary", False), ("summary", True)],
                         ids=["tail", "summary", "summary for people"])
def test_four_times_the_run_sets_take_little_more_memory_to_print(many_run_sets, tmp_path, name, text):
    """From 60 to 240 run sets, printing the report holds a small part of what the whole document
    grows by (only one batch of run sets' documents is read at a time, one run set's part made)."""
    _printed(name, many_run_sets[60], tmp_path / "warm.json", text=text)  # what the first print imports is not counted
    peaks = {(count, whole): _printed(name, many_run_sets[count], tmp_path / "out.json", whole, text)[1]
             for count in (60, RUN_SETS) for whole in (False, True)}
    streamed, whole = (peaks[(RUN_SETS, kind)] - peaks[(60, kind)] for kind in (False, True))
    assert streamed < 0.2 * whole, peaks


def test_an_aggregate_published_while_a_report_reads_prints_nothing_and_says_so(many_run_sets, tmp_path, monkeypatch):
    """A writer that replaces the stored documents (and removes the version the report was reading)
    between two batches: the report prints no half document, and says in one line to run it again."""
    warehouse = tmp_path / "w"
    shutil.copytree(many_run_sets[60], warehouse, symlinks=True)
    monkeypatch.setattr(stored.StoredDocuments, "BATCH", 8)
    reading = stored.StoredDocuments.__iter__

    def meanwhile(self):
        for number, documents in enumerate(reading(self)):
            if number == 20:  # a writer of its own process, as another user's command would be
                run_cli("aggregate", "--full", "--quiet", warehouse=warehouse, process=True)
            yield documents

    monkeypatch.setattr(stored.StoredDocuments, "__iter__", meanwhile)
    done = run_cli("report", "summary", "--json", warehouse=warehouse, check=1)
    assert done.stdout == ""
    assert done.stderr == (f"loopmeter: error: {warehouse}: another loopmeter command replaced the stored aggregate while "
                           "this report read it; run the report again\n")
