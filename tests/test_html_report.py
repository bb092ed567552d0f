"""The HTML report: one self-contained page, read in headless Chromium at 700 and 1400 pixels.

The page is the one `loopmeter report html` writes from the warehouse `loopmeter demo` builds
(three ForgeLoop run sets, a Forge store with survival outcomes). Chromium is driven over its
DevTools pipe (`--remote-debugging-pipe`: JSON messages on file descriptors 3 and 4), so the
page is laid out at an exact width and measured there, as a reader's browser lays it out.

`python tests/test_html_report.py` writes the screenshots docs/report-700.png,
docs/report-1400.png and docs/report.png from a fresh demo warehouse.
"""
from __future__ import annotations

import base64
import json
import math
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT, run_cli  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0",
]
WIDTHS = (700, 1400)
TAIL_CLASSES = ("TAIL_CONSISTENT", "TAIL_PAIRED_RATIO_SENSITIVE", "TAIL_DISTRIBUTION_REGRESSION", "TAIL_UNRESOLVED")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")


def chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


class Browser:
    """Headless Chromium over its DevTools pipe: it reads commands on fd 3 and answers on fd 4,
    each message JSON ended by a NUL byte. One page (tab), driven by `call`."""

    def __init__(self, profile: Path, timeout: float = 60.0):
        self.timeout = timeout
        to_child, self._to_browser = os.pipe()
        self._from_browser, from_child = os.pipe()

        def on_fds_3_and_4():  # in the child: its ends moved above 4 first, so neither dup2 clobbers the other
            high_in, high_out = os.dup(to_child) + 10, os.dup(from_child) + 10
            os.dup2(to_child, high_in)
            os.dup2(from_child, high_out)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS[:-2], f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4), preexec_fn=on_fds_3_and_4, cwd=profile.parent, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buffer, self._events, self._id = b"", [], 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)

    def _message(self) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], self.timeout)
            if not ready:
                raise TimeoutError(f"chromium said nothing for {self.timeout} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise EOFError(f"chromium closed its DevTools pipe (exit {self.process.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = False, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._events.append(reply)

    def event(self, name: str) -> dict:
        while True:
            for index, message in enumerate(self._events):
                if message.get("method") == name:
                    return self._events.pop(index)
            self._events.append(self._message())

    def open(self, page: Path, width: int, height: int = 1000) -> None:
        """`page` laid out in a window `width` CSS pixels wide, its load event fired."""
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        self._events.clear()
        self.call("Page.navigate", session=True, url=page.as_uri())
        self.event("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"]["value"]

    def screenshot(self, path: Path, height: int | None = None) -> bytes:
        """The whole page (or its top `height` pixels), as wide as the window shows it."""
        width, full = self.evaluate("[document.documentElement.clientWidth, document.documentElement.scrollHeight]")
        height = full if height is None else min(height, full)
        shot = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                         clip=dict(x=0, y=0, width=width, height=height, scale=1))
        data = base64.b64decode(shot["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (EOFError, OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


# Everything the assertions need, read from the laid-out page in one go (coordinates of chart
# parts in the chart's own units, the viewBox's; boxes of page elements in CSS pixels).
MEASURE = r"""(() => {
  const root = document.documentElement;
  const num = (el, name) => parseFloat(el.getAttribute(name));
  const charts = [...document.querySelectorAll('svg.chart')].map(svg => {
    const ticks = [...svg.querySelectorAll('g.axis text.tick')];
    const xs = [];
    for (const el of svg.querySelectorAll('g.data circle')) xs.push(num(el, 'cx'));
    for (const el of svg.querySelectorAll('g.data rect')) { xs.push(num(el, 'x')); xs.push(num(el, 'x') + num(el, 'width')); }
    for (const el of svg.querySelectorAll('g.data line')) { xs.push(num(el, 'x1')); xs.push(num(el, 'x2')); }
    const ys = [];
    for (const el of svg.querySelectorAll('g.data circle')) ys.push(num(el, 'cy'));
    for (const el of svg.querySelectorAll('g.data line')) { ys.push(num(el, 'y1')); ys.push(num(el, 'y2')); }
    const rows = [...svg.querySelectorAll('g.data text.label')].map(label => {
      const y = num(label, 'y') - 4;
      const at = sel => [...svg.querySelectorAll(sel)].filter(el => Math.abs(num(el, sel.includes('circle') ? 'cy' : 'y1') - y) < 0.5);
      return {label: label.textContent,
              dots: at('g.data circle').map(c => ({x: num(c, 'cx'), title: c.textContent})),
              intervals: at('g.data line.interval').map(l => [num(l, 'x1'), num(l, 'x2')])};
    });
    const box = svg.getBoundingClientRect();
    const legend = svg.previousElementSibling && svg.previousElementSibling.matches('ul.legend')
      ? [...svg.previousElementSibling.querySelectorAll('li')].map(li => ({name: li.textContent,
          colour: getComputedStyle(li.querySelector('.dot')).backgroundColor, right: li.getBoundingClientRect().right}))
      : [];
    const series = [...svg.querySelectorAll('g.data g.series')].map(g => ({
      colour: g.querySelector('polyline').getAttribute('stroke'),
      line: g.querySelector('polyline').getAttribute('points'),
      dots: [...g.querySelectorAll('circle')].map(c => ({x: num(c, 'cx'), y: num(c, 'cy'), fill: c.getAttribute('fill'),
                                                         title: c.textContent})),
      whiskers: [...g.querySelectorAll('line.interval')].map(l => ({x: num(l, 'x1'), low: num(l, 'y1'), high: num(l, 'y2')}))}));
    return {name: svg.getAttribute('aria-label'), section: svg.closest('section') && svg.closest('section').id,
            legend, series,
            ticks: ticks.map(t => ({text: t.textContent, x: num(t, 'x'), y: num(t, 'y') - 4, axis: t.getAttribute('data-axis') || 'x'})),
            titles: [...svg.querySelectorAll('.axis-title')].map(t => ({text: t.textContent, width: t.getBBox().width})),
            data: xs, data_y: ys, rows, right: box.right, tick_px: ticks.length ? ticks[0].getBoundingClientRect().height : 0};
  });
  let widest = 0, widest_tag = '';
  for (const el of document.body.querySelectorAll('*')) {
    const right = el.getBoundingClientRect().right;
    if (right > widest) { widest = right; widest_tag = el.tagName + ' ' + (el.className.baseVal ?? el.className); }
  }
  const colour = el => getComputedStyle(el).backgroundColor;
  return {
    scroll_width: root.scrollWidth, client_width: root.clientWidth, inner_width: window.innerWidth,
    widest, widest_tag, charts,
    text: document.body.innerText + '\n' + [...document.querySelectorAll('svg text')].map(t => t.textContent).join('\n'),
    sections: [...document.querySelectorAll('section')].map(s => ({id: s.id, heading: s.querySelector('h2').textContent,
      tables: s.querySelectorAll('table.classes').length})),
    contents: [...document.querySelectorAll('nav a')].map(a => a.getAttribute('href')),
    legend: [...document.querySelectorAll('dl.tail-legend dt')].map(dt => ({name: dt.textContent, colour: colour(dt),
      right: dt.getBoundingClientRect().right})),
    cells: [...document.querySelectorAll('table.classes td[class^=TAIL_]')].map(td => ({name: td.textContent, colour: colour(td)})),
  };
})()"""


def _warehouse_with_report(base: Path) -> Path:
    """A demo warehouse whose report.html `report html` wrote, run without --out from a directory of its own."""
    run_cli("demo", "--data", str(base / "data"), "--quiet", warehouse=base / "warehouse")
    (base / "cwd").mkdir()
    done = run_cli("report", "html", warehouse=base / "warehouse", cwd=base / "cwd")
    assert done.stdout == f"wrote {(base / 'warehouse' / 'report.html').resolve()}\n"
    assert list((base / "cwd").iterdir()) == []
    return base / "warehouse"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    return _warehouse_with_report(tmp_path_factory.mktemp("html"))


@pytest.fixture(scope="module")
def report(warehouse) -> Path:
    return warehouse / "report.html"


@pytest.fixture(scope="module")
def measured(report, tmp_path_factory) -> dict[int, dict]:
    """The page laid out at each width, and its screenshot there (`shot`)."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    base = tmp_path_factory.mktemp("chromium")
    browser = Browser(base / "profile")
    pages = {}
    try:
        for width in WIDTHS:
            browser.open(report, width)
            pages[width] = browser.evaluate(MEASURE)
            pages[width]["shot"] = browser.screenshot(base / f"report-{width}.png")
    finally:
        browser.close()
    return pages


@pytest.mark.slow
def test_report_html_writes_the_warehouse_page_by_default_and_says_where_in_json(warehouse, tmp_path):
    """No --out: the warehouse's report.html (where demo and run-all write it); --json says where, and
    how large."""
    page = warehouse / "report.html"
    assert page.read_text().startswith("<!doctype html>")
    done = run_cli("report", "html", "--json", warehouse=warehouse, cwd=tmp_path)
    assert json.loads(done.stdout) == {"written": str(page.resolve()), "bytes": page.stat().st_size}
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "mine.html"
    done = run_cli("report", "html", "--out", "mine.html", "--quiet", warehouse=warehouse, cwd=tmp_path)
    assert done.stdout == "" and out.read_text().startswith("<!doctype html>")


def test_page_is_self_contained(report):
    text = report.read_text()
    assert text.startswith("<!doctype html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page must not load anything from the network"
    assert "<script" not in text
    for title in ("Token distributions", "Paired token overhead of the adaptive mode", "Overhead with 95 % intervals",
                  "Light objectives", "Tail classes"):
        assert text.count(title) == 3  # one per run set
    assert text.count("Overhead across run sets") == 2  # in the contents and as the section's heading
    assert 'stroke-dasharray="5,4"' in text  # the 35 % and 60 % objective lines
    assert "(outlier)" in text and "TAIL_" in text


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_page_fits_the_window_without_sideways_scrolling(measured, width):
    page = measured[width]
    assert page["inner_width"] == width
    assert page["scroll_width"] <= page["client_width"] <= width, page
    assert page["widest"] <= page["client_width"], f"{page['widest_tag']} ends at {page['widest']} px"
    for chart in page["charts"]:
        assert chart["right"] <= page["client_width"], chart["name"]
    # the charts' text stays legible in a narrow window (tests/test_html_layout.py measures every text)
    assert min(chart["tick_px"] for chart in page["charts"]) >= 11


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_every_run_set_has_its_section_and_charts(measured, warehouse, width):
    listed = run_cli("sql", "SELECT DISTINCT run_set_id FROM runs ORDER BY 1", "--format", "json", warehouse=warehouse)
    run_sets = [row["run_set_id"] for row in json.loads(listed.stdout)]
    assert run_sets == ["sample-evidence-5", "sample-legacy-5", "sample-tail-30"]
    page = measured[width]
    sections = {section["id"]: section for section in page["sections"]}
    assert page["contents"] == ["#trend"] + [f"#run-set-{name}" for name in run_sets] + ["#forge"]
    for name in run_sets:
        assert sections[f"run-set-{name}"]["heading"] == f"Run set {name}"
        assert sections[f"run-set-{name}"]["tables"] == 2  # the light objectives and the tail classes
        names = {chart["name"] for chart in page["charts"] if chart["section"] == f"run-set-{name}"}
        assert names == {f"token distributions, run set {name}", f"paired overhead, run set {name}",
                         f"overhead intervals, run set {name}"}
    assert [chart["name"] for chart in page["charts"] if chart["section"] == "trend"] == ["overhead trend"]
    assert "90 runs in 6 scenarios." in page["text"] and "540 runs in 6 scenarios." in page["text"]


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_every_axis_has_a_title_round_ticks_to_its_end_and_no_minus_zero(measured, width):
    charts = measured[width]["charts"]
    assert len(charts) == 3 * 3 + 1 + 5
    problems = []
    for chart in charts:
        name = chart["name"]
        values = [tick for tick in chart["ticks"] if tick["axis"] == "y"]
        if values:  # values run up the vertical axis too (the trend, the survival curves)
            labels, ys = [tick["text"] for tick in values], [tick["y"] for tick in values]
            problems += [f"{name}: tick {label!r}" for label in labels if "-0" in label or "\u22120" in label]
            if len(labels) < 3 or ys != sorted(ys, reverse=True) or not chart["data_y"]:
                problems.append(f"{name}: ticks {labels}")
            elif not ys[-1] - 1e-6 <= min(chart["data_y"]) or not max(chart["data_y"]) <= ys[0] + 1e-6:
                problems.append(f"{name}: ticks from {ys[0]} to {ys[-1]}, data from {min(chart['data_y'])} to {max(chart['data_y'])}")
        if chart["name"] == "overhead trend":  # its horizontal axis names run sets
            if len(chart["titles"]) != 2:
                problems.append("trend: not two axis titles")
            continue
        across = [tick for tick in chart["ticks"] if tick["axis"] == "x"]
        labels, xs = [tick["text"] for tick in across], [tick["x"] for tick in across]
        axes = 2 if values else 1
        if not (len(chart["titles"]) == axes and all(t["text"].strip() and t["width"] > 0 for t in chart["titles"])):
            problems.append(f"{name}: {len(chart['titles'])} axis titles for {axes} axes")
        problems += [f"{name}: tick {label!r}" for label in labels if "-0" in label or "\u22120" in label]
        if len(labels) < 3 or xs != sorted(xs) or not chart["data"]:
            problems.append(f"{name}: ticks {labels}, {len(chart['data'])} data positions")
        elif not xs[0] <= min(chart["data"]) + 1e-6 or not max(chart["data"]) <= xs[-1] + 1e-6:
            problems.append(f"{name}: ticks from {xs[0]} to {xs[-1]}, data from {min(chart['data'])} to {max(chart['data'])}")
    assert problems == []
    titles = {chart["name"]: chart["titles"][0]["text"] for chart in charts}
    assert titles["first-pass rate"] == "first attempts that passed review"
    assert titles["randomized differences"] == "difference in first-pass rate, alternative \u2212 default"
    assert titles["surviving share"] == "added lines still credited to the task at the horizon"
    assert [t["text"] for t in next(c for c in charts if c["name"] == "survival curves")["titles"]] == [
        "days after the integration", "surviving share of added lines"]
    assert titles["token distributions, run set sample-tail-30"] == "total tokens per run"
    differences = [tick["text"] for tick in next(c for c in charts if c["name"] == "randomized differences")["ticks"]]
    assert "0" in differences and any(label.startswith("\u2212") and label.endswith(" pp") for label in differences)


@pytest.mark.slow
def test_words_agree_with_their_counts_and_no_markdown_shows(measured):
    text = measured[700]["text"]
    assert "`" not in text
    assert "loopmeter harvest survival" in text
    counted = re.findall(r"\b(\d[\d,]*) (task|run|scenario|pair)(s?)\b", text)
    assert counted
    for number, noun, s in counted:
        assert (number == "1") == (s == ""), f"{number} {noun}{s}"
    assert re.search(r"\b1 task\b", text) and re.search(r"\b2 tasks\b", text)


@pytest.mark.slow
def test_the_tail_classes_have_a_legend_in_the_table_colours(measured):
    for width in WIDTHS:
        page = measured[width]
        assert [entry["name"] for entry in page["legend"]] == list(TAIL_CLASSES) * 3  # one legend per run set
        legend = {entry["name"]: entry["colour"] for entry in page["legend"][:4]}
        assert len(set(legend.values())) == 4
        for cell in page["cells"]:
            assert cell["colour"] == legend[cell["name"]], cell
        assert {cell["name"] for cell in page["cells"]} >= {"TAIL_UNRESOLVED", "TAIL_CONSISTENT", "TAIL_PAIRED_RATIO_SENSITIVE"}


def _wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@pytest.mark.slow
def test_surviving_shares_show_wilson_intervals_over_their_tasks(measured, warehouse):
    groups = json.loads(run_cli("report", "survival", "--json", warehouse=warehouse).stdout)["groups"]
    assert [g["tasks"] for g in groups] == [1] * 6 + [2] * 3 + [1] * 3  # four models and tiers at 7, 14 and 30 days
    chart = next(c for c in measured[1400]["charts"] if c["name"] == "surviving share")
    assert len(chart["rows"]) == len(groups)
    for row, group in zip(chart["rows"], groups):
        tasks = "1 task" if group["tasks"] == 1 else f"{group['tasks']} tasks"
        assert row["label"] == f"{group['model']} \u00b7 {group['tier']}, {group['horizon_days']} d, {tasks}"
        share = group["lines_surviving"] / group["lines_added"]
        low, high = _wilson(share * group["tasks"], group["tasks"])
        [dot], [(x1, x2)] = row["dots"], row["intervals"]
        assert x1 <= dot["x"] <= x2 and x1 < x2
        assert dot["title"].endswith(f": {share * 100:.0f}%, 95% interval {low * 100:.0f}% to {high * 100:.0f}%"), dot
    # 4 of 6 lines in one task: [9%, 97%] over 1 task; over its 6 lines it would be [30%, 90%]
    row = next(row for row in chart["rows"] if row["label"] == "claude-5-sonnet:medium \u00b7 low, 14 d, 1 task")
    assert row["dots"][0]["title"].endswith("67%, 95% interval 9% to 97%")


def _curve_points(groups: list[dict]) -> dict[str, list[tuple[int, int, int, int]]]:
    """Per model (every tier together), per horizon with lines added: (days, tasks, surviving, added),
    summed row by row from `report survival --json`."""
    summed: dict[str, dict[int, list[int]]] = {}
    for g in groups:
        cell = summed.setdefault(g["model"] or "(unmatched)", {}).setdefault(g["horizon_days"], [0, 0, 0])
        cell[0] += g["tasks"]
        cell[1] += g["lines_surviving"]
        cell[2] += g["lines_added"]
    return {model: [(days, *cell) for days, cell in sorted(by_days.items()) if cell[2]] for model, by_days in summed.items()}


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_survival_curve_of_each_model_with_wilson_whiskers_over_its_tasks(measured, warehouse, width):
    groups = json.loads(run_cli("report", "survival", "--json", warehouse=warehouse).stdout)["groups"]
    expected = _curve_points(groups)
    assert sorted(expected) == ["claude-5-opus:high", "claude-5-sonnet:medium", "gemini-3-flash:low"]
    assert [point[0] for point in expected["claude-5-sonnet:medium"]] == [7, 14, 30]
    # sonnet: 8 of 13 lines in 3 tasks until run-a t1 loses one more line on day 20, then 7 of 13
    assert [point[1:] for point in expected["claude-5-sonnet:medium"]] == [(3, 8, 13), (3, 8, 13), (3, 7, 13)]
    page = measured[width]
    chart = next(c for c in page["charts"] if c["name"] == "survival curves")
    assert chart["section"] == "forge"
    assert [entry["name"] for entry in chart["legend"]] == list(expected)  # the report's order of models
    assert all(entry["right"] <= page["client_width"] for entry in chart["legend"])
    # the vertical axis: 0 % to 100 % in round steps, ticks at both ends, upwards
    up = [tick for tick in chart["ticks"] if tick["axis"] == "y"]
    assert [tick["text"] for tick in up] == ["0%", "20%", "40%", "60%", "80%", "100%"]
    ys = [tick["y"] for tick in up]
    assert ys == sorted(ys, reverse=True)
    at_zero, per_share = ys[0], ys[-1] - ys[0]
    x_ticks = [(float(tick["text"]), tick["x"]) for tick in chart["ticks"] if tick["axis"] == "x"]
    assert x_ticks[0][0] == 0 and x_ticks[-1][0] >= 30
    per_day = (x_ticks[-1][1] - x_ticks[0][1]) / (x_ticks[-1][0] - x_ticks[0][0])
    assert len(chart["series"]) == len(expected)
    for (model, points), entry, series in zip(expected.items(), chart["legend"], chart["series"]):
        assert _rgb(series["colour"]) == entry["colour"] and len(series["dots"]) == len(points)
        offsets = set()
        for (days, tasks, surviving, added), dot, whisker in zip(points, series["dots"], series["whiskers"]):
            share = surviving / added
            low, high = _wilson(share * tasks, tasks)
            assert dot["y"] == pytest.approx(at_zero + share * per_share, abs=0.06)
            assert (whisker["low"], whisker["high"]) == pytest.approx(
                (at_zero + low * per_share, at_zero + high * per_share), abs=0.06)
            assert whisker["x"] == dot["x"]
            offsets.add(round(dot["x"] - (x_ticks[0][1] + (days - x_ticks[0][0]) * per_day), 1))
            noun = "1 task" if tasks == 1 else f"{tasks} tasks"
            assert dot["title"] == (f"{model}, {days} d: {share * 100:.0f}%, 95% interval {low * 100:.0f}% to "
                                    f"{high * 100:.0f}%; {surviving} of {added} lines, {noun}")
        assert len(offsets) == 1 and abs(offsets.pop()) <= 10  # a model's points are set apart by one small shift
    shifts = [round(series["dots"][0]["x"] - chart["series"][0]["dots"][0]["x"], 1) for series in chart["series"]]
    assert shifts == sorted(set(shifts))  # each model at its own place beside the others


def _rgb(colour: str) -> str:
    """#4c78a8 -> rgb(76, 120, 168), as the browser reports a background colour."""
    return "rgb(%d, %d, %d)" % tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def test_a_curve_chart_keeps_every_whisker_within_its_axes():
    """A horizon of 0 days and one at a round tick, several series set apart: the x axis reaches past
    every dodged whisker to a round tick at each end, no tick reads -0, and a NaN point is left out."""
    from loopmeter.charts import curve_chart

    series = [(f"model {i}", [(0, 0.5, 0.2, 0.8, "a"), (30, 0.4, 0.1, 0.9, "b"), (14, float("nan"), None, None, "c")])
              for i in range(4)]
    svg = curve_chart(series, "days", "share", "curves")
    assert "nan" not in svg.lower() and svg.count("<circle") == 8 and svg.count('class="interval"') == 8
    axis = svg[svg.index('<g class="axis">'):svg.index('<g class="data">')]
    tick_xs = [float(x) for x in re.findall(r'<text x="([\d.]+)"[^>]*class="tick">', axis)]
    labels = re.findall(r'class="tick">([^<]*)<', axis)
    data = svg[svg.index('<g class="data">'):]
    xs = [float(x) for x in re.findall(r' (?:cx|x1|x2)="([\d.-]+)"', data)]
    assert min(tick_xs) <= min(xs) and max(xs) <= max(tick_xs)
    assert labels[0] == "\u22125" and labels[-1] == "35" and not any(label in ("-0", "\u22120") for label in labels)
    assert curve_chart([("m", [(7, None, None, None, "x")])], "days", "share", "curves").startswith('<p class="empty">')


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_screenshots_at_both_widths(measured, width):
    shot = measured[width]["shot"]
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    shot_width, shot_height = int.from_bytes(shot[16:20], "big"), int.from_bytes(shot[20:24], "big")
    assert shot_width == measured[width]["client_width"] and shot_height > 4000
    assert len(shot) > 100_000


@pytest.mark.slow
@needs_chromium
def test_page_renders_in_headless_chromium_without_console_errors(report, tmp_path):
    rendered = chromium(report, tmp_path / "profile", "--dump-dom")
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert "<svg" in rendered.stdout and "Tail classes" in rendered.stdout
    assert [line for line in rendered.stderr.splitlines() if ":CONSOLE" in line] == []


@pytest.mark.slow
@needs_chromium
def test_the_console_check_sees_errors(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>missingFunction()</script></body></html>")
    rendered = chromium(broken, tmp_path / "profile", "--dump-dom")
    assert any("Uncaught ReferenceError" in line for line in rendered.stderr.splitlines() if ":CONSOLE" in line)


def test_an_interval_chart_leaves_out_what_is_not_a_finite_number():
    """A Hajek mean under an overflowing weight is NaN, and the seed's bootstrap can give [0.125, NaN]:
    neither is drawn (no `nan` coordinates), the finite estimate still is."""
    from loopmeter.charts import interval_chart

    svg = interval_chart([("low tier", 0.5, 0.125, float("nan")), ("high tier", float("nan"), None, None),
                          ("mid tier", 0.25, 0.0, float("inf"))], "first attempts that passed", "first-pass rate",
                         low=0.0, high=1.0)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    assert svg.count("<circle") == 2 and svg.count('stroke-width="3"') == 0
    assert "low tier: 50%</title>" in svg


@pytest.mark.parametrize("low, high, expected", [
    (0.0, 178_000.0, [0, 50_000, 100_000, 150_000, 200_000]),
    (-0.3, 0.2, [-0.3, -0.2, -0.1, 0.0, 0.1, 0.2]),
    (-48.0, 340.0, [-100, 0, 100, 200, 300, 400]),
    (0.0, 1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
])
def test_ticks_reach_both_ends_of_the_data(low, high, expected):
    from loopmeter.charts import ticks

    found = ticks(low, high)
    assert found == pytest.approx(expected) and found[0] <= low and found[-1] >= high
    assert all(math.copysign(1, tick) > 0 for tick in found if tick == 0)  # no -0.0


def test_tick_labels_never_read_minus_zero():
    from loopmeter.charts import count, percent, points, share

    assert [points(v) for v in (-0.1, -1e-12, 0.0, -0.0, 0.2)] == ["\u221210 pp", "0", "0", "0", "+20 pp"]
    assert [share(v) for v in (-0.004, -0.0, 0.4, 1.0)] == ["0%", "0%", "40%", "100%"]
    assert [percent(v) for v in (-0.4, -100.0, 35.0)] == ["0%", "\u2212100%", "35%"]
    assert [count(v) for v in (-0.0, 150_000, 2_500_000)] == ["0", "150k", "2.5M"]


def write_docs_screenshots(docs: Path) -> None:
    """docs/report-700.png and docs/report-1400.png (whole pages) and docs/report.png (the first
    screen at 1400) from a fresh demo warehouse."""
    with tempfile.TemporaryDirectory(prefix="loopmeter-screenshots-") as scratch:
        base = Path(scratch)
        report = _warehouse_with_report(base) / "report.html"
        browser = Browser(base / "profile")
        try:
            for width in WIDTHS:
                browser.open(report, width)
                browser.screenshot(docs / f"report-{width}.png")
                print(f"wrote {docs / f'report-{width}.png'}")
            browser.screenshot(docs / "report.png", height=1100)
            print(f"wrote {docs / 'report.png'}")
        finally:
            browser.close()


if __name__ == "__main__":
    write_docs_screenshots(ROOT / "docs")


@pytest.mark.slow
def test_the_overhead_intervals_and_verdicts_are_those_of_report_confidence(measured, warehouse, report):
    confidence = json.loads(run_cli("report", "confidence", "--json", warehouse=warehouse).stdout)
    html = report.read_text()
    for run_set in ("sample-evidence-5", "sample-legacy-5", "sample-tail-30"):
        rows = [r for r in confidence["rows"] if r["runSetId"] == run_set and r["mode"] == "forgeloopAdaptive"
                and r["metric"] == "tokens" and r["statistic"].startswith("paired") and r["estimate"] is not None]
        chart = next(c for c in measured[1400]["charts"] if c["name"] == f"overhead intervals, run set {run_set}")
        assert [row["label"] for row in chart["rows"]] == [f"{r['scenarioId']} \u00b7 {r['statistic'][-3:].lower()}" for r in rows]
        for drawn, row in zip(chart["rows"], rows):
            [dot] = drawn["dots"]
            ends = [("open" if end is None else f"{end:.0f}%".replace("-", "\u2212")) for end in (row["low"], row["high"])]
            assert dot["title"].endswith(f"95% interval {ends[0]} to {ends[1]}".replace("-0%", "0%")), (dot, row)
        svg = html.split(f'aria-label="overhead intervals, run set {run_set}"', 1)[1].split("</svg>", 1)[0]
        assert svg.count("cannot bound this end</title>") == sum((r["low"] is None) + (r["high"] is None) for r in rows)
    verdicts = re.findall(r'<td class="(MET|VIOLATED|INCONCLUSIVE)">', html)
    assert verdicts == [o["verdict"] for o in confidence["objectives"]] and verdicts


def test_a_direction_control_in_the_data_is_shown_never_acted_on(demo_warehouse, tmp_path):
    """A model name holding U+202E (right-to-left override) would reorder the text after it on the page:
    it is shown as its code point, in the table and in the charts' labels alike."""
    export = demo_warehouse.parent / "data" / "sample" / "forge" / "export.jsonl"
    text = export.read_text()
    model = next(m for m in ("claude-5-opus", "sonnet", "opus") if m in text)
    hostile = tmp_path / "export.jsonl"
    hostile.write_text(text.replace(model, f"{model}\u202eevil\u2066"))
    run_cli("ingest", "forge", str(hostile), "--quiet", warehouse=tmp_path / "w")
    page = tmp_path / "page.html"
    run_cli("report", "html", "--out", str(page), "--quiet", warehouse=tmp_path / "w")
    html = page.read_text()
    assert not any(character in html for character in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    assert f"{model}&lt;U+202E&gt;evil&lt;U+2066&gt;" in html
