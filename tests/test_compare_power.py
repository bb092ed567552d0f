"""forgeloop/power.py, the numbers behind `compare`, against scipy.stats: Student's t quantile and
tail, Welch's degrees of freedom, the difference of two rows, the pooled row, the minimum
detectable effect (against the noncentral t), the Bonferroni levels, and the gate's family-wise
error on simulated run sets."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from loopmeter.forgeloop import power
from loopmeter.forgeloop.compare import figures, verdict

PROBABILITIES = (1e-9, 1e-6, 0.000298, 0.0125, 0.025, 0.1, 0.3, 0.5, 0.8, 0.975, 0.9997, 0.999999)
DFS = (1, 1.5, 2, 3, 4.2, 8, 13.7, 30, 100, 1e4, 1e8, math.inf)


@pytest.mark.parametrize("df", DFS)
def test_t_quantile_and_tail_are_scipys(df):
    for p in PROBABILITIES:
        ours, theirs = power.t_quantile(p, df), stats.t.ppf(p, df)
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12), (p, df)
    # beyond 1e5 degrees of freedom the incomplete beta's lgamma terms are ~1e6 and cancel: 1e-7
    close = 1e-7 if df > 1e5 else 1e-9
    for t in (-40.0, -3.0, -0.7, 0.0, 0.2, 1.96, 5.9, 60.0):
        assert power.t_tail(t, df) == pytest.approx(stats.t.sf(t, df), rel=close, abs=1e-300), (t, df)


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-7, 1 - 1e-7), st.floats(1.0, 1e6))
def test_t_quantile_matches_scipy_anywhere(p, df):
    assert power.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8, abs=1e-10)


def test_t_quantile_refuses_what_is_no_probability():
    for p in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            power.t_quantile(p, 5)


def test_a_row_is_welchs_t_test_with_the_larger_of_welchs_and_students_variance():
    rng = np.random.default_rng(5)
    for n_b, n_c, sd_b, sd_c in ((5, 5, 0.1, 0.4), (20, 5, 0.3, 0.05), (3, 40, 0.2, 0.2), (20, 5, 0.05, 0.3)):
        b, c = rng.normal(10, sd_b, n_b), rng.normal(10.1, sd_c, n_c)
        d, v, f = power.welch(np.array([n_b]), np.array([b.mean()]), np.array([b.var(ddof=1)]),
                              np.array([n_c]), np.array([c.mean()]), np.array([c.var(ddof=1)]))
        welchs, students = stats.ttest_ind(c, b, equal_var=False), stats.ttest_ind(c, b, equal_var=True)
        assert d[0] == pytest.approx(c.mean() - b.mean(), rel=1e-12) and f[0] == pytest.approx(welchs.df, rel=1e-12)
        larger = max((d[0] / welchs.statistic) ** 2, (d[0] / students.statistic) ** 2)
        assert v[0] == pytest.approx(larger, rel=1e-12)
        if n_b == n_c:  # the two variances are one: the interval is scipy's Welch interval
            interval = welchs.confidence_interval(0.99)
            half = power.half_width(v[0], f[0], 0.99)
            assert (d[0] - half, d[0] + half) == pytest.approx((interval.low, interval.high), rel=1e-9)


def test_welch_leaves_a_side_of_one_run_unmeasured_and_no_spread_exact():
    d, v, f = power.welch(np.array([1, 3, 4]), np.array([1.0, 2.0, 2.0]), np.array([0.0, 0.0, 0.0]),
                          np.array([5, 3, 4]), np.array([1.0, 2.5, 2.0]), np.array([0.1, 0.0, 0.0]))
    assert np.isnan(d[0]) and np.isnan(v[0]) and np.isnan(f[0])
    assert (d[1], v[1], f[1]) == (0.5, 0.0, math.inf)
    assert figures(d[1], v[1], f[1], 0.95, 0.1)["low"] == figures(d[1], v[1], f[1], 0.95, 0.1)["high"] == 1.6487
    assert figures(d[0], v[0], f[0], 0.95, 0.1) == {"estimate": None, "low": None, "high": None, "mde": None,
                                                    "regressedAt": None, "verdict": "INCONCLUSIVE"}


def test_a_difference_of_rows_is_satterthwaite_over_the_four_samples():
    parts = np.array([0.004, 0.001, 0.002, 0.0005])  # var / n of each of the four run sets' sides
    runs = np.array([5, 20, 8, 12])
    first = (np.array([0.3]), np.array([parts[0] + parts[1]]),
             np.array([(parts[0] + parts[1]) ** 2 / (parts[0] ** 2 / 4 + parts[1] ** 2 / 19)]))
    second = (np.array([0.1]), np.array([parts[2] + parts[3]]),
              np.array([(parts[2] + parts[3]) ** 2 / (parts[2] ** 2 / 7 + parts[3] ** 2 / 11)]))
    d, v, f = power.difference(first, second)
    assert d[0] == pytest.approx(0.2) and v[0] == pytest.approx(parts.sum())
    assert f[0] == pytest.approx(parts.sum() ** 2 / np.sum(parts ** 2 / (runs - 1)), rel=1e-12)


def test_pooled_row_by_hand():
    # infinite df: plain inverse variance; weights 1/0.01, 1/0.04 -> shares 0.8, 0.2
    estimate, variance, df, rows = power.pooled(np.array([0.1, 0.6]), np.array([0.01, 0.04]),
                                                np.array([math.inf, math.inf]))
    assert (estimate, variance, df, rows) == (pytest.approx(0.2), pytest.approx(0.008), math.inf, 2)
    # df 4 and 12: each variance inflated by df / (df - 2), i.e. 0.02 and 0.048
    estimate, variance, df, rows = power.pooled(np.array([0.1, 0.6, 5.0, 1.0]), np.array([0.01, 0.04, 0.5, 0.0]),
                                                np.array([4.0, 12.0, 2.0, 9.0]))
    weights = np.array([1 / 0.02, 1 / 0.048])
    share = weights / weights.sum()
    assert rows == 2  # df 2 has no finite t variance; a variance of 0 would weigh infinitely
    assert estimate == pytest.approx(share @ [0.1, 0.6]) and variance == pytest.approx(1 / weights.sum())
    parts = share ** 2 * np.array([0.02, 0.048])
    assert df == pytest.approx(parts.sum() ** 2 / np.sum(parts ** 2 / [4.0, 12.0]))
    assert all(math.isnan(x) for x in power.pooled(np.array([1.0]), np.array([0.0]), np.array([9.0]))[:3])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-2, 2), st.floats(1e-4, 1.0), st.floats(2.5, 200)), min_size=1, max_size=12))
def test_pooled_estimate_lies_among_the_rows_and_is_surer_than_each(rows):
    d, v, f = (np.array(column) for column in zip(*rows))
    estimate, variance, df, used = power.pooled(d, v, f)
    assert used == len(rows)
    assert d.min() - 1e-12 <= estimate <= d.max() + 1e-12
    assert variance <= np.min(v * f / (f - 2)) * (1 + 1e-12)
    assert min(f) * (1 - 1e-9) <= df <= sum(f) * (1 + 1e-9)


@pytest.mark.parametrize("df", [1.0, 2.0, 4.0, 8.0, 19.3, 38.0, 1e6, math.inf])
@pytest.mark.parametrize("level", [0.5, 0.95, 0.999405, 0.99999])
def test_the_detectable_effect_is_caught_80_percent_of_the_time(df, level):
    """At the MDE (the spread taken for the truth), the interval lies above 0 with probability
    P(noncentral t > t quantile): scipy's noncentral t says 0.80 within 0.001."""
    variance = 0.02
    mde = power.detectable(variance, df, level)
    critical = stats.t.ppf(1 - (1 - level) / 2, df)
    caught = stats.norm.sf(critical - mde / math.sqrt(variance)) if math.isinf(df) else \
        stats.nct.sf(critical, df, mde / math.sqrt(variance))
    assert caught == pytest.approx(power.POWER, abs=0.001)


