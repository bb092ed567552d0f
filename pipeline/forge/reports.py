"""Forge reports: the routing and survival documents, their text, and their tables.

`routing_document` / `survival_document` return what `--json` prints; `*_text` render
them for people (routing exactly as the seed prints it, and at a width it is wider than, its
rows as tables and its lines wrapped: `fitted`); `*_frames` turn them into the
`forge_routing_*` and `forge_survival` tables. `surviving_share` is the one definition of a
surviving share's Wilson interval (over the tasks); `survival_curves` sums the survival rows
per model and horizon for the HTML report's curves; `harvest_text` and `unharvested_notes`
say what `harvest survival` found, per horizon.

Non-finite numbers: the seed's `json.dumps` writes NaN and Infinity, which are not JSON. In
routing they come from a weight 1/propensity that overflows (a propensity below ~5.6e-309 makes
it infinite, below ~7e-155 its square; a Hajek mean, Kish's n, the difference or an interval
bound is then NaN or infinite) or from a runtime sum that overflows. Such a number says
nothing: `routing_json`, `routing_text` and `routing_frames` make it None (`finite_or_none`),
so it is `null` in `--json`, `-` in the text and null in the `forge_routing_*` tables. Every
finite number is the seed's, to the last bit.
"""
from __future__ import annotations

import json
import math
import os
import time
from datetime import datetime, timezone

import polars as pl

from ..errors import Exit, LoopmeterError
from ..sql.queries import run_query
from ..storage import Warehouse
from . import tables as t
from .derive import connect, report_frame
from .routing import Scope, routing_report, wilson
from .srm import flagged_pairs, p_text
from .text import fitted


# ---- routing -------------------------------------------------------------------------------

def routing_scope(repo: str | None, since_days: float | None, now: float | None = None) -> Scope:
    """`since_days`: the last DAYS days (None or 0: no limit, as the seed); negative, NaN or
    infinite days would select nothing, or everything, without a word: refused."""
    if since_days is not None and not (math.isfinite(since_days) and since_days >= 0):
        raise LoopmeterError(f"--since must be a finite number of days, at least 0 (got {since_days})", Exit.USAGE)
    return Scope(
        repo=os.path.realpath(repo) if repo else None,
        since=((time.time() if now is None else now) - since_days * 86400) if since_days else None,
    )


