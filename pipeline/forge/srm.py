"""Sample ratio mismatch (SRM) of the randomized routing table: did each pair's draws split between
the default and the alternative as their logged propensities say they should?

Per (tier, default, alternative), over every paired assignment the randomized table is built
from (before its window cut): `forge_routing_srm.sql` counts the assignments and the alternative
draws, sums P(alternative) into the expected count, and forms Pearson's chi-square over the two
cells; here the p-value (chi-square, one degree of freedom: erfc(sqrt(x / 2))) and the flag are
added, one row per pair.

The flag, `srm`: true when p < 0.001. Beside it, `p_value_bound`: a Chernoff bound on the exact
probability of a split at least this uneven, valid whatever the propensities. Where an expected
count is below 5 the chi-square's p-value can be far too small; a flagged pair whose bound is not
below 0.001 as well is told as flagged on few assignments (`few_assignments`). docs/statistics.md
says why.
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import duckdb
import polars as pl

from ..sql.queries import run_query
from ..storage import Warehouse
from . import tables as t
from .routing import Scope, assignments, pair_key, routing_report, scope_tasks

MISMATCH_P = 0.001  # a pair is flagged below this p-value
MIN_EXPECTED = 5.0  # below this expected count the chi-square's p-value needs the exact bound's confirmation
KEYS = ("tier", "default", "alternative", "assigned", "alternative_assigned", "expected_alternative",
        "chi_square", "p_value", "srm", "p_value_bound")


def chernoff(observed: pl.Expr, expected: pl.Expr) -> pl.Expr:
    """An upper bound on the exact probability that a sum of independent Bernoulli draws with mean
    `expected` lands at `observed` or beyond it (above it if `observed` is larger, below it if
    smaller): exp(observed - expected + observed * ln(expected / observed)), exp(-expected) at 0,
    0 when nothing was expected and something observed, 1 when they are equal."""
    exponent = observed - expected + observed * (expected / observed).log()
    return pl.when(observed == 0).then((-expected).exp()).otherwise(exponent.exp()).clip(upper_bound=1.0)


def srm_rows(connection: duckdb.DuckDBPyConnection) -> list[dict]:
    """The SRM rows from the forge_routing_assignments table of `connection` (`routing.assignments`),
    in the randomized table's order of pairs."""
    cells = run_query(connection, "forge_routing_srm")
    chi = cells.get_column("chi_square").to_list()
    p_value = pl.Series("p_value", [math.erfc(math.sqrt(x / 2)) for x in chi], dtype=pl.Float64)
    observed_default = pl.col("assigned") - pl.col("alternative_assigned")
    bound = (2 * pl.min_horizontal(chernoff(pl.col("alternative_assigned"), pl.col("expected_alternative")),
                                   chernoff(observed_default, pl.col("expected_default")))).clip(upper_bound=1.0)
    flagged = cells.with_columns(p_value).with_columns(
        srm=pl.col("p_value") < MISMATCH_P,
        p_value_bound=bound,
        chi_square=pl.when(pl.col("chi_square").is_infinite()).then(None).otherwise(pl.col("chi_square")),
    ).rename({"default_spec": "default"})
    rows = flagged.select(KEYS).to_dicts()
    return sorted(rows, key=lambda row: pair_key((row["tier"], row["default"], row["alternative"])))


def srm_report(connection: duckdb.DuckDBPyConnection, scope: Scope = Scope()) -> dict:
    """{"rows": [...]} for the tasks of `scope` (`report srm --json`)."""
    scope_tasks(connection, scope)
    assignments(connection)
    return {"rows": srm_rows(connection)}


def srm_document(warehouse: Warehouse, scope: Scope = Scope()) -> dict:
    """{"rows": [one dict per randomized pair: tier, default, alternative, assigned, alternative_assigned,
    expected_alternative, chi_square, p_value, srm]} for the Forge tables of `warehouse`."""
    from .derive import connect

    connection = connect(warehouse, [t.TASKS, t.REPOS])
    try:
        return srm_report(connection, scope)
    finally:
        connection.close()


