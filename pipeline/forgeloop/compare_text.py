"""`compare` for people: a table per scenario, the pooled rows, the counts and the gate, as text
fitted to the terminal or as GitHub-flavoured Markdown."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..intervals import level_text
from .compare import counts

if TYPE_CHECKING:
    from rich.console import Console

MODE_NAMES = {"forgeloopBalanced": "balanced", "forgeloopAdaptive": "adaptive"}
METRIC_NAMES = {"time": "time (ms)"}  # the medians' unit, where the metric has one


def _number(value: float | None, open_end: bool = False) -> str:
    from ..jsjson import js_number_text

    return ("open" if open_end else "-") if value is None else js_number_text(value)


def computed(row: dict) -> bool:
    """Whether a row's figures were computed (each side had 2 runs with a value): a figure of such a row
    that is null lies beyond any double (open); a row not computed has every figure null, INCONCLUSIVE."""
    return row["verdict"] != "INCONCLUSIVE" or any(row[key] is not None for key in ("estimate", "low", "high", "mde",
                                                                                    "regressedAt"))


def _figures(row: dict, adjusting: bool) -> list[str]:
    """GM ratio, low, high, MDE, regressed at, verdict (and the unadjusted ratio when the report adjusts)."""
    measured = computed(row)
    cells = [_number(row["estimate"], measured), _number(row["low"], measured), _number(row["high"], measured),
             _number(row["mde"], measured), _number(row["regressedAt"], measured), row["verdict"]]
    if adjusting:
        cells.append("control" if not row["gated"] else _number(row["unadjustedEstimate"]) if row["adjusted"] else "-")
    return cells


def _headers(report: dict) -> list[str]:
    return ["GM ratio", "Low", "High", "MDE", "Regressed at", "Verdict", *(["Unadjusted"] if report["adjust"] else [])]


def _tables(report: dict) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """The scenario rows' headers and cells, then the pooled rows'."""
    adjusting = bool(report["adjust"])
    head = ["Scenario", "Mode", "Metric", "Baseline median", "Candidate median", *_headers(report)]
    rows = [[row["scenarioId"], MODE_NAMES.get(row["mode"], row["mode"]), METRIC_NAMES.get(row["metric"], row["metric"]),
             _number(row["baselineMedian"]),
             _number(row["candidateMedian"]), *_figures(row, adjusting)] for row in report["rows"]]
    pooled_head = ["Mode", "Metric", "Scenarios", *_headers(report)]
    pooled = [[MODE_NAMES.get(row["mode"], row["mode"]), row["metric"], str(row["scenarios"]), *_figures(row, adjusting)]
              for row in report["pooled"]]
    return head, rows, pooled_head, pooled


def summary(report: dict) -> str:
    """The counts and what the numbers are, in one paragraph."""
    def told(rows: list[dict]) -> str:
        found = counts(rows)
        return (f"{found['REGRESSED']} regressed, {found['IMPROVED']} improved, {found['NO_CHANGE']} unchanged, "
                f"{found['INCONCLUSIVE']} inconclusive")

    family = report["family"]
    adjusted = (f"; {' and '.join(report['adjustedMetrics'])} of the ForgeLoop modes adjusted by the direct mode's ratio"
                if report["adjust"] else "")
    levels = (f"each scenario row at {level_text(family['scenarioLevel'])}" +
              (f", each pooled row at {level_text(family['pooledLevel'])}" if report["pooled"] else ""))
    unmeasured = not all(map(computed, (*report["rows"], *report["pooled"])))
    pooled = (told(report["pooled"]) if report["pooled"] else
              "none (a mode and metric is pooled over at least 2 scenario rows that weigh: more than 2 degrees of "
              "freedom and a spread)")
    return (f"Scenario rows: {told(report['rows'])}. Pooled rows: {pooled}. GM ratio: candidate / "
            f"baseline, of the runs' geometric means (what is judged; the medians beside it are ForgeLoop's); margin "
            f"±{report['margin'] * 100:g}%{adjusted}. The gated intervals hold all at once at "
            f"{level_text(report['level'])} (t on log values, Bonferroni: {levels}). MDE: the true ratio these runs "
            f"would tell apart from 1 80% of the time. Regressed at: the true ratio judged REGRESSED 80% of the time "
            f"(MDE × (1 + margin)): a smaller regression more likely than not passes the gate."
            + (" -: not computed (a side has fewer than 2 runs with a value)." if unmeasured else ""))


def gate_line(report: dict) -> str | None:
    """`--fail-on`'s answer, or None when none was given."""
    found = report["gate"]
    if not found["failOn"]:
        return None
    named = {"regression": ("regressed", found["regressed"]), "inconclusive": ("inconclusive", found["inconclusive"]),
             "underpowered": ("underpowered", found["underpowered"])}
    parts = ", ".join(f"{named[condition][1]} {named[condition][0]}" for condition in found["failOn"])
    unjudged = (f"; {found['inconclusive']} inconclusive, which --fail-on inconclusive would fail on"
                if found["inconclusive"] and "inconclusive" not in found["failOn"] else "")
    return (f"Gate --fail-on {','.join(found['failOn'])}: {'FAILED' if found['failed'] else 'passed'} "
            f"({parts} of {found['rows']} gated rows{unjudged}).")


