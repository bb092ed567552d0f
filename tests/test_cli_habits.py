"""The command line's habits: -h, --version, the common options on either side of the command,
an example and the exit codes that apply in every help page, and `sql --out` by the file's name."""
from __future__ import annotations

import json
import re
import selectors
import subprocess
import sys
import tomllib
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, run_cli
from loopmeter.storage import Warehouse


def _command_paths() -> list[str]:
    from typer.core import TyperGroup
    from typer.main import get_command

    from loopmeter.cli import app

    paths, todo = [], [((), get_command(app))]
    while todo:
        prefix, group = todo.pop(0)
        for name, command in group.commands.items():
            if isinstance(command, TyperGroup):
                todo.append(((*prefix, name), command))
            else:
                paths.append(" ".join((*prefix, name)))
    return sorted(paths)


COMMANDS = _command_paths()
# The exit codes beyond 0, 1, 2, 130, 141 and 143 each command can end with: 3 where inputs can be
# rejected while the rest is stored, 4 where it takes the warehouse's writer lock, 5 where a comparison
# can fail on a regression.
OWN_CODES = {
    "aggregate": {4}, "catalog": {4}, "check": {4}, "compare": {5}, "demo": {4}, "execute": {3, 4}, "harvest survival": {3, 4},
    "help": set(), "ingest forge": {3, 4}, "ingest forgeloop": {3, 4}, "queries": set(), "report html": set(),
    "report confidence": set(), "report outliers": set(), "report regression": set(), "report routing": set(),
    "report srm": set(), "report summary": set(),
    "report survival": set(), "report tail": set(), "run-all": {3, 4}, "schema": set(), "sql": set(),
}


def test_every_command_is_in_the_table_of_exit_codes():
    assert COMMANDS == sorted(OWN_CODES)


