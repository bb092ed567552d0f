"""`loopmeter report html`: one self-contained page with the charts people would rather see.

No script, no stylesheet or font from the network: the charts are inline SVG
(`charts.py`), so the page opens offline and from an e-mail attachment alike. Every ForgeLoop
run set gets a section of its own, listed at the top; the Forge charts follow.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

import polars as pl

from . import __version__
from .charts import (
    SERIES_COLOURS, curve_chart, escape, estimate_chart, interval_chart, overhead_chart, points, share, strip_chart,
    trend_chart,
)
from .forgeloop.contract import LIGHT_OBJECTIVES, MODES
from .storage import Warehouse

# The page's column is at most 1040 px wide, a chart at most 820 (charts.WIDTH units times
# charts.MAX_SCALE: its text 14 to 15 px there, 11 to 12 px in a 700-pixel window); below, charts
# shrink with the window and the tail table's class names break at underscores.
STYLE = """
html { -webkit-text-size-adjust: 100%; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; padding: 1.5rem 1rem 3rem;
       max-width: 1040px; color: #222; box-sizing: border-box; }
h1 { font-size: 1.6rem; margin: 0; } h2 { margin-top: 2.6rem; border-bottom: 1px solid #ccc; font-size: 1.35rem; }
h3 { margin-top: 1.8rem; font-size: 1.08rem; } p, ul.legend, dl { max-width: 46rem; }
.sub { color: #666; margin-top: .2rem; } .empty { color: #888; font-style: italic; }
nav ul { padding-left: 1.2rem; margin: .3rem 0; } code { font-size: .92em; background: #f3f3f3; padding: 0 .2em; border-radius: 3px; }
svg.chart { display: block; width: 100%; max-width: 820px; height: auto; margin: .6rem 0; }
p.caption { color: #555; font-size: 13px; margin-top: -.2rem; }
svg .label { font-size: 12px; fill: #333; } svg .tick { font-size: 11px; fill: #666; } svg .axis-title { font-size: 12px; fill: #333; }
table.classes { border-collapse: collapse; font-size: 13px; width: 100%; max-width: 1000px; }
table.classes td, table.classes th { border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }
table.classes td.n { text-align: right; }
.TAIL_CONSISTENT { background: #e3f2e1; } .TAIL_PAIRED_RATIO_SENSITIVE { background: #fff3cd; }
.TAIL_DISTRIBUTION_REGRESSION { background: #f8d7da; } .TAIL_UNRESOLVED { background: #eee; }
.MET { background: #e3f2e1; } .VIOLATED { background: #f8d7da; } .INCONCLUSIVE, .NOT_VERIFIED { background: #eee; }
ul.legend { list-style: none; padding: 0; margin: .5rem 0; } ul.legend li { display: inline-block; margin-right: 1rem; }
.dot { display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 4px; }
dl.tail-legend { display: grid; grid-template-columns: minmax(0, max-content) minmax(0, 1fr); gap: .3rem .8rem; font-size: 13px; }
dl.tail-legend dt { padding: 1px 6px; border: 1px solid #ddd; align-self: start; } dl.tail-legend dd { margin: 0; }
"""

MODE_COLOURS = {"direct": "#4c78a8", "forgeloopBalanced": "#f58518", "forgeloopAdaptive": "#54a24b", "token outlier": "#d62728"}
TAIL_CLASSES = {  # combined tail interpretation -> what it says (the benchmark contract's rules)
    "TAIL_CONSISTENT": "the paired p95 overhead and the distribution p95 agree: no tail regression, or both regress",
    "TAIL_PAIRED_RATIO_SENSITIVE": "the paired p95 overhead is above 60 % but the mode's p95 tokens are not: the ratio "
                                   "is inflated by low-baseline pairs (direct runs below 60 % of their median)",
    "TAIL_DISTRIBUTION_REGRESSION": "the mode's p95 tokens are more than 60 % above direct's p95",
    "TAIL_UNRESOLVED": "fewer than 20 token pairs, or the two views disagree in another way",
}


def plural(number: int, noun: str) -> str:
    """`1 task`, `2 tasks`, `1,250 runs`."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def prose(text: str) -> str:
    """Plain text as HTML: escaped, and `a command` set as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _breakable(name: str) -> str:
    """A class name that may wrap after its underscores on a narrow screen."""
    return escape(name).replace("_", "_<wbr>")


@dataclass
class Section:
    title: str
    intro: str  # HTML (see `prose`)
    body: str
    level: int = 2
    anchor: str | None = None


@dataclass
class Page:
    title: str
    sections: list[Section] = field(default_factory=list)

    def render(self) -> str:
        generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        parts = [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(self.title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{escape(self.title)}</h1>",
            f'<p class="sub">loopmeter {escape(__version__)}, generated {generated}</p>',
        ]
        contents = [s for s in self.sections if s.level == 2 and s.anchor]
        if len(contents) > 1:
            parts.append('<nav aria-label="contents"><ul>' + "".join(
                f'<li><a href="#{escape(s.anchor)}">{escape(s.title)}</a></li>' for s in contents) + "</ul></nav>")
        open_section = False
        for section in self.sections:
            if section.level == 2:
                parts.append("</section>" if open_section else "")
                parts.append(f'<section id="{escape(section.anchor)}">' if section.anchor else "<section>")
                open_section = True
            heading = f"h{section.level}"
            parts += [f"<{heading}>{escape(section.title)}</{heading}>",
                      f"<p>{section.intro}</p>" if section.intro else "", section.body]
        if open_section:
            parts.append("</section>")
        parts.append("</body></html>")
        return "\n".join(part for part in parts if part)


def _mode_legend() -> str:
    return '<ul class="legend">' + "".join(
        f'<li><i class="dot" style="background:{colour}"></i>{escape(name)}</li>' for name, colour in MODE_COLOURS.items()
    ) + "</ul>"


def _tail_legend() -> str:
    return '<dl class="tail-legend">' + "".join(
        f'<dt class="{name}">{_breakable(name)}</dt><dd>{escape(meaning)}</dd>' for name, meaning in TAIL_CLASSES.items()
    ) + "</dl>"


STATISTIC_COLOURS = {"p50": "#2e7d32", "p95": "#8bc34a"}


def _confidence_sections(run_set: str, confidence: dict) -> list[Section]:
    """The adaptive mode's paired token overhead p50 and p95 with their intervals, and the light
    objectives judged on them (`report confidence`)."""
    from .forgeloop.confidence import repeats_text

    rows = [row for row in confidence["rows"] if row["runSetId"] == run_set and row["mode"] == "forgeloopAdaptive"
            and row["metric"] == "tokens" and row["statistic"].startswith("pairedOverhead")]
    chart_rows = [(f"{row['scenarioId']} · {row['statistic'][-3:].lower()}", row["estimate"], row["low"], row["high"],
                   STATISTIC_COLOURS[row["statistic"][-3:].lower()]) for row in rows]
    p50, p95 = LIGHT_OBJECTIVES["p50TokenOverheadPercent"], LIGHT_OBJECTIVES["p95TokenOverheadPercent"]
    objectives = [entry for entry in confidence["objectives"] if entry["runSetId"] == run_set]
    table = "".join(
        f"<tr><td>{escape(entry['scenarioId'])}</td><td>{'p50' if entry['objective'].startswith('p50') else 'p95'} "
        f"≤ {entry['threshold']} %</td><td class=\"{entry['verdict']}\">{entry['verdict']}</td>"
        f"<td class=\"n\">{'' if entry['verdict'] != 'INCONCLUSIVE' else escape(repeats_text(entry))}</td></tr>"
        for entry in objectives)
    verdicts = (f'<table class="classes"><tr><th>scenario</th><th>objective</th><th>verdict</th>'
                f"<th>repeats needed</th></tr>{table}</table>" if table else
                '<p class="empty">No light scenario in this run set: no objective to judge.</p>')
    legend = '<ul class="legend">' + "".join(
        f'<li><i class="dot" style="background:{colour}"></i>adaptive {name}</li>' for name, colour in STATISTIC_COLOURS.items()
    ) + "</ul>"
    return [
        Section("Overhead with 95 % intervals",
                prose("ForgeLoop's paired token overhead of the adaptive mode, p50 and p95, with exact 95 % intervals from "
                      "the order statistics (`loopmeter report confidence`). An arrow at the edge marks an end the pairs "
                      "cannot bound (a p95 needs 72 pairs to be bounded above, a median 6); the other end is then a "
                      "one-sided 97.5 % bound."),
                legend + estimate_chart(chart_rows, [(float(p50), f"p50 {p50}%"), (float(p95), f"p95 {p95}%")],
                                        "paired token overhead of adaptive over direct, with 95% interval",
                                        f"overhead intervals, run set {run_set}"),
                level=3),
        Section("Light objectives",
                "Judged on the intervals: MET when the high end is at most the threshold, VIOLATED when the low end is "
                "above it, else INCONCLUSIVE, with the pairs at which it resolves with an 80 % chance; NOT_VERIFIED "
                "where the adaptive comparison allows no claim (no token pair or no time pair).",
                verdicts, level=3),
    ]


def _run_set_sections(run_set: str, runs: pl.DataFrame, analysis) -> list[Section]:
    outlier_ids = set(analysis.outliers.filter(pl.col("run_set_id") == run_set)["run_id"].to_list())
    groups = []
    for scenario, mode, tokens, run_ids in sorted(
        runs.filter(pl.col("total_tokens").is_not_null()).group_by("scenario_id", "mode").agg("total_tokens", "run_id").iter_rows(),
        key=lambda row: (row[0], MODES.index(row[1]) if row[1] in MODES else len(MODES), row[1]),
    ):
        groups.append((f"{scenario} · {mode}", mode, tokens, [run_id in outlier_ids for run_id in run_ids]))
    paired = analysis.paired_runs.filter((pl.col("run_set_id") == run_set) & (pl.col("mode") == "forgeloopAdaptive"))
    series = [
        (scenario, list(zip(frame["run_index"], frame["paired_overhead_percent"], frame["baseline_regime"] != "NORMAL")))
        for (scenario,), frame in sorted(paired.partition_by("scenario_id", as_dict=True).items())
    ]
    comparisons = analysis.comparisons.filter(pl.col("run_set_id") == run_set).sort("scenario_id", "mode")
    rows = "".join(
        f"<tr><td>{escape(r['scenario_id'])}</td><td>{escape(r['mode'])}</td><td class=\"n\">{r['token_comparable_pairs']}</td>"
        f"<td>{_breakable(r['paired_status'])}</td><td>{_breakable(r['distribution_status'])}</td>"
        f"<td class=\"{escape(r['combined_interpretation'])}\">{_breakable(r['combined_interpretation'])}</td></tr>"
        for r in comparisons.iter_rows(named=True)
    )
    table = (f'<table class="classes"><tr><th>scenario</th><th>mode</th><th>pairs</th><th>paired</th><th>distribution</th>'
             f"<th>combined</th></tr>{rows}</table>" if rows else '<p class="empty">No candidate mode to compare.</p>')
    scenarios = runs["scenario_id"].n_unique()
    p50, p95 = LIGHT_OBJECTIVES["p50TokenOverheadPercent"], LIGHT_OBJECTIVES["p95TokenOverheadPercent"]
    return [
        Section(f"Run set {run_set}", f"{plural(runs.height, 'run')} in {plural(scenarios, 'scenario')}.", "",
                anchor=f"run-set-{run_set}"),
        Section("Token distributions",
                "Total tokens of every run per scenario and mode; the box spans the middle half, the bar is the median, "
                "red dots are TOKEN_IQR_1_5 outliers.",
                _mode_legend() + strip_chart(groups, "total tokens per run", f"token distributions, run set {run_set}"),
                level=3),
        Section("Paired token overhead of the adaptive mode",
                "Each dot is one run: (adaptive − direct) / direct for the same run index. Hollow dots are low-baseline "
                f"pairs (direct below 60 % of its median). Dashed: the light objectives, p50 ≤ {p50} % and p95 ≤ {p95} %.",
                overhead_chart(series, [(float(p50), f"p50 {p50}%"), (float(p95), f"p95 {p95}%")],
                               "token overhead of adaptive over direct, same run index",
                               f"paired overhead, run set {run_set}"),
                level=3),
        Section("Tail classes",
                "Paired and distribution tail status per candidate mode (20 token pairs are needed to judge a tail); "
                "the combined class is coloured:",
                _tail_legend() + table, level=3),
    ]


def forgeloop_sections(warehouse: Warehouse, run_set: str | None, confidence: dict | None = None) -> list[Section]:
    """A section per run set (only `run_set` when given), from what the last aggregate stored;
    `confidence`: the `report confidence` document of those run sets, when computed already."""
    from .forgeloop.confidence import confidence_report
    from .forgeloop.stored import expected_profiles, stored_result

    if not warehouse.has_table("runs"):
        return [Section("ForgeLoop benchmarks", "No ForgeLoop runs in this warehouse yet.", "")]
    analysis = stored_result(warehouse, run_set, ("mode_runs", "outliers", "paired_runs", "comparisons"),
                             expected_profiles(warehouse)).analysis
    run_sets = [run_set] if run_set is not None else sorted(analysis.mode_runs["run_set_id"].unique().to_list())
    files = warehouse.partition_files("runs", "run_set_id", run_sets)
    runs = warehouse.read_files("runs", files, ["run_set_id", "run_id", "scenario_id", "mode", "total_tokens", "recorded_at"])
    by_set = runs.partition_by("run_set_id", as_dict=True)
    confidence = confidence_report(warehouse, run_set) if confidence is None else confidence
    sections = _trend_sections(runs, confidence) if len(run_sets) > 1 else []
    for name in run_sets:
        own = _run_set_sections(name, by_set.get((name,), runs.clear()), analysis)
        sections += own[:3] + _confidence_sections(name, confidence) + own[3:]
    return sections


def _trend_sections(runs: pl.DataFrame, confidence: dict) -> list[Section]:
    """Each scenario's median paired token overhead of the adaptive mode, run set by run set in the
    order their first runs were recorded."""
    started = runs.group_by("run_set_id").agg(pl.col("recorded_at").min()).sort("recorded_at", "run_set_id")
    order = {name: index for index, name in enumerate(started["run_set_id"].to_list())}
    labels = [moment.strftime("%Y-%m-%d") for moment in started["recorded_at"].to_list()]
    shared = len(set(labels)) < len(labels)
    medians = [row for row in confidence["rows"] if row["mode"] == "forgeloopAdaptive" and row["metric"] == "tokens"
               and row["statistic"] == "pairedOverheadP50"]
    scenarios = sorted({row["scenarioId"] for row in medians})
    series = [(scenario, [(order[row["runSetId"]], row["estimate"], row["low"], row["high"])
                          for row in medians if row["scenarioId"] == scenario]) for scenario in scenarios]
    legend = '<ul class="legend">' + "".join(
        f'<li><i class="dot" style="background:{SERIES_COLOURS[number % len(SERIES_COLOURS)]}"></i>{escape(scenario)}</li>'
        for number, scenario in enumerate(scenarios)) + "</ul>"
    return [Section("Overhead across run sets",
                    "Each scenario's median paired token overhead of the adaptive mode, run set by run set in the order their "
                    "first runs were recorded, with exact 95 % intervals (a dashed stub and an arrow mark an end the "
                    "pairs cannot bound).",
                    legend + trend_chart(series, labels, "median token overhead", "run sets, by the date of their first run",
                                         "overhead trend", x_names=[f"{name} ({label})" for name, label in zip(order, labels)],
                                         x_heads=list(order), x_times=labels)
                    + ('<p class="caption">Run sets that share a first-run date are points only: no line joins them, as '
                       "their order within a day is no series in time.</p>" if shared else ""),
                    anchor="trend")]


def _who(group: dict) -> str:
    return f"{group['model'] or '(unmatched)'} · {group['tier'] or '-'}"


def _mismatch_reasons(rows) -> str:
    """What the untrustworthy pairs of the SRM checks did, in words."""
    checks = {check for row in rows for check in row["untrustworthy_checks"]}
    return " or ".join(words for check, words in (
        ("assignment", "drew the alternative at a rate their logged propensities rule out"),
        ("attrition", "kept outcomes of one arm at a rate chance rules out")) if check in checks)


def forge_sections(warehouse: Warehouse) -> list[Section]:
    """First-pass rates, randomized differences and survival, from the Forge reports."""
    from .forge import tables as forge_tables
    from .forge.reports import routing_scope, survival_document
    from .forge.srm import flagged_pairs, routing_and_srm

    if not warehouse.has_table(forge_tables.TASKS):
        return [Section("Forge routing and survival", prose("No Forge store ingested yet (`loopmeter ingest forge STORE`)."),
                        "", anchor="forge")]
    routing, srm = routing_and_srm(warehouse, routing_scope(None, None))
    mismatched = flagged_pairs(srm)
    observational = [
        (f"{row['tier']} · {row['spec']}, {plural(row['tasks'], 'task')}", row["first_pass"], *row["ci"])
        for row in routing["observational"]
    ]
    randomized = [
        (f"{row['tier']}: {row['alternative']} vs {row['default']}"
         + (" (SRM: untrustworthy)" if (row["tier"], row["default"], row["alternative"]) in mismatched else ""),
         row["difference"], *(row["ci"] or (None, None)))
        for row in routing["randomized"] if "note" not in row
    ]
    srm_note = (f" {plural(len(mismatched), 'pair')} marked SRM {_mismatch_reasons(mismatched.values())} "
                "(p < 0.00025, `loopmeter report srm`): their comparison is untrustworthy." if mismatched else
                " Every pair's draws split as their logged propensities say and both its arms keep the same share of "
                "outcomes (no sample ratio mismatch, `loopmeter report srm`).")
    notes = " ".join(prose(row["note"]) + "." for row in routing["randomized"] if "note" in row)
    sections = [
        Section("Forge routing and survival", "Tasks Forge routed to models, how their first attempts did, and how much of "
                "their merged work survives.", "", anchor="forge"),
        Section("First-pass rate per model and tier",
                "Observational: first attempts with an outcome, by declared tier and the model that ran them, with Wilson "
                "95 % intervals. Routing chose who ran what, so a model given the hard tasks looks worse than it is.",
                interval_chart(observational, "first attempts that passed review", "first-pass rate", low=0.0, high=1.0),
                level=3),
        Section("Randomized comparisons",
                "Intent-to-treat difference in first-pass rate (alternative − default) from exploration draws, "
                "Hajek-weighted, with the run-cluster bootstrap 95 % interval. Dashed: the −10 percentage-point "
                f"non-inferiority margin.{prose(srm_note)} {notes}",
                interval_chart(randomized, "difference in first-pass rate, alternative − default", "randomized differences",
                               line=(-0.10, points(-0.10)), label=points),
                level=3),
    ]
    survival = survival_document(warehouse)
    sections += _survival_sections(survival)
    return sections


def _survival_sections(document: dict) -> list[Section]:
    """The surviving share and revert rate per model, tier and horizon, and a survival curve per model."""
    from .forge.reports import survival_curves, surviving_share

    groups = document["groups"]
    shares = [
        (f"{_who(g)}, {g['horizon_days']} d, {plural(g['tasks'], 'task')}",
         *surviving_share(g["lines_surviving"], g["lines_added"], g["tasks"]))
        for g in groups
    ]
    reverts = [(f"{_who(g)}, {g['horizon_days']} d, {plural(g['tasks'], 'task')}", g["revert_rate"], *g["revert_ci"])
               for g in groups]
    found = survival_curves(document)
    horizons = sorted({point["days"] for curve in found for point in curve["points"]})
    curves = [
        (curve["model"] or "(unmatched)",
         [(p["days"], p["share"], p["low"], p["high"],
           f"{curve['model'] or '(unmatched)'}, {p['days']} d: {share(p['share'])}, 95% interval {share(p['low'])} to "
           f"{share(p['high'])}; {p['lines_surviving']:,} of {p['lines_added']:,} lines, {plural(p['tasks'], 'task')}")
          for p in curve["points"]])
        for curve in found
    ]
    curve_section = Section(
        "Survival curve per model",
        prose("The surviving share of each model's merged lines (every tier together) at each horizon harvested "
              "(`loopmeter harvest survival --horizon-days 7 --horizon-days 30`), with Wilson 95 % intervals over "
              "the tasks as whiskers. Each point counts the tasks measured at that horizon: a task whose later "
              "horizon is still ahead counts only at the earlier ones."),
        curve_chart(curves, "days after the integration", "surviving share of added lines", "survival curves"),
        level=3)
    if len(horizons) == 1:  # one point per model is no curve: a dot with its interval per model, at that horizon
        days = plural(horizons[0], "day")
        rows = [(f"{curve['model'] or '(unmatched)'}, {plural(point['tasks'], 'task')}", point["share"], point["low"],
                 point["high"]) for curve in found for point in curve["points"]]
        curve_section = Section(
            f"Surviving share per model at {days}",
            prose(f"One horizon harvested, {days}: the surviving share of each model's merged lines (every tier "
                  "together) there, with Wilson 95 % intervals over its tasks. Harvest more horizons "
                  "(`loopmeter harvest survival --horizon-days 7 --horizon-days 30`) for a survival curve per model."),
            interval_chart(rows, f"added lines still credited to the task after {days}", "survival at one horizon",
                           low=0.0, high=1.0),
            level=3)
    return [
        Section("Surviving share of merged lines per model",
                prose("Of the lines a task's merged work added, the share git blame still credits to the task's commits at "
                      "the horizon (`loopmeter harvest survival`), with Wilson 95 % intervals over the tasks (a task's "
                      "lines survive or go together)."),
                interval_chart(shares, "added lines still credited to the task at the horizon", "surviving share",
                               low=0.0, high=1.0),
                level=3),
        curve_section,
        Section("Revert rate per model", "Tasks whose work a later commit reverted, with Wilson 95 % intervals.",
                interval_chart(reverts, "tasks whose work was reverted", "revert rate", low=0.0, high=1.0), level=3),
    ]


def build_page(warehouse: Warehouse, run_set: str | None = None, confidence: dict | None = None) -> str:
    """The page; `confidence` (the intervals) computed already (run-all) is not computed twice."""
    page = Page("loopmeter report")
    page.sections += forgeloop_sections(warehouse, run_set, confidence)
    page.sections += forge_sections(warehouse)
    return page.render()
