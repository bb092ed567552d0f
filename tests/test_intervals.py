"""The bootstrap engine of `report confidence` and `compare` (pipeline/intervals.py), against
independent oracles: the exact binomial law of a resample's order statistic (scipy.stats.binom),
literal resampling (the slow, obvious bootstrap), and scipy.stats.bootstrap."""
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
    for n in range(1, 100):
        assert intervals.open_ends(n, 0.95, 0.95)[1] == (n < intervals.bound_needed(0.95, 0.95, upper=True))
        assert intervals.open_ends(n, 0.5, 0.95)[0] == (n < intervals.bound_needed(0.5, 0.95, upper=False))


def test_repeats_needed_by_hand():
    # 20 pairs, estimate 30 below the threshold 35, high end 40: the half-width 10 must shrink to 5,
    # a quarter of its square: 4 x 20 = 80 pairs
    assert intervals.repeats_needed(20, 30.0, intervals.Interval(22.0, 40.0), 35, 0.5, 0.95) == 80
    # above the threshold: the low end must rise past it; half-width 8, distance 2 -> 16 x 10 = 160
    assert intervals.repeats_needed(10, 37.0, intervals.Interval(29.0, 50.0), 35, 0.5, 0.95) == 160
    # an open high end of a p95: at least the 72 pairs that can bound it, whatever the low side says
    assert intervals.repeats_needed(20, 40.0, intervals.Interval(38.0, None), 60, 0.95, 0.95) == 72
    # the estimate on the threshold, or nothing measured: no number of repeats can be told
    assert intervals.repeats_needed(20, 35.0, intervals.Interval(30.0, 40.0), 35, 0.5, 0.95) is None
    assert intervals.repeats_needed(0, None, intervals.Interval(None, None), 35, 0.5, 0.95) is None
    # a high end just past the threshold: (25.5 / 25)^2 x 50 = 52.02 -> 53
    assert intervals.repeats_needed(50, 10.0, intervals.Interval(9.0, 35.5), 35, 0.5, 0.95) == 53


def test_one_value_and_equal_values_give_a_point():
    for sample in (np.array([7.0]), np.full(12, 7.0)):
        draws = intervals.percentile_draws(sample, 0.95, 300, intervals.generator(0, "x"))
        assert intervals.percentile_interval(draws, 0.95) == (7.0, 7.0)
    assert math.isclose(intervals.percentile(np.array([1.0, 2.0, 4.0, 8.0]), 0.5), 3.0)
