"""Tables for people show every character (numbers never cut), and `loopmeter sql` says what it does:
--param names checked, NaN/inf alike in csv and the table, its messages, `loopmeter queries`, --quiet."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from conftest import ROOT, run_cli
from loopmeter.forgeloop.reports import _percent, _text, render_tail
from loopmeter.sql.queries import list_queries, query_text, runs_inside


def one_line_error(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    message = result.stderr.strip()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert message.startswith("loopmeter: error: ") and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# ---- reading tables back ----------------------------------------------------------------------

def table_columns(text: str) -> tuple[list[str], list[str]]:
    """(header, body) of the first table in `text`: per column, every piece of text it shows, in
    order, joined without spaces (a wrapped or folded cell comes back whole)."""
    lines = text.splitlines()
    top = next(index for index, line in enumerate(lines) if line.lstrip().startswith("┏"))
    middle = next(index for index in range(top, len(lines)) if lines[index].lstrip().startswith("┡"))
    bottom = next(index for index in range(middle, len(lines)) if lines[index].lstrip().startswith("└"))
    return column_pieces(lines[top + 1:middle], "┃"), column_pieces(lines[middle + 1:bottom], "│")


def column_pieces(part: list[str], bar: str, count: int | None = None) -> list[str]:
    """Per column of the table rows `part` (cells between `bar`s), its text top to bottom without
    spaces; `count`: the columns expected (else as many as the first row has)."""
    joined: list[str] = [""] * (count or 0)
    for line in part:
        pieces = line.strip()[1:-1].split(bar)
        joined = joined or [""] * len(pieces)
        assert len(pieces) == len(joined), line
        joined = [before + piece.replace(" ", "") for before, piece in zip(joined, pieces)]
    return joined


def expected_columns(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[str]]:
    return ([header.replace(" ", "") for header in headers],
            ["".join(row[index].replace(" ", "") for row in rows) for index in range(len(headers))])


def run_in_terminal(args: list[str], columns: int, timeout: float = 120) -> str:
    """`loopmeter ARGS` on a terminal `columns` wide (a pseudo-terminal); what it showed there."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("LOOPMETER_WAREHOUSE", "COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    environment["TERM"] = "xterm"  # not "dumb": rich takes a dumb terminal as 80 columns wide
    process = subprocess.Popen([sys.executable, "-m", "loopmeter", *args], stdin=slave, stdout=slave,
                               stderr=subprocess.PIPE, cwd=ROOT, env=environment)
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    with process.stderr:
        stderr = process.stderr.read().decode()
    assert process.wait(timeout=timeout) == 0, stderr
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


# ---- 2: tables show every character -----------------------------------------------------------

def _tail_cells(report: dict) -> tuple[list[str], list[list[str]]]:
    headers = ["Scenario", "Profile", "Direct P50", "Adaptive P50", "Dist P50 Δ", "Direct P95", "Adaptive P95", "Dist P95 Δ",
               "Paired P50", "Paired P95", "Low-base pairs", "Pairs", "Paired tail", "Distribution tail", "Combined"]
    rows = [[s["scenarioId"], _text(s["expectedProfile"]), _text(s["directP50"]), _text(s["adaptiveP50"]),
             _percent(s["distributionP50DeltaPercent"]), _text(s["directP95"]), _text(s["adaptiveP95"]),
             _percent(s["distributionP95DeltaPercent"]), _percent(s["pairedOverheadP50Percent"]),
             _percent(s["pairedOverheadP95Percent"]), str(s["lowBaselinePairCount"]), str(s["comparablePairCount"]),
             s["pairedStatus"], s["distributionStatus"], s["combinedInterpretation"]]
            for s in report["runSets"][0]["scenarios"]]
    return headers, rows


def test_report_tables_piped_or_in_the_demo_are_printed_whole(demo_warehouse):
    """The demo and run-all print the tail table on a console 200 wide when piped (reports: 250)."""
    report = json.loads(run_cli("report", "tail", "--run-set", "sample-tail-30", "--json", warehouse=demo_warehouse).stdout)
    out = io.StringIO()
    render_tail(report, Console(file=out, width=200))
    shown = out.getvalue()
    assert "…" not in shown
    headers, rows = _tail_cells(report)
    for row in rows:  # every row on one line, every cell whole
        assert any(all(cell in line for cell in row) for line in shown.splitlines()), (row, shown)
    assert table_columns(shown) == expected_columns(headers, rows)
    piped = run_cli("report", "summary", "--run-set", "sample-tail-30", warehouse=demo_warehouse).stdout
    assert "…" not in piped


