"""Sample ratio mismatch (SRM) of the randomized routing table, two checks per (tier, default, alternative) pair,
over every paired assignment the randomized table is built from (before its window cut):

- assignment ratio: did the pair's draws split between the default and the alternative as their logged
  propensities say? `forge_routing_srm.sql` counts the assignments and the alternative draws, sums P(alternative)
  into the expected count, and forms Pearson's chi-square over the two cells; here the p-value (chi-square, one
  degree of freedom: erfc(sqrt(x / 2))) is added. Beside it, `p_value_bound`: a Chernoff bound on the exact
  probability of a split at least this uneven, valid whatever the propensities.
- outcome attrition: did as large a share of each arm's assignments end with an outcome (attempt 1 passed or
  failed review: the tasks the routing comparison's first-pass rates average)? `forge_routing_srm.sql` counts them
  per arm and `forge_routing_attrition.sql` gives Fisher's exact two-sided p-value of the arm-by-outcome table.

Flags: `srm` and `attrition_srm`, each check at p < 0.001 (MISMATCH_P), the level of one look at one pair;
`untrustworthy`, the report's verdict, when either check has p < 0.00025 (UNTRUSTWORTHY_P), with the checks that
fired in `untrustworthy_checks`: at that level a correct store of three pairs is flagged in at most 0.2 % of looks
(docs/statistics.md gives the measured rates, over one look and forty). Where a cell expects fewer than 5 the
chi-square's p-value can be far too small, so there the assignment check fires only when the exact bound is below
UNTRUSTWORTHY_P too; a chi-square the bound does not confirm is told as resting on few assignments
(`few_assignments`), not as a verdict.
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import polars as pl

from ..duckdb_module import duckdb
from ..sql.queries import query_text, run_query
from ..storage import Warehouse
from . import tables as t
from .routing import Scope, assignments, pair_key, routing_report, scope_tasks

MISMATCH_P = 0.001  # `srm` and `attrition_srm`: a check's p-value below this, at one look
# `untrustworthy`: a check's p-value below this. Six checks (two per pair, three pairs) at 0.00025 keep a correct
# store's chance of a flag per look at most 0.2 % (0.128 % at the demo's size: docs/statistics.md, bench/srm_rates.py).
UNTRUSTWORTHY_P = 0.00025
MIN_EXPECTED = 5.0  # below this expected count the chi-square's p-value needs the exact bound's confirmation
CHECKS = {"assignment": "assignment ratio", "attrition": "outcome attrition"}  # untrustworthy_checks: names, words
KEYS = ("tier", "default", "alternative", "assigned", "alternative_assigned", "expected_alternative",
        "chi_square", "p_value", "srm", "p_value_bound", "default_with_outcome", "alternative_with_outcome",
        "attrition_p_value", "attrition_srm", "untrustworthy", "untrustworthy_checks")


def chernoff(observed: pl.Expr, expected: pl.Expr) -> pl.Expr:
    """An upper bound on the exact probability that a sum of independent Bernoulli draws with mean
    `expected` lands at `observed` or beyond it (above it if `observed` is larger, below it if
    smaller): exp(observed - expected + observed * ln(expected / observed)), exp(-expected) at 0,
    0 when nothing was expected and something observed, 1 when they are equal."""
    exponent = observed - expected + observed * (expected / observed).log()
    return pl.when(observed == 0).then((-expected).exp()).otherwise(exponent.exp()).clip(upper_bound=1.0)


def srm_rows(connection: duckdb.DuckDBPyConnection) -> list[dict]:
    """The SRM rows from the forge_routing_assignments table of `connection` (`routing.assignments`),
    in the randomized table's order of pairs; the pairs' counts are left in `connection` as the temporary
    table forge_routing_srm."""
    connection.sql(f"CREATE OR REPLACE TEMP TABLE forge_routing_srm AS {query_text('forge_routing_srm')}")
    cells = run_query(connection, "forge_routing_attrition")
    chi = cells.get_column("chi_square").to_list()
    p_value = pl.Series("p_value", [math.erfc(math.sqrt(x / 2)) for x in chi], dtype=pl.Float64)
    observed_default = pl.col("assigned") - pl.col("alternative_assigned")
    bound = (2 * pl.min_horizontal(chernoff(pl.col("alternative_assigned"), pl.col("expected_alternative")),
                                   chernoff(observed_default, pl.col("expected_default")))).clip(upper_bound=1.0)
    enough = pl.min_horizontal("expected_alternative", "expected_default") >= MIN_EXPECTED
    assignment = (pl.col("p_value") < UNTRUSTWORTHY_P) & (enough | (pl.col("p_value_bound") < UNTRUSTWORTHY_P))
    fired = pl.concat_list(pl.when(assignment).then(pl.lit("assignment")),
                           pl.when(pl.col("attrition_p_value") < UNTRUSTWORTHY_P).then(pl.lit("attrition")))
    flagged = cells.with_columns(p_value, p_value_bound=bound).with_columns(
        srm=pl.col("p_value") < MISMATCH_P,
        chi_square=pl.when(pl.col("chi_square").is_infinite()).then(None).otherwise(pl.col("chi_square")),
        attrition_srm=pl.col("attrition_p_value") < MISMATCH_P,
        untrustworthy_checks=fired.list.drop_nulls(),
    ).with_columns(untrustworthy=pl.col("untrustworthy_checks").list.len() > 0).rename({"default_spec": "default"})
    rows = flagged.select(KEYS).to_dicts()
    return sorted(rows, key=lambda row: pair_key((row["tier"], row["default"], row["alternative"])))


def srm_report(connection: duckdb.DuckDBPyConnection, scope: Scope = Scope()) -> dict:
    """{"rows": [...]} for the tasks of `scope` (`report srm --json`)."""
    scope_tasks(connection, scope)
    assignments(connection)
    return {"rows": srm_rows(connection)}


def srm_document(warehouse: Warehouse, scope: Scope = Scope()) -> dict:
    """{"rows": [one dict per randomized pair, its keys KEYS]} for the Forge tables of `warehouse`."""
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
    """A pair whose chi-square alone would make it untrustworthy, but a cell expects too few for that p-value
    and the exact bound does not confirm it: too few assignments to tell, not a verdict."""
    return row["p_value"] < UNTRUSTWORTHY_P and "assignment" not in row["untrustworthy_checks"]


def flagged_pairs(document: dict) -> dict[tuple, dict]:
    """The rows of an SRM document whose pair's comparison is untrustworthy, by (tier, default, alternative)."""
    return {(r["tier"], r["default"], r["alternative"]): r for r in document["rows"] if r["untrustworthy"]}


