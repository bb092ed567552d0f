"""The sample-ratio-mismatch check of the randomized pairs (`report srm`): by hand, against scipy's
chi-square test and a slow, obvious count, against the exact distribution of the draws, and as a user
runs it — including a store whose router logs propensities its draws do not follow."""
from __future__ import annotations

import json
import random
import re

import duckdb
import polars as pl
import pytest
import scipy.stats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from forge_fixtures import decision, event, ingested, seed_json, seed_routing, write_store
from loopmeter.forge import samples, srm
from loopmeter.forge import tables as t
from loopmeter.forge.reports import routing_document, routing_text
from loopmeter.forge.routing import Scope

PAIRS = {"low": ("flash", "sonnet"), "medium": ("sonnet", "flash"), "high": ("opus", "sol")}


# ---- stores of draws, and the obvious computation over the same draws ---------------------------

def draw_events(draws: list[tuple], run_size: int = 6, start: float = 1000.0, day: float = 0.0) -> list[dict]:
    """A store holding `draws`, each (tier, to_alternative, propensity of the chosen spec[, finished]) a task of
    its own, `run_size` tasks a run: a plan routing each task, then its attempt 1 (started, passed or failed).
    A draw whose `finished` is False has no outcome: every other one never ran, the rest only started.
    Run r's events lie `day` * r seconds before `start`."""
    events = []
    for r in range(0, len(draws), run_size):
        run, t0 = f"run-{r // run_size}", start - day * (r // run_size)
        plan = {}
        for k, (tier, to_alternative, propensity, *_) in enumerate(draws[r:r + run_size]):
            default, alternative = PAIRS[tier]
            chosen = alternative if to_alternative else default
            plan[f"t{k}"] = {"declared_difficulty": tier, "route": [
                decision(f"{run}-d{k}", t0 + 1 + k, tier, default, alternative, chosen, propensity)]}
        events.append(event(f"{run}-p", "plan", t0, run=run, data=dict(revision=1, tasks=plan)))
        for k, (tier, to_alternative, _, *finished) in enumerate(draws[r:r + run_size]):
            spec = PAIRS[tier][1 if to_alternative else 0]
            statuses = ("started", "passed" if k % 3 else "failed")
            if finished and not finished[0]:
                statuses = ("started",) if (r + k) % 2 else ()
            for step, status in enumerate(statuses):
                events.append(event(f"{run}-a{k}-{step}", "attempt", t0 + 100 + k + step * 10, run=run, task=f"t{k}",
                                    data=dict(n=1, dwarf=spec, status=status)))
    return events


def obvious(draws: list[tuple]) -> dict[tuple, tuple[int, int, float]]:
    """Per pair, (assigned, to the alternative, the sum of P(alternative)), one draw at a time."""
    found: dict[tuple, list] = {}
    for tier, to_alternative, propensity, *_ in draws:
        cell = found.setdefault((tier, *PAIRS[tier]), [0, 0, 0.0])
        cell[0] += 1
        cell[1] += 1 if to_alternative else 0
        cell[2] += propensity if to_alternative else 1 - propensity
    return {pair: tuple(cell) for pair, cell in found.items()}


def outcomes(draws: list[tuple]) -> dict[tuple, tuple[int, int]]:
    """Per pair, (default assignments with an outcome, alternative ones with an outcome), one draw at a time."""
    found: dict[tuple, list] = {}
    for tier, to_alternative, _, *finished in draws:
        cell = found.setdefault((tier, *PAIRS[tier]), [0, 0])
        cell[1 if to_alternative else 0] += 1 if not finished or finished[0] else 0
    return {pair: tuple(cell) for pair, cell in found.items()}


def by_pair(document: dict) -> dict[tuple, dict]:
    return {(r["tier"], r["default"], r["alternative"]): r for r in document["rows"]}


def scipy_test(assigned: int, observed: int, expected: float):
    """scipy's Pearson chi-square over the cells (default, alternative)."""
    return scipy.stats.chisquare([assigned - observed, observed], [assigned - expected, expected])


def poisson_binomial(p: list[float]) -> list[float]:
    """P(X = k), k = 0..n, X the number of successes of independent draws with probabilities `p`."""
    pmf = [1.0]
    for q in p:
        pmf = [(pmf[k] if k < len(pmf) else 0.0) * (1 - q) + (pmf[k - 1] * q if k else 0.0) for k in range(len(pmf) + 1)]
    return pmf


def exact_two_sided(p: list[float], observed: int) -> float:
    pmf = poisson_binomial(p)
    return min(1.0, 2 * min(sum(pmf[:observed + 1]), sum(pmf[observed:])))


def rows_of(table: list[dict]) -> list[dict]:
    """srm.srm_rows over a forge_routing_assignments table of `table` rows (tier, arm, propensity[, first_pass]:
    true when missing)."""
    frame = pl.DataFrame(
        [dict(task_order=i, paired=True, tier=r["tier"], default_spec=PAIRS[r["tier"]][0],
              alternative=PAIRS[r["tier"]][1], arm=r["arm"], propensity=r["propensity"],
              first_pass=r.get("first_pass", True)) for i, r in enumerate(table)],
        schema={"task_order": pl.Int64, "paired": pl.Boolean, "tier": pl.String, "default_spec": pl.String,
                "alternative": pl.String, "arm": pl.String, "propensity": pl.Float64, "first_pass": pl.Boolean})
    connection = duckdb.connect()
    try:
        connection.register("frame", frame)
        connection.execute("CREATE TEMP TABLE forge_routing_assignments AS SELECT * FROM frame")
        return srm.srm_rows(connection)
    finally:
        connection.close()


# ---- by hand ----------------------------------------------------------------------------------

def test_a_store_computed_by_hand(tmp_path):
    # low: P(alternative) 0.2, 0.2, 0.5, 0.5; two drew the alternative. high: the default with certainty.
    draws = [("low", True, 0.2), ("low", False, 0.8), ("low", False, 0.5), ("low", True, 0.5),
             ("high", False, 1.0), ("high", False, 1.0)]
    events = draw_events(draws, run_size=3)
    # not counted: a draw among three specs, a propensity of 0 (unknown), a fractal run, a task under no decision
    extra = {"u1": {"declared_difficulty": "low", "route": [dict(decision="u1", at=5, tier="low", default="flash",
                                                                 candidates=["flash", "sonnet", "opus"], chosen="opus")]},
             "u2": {"declared_difficulty": "low", "route": [decision("u2", 5, "low", "flash", "sonnet", "sonnet", 0)]},
             "u3": {"declared_difficulty": "low", "route": []}}
    events.append(event("x-p", "plan", 2, run="x", data=dict(revision=1, tasks=extra)))
    events.append(event("f-p", "plan", 2, run="f", data=dict(revision=1, fractal_selection={"enabled": True}, tasks={
        "t0": {"declared_difficulty": "low", "route": [decision("f0", 5, "low", "flash", "sonnet", "sonnet", 0.2)]}})))
    warehouse = ingested(tmp_path, write_store(tmp_path / "dataset.sqlite", events))
    rows = srm.srm_document(warehouse)["rows"]
    # chi-square: (2 - 1.4)^2 / 1.4 + (2 - 2.6)^2 / 2.6 = 0.36 * 4 / 3.64 = 0.395604; p = 2 (1 - Phi(sqrt(0.395604)))
    # = 2 (1 - Phi(0.628971)) = 2 (1 - 0.735316) = 0.529368 (standard normal table)
    chi = 0.36 * 4 / 3.64
    assert [r["tier"] for r in rows] == ["high", "low"]  # the randomized table's order
    high, low = rows
    assert (low["assigned"], low["alternative_assigned"], low["srm"]) == (4, 2, False)
    assert low["expected_alternative"] == pytest.approx(1.4, rel=1e-15)
    assert low["chi_square"] == pytest.approx(chi, rel=1e-12) and chi == pytest.approx(0.3956043956, rel=1e-9)
    assert low["p_value"] == pytest.approx(0.529368, abs=1e-6)
    # drawn with certainty: the alternative cell expects and observes 0 (it adds 0), the default cell is exact
    assert high == dict(tier="high", default="opus", alternative="sol", assigned=2, alternative_assigned=0,
                        expected_alternative=0.0, chi_square=0.0, p_value=1.0, srm=False, p_value_bound=1.0,
                        default_with_outcome=2, alternative_with_outcome=0, attrition_p_value=1.0, attrition_srm=False,
                        untrustworthy=False, untrustworthy_checks=[])
    # every task ran to an outcome: one table fits the margins, attrition p = 1
    assert (low["default_with_outcome"], low["alternative_with_outcome"], low["attrition_p_value"]) == (2, 2, 1.0)


def test_an_assignment_the_propensities_rule_out_is_a_mismatch(tmp_path):
    # the default chosen at P(default) = 1e-17: P(alternative) = 1 - 1e-17 is 1.0 in a double, so the default
    # cell expects 0 and observes 1 (the chi-square is infinite: null, as JSON has no infinity)
    draws = [("low", True, 1.0), ("low", True, 1.0), ("low", False, 1e-17)]
    warehouse = ingested(tmp_path, write_store(tmp_path / "dataset.sqlite", draw_events(draws)))
    (row,) = srm.srm_document(warehouse)["rows"]
    assert row == dict(tier="low", default="flash", alternative="sonnet", assigned=3, alternative_assigned=2,
                       expected_alternative=3.0, chi_square=None, p_value=0.0, srm=True, p_value_bound=0.0,
                       default_with_outcome=1, alternative_with_outcome=2, attrition_p_value=1.0, attrition_srm=False,
                       untrustworthy=True, untrustworthy_checks=["assignment"])
    result = run_cli("report", "srm", "--json", warehouse=warehouse.root, check=None)
    assert result.returncode == 0, result.stderr
    assert '"chi_square": null' in result.stdout and json.loads(result.stdout)["rows"] == [row]


@pytest.mark.parametrize(("propensity", "chi", "p", "flag", "verdict"), [
    (0.5, 1.0, 0.31731050786291415, False, False),  # one fair coin: nothing to see
    # a 5% draw that came up: chi-square (0.95^2 / 0.05 + 0.95^2 / 0.95) = 19, P(chi2_1 >= 19) = 1.3e-5, but the expected cells
    # (0.05 and 0.95) are far below 5 and the exact probability of the draw is 0.05: srm (the chi-square's flag), but
    # no verdict: the exact bound, 2 * 0.05 * e^0.95 = 0.26, does not confirm it
    (0.05, 19.0, 1.3071845366763e-05, True, False),
    # a 1e-4 draw that came up: the Chernoff bound 1e-4 * e^0.9999 = 2.7e-4 (times 2: 5.4e-4) is below 0.001, not
    # below the verdict's 0.00025: no verdict on so few assignments
    (1e-4, 9999.0, 0.0, True, False),
    # a 1e-5 draw: 2 * 1e-5 * e^0.99999 = 5.4e-5 confirms it
    (1e-5, 99999.0, 0.0, True, True),
])
def test_a_single_assignment(tmp_path, propensity, chi, p, flag, verdict):
    warehouse = ingested(tmp_path, write_store(tmp_path / "dataset.sqlite", draw_events([("low", True, propensity)])))
    (row,) = srm.srm_document(warehouse)["rows"]
    assert (row["assigned"], row["alternative_assigned"], row["srm"], row["untrustworthy"]) == (1, 1, flag, verdict)
    assert row["untrustworthy_checks"] == (["assignment"] if verdict else [])
    assert row["chi_square"] == pytest.approx(chi, rel=1e-12) and row["p_value"] == pytest.approx(p, rel=1e-9, abs=1e-300)
    # the exact bound confirms the 1e-5 draw only: the others are told as resting on few assignments
    assert srm.few_assignments(row) == (propensity in (0.05, 1e-4))
    assert srm.checks_text(row) == {0.5: "no", 0.05: "no (ratio: few)", 1e-4: "no (ratio: few)",
                                    1e-5: "assignment ratio"}[propensity]
    assert row["p_value_bound"] < srm.MISMATCH_P if propensity < 1e-3 else row["p_value_bound"] > srm.MISMATCH_P


def test_a_chi_square_on_few_assignments_that_the_exact_chance_does_not_bear_out_is_no_verdict(tmp_path):
    # 2 of 10 draws at P(alternative) = 0.02 went to the alternative: 0.2 expected, X^2 = 1.8^2 / 0.2 + 1.8^2 / 9.8 =
    # 16.53 and p = 4.8e-5, but the exact chance of 2 or more is 0.0162 (scipy) and the bound 2 e^1.8 (0.1)^2 = 0.121
    draws = [("low", i < 2, 0.02 if i < 2 else 0.98) for i in range(10)]
    warehouse = ingested(tmp_path, write_store(tmp_path / "dataset.sqlite", draw_events(draws)))
    (row,) = srm.srm_document(warehouse)["rows"]
    assert row["chi_square"] == pytest.approx(1.8 ** 2 / 0.2 + 1.8 ** 2 / 9.8, rel=1e-9)
    assert row["p_value"] == pytest.approx(4.787093764535e-05, rel=1e-9) and row["srm"] is True
    assert row["p_value_bound"] == pytest.approx(0.12099294928826, rel=1e-9)
    assert scipy.stats.binom.sf(1, 10, 0.02) < row["p_value_bound"]
    assert (row["untrustworthy"], row["untrustworthy_checks"]) == (False, [])
    shown = run_cli("report", "srm", warehouse=warehouse.root, env={"COLUMNS": "250"}).stdout
    assert "no (ratio: few)" in shown and "too few assignments to tell, so not untrustworthy" in " ".join(shown.split())
    assert "pair(s) untrustworthy" not in shown
    routing = run_cli("report", "routing", warehouse=warehouse.root, env={"COLUMNS": "250"}).stdout
    assert "!!" not in routing and "untrustworthy" not in routing


def test_few_expected_but_a_gross_mismatch_is_flagged():
    # 300 draws at P(alternative) = 0.01 (3 expected), 40 went to the alternative: the Chernoff bound
    # exp(40 - 3 + 40 ln(3 / 40)) = e^-66.6 proves what the chi-square (461, p ~ 1e-102) says
    table = [dict(tier="low", arm="alternative" if i < 40 else "default", propensity=0.01 if i < 40 else 0.99)
             for i in range(300)]
    (row,) = rows_of(table)
    assert row["chi_square"] == pytest.approx(37 ** 2 / 3 + 37 ** 2 / 297, rel=1e-9)
    assert row["srm"] is True and row["p_value"] < 1e-100
    # 4 of 300 (1.33 standard deviations): no mismatch
    table = [dict(r, arm="alternative" if i < 4 else "default", propensity=0.01 if i < 4 else 0.99)
             for i, r in enumerate(table)]
    assert rows_of(table)[0]["srm"] is False


# ---- against scipy and the obvious count, on any store -----------------------------------------

draw_st = st.tuples(st.sampled_from(list(PAIRS)), st.booleans(),
                    st.one_of(st.sampled_from([0.05, 0.15, 0.2, 0.5, 0.8, 0.85, 0.95, 1.0]),
                              st.floats(1e-6, 1.0, allow_nan=False)),
                    st.sampled_from([True, True, False]))  # finished: an outcome, or none (never ran, or started)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(draw_st, min_size=1, max_size=60), st.integers(1, 8))
def test_every_pair_equals_scipy_and_the_obvious_count(tmp_path_factory, draws, run_size):
    tmp = tmp_path_factory.mktemp("srm")
    warehouse = ingested(tmp, write_store(tmp / "dataset.sqlite", draw_events(draws, run_size)))
    document = srm.srm_document(warehouse)
    expected = obvious(draws)
    rows = by_pair(document)
    assert set(rows) == set(expected)
    for pair, (assigned, observed, summed) in expected.items():
        row = rows[pair]
        assert (row["assigned"], row["alternative_assigned"]) == (assigned, observed)
        assert row["expected_alternative"] == pytest.approx(summed, rel=1e-12, abs=1e-12)
        if 0 < row["expected_alternative"] < assigned - 1e-9:  # both cells expect something
            oracle = scipy_test(assigned, observed, row["expected_alternative"])
            assert row["chi_square"] == pytest.approx(oracle.statistic, rel=1e-9, abs=1e-12)
            assert row["p_value"] == pytest.approx(oracle.pvalue, rel=1e-9, abs=1e-300)
            assert row["srm"] == (oracle.pvalue < srm.MISMATCH_P) or abs(oracle.pvalue / srm.MISMATCH_P - 1) < 1e-9
        # outcome attrition: the arms' assignments with an outcome, and Fisher's exact test of them (scipy)
        kept_default, kept_alternative = outcomes(draws)[pair]
        assert (row["default_with_outcome"], row["alternative_with_outcome"]) == (kept_default, kept_alternative)
        table = [[kept_alternative, observed - kept_alternative],
                 [kept_default, assigned - observed - kept_default]]
        fisher = scipy.stats.fisher_exact(table).pvalue
        assert row["attrition_p_value"] == pytest.approx(fisher, rel=1e-9, abs=1e-300)
        assert row["attrition_srm"] == (row["attrition_p_value"] < srm.MISMATCH_P)
        # the assignment check needs the exact bound's confirmation where a cell expects fewer than 5
        fewest = min(summed, assigned - summed)
        assignment = row["p_value"] < srm.UNTRUSTWORTHY_P and (fewest >= 5 or row["p_value_bound"] < srm.UNTRUSTWORTHY_P)
        assert row["untrustworthy_checks"] == [check for check, fired in (("assignment", assignment),
                                               ("attrition", row["attrition_p_value"] < srm.UNTRUSTWORTHY_P)) if fired]
        assert row["untrustworthy"] == bool(row["untrustworthy_checks"])
    # the pairs are the randomized table's, and below its first window its arms count the same assignments
    routing = routing_document(warehouse, Scope())
    pairs = [(r["tier"], r["default"], r["alternative"]) for r in routing["randomized"] if "note" not in r]
    assert pairs == [(r["tier"], r["default"], r["alternative"]) for r in document["rows"]]
    for r in routing["randomized"]:
        if "note" not in r and r["window"] is None:
            row = rows[(r["tier"], r["default"], r["alternative"])]
            assert r["arms"]["default"]["assigned"] + r["arms"]["alternative"]["assigned"] == row["assigned"]
            assert r["arms"]["alternative"]["assigned"] == row["alternative_assigned"]
            # the tasks with an outcome are those the comparison's first-pass rates average: all but no_outcome
            for arm in ("default", "alternative"):
                assert r["arms"][arm]["assigned"] - r["arms"][arm]["no_outcome"] == row[f"{arm}_with_outcome"]


# ---- the flag against the exact distribution of the draws -------------------------------------

@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from([0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 0.99, 1.0])),
                min_size=1, max_size=40))
