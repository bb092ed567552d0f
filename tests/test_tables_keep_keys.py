"""A table too wide for the terminal is split into parts, or told one record per row; either way
every part carries the columns that say which row is which (80, 120 and 200 columns)."""
from __future__ import annotations

import pytest

from conftest import run_cli


def parts(text: str) -> list[str]:
    """The header text of each table part (the lines between its top ┏ and its ┡ rule)."""
    found, inside = [], None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("┏"):
            inside = []
        elif stripped.startswith("┡") and inside is not None:
            found.append(" ".join(inside))
            inside = None
        elif inside is not None:
            inside.append(stripped)
    return found


def records(text: str, first: str) -> list[list[str]]:
    """The records (blocks of `Name: value` lines) that start with `first`."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith(first + ":"):
            current = [line]
            blocks.append(current)
        elif current is not None and line.strip() and ":" in line and not line.startswith(" "):
            current.append(line)
        else:
            current = None
    return blocks


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_the_objectives_keep_run_set_scenario_and_objective(corpus_warehouse, columns):
    text = run_cli("report", "confidence", warehouse=corpus_warehouse, env={"COLUMNS": str(columns)}).stdout
    objectives = text.split("Light objectives", 1)[1]
    split = parts(objectives)
    if split:
        assert all(all(name in header for name in ("Run set", "Scenario", "Objective")) for header in split), split
    else:
        told = records(objectives, "Run set")
        assert told and all([line.split(":")[0] for line in record][:3] == ["Run set", "Scenario", "Objective"]
                            for record in told), objectives[:2000]


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_routing_and_survival_keep_the_columns_that_name_a_row(demo_warehouse, columns):
    routing = run_cli("report", "routing", warehouse=demo_warehouse, env={"COLUMNS": str(columns)}).stdout
    for header in parts(routing):
        assert ("tier" in header and "model:effort" in header) or ("arm" in header and "model" in header), header
    survival = run_cli("report", "survival", warehouse=demo_warehouse, env={"COLUMNS": str(columns)}).stdout
    for header in parts(survival):
        assert all(name in header for name in ("model:effort", "tier", "horizon")), header
    if columns == 80:  # too wide for 80 columns: split, each part named
        assert len(parts(routing)) >= 4