def routing_and_srm(warehouse: Warehouse, scope: Scope = Scope()) -> tuple[dict, dict]:
    """`routing_document` and `srm_document` from one session (the scope and its assignments read once)."""
    from .derive import connect

    connection = connect(warehouse, [t.TASKS, t.REPOS])
    try:
        routing = routing_report(connection, scope)
        return routing, {"rows": srm_rows(connection)}
    finally:
        connection.close()


def few_assignments(row: dict) -> bool:
    """A flagged pair whose expected counts are too small for the chi-square's p-value, and whose exact
    bound does not confirm it: flagged on few assignments."""
    fewest = min(row["expected_alternative"], row["assigned"] - row["expected_alternative"])
    return bool(row["srm"]) and fewest < MIN_EXPECTED and row["p_value_bound"] >= MISMATCH_P


def flagged_pairs(document: dict) -> dict[tuple, dict]:
    """The rows of an SRM document whose pair shows a mismatch, by (tier, default, alternative)."""
    return {(r["tier"], r["default"], r["alternative"]): r for r in document["rows"] if r["srm"]}


def srm_json(document: dict) -> str:
    """`report srm --json`: keys sorted, two-space indent, as the routing report's."""
    return json.dumps(document, indent=2, sort_keys=True, allow_nan=False)


def p_text(p: float) -> str:
    if p >= 1e-4:
        return "%.4f" % p
    return "%.1e" % p if p >= 1e-300 else "<1e-300"


def srm_text(document: dict, width: int | None = None) -> str:
    """The SRM rows for people; at a `width` they are wider than, a table of the same values."""
    from .text import fitted

    title = ["sample ratio mismatch: per randomized pair, every paired assignment (no window), the alternative's "
             "draws against the sum of P(alternative)"]
    if not document["rows"]:
        return fitted([(title + ["  no exploratory decisions in pairs yet; `plan` explores at 0.2 by default"],
                        None, None, 0)], width)
    headers = ("tier", "default", "alternative", "assigned", "to alt.", "expected", "chi-square", "p", "SRM")
    lines = ["  %-7s %-24s %-24s %8s %11s %9s %10s %8s  %s" % headers]
    rows = []
    for r in document["rows"]:
        cells = (str(r["tier"]), str(r["default"]), str(r["alternative"]), "%d" % r["assigned"],
                 "%d" % r["alternative_assigned"], "%.2f" % r["expected_alternative"],
                 "-" if r["chi_square"] is None else "%.2f" % r["chi_square"], p_text(r["p_value"]),
                 ("yes, few" if few_assignments(r) else "yes") if r["srm"] else "no")
        lines.append("  %-7s %-24s %-24s %8s %11s %9s %10s %8s  %s" % cells)
        rows.append(list(cells))
    notes = ["  to alt.: assignments to the alternative; expected: the sum of their P(alternative); chi-square: "
             "Pearson's over the default and alternative cells, 1 degree of freedom; SRM: p < 0.001"]
    if any(few_assignments(r) for r in document["rows"]):
        notes.append("  yes, few: p < 0.001, but a cell expects fewer than 5 and the exact bound (p_value_bound) does "
                     "not confirm it: too few assignments to be sure")
    flagged = sum(1 for r in document["rows"] if r["srm"])
    if flagged:
        notes.append("  -> %d pair(s) with a mismatch: their randomized comparisons are untrustworthy" % flagged)
    return fitted([(title, None, None, 0), (lines, headers, rows, 2), (notes, None, None, 0)], width)


def srm_frame(document: dict, scope: Scope) -> pl.DataFrame:
    """The forge_routing_srm table of an SRM document."""
    from .derive import report_frame as _frame

    now = datetime.now(timezone.utc)
    rows = [{**{k: v for k, v in r.items() if k != "default"}, "default_spec": r["default"],
             "scope_repo": scope.repo, "scope_since_unix": scope.since, "computed_at": now} for r in document["rows"]]
    return _frame(rows, t.SRM)
