"""`execute --until-resolved`'s statistics (`forgeloop/sequential.py`): the confidence sequence's ranks
by hand, their chance of missing at any look against brute force, scipy's binomial and a simulation,
the questions and the stopping rule on hand cases, and the rule on known laws: how many runs it takes,
how often a verdict is wrong, whether it agrees with a fixed size."""
from __future__ import annotations

import itertools
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from loopmeter import intervals
from loopmeter.forgeloop import sequential
from loopmeter.forgeloop.sequential import BUDGET_SPENT, OPEN, OUT_OF_REACH, RESOLVED, Question, judge
from runs import run

LEVEL = sequential.LEVEL
TAIL = (1.0 - LEVEL) / 2.0


# ---- the confidence sequence's ranks, by hand --------------------------------------------------
def test_ranks_of_a_median_over_ten_looks_by_hand():
    # K_n ~ Binomial(n, 1/2) counts the pairs at or below the true median. The fixed-size ranks at a
    # 2.5 % tail: r = 1 from n = 6 (P(K_6 = 0) = 1/64), r = 2 from n = 9 (P(K_9 <= 1) = 10/512).
    # Looking at n = 6..10 with those ranks misses below with P(K_6 = 0) + P(K_6 = 1, no step up in
    # 7..9) = 8/512 + 6/512 = 0.0273 > 0.025, so the sequence keeps r = 1 at n = 9 (the next nominal
    # tail down, 1/64) and misses with P(K_6 = 0) + P(K_10 = 1, its step in the first six)
    # = 16/1024 + 6/1024 = 22/1024 <= 0.025. The median is symmetric: s_n = n + 1 - r_n.
    low, high = sequential.sequence_ranks(10, 0.5)
    assert low == (0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2)
    assert high == (0, 0, 0, 0, 0, 0, 6, 7, 8, 9, 9)
    assert sequential.miss_chance(np.asarray(low), 0.5, "low") == pytest.approx(22 / 1024, abs=1e-15)
    assert sequential.miss_chance(np.asarray(high), 0.5, "high") == pytest.approx(22 / 1024, abs=1e-15)
    # the fixed-size interval of 10 pairs is narrower: r = 2 at n = 9 already, (2, 9) at n = 10
    assert sequential.fixed_ranks(9, 0.5) == (2, 8) and sequential.fixed_ranks(10, 0.5) == (2, 9)
    fixed_low = [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2]
    assert sequential.miss_chance(np.asarray(fixed_low), 0.5, "low") == pytest.approx(28 / 1024, abs=1e-15)


def test_five_pairs_bound_no_median_and_six_bound_it_by_the_extremes():
    assert sequential.sequence_ranks(5, 0.5) == ((0,) * 6, (0,) * 6)  # 1/32 > 0.025 at every n
    assert sequential.sequence_ranks(6, 0.5) == ((0,) * 6 + (1,), (0,) * 6 + (6,))  # 1/64
    values = np.array([3.0, 7.0, 11.0, 12.0, 20.0, 41.0])
    assert sequential.sequence_interval(values, 6, 0.5) == (3.0, 41.0)
    assert sequential.sequence_interval(values[:5], 6, 0.5) == (None, None)
    with pytest.raises(ValueError, match="7 pairs exceed the sequence's 6"):
        sequential.sequence_interval(np.arange(7.0), 6, 0.5)


def test_a_p95_has_a_low_end_from_two_pairs_and_no_high_end_within_seventy():
    low, high = sequential.sequence_ranks(30, 0.95)
    assert set(high) == {0}  # 0.95^n > 0.025 up to n = 71: no sample of 30 bounds it above
    assert low[:3] == (0, 0, 1)  # P(K_2 <= 0) = 0.05^2
    assert (low[30], sequential.fixed_ranks(30, 0.95)[0]) == (25, 26)
    _, high_72 = sequential.sequence_ranks(72, 0.95)
    assert high_72[71] == 0 and high_72[72] == 72  # 0.95^72 = 0.0249


def test_the_fixed_interval_checked_at_every_look_misses_too_often():
    # what the sequence is for: 30 looks at report confidence's fixed-size median interval
    fixed_low = np.array([0] + [sequential.fixed_ranks(n, 0.5)[0] for n in range(1, 31)])
    assert sequential.miss_chance(fixed_low, 0.5, "low") == pytest.approx(0.0668, abs=5e-5)
    low, _ = sequential.sequence_ranks(30, 0.5)
    assert sequential.miss_chance(np.asarray(low), 0.5, "low") == pytest.approx(0.0231, abs=5e-5)