def test_the_flag_is_the_chi_square_where_it_holds_and_exact_where_it_does_not(draws):
    table = [dict(tier="low", arm="alternative" if to_alternative else "default", propensity=p)
             for to_alternative, p in draws]
    (row,) = rows_of(table)
    p_alternative = [p if to_alternative else 1 - p for to_alternative, p in draws]
    expected = sum(p_alternative)
    observed = sum(1 for to_alternative, _ in draws if to_alternative)
    fewest = min(expected, len(draws) - expected)
    assert row["p_value"] == pytest.approx(scipy.stats.chi2.sf(row["chi_square"], 1) if row["chi_square"] is not None
                                           else 0.0, rel=1e-9, abs=1e-300)
    assert row["srm"] == (row["p_value"] < 0.001)
    # every task has an outcome (no attrition): the verdict is the chi-square's where both cells expect 5 or more,
    # else the chi-square's confirmed by the exact bound
    confirmed = fewest >= 5 + 1e-9 or row["p_value_bound"] < 0.00025
    if fewest > 5 - 1e-9 and fewest < 5 + 1e-9:  # at the rule's edge the summed expectation's rounding decides
        confirmed = row["untrustworthy"] or row["p_value"] >= 0.00025
    assert row["untrustworthy"] == (row["p_value"] < 0.00025 and confirmed), row
    assert srm.few_assignments(row) == (row["p_value"] < 0.00025 and not row["untrustworthy"])
    # the bound is an upper bound of the exact two-sided probability, whatever the propensities
    exact = exact_two_sided(p_alternative, observed)
    assert exact <= row["p_value_bound"] * (1 + 1e-9) + 1e-300, (exact, row)
    if row["untrustworthy"] and fewest < 5 - 1e-9:  # a verdict on few expected is one the exact chance holds
        assert exact < 0.00025, (exact, row)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=30), st.integers(0, 30))
