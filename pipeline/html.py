"""`loopmeter report html`: one self-contained page with the charts people would rather see.

No script, no stylesheet or font from the network: the charts are inline SVG
(`charts.py`), so the page opens offline and from an e-mail attachment alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape

import polars as pl

from . import __version__
from .charts import interval_chart, overhead_chart, strip_chart
from .forgeloop.contract import LIGHT_OBJECTIVES, MODES
from .warehouse import Warehouse

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 920px; color: #222; }
h1 { font-size: 1.6rem; margin-bottom: 0; } h2 { margin-top: 2.4rem; border-bottom: 1px solid #ddd; }
.sub { color: #666; margin-top: .2rem; } .empty { color: #888; font-style: italic; }
svg .label { font-size: 12px; fill: #333; } svg .tick { font-size: 11px; fill: #666; }
table.classes { border-collapse: collapse; font-size: 12px; } table.classes td, table.classes th { border: 1px solid #ddd; padding: 3px 8px; }
.TAIL_CONSISTENT { background: #e3f2e1; } .TAIL_PAIRED_RATIO_SENSITIVE { background: #fff3cd; }
.TAIL_DISTRIBUTION_REGRESSION { background: #f8d7da; } .TAIL_UNRESOLVED { background: #eee; }
.legend span { display: inline-block; margin-right: 1rem; } .dot { display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 4px; }
"""


@dataclass
class Section:
    title: str
    intro: str
    body: str


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
            f'<p class="sub">loopmeter {__version__}, generated {generated}</p>',
        ]
        for section in self.sections:
            parts += [f"<h2>{escape(section.title)}</h2>", f"<p>{section.intro}</p>", section.body]
        parts.append("</body></html>")
        return "\n".join(parts)


def _legend() -> str:
    colors = {"direct": "#4c78a8", "forgeloopBalanced": "#f58518", "forgeloopAdaptive": "#54a24b", "token outlier": "#d62728"}
    return '<p class="legend">' + "".join(
        f'<span><i class="dot" style="background:{color}"></i>{escape(name)}</span>' for name, color in colors.items()
    ) + "</p>"


def forgeloop_sections(warehouse: Warehouse, run_set: str | None, result=None) -> list[Section]:
    """`result`: the aggregate a stage computed already (stage.Aggregated), else computed here."""
    from .forgeloop.stage import compute

    if not warehouse.has_table("runs"):
        return [Section("ForgeLoop benchmarks", "No ForgeLoop runs in this warehouse yet.", "")]
    if result is None:
        result = compute(warehouse, run_set)
    analysis = result.analysis
    chosen = run_set or max(analysis.mode_runs.group_by("run_set_id").agg(pl.col("run_count").sum()).sort("run_count", "run_set_id").rows())[0]
    runs = warehouse.read_partition("runs", "run_set_id", chosen)
    outlier_ids = set(analysis.outliers.filter(pl.col("run_set_id") == chosen)["run_id"].to_list())
    groups = []
    for scenario, mode, tokens, run_ids in sorted(
        runs.filter(pl.col("total_tokens").is_not_null()).group_by("scenario_id", "mode").agg("total_tokens", "run_id").iter_rows(),
        key=lambda row: (row[0], MODES.index(row[1])),
    ):
        groups.append((f"{scenario} · {mode}", mode, tokens, [run_id in outlier_ids for run_id in run_ids]))
    paired = analysis.paired_runs.filter((pl.col("run_set_id") == chosen) & (pl.col("mode") == "forgeloopAdaptive"))
    series = [
        (scenario, list(zip(frame["run_index"], frame["paired_overhead_percent"], frame["baseline_regime"] != "NORMAL")))
        for (scenario,), frame in sorted(paired.partition_by("scenario_id", as_dict=True).items())
    ]
    comparisons = analysis.comparisons.filter(pl.col("run_set_id") == chosen).sort("scenario_id", "mode")
    rows = "".join(
        f"<tr><td>{escape(r['scenario_id'])}</td><td>{escape(r['mode'])}</td><td>{r['token_comparable_pairs']}</td>"
        f"<td>{escape(r['paired_status'])}</td><td>{escape(r['distribution_status'])}</td>"
        f"<td class=\"{escape(r['combined_interpretation'])}\">{escape(r['combined_interpretation'])}</td></tr>"
        for r in comparisons.iter_rows(named=True)
    )
    run_sets = ", ".join(sorted(analysis.mode_runs["run_set_id"].unique().to_list()))
    return [
        Section(
            f"Token distributions — run set {chosen}",
            f"Total tokens of every run per scenario and mode; the box spans the middle half, the bar is the median, "
            f"red dots are TOKEN_IQR_1_5 outliers. Run sets in the warehouse: {escape(run_sets)}.",
            _legend() + strip_chart(groups, "tokens", "token distributions"),
        ),
        Section(
            "Paired token overhead of the adaptive mode",
            "Each dot is one run: (adaptive − direct) / direct for the same run index. Hollow dots are low-baseline "
            f"pairs (direct below 60 % of its median). Dashed: the light objectives, p50 ≤ {LIGHT_OBJECTIVES['p50TokenOverheadPercent']} % "
            f"and p95 ≤ {LIGHT_OBJECTIVES['p95TokenOverheadPercent']} %.",
            overhead_chart(series, [(35.0, "35 %"), (60.0, "60 %")], "paired overhead"),
        ),
        Section(
            "Tail classes",
            "Paired and distribution tail status per candidate mode (20 token pairs are needed to judge a tail).",
            f'<table class="classes"><tr><th>scenario</th><th>mode</th><th>pairs</th><th>paired</th><th>distribution</th>'
            f"<th>combined</th></tr>{rows}</table>",
        ),
    ]