def test_sql_table_piped_keeps_every_header(demo_warehouse):
    result = run_cli("sql", "select * from runs limit 0", warehouse=demo_warehouse)
    columns = run_cli("sql", "select column_name from (describe select * from runs)", "--format", "json",
                      warehouse=demo_warehouse).stdout
    names = [row["column_name"] for row in json.loads(columns)]
    assert len(names) > 20 and "…" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == names


# ---- 1: --param names are checked ---------------------------------------------------------------

def test_a_param_the_named_query_does_not_take_is_a_usage_error(demo_warehouse):
    result = run_cli("sql", "--query", "forgeloop_pairs", "--param", "runset=sample-tail-30", warehouse=demo_warehouse, check=None)
    one_line_error(result, 2, "--param runset", "$run_set")
    assert result.stdout == ""
    one_line_error(run_cli("sql", "--query", "forge_survival", "--param", "bogus=1", warehouse=demo_warehouse, check=None),
                   2, "--param bogus", "no parameters")
    # told before the heavy libraries load, as every usage error
    from conftest import imported_packages

    timed = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopmeter", "sql", "--query", "forgeloop_pairs",
                            "--param", "runset=x", "--warehouse", str(demo_warehouse)], capture_output=True, text=True, cwd=ROOT)
    assert timed.returncode == 2 and imported_packages(timed.stderr).isdisjoint({"polars", "duckdb", "pyarrow"})


def test_a_param_ad_hoc_sql_does_not_take_is_a_usage_error(demo_warehouse):
    one_line_error(run_cli("sql", "select 1", "--param", "bogus=1", warehouse=demo_warehouse, check=None), 2,
                   "--param bogus", "no parameters")
    one_line_error(run_cli("sql", "select $x AS v", "--param", "x=1", "--param", "y=2", warehouse=demo_warehouse, check=None),
                   2, "--param y", "$x")


def test_an_unbound_parameter_of_ad_hoc_sql_is_a_usage_error(demo_warehouse):
    one_line_error(run_cli("sql", "select $x as v", warehouse=demo_warehouse, check=None), 2, "$x", "--param x=VALUE")
    one_line_error(run_cli("sql", "select ? as v", warehouse=demo_warehouse, check=None), 2, "positional")
    one_line_error(run_cli("sql", "select 1", "--param", "x", warehouse=demo_warehouse, check=None), 2, "name=value")
    # a $name inside a string or a comment is no parameter
    assert run_cli("sql", "select '$x' AS v -- $y", "--format", "csv", warehouse=demo_warehouse).stdout == "v\n$x\n"
    assert run_cli("sql", "select $x AS v", "--param", "x=7", "--format", "csv", warehouse=demo_warehouse).stdout == "v\n7\n"


def test_a_named_querys_documented_optional_parameter_is_null_when_left_out(demo_warehouse):
    every = json.loads(run_cli("sql", "--query", "forgeloop_pairs", "--format", "json", warehouse=demo_warehouse).stdout)
    one = json.loads(run_cli("sql", "--query", "forgeloop_pairs", "--param", "run_set=sample-tail-30", "--format", "json",
                             warehouse=demo_warehouse).stdout)
    assert {row["run_set_id"] for row in one} == {"sample-tail-30"}
    assert len({row["run_set_id"] for row in every}) > 1 and len(every) > len(one)
    # a query's prerequisites take parameters too: forge_routing_observational reads forge_routing_scope ($repo, $since)
    assert run_cli("sql", "--query", "forge_routing_observational", "--param", "repo=/no/such/repo", "--format", "csv",
                   warehouse=demo_warehouse).stdout.count("\n") == 1


@pytest.mark.parametrize("name", [name for name, _ in list_queries() if not runs_inside(name)])
def test_every_named_query_documents_its_parameters(name):
    import duckdb

    from loopmeter.sql.queries import named_query_parameters, query_parameters

    taken, optional = named_query_parameters(name)
    text = query_text(name)
    assert set(query_parameters(text)) == set().union(
        *(statement.named_parameters for statement in duckdb.connect().extract_statements(text)))
    assert set(taken) == optional, f"{name}: every parameter's header says what NULL means"


