"""Bad command lines and awkward surroundings, as users meet them: one clear line, the right exit
code, and nothing written (or corrupted) where nothing should be."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, imported_packages, run_cli
from runs import run, write_tree


def one_line_error(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """The command ended with `code` and said one line, `loopmeter: error: ...`, holding `fragments`."""
    message = result.stderr.strip()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert message.startswith("loopmeter: error: ") and "\n" not in message, message
    assert "Traceback" not in result.stderr, result.stderr
    assert not re.match(r"\w+(Error|Exception): ", message[len("loopmeter: error: "):]), message  # not a raw exception
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` (symbolic links followed) and its bytes."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file() and ".lock" not in path.name}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, demo_warehouse) -> Path:
    """A copy of the demo warehouse this module may write to (the session's stays as it is)."""
    copy = tmp_path_factory.mktemp("guards") / "warehouse"
    shutil.copytree(demo_warehouse, copy, symlinks=True)
    run_cli("catalog", "--quiet", warehouse=copy)  # the copy's views of its own place, before any snapshot
    return copy


@pytest.fixture(scope="module")
def sample(demo_warehouse) -> Path:
    """The demo's sample data: forge/dataset.sqlite (with its git repositories), forgeloop/."""
    return demo_warehouse.parent / "data" / "sample"


# ---- 1: --out inside the warehouse -----------------------------------------------------------

def test_an_out_inside_the_warehouse_is_refused_and_nothing_is_touched(warehouse, tmp_path):
    before = snapshot(warehouse)
    database = warehouse / "loopmeter.duckdb"
    link = tmp_path / "link"
    link.symlink_to(warehouse)
    for args in (
        ["sql", "select 1", "--format", "csv", "--out", str(database)],
        ["sql", "select 1", "--format", "csv", "--out", str(link / "loopmeter.duckdb")],  # through a link
        ["sql", "select 1", "--format", "parquet", "--out", str(warehouse / "runs" / "part-9.parquet")],
        ["report", "html", "--out", str(database)],
        ["aggregate", "--out", str(warehouse)],
        ["aggregate", "--out", str(warehouse / "runs")],
    ):
        result = run_cli(*args, warehouse=warehouse, check=None)
        one_line_error(result, 2, "inside the warehouse" if args[-1] != str(warehouse) else "is the warehouse",
                       "whose files only loopmeter writes")
    assert snapshot(warehouse) == before
    assert run_cli("sql", "select count(*) AS n from runs", "--format", "json", warehouse=warehouse).stdout == '[{"n":720}]\n'


def test_the_warehouse_keeps_its_own_page_and_documents(warehouse):
    """Inside the warehouse, report.html (where demo and run-all put the page) may be written again."""
    result = run_cli("report", "html", "--out", str(warehouse / "report.html"), warehouse=warehouse)
    assert result.stdout.startswith("wrote ") and (warehouse / "report.html").read_text().startswith("<!doctype html>")


# ---- 2: raw exception text -------------------------------------------------------------------

def test_a_warehouse_that_is_a_file_is_one_line(tmp_path, sample):
    file = tmp_path / "afile"
    file.write_text("not a warehouse")
    for args in (["report", "summary"], ["ingest", "forge", str(sample / "forge" / "dataset.sqlite"), "-q"],
                 ["sql", "select 1"]):
        one_line_error(run_cli(*args, warehouse=file, check=None), 1, f"--warehouse {file} is a file, not a directory")
        one_line_error(run_cli(*args, warehouse=file / "sub", check=None), 1, f"{file} is a file, not a directory")
    result = run_cli("report", "routing", check=None, env={"LOOPMETER_WAREHOUSE": str(file)})
    one_line_error(result, 1, f"$LOOPMETER_WAREHOUSE {file} is a file, not a directory")
    assert file.read_text() == "not a warehouse"


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "0", "1e308", "1048577"])
def test_max_file_mb_must_be_a_finite_positive_number(tmp_path, value):
    results = write_tree(tmp_path / "results", [run()])
    result = run_cli("ingest", "forgeloop", str(results), "--max-file-mb", value, warehouse=tmp_path / "w", check=None)
    one_line_error(result, 2, "--max-file-mb must be a finite number greater than 0")
    assert not (tmp_path / "w").exists()


