"""The README, followed word for word on a fresh clone, gets a new user to the HTML report."""
from __future__ import annotations

import os
import re
import subprocess

from conftest import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_readme_gives_exactly_two_commands_and_ci_runs_the_second():
    commands = readme_commands()
    assert len(commands) == 2 and all("\n" not in command for command in commands)
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_the_first_command_works_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    environment = {name: value for name, value in os.environ.items() if name != "LOOPMETER_WAREHOUSE"}  # as a new user's
    result = subprocess.run(["bash", "-c", readme_commands()[0]], cwd=clone, capture_output=True, text=True, timeout=900,
                            env=environment)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "HTML report:" in result.stdout
    report = clone / "data" / "warehouse" / "report.html"
    assert report.exists() and "<svg" in report.read_text()
    assert (clone / "data" / "warehouse" / "loopmeter.duckdb").exists()
    # the demo made its sample data in data/, deterministically
    assert len(list((clone / "data" / "sample" / "forgeloop" / "raw").rglob("*.json"))) == (30 + 5 + 5) * 6 * 3