# ---- the chance of missing at any look: three oracles --------------------------------------------
def brute_force_miss(ranks: tuple[int, ...], p: float, side: str) -> float:
    """Every sequence of N pairs, each at or below the percentile with chance p, weighed exactly."""
    n = len(ranks) - 1
    steps = np.array(list(itertools.product((0, 1), repeat=n)))
    counts = steps.cumsum(axis=1)
    weights = p ** counts[:, -1] * (1.0 - p) ** (n - counts[:, -1])
    rank = np.asarray(ranks[1:])[None, :]
    crossed = (rank >= 1) & ((counts >= rank) if side == "high" else (counts <= rank - 1))
    return float(weights[crossed.any(axis=1)].sum())


@pytest.mark.parametrize("fraction", [0.5, 0.95, 0.3, 0.8])
def test_miss_chance_is_the_brute_force_chance_over_every_sequence(fraction):
    for side, ranks in zip(("low", "high"), sequential.sequence_ranks(14, fraction)):
        assert sequential.miss_chance(np.asarray(ranks), fraction, side) == pytest.approx(
            brute_force_miss(ranks, fraction, side), rel=1e-12, abs=1e-15)
    other = (0, 0, 1, 1, 2, 2, 3, 3, 3, 4)  # any ranks, not only the sequence's
    assert sequential.miss_chance(np.asarray(other), fraction, "low") == pytest.approx(
        brute_force_miss(other, fraction, "low"), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("max_pairs", [10, 20, 30, 50, 100])
@pytest.mark.parametrize("fraction", [0.5, 0.95])
def test_every_look_and_all_looks_miss_within_the_tail_by_scipys_binomial(max_pairs, fraction):
    low, high = (np.asarray(side) for side in sequential.sequence_ranks(max_pairs, fraction))
    n = np.arange(max_pairs + 1)
    looked_low, looked_high = low >= 1, high >= 1
    # each look alone: P(K_n <= r_n - 1) and P(K_n >= s_n), from scipy
    each_low = stats.binom.cdf(low - 1, n, fraction)[looked_low]
    each_high = stats.binom.sf(high - 1, n, fraction)[looked_high]
    assert (each_low <= TAIL).all() and (each_high <= TAIL).all()
    # all looks together: at least the worst single look, at most the tail
    any_low = sequential.miss_chance(low, fraction, "low")
    any_high = sequential.miss_chance(high, fraction, "high")
    assert max(each_low, default=0.0) <= any_low + 1e-15 <= TAIL + 1e-12
    assert max(each_high, default=0.0) <= any_high + 1e-15 <= TAIL + 1e-12
    # and each end as wide as report confidence's fixed-size one at every n, or wider (the ranks of
    # `report confidence`: intervals.order_statistic_ranks), so a verdict of the sequence is one of it too
    fixed_low, fixed_high = intervals.order_statistic_ranks(n[1:], fraction, LEVEL)
    assert (low[1:] <= fixed_low).all()
    assert ((high[1:] == 0) | ((fixed_high > 0) & (high[1:] >= fixed_high))).all()


def test_a_simulated_walk_misses_as_often_as_computed():
    rng = np.random.default_rng(7)
    walks = (rng.random((200_000, 30)) < 0.5).cumsum(axis=1)
    low, high = (np.asarray(side)[1:] for side in sequential.sequence_ranks(30, 0.5))
    missed = ((low >= 1) & (walks <= low - 1)).any(axis=1).mean()
    expected = sequential.miss_chance(np.concatenate([[0], low]), 0.5, "low")
    assert abs(missed - expected) < 4 * np.sqrt(expected * (1 - expected) / 200_000)
    missed_high = ((high >= 1) & (walks >= high)).any(axis=1).mean()
    assert abs(missed_high - expected) < 4 * np.sqrt(expected * (1 - expected) / 200_000)


@settings(max_examples=40, deadline=None)
@given(max_pairs=st.integers(1, 80), fraction=st.floats(0.05, 0.95), level=st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_any_budget_fraction_and_level_misses_within_its_tail(max_pairs, fraction, level):
    tail = (1.0 - level) / 2.0
    low, high = sequential.sequence_ranks(max_pairs, fraction, level)
    assert sequential.miss_chance(np.asarray(low), fraction, "low") <= tail * (1 + 1e-9)
    assert sequential.miss_chance(np.asarray(high), fraction, "high") <= tail * (1 + 1e-9)
    assert all(0 <= r <= n for n, r in enumerate(low)) and all(s == 0 or 1 <= s <= n for n, s in enumerate(high))
    assert all(r == 0 or s == 0 or r < s for r, s in zip(low, high))


# ---- the questions and the rule, by hand ---------------------------------------------------------
BALANCED_P50 = Question("forgeloopBalanced", "pairedOverheadP50", 0.5, None, 10.0)
LIGHT_P50 = Question("forgeloopAdaptive", "pairedOverheadP50", 0.5, "p50TokenOverheadPercent", 35.0)
LIGHT_P95 = Question("forgeloopAdaptive", "pairedOverheadP95", 0.95, "p95TokenOverheadPercent", 60.0)


def test_a_scenarios_questions():
    assert sequential.questions("balanced") == [BALANCED_P50, Question("forgeloopAdaptive", "pairedOverheadP50", 0.5, None, 10.0)]
    assert sequential.questions("full", margin=5.0)[0].threshold == 5.0
    assert sequential.questions("light")[2:] == [LIGHT_P50, LIGHT_P95]  # ForgeLoop's light objectives


# with a budget of 10 the ranks are those by hand above: (1, 6) at n = 6, (1, 9) at n = 9, (2, 9) at n = 10
@pytest.mark.parametrize(("question", "values", "verdict", "low", "high"), [
    (BALANCED_P50, np.arange(11.0, 21.0), "MORE", 12.0, 19.0),
    (BALANCED_P50, np.arange(-5.0, 5.0), "SIMILAR", -4.0, 3.0),
    (BALANCED_P50, np.arange(-20.0, -10.0), "LESS", -19.0, -12.0),
    (BALANCED_P50, np.array([-10.0, -10, 0, 1, 2, 3, 4, 5, 10, 11]), "SIMILAR", -10.0, 10.0),  # the margin is in
    (LIGHT_P50, np.arange(36.0, 46.0), "VIOLATED", 37.0, 44.0),
    (LIGHT_P50, np.array([27.0, 28, 29, 30, 31, 32, 33, 34, 35, 40]), "MET", 28.0, 35.0),  # at the threshold: met
])
def test_resolved_questions(question, values, verdict, low, high):
    judged = judge(question, values, 10, 10)
    assert (judged.status, judged.verdict, judged.low, judged.high, judged.pairs) == (RESOLVED, verdict, low, high, 10)
    assert judged.estimate == intervals.percentile(values, 0.5)


def test_an_end_on_the_margin_does_not_resolve_and_nothing_to_point_with_is_open():
    values = np.array([5.0, 10, 11, 12, 13, 14, 15, 16, 17, 18])  # low end X(2) = 10: not above the margin
    assert judge(BALANCED_P50, values, 10, 10).status == OPEN  # and the budget is spent
    empty = judge(BALANCED_P50, np.empty(0), 3, 10)
    assert (empty.status, empty.estimate, empty.low, empty.high) == (OPEN, None, None, None)


def test_open_while_the_rounds_left_can_resolve_and_out_of_reach_when_they_cannot():
    five = np.arange(11.0, 16.0)  # no end at 5 pairs; one more above 10 makes X(1) > 10 at n = 6
    assert judge(BALANCED_P50, five, 5, 10).status == OPEN
    assert judge(BALANCED_P50, five, 5, 5).status == OPEN  # the budget's last round: nothing to wait for
    assert sequential.stop_reason([judge(BALANCED_P50, five, 5, 5)], 5, 5) == BUDGET_SPENT
    # 9 pairs pointing to MORE, two of them at or below 10: r_10 = 2 needs at most one
    nine = np.array([0.0, 5, 11, 12, 13, 14, 15, 16, 17])
    judged = judge(BALANCED_P50, nine, 9, 10)
    assert (judged.status, judged.verdict) == (OUT_OF_REACH, None)
    assert judged.note == "MORE cannot be reached in the rounds left, whatever the new pairs"
    assert judge(BALANCED_P50, nine[1:], 8, 10).status == OPEN  # one of them only, two rounds left: open
    # a budget of 3 never bounds a median: out of reach from the first round
    three = judge(BALANCED_P50, np.array([40.0]), 1, 3)
    assert three.status == OUT_OF_REACH
    assert three.note == "MORE needs the low end of the p50, which 3 pairs cannot bound (a fixed-size bound needs 6)"


def test_a_light_p95_met_is_out_of_reach_of_thirty_pairs_and_violated_is_not():
    values = np.sort(np.random.default_rng(1).normal(20, 4, 12))
    judged = judge(LIGHT_P95, values, 12, 30)
    assert (judged.status, judged.high) == (OUT_OF_REACH, None)
    assert judged.note == "MET needs the high end of the p95, which 30 pairs cannot bound (a fixed-size bound needs 72)"
    violated = np.arange(61.0, 73.0)  # 12 pairs above 60: X(r_12) > 60
    assert judge(LIGHT_P95, violated, 12, 30).verdict == "VIOLATED"


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(-40, 80), min_size=1, max_size=30),
       question=st.sampled_from([BALANCED_P50, LIGHT_P50, LIGHT_P95]))