def finite_or_none(value):
    """`value` with every NaN and infinite float in it, at any depth, replaced by None (new lists
    and dicts; tuples become lists, as JSON writes them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def routing_document(warehouse: Warehouse, scope: Scope) -> dict:
    """The seed's routing document, NaN and infinities as the seed has them; `routing_json`,
    `routing_text` and `routing_frames` write those as null / - / null."""
    connection = connect(warehouse, [t.TASKS, t.REPOS])
    try:
        return routing_report(connection, scope)
    finally:
        connection.close()


def routing_json(document: dict) -> str:
    """The seed's `--json` (Python's json, keys sorted, two-space indent), but always valid JSON:
    NaN and infinities are written null where the seed writes NaN / Infinity."""
    return json.dumps(finite_or_none(document), indent=2, sort_keys=True, allow_nan=False)


def _pct(x: float | None) -> str:
    return "   -" if x is None else "%3.0f%%" % (100 * x)


def _signed(x: float | None) -> str:
    return "-" if x is None else "%+.2f" % x


def routing_text(document: dict, width: int | None = None, srm: dict | None = None) -> str:
    """The seed's text; a number that is None (non-finite in the seed, which prints nan) shows as -.
    `width` (None: the seed's text exactly): a line wider than it wraps at spaces and a block of
    rows wider than it is a table of the same columns and values (`fitted`). `srm` (the pairs'
    sample-ratio-mismatch document, `srm.srm_document`): a pair it finds untrustworthy gets a line after
    its verdict per check that fired (assignment ratio, outcome attrition)."""
    return fitted(_routing_blocks(finite_or_none(document), srm), width)


def _mismatch_lines(row: dict) -> list[str]:
    """The marks of a pair whose comparison the SRM checks make untrustworthy, one per check that fired: its
    assignments do not split as its propensities say, or its arms keep different shares of outcomes."""
    lines = []
    if "assignment" in row["untrustworthy_checks"]:
        lines.append("    !! sample ratio mismatch: %d of %d assignments went to the alternative, %.1f expected "
                     "(p %s): this comparison is untrustworthy" % (
                         row["alternative_assigned"], row["assigned"], row["expected_alternative"],
                         p_text(row["p_value"])))
    if "attrition" in row["untrustworthy_checks"]:
        arms = [(row["alternative_with_outcome"], row["alternative_assigned"]),
                (row["default_with_outcome"], row["assigned"] - row["alternative_assigned"])]
        shares = ["%d of %d (%s)" % (kept, of, _pct(kept / of).strip()) for kept, of in arms]  # both arms hold some
        lines.append("    !! outcome attrition: %s alternative and %s default assignments have an outcome (p %s): "
                     "this comparison is untrustworthy" % (*shares, p_text(row["attrition_p_value"])))
    return lines


def _routing_blocks(document: dict, srm: dict | None = None) -> list[tuple]:
    """The text in blocks, each (lines, headers, rows, indent): prose lines (headers None), or
    fixed-width rows whose table form has `headers` and `rows`, indented by `indent`."""
    headers = ("tier", "model:effort", "tasks", "first", "95%", "passed", "unfinished", "attempts", "dwarf min")
    lines = ["  %-7s %-26s %5s %6s %-13s %6s %10s %8s %8s" % headers]
    rows = []
    for r in document["observational"]:
        low, high = r["ci"]
        cells = (r["tier"], r["spec"], r["tasks"], _pct(r["first_pass"]), _pct(low).strip(), _pct(high).strip(),
                 _pct(r["passed"]), r["unfinished"], r["attempts"],
                 "-" if r["runtime_min"] is None else "%.1f" % r["runtime_min"])
        lines.append("  %-7s %-26s %5d %6s [%s-%s] %6s %10d %8.1f %8s" % cells)
        rows.append([cells[0], cells[1], "%d" % cells[2], cells[3].strip(), "[%s-%s]" % cells[4:6], cells[6].strip(),
                     "%d" % cells[7], "%.1f" % cells[8], cells[9]])
    blocks = [(["observational: first attempts by declared tier and the model that ran them",
                "  (routing chose who ran what, so a model given the hard tasks looks worse than it is)"], None, None, 0),
              (lines, headers, rows, 2, (0, 1)),
              (["  dwarf min: median minutes per task that the implementer (dwarf) ran, its dispatches summed"],
               None, None, 0)]
    prose = ["", "randomized (plan --explore): each pair of models, tasks counted in the arm they were assigned"]
    pairs = [r for r in document["randomized"] if "note" not in r]
    prose += ["  (%s)" % r["note"] for r in document["randomized"] if "note" in r]
    if not pairs:
        prose.append("  no exploratory decisions in pairs yet; `plan` explores at 0.2 by default")
    arm_headers = ("arm", "model", "assigned", "first-pass", "n_eff", "not followed", "no outcome", "dwarf min")
    mismatched = {} if srm is None else flagged_pairs(srm)
    for r in pairs:
        d, a = r["arms"]["default"], r["arms"]["alternative"]
        prose.append("  %s: %s (default) vs %s (%s), %d run(s)%s" % (
            r["tier"], r["default"], r["alternative"], r["alternative_is"], r["runs"],
            ", judged at window %d" % r["window"] if r["window"] else ""))
        blocks.append((prose, None, None, 0))
        lines, rows = [], []
        for name, arm in (("default", d), ("alternative", a)):
            cells = (name, arm["spec"], arm["assigned"], _pct(arm["first_pass"]),
                     "-" if arm["n_eff"] is None else "%5.1f" % arm["n_eff"], arm["not_followed"],
                     arm["no_outcome"], "-" if arm["runtime_min"] is None else "%.1f" % arm["runtime_min"])
            lines.append("    %-11s %-24s assigned %3d  first-pass %s  n_eff %5s  not followed %d  no outcome %d  dwarf min %s" % cells)
            rows.append([cells[0], cells[1], "%d" % cells[2], cells[3].strip(), cells[4].strip(), "%d" % cells[5],
                         "%d" % cells[6], cells[7]])
        blocks.append((lines, arm_headers, rows, 4, (0, 1)))
        prose = []
        ci = r["ci"]
        if r["difference"] is not None or (ci and ci != [None, None]):
            prose.append("    difference %s%s" % (_signed(r["difference"]),
                                                  "" if not ci else "  95%% [%s, %s]" % (_signed(ci[0]), _signed(ci[1]))))
        prose.append("    -> %s" % r["verdict"])
        if (r["tier"], r["default"], r["alternative"]) in mismatched:
            prose += _mismatch_lines(mismatched[(r["tier"], r["default"], r["alternative"])])
    blocks.append((prose, None, None, 0))
    return blocks



def routing_frames(document: dict, scope: Scope) -> dict[str, pl.DataFrame]:
    """The forge_routing_* tables; a non-finite number is null, as --json writes it."""
    document = finite_or_none(document)
    now = datetime.now(timezone.utc)
    common = {"scope_repo": scope.repo, "scope_since_unix": scope.since, "computed_at": now}
    observational = [
        {**{k: r[k] for k in ("tier", "spec", "tasks", "first_pass", "passed", "unfinished", "runtime_min")},
         "attempts": float(r["attempts"]), "ci_low": r["ci"][0], "ci_high": r["ci"][1], **common}
        for r in document["observational"]
    ]
    randomized = []
    for r in document["randomized"]:
        if "note" in r:
            randomized.append({"note": r["note"], **common})
            continue
        row = {"tier": r["tier"], "default_spec": r["default"], "alternative": r["alternative"],
               "alternative_is": r["alternative_is"], "window": r["window"], "runs": r["runs"],
               "difference": r["difference"], "ci_low": (r["ci"] or [None, None])[0],
               "ci_high": (r["ci"] or [None, None])[1], "verdict": r["verdict"], **common}
        for arm in ("default", "alternative"):
            for key, value in r["arms"][arm].items():
                if key != "spec":
                    row[f"{arm}_{key}"] = value
        randomized.append(row)
    return {
        t.OBSERVATIONAL: report_frame(observational, t.OBSERVATIONAL),
        t.RANDOMIZED: report_frame(randomized, t.RANDOMIZED),
    }


# ---- survival ------------------------------------------------------------------------------

def survival_document(warehouse: Warehouse) -> dict:
    """{"groups": [...]}: per model, tier and horizon, the survival join's numbers."""
    connection = connect(warehouse, [t.OUTCOMES, t.ATTEMPTS, t.DISPATCHES, t.TASKS])
    try:
        frame = run_query(connection, "forge_survival")
    finally:
        connection.close()
    groups = []
    for row in frame.iter_rows(named=True):
        low, high = wilson(row["reverted"], row["tasks"])
        groups.append(dict(
            model=row["model"], tier=row["tier"], horizon_days=row["horizon_days"], tasks=row["tasks"],
            lines_added=row["lines_added"], lines_surviving=row["lines_surviving"],
            surviving_share=row["lines_surviving"] / row["lines_added"] if row["lines_added"] else None,
            reverted=row["reverted"], revert_rate=row["reverted"] / row["tasks"] if row["tasks"] else None,
            revert_ci=[low, high], lost=row["lost"], unmatched=row["unmatched"],
        ))
    return {"groups": groups}


def survival_text(document: dict, width: int | None = None) -> str:
    """The seed's text; `width` as for `routing_text`."""
    headers = ("model:effort", "tier", "horizon", "tasks", "added", "surviving", "share", "reverted", "revert 95%",
               "lost", "unmatched")
    lines, rows = ["  %-28s %-7s %7s %5s %7s %8s %6s %8s %-13s %4s %9s" % headers], []
    prose = ["survival of merged work: lines still credited to the task at the horizon, and reverts"]
    if not document["groups"]:
        prose.append("  no survival outcomes yet; run `loopmeter harvest survival` after `ingest forge` (with "
                     "--include-temp for repositories under the temporary directory)")
    for g in document["groups"]:
        low, high = g["revert_ci"]
        cells = (g["model"] or "(no attempt names it)", g["tier"] or "-", g["horizon_days"], g["tasks"], g["lines_added"],
                 g["lines_surviving"], _pct(g["surviving_share"]), g["reverted"],
                 "-" if low is None else "[%s-%s]" % (_pct(low).strip(), _pct(high).strip()), g["lost"], g["unmatched"])
        lines.append("  %-28s %-7s %6sd %5d %7d %8d %6s %8d %-13s %4d %9d" % cells)
        rows.append([cells[0], cells[1], "%sd" % cells[2], *("%d" % cell for cell in cells[3:6]), cells[6].strip(),
                     "%d" % cells[7], cells[8], "%d" % cells[9], "%d" % cells[10]])
    blocks = [(prose[:1], None, None, 0), (lines, headers, rows, 2, (0, 1, 2))] + [(prose[1:], None, None, 0)]
    if not document["groups"]:  # the seed's order: the title, the header line, then this line
        blocks = [(prose[:1], None, None, 0), (lines, None, None, 0), (prose[1:], None, None, 0)]
    return fitted(blocks, width)


def survival_frame(document: dict) -> pl.DataFrame:
    now = datetime.now(timezone.utc)
    rows = [{**{k: v for k, v in g.items() if k != "revert_ci"}, "revert_ci_low": g["revert_ci"][0],
             "revert_ci_high": g["revert_ci"][1], "computed_at": now} for g in document["groups"]]
    return report_frame(rows, t.SURVIVAL)


def surviving_share(lines_surviving: int, lines_added: int, tasks: int) -> tuple[float | None, float | None, float | None]:
    """(share, low, high): the share of added lines still credited to their tasks, and its Wilson 95 %
    interval over n = tasks (k = share × tasks). A task's lines survive or go together (a revert or a
    rewrite takes many at once), so the lines are not independent draws: the tasks are. None when
    no line was added."""
    if not lines_added or not tasks:
        return None, None, None
    share = lines_surviving / lines_added
    low, high = wilson(share * tasks, tasks)
    return share, low, high


def survival_curves(document: dict) -> list[dict]:
    """Per model (every tier together; null: no attempt names the outcome's commit), one point per
    horizon at which its tasks added lines: {model, points: [{days, tasks, lines_added,
    lines_surviving, share, low, high}]}, models as the document orders them, points by days."""
    if not document["groups"]:
        return []
    frame = pl.DataFrame(document["groups"], schema_overrides={"model": pl.String}, infer_schema_length=None).select(
        "model", "horizon_days", "tasks", "lines_added", "lines_surviving")
    summed = (frame.with_row_index("order")
              .group_by("model", "horizon_days")
              .agg(pl.col("order").min(), pl.col("tasks", "lines_added", "lines_surviving").sum())
              .filter(pl.col("lines_added") > 0)
              .with_columns(pl.col("order").min().over("model").alias("model_order"))
              .sort("model_order", "horizon_days"))
    curves: dict = {}
    for row in summed.iter_rows(named=True):
        share, low, high = surviving_share(row["lines_surviving"], row["lines_added"], row["tasks"])
        curves.setdefault(row["model"], []).append(dict(
            days=row["horizon_days"], tasks=row["tasks"], lines_added=row["lines_added"],
            lines_surviving=row["lines_surviving"], share=share, low=low, high=high))
    return [dict(model=model, points=points) for model, points in curves.items()]


# ---- harvest survival: what it found, per horizon ------------------------------------------

def harvest_days(horizons: list[int]) -> str:
    """[7, 14, 30] -> "7, 14 and 30 days"."""
    shown = [str(days) for days in horizons]
    return (", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]) + " days"


def harvest_text(found, dry_run: bool, width: int | None = None) -> str:
    """The harvest's summary: the outcomes recorded (or, `dry_run`, that would be) and the counts by
    reason. One horizon: a line, then a line per count that is not 0. Several: a line, then a row
    per horizon with a column per count that is not 0 at some horizon."""
    from .survival import COUNT_KEYS

    label = "would record" if dry_run else "recorded"
    results = found.results
    total = sum(len(result.outcomes) for result in results)
    title = "%s %d survival outcome(s) at %s" % (label, total, harvest_days([r.horizon_days for r in results]))
    if len(results) == 1:
        counts = results[0].counts
        return fitted([([title] + ["  %-17s %d" % (key, counts[key]) for key in COUNT_KEYS if counts.get(key)],
                        None, None, 0)], width)
    keys = [key for key in COUNT_KEYS if any(result.counts.get(key) for result in results)]
    headers = ["horizon", label, *keys]
    rows = [["%dd" % result.horizon_days, "%d" % len(result.outcomes), *("%d" % result.counts[key] for key in keys)]
            for result in results]
    sizes = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)]
    lines = ["  " + "  ".join(header.rjust(size) for header, size in zip(headers, sizes))]
    lines += ["  " + "  ".join(cell.rjust(size) for cell, size in zip(row, sizes)) for row in rows]
    return fitted([([title], None, None, 0), (lines, headers, rows, 2)], width)