def test_the_chernoff_bound_is_above_the_exact_tail(p, observed):
    observed = min(observed, len(p))
    mean = sum(p)
    bound = pl.select(srm.chernoff(pl.lit(float(observed)), pl.lit(mean))).item()
    pmf = poisson_binomial(p)
    tail = sum(pmf[observed:]) if observed >= mean else sum(pmf[:observed + 1])
    assert bound >= tail * (1 - 1e-9) - 1e-15, (bound, tail)


# ---- a router whose logged propensities its draws do not follow --------------------------------

def miscalibrated_draws() -> list[tuple]:
    """low: drawn at P(sonnet) = 0.3, logged as 0.1 (sonnet) / 0.9 (flash); medium: drawn and logged at 0.15.
    Random(11) makes 88 low draws, 30 of them sonnet (8.8 expected), and 92 medium ones, 8 of them flash (13.8)."""
    rng = random.Random(11)
    draws = []
    for _ in range(180):
        tier = "low" if rng.random() < 0.5 else "medium"
        if tier == "low":
            to_alternative = rng.random() < 0.3
            draws.append((tier, to_alternative, 0.1 if to_alternative else 0.9))
        else:
            to_alternative = rng.random() < 0.15
            draws.append((tier, to_alternative, 0.15 if to_alternative else 0.85))
    return draws


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mismatch")
    draws = miscalibrated_draws()
    store = write_store(tmp / "dataset.sqlite", draw_events(draws))
    return store, ingested(tmp, store), draws


