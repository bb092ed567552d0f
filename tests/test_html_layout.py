"""The HTML report read in a 700- and a 1400-pixel window (headless Chromium, as
tests/test_html_report.py drives it): chart text of at least 11 CSS px as rendered, interval marks
that never overlap, no line through run sets of one date, and one survival horizon drawn as a dot
with its interval per model rather than a curve of one point.

Three warehouses, each built by the CLI: the demo's (three run sets of one first-run date,
survival at 7, 14 and 30 days); four small run sets, two of them on one date; the demo's Forge
store harvested at 14 days only."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import run_cli  # noqa: E402
from test_html_report import CHROMIUM, WIDTHS, Browser, _wilson  # noqa: E402

from loopmeter.charts import MAX_SCALE, STUB  # noqa: E402

# Per chart: each text's rendered size (its computed font size times the scale the SVG draws it at,
# and its box's height), each interval mark's box (stroke included), the lines and dots of the data.
LAYOUT = r"""(() => [...document.querySelectorAll('svg.chart')].map(svg => {
  const scaleOf = el => { const m = el.getScreenCTM(); return Math.hypot(m.a, m.b); };
  const texts = [...svg.querySelectorAll('text')].map(t => {
    const m = t.getScreenCTM(), box = t.getBoundingClientRect();
    return {text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * scaleOf(t), rotated: Math.abs(m.b) > 1e-9,
            height: box.height};
  });
  const marks = [...svg.querySelectorAll('g.interval-mark')].map(g => {
    let left = Infinity, top = Infinity, right = -Infinity, bottom = -Infinity;
    for (const el of g.querySelectorAll('line, path, rect, circle')) {
      const box = el.getBoundingClientRect(), style = getComputedStyle(el);
      const pad = style.stroke === 'none' ? 0 : parseFloat(style.strokeWidth) * scaleOf(el) / 2;
      left = Math.min(left, box.left - pad); right = Math.max(right, box.right + pad);
      top = Math.min(top, box.top - pad); bottom = Math.max(bottom, box.bottom + pad);
    }
    return {left, top, right, bottom, dashed: [...g.querySelectorAll('line[stroke-dasharray]')].map(l => {
      const box = l.getBoundingClientRect(); return Math.max(box.width, box.height); })};
  });
  const dots = [...svg.querySelectorAll('g.data circle')].map(c => ({x: c.getAttribute('cx'), y: c.getAttribute('cy'),
                                                                      title: c.textContent}));
  const lines = [...svg.querySelectorAll('polyline, path:not(.open-end)')].map(p => p.getAttribute('points') ||
                                                                                  p.getAttribute('d'));
  return {name: svg.getAttribute('aria-label'), section: svg.closest('section') && svg.closest('section').id,
          plot: svg.getBoundingClientRect().height, texts, marks, dots, lines,
          caption: svg.nextElementSibling && svg.nextElementSibling.matches('p.caption') ? svg.nextElementSibling.textContent : null};
}))()"""

HEADINGS = "[...document.querySelectorAll('h3')].map(h => h.textContent)"


def _report(warehouse: Path, out: Path) -> Path:
    run_cli("report", "html", "--out", str(out), "--quiet", warehouse=warehouse)
    return out


@pytest.fixture(scope="module")
def dated_warehouse(tmp_path_factory) -> Path:
    """Four run sets of two scenarios, 5 runs per mode, first recorded on 1, 3, 5 and 5 September."""
    from loopmeter.forgeloop.samples import RunSetPlan, write_results

    base = tmp_path_factory.mktemp("dated")
    scenarios = ("documentation-correction", "small-bug-fix")
    write_results(base / "results", [RunSetPlan(name, 5, "2", scenarios) for name in ("set-a", "set-b", "set-c", "set-d")],
                  seed=11)
    for name, day in (("set-b", "03"), ("set-c", "05"), ("set-d", "05")):
        for run in (base / "results" / "raw" / name).rglob("run-*.json"):
            run.write_text(run.read_text().replace('"recordedAt": "2026-09-01T', f'"recordedAt": "2026-09-{day}T'))
    run_cli("ingest", "forgeloop", str(base / "results"), "--scenarios", str(base / "results" / "scenarios"),
            "--aggregate", "--quiet", warehouse=base / "warehouse")
    return base / "warehouse"


@pytest.fixture(scope="module")
def one_horizon_warehouse(demo_warehouse, tmp_path_factory) -> Path:
    """The demo's Forge store ingested into a warehouse of its own and harvested at 14 days only,
    at the moment the demo measures it."""
    forge = demo_warehouse.parent / "data" / "sample" / "forge"
    now = json.loads((forge / "sample.json").read_text())["now"]
    warehouse = tmp_path_factory.mktemp("one-horizon") / "warehouse"
    run_cli("ingest", "forge", str(forge / "dataset.sqlite"), "--quiet", warehouse=warehouse)
    run_cli("harvest", "survival", "--horizon-days", "14", "--now", str(now), "--include-temp", "--quiet",
            warehouse=warehouse)
    return warehouse


@pytest.fixture(scope="module")
def pages(demo_warehouse, dated_warehouse, one_horizon_warehouse, tmp_path_factory) -> dict:
    """Each warehouse's page laid out at each width: {(name, width): {charts, headings}}."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    base = tmp_path_factory.mktemp("layout")
    reports = {"demo": _report(demo_warehouse, base / "demo.html"), "dated": _report(dated_warehouse, base / "dated.html"),
               "one horizon": _report(one_horizon_warehouse, base / "one.html")}
    browser = Browser(base / "profile")
    found = {}
    try:
        for name, page in reports.items():
            for width in WIDTHS:
                browser.open(page, width)
                found[name, width] = {"charts": browser.evaluate(LAYOUT), "headings": browser.evaluate(HEADINGS),
                                      "html": page.read_text()}
    finally:
        browser.close()
    return found


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["demo", "dated", "one horizon"])
def test_every_chart_text_reads_at_11_px_or_more(pages, name, width):
    charts = pages[name, width]["charts"]
    assert charts
    small = [(chart["name"], text["text"], round(text["px"], 2)) for chart in charts for text in chart["texts"]
             if text["px"] < 11 or (not text["rotated"] and text["height"] < 11)]
    assert small == []
    sizes = [text["px"] for chart in charts for text in chart["texts"]]
    # the same sizes in every chart: 11 and 12 units, at the scale of the window's column
    assert max(sizes) / min(sizes) == pytest.approx(12 / 11, abs=1e-3)
    assert max(sizes) <= 16  # at 1400 px no larger than the page's 15 px text, give or take