@pytest.mark.parametrize("path", COMMANDS)
def test_each_help_has_h_an_example_and_the_exit_codes_that_apply(path):
    words = path.split()
    short = run_cli(*words, "-h")
    assert short.stdout == run_cli(*words, "--help").stdout and short.stderr == ""
    text = short.stdout
    assert f"Usage: loopmeter {path} " in text
    wide = [line for line in run_cli(*words, "-h", env={"COLUMNS": "80"}).stdout.splitlines() if len(line) > 80]
    assert not wide, wide
    example = text.split("Example:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert example and all(line.startswith("  ") for line in example)
    assert any(line.strip().startswith(f"loopmeter {path}") for line in example), example
    codes_text = " ".join(text.split("Exit codes:", 1)[1].split()).replace("exit- codes", "exit-codes")  # wrapped at its hyphen
    listed = {int(code) for code in re.findall(r"(?:^|, )(\d+) ", codes_text.split(";")[0])}
    assert listed == {0, 1, 2} | OWN_CODES[path], codes_text
    assert "130, 141 and 143 as every command (loopmeter help exit-codes)" in codes_text
    if "--wait" in text:  # a command that can wait for the lock can be told it is held
        assert 4 in listed
    assert text.count("Exit codes") == 1


def test_sql_help_lists_no_rejected_inputs_and_shows_the_choices():
    text = run_cli("sql", "-h").stdout
    assert "rejected" not in text and "--format [table|csv|json|jsonl|parquet]" in text
    for path in ("aggregate", "execute", "run-all"):
        assert "--tier [smoke|evidence|tail]" in run_cli(*path.split(), "-h").stdout


@pytest.mark.parametrize("columns", ["80", "60"])
def test_the_command_lists_cut_no_description(columns):
    for group in ([], ["ingest"], ["report"], ["harvest"]):
        text = run_cli(*group, "-h", env={"COLUMNS": columns}).stdout
        listing = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
        assert "..." not in listing and "…" not in listing
        joined = " ".join(listing.split())
        assert "Run read-only SQL against the warehouse." in joined or group
        assert all(len(line) <= int(columns) for line in text.splitlines())


def test_top_level_help_says_the_exit_codes_once_and_help_exit_codes_says_each():
    top = " ".join(run_cli("-h").stdout.split())
    assert ("3 some inputs rejected (the rest stored), 4 warehouse locked by another writer, 5 compare --fail-on "
            "met (a regressed, inconclusive or underpowered row), 130 interrupted") in top
    assert "--version" in top and "-h, --help" in top
    table = run_cli("help", "exit-codes").stdout
    assert [line.split()[0] for line in table.splitlines() if line.startswith("  ")] == ["0", "1", "2", "3", "4", "5", "130", "141", "143"]
    assert "    5  compare --fail-on: a gated row regressed, is inconclusive or is underpowered\n" in table
    # at 40 columns each meaning wraps under itself, and the words are all there
    narrow = run_cli("help", "exit-codes", env={"COLUMNS": "40"}).stdout
    assert max(map(len, narrow.splitlines())) <= 40 and narrow.split() == table.split()
    assert "    5  compare --fail-on: a gated row\n       regressed, is inconclusive or is\n       underpowered\n" in narrow
    assert run_cli("help", "report", "tail").stdout == run_cli("report", "tail", "-h").stdout
    wrong = run_cli("help", "report", "nosuch", check=2)
    assert wrong.stdout == "" and wrong.stderr.count("\n") == 1 and "no command `loopmeter report nosuch`" in wrong.stderr


def test_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for args in (["--version"], ["--version", "report", "tail"]):
        result = run_cli(*args)
        assert result.stdout == f"loopmeter {version}\n" and result.stderr == ""


def test_common_options_before_or_after_the_command(corpus_warehouse, tmp_path):
    w = str(corpus_warehouse)
    after = run_cli("report", "tail", "--warehouse", w, "--json").stdout
    assert json.loads(after)["runSets"][0]["runSetId"] == "codex-quality-repeat5-20260831"
    for args in (["--warehouse", w, "report", "tail", "--json"], ["--json", "--warehouse", w, "report", "tail"],
                 ["report", "--warehouse", w, "--json", "tail"], ["--warehouse=" + w, "--json", "report", "tail"]):
        assert run_cli(*args).stdout == after, args
    # the command's own --warehouse, after it, wins over the one before it
    assert run_cli("--warehouse", str(tmp_path / "none"), "report", "tail", "--json", "--warehouse", w).stdout == after
    query = "SELECT run_set_id, count(*) AS n FROM runs GROUP BY ALL ORDER BY 1"
    chatty = run_cli("sql", query, "--warehouse", w)
    assert chatty.stderr == "(2 rows)\n" and re.search(r"codex-tail-repeat20-20260831 +│ +420 │", chatty.stdout)
    quiet = run_cli("--quiet", "--warehouse", w, "sql", query)
    assert quiet.stderr == "" and quiet.stdout == chatty.stdout
    assert run_cli("-q", "sql", query, "--warehouse", w).stderr == ""
    # before the command, --json asks for what a command without JSON cannot give
    refused = run_cli("--json", "sql", query, "--warehouse", w, check=2)
    assert refused.stdout == "" and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("loopmeter: error: --json: `loopmeter sql` prints no JSON")
    # --warehouse before a command that reads no warehouse is a setting it has no use for
    assert run_cli("--warehouse", w, "queries").stdout == run_cli("queries").stdout


def _wait_for_line(process: subprocess.Popen, wanted: str, timeout: float = 120) -> str:
    """stderr up to the line holding `wanted` (the process may end first: then all of it)."""
    seen = ""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)
        while wanted not in seen:
            if not selector.select(timeout):
                raise AssertionError(f"no {wanted!r} within {timeout} s; stderr so far: {seen!r}")
            line = process.stderr.readline()
            if not line:
                break
            seen += line
    return seen