def test_query_parameters_skip_comments_and_quoted_text():
    from loopmeter.sql.queries import query_parameters

    assert query_parameters("-- $a\nSELECT $b, '$c', \"$d\", $$ $e $$, /* $f */ $g, $b") == ["b", "g"]


# ---- 3: NaN and inf, row counts, refusals --------------------------------------------------------

def test_nan_and_infinities_print_alike_in_csv_and_the_table(demo_warehouse):
    text = "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, '-inf'::DOUBLE AS c, 1e-7::DOUBLE AS d, ['nan'::DOUBLE, 1.5] AS e"
    csv = run_cli("sql", text, "--format", "csv", warehouse=demo_warehouse).stdout
    assert csv == 'a,b,c,d,e\nNaN,inf,-inf,1e-7,"[null,1.5]"\n'
    table = run_cli("sql", text, warehouse=demo_warehouse)
    row = next(line for line in table.stdout.splitlines() if line.startswith("│"))
    assert [cell.strip() for cell in row.strip("│").split("│")] == ["NaN", "inf", "-inf", "1e-7", "[null,1.5]"]
    assert json.loads(run_cli("sql", text, "--format", "json", warehouse=demo_warehouse).stdout) == [
        {"a": None, "b": None, "c": None, "d": 1e-7, "e": [None, 1.5]}]


def test_row_count_is_singular_for_one_row(demo_warehouse):
    assert run_cli("sql", "select 1 AS x", warehouse=demo_warehouse).stderr == "(1 row)\n"
    assert run_cli("sql", "select * from range(2)", warehouse=demo_warehouse).stderr == "(2 rows)\n"


@pytest.mark.parametrize(("statement", "expected", "hint"), [
    ("ATTACH 'other.duckdb'", "an ATTACH statement is refused", "it reads the warehouse's own database only"),
    ("install httpfs", "an INSTALL statement is refused", "it installs and loads no extension"),
    ("LOAD httpfs", "a LOAD statement is refused", "it installs and loads no extension"),
    ("INSERT INTO runs SELECT * FROM runs", "an INSERT statement is refused", "--out FILE.csv (or .json, .jsonl, .parquet)"),
    ("UPDATE runs SET mode = 'x'", "an UPDATE statement is refused", "through loopmeter's stages"),
    ("RESET threads", "a RESET statement is refused", "settings are locked"),
    ("UPDATE EXTENSIONS", "an UPDATE statement is refused", None),
])
def test_refusals_name_the_statement_with_a_hint_that_fits(demo_warehouse, statement, expected, hint):
    message = one_line_error(run_cli("sql", statement, warehouse=demo_warehouse, check=None), 1,
                             "loopmeter sql is read-only: " + expected)
    if hint:
        assert hint in message
    if "--format" not in (hint or ""):
        assert "--format" not in message


# ---- 4: loopmeter queries --------------------------------------------------------------------

def test_queries_show_the_whole_first_sentence_of_the_header():
    listed = dict(list_queries())
    assert listed["forgeloop_context_pairs"] == (
        "adaptive runs that resolved to light, paired by runIndex with balanced runs, both with a complete "
        "HOST_REPORTED context total (all six items present) — the context-inflation check.")
    assert listed["forgeloop_outlier_candidates"].endswith("with what the runaway signals are derived from.")
    assert listed["forgeloop_pairs"] == "comparable pairs — a ForgeLoop mode's run and the direct run with the same runIndex."
    for name, summary in listed.items():
        assert summary.endswith(".") and not summary.endswith(",."), (name, summary)
    printed = run_cli("queries").stdout
    assert "— the context-inflation check." in printed


# ---- 5: --quiet ------------------------------------------------------------------------------