def skipped_temp_note(found) -> str | None:
    """What to say of the integrations left out for being under the temporary directory, if any."""
    skipped = found.results[0].counts.get("skipped_temp", 0) if found.results else 0  # the same at every horizon
    if not skipped:
        return None
    return (f"note: {skipped} integration(s) in repositories under the temporary directory were not harvested "
            "(pass --include-temp to measure them)")


def unharvested_notes(found) -> list[str]:
    """A line per integration or task left unharvested, with its reason; one at several horizons is
    one line naming them."""
    entries: dict[tuple, list[int]] = {}
    for result in found.results:
        for entry in result.unharvested:
            entries.setdefault(tuple(entry.items()), []).append(result.horizon_days)
    lines = []
    for items, horizons in entries.items():
        entry = dict(items)
        what = f"{entry['run']} {entry['candidate'][:12]}" + (f" task {entry['task']}" if "task" in entry else "")
        where = "" if len(found.results) == 1 else f" at {harvest_days(horizons)}"
        place = entry["path"] or "no path"
        lines.append(f"not harvested{where}: {entry['repo']} ({place}) integration {what}: "
                     f"{entry['reason']}: {entry['detail']}")
    return lines


def harvest_problems_line(found) -> str:
    """The stderr line when asked-for work could not be done (exit 3)."""
    if len(found.results) == 1:
        return (f"loopmeter: {found.problems} integration(s) or task(s) could not be harvested; "
                "they are tried again next time")
    per = ", ".join(f"{result.problems} at {result.horizon_days} days" for result in found.results if result.problems)
    return f"loopmeter: integration(s) or task(s) could not be harvested ({per}); they are tried again next time"
