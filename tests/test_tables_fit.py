"""Tables for people fit the width they are shown in (COLUMNS, or the terminal's), never splitting a
name or a number and losing no value; piped with no COLUMNS, every row is printed whole."""
from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from conftest import run_cli
from loopmeter.forgeloop.reports import _percent, _text
from loopmeter.tables_text import add_row, new_table, print_table
from test_tables_and_sql_output import column_pieces, run_in_terminal

REPORTS = ("tail", "summary", "outliers", "regression")
BOX = "│┃┏┓┗┛┡┩└┘┳┻╇╈━─┬┴┼"
WIDE_SQL = ("select run_set_id, scenario_id, mode, run_id, total_tokens, wall_clock_ms, 6550.3 as n, "
            "'TAIL_REGRESSION' as class from runs order by all limit 4")


# ---- reading what was shown ---------------------------------------------------------------------

def shown_words(text: str) -> Counter:
    """Every word the text shows (between spaces, line ends and box lines; a record's label
    without its colon)."""
    return Counter(word[:-1] if word.endswith(":") else word for word in re.split(rf"[\s{BOX}]+", text))


def full_rows(piped: str) -> list[list[str]]:
    """The cells of every body row of every table in output printed whole (a row a line)."""
    return [[cell.strip() for cell in line.strip()[1:-1].split("│")]
            for line in piped.splitlines() if line.startswith("│")]


def assert_fits(text: str, width: int, rows: list[list[str]], also: list[str] = ()) -> None:
    """No line wider than `width`; every word of every cell (and of `also`) shown whole, as often
    as the cells hold it: a word split across lines would be missing."""
    assert "…" not in text
    wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not wide, f"{len(wide)} lines wider than {width}:\n" + "\n".join(wide[:5])
    expected = Counter(word for row in rows for cell in row for word in cell.split())
    expected |= Counter(word for value in also for word in value.split())  # the same values: the larger count
    shown = shown_words(text)
    missing = {word: count for word, count in expected.items() if shown[word] < count}
    assert not missing, (missing, text)


def read_back(text: str, headers: list[str], titled: bool) -> dict[str, str]:
    """Per header (spaces removed), its cells top to bottom (spaces removed), joined: read from
    tables (split into several or not) or from records."""
    lines = text.splitlines()
    found: dict[str, str] = {}
    if any(line.startswith("┏") for line in lines):
        index = 0
        while any(line.startswith("┏") for line in lines[index:]):
            top = next(i for i in range(index, len(lines)) if lines[i].startswith("┏"))
            middle = next(i for i in range(top, len(lines)) if lines[i].startswith("┡"))
            bottom = next(i for i in range(middle, len(lines)) if lines[i].startswith("└"))
            names = column_pieces(lines[top + 1:middle], "┃")
            for name, column in zip(names, column_pieces(lines[middle + 1:bottom], "│", len(names))):
                assert found.setdefault(name, column) == column, (name, text)  # a key column, alike in each part
            index = bottom + 1
        return found
    blocks = "\n".join(lines).split("\n\n")[1 if titled else 0:]
    found = {header.replace(" ", ""): "" for header in headers}
    for block in blocks:
        block_lines = block.splitlines()
        for header in headers:
            label, shown = header.replace(" ", "") + ":", ""
            while not shown.startswith(label):  # a label may wrap over lines of its own
                assert block_lines and not block_lines[0].startswith(" ") and label.startswith(shown), (header, block)
                shown += block_lines.pop(0).replace(" ", "")
            value = shown[len(label):]
            while block_lines and block_lines[0].startswith(" "):
                value += block_lines.pop(0)
            found[header.replace(" ", "")] += value.replace(" ", "")
        assert not block_lines, block
    return found


# ---- the reports, as a user runs them ---------------------------------------------------------------