def test_a_small_positive_max_file_mb_still_works(tmp_path):
    results = write_tree(tmp_path / "results", [run()])
    run_cli("ingest", "forgeloop", str(results), "--max-file-mb", "0.5", "-q", warehouse=tmp_path / "w")


def test_sql_runs_one_statement(demo_warehouse):
    result = run_cli("sql", "select 1; select 2", warehouse=demo_warehouse, check=None)
    one_line_error(result, 1, "loopmeter sql runs one statement at a time; this SQL has 2")
    assert run_cli("sql", "select 1 AS x;", "--format", "csv", warehouse=demo_warehouse).stdout == "x\n1\n"


def test_sql_out_in_a_missing_directory_or_on_a_directory(demo_warehouse, tmp_path):
    missing = tmp_path / "nodir" / "x.csv"
    one_line_error(run_cli("sql", "select 1", "--format", "csv", "--out", str(missing), warehouse=demo_warehouse, check=None),
                   1, f"--out {missing}: the directory {missing.parent} does not exist")
    one_line_error(run_cli("sql", "select 1", "--format", "csv", "--out", str(tmp_path), warehouse=demo_warehouse, check=None),
                   1, f"--out {tmp_path} is a directory")
    assert sorted(tmp_path.iterdir()) == []


def test_report_html_out_a_directory(demo_warehouse, tmp_path):
    result = run_cli("report", "html", "--out", str(tmp_path), warehouse=demo_warehouse, check=None)
    one_line_error(result, 1, f"--out {tmp_path} is a directory; give the HTML file to write")
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("command", "named"), [
    (("aggregate", "--out", ""), "'--out'"),
    (("report", "html", "--out", ""), "'--out'"),
    (("sql", "select 1", "--out", ""), "'--out'"),
    (("sql", "--file", ""), "'--file'"),
    (("ingest", "forgeloop", ""), "'RESULTS'"),
    (("ingest", "forgeloop", "results", "--scenarios", ""), "'--scenarios'"),
    (("ingest", "forge", ""), "'STORE'"),
    (("report", "routing", "--repo", ""), "'--repo'"),
    (("demo", "--data", ""), "'--data'"),
    (("execute", "--scenarios", "", "--target", "."), "'--scenarios'"),
])
def test_an_empty_path_is_refused_never_taken_for_the_working_directory(demo_warehouse, tmp_path, command, named):
    """A path given as "" (an unset shell variable) would be the working directory as a Path: refused, and
    nothing is written there."""
    result = run_cli(*command, warehouse=demo_warehouse, check=None, cwd=tmp_path)
    one_line_error(result, 2, f"Invalid value for {named}: is empty; give a path (`.` for the working directory)")
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [("aggregate", "--out", "-"), ("run-all", "sample", "--out", "-")])
def test_an_output_folder_named_dash_is_refused_never_made(demo_warehouse, tmp_path, command):
    result = run_cli(*command, warehouse=demo_warehouse, check=None, cwd=tmp_path)
    one_line_error(result, 2, "--out -: --out names a file or folder to write, never standard output")
    assert sorted(tmp_path.iterdir()) == []