def test_sql_schema_and_queries_take_quiet(demo_warehouse):
    result = run_cli("sql", "select 1 AS x", "--quiet", warehouse=demo_warehouse)
    assert result.stderr == "" and "x" in result.stdout
    assert run_cli("sql", "select 1 AS x", "-q", "--format", "csv", warehouse=demo_warehouse).stdout == "x\n1\n"
    assert "runs.run_set_id" in run_cli("schema", "--quiet", warehouse=demo_warehouse).stdout
    assert "forgeloop_pairs" in run_cli("queries", "--quiet").stdout
    one_line_error(run_cli("sql", "select $x", "--quiet", warehouse=demo_warehouse, check=None), 2, "$x")


def test_csv_writes_timestamps_as_json_does(demo_warehouse, tmp_path):
    """ISO 8601 with the offset's colon in every format: an instant with a fraction, one without, a
    timestamp without a zone (without an offset, as Parquet keeps it), and none."""
    query = ("SELECT timestamptz '2026-01-02 03:04:05.5+02' AS half, timestamptz '2026-12-03 13:20:07.148104+00' AS micro, "
             "timestamptz '2026-01-02 03:04:05+00' AS whole, timestamp '2026-01-02 03:04:05' AS naive, "
             "NULL::timestamptz AS nothing")
    run_cli("sql", query, "--out", str(tmp_path / "x.csv"), "--quiet", warehouse=demo_warehouse)
    run_cli("sql", query, "--out", str(tmp_path / "x.json"), "--quiet", warehouse=demo_warehouse)
    header, values = (tmp_path / "x.csv").read_text().splitlines()
    (row,) = json.loads((tmp_path / "x.json").read_text())
    assert dict(zip(header.split(","), values.split(","))) == {name: value or "" for name, value in row.items()}
    assert row == {"half": "2026-01-02T01:04:05.500000+00:00", "micro": "2026-12-03T13:20:07.148104+00:00",
                   "whole": "2026-01-02T03:04:05+00:00", "naive": "2026-01-02T03:04:05", "nothing": None}
    run_cli("sql", query, "--out", str(tmp_path / "x.parquet"), "--quiet", warehouse=demo_warehouse)
    import pyarrow.parquet as pq

    stored = pq.read_table(tmp_path / "x.parquet")
    assert stored.schema.field("naive").type.tz is None and stored.schema.field("whole").type.tz is not None
    assert stored.column("naive")[0].as_py().isoformat() == row["naive"]


def test_a_table_the_warehouse_does_not_hold_yet_says_what_stores_it(corpus_warehouse):
    named = run_cli("sql", "--query", "forge_survival", warehouse=corpus_warehouse, check=1)
    assert named.stderr == (f"loopmeter: error: table forge_attempt_events is not in {corpus_warehouse} yet; run "
                            "`loopmeter ingest forge STORE` first\n")
    ad_hoc = run_cli("sql", "SELECT * FROM forgeloop_objectives", warehouse=corpus_warehouse, check=1)
    assert "table forgeloop_objectives is not in" in ad_hoc.stderr and "aggregate --confidence" in ad_hoc.stderr
    unknown = run_cli("sql", "SELECT * FROM no_such_table", warehouse=corpus_warehouse, check=1)
    assert "Catalog Error" in unknown.stderr  # not a table loopmeter stores: DuckDB's own words


def test_queries_lists_each_querys_parameters():
    text = run_cli("queries", env={"COLUMNS": "250"}).stdout
    line = next(line for line in text.splitlines() if line.startswith("forgeloop_pairs "))
    assert line.endswith("Takes --param run_set=... (optional).")
    listed = {entry["name"]: entry for entry in json.loads(run_cli("queries", "--json").stdout)}
    assert listed["forge_routing_scope"]["parameters"] == [{"name": "repo", "optional": True},
                                                           {"name": "since", "optional": True}]
    assert listed["forge_attempts"]["parameters"] == []


def test_a_sql_table_shows_its_first_10000_rows_and_counts_them_all(demo_warehouse):
    """A table is for people: a result of a million rows is not drawn whole (it took minutes), its first
    10,000 rows are, with the count of all of them and how to get every row."""
    shown = run_cli("sql", "SELECT range AS i FROM range(10005)", warehouse=demo_warehouse)
    cells = [line.strip("│ ") for line in shown.stdout.splitlines() if line.startswith("│")]
    assert cells == [str(i) for i in range(10_000)]
    assert shown.stderr == "(10005 rows; the first 10000 shown: --format csv or --out FILE gives them all)\n"
    whole = run_cli("sql", "SELECT range AS i FROM range(10000)", warehouse=demo_warehouse)
    assert whole.stderr == "(10000 rows)\n" and whole.stdout.count("│ 9999 │") == 1


