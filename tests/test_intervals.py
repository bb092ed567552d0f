"""The interval engine of `report confidence` and `compare` (pipeline/intervals.py), against
independent oracles: the exact binomial law of a resample's order statistic (scipy.stats.binom),
literal resampling (the slow, obvious bootstrap), scipy.stats.bootstrap; for the exact intervals
from the order statistics, hand-computed ranks and scipy.stats.binom; for the repeats that would
resolve an objective, scipy.stats.betabinom and a literal simulation of new pairs."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from loopmeter import intervals


def _literal(values: np.ndarray, fraction: float, resamples: int, seed: int) -> np.ndarray:
    """The bootstrap as its definition says: n draws with replacement, then their percentile."""
    chooser = random.Random(seed)
    out = []
    for _ in range(resamples):
        resample = sorted(chooser.choices(list(values), k=len(values)))
        out.append(intervals.percentile(np.array(resample), fraction))
    return np.array(out)


@pytest.mark.parametrize("n, fraction", [(5, 0.5), (9, 0.5), (21, 0.95), (11, 0.9)])
def test_a_resampled_order_statistic_follows_its_exact_binomial_law(n, fraction):
    """With (n-1)*f whole, the resampled percentile is the resample's (k+1)-th smallest value, which
    is at most the sample's j-th smallest exactly when at least k+1 of n draws fall among the j
    smallest: P = P(Binomial(n, j/n) >= k+1)."""
    position = (n - 1) * fraction
    assert position == int(position)
    k = int(position)
    values = np.arange(1.0, n + 1.0)  # distinct: the j-th smallest is j
    draws = intervals.percentile_draws(values, fraction, 200_000, intervals.generator(3, "law"))
    for j in range(1, n + 1):
        exact = stats.binom.sf(k, n, j / n)  # P(X >= k+1)
        assert abs(np.mean(draws <= j) - exact) < 0.006, (j, np.mean(draws <= j), exact)


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.integers(0, 50), min_size=1, max_size=25), fraction=st.sampled_from([0.25, 0.5, 0.9, 0.95]),
       seed=st.integers(0, 2**32 - 1))
def test_the_exact_draws_have_the_distribution_of_literal_resampling(values, fraction, seed):
    """Ties, one value, interpolated positions: the two samplers' draws pass a two-sample KS test."""
    sample = np.sort(np.array(values, dtype=float))
    ours = intervals.percentile_draws(sample, fraction, 4000, intervals.generator(seed, "ks"))
    literal = _literal(sample, fraction, 4000, seed)
    assert sample.min() <= ours.min() and ours.max() <= sample.max()
    if ((len(sample) - 1) * fraction).is_integer():  # no interpolation: every draw is one of the values
        assert set(np.unique(ours)) <= set(sample)
    if len(np.unique(sample)) > 1:
        assert stats.ks_2samp(ours, literal).pvalue > 1e-4


@pytest.mark.parametrize("fraction", [0.5, 0.95])
def test_the_interval_is_scipys_percentile_bootstrap(fraction):
    sample = np.sort(np.random.default_rng(11).lognormal(3.0, 0.6, 24))
    ours = intervals.percentile_interval(
        intervals.percentile_draws(sample, fraction, 100_000, intervals.generator(7, "scipy")), 0.95)
    theirs = stats.bootstrap((sample,), lambda x, axis: np.quantile(x, fraction, axis=axis), n_resamples=100_000,
                             method="percentile", confidence_level=0.95, rng=np.random.default_rng(5)).confidence_interval
    spread = sample.max() - sample.min()
    assert abs(ours[0] - theirs.low) < 0.02 * spread and abs(ours[1] - theirs.high) < 0.02 * spread


def test_the_same_seed_and_key_give_the_same_draws_and_other_ones_others():
    sample = np.arange(20.0)
    one = intervals.percentile_draws(sample, 0.5, 500, intervals.generator(1, "a", "b"))
    assert np.array_equal(one, intervals.percentile_draws(sample, 0.5, 500, intervals.generator(1, "a", "b")))
    assert not np.array_equal(one, intervals.percentile_draws(sample, 0.5, 500, intervals.generator(2, "a", "b")))
    assert not np.array_equal(one, intervals.percentile_draws(sample, 0.5, 500, intervals.generator(1, "a", "c")))
    assert not np.array_equal(one, intervals.percentile_draws(sample, 0.5, 500, intervals.generator(1, "ab")))


