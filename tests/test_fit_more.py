"""The Forge reports, `schema`, `queries` and the ingest and aggregate summary lines fit the width
they are shown in (COLUMNS, or the terminal's): no line wider, no word (a name, a path, a number)
split, nothing lost; piped with no width, their text is as it always was, byte for byte (the
routing report's with one legend line more, under its observational table)."""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from rich.cells import cell_len

import forge_oracle
from conftest import run_cli
from forge_oracle import routing as oracle_routing
from test_tables_and_sql_output import run_in_terminal

BOX = "│┃┏┓┗┛┡┩└┘┳┻╇╈━─┬┴┼"
WIDTHS = [80, 120, 200]


def words(text: str) -> set[str]:
    """The words the text shows, between spaces, line ends and box lines."""
    return set(re.split(rf"[\s{BOX}]+", text)) - {""}


def widest(text: str) -> int:
    return max((cell_len(line.expandtabs()) for line in text.splitlines()), default=0)


def assert_fitted(piped: str, shown: str, width: int) -> None:
    """`shown` (at `width`) has no line wider than it and every word of `piped`, whole; and is
    `piped` itself when `piped` fits."""
    wide = [line for line in shown.splitlines() if cell_len(line) > width]
    assert not wide, f"{len(wide)} lines wider than {width}:\n" + "\n".join(wide[:5])
    missing = words(piped) - words(shown)
    assert not missing, (sorted(missing)[:20], shown)
    assert "…" not in shown
    if widest(piped) <= width:
        assert shown == piped


def store_of(warehouse: Path) -> Path:
    return warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"


def seed_routing_text(store: Path) -> str:
    """What the seed's `routing` prints for the store (its own main, in this process)."""
    forge_oracle.DATASET_DIR = store.parent
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            oracle_routing.main(argparse.Namespace(repo=None, since=None, json=False))
    finally:
        forge_oracle.DATASET_DIR = None
    return out.getvalue()


# the one line `report routing` adds to the seed's text, under the observational table
DWARF_LEGEND = "  dwarf min: median minutes per task that the implementer (dwarf) ran, its dispatches summed\n"


def with_dwarf_legend(seed: str) -> str:
    """The seed's routing text with the legend of its `dwarf min` column under the observational rows."""
    rows, rest = seed.split("\n\nrandomized", 1)
    return f"{rows}\n{DWARF_LEGEND}\nrandomized{rest}"


def _pct(x):
    return "   -" if x is None else "%3.0f%%" % (100 * x)


def fixed_survival_text(document: dict) -> str:
    """The survival report's fixed-width text, written from its --json with its printf formats."""
    lines = ["survival of merged work: lines still credited to the task at the horizon, and reverts",
             "  %-28s %-7s %7s %5s %7s %8s %6s %8s %-13s %4s %9s" % (
                 "model:effort", "tier", "horizon", "tasks", "added", "surviving", "share", "reverted", "revert 95%",
                 "lost", "unmatched")]
    for g in document["groups"]:
        low, high = g["revert_ci"]
        lines.append("  %-28s %-7s %6sd %5d %7d %8d %6s %8d %-13s %4d %9d" % (
            g["model"] or "(no attempt names it)", g["tier"] or "-", g["horizon_days"], g["tasks"], g["lines_added"],
            g["lines_surviving"], _pct(g["surviving_share"]), g["reverted"],
            "-" if low is None else "[%s-%s]" % (_pct(low).strip(), _pct(high).strip()), g["lost"], g["unmatched"]))
    return "\n".join(lines) + "\n"


# ---- report routing and report survival -------------------------------------------------------------

@pytest.fixture(scope="module")
def forge_piped(demo_warehouse):
    """The two reports piped with no width, checked against the seed's text and the printf formats."""
    routing = run_cli("report", "routing", warehouse=demo_warehouse).stdout
    assert routing == with_dwarf_legend(seed_routing_text(store_of(demo_warehouse)))
    survival = run_cli("report", "survival", warehouse=demo_warehouse).stdout
    document = json.loads(run_cli("report", "survival", "--json", warehouse=demo_warehouse).stdout)
    assert document["groups"] and survival == fixed_survival_text(document)
    assert widest(routing) > 120 and widest(survival) > 80  # what the widths below must fit
    return {"routing": routing, "survival": survival}


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["routing", "survival"])
def test_forge_reports_fit_columns(demo_warehouse, forge_piped, name, width):
    shown = run_cli("report", name, warehouse=demo_warehouse, env={"COLUMNS": str(width)}).stdout
    assert_fitted(forge_piped[name], shown, width)
    if width == 80:  # the rows became tables: each value in a cell of its own
        assert re.search(r"│ high +│ claude-5-opus:high +│ +212 │", shown) if name == "routing" else \
            re.search(r"│ claude-5-opus:high +│ high +│ +14d │", shown), shown