def test_an_error_of_a_result_s_conversion_names_no_line_of_text_the_user_did_not_write(demo_warehouse):
    """A value out of range fails as the result is read through loopmeter's projection of it: DuckDB's
    `LINE 3:` would count the lines of that projection, so the line is left out."""
    failed = run_cli("sql", "select 99999999999999999999999999999999999999999::hugeint", warehouse=demo_warehouse, check=1)
    assert failed.stderr == ("loopmeter: error: Conversion Error: BIGNUM value 99999999999999999999999999999999999999999 "
                             "is out of range for type INT128\n")


# ---- csv, json and jsonl a piece at a time ------------------------------------------------------

def _frame_of_every_kind(rows: int):
    """A result with a column of each kind sql renders specially: NaN and infinities, nulls, text with
    quotes and newlines, lists, bytes, timestamps with and without a zone, 128-bit integers."""
    import datetime as dt

    import polars as pl

    floats = [float("nan"), float("inf"), -float("inf"), None, 1e-7, 2.5]
    return pl.DataFrame({
        "n": list(range(rows)),
        "x": [floats[i % len(floats)] for i in range(rows)],
        "s": [None if i % 5 == 0 else f'row "{i}",\nnext' for i in range(rows)],
        "l": [[1.0, None] if i % 2 else None for i in range(rows)],
        "b": [bytes([i % 256]) for i in range(rows)],
        "t": [dt.datetime(2026, 12, 3, 13, 20, 7, 148104 if i % 2 else 0, tzinfo=dt.timezone.utc) for i in range(rows)],
        "naive": [dt.datetime(2026, 12, 3, 13, 20, i % 60) for i in range(rows)],
        "h": pl.Series([10**30 + i for i in range(rows)], dtype=pl.Int128),
    })


@pytest.mark.parametrize("output_format", ["csv", "json", "jsonl"])
@pytest.mark.parametrize("rows", [0, 1, 7])
def test_the_text_made_a_piece_at_a_time_is_the_whole_result_s(output_format, rows):
    """Every cut of the rows into pieces gives the text the whole frame rendered at once gives; json's
    is the rows as objects (128-bit integers whole, NaN and infinities null), jsonl's a line each."""
    from loopmeter.sql.output import result_pieces

    frame = _frame_of_every_kind(rows)
    whole = "".join(result_pieces(frame, output_format, rows=10**9))
    for size in range(1, rows + 2):
        assert "".join(result_pieces(frame, output_format, rows=size)) == whole, size
    if output_format == "json":
        parsed = json.loads(whole)
        assert whole.endswith("]\n") and [row["n"] for row in parsed] == list(range(rows))
        assert [row["h"] for row in parsed] == [10**30 + i for i in range(rows)]
        assert [row["x"] for row in parsed] == [[None, None, None, None, 1e-7, 2.5][i % 6] for i in range(rows)]
    elif output_format == "jsonl":
        assert [json.loads(line)["n"] for line in whole.splitlines()] == list(range(rows))
    else:
        assert whole.splitlines()[0] == "n,x,s,l,b,t,naive,h" and whole.count("row ") == sum(i % 5 != 0 for i in range(rows))


@pytest.mark.parametrize("output_format", ["json", "jsonl", "csv"])
def test_writing_a_result_holds_one_piece_of_python_objects_whatever_its_rows(tmp_path, output_format):
    """The Python memory a result's text takes to write (tracemalloc's peak: the rows as objects and
    their text) follows the piece, not the result: 8 times the rows, at most 1.5 times the peak."""
    import tracemalloc

    from loopmeter.sql.output import write_result

    peaks = []
    for rows in (2_000, 16_000):
        frame = _frame_of_every_kind(rows)
        tracemalloc.start()
        write_result(frame, output_format, tmp_path / f"{rows}.{output_format}", piece_rows=1_000)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        written = (tmp_path / f"{rows}.{output_format}").read_text()
        assert written.count("\n") >= rows if output_format == "csv" else written.count('{"n":') == rows
    assert peaks[1] <= 1.5 * peaks[0], peaks