def test_which_ends_a_sample_can_bound():
    # the median of 5: each end is beyond all 5 values with chance 1/32 > 2.5 %; of 6: 1/64 < 2.5 %
    assert intervals.open_ends(5, 0.5, 0.95) == (True, True)
    assert intervals.open_ends(6, 0.5, 0.95) == (False, False)
    assert intervals.open_ends(5, 0.5, 0.90) == (False, False)  # 1/32 < 5 %
    # p95 above: 0.95^n > 2.5 % up to n = 71
    assert intervals.open_ends(71, 0.95, 0.95) == (False, True)
    assert intervals.open_ends(72, 0.95, 0.95) == (False, False)
    assert intervals.open_ends(0, 0.5, 0.95) == (True, True)
    # a side of a two-sample statistic: at 1 - level
    assert intervals.open_ends(4, 0.5, 0.95, two_sample=True) == (True, True)
    assert intervals.open_ends(5, 0.5, 0.95, two_sample=True) == (False, False)
    assert intervals.open_ends(58, 0.95, 0.95, two_sample=True) == (False, True)
    assert intervals.open_ends(59, 0.95, 0.95, two_sample=True) == (False, False)
    for level in (0.95, 0.9, 0.99):
        sizes = np.arange(0, 400)
        low, high = intervals.order_statistic_ranks(sizes, 0.95, level)
        for n in sizes:  # the exact interval opens an end exactly where `open_ends` says it must
            assert ((low[n] == 0), (high[n] == 0)) == intervals.open_ends(int(n), 0.95, level), (n, level)


def test_one_value_and_equal_values_give_a_point():
    for sample in (np.array([7.0]), np.full(12, 7.0)):
        draws = intervals.percentile_draws(sample, 0.95, 300, intervals.generator(0, "x"))
        assert intervals.percentile_interval(draws, 0.95) == (7.0, 7.0)
    assert math.isclose(intervals.percentile(np.array([1.0, 2.0, 4.0, 8.0]), 0.5), 3.0)


# ---- exact intervals from the order statistics ----------------------------------------------------
def _scipy_ranks(n: int, fraction: float, level: float) -> tuple[int, int]:
    """r: the largest rank with P(B <= r - 1) <= tail; s: the smallest with P(B >= s) <= tail; 0 if none."""
    tail = (1 - level) / 2
    k = np.arange(n + 1)
    low = int(np.sum(stats.binom.cdf(k, n, fraction) <= tail))
    count = int(np.sum((stats.binom.sf(k - 1, n, fraction) <= tail) & (k >= 1)))
    return low, (n + 1 - count if count else 0)


def test_the_ranks_by_hand():
    """The median of n values: B ~ Binomial(n, 1/2), P(B <= j) = sum of C(n, i) / 2^n for i <= j."""
    ranks = {n: tuple(int(x[0]) for x in intervals.order_statistic_ranks([n], 0.5, 0.95)) for n in (5, 6, 7, 10, 20)}
    assert ranks[5] == (0, 0)  # 1/32 = 3.1 % > 2.5 %: the extremes miss too often, both ends open
    assert ranks[6] == (1, 6)  # 1/64 = 1.6 %; P(B <= 1) = 7/64 = 10.9 %: the smallest and the largest
    assert ranks[7] == (1, 7)  # 1/128; 8/128 = 6.3 % too much for rank 2
    assert ranks[10] == (2, 9)  # P(B <= 1) = 11/1024 = 1.1 %, P(B <= 2) = 56/1024 = 5.5 %
    assert ranks[20] == (6, 15)  # P(B <= 5) = 21700/2^20 = 2.07 %, P(B <= 6) = 60460/2^20 = 5.77 %
    # the p95 of 72: only the largest bounds it above, 0.95^72 = 2.49 %; of 71, 0.95^71 = 2.62 %: open
    assert intervals.order_statistic_ranks([71, 72], 0.95, 0.95)[1].tolist() == [0, 72]
    # at 90 %, 5 values bound a median: 1/32 <= 5 %
    assert [int(x[0]) for x in intervals.order_statistic_ranks([5], 0.5, 0.90)] == [1, 5]


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.5, 0.95, 0.25, 0.9])
@pytest.mark.parametrize("level", [0.95, 0.9, 0.99, 0.8])
def test_the_ranks_are_scipys_binomial_quantiles(fraction, level):
    sizes = np.r_[np.arange(0, 260), [500, 999, 2000, 4321]]
    low, high = intervals.order_statistic_ranks(sizes, fraction, level)
    for n, r, s in zip(sizes, low, high):
        assert (r, s) == _scipy_ranks(int(n), fraction, level), (n, fraction, level)
        assert (r == 0, s == 0) == intervals.open_ends(int(n), fraction, level)
        position = (n - 1) * fraction  # the estimate lies between the ends whenever both exist
        if r and s:
            assert r <= math.floor(position) + 1 and math.ceil(position) + 1 <= s, (n, r, s)


