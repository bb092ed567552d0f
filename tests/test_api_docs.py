"""docs/api.md: every Python example of the page runs, in order, in a folder of its own, on the corpus."""
from __future__ import annotations

import contextlib
import io
import os
import re

from conftest import ROOT, run_cli


def test_every_example_of_the_api_page_runs(corpus, tmp_path):
    text = (ROOT / "docs" / "api.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(examples) == 4
    names = {"RESULTS": str(corpus / "results"), "SCENARIOS": str(corpus / "scenarios")}
    here = os.getcwd()
    os.chdir(tmp_path)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            for example in examples:
                exec(compile(example, "docs/api.md", "exec"), names)
    finally:
        os.chdir(here)
    lines = printed.getvalue().splitlines()
    assert lines[0] == "525 runs stored; 0 files rejected"
    assert lines[1:3] == ["codex-quality-repeat5-20260831 105 runs", "codex-tail-repeat20-20260831 420 runs"]
    assert lines[3] == (f"the runs in {tmp_path / 'fresh'} are not aggregated yet; run `loopmeter aggregate` first -> 1")
    # the report written piece by piece is the command's --json
    assert (tmp_path / "summary.json").read_text() + "\n" == run_cli("report", "summary", "--json", warehouse=tmp_path / "lm").stdout
    assert sorted(os.listdir(tmp_path)) == ["fresh", "lm", "summary.json"]  # nothing but what the examples named


def test_an_argument_of_the_wrong_kind_is_told_as_the_option_it_stands_for(demo_warehouse):
    """From Python, a report's name left out or a number given as text is a usage error naming it (exit
    code 2), as the program says it, not a KeyError or TypeError from deep inside."""
    import pytest

    from loopmeter import operations
    from loopmeter.errors import LoopmeterError

    for call, told in [(lambda: operations.forgeloop_report(None, warehouse=demo_warehouse),
                        "report must be one of outliers, tail, summary, regression (got None)"),
                       (lambda: operations.report_confidence(level="0.9", warehouse=demo_warehouse),
                        "--level must be a number (got '0.9')"),
                       (lambda: operations.report_routing(since="abc", warehouse=demo_warehouse),
                        "--since must be a number (got 'abc')"),
                       (lambda: operations.forgeloop_report("tail", run_set=["sample-tail-30"], warehouse=demo_warehouse),
                        "--run-set must be text (got ['sample-tail-30'])"),
                       (lambda: operations.report_html(run_set=5, out="/nonexistent/r.html", warehouse=demo_warehouse),
                        "--run-set must be text (got 5)"),
                       (lambda: operations.compare(["a"], "b", warehouse=demo_warehouse),
                        "BASELINE must be text (got ['a'])")]:
        with pytest.raises(LoopmeterError) as raised:
            call()
        assert str(raised.value) == told and raised.value.exit_code == 2