def test_a_verdict_of_the_sequence_is_report_confidences_verdict_on_the_same_pairs(values, question):
    sorted_values = np.sort(np.asarray(values, dtype=np.float64))  # integers: ties too
    n = len(sorted_values)
    judged = judge(question, sorted_values, n, 30)
    fixed = judge(question, sorted_values, n, n, LEVEL, fixed_ranks_of)
    if judged.verdict is not None:
        assert fixed.verdict == judged.verdict
    low, high = intervals.order_statistic_ends(sorted_values, np.array([n]), question.fraction, LEVEL)
    assert judged.low is None or judged.low <= low[0]
    assert judged.high is None or judged.high >= high[0]


def test_why_a_scenario_stops():
    met = judge(LIGHT_P50, np.arange(0.0, 10.0), 10, 10)
    out = judge(LIGHT_P95, np.arange(0.0, 10.0), 10, 30)
    open_ = judge(BALANCED_P50, np.arange(11.0, 16.0), 5, 10)
    assert sequential.stop_reason([met, met], 10, 30) == RESOLVED
    assert sequential.stop_reason([met, out], 10, 30) == OUT_OF_REACH
    assert sequential.stop_reason([met, out, open_], 5, 10) is None
    assert sequential.stop_reason([met, open_], 10, 10) == BUDGET_SPENT
    record = sequential.scenario_record("s", 10, RESOLVED, [met])
    assert record == {"scenarioId": "s", "runs": 10, "stopped": "RESOLVED", "questions": [{
        "mode": "forgeloopAdaptive", "metric": "tokens", "statistic": "pairedOverheadP50",
        "objective": "p50TokenOverheadPercent", "threshold": 35.0, "pairs": 10, "estimate": 4.5, "low": 1.0,
        "high": 8.0, "status": "RESOLVED", "verdict": "MET", "note": None}]}