def test_the_probability_rows_are_scipys():
    for m in (1, 2, 7, 50, 600):
        k = np.arange(m + 1)
        for p in (0.5, 0.95, 0.013):
            assert np.allclose(intervals.binomial_rows(np.array([m]), p)[0], stats.binom.pmf(k, m, p), rtol=1e-9, atol=1e-300)
        for a, b in ((0.5, 20.5), (10.5, 10.5), (19.5, 1.5)):
            assert np.allclose(intervals.beta_binomial_rows(np.array([m]), a, b)[0], stats.betabinom.pmf(k, m, a, b),
                               rtol=1e-9, atol=1e-300)
    rows = intervals.binomial_rows(np.array([3, 1, 0]), 0.5)  # several sizes: each row ends at its size
    assert rows.tolist() == [[0.125, 0.375, 0.375, 0.125], [0.5, 0.5, 0, 0], [1, 0, 0, 0]]
    assert intervals.binomial_rows(np.array([2]), 0.0).tolist() == [[1, 0, 0]]
    assert intervals.binomial_rows(np.array([2]), 1.0).tolist() == [[0, 0, 1]]


def test_the_ends_are_the_samples_own_values_at_those_ranks():
    rng = np.random.default_rng(4)
    samples = [np.sort(rng.normal(size=n)) for n in (20, 5, 72, 6, 0, 300)]
    low, high = intervals.order_statistic_ends(np.concatenate(samples), [len(s) for s in samples], 0.95, 0.95)
    for sample, got_low, got_high in zip(samples, low, high):
        r, s = _scipy_ranks(len(sample), 0.95, 0.95)
        assert (math.isnan(got_low) if r == 0 else got_low == sample[r - 1]), (len(sample), got_low)
        assert (math.isnan(got_high) if s == 0 else got_high == sample[s - 1]), (len(sample), got_high)
    assert [len(end) for end in intervals.order_statistic_ends(np.array([]), [], 0.5, 0.95)] == [0, 0]


def test_each_end_misses_as_often_as_the_binomial_law_says_whatever_the_distribution():
    """200,000 samples of 20 uniforms (any continuous law maps to them by its quantile function): the
    median's low end X(6) lies above 1/2 exactly when at most 5 of 20 are below it, 2.07 %; within
    5 standard errors."""
    rng = np.random.default_rng(8)
    samples = np.sort(rng.random((200_000, 20)), axis=1)
    low, high = intervals.order_statistic_ends(samples.ravel(), np.full(200_000, 20), 0.5, 0.95)
    exact = stats.binom.cdf(5, 20, 0.5)
    error = 5 * math.sqrt(exact * (1 - exact) / 200_000)
    assert abs(np.mean(low > 0.5) - exact) < error and abs(np.mean(high < 0.5) - exact) < error


# ---- paired resampling ----------------------------------------------------------------------------
def test_paired_resampling_keeps_each_pair_together():
    first = np.random.default_rng(2).lognormal(10, 0.5, 30)
    # the second side is twice the first: every resample of pairs has the ratio 2 exactly; resampled
    # apart, the ratio would vary from resample to resample
    draws = intervals.paired_ratio_draws(first, 2 * first, 0.95, 3000, intervals.generator(0, "pairs"))
    assert np.allclose(draws, 2.0, rtol=1e-12)
    rng = np.random.default_rng(3)
    second = first * rng.lognormal(0, 0.2, 30)
    ours = intervals.paired_ratio_draws(first, second, 0.5, 4000, intervals.generator(1, "pairs"))
    chooser = random.Random(1)
    literal = []
    for _ in range(4000):  # the definition: n pairs drawn with replacement, the ratio of their medians
        picks = chooser.choices(range(30), k=30)
        literal.append(np.quantile(second[picks], 0.5) / np.quantile(first[picks], 0.5))
    assert stats.ks_2samp(ours, literal).pvalue > 1e-4
    again = intervals.paired_ratio_draws(first, second, 0.5, 4000, intervals.generator(1, "pairs"))
    assert np.array_equal(ours, again)