@pytest.mark.parametrize("columns", ["", "0", "abc"])
def test_columns_that_is_no_width_leaves_the_forge_reports_as_the_seed(demo_warehouse, forge_piped, columns):
    assert run_cli("report", "routing", warehouse=demo_warehouse, env={"COLUMNS": columns}).stdout == forge_piped["routing"]


@pytest.mark.slow
def test_forge_reports_on_a_terminal(demo_warehouse, forge_piped):
    for name, columns in (("routing", 100), ("survival", 90)):
        shown = run_in_terminal(["report", name, "--warehouse", str(demo_warehouse)], columns)
        assert_fitted(forge_piped[name], shown, columns)
        assert "┏" in shown


def test_the_fitted_routing_keeps_each_value_under_its_header():
    from loopmeter.forge.reports import routing_text

    arm = dict(spec="gpt-6.1-sol:medium:codex", assigned=60, first_pass=0.64, n_eff=45.0, not_followed=4,
               no_outcome=15, runtime_min=14.2)
    document = {"observational": [dict(tier="high", spec="claude-5-opus:high", tasks=212, first_pass=0.75, ci=[0.69, 0.81],
                                       passed=0.89, unfinished=24, attempts=1.2, runtime_min=18.0)],
                "randomized": [dict(tier="high", default="opus", alternative=arm["spec"], alternative_is="cheaper",
                                    window=60, runs=215, arms={"default": {**arm, "spec": "opus"}, "alternative": arm},
                                    difference=-0.1, ci=[-0.27, 0.05], verdict="keep opus")]}
    seed = routing_text(document)
    assert routing_text(document, 200) == seed and routing_text(document, None) == seed
    shown = routing_text(document, 120)  # the observational rows fit; the arms' do not
    assert "  high    claude-5-opus:high           212    75% [69%-81%]    89%         24      1.2     18.0" in shown
    assert re.search(r"^    │ alternative │ gpt-6.1-sol:medium:codex │ +60 │ +64% │ +45.0 │ +4 │ +15 │ +14.2 │$", shown, re.M)
    assert widest(shown) <= 120 and widest(seed) > 120


# ---- schema and queries ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def listings(demo_warehouse):
    schema = run_cli("schema", warehouse=demo_warehouse).stdout
    rows = json.loads(run_cli("schema", "--json", warehouse=demo_warehouse).stdout)
    assert schema == "".join(f"{r['table']}.{r['column']}\t{r['type']}\t{r['comment']}\n" for r in rows)
    queries = run_cli("queries").stdout
    listed = json.loads(run_cli("queries", "--json").stdout)
    width = max(len(entry["name"]) for entry in listed)
    def taken(entry: dict) -> str:
        given = ", ".join(f"--param {p['name']}=..." + (" (optional)" if p["optional"] else "") for p in entry["parameters"])
        return f" Takes {given}." if given else ""

    expected = "".join(f"{e['name']:<{width}}  {e['summary']}{taken(e)}\n" for e in listed if not e["runsInside"])
    steps = [e for e in listed if e["runsInside"]]
    expected += "\nsteps of stages (they read what the stage stages, not the warehouse):\n" + "".join(
        f"{e['name']:<{width}}  inside {e['runsInside']}\n" for e in steps) if steps else ""
    assert queries == expected
    assert 120 < widest(schema) <= 200 and widest(queries) > 200
    return {"schema": schema, "queries": queries, "rows": rows}


@pytest.mark.parametrize("width", WIDTHS)
def test_schema_and_queries_fit_columns(demo_warehouse, listings, width):
    shown = run_cli("schema", warehouse=demo_warehouse, env={"COLUMNS": str(width)}).stdout
    assert_fitted(listings["schema"], shown, width)
    first = listings["rows"][0]
    name = f"{first['table']}.{first['column']}"
    if width == 80:  # the comment under its name and type
        assert re.search(rf"^{re.escape(name)} +{re.escape(first['type'])}\n    {re.escape(first['comment'])}$", shown, re.M)
    if width == 120:  # the comment beside them; at 200 every line fits as it is
        assert re.search(rf"^{re.escape(name)} +{re.escape(first['type'])} +{re.escape(first['comment'])}$", shown, re.M)
    assert_fitted(listings["queries"], run_cli("queries", env={"COLUMNS": str(width)}).stdout, width)