def forge_sections(warehouse: Warehouse) -> list[Section]:
    """First-pass rates, randomized differences and survival, from the Forge reports."""
    from .forge import tables as forge_tables
    from .forge.reports import routing_document, routing_scope, survival_document

    if not warehouse.has_table(forge_tables.TASKS):
        return [Section("Forge routing and survival", "No Forge store ingested yet (`loopmeter ingest forge STORE`).", "")]
    routing = routing_document(warehouse, routing_scope(None, None))
    observational = [
        (f"{row['tier']} · {row['spec']} ({row['tasks']})", row["first_pass"], *row["ci"]) for row in routing["observational"]
    ]
    randomized = [
        (f"{row['tier']}: {row['alternative']} vs {row['default']}", row["difference"], *(row["ci"] or (None, None)))
        for row in routing["randomized"] if "note" not in row
    ]
    notes = " ".join(escape(row["note"]) + "." for row in routing["randomized"] if "note" in row)
    sections = [
        Section("First-pass rate per model and tier",
                "Observational: first attempts with an outcome, by declared tier and the model that ran them, with Wilson "
                "95 % intervals. Routing chose who ran what, so a model given the hard tasks looks worse than it is.",
                interval_chart(observational, "first-pass rate", low=0.0, high=1.0)),
        Section("Randomized comparisons",
                "Intent-to-treat difference in first-pass rate (alternative − default) from exploration draws, "
                "Hajek-weighted, with the run-cluster bootstrap 95 % interval. Dashed: the −0.10 non-inferiority "
                f"margin. {notes}",
                interval_chart(randomized, "randomized differences", line=(-0.10, "−0.10"))),
    ]
    survival = survival_document(warehouse)["groups"]
    shares = [
        (f"{g['model'] or '(unmatched)'} · {g['tier'] or '-'} ({g['horizon_days']} d, {g['tasks']} tasks)",
         g["surviving_share"], None, None) for g in survival
    ]
    reverts = [
        (f"{g['model'] or '(unmatched)'} · {g['tier'] or '-'} ({g['horizon_days']} d)", g["revert_rate"], *g["revert_ci"])
        for g in survival
    ]
    sections += [
        Section("Surviving share of merged lines per model",
                "Of the lines a task's merged work added, the share git blame still credits to the task's commits at the "
                "horizon (`loopmeter harvest survival`).",
                interval_chart(shares, "surviving share", low=0.0, high=1.0)),
        Section("Revert rate per model", "Tasks whose work a later commit reverted, with Wilson 95 % intervals.",
                interval_chart(reverts, "revert rate", low=0.0, high=1.0)),
    ]
    return sections


def build_page(warehouse: Warehouse, run_set: str | None = None, forgeloop=None) -> str:
    """The page; `forgeloop` is an aggregate already computed (run-all), so it is not computed twice."""
    page = Page("loopmeter report")
    page.sections += forgeloop_sections(warehouse, run_set, forgeloop)
    page.sections += forge_sections(warehouse)
    return page.render()