def _start(*args: str, cwd: Path = ROOT) -> subprocess.Popen:
    """`loopmeter ARGS` started as a process of its own, left running (it waits for a lock)."""
    return subprocess.Popen([sys.executable, "-m", "loopmeter", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd)


def test_wait_before_the_command_waits_for_the_writer(corpus, tmp_path):
    warehouse = tmp_path / "warehouse"
    run_cli("--quiet", "--warehouse", str(warehouse), "ingest", "forgeloop", str(corpus / "results"))
    with Warehouse(warehouse).lock(command="test writer"):
        busy = run_cli("--warehouse", str(warehouse), "catalog", check=4)
        assert "locked by" in busy.stderr and "--wait" in busy.stderr
        process = _start("--wait", "--warehouse", str(warehouse), "catalog")
        assert "waiting for the warehouse lock held by" in _wait_for_line(process, "waiting for the warehouse lock")
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0 and out.startswith(f"{warehouse / 'loopmeter.duckdb'}: ")


def test_check_repair_waits_for_the_writer_with_wait(corpus, tmp_path):
    warehouse = tmp_path / "warehouse"
    run_cli("--quiet", "--warehouse", str(warehouse), "ingest", "forgeloop", str(corpus / "results"))
    (warehouse / "loopmeter.duckdb").unlink()  # what `check --repair` rebuilds
    with Warehouse(warehouse).lock(command="test writer"):
        busy = run_cli("--warehouse", str(warehouse), "check", "--repair", check=4)
        assert "is locked by another process" in busy.stderr and "pass --wait" in busy.stderr
        process = _start("--wait", "--warehouse", str(warehouse), "check", "--repair")
        _wait_for_line(process, "waiting for the warehouse lock held by pid")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "loopmeter: repaired: " in err and err.rstrip().endswith("repaired; checked again: all whole")


@pytest.mark.slow
def test_demo_waits_with_wait_and_names_its_paths_absolute(demo_warehouse, tmp_path):
    data = demo_warehouse.parent / "data"  # made by the first demo: made once, not again
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with Warehouse(warehouse).lock(command="test writer"):
        process = _start("demo", "--data", "data", "--wait", "--warehouse", str(warehouse), cwd=data.parent)
        _wait_for_line(process, "waiting for the warehouse lock")
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    assert f"sample data:  {(data / 'sample').resolve()}\n" in out
    assert "git process" not in out and "harvest survival: " in out and " outcomes recorded at 7, 14 and 30 days" in out


QUERY = ("SELECT * FROM (VALUES (1, 'a', 1.5, NULL), (2, 'b, \"c\"', NULL, 'x')) t(id, name, score, note) "
         "ORDER BY id")
ROWS = [{"id": 1, "name": "a", "score": 1.5, "note": None}, {"id": 2, "name": 'b, "c"', "score": None, "note": "x"}]


def _read(path: Path, form: str) -> list[dict]:
    if form == "csv":
        return pl.read_csv(path).to_dicts()
    if form == "json":
        return json.loads(path.read_text())
    if form == "jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    return pq.read_table(path).to_pylist()


@pytest.mark.parametrize(("name", "form"), [("r.csv", "csv"), ("r.json", "json"), ("r.jsonl", "jsonl"),
                                            ("r.ndjson", "jsonl"), ("r.parquet", "parquet"), ("R.PARQUET", "parquet")])
def test_sql_out_takes_its_format_from_the_name(corpus_warehouse, tmp_path, name, form):
    out = tmp_path / name
    result = run_cli("sql", QUERY, "--out", str(out), warehouse=corpus_warehouse)
    assert result.stdout == ""
    assert _read(out, form) == ROWS
    again = tmp_path / ("again" + out.suffix)  # --format saying what the name says is fine
    run_cli("sql", QUERY, "--out", str(again), "--format", form, warehouse=corpus_warehouse)
    assert again.read_bytes() == out.read_bytes() if form != "parquet" else _read(again, form) == ROWS


def test_sql_jsonl_on_stdout_is_one_object_a_line(corpus_warehouse):
    text = run_cli("sql", QUERY, "--format", "jsonl", warehouse=corpus_warehouse).stdout
    assert [json.loads(line) for line in text.splitlines()] == ROWS and text.count("\n") == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "csv", "--out", "r.parquet"], "--out {dir}/r.parquet names a parquet file, but --format is csv"),
    (["--format", "parquet", "--out", "r.json"], "--out {dir}/r.json names a json file, but --format is parquet"),
    (["--format", "json", "--out", "r.ndjson"], "--out {dir}/r.ndjson names a jsonl file, but --format is json"),
    (["--out", "r.txt"], "--out {dir}/r.txt: its name says no format; name it .csv, .json, .jsonl, .ndjson or .parquet"),
    (["--format", "table", "--out", "r.csv"], "--format table prints to the terminal"),
])
def test_sql_out_contradicting_its_format_is_refused(corpus_warehouse, tmp_path, args, message):
    args = [str(tmp_path / arg) if arg.startswith("r.") else arg for arg in args]
    result = run_cli("sql", QUERY, *args, warehouse=corpus_warehouse, check=2)
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith("loopmeter: error: " + message.format(dir=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_sql_out_with_a_format_takes_any_name(corpus_warehouse, tmp_path):
    out = tmp_path / "result.txt"
    run_cli("sql", QUERY, "--format", "csv", "--out", str(out), warehouse=corpus_warehouse)
    assert out.read_text() == 'id,name,score,note\n1,a,1.5,\n2,"b, ""c""",,x\n'


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_a_terminal_that_is_not_utf_8_gets_every_report_with_escapes_for_what_it_lacks(demo_warehouse, encoding):
    """Under a locale of another encoding, a character it cannot show (`Δ`) is written as an escape:
    the reports and help print whole, exit 0, and never blame the warehouse."""
    import os

    environment = dict(os.environ, PYTHONIOENCODING=encoding)
    for command in (["report", "tail"], ["report", "summary"], ["report", "confidence"], ["report", "routing"],
                    ["queries"], ["report", "survival", "--help"]):
        done = subprocess.run([sys.executable, "-m", "loopmeter", "--warehouse", str(demo_warehouse), *command],
                              capture_output=True, env=environment, cwd=ROOT)
        assert done.returncode == 0 and done.stderr == b"", (command, done.stderr)
        if "--help" not in command:  # help is typer's own text
            done.stdout.decode(encoding)  # every byte of the encoding asked for
        if command == ["report", "tail"]:  # the escape measured with its column: the borders stay aligned
            widths, tables = set(), 0
            for line in done.stdout.decode(encoding).splitlines() + [""]:
                if line.startswith(("|", "+")):
                    widths.add(len(line.rstrip()))
                elif widths:
                    assert len(widths) == 1, widths  # each table's lines of one width
                    widths, tables = set(), tables + 1
            assert b"\\u0394" in done.stdout and tables >= 1


@pytest.mark.parametrize("command", [["aggregate", "--out", "s3://bucket/aggregate"],
                                     ["report", "html", "--out", "S3://bucket/report.html"],
                                     ["sql", "select 1", "--out", "gs://bucket/x.csv"],
                                     ["ingest", "forgeloop", "s3://bucket/results"]])
def test_an_output_given_as_a_url_is_refused_and_no_folder_named_like_it_is_made(demo_warehouse, tmp_path, command):
    refused = run_cli(*command, warehouse=demo_warehouse, cwd=tmp_path, check=2)
    (line,) = refused.stderr.splitlines()
    named = "'RESULTS'" if command[0] == "ingest" else "'--out'"
    assert line.startswith(f"loopmeter: error: Invalid value for {named}: {command[-1]} is a URL; a local path is "
                           "wanted here"), line
    assert list(tmp_path.iterdir()) == []


def test_a_warehouse_whose_every_run_file_was_rejected_says_what_to_run(tmp_path):
    results = tmp_path / "results" / "raw" / "set-a" / "x"
    results.mkdir(parents=True)
    for name in ("one.json", "two.json"):
        (results / name).write_text("{not json")
    warehouse = tmp_path / "warehouse"
    run_cli("ingest", "forgeloop", str(tmp_path / "results"), "--quiet", warehouse=warehouse, check=3)
    told = run_cli("report", "confidence", warehouse=warehouse, check=1).stderr.splitlines()[-1]
    assert told == (f"loopmeter: error: no runs in {warehouse}; run `loopmeter ingest forgeloop RESULTS` first (it names "
                    "each run file it rejects)")