def test_schema_and_queries_on_a_terminal(demo_warehouse, listings):
    assert_fitted(listings["schema"], run_in_terminal(["schema", "--warehouse", str(demo_warehouse)], 100), 100)
    assert_fitted(listings["queries"], run_in_terminal(["queries"], 80), 80)


# ---- the ingest and aggregate summary lines ---------------------------------------------------------

def _summaries(demo_warehouse: Path, warehouse: Path, env: dict | None = None) -> str:
    """What `ingest forgeloop`, `aggregate` (twice: computed, then unchanged) and `ingest forge` print
    on stdout into a new warehouse, the warehouse's path written W."""
    sample = demo_warehouse.parent / "data" / "sample"
    results = sample / "forgeloop"
    out = "".join(run_cli(*args, warehouse=warehouse, env=env).stdout for args in (
        ("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios")),
        ("aggregate",), ("aggregate",), ("ingest", "forge", str(sample / "forge" / "dataset.sqlite"))))
    return out


def assert_within(text: str, width: int) -> None:
    """No line wider than `width` but one that is a single word (a path) wider than it."""
    wide = [line for line in text.splitlines() if cell_len(line) > width and len(line.split()) != 1]
    assert not wide, wide
    assert all(line == line.lstrip() for line in text.splitlines() if cell_len(line) > width)


def _named(text: str, warehouse: Path) -> str:
    return text.replace(str(warehouse), "W")


@pytest.mark.slow
def test_summary_lines_fit_columns(demo_warehouse, tmp_path):
    piped = _summaries(demo_warehouse, tmp_path / "wpipe")
    assert piped.count("\n") == 6 and widest(piped) > 200, piped  # one line each, some wider than 200
    assert "720 run files: 720 accepted, 0 unchanged, 0 rejected; run sets sample-evidence-5, " in piped
    for width in WIDTHS:
        warehouse = tmp_path / f"w{width:04d}"  # as long a path as wpipe: the same lines as wide
        shown = _summaries(demo_warehouse, warehouse, {"COLUMNS": str(width)})
        assert_within(shown, width)
        whole = widest(piped) <= width
        shown, expected = _named(shown, warehouse), _named(piped, tmp_path / "wpipe")
        assert shown.split() == expected.split()  # the same words, in order, none split
        if whole:
            assert shown == expected
        else:
            assert shown.count("\n") > 6


@pytest.mark.slow
def test_summary_lines_on_a_terminal(demo_warehouse, tmp_path):
    results = demo_warehouse.parent / "data" / "sample" / "forgeloop"
    args = ["ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios")]
    piped = run_cli(*args, warehouse=tmp_path / "w1").stdout
    shown = run_in_terminal([*args, "--warehouse", str(tmp_path / "w2")], 80)
    assert widest(piped) > 80
    assert_within(shown, 80)
    assert _named(shown, tmp_path / "w2").split() == _named(piped, tmp_path / "w1").split()
    shown = run_in_terminal(["aggregate", "--warehouse", str(tmp_path / "w2")], 80)
    assert_within(shown, 80)
    assert f"{tmp_path / 'w2' / 'aggregate' / 'sample-tail-30'}" in shown.split()


def test_a_word_wider_than_the_line_has_a_line_to_itself():
    from loopmeter.tables_text import fit_line, hanging, wrap_words

    path = "/a/very/long/path/that/no/line/holds"
    assert wrap_words(f"12 run files -> {path}", 20) == ["12 run files ->", path]
    assert wrap_words("  (one two three four)", 12) == ["  (one two", "    three", "    four)"]
    assert wrap_words("aa " + "b" * 11, 12) == ["aa", "b" * 11]  # no room after the indent: no indent
    assert fit_line("short", 80) == "short" and fit_line("x " * 50, None) == "x " * 50
    assert hanging([("name", "one two three"), ("n", "")], 30, least=10) == ["name  one two three", "n"]
    assert hanging([("name", "one two three")], 12, least=10) == ["name", "    one two", "    three"]