def test_a_miscalibrated_router_is_a_mismatch_and_a_fair_one_is_not(mismatched):
    _, warehouse, draws = mismatched
    result = run_cli("report", "srm", "--json", warehouse=warehouse.root, check=None)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert list(document) == ["rows"] and all(list(row) == sorted(srm.KEYS) for row in document["rows"])
    low, medium = (by_pair(document)[pair] for pair in (("low", "flash", "sonnet"), ("medium", "sonnet", "flash")))
    counts = obvious(draws)
    assert (low["assigned"], low["alternative_assigned"]) == counts[("low", "flash", "sonnet")][:2] == (88, 30)
    assert low["expected_alternative"] == pytest.approx(8.8, rel=1e-12)
    # (30 - 8.8)^2 / 8.8 + (58 - 79.2)^2 / 79.2 = 51.0727 + 5.6747
    assert low["chi_square"] == pytest.approx(21.2 ** 2 / 8.8 + 21.2 ** 2 / 79.2, rel=1e-9)
    oracle = scipy_test(88, 30, 8.8)
    assert low["chi_square"] == pytest.approx(oracle.statistic, rel=1e-9) and oracle.pvalue < 1e-12
    assert low["p_value"] == pytest.approx(oracle.pvalue, rel=1e-9) and low["srm"] is True
    assert (medium["assigned"], medium["alternative_assigned"]) == (92, 8) and medium["srm"] is False
    assert medium["p_value"] == pytest.approx(scipy_test(92, 8, 92 * 0.15).pvalue, rel=1e-9) and medium["p_value"] > 0.05
    # every task ran to an outcome: no attrition; the low pair is untrustworthy for its assignment ratio alone
    assert [(r["attrition_p_value"], r["attrition_srm"]) for r in (low, medium)] == [(1.0, False)] * 2
    assert (low["untrustworthy"], low["untrustworthy_checks"]) == (True, ["assignment"])
    assert (medium["untrustworthy"], medium["untrustworthy_checks"]) == (False, [])


