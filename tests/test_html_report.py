"""The HTML report: one self-contained page that renders in headless Chromium without errors."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0",
]


def chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(demo_warehouse, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    run_cli("report", "html", "--out", str(out), warehouse=demo_warehouse)
    return out


def test_page_is_self_contained(report):
    text = report.read_text()
    assert text.startswith("<!doctype html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page must not load anything from the network"
    assert "<script" not in text
    for title in ("Token distributions", "Paired token overhead of the adaptive mode", "Tail classes"):
        assert title in text
    assert text.count("<svg") >= 2
    assert 'stroke-dasharray="5,4"' in text  # the 35 % and 60 % objective lines
    assert "(outlier)" in text and "TAIL_" in text


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_page_renders_in_headless_chromium_without_console_errors(report, tmp_path):
    rendered = chromium(report, tmp_path / "profile", "--dump-dom")
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert "<svg" in rendered.stdout and "Tail classes" in rendered.stdout
    assert [line for line in rendered.stderr.splitlines() if ":CONSOLE" in line] == []
    shot = tmp_path / "report.png"
    chromium(report, tmp_path / "profile2", "--window-size=1000,1600", f"--screenshot={shot}")
    assert shot.stat().st_size > 20_000


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_console_check_sees_errors(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>missingFunction()</script></body></html>")
    rendered = chromium(broken, tmp_path / "profile", "--dump-dom")
    assert any("Uncaught ReferenceError" in line for line in rendered.stderr.splitlines() if ":CONSOLE" in line)


def test_an_interval_chart_leaves_out_what_is_not_a_finite_number():
    """A Hajek mean under an overflowing weight is NaN, and the seed's bootstrap can give [0.125, NaN]:
    neither is drawn (no `nan` coordinates), the finite estimate still is."""
    from pipeline.charts import interval_chart

    svg = interval_chart([("low tier", 0.5, 0.125, float("nan")), ("high tier", float("nan"), None, None),
                          ("mid tier", 0.25, 0.0, float("inf"))], "first-pass rate", low=0.0, high=1.0)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    assert svg.count("<circle") == 2 and svg.count('stroke-width="3"') == 0
    assert "low tier: 50" in svg and "[" not in svg.split("low tier: 50")[1].split("</title>")[0]