def render_compare(report: dict, console: Console) -> None:
    """A title, a table per scenario, the pooled rows, the counts and the gate."""
    from ..tables_text import add_row, fit_line, new_table, print_table

    head, rows, pooled_head, pooled = _tables(report)
    width = console.width if console.is_terminal else None
    console.print(fit_line(f"{report['candidate']} against {report['baseline']}", width), markup=False)
    by_scenario: dict[str, list[list[str]]] = {}
    for row in rows:
        by_scenario.setdefault(row[0], []).append(row[1:])
    numbers = ["Baseline median", "Candidate median", "Scenarios", "GM ratio", "Low", "High", "MDE", "Regressed at",
               "Unadjusted"]
    for scenario, cells in by_scenario.items():
        table = new_table(head[1:], scenario, right=numbers)
        for row in cells:
            add_row(table, row)
        print_table(console, table, key=(0, 1))
    if pooled:
        table = new_table(pooled_head, "All scenarios, pooled", right=numbers)
        for row in pooled:
            add_row(table, row)
        print_table(console, table, key=(0, 1))
    for line in (summary(report), gate_line(report)):
        if line:
            console.print(fit_line(line, width), markup=False)
    if any(computed(row) and None in (row["estimate"], row["low"], row["high"], row["mde"], row["regressedAt"])
           for row in (*report["rows"], *report["pooled"])):
        console.print(fit_line("open: beyond any number at this level (docs/statistics.md).", width), markup=False)


def compare_markdown(report: dict) -> str:
    """The comparison as GitHub-flavoured Markdown, for a pull-request comment or $GITHUB_STEP_SUMMARY."""
    head, rows, pooled_head, pooled = _tables(report)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    def table(headers: list[str], cells: list[list[str]], names: int) -> list[str]:
        verdict = headers.index("Verdict")
        marked = [[f"**{cell}**" if at == verdict and cell in ("REGRESSED", "IMPROVED") else cell
                   for at, cell in enumerate(row)] for row in cells]
        align = ["---"] * names + ["---:"] * (verdict - names) + ["---"] + ["---:"] * (len(headers) - verdict - 1)
        return [line(headers), "| " + " | ".join(align) + " |", *map(line, marked)]

    lines = [f"### `{report['candidate']}` against `{report['baseline']}`", "", summary(report), "",
             *table(head, rows, 3)]
    if pooled:
        lines += ["", "All scenarios, pooled:", "", *table(pooled_head, pooled, 2)]
    if gate_line(report):
        lines += ["", gate_line(report)]
    return "\n".join(lines) + "\n"