def checks_text(row: dict) -> str:
    """Which checks make the pair untrustworthy, in words ("no" for none), and "(ratio: few)" where the
    assignment ratio's chi-square alone rests on too few assignments to tell."""
    words = ", ".join(CHECKS[check] for check in row["untrustworthy_checks"]) or "no"
    return words + (" (ratio: few)" if few_assignments(row) else "")


def srm_json(document: dict) -> str:
    """`report srm --json`: keys sorted, two-space indent, as the routing report's."""
    return json.dumps(document, indent=2, sort_keys=True, allow_nan=False)


def p_text(p: float) -> str:
    if p >= 1e-4:
        return "%.4f" % p
    return "%.1e" % p if p >= 1e-300 else "<1e-300"


_ROW = "  %-7s %-24s %-24s %8s %8s %9s %10s %8s %15s %12s %11s  %s"


def _two_places(value: float) -> str:
    """A statistic to two decimals, or, from a million on, in three significant digits with its exponent
    (a chi-square of 6e201 from propensities near zero is not printed as 200 digits)."""
    return "%.2f" % value if abs(value) < 1e6 else "%.3g" % value


def srm_text(document: dict, width: int | None = None) -> str:
    """The SRM rows for people; at a `width` they are wider than, a table of the same values."""
    from .text import fitted

    title = ["sample ratio mismatch: per randomized pair, every paired assignment (no window): do the draws split as "
             "the logged propensities say (assignment ratio), and does each arm keep the same share of assignments "
             "with an outcome (outcome attrition)?"]
    if not document["rows"]:
        return fitted([(title + ["  no exploratory decisions in pairs yet; `plan` explores at 0.2 by default"],
                        None, None, 0)], width)
    headers = ("tier", "default", "alternative", "assigned", "to alt.", "expected", "chi-square", "p",
               "default outcome", "alt. outcome", "attrition p", "untrustworthy")
    lines = [_ROW % headers]
    rows = []
    for r in document["rows"]:
        cells = (str(r["tier"]), str(r["default"]), str(r["alternative"]), "%d" % r["assigned"],
                 "%d" % r["alternative_assigned"], _two_places(r["expected_alternative"]),
                 "-" if r["chi_square"] is None else _two_places(r["chi_square"]), p_text(r["p_value"]),
                 "%d/%d" % (r["default_with_outcome"], r["assigned"] - r["alternative_assigned"]),
                 "%d/%d" % (r["alternative_with_outcome"], r["alternative_assigned"]),
                 p_text(r["attrition_p_value"]), checks_text(r))
        lines.append(_ROW % cells)
        rows.append(list(cells))
    notes = ["  to alt.: assignments to the alternative; expected: the sum of their P(alternative); chi-square: "
             "Pearson's over the default and alternative cells, 1 degree of freedom, and p its p-value (assignment "
             "ratio)",
             "  default outcome, alt. outcome: of each arm's assignments, those whose attempt 1 passed or failed "
             "review, the tasks the routing comparison's first-pass rates average (the others never ran, were censored or are "
             "still running); attrition p: Fisher's exact test of those shares, default against alternative (outcome "
             "attrition)",
             "  untrustworthy: the checks with p < %g, a level at which a correct store of three pairs is flagged in "
             "at most 0.2 %% of looks (srm and attrition_srm in --json: each check at p < %g)" % (UNTRUSTWORTHY_P,
                                                                                             MISMATCH_P)]
    if any(few_assignments(r) for r in document["rows"]):
        notes.append("  (ratio: few): the chi-square's p < %g, but a cell expects fewer than 5, where that p-value can be far "
                     "too small, and the exact bound (p_value_bound in --json) does not confirm it: too few assignments "
                     "to tell, so not untrustworthy; a real mismatch shows as assignments accumulate" % UNTRUSTWORTHY_P)
    flagged = [r for r in document["rows"] if r["untrustworthy"]]
    if flagged:
        counts = ", ".join("%s: %d" % (words, sum(1 for r in flagged if check in r["untrustworthy_checks"]))
                           for check, words in CHECKS.items())
        notes.append("  -> %d pair(s) untrustworthy (%s): their randomized comparisons cannot be trusted"
                     % (len(flagged), counts))
    return fitted([(title, None, None, 0), (lines, headers, rows, 2), (notes, None, None, 0)], width)


def srm_frame(document: dict, scope: Scope) -> pl.DataFrame:
    """The forge_routing_srm table of an SRM document."""
    from .derive import report_frame as _frame

    now = datetime.now(timezone.utc)
    rows = [{**{k: v for k, v in r.items() if k != "default"}, "default_spec": r["default"],
             "scope_repo": scope.repo, "scope_since_unix": scope.since, "computed_at": now} for r in document["rows"]]
    return _frame(rows, t.SRM)
