"""`loopmeter compare BASELINE CANDIDATE`: two run sets, per scenario and mode, for tokens and
wall time: each side's median, the ratio candidate / baseline with a bootstrap interval, and
a verdict against a margin.

Each side's median is ForgeLoop's `modeAggregates.<mode>.totalTokens.p50` (`wallClockMs.p50`):
every run of the mode with a finite value, rounded as ForgeLoop rounds. The interval resamples
each side's runs on its own (`intervals.py`: the resampled medians drawn exactly, an end the
runs cannot bound left open) and takes the percentile interval of the ratio of the two.
REGRESSED: the interval lies above 1 + margin; IMPROVED: below 1 - margin; NO_CHANGE: inside
both; INCONCLUSIVE otherwise (an open end included).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from .. import intervals
from ..errors import LoopmeterError
from ..numbers import js_round4
from .confidence import Settings, sorted_samples
from .contract import MODES
from .tables import RUNS
from .stats import metric_statistics, rounded

if TYPE_CHECKING:
    from rich.console import Console

    from ..storage import Warehouse

METRICS = (("tokens", "total_tokens"), ("time", "wall_clock_ms"))
VERDICTS = ("REGRESSED", "IMPROVED", "NO_CHANGE", "INCONCLUSIVE")
KEY = ["run_set_id", "scenario_id", "mode"]


def _runs(warehouse: Warehouse, baseline: str, candidate: str) -> pl.DataFrame:
    present = warehouse.partitions(RUNS, "run_set_id") if warehouse.has_table(RUNS) else {}
    missing = [run_set for run_set in (baseline, candidate) if run_set not in present]
    if missing:
        known = ", ".join(sorted(present)[:10]) or "none"
        raise LoopmeterError(f"no run set {', '.join(map(repr, missing))} in {warehouse.root} (run sets: {known})")
    files = warehouse.partition_files(RUNS, "run_set_id", sorted({baseline, candidate}))
    return warehouse.read_files(RUNS, files, ["run_set_id", "scenario_id", "mode", *(column for _, column in METRICS)])


def verdict(low: float | None, high: float | None, margin: float) -> str:
    if low is not None and low > 1 + margin:
        return "REGRESSED"
    if high is not None and high < 1 - margin:
        return "IMPROVED"
    if low is not None and high is not None and low >= 1 - margin and high <= 1 + margin:
        return "NO_CHANGE"
    return "INCONCLUSIVE"


def _ratio_interval(base: np.ndarray, cand: np.ndarray, key: tuple, settings: Settings) -> intervals.Interval:
    draws = []
    for side, values in (("baseline", base), ("candidate", cand)):
        rng = intervals.generator(settings.seed, *key, side)
        draws.append(intervals.percentile_draws(values, 0.5, settings.resamples, rng))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(draws[0] > 0, draws[1] / draws[0], np.inf)
    low, high = intervals.percentile_interval(ratios, settings.level)
    base_low, base_high = intervals.open_ends(len(base), 0.5, settings.level, two_sample=True)
    cand_low, cand_high = intervals.open_ends(len(cand), 0.5, settings.level, two_sample=True)
    # the ratio rises with the candidate's median and falls with the baseline's
    return intervals.closed(low, high, cand_low or base_high or not np.isfinite(low),
                            cand_high or base_low or not np.isfinite(high))


def compare_run_sets(warehouse: Warehouse, baseline: str, candidate: str, margin: float = 0.10,
                     settings: Settings = Settings()) -> dict:
    """The `compare --json` document: a row per scenario, mode and metric of either run set."""
    runs = _runs(warehouse, baseline, candidate)
    names = [column for _, column in METRICS]
    medians = rounded(metric_statistics(runs, KEY, names)).select(*KEY, "metric", "p50").collect()
    median = {(run_set, scenario, mode, metric): p50 for run_set, scenario, mode, metric, p50 in medians.iter_rows()}
    samples = sorted_samples(pl.concat([
        runs.select(*KEY, pl.lit(column).alias("metric"), pl.col(column).cast(pl.Float64).alias("value"))
        for column in names
    ]), [*KEY, "metric"])
    scenarios = sorted(set(runs["scenario_id"].unique().to_list()))
    rows = []
    for scenario in scenarios:
        for mode in MODES:
            if not any((run_set, scenario, mode, column) in median for run_set in (baseline, candidate) for _, column in METRICS):
                continue  # the mode ran in neither run set
            for metric, column in METRICS:
                base_median = median.get((baseline, scenario, mode, column))
                cand_median = median.get((candidate, scenario, mode, column))
                base = samples.get((baseline, scenario, mode, column))
                cand = samples.get((candidate, scenario, mode, column))
                ratio, interval = None, intervals.Interval(None, None)
                if base_median is not None and cand_median is not None and base_median > 0:
                    ratio = js_round4(cand_median / base_median)
                    found = _ratio_interval(base, cand, (baseline, candidate, scenario, mode, metric), settings)
                    interval = intervals.Interval(js_round4(found.low), js_round4(found.high))
                rows.append({"scenarioId": scenario, "mode": mode, "metric": metric, "baselineMedian": base_median,
                             "candidateMedian": cand_median, "ratio": ratio, "low": interval.low, "high": interval.high,
                             "verdict": verdict(interval.low, interval.high, margin)})
    return {"baseline": baseline, "candidate": candidate, "margin": margin, "level": settings.level,
            "resamples": settings.resamples, "seed": settings.seed, "rows": rows}


def counts(report: dict) -> dict[str, int]:
    return {name: sum(row["verdict"] == name for row in report["rows"]) for name in VERDICTS}


def _cells(report: dict) -> tuple[list[str], list[list[str]]]:
    from ..jsjson import js_number_text

    def number(value: float | None, open_end: bool = False) -> str:
        return ("open" if open_end else "-") if value is None else js_number_text(value)

    level = f"{report['level'] * 100:g}%"
    headers = ["Scenario", "Mode", "Metric", "Baseline median", "Candidate median", "Ratio", f"{level} low",
               f"{level} high", "Verdict"]
    rows = [[row["scenarioId"], row["mode"], row["metric"], number(row["baselineMedian"]), number(row["candidateMedian"]),
             number(row["ratio"]), number(row["low"], row["ratio"] is not None),
             number(row["high"], row["ratio"] is not None), row["verdict"]] for row in report["rows"]]
    return headers, rows


def _summary(report: dict) -> str:
    found = counts(report)
    margin = f"{report['margin'] * 100:g}%"
    return (f"{found['REGRESSED']} regressed, {found['IMPROVED']} improved, {found['NO_CHANGE']} unchanged, "
            f"{found['INCONCLUSIVE']} inconclusive (ratio candidate / baseline; margin ±{margin}; "
            f"{report['level'] * 100:g}% bootstrap intervals, {report['resamples']} resamples, seed {report['seed']})")


def render_compare(report: dict, console: Console) -> None:
    """A title, then a table per scenario (mode, metric, medians, ratio, interval, verdict), then the counts."""
    from ..tables_text import add_row, fit_line, new_table, print_table
    from .confidence import MODE_NAMES

    headers, rows = _cells(report)
    width = console.width if console.is_terminal else None
    console.print(fit_line(f"{report['candidate']} against {report['baseline']}", width), markup=False)
    by_scenario: dict[str, list[list[str]]] = {}
    for row in rows:
        by_scenario.setdefault(row[0], []).append([MODE_NAMES.get(row[1], row[1]), *row[2:]])
    for scenario, cells in by_scenario.items():
        table = new_table(headers[1:], scenario, right=headers[3:8])
        for row in cells:
            add_row(table, row)
        print_table(console, table, key=(0, 1))
    console.print(fit_line(_summary(report), width), markup=False)
    if any(row["low"] is None and row["ratio"] is not None for row in report["rows"]):
        console.print(fit_line("open: the runs cannot bound that end at this level (docs/statistics.md).", width),
                      markup=False)


def compare_markdown(report: dict) -> str:
    """The comparison as GitHub-flavoured Markdown, for a pull-request comment or $GITHUB_STEP_SUMMARY."""
    headers, rows = _cells(report)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    marked = [[*row[:-1], f"**{row[-1]}**" if row[-1] in ("REGRESSED", "IMPROVED") else row[-1]] for row in rows]
    align = ["---"] * 3 + ["---:"] * 5 + ["---"]
    lines = [f"### `{report['candidate']}` against `{report['baseline']}`", "", _summary(report), "",
             line(headers), "| " + " | ".join(align) + " |", *map(line, marked)]
    return "\n".join(lines) + "\n"