def test_the_routing_report_marks_the_pair_and_its_json_is_unchanged(mismatched):
    store, warehouse, _ = mismatched
    as_json = run_cli("report", "routing", "--json", warehouse=warehouse.root, check=None)
    assert as_json.returncode == 0 and as_json.stdout == seed_json(seed_routing(store)) + "\n"
    text = run_cli("report", "routing", warehouse=warehouse.root, check=None).stdout
    marks = [line for line in text.splitlines() if "sample ratio mismatch" in line]
    assert marks == ["    !! sample ratio mismatch: 30 of 88 assignments went to the alternative, 8.8 expected "
                     "(p 5.0e-14): this comparison is untrustworthy"]
    assert "%.1e" % scipy_test(88, 30, 8.8).pvalue == "5.0e-14"
    block = text.split("\n  low: flash (default) vs sonnet", 1)[1].split("\n  medium:", 1)[0]
    assert marks[0] in block.splitlines() and block.splitlines().index(marks[0]) > 0
    # the mark only adds its line: without the SRM document the text is the seed's
    document = routing_document(warehouse, Scope())
    marked = routing_text(document, None, srm.srm_document(warehouse))
    assert [line for line in marked.splitlines() if line not in marks] == routing_text(document).splitlines()


def test_the_table_holds_the_json_rows_and_both_reports_write_it(mismatched, tmp_path):
    store, _, _ = mismatched
    warehouse = ingested(tmp_path, store)
    assert run_cli("report", "routing", warehouse=warehouse.root, check=None).returncode == 0  # report routing writes it too
    document = json.loads(run_cli("report", "srm", "--json", warehouse=warehouse.root, check=None).stdout)
    stored = warehouse.read(t.SRM)
    assert stored.columns == [name for name, _, _ in t.columns(t.SRM)]
    assert [{**{k: row[k] for k in srm.KEYS if k != "default"}, "default": row["default_spec"]}
            for row in stored.iter_rows(named=True)] == [dict(r) for r in document["rows"]]
    assert stored["scope_repo"].null_count() == stored.height and stored["computed_at"].null_count() == 0