def test_demo_data_in_a_warehouse_is_refused_and_nothing_is_written_there(demo_warehouse, tmp_path):
    """The sample goes in DATA/sample: never inside the warehouse (a table's folder, .state), nor inside
    another warehouse; the demo's own layout (data/ holding warehouse/) stays allowed."""
    warehouse = tmp_path / "w"
    shutil.copytree(demo_warehouse, warehouse, symlinks=True)
    other = tmp_path / "other"
    shutil.copytree(demo_warehouse, other, symlinks=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for data, told in ((warehouse, f"--data {warehouse} is the warehouse"),
                       (warehouse / ".state", f"--data {warehouse / '.state'} is inside the warehouse"),
                       (warehouse / "runs", f"--data {warehouse / 'runs'} is inside the warehouse"),
                       (other, f"--data {other} is a loopmeter warehouse, whose entries are loopmeter's")):
        one_line_error(run_cli("demo", "--data", str(data), "-q", warehouse=warehouse, check=None), 2, told)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_an_interruption_of_one_command_is_not_the_next_one_s():
    """The Python API runs commands one after another in one process: a Ctrl-C (or SIGTERM) that ended
    one is forgotten as the next starts, whose own error is told with its own exit code."""
    from loopmeter import interrupts

    interrupts.RECEIVED = interrupts.TERMINATED = True  # as a command SIGTERM ended leaves them
    result = run_cli("--warehouse", "/nonexistent/warehouse", "sql", "SELECT 1", check=None)
    assert result.returncode == 1 and result.stderr.startswith("loopmeter: error: no warehouse at /nonexistent/warehouse; ")
    assert not interrupts.RECEIVED and not interrupts.TERMINATED


def test_sql_json_encodes_blobs_and_wide_integers(demo_warehouse):
    text = ("SELECT 'ab'::BLOB AS b, ['ab'::BLOB] AS bl, 12345678901234567890123::HUGEINT AS h, "
            "170141183460469231731687303715884105727::HUGEINT AS hmax, "
            "340282366920938463463374607431768211455::UHUGEINT AS umax, 1.50::DECIMAL(4,2) AS d")
    result = run_cli("sql", text, "--format", "json", warehouse=demo_warehouse)
    assert json.loads(result.stdout) == [{"b": "YWI=", "bl": ["YWI="], "h": 12345678901234567890123,
                                          "hmax": 2 ** 127 - 1, "umax": 2 ** 128 - 1, "d": 1.5}]
    assert '"d":1.50' in result.stdout  # the decimal's own digits
    csv = run_cli("sql", text, "--format", "csv", warehouse=demo_warehouse).stdout
    assert csv.splitlines()[1].startswith('YWI=,"[""YWI=""]",12345678901234567890123,170141183460469231731687303715884105727,')


def test_sql_shows_intervals_as_text(demo_warehouse):
    text = "SELECT INTERVAL 3 DAY AS i, [INTERVAL 1 DAY] AS il, {'a': INTERVAL 2 HOUR} AS s"
    assert json.loads(run_cli("sql", text, "--format", "json", warehouse=demo_warehouse).stdout) == [
        {"i": "3 days", "il": "[1 day]", "s": "{'a': '02:00:00'}"}]
    table = run_cli("sql", text, warehouse=demo_warehouse)
    assert "3 days" in table.stdout and table.stderr.strip() == "(1 row)"


# ---- 3: option validation --------------------------------------------------------------------

def test_choices_are_usage_errors_naming_the_allowed_values(demo_warehouse, tmp_path, sample):
    one_line_error(run_cli("aggregate", "--tier", "bogus", warehouse=demo_warehouse, check=None), 2,
                   "--tier must be one of smoke, evidence, tail (got 'bogus')")
    result = run_cli("run-all", "--forge", str(sample / "forge" / "dataset.sqlite"), "--tier", "bogus",
                     warehouse=tmp_path / "w", check=None)
    one_line_error(result, 2, "--tier must be one of smoke, evidence, tail")
    assert not (tmp_path / "w").exists()
    one_line_error(run_cli("sql", "select 1", "--format", "xml", warehouse=demo_warehouse, check=None), 2,
                   "--format must be one of table, csv, json, jsonl, parquet (got 'xml')")


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e308"])
def test_busy_timeout_must_be_finite_and_not_negative(sample, tmp_path, value):
    result = run_cli("ingest", "forge", str(sample / "forge" / "dataset.sqlite"), "--busy-timeout", value,
                     warehouse=tmp_path / "w", check=None)
    one_line_error(result, 2, "--busy-timeout must be a finite number at least 0")
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("value", ["-5", "nan", "inf"])
def test_routing_since_is_validated(demo_warehouse, value):
    result = run_cli("report", "routing", "--since", value, "--json", warehouse=demo_warehouse, check=None)
    one_line_error(result, 2, "--since must be a finite number at least 0")
    assert result.stdout == ""


def test_routing_repo_unknown_is_an_error_and_an_empty_selection_a_note(warehouse, sample):
    result = run_cli("report", "routing", "--repo", "/nope", "--json", warehouse=warehouse, check=None)
    one_line_error(result, 1, "--repo /nope: no Forge repository of", "has this path (known: ")
    assert result.stdout == ""
    repo = sample / "forge" / "repos" / "api"
    scoped = run_cli("report", "routing", "--repo", str(repo), "--json", warehouse=warehouse)
    assert json.loads(scoped.stdout)["observational"] and scoped.stderr == ""
    empty = run_cli("report", "routing", "--repo", str(repo), "--since", "0.000001", "--json", warehouse=warehouse)
    assert json.loads(empty.stdout) == {"observational": [], "randomized": []}
    assert empty.stderr.strip() == f"note: no task matched --repo {repo} and --since 1e-06: the report is empty"


# ---- 4: harvest --now ------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "1e400", "-inf", "1e300"])
def test_harvest_now_must_be_a_finite_time(demo_warehouse, value):
    result = run_cli("harvest", "survival", "--include-temp", "--dry-run", "--json", "--now", value,
                     warehouse=demo_warehouse, check=None)
    one_line_error(result, 2, f"--now '{value}': must be a finite time")
    assert result.stdout == ""


# ---- 5: broken pipes -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["report", "summary"],
    ["report", "routing", "--json"],
    ["sql", "select * from runs"],
    ["sql", "select * from runs", "--format", "csv"],
], ids=["summary", "routing-json", "sql-table", "sql-csv"])
def test_a_reader_that_leaves_ends_the_command_quietly(warehouse, args):
    """`loopmeter ... | head`: exit 141 (128 + SIGPIPE, as any Unix tool the signal ends), not a word."""
    process = subprocess.Popen([sys.executable, "-m", "loopmeter", *args, "--warehouse", str(warehouse)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    process.stdout.close()  # the reader has gone before the first line is written
    with process.stderr:
        stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, stderr
    assert stderr in ("", "(720 rows)\n"), stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["sql", "select * from runs"], ["report", "summary", "--json"]],
                         ids=["sql-table", "summary-json"])