def _json_values(name: str, report: dict) -> list[str]:
    """Values of the --json document the text must show, as the text writes them."""
    if name == "tail":
        return [value for run_set in report["runSets"] for s in run_set["scenarios"] for value in (
            s["scenarioId"], _text(s["directP50"]), _text(s["adaptiveP50"]), _text(s["directP95"]), _text(s["adaptiveP95"]),
            _percent(s["distributionP50DeltaPercent"]), _percent(s["pairedOverheadP95Percent"]),
            s["pairedStatus"], s["distributionStatus"], s["combinedInterpretation"])]
    if name == "summary":
        return [value for run_set in report["runSets"] for s in run_set["scenarios"] for value in (
            s["scenarioId"], _text(s["modeAggregates"]["direct"]["totalTokens"]["p50"]),
            _percent(s["comparisons"]["forgeloopAdaptive"]["tokenOverheadPercent"]["p95"]))]
    if name == "outliers":
        return [value for entry in report["reports"] for row in entry["outliers"] for value in (
            row["runId"], row["scenarioId"], _text(row["totalTokens"]), _text(row["ratioToMedian"]),
            ",".join(row["diagnosticSignals"]) or "-")]
    return [value for entry in report["reports"] for value in (entry["runSetId"], entry["scenarioId"], entry["status"])]


def _check_report(warehouse, name: str, width: int) -> str:
    piped = run_cli("report", name, warehouse=warehouse).stdout
    report = json.loads(run_cli("report", name, "--json", warehouse=warehouse).stdout)
    shown = run_cli("report", name, warehouse=warehouse, env={"COLUMNS": str(width)}).stdout
    rows = full_rows(piped)
    assert rows and max(cell_len(line) for line in piped.splitlines()) > 80  # full rows when piped
    assert_fits(shown, width, rows, _json_values(name, report))
    return shown


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("name", REPORTS)
def test_demo_reports_fit_columns(demo_warehouse, name, width):
    shown = _check_report(demo_warehouse, name, width)
    if name == "tail" and width == 120:  # 15 columns: two tables a run set, each row on one line
        assert "│ api-feature              │" in shown and "TAIL_UNRESOLVED │" in shown
    if width == 80 and name in ("tail", "outliers"):  # one record per block
        assert re.search(r"^Scenario: +api-feature$", shown, re.M) or re.search(r"^Scenario: +\S+$", shown, re.M), shown


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("name", REPORTS)
def test_corpus_reports_fit_columns(corpus_warehouse, name, width):
    _check_report(corpus_warehouse, name, width)


def test_the_tail_rows_of_the_issue_are_whole_at_80_100_and_160(demo_warehouse):
    for width in (80, 100, 160):
        shown = run_cli("report", "tail", warehouse=demo_warehouse, env={"COLUMNS": str(width)}).stdout
        assert max(cell_len(line) for line in shown.splitlines()) <= width
        for whole in ("api-feature", "TAIL_UNRESOLVED", "NOT_ENOUGH_SAMPLES", "65139.8", "+14.0413%"):
            assert re.search(rf"(?<![\w.%+-]){re.escape(whole)}(?![\w.%])", shown), (width, whole, shown)
        assert not re.search(r"api-feat\s|TAIL_RE\s|6513\s", shown), shown


@pytest.mark.slow
def test_a_terminal_100_wide_without_columns(demo_warehouse):
    """The real terminal path: a pseudo-terminal 100 wide, no COLUMNS."""
    args = ["report", "tail", "--warehouse", str(demo_warehouse)]
    shown = run_in_terminal(args, 100)
    rows = full_rows(run_cli("report", "tail", warehouse=demo_warehouse).stdout)
    assert_fits(shown, 100, rows)
    shown = run_in_terminal(["report", "summary", "--warehouse", str(demo_warehouse)], 80)
    assert_fits(shown, 80, full_rows(run_cli("report", "summary", warehouse=demo_warehouse).stdout))


def _headers(piped: str) -> list[str]:
    """The headers of the (first) table in output printed whole."""
    line = next(line for line in piped.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in line.strip()[1:-1].split("┃")]