def test_the_text_fits_80_columns_and_says_what_it_flags(mismatched):
    _, warehouse, _ = mismatched
    for command in (["report", "srm"], ["report", "routing"]):
        shown = run_cli(*command, warehouse=warehouse.root, env={"COLUMNS": "80"}).stdout
        assert all(len(line) <= 80 for line in shown.splitlines()), command
    shown = run_cli("report", "srm", warehouse=warehouse.root, env={"COLUMNS": "80"}).stdout
    assert "1 pair(s) untrustworthy (assignment ratio: 1, outcome attrition: 0)" in " ".join(shown.split())
    assert "│ assignment" in shown and "│ no " in shown
    wide = run_cli("report", "srm", warehouse=warehouse.root).stdout.splitlines()  # a pipe: the rows whole
    rows = [line for line in wide if line.startswith(("  low ", "  medium "))]
    assert [row.endswith("  assignment ratio") for row in rows] == [True, False] and rows[1].endswith("  no")
    # the outcome columns (with an outcome / assigned, default then alternative): every task has one, attrition p = 1
    assert rows[0].split()[-5:] == ["58/58", "30/30", "1.0000", "assignment", "ratio"]
    assert rows[1].split()[-4:] == ["84/84", "8/8", "1.0000", "no"]


def test_scope_since_and_repo(tmp_path):
    draws = miscalibrated_draws()[:60]
    now = 1_800_000_000.0
    store = write_store(tmp_path / "dataset.sqlite", draw_events(draws, run_size=6, start=now, day=86400.0),
                        repos=[("api", str(tmp_path / "api"))])
    warehouse = ingested(tmp_path, store)
    # runs 0..2 began 0, 1 and 2 days (plus 100 s) before `now`: the last 2.5 days hold their 18 draws
    scoped = srm.srm_document(warehouse, Scope(since=now - 2.5 * 86400))
    assert by_pair(scoped) == by_pair(rows_document(draws[:18]))
    assert srm.srm_document(warehouse, Scope(repo=str(tmp_path / "api"))) == srm.srm_document(warehouse)
    other = run_cli("report", "srm", "--repo", str(tmp_path), warehouse=warehouse.root, check=None)
    assert other.returncode == 1 and "no Forge repository" in other.stderr


