"""The README, followed word for word on a fresh clone, gets a new user to the HTML report."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_readme_gives_exactly_two_commands_and_ci_runs_the_second():
    commands = readme_commands()
    assert len(commands) == 2 and all("\n" not in command for command in commands)
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow
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


HISTORY = re.compile(
    r"\b(first|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|this|last|earlier|previous|next)"
    r" sessions?\b|\bsessions?'s? (figures|code|runs?|notes?)\b|\bissues? ?#?\d+\b|\bthe issue\b|\bthe issue's\b",
    re.IGNORECASE)


def project_texts() -> list:
    """Every text file the project ships or keeps (the seed scripts kept as the tests' oracle aside)."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed
            if name.endswith((".md", ".py", ".sql", ".toml", ".cfg", ".txt")) and not name.startswith("tests/forge_oracle/") and name != "tests/test_readme.py"]


def test_the_readme_is_short_and_no_file_tells_the_project_s_history():
    assert len((ROOT / "README.md").read_text().split()) <= 2000
    found = [f"{path.relative_to(ROOT)}: {match.group(0)!r}" for path in project_texts()
             for match in HISTORY.finditer(path.read_text(errors="replace"))]
    assert not found, found


def test_the_history_pattern_finds_what_it_is_for():
    for text in ("Seventh session, the same command", "the first session's figures", "see issue 17",
                 "The issue's targets of 5 %"):
        assert HISTORY.search(text), text
    for text in ("a second DuckDB session runs four queries", "in two sessions", "SparkSession.builder"):
        assert not HISTORY.search(text), text