def _expected(headers: list[str], rows: list[list[str]]) -> dict[str, str]:
    return {header.replace(" ", ""): "".join(row[index].replace(" ", "") for row in rows)
            for index, header in enumerate(headers)}


@pytest.mark.parametrize(("name", "columns"), [("summary", 80), ("tail", 100), ("tail", 60), ("outliers", 120)])
def test_one_run_set_on_a_terminal_reads_back_cell_for_cell(demo_warehouse, name, columns):
    """On a pseudo-terminal: every cell, under its header, in its row's order, whatever form fits."""
    args = ["report", name, "--run-set", "sample-tail-30"]
    piped = run_cli(*args, warehouse=demo_warehouse).stdout
    shown = run_in_terminal([*args, "--warehouse", str(demo_warehouse)], columns)
    headers, rows = _headers(piped), full_rows(piped)
    assert_fits(shown, columns, rows, headers)
    body = shown.split("\n", 1)[1] if name == "summary" else shown  # after the status line
    body = body.rsplit("\n", 2)[0] + "\n" if name == "summary" else body  # before the claim policy line
    assert read_back(body, headers, titled=True) == _expected(headers, rows), shown


@pytest.mark.slow
@pytest.mark.parametrize("columns", [50, 120])
def test_sql_on_a_terminal_reads_back_cell_for_cell(demo_warehouse, columns):
    shown = run_in_terminal(["sql", WIDE_SQL, "--warehouse", str(demo_warehouse)], columns)
    header, *rows = csv.reader(io.StringIO(run_cli("sql", WIDE_SQL, "--format", "csv", warehouse=demo_warehouse).stdout))
    assert_fits(shown, columns, rows, header)
    assert read_back(shown, header, titled=False) == _expected(header, rows)


def test_a_table_narrower_than_its_numbers_folds_only_what_no_line_holds():
    numbers = [["12345678901234567890", "-0.000123456789", "+116.1805%"], ["98765432109876543210", "NaN", "-inf"]]
    headers = ["a long header of words", "b", "c"]
    for width in (40, 20, 12, 8, 3):
        table = new_table(headers, title="a title", right=["b"])
        for row in numbers:
            add_row(table, row)
        out = io.StringIO()
        print_table(Console(file=out, width=width, force_terminal=True, color_system=None), table)
        shown = out.getvalue()
        assert max(cell_len(line) for line in shown.splitlines()) <= width and "…" not in shown, shown
        assert read_back(shown, headers, titled=True) == _expected(headers, numbers), shown
        if width >= 22:  # every number fits a line: none folded
            assert_fits(shown, width, numbers)


def test_column_widths_keep_every_word_whole():
    from loopmeter.tables_text import column_groups, column_widths

    cells = [["Scenario", "documentation-correction"], ["Overhead", "+116.1805% / +200%"], ["Light", "OBSERVATIONAL p50 yes"]]
    assert column_widths(cells, 200) == [24, 18, 21]  # each at its longest line
    widths = column_widths(cells, 60)
    assert sum(widths) <= 60 and widths[1] >= len("+116.1805%") and widths[2] >= len("OBSERVATIONAL")
    assert column_widths(cells, 24 + 10 + 13) == [24, 10, 13]  # the longest words exactly
    assert column_widths(cells, 46) is None
    # split: the key column first in each table, packed in order
    assert column_groups(cells, 24 + 18 + 3 * 2, 3) == [[0, 1], [0, 2]]
    assert column_groups(cells, 24 + 10 + 3 * 2, 3, key=(2,)) is None  # the key and a column do not fit
    assert column_groups(cells, 200, 3) is None  # one table holds them all: not split


@pytest.mark.parametrize("columns", ["", "0", "abc", "-5"])
def test_columns_that_is_no_width_leaves_piped_output_whole(demo_warehouse, columns):
    plain = run_cli("report", "tail", warehouse=demo_warehouse).stdout
    assert run_cli("report", "tail", warehouse=demo_warehouse, env={"COLUMNS": columns}).stdout == plain