def test_family_levels_by_hand():
    assert power.family_levels(0.95, 42, 6) == (pytest.approx(1 - 0.025 / 42), pytest.approx(1 - 0.025 / 6))
    assert power.family_levels(0.95, 10, 0) == (pytest.approx(0.995), pytest.approx(0.95))
    assert power.family_levels(0.9, 0, 4) == (pytest.approx(0.9), pytest.approx(0.975))


def test_verdicts_by_hand():
    assert verdict(1.11, 1.3, 0.10) == "REGRESSED"
    assert verdict(1.10, 1.3, 0.10) == "INCONCLUSIVE"  # touches 1 + margin: not above it
    assert verdict(0.5, 0.89, 0.10) == "IMPROVED"
    assert verdict(0.9, 1.1, 0.10) == "NO_CHANGE"
    assert verdict(0.85, 1.05, 0.10) == "INCONCLUSIVE"
    assert verdict(None, 1.05, 0.10) == "INCONCLUSIVE" and verdict(1.2, None, 0.10) == "REGRESSED"
    assert verdict(None, None, 0.10) == "INCONCLUSIVE"


def test_figures_of_a_row_by_hand():
    # log ratio 0.2, variance 0.01, df 10, level 0.95: t = 2.228138851986274
    found = figures(0.2, 0.01, 10.0, 0.95, 0.10)
    half = stats.t.ppf(0.975, 10) * 0.1
    assert found["estimate"] == round(math.exp(0.2), 4)
    assert (found["low"], found["high"]) == (round(math.exp(0.2 - half), 4), round(math.exp(0.2 + half), 4))
    mde = power.detectable(0.01, 10.0, 0.95)
    assert found["mde"] == round(math.exp(mde), 4) and found["regressedAt"] == round(1.1 * math.exp(mde), 4)
    assert found["verdict"] == "INCONCLUSIVE"  # [0.976, 1.52]: neither inside 1 +- 0.1 nor beyond it