def rows_document(draws: list[tuple]) -> dict:
    return {"rows": rows_of([dict(tier=tier, arm="alternative" if a else "default", propensity=p)
                             for tier, a, p in draws])}


@pytest.mark.slow
def test_the_demo_sample_draws_fairly(tmp_path):
    events = samples.routing_events(300, seed=7)
    warehouse = ingested(tmp_path, samples.write_sqlite(tmp_path / "dataset.sqlite", [("api", "/x")], events))
    rows = srm.srm_document(warehouse)["rows"]
    assert len(rows) == 3 and all(row["assigned"] > 100 for row in rows)
    assert [row["srm"] for row in rows] == [False] * 3
    for row in rows:  # every draw logs P(alternative) = 0.15
        assert row["expected_alternative"] == pytest.approx(0.15 * row["assigned"], rel=1e-12)


def test_without_data_or_pairs(tmp_path):
    result = run_cli("report", "srm", warehouse=tmp_path / "empty", check=None)
    assert result.returncode == 1 and "`loopmeter ingest forge STORE`" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    events = [event("p", "plan", 1, data=dict(revision=1, tasks={"t1": {"declared_difficulty": "low", "route": []}}))]
    warehouse = ingested(tmp_path, write_store(tmp_path / "dataset.sqlite", events))
    assert json.loads(run_cli("report", "srm", "--json", warehouse=warehouse.root, check=None).stdout) == {"rows": []}
    shown = run_cli("report", "srm", warehouse=warehouse.root, check=None).stdout
    assert "no exploratory decisions in pairs yet" in shown
    assert warehouse.read(t.SRM).height == 0
    wrong = run_cli("report", "srm", "--since", "-1", warehouse=warehouse.root, check=None)
    assert wrong.returncode == 2 and "--since" in wrong.stderr