def test_a_reader_that_leaves_after_the_first_bytes_ends_the_command_as_a_broken_pipe(warehouse, args):
    """`loopmeter ... | head -c 10`: the system takes part of a large write and Python drops the rest without an
    error; the command still ends 141, as the output did not all reach its reader."""
    process = subprocess.Popen([sys.executable, "-m", "loopmeter", *args, "--warehouse", str(warehouse)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert len(process.stdout.read(10)) == 10
    process.stdout.close()
    with process.stderr:
        stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, stderr
    assert stderr in ("", "(720 rows)\n"), stderr


# ---- 6: report html on no data ---------------------------------------------------------------

def test_report_html_on_a_warehouse_without_data_is_an_error(tmp_path):
    out = tmp_path / "report.html"
    for warehouse in (tmp_path / "missing", tmp_path / "empty"):
        if warehouse.name == "empty":
            warehouse.mkdir()
        result = run_cli("report", "html", "--out", str(out), warehouse=warehouse, check=None)
        said = f"no warehouse at {warehouse}" if warehouse.name == "missing" else f"{warehouse} is not a loopmeter warehouse"
        one_line_error(result, 1, said)
    assert not out.exists() and not (tmp_path / "missing").exists()


# ---- 7: the interruption message -------------------------------------------------------------

INTERRUPT = '''
import os, signal, sys
import loopmeter.faults as faults
point = sys.argv.pop(1)
def checkpoint(name):
    if name == point:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, at this point of the publishing
faults.checkpoint = checkpoint
sys.argv[0] = "loopmeter"
from loopmeter.cli import main
main()
'''


def interrupted(tmp_path: Path, point: str, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT)
    return subprocess.run([sys.executable, str(script), point, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.mark.slow
def test_ctrl_c_before_the_publish_leaves_every_table_as_it_was(tmp_path, sample):
    store = str(sample / "forge" / "dataset.sqlite")
    warehouse = tmp_path / "w"
    # forge_plans' new version is complete, the other tables' not yet: nothing is published
    result = interrupted(tmp_path, "after-publish:forge_plans", "ingest", "forge", store, "-q", "--warehouse", str(warehouse))
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip() == "loopmeter: interrupted; no table was replaced: the warehouse keeps its previous tables"
    assert not [p.name for p in warehouse.iterdir() if p.is_symlink()]
    assert not (warehouse / ".state" / "publishing.json").exists()


@pytest.mark.slow
def test_ctrl_c_during_the_swaps_waits_for_the_last_one(tmp_path, sample):
    store = str(sample / "forge" / "dataset.sqlite")
    clean, warehouse = tmp_path / "clean", tmp_path / "w"
    run_cli("ingest", "forge", store, "-q", warehouse=clean)
    tables = sorted(p.name for p in clean.iterdir() if p.is_symlink())
    # Ctrl-C right after the first table's link is swapped
    result = interrupted(tmp_path, f"publishing:swapped:{_first_swapped(tmp_path, store)}", "ingest", "forge", store, "-q",
                         "--warehouse", str(warehouse))
    assert result.returncode == 130, result.stderr
    assert sorted(p.name for p in warehouse.iterdir() if p.is_symlink()) == tables  # every table, not only the first
    assert "tables already replaced keep their new version (forge_" in result.stderr
    assert not (warehouse / ".state" / "publishing.json").exists()


def _first_swapped(tmp_path: Path, store: str) -> str:
    """The table a Forge ingest publishes first (a trace of the publishing checkpoints)."""
    script = tmp_path / "trace.py"
    script.write_text(TRACE)
    done = subprocess.run([sys.executable, str(script), "ingest", "forge", store, "-q", "--warehouse", str(tmp_path / "trace")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    swaps = [line.split(":", 2)[2] for line in done.stderr.splitlines() if line.startswith("publishing:swapped:")]
    assert done.returncode == 0 and len(swaps) > 3, done.stderr
    return swaps[0]


TRACE = '''
import sys
import time
import loopmeter.faults as faults
faults.checkpoint = lambda name: print(name, file=sys.stderr)
sys.argv[0] = "loopmeter"
from loopmeter.cli import main
main()
'''


@pytest.mark.slow
def test_an_interrupted_forgeloop_ingest_says_so_too(tmp_path):
    results = write_tree(tmp_path / "results", [run(), run(mode="forgeloopAdaptive")], {"small-bug-fix": "balanced"})
    result = interrupted(tmp_path, "after-publish:runs", "ingest", "forgeloop", str(results), "-q",
                         "--warehouse", str(tmp_path / "w"))
    assert result.returncode == 130, result.stderr
    assert "no table was replaced: the warehouse keeps its previous tables" in result.stderr
    assert not (tmp_path / "w" / "runs").exists()


@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_the_start_is_one_line_never_a_traceback(tmp_path):
    """Ctrl-C while the command's modules load (before any command ran) ends it with one line
    and exit 130; after the command ended, nothing. No traceback from loopmeter's modules or
    the libraries they load. (Before `loopmeter.entry` runs, in the interpreter's own start and
    runpy's, 20 to 40 ms, Python answers as it does.)"""
    early = 0
    for delay in [0.01 * step for step in range(2, 22)]:
        process = subprocess.Popen([sys.executable, "-m", "loopmeter", "--help"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, cwd=ROOT)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        if stderr.startswith("Fatal Python error: init_import_site") or (
                "Traceback" in stderr and "site-packages" not in stderr and "pipeline/cli.py" not in stderr):
            continue  # before any of loopmeter's code ran
        assert "Traceback" not in stderr and len(stderr.splitlines()) <= 1, (delay, stderr)
        assert process.returncode in (0, 130, -signal.SIGINT), (delay, process.returncode, stderr)
        if "interrupted before the command began; nothing was changed" in stderr:
            assert process.returncode == 130
            early += 1
    assert early, "no Ctrl-C landed while the modules loaded: the test proved nothing"


STUCK_THREAD = '''
import os, signal, sys, threading
import loopmeter.storage.writing as writing
from loopmeter.lifetime import usable_cores
write_file = writing.write_file
# Ctrl-C once every writing thread is stuck for ever (the four partitions keep them all busy)
every_thread = threading.Barrier(min(usable_cores(), 4), action=lambda: os.kill(os.getpid(), signal.SIGINT))
def stuck(frame, path, table):
    if table == "runs" and threading.current_thread() is not threading.main_thread():
        every_thread.wait()
        threading.Event().wait()
    return write_file(frame, path, table)
writing.write_file = stuck
sys.argv[0] = "loopmeter"
from loopmeter.cli import main
main()
'''


def test_ctrl_c_ends_the_command_even_with_a_thread_stuck(tmp_path):
    """A thread a Ctrl-C left stuck (on an import's lock, once in a thousand Ctrl-Cs) is not
    waited for: the command says it was interrupted and ends."""
    results = write_tree(tmp_path / "results", [run(run_set=f"rs-{n}") for n in range(4)])
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_THREAD)
    result = subprocess.run([sys.executable, str(script), "ingest", "forgeloop", str(results), "-q", "--warehouse",
                             str(tmp_path / "w")], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip() == "loopmeter: interrupted; no table was replaced: the warehouse keeps its previous tables"
    assert not (tmp_path / "w" / "runs").exists()


# ---- 8: paths that are not UTF-8 -------------------------------------------------------------

def test_a_store_path_that_is_not_utf8(tmp_path, sample):
    store = os.path.join(os.fsencode(tmp_path), b"st\xff.jsonl")
    shutil.copy(sample / "forge" / "export.jsonl", store)
    result = run_cli("ingest", "forge", os.fsdecode(store), warehouse=tmp_path / "w", check=None)
    one_line_error(result, 1, "st\\xff.jsonl: the path is not valid UTF-8")
    assert not (tmp_path / "w").exists()


# ---- the rule behind all of them: usage errors answer before the heavy libraries load ----------

@pytest.mark.parametrize("args", [
    ["harvest", "survival", "--now", "nan"],
    ["aggregate", "--tier", "bogus"],
    ["ingest", "forgeloop", "x", "--max-file-mb", "nan"],
    ["ingest", "forge", "x", "--busy-timeout", "inf"],
    ["report", "routing", "--since", "-5"],
    ["sql", "select 1", "--format", "xml"],
])
def test_usage_errors_do_not_import_the_heavy_libraries(args, tmp_path):
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopmeter", *args, "--warehouse", str(tmp_path)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert imported_packages(result.stderr).isdisjoint({"polars", "duckdb", "pyarrow"})


def test_a_duckdb_query_stopped_by_ctrl_c_is_an_interruption_not_an_error():
    """DuckDB stops a query on Ctrl-C with an error of its own: every command (and the catalog's rebuild
    as a command starts) takes it for the interruption it is, exit 130."""
    import threading

    import duckdb

    from loopmeter.errors import is_interruption

    connection = duckdb.connect()
    raised: list[BaseException] = []

    def query() -> None:
        try:
            connection.execute("SELECT count(*) FROM range(100000000000) a, range(10) b")
        except BaseException as error:  # noqa: BLE001 - the error is what the test looks at
            raised.append(error)

    worker = threading.Thread(target=query)
    worker.start()
    while worker.is_alive():  # interrupt until the query has started and stopped
        connection.interrupt()
        worker.join(0.05)
    assert len(raised) == 1 and is_interruption(raised[0]), raised
    assert is_interruption(RuntimeError("Query interrupted"))
    assert not is_interruption(RuntimeError("Query failed")) and not is_interruption(ValueError("Interrupted!"))


@pytest.mark.slow
def test_ctrl_c_in_a_later_stage_of_demo_leaves_the_catalog_of_the_stages_done(tmp_path):
    """Ctrl-C in the Forge stage of `demo`, after the ForgeLoop stage published its tables: those
    tables are in loopmeter.duckdb as the command leaves, and `check` finds the warehouse whole."""
    import duckdb

    warehouse = tmp_path / "w"
    result = interrupted(tmp_path, "after-publish:forge_plans", "demo", "--data", str(tmp_path / "data"), "-q",
                         "--warehouse", str(warehouse))
    assert result.returncode == 130, result.stderr
    with duckdb.connect(str(warehouse / "loopmeter.duckdb"), read_only=True) as connection:
        views = {name for (name,) in connection.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert {"runs", "forgeloop_mode_stats"} <= views and "forge_plans" not in views
        assert connection.execute("SELECT count(*) FROM runs").fetchall()[0][0] > 0
    run_cli("check", warehouse=warehouse)


def test_a_path_the_system_refuses_is_named_with_its_reason(tmp_path):
    """A path under a file, or a name longer than the file system takes: one line, the path and the system's
    reason (never an internal error's class name)."""
    long_name = tmp_path / ("x" * 300)
    under_a_file = tmp_path / "file"
    under_a_file.write_text("a user's file\n")
    for args, told in ((("demo", "--data", str(under_a_file), "--quiet"), f"{under_a_file}/"),
                       (("report", "tail", "--warehouse", str(long_name)), f"{long_name}: file name too long")):
        result = run_cli(*args, check=1)
        (line,) = result.stderr.splitlines()
        assert line.startswith("loopmeter: error: ") and told in line and "Error:" not in line, result.stderr
    assert under_a_file.read_text() == "a user's file\n"


def test_a_dash_and_bytes_that_are_not_utf8_as_a_user_gives_them(demo_warehouse, tmp_path):
    """`--file -` reads the SQL from standard input; `--out -` is refused in one line (never a file named `-`);
    SQL or a --param holding bytes that are not UTF-8 is a usage error, not an internal one."""
    done = subprocess.run([sys.executable, "-m", "loopmeter", "sql", "--file", "-", "--format", "csv",
                           "--warehouse", str(demo_warehouse)], input="SELECT count(*) AS n FROM runs",
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (done.returncode, done.stdout) == (0, "n\n720\n"), done.stderr
    for args in (("sql", "SELECT 1", "--out", "-"), ("report", "html", "--out", "-"),
                 ("sql", 'SELECT 1 AS "\udcff"'), ("sql", "--query", "forgeloop_pairs", "--param", "run_set=x\udcff")):
        result = run_cli(*args, warehouse=demo_warehouse, check=2, cwd=tmp_path)
        (line,) = result.stderr.splitlines()
        assert line.startswith("loopmeter: error: ") and "Error" not in line, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_two_forms_asked_of_the_schema_are_refused(demo_warehouse):
    for args in (("schema", "--json", "--markdown"), ("--json", "schema", "--markdown")):
        result = run_cli(*args, warehouse=demo_warehouse, check=2)
        assert result.stdout == "" and result.stderr == (
            "loopmeter: error: --markdown and --json ask for two forms of the schema: give one\n")


def test_an_error_echoing_a_huge_argument_stays_a_readable_line(demo_warehouse):
    """A 100 KB --run-set is echoed by its start and its end, the characters between counted: one line of
    about 4,000 characters, not 100 KB."""
    result = run_cli("report", "tail", "--run-set", "a" * 100_000, warehouse=demo_warehouse, check=1)
    (line,) = result.stderr.splitlines()
    whole = f"no run set '{'a' * 100_000}' in {demo_warehouse}"
    assert line.startswith("loopmeter: error: no run set 'aaa") and line.endswith(f"aaa' in {demo_warehouse}")
    left_out = int(line.split("... (")[1].split(" characters left out")[0].replace(",", ""))
    assert left_out == len(whole) - 4000 and len(line) < 4100