def _overlapping(marks: list[dict]) -> list[tuple[int, int]]:
    return [(i, j) for i, a in enumerate(marks) for j, b in enumerate(marks[i + 1:], i + 1)
            if a["left"] < b["right"] - 0.01 and b["left"] < a["right"] - 0.01
            and a["top"] < b["bottom"] - 0.01 and b["top"] < a["bottom"] - 0.01]


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["demo", "dated", "one horizon"])
def test_no_two_interval_marks_overlap(pages, name, width):
    charts = pages[name, width]["charts"]
    overlaps = {chart["name"]: _overlapping(chart["marks"]) for chart in charts}
    assert {chart: pairs for chart, pairs in overlaps.items() if pairs} == {}
    marks = [mark for chart in charts for mark in chart["marks"]]
    assert len(marks) > 10
    if name != "one horizon":  # the ForgeLoop charts hold open ends: short stubs, never a line across the plot
        trend = next(chart for chart in charts if chart["name"] == "overhead trend")
        stubs = [length for mark in trend["marks"] for length in mark["dashed"]]
        assert stubs and max(stubs) <= STUB * MAX_SCALE + 0.5 < trend["plot"] / 10


def _runs_joined(chart: dict) -> list[set[str]]:
    """Per line of the chart, the run sets whose dots it passes through (a dot's tooltip names its run set)."""
    where = {}
    for dot in chart["dots"]:
        run_set = re.match(r"[^,]+, (\S+) \(", dot["title"]).group(1)
        where[f"{float(dot['x']):.1f},{float(dot['y']):.1f}"] = run_set
    joined = []
    for line in chart["lines"]:
        at = line.split()
        assert all(point in where for point in at), (line, sorted(where))
        joined.append({where[point] for point in at})
    return joined


