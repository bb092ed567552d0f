"""The command line as users meet it: start-up, help, exit codes, one-line errors."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, imported_packages, run_cli


def test_help_does_not_import_the_heavy_libraries():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "loopmeter", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0 and "ingest" in result.stdout
    imported = imported_packages(result.stderr)
    assert imported.isdisjoint({"polars", "duckdb", "pyarrow"}), imported & {"polars", "duckdb", "pyarrow"}


def test_argument_errors_exit_2_without_heavy_imports():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "loopmeter", "aggregate", "--no-such-option"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    assert "No such option" in result.stderr
    assert "polars" not in imported_packages(result.stderr)


def test_exit_codes_are_documented_in_help():
    text = " ".join(run_cli("ingest", "forgeloop", "--help").stdout.split())  # as wrapped for the terminal
    assert ("Exit codes: 0 done, 1 failed, 2 wrong command line, 3 some inputs rejected (the rest stored), "
            "4 warehouse locked by another writer; 130, 141 and 143 as every command (loopmeter help exit-codes)") in text


def test_aggregate_on_an_empty_warehouse_is_one_clear_line(tmp_path):
    result = run_cli("aggregate", warehouse=tmp_path / "empty", check=1)
    assert result.stderr.strip() == (f"loopmeter: error: no warehouse at {tmp_path / 'empty'}; ingest something first "
                                     "(`loopmeter ingest forgeloop RESULTS` or `loopmeter ingest forge STORE`), or run "
                                     "`loopmeter demo` (is --warehouse right?)")


def test_bad_tier_is_refused(corpus_warehouse, tmp_path):
    result = run_cli("aggregate", "--tier", "huge", "--out", str(tmp_path), warehouse=corpus_warehouse, check=2)  # a wrong command line
    assert "--tier must be one of smoke, evidence, tail" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["nosuch"], "loopmeter: error: No such command 'nosuch' (see 'loopmeter --help')"),
    (["report", "routing", "--since", "abc"],  # the reason's words are typer's own, and differ between its releases
     "loopmeter: error: Invalid value for '--since': ... (see 'loopmeter report routing --help')"),
    (["report", "summary", "--bogus"], "loopmeter: error: No such option: --bogus (see 'loopmeter report summary --help')"),
    (["ingest", "forgeloop"], "loopmeter: error: Missing argument 'RESULTS' (see 'loopmeter ingest forgeloop --help')"),
])
def test_a_wrong_command_line_is_one_line_and_exit_2(args, message):
    """As every other error: one line on stderr, not click's usage block of four."""
    result = run_cli(*args, check=2)
    start, _, end = message.partition("...")
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith(start) and result.stderr.endswith((end or "") + "\n")


@pytest.mark.parametrize("given, shown", [
    ({"args": ["--warehouse", "https://example.com/wh"]}, "--warehouse https://example.com/wh"),
    ({"env": {"LOOPMETER_WAREHOUSE": "gs://bucket/a/b"}}, "$LOOPMETER_WAREHOUSE gs://bucket/a/b"),
    ({"args": ["--warehouse", "gs://user:secret@bucket/wh"]}, "--warehouse gs://***@bucket/wh"),
])
def test_a_warehouse_url_loopmeter_cannot_open_is_refused_and_nothing_is_made(tmp_path, corpus, given, shown):
    """A URL is not taken for a path (which would make a folder `gs:` where the command runs);
    s3:// is opened on a mirror (tests/test_remote_warehouse.py)."""
    result = run_cli(*given.get("args", []), "ingest", "forgeloop", str(corpus / "results"), env=given.get("env"),
                     cwd=tmp_path, check=2)  # a wrong command line (or environment), as a URL --out is
    scheme = shown.split()[1].split(":")[0]
    assert result.stderr == (f"loopmeter: error: {shown}: a warehouse at a URL ({scheme}://) is not a local directory "
                             f"(only s3:// is supported: docs/scale.md); give a local directory "
                             f"(an absolute path for a folder of that name)\n")
    assert list(tmp_path.iterdir()) == []