@pytest.mark.slow
@pytest.mark.parametrize("runs", [5, 20])
def test_the_gate_holds_its_family_wise_error_on_noisy_rows(runs):
    """Nothing changed, 42 rows (7 scenarios x 3 modes x 2 metrics) with log-sd from 0.05 to 0.40 and
    6 pooled rows: the chance that any gated row says REGRESSED is at most (1 - level) / 2."""
    rng = np.random.default_rng(runs)
    comparisons, sd = 4000, np.linspace(0.05, 0.40, 42)
    base = rng.standard_normal((comparisons, 42, runs)) * sd[:, None]
    cand = rng.standard_normal((comparisons, 42, runs)) * sd[:, None]
    d, v, f = power.welch(runs, base.mean(-1), base.var(-1, ddof=1), runs, cand.mean(-1), cand.var(-1, ddof=1))
    row_level, pool_level = power.family_levels(0.95, 42, 6)
    low = d - stats.t.ppf(1 - (1 - row_level) / 2, f) * np.sqrt(v)
    regressed = np.any(low > math.log(1.1), axis=1)
    above_one = np.any(low > 0, axis=1)  # the looser event: any interval wholly above 1
    for mode in range(3):
        pooled = [power.pooled(d[i, mode::3], v[i, mode::3], f[i, mode::3]) for i in range(comparisons)]
        est, var, df = (np.array([row[k] for row in pooled]) for k in range(3))
        pooled_low = est - stats.t.ppf(1 - (1 - pool_level) / 2, df) * np.sqrt(var)
        regressed |= pooled_low > math.log(1.1)
        above_one |= pooled_low > 0
    assert regressed.mean() <= 0.025
    assert above_one.mean() <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / comparisons)