@pytest.mark.slow
def test_run_sets_of_one_date_are_points_and_a_line_joins_only_distinct_dates(pages, dated_warehouse):
    listed = run_cli("sql", "SELECT run_set_id, min(recorded_at)::DATE::VARCHAR AS day FROM runs GROUP BY 1 ORDER BY 1",
                     "--format", "json", warehouse=dated_warehouse)
    assert {row["run_set_id"]: row["day"] for row in json.loads(listed.stdout)} == {
        "set-a": "2026-09-01", "set-b": "2026-09-03", "set-c": "2026-09-05", "set-d": "2026-09-05"}
    for width in WIDTHS:
        trend = next(chart for chart in pages["dated", width]["charts"] if chart["name"] == "overhead trend")
        assert len(trend["dots"]) == 2 * 4  # both scenarios in every run set
        # a line per scenario from 1 to 3 September; none reaches the two run sets of 5 September
        assert _runs_joined(trend) == [{"set-a", "set-b"}] * 2
        assert "share a first-run date" in trend["caption"]
        demo = next(chart for chart in pages["demo", width]["charts"] if chart["name"] == "overhead trend")
        assert len(demo["dots"]) == 3 * 6 and demo["lines"] == []  # the demo's three run sets share one date
        assert "no line joins them" in demo["caption"]


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_one_survival_horizon_is_a_dot_with_its_interval_per_model(pages, one_horizon_warehouse, width):
    groups = json.loads(run_cli("report", "survival", "--json", warehouse=one_horizon_warehouse).stdout)["groups"]
    assert {g["horizon_days"] for g in groups} == {14}
    summed: dict[str, list[int]] = {}
    for g in groups:
        cell = summed.setdefault(g["model"], [0, 0, 0])
        for index, key in enumerate(("tasks", "lines_surviving", "lines_added")):
            cell[index] += g[key]
    assert summed == {"claude-5-opus:high": [1, 4, 4], "claude-5-sonnet:medium": [3, 8, 13], "gemini-3-flash:low": [1, 10, 10]}
    page = pages["one horizon", width]
    charts = {chart["name"]: chart for chart in page["charts"]}
    assert "survival curves" not in charts and "Survival curve per model" not in page["headings"]
    assert "Surviving share per model at 14 days" in page["headings"]
    assert [chart["lines"] for chart in page["charts"] if chart["section"] == "forge"] == [[]] * len(page["charts"])
    chart = charts["survival at one horizon"]
    assert [dot["title"] for dot in chart["dots"]] == [
        f"{model}, {tasks} task{'' if tasks == 1 else 's'}: {surviving / added * 100:.0f}%, 95% interval "
        f"{_wilson(surviving / added * tasks, tasks)[0] * 100:.0f}% to {_wilson(surviving / added * tasks, tasks)[1] * 100:.0f}%"
        for model, (tasks, surviving, added) in summed.items()]
    ticks = [text["text"] for text in chart["texts"] if text["text"].endswith("%")]
    assert ticks == ["0%", "20%", "40%", "60%", "80%", "100%"]
    assert len(chart["marks"]) == 3  # one interval per model
    # several horizons keep the curve
    demo = {chart["name"]: chart for chart in pages["demo", width]["charts"]}
    assert "survival curves" in demo and len(demo["survival curves"]["lines"]) >= 1


def test_long_row_labels_keep_their_start_and_end_and_the_whole_in_a_tooltip():
    """Scenario ids of up to 128 characters and a mode: cut in the middle, the two rows still read apart
    (cut from the left, both read "...-rollback" and the same mode)."""
    from html import unescape

    from loopmeter.charts import CHAR, strip_chart

    names = [f"{prefix}-authentication-change-with-oauth-migration-rollback" for prefix in ("alpha", "bravo")]
    svg = strip_chart([(name, "forgeloopBalanced", [1.0, 2.0], [False, False]) for name in names], "tokens", "t")
    shown = [unescape(text) for text in re.findall(r'class="label">([^<]*)', svg)]
    assert len(shown) == 2 and shown[0] != shown[1]
    assert [text[:6] for text in shown] == ["alpha-", "bravo-"] and all("\u2026" in text for text in shown)
    left = float(re.search(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end" class="label"', svg).group(1))
    assert all(len(text) * CHAR <= left for text in shown)
    assert [unescape(t) for t in re.findall(r'class="label">[^<]*<title>([^<]*)</title>', svg)] == names
    short = strip_chart([("api", "direct", [1.0], [False])], "tokens", "t")
    assert 'class="label">api</text>' in short


def test_a_trend_joins_only_points_whose_time_is_theirs_alone():
    """x times 1, 3, 5, 5, 9: one series' line runs from 1 to 3; 5 and 5 are points; 9 is a point
    (its neighbour shares its time). Open ends are stubs and arrowheads, never a line to the edge."""
    from loopmeter.charts import STUB, trend_chart

    values = [(0, 10.0, 2.0, 20.0), (1, 12.0, None, 30.0), (2, 8.0, None, None), (3, 9.0, 1.0, None), (4, 11.0, 5.0, 15.0)]
    svg = trend_chart([("s", values), ("t", values)], ["1", "3", "5", "5", "9"], "overhead", "run sets", "trend",
                      x_times=["1", "3", "5", "5", "9"])
    lines = re.findall(r'<polyline points="([^"]*)"', svg)
    assert len(lines) == 2 and all(len(line.split()) == 2 for line in lines)
    dots = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', svg)
    assert [line.split() for line in lines] == [[f"{x},{y}" for x, y in dots[0:2]], [f"{x},{y}" for x, y in dots[5:7]]]
    assert svg.count('class="open-end"') == 2 * 4
    dashed = re.findall(r'<line x1="[\d.]+" y1="([\d.]+)" x2="[\d.]+" y2="([\d.]+)"[^>]*stroke-dasharray', svg)
    assert len(dashed) == 2 * 4 and max(abs(float(a) - float(b)) for a, b in dashed) <= STUB
    joined_all = trend_chart([("s", values)], ["1", "3", "5", "5", "9"], "overhead", "run sets", "trend")
    assert len(re.findall(r'<polyline points="([^"]*)"', joined_all)[0].split()) == 5  # no times: a categorical line


def test_curve_whiskers_of_neighbouring_series_stay_apart():
    from loopmeter.charts import CAP, DODGE

    assert DODGE - 2 * CAP >= 1.5 + 1  # caps (1.5 wide strokes) a unit apart at least
