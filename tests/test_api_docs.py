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