@pytest.mark.parametrize("width", [80, 120, 200])
def test_sql_tables_fit_columns(demo_warehouse, width):
    header, *rows = csv.reader(io.StringIO(run_cli("sql", WIDE_SQL, "--format", "csv", warehouse=demo_warehouse).stdout))
    shown = run_cli("sql", WIDE_SQL, warehouse=demo_warehouse, env={"COLUMNS": str(width)}).stdout
    assert len(rows) == 4 and rows[0][-2:] == ["6550.3", "TAIL_REGRESSION"]
    assert_fits(shown, width, rows, header)
    assert read_back(shown, header, titled=False) == {
        name: "".join(row[index] for row in rows) for index, name in enumerate(header)}


@pytest.mark.slow
def test_the_demo_fits_80_columns(tmp_path):
    shown = run_cli("demo", "--data", str(tmp_path / "data"), warehouse=tmp_path / "warehouse",
                    env={"COLUMNS": "80"}).stdout
    assert_fits(shown, 80, [])
    assert re.search(r"^Combined: +TAIL_\w+$", shown, re.M) or "│ Combined" in shown or "┃ Combined" in shown, shown


# ---- the renderer ---------------------------------------------------------------------------------

def test_records_and_wrapping_by_hand():
    from loopmeter.tables_text import record_lines, wrap

    assert wrap("run-documentation-correction-forgeloopBalanced-004", 30) == [
        "run-documentation-correction-", "forgeloopBalanced-004"]
    assert wrap("OBSERVATIONAL p50 yes, p95 no", 14) == ["OBSERVATIONAL", "p50 yes, p95", "no"]
    assert wrap("-123456.789", 5) == ["-1234", "56.78", "9"]  # wider than a line: the one fold there is
    assert record_lines(["Scenario", "Dist P50 Δ"], [["api-feature", "+14.0413%"], ["x", "-"]], 40) == [
        "Scenario:   api-feature", "Dist P50 Δ: +14.0413%", "", "Scenario:   x", "Dist P50 Δ: -"]
    assert record_lines(["A very long header name"], [["value"]], 20) == ["A very long header", "name:", "  value"]


_word = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=6)
_name = st.lists(_word, min_size=1, max_size=3).map(lambda parts: "-".join(parts)[:16]) | st.lists(
    _word, min_size=1, max_size=3).map(lambda parts: "_".join(parts).upper()[:16])
_number = (st.integers(-10**12, 10**12).map(str) | st.floats(-1e9, 1e9, allow_nan=False).map(lambda x: f"{x:.4f}")
           | st.floats(-1e4, 1e4, allow_nan=False).map(lambda x: f"{x:+.3f}%") | st.sampled_from(["NaN", "-inf", "N/A", "-"]))
_cell = st.lists(_name | _number, min_size=0, max_size=4).map(" ".join)


@st.composite
def _tables(draw):
    count = draw(st.integers(1, 14))
    headers = draw(st.lists(st.lists(_word, min_size=1, max_size=2).map(" ".join), min_size=count, max_size=count,
                            unique_by=lambda header: header.replace(" ", "").lower()))
    rows = draw(st.lists(st.lists(_cell, min_size=count, max_size=count), min_size=1, max_size=6))
    title = draw(st.none() | st.lists(_word, min_size=1, max_size=6).map(" ".join))
    key = draw(st.lists(st.integers(0, count - 1), max_size=2, unique=True))
    return headers, rows, title, key, draw(st.integers(20, 250))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_tables())
def test_any_table_fits_any_width_with_every_cell_whole(case):
    headers, rows, title, key, width = case
    table = new_table(headers, title, right=headers[1::2])
    for row in rows:
        add_row(table, row)
    out = io.StringIO()
    print_table(Console(file=out, width=width, color_system=None), table, width, key=key)
    shown = out.getvalue()
    assert_fits(shown, width, rows, headers)
    assert read_back(shown, headers, titled=title is not None) == {
        header.replace(" ", ""): "".join(row[index].replace(" ", "") for row in rows) for index, header in enumerate(headers)}