# ---- the pairs that would resolve an objective ----------------------------------------------------
def _scipy_chances(sizes: np.ndarray, below: int, measured: int, fraction: float) -> np.ndarray:
    """The chance that m new pairs resolve, each m of `sizes`: P(K >= s) + P(K <= r - 1), K beta-binomial,
    with the ranks from scipy's binomial quantiles: r - 1 the largest count whose P(B <= k) is within
    the tail (binom.ppf gives the smallest with P(B <= k) >= tail), s the smallest whose P(B >= s) is."""
    tail = 0.025
    k = stats.binom.ppf(tail, sizes, fraction)
    r = (k + (stats.binom.cdf(k, sizes, fraction) <= tail)).astype(int)  # count of k' with cdf <= tail
    j = stats.binom.isf(tail, sizes, fraction)  # the smallest j with P(B > j) <= tail: s = j + 1
    j = j - (stats.binom.sf(j - 1, sizes, fraction) <= tail)  # unless P(B > j - 1) is within too
    s = np.where(j + 1 <= sizes, j + 1, 0).astype(int)
    a, b = below + 0.5, measured - below + 0.5
    met = np.where(s > 0, stats.betabinom.sf(s - 1, sizes, a, b), 0.0)
    return met + np.where(r > 0, stats.betabinom.cdf(r - 1, sizes, a, b), 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("below, measured, fraction", [(20, 20, 0.95), (14, 20, 0.5), (3, 6, 0.5), (0, 10, 0.5),
                                                       (19, 20, 0.95), (6, 6, 0.5), (60, 72, 0.95)])
def test_the_chance_to_resolve_and_the_repeats_are_scipys(below, measured, fraction):
    sizes = np.arange(measured + 1, intervals.REPEATS_MAXIMUM + 1)
    theirs = _scipy_chances(sizes, below, measured, fraction)
    assert np.allclose(intervals.resolving_chance(sizes[:700], below, measured, fraction, 0.95), theirs[:700], atol=1e-10)
    values = np.r_[np.full(below, 10.0), np.full(measured - below, 50.0)]  # threshold 35: `below` at or below it
    needed = intervals.repeats_to_resolve(values, 35.0, fraction, 0.95)
    reached = np.flatnonzero(theirs >= 0.8)
    assert needed == (int(sizes[reached[0]]) if reached.size else None) and (needed is None or needed > measured)


def test_the_repeats_by_hand_and_by_simulating_new_pairs():
    # 6 pairs all below a median's threshold: 7 new pairs bound the median by their smallest and largest,
    # so they resolve only if all 7 are below (E[q^7] under Beta(6.5, 0.5), prod (6.5 + j) / (7 + j))
    # or all above (E[(1 - q)^7], prod (0.5 + j) / (7 + j)): 0.687 < 0.8
    chance = math.prod((6.5 + j) / (7 + j) for j in range(7)) + math.prod((0.5 + j) / (7 + j) for j in range(7))
    assert math.isclose(intervals.resolving_chance([7], 6, 6, 0.5, 0.95)[0], chance, rel_tol=1e-12)
    values = np.arange(1.0, 7.0)  # all at or below 35
    needed = intervals.repeats_to_resolve(values, 35.0, 0.5, 0.95)
    # the simulation the number stands for: q drawn as the measured pairs leave it, `needed` new pairs,
    # their exact interval judged; resolved in 80 % of 100,000 new run sets at least (3 standard errors)
    rng = np.random.default_rng(6)
    q = rng.beta(6.5, 0.5, 100_000)
    new = np.sort(np.where(rng.random((100_000, needed)) < q[:, None], 0.0, 100.0), axis=1)
    low, high = intervals.order_statistic_ends(new.ravel(), np.full(100_000, needed), 0.5, 0.95)
    resolved = np.mean((high <= 35.0) | (low > 35.0))
    assert resolved > 0.8 - 3 * math.sqrt(0.16 / 100_000), (needed, resolved)
    assert intervals.repeats_to_resolve(values, 35.0, 0.5, 0.95) == needed  # no seed: always the same
    assert intervals.repeats_to_resolve(np.array([]), 35.0, 0.5, 0.95) is None
    # 300 pairs split evenly about the threshold: no number of pairs up to the maximum resolves it
    assert intervals.repeats_to_resolve(np.r_[np.zeros(150), np.full(150, 99.0)], 35.0, 0.5, 0.95) is None
    assert intervals.repeats_to_resolve(values, 35.0, 0.5, 0.95, maximum=needed - 1) is None