def test_token_overheads_pair_as_report_confidence_pairs():
    documents = [
        run(mode="direct", index=1, tokens=1000), run(mode="direct", index=2, tokens=2000),
        run(mode="direct", index=3, tokens=1000, verification="FAIL"),  # an untrusted direct run: no pair
        run(mode="forgeloopBalanced", index=1, tokens=1200), run(mode="forgeloopBalanced", index=2, tokens=1800),
        run(mode="forgeloopBalanced", index=3, tokens=1500),
        run(mode="forgeloopAdaptive", index=1, tokens=1100, promptSpecFingerprint="fp2"),  # not comparable
        run(mode="forgeloopAdaptive", index=2, tokens=2100, source="PROVIDER_REPORTED"),
        run(mode="forgeloopAdaptive", index=4, tokens=900),  # no direct run of its index
    ]
    found = sequential.token_overheads(documents)
    assert found["forgeloopBalanced"].tolist() == [-10.0, 20.0]  # sorted
    assert found["forgeloopAdaptive"].tolist() == [5.0]


# ---- the rule on known laws (the pure functions: the runs an adapter would give) ------------------
def normal(mean, spread):
    return (lambda rng, n: rng.normal(mean, spread, n)), (lambda f: mean + spread * NormalDist().inv_cdf(f))


def truth(question: Question, law) -> str:
    return question.pointed(law[1](question.fraction))  # the verdict the law itself gives


def fixed_ranks_of(max_pairs, fraction, level=LEVEL):
    """report confidence's fixed-size ranks at every n (no sequence): a fixed run set of n pairs."""
    n = np.arange(1, max_pairs + 1)
    low, high = intervals.order_statistic_ranks(n, fraction, level)
    return np.concatenate([[0], low]), np.concatenate([[0], high])