def test_the_html_report_marks_the_mismatched_pair(mismatched, tmp_path):
    _, warehouse, _ = mismatched
    out = tmp_path / "page.html"
    assert run_cli("report", "html", "--out", str(out), warehouse=warehouse.root, check=None).returncode == 0
    page = out.read_text()
    chart = page.split('aria-label="randomized differences"', 1)[1].split("</svg>", 1)[0]
    labels = re.findall(r'class="label">([^<]*)</text>', chart)
    assert "low: sonnet vs flash (SRM: untrustworthy)" in labels
    assert [label for label in labels if "SRM" in label] == ["low: sonnet vs flash (SRM: untrustworthy)"]
    assert "1 pair marked SRM drew the alternative" in page


def test_a_chi_square_beyond_a_million_is_shown_with_its_exponent(tmp_path):
    """A draw at a propensity of 1e-200 that came up has a chi-square near 1e200: the table shows it in
    three significant digits and its exponent, not as 200 digits; the JSON keeps the number."""
    warehouse = ingested(tmp_path, write_store(tmp_path / "dataset.sqlite", draw_events([("low", True, 1e-200)])))
    document = srm.srm_document(warehouse)
    (row,) = document["rows"]
    assert row["chi_square"] == pytest.approx(1e200, rel=1e-9)
    text = srm.srm_text(document, 200)
    assert "1e+200" in text and "0" * 20 not in text, text
    assert max(len(line) for line in text.splitlines()) <= 200