def run_until_resolved(laws: dict, profile: str, rng, max_runs: int = 30):
    """A run set drawn from the laws, stopped by the rule: (rounds, reason, judgements, the pairs)."""
    values = {mode: law[0](rng, max_runs) for mode, law in laws.items()}
    for rounds in range(1, max_runs + 1):
        judgements, reason = sequential.judge_scenario(
            {mode: np.sort(drawn[:rounds]) for mode, drawn in values.items()}, profile, rounds, max_runs)
        if reason is not None:
            return rounds, reason, judgements, values
    raise AssertionError("the budget stops every run set")


def fixed_verdicts(values: dict, profile: str, n: int) -> list[str | None]:
    return [judge(question, np.sort(values[question.mode][:n]), n, n, LEVEL, fixed_ranks_of).verdict
            for question in sequential.questions(profile)]


CLEAR = {
    "light": ("light", {"forgeloopBalanced": normal(40, 10), "forgeloopAdaptive": normal(20, 4)}),
    "balanced": ("balanced", {"forgeloopBalanced": normal(45, 12), "forgeloopAdaptive": normal(-30, 8)}),
    "similar": ("balanced", {"forgeloopBalanced": normal(0, 4), "forgeloopAdaptive": normal(2, 3)}),
    "p50 violated": ("light", {"forgeloopBalanced": normal(40, 10), "forgeloopAdaptive": normal(55, 10)}),
}


@pytest.mark.parametrize("name", list(CLEAR))
def test_clear_effects_stop_with_at_least_30_percent_fewer_runs_than_the_tail_tier(name):
    profile, laws = CLEAR[name]
    rng = np.random.default_rng([11, len(name)])
    taken, spent, wrong, opposite, fixed_given, same = [], 0, 0, 0, 0, 0
    for _ in range(200):
        rounds, reason, judgements, values = run_until_resolved(laws, profile, rng)
        taken.append(rounds)
        spent += reason == BUDGET_SPENT
        wrong += sum(j.verdict is not None and j.verdict != truth(j.question, laws[j.question.mode]) for j in judgements)
        # the verdicts the fixed tail tier (20 pairs) reaches on the same runs
        for judgement, fixed in zip(judgements, fixed_verdicts(values, profile, 20)):
            fixed_given += fixed is not None
            same += fixed is not None and judgement.verdict == fixed
            opposite += fixed is not None and judgement.verdict not in (None, fixed)
    assert np.mean(taken) <= 0.7 * 20  # at least 30 % fewer runs per mode than 20
    assert wrong == 0 and opposite == 0
    assert spent <= 200 * 0.05  # settled (resolved, or the rest out of reach) nearly always
    assert same / fixed_given >= 0.95  # the rest: a verdict the sequence left out of reach


# laws at the edge of a verdict: the true percentile a hair past the threshold, where a wrong verdict
# is likeliest. Every truth here lies outside the margin's band, so each question is wrong only when
# one particular end of its sequence misses: at most (1 - level) / 2 = 2.5 % of the run sets (the light
# p95, 35 + 15 * 1.645 = 59.7, sits at the edge of its objective too).
EDGE = {
    "light p50 at 35": ("light", {"forgeloopBalanced": normal(40, 10), "forgeloopAdaptive": normal(35 + 1e-9, 15)}),
    "on the margin": ("balanced", {"forgeloopBalanced": normal(10 + 1e-9, 15), "forgeloopAdaptive": normal(-10 - 1e-9, 15)}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EDGE))
def test_wrong_verdicts_at_the_edge_stay_within_the_level_and_never_oppose_a_fixed_size(name):
    profile, laws = EDGE[name]
    questions = sequential.questions(profile)
    rng = np.random.default_rng([12, len(name)])
    run_sets = 600
    wrong, opposite = np.zeros(len(questions), np.int64), 0
    for _ in range(run_sets):
        _, _, judgements, values = run_until_resolved(laws, profile, rng)
        for index, (judgement, fixed) in enumerate(zip(judgements, fixed_verdicts(values, profile, 20))):
            wrong[index] += judgement.verdict not in (None, truth(judgement.question, laws[judgement.question.mode]))
            opposite += fixed is not None and judgement.verdict not in (None, fixed)
    assert wrong.sum() > 0  # the edge is reached: verdicts are given there, and some are wrong
    assert (wrong <= stats.binom.ppf(0.999, run_sets, TAIL)).all()
    assert wrong.sum() / (run_sets * len(questions)) <= 1.0 - LEVEL
    assert opposite == 0
