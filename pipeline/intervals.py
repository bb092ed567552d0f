"""Intervals for percentiles: exact ones from the order statistics for a percentile of one sample,
the bootstrap for what has no exact interval, and the pairs that would resolve an objective.

**Exact, one sample** (`order_statistic_ranks`, `order_statistic_ends`). For n values of any
continuous distribution, the count B of values at or below the true percentile at fraction f is
Binomial(n, f). The r-th smallest value X(r) lies above the truth exactly when B <= r - 1, and the
s-th smallest X(s) below it exactly when B >= s. So [X(r), X(s)], with r the largest rank for which
P(B <= r - 1) <= (1 - level) / 2 and s the smallest for which P(B >= s) <= (1 - level) / 2, holds the
truth with at least `level`, each end missing with at most (1 - level) / 2, whatever the
distribution (with ties, less often). Two of the sample's own values, no seed, no resampling. Where
even the extreme value misses more often than that, (1 - f)^n below and f^n above, the sample cannot
bound that end: it is open (`open_ends`), and the other end is then a one-sided bound at
(1 + level) / 2. The binomial tails are summed from the probabilities of each count, built for many
sample sizes at once as the rows of one table (`binomial_rows`).

**The bootstrap** (`percentile_draws`, `paired_ratio_draws`), for a difference or ratio of two
percentiles. A percentile of n sorted values at fraction f is `x[k] + (x[k+1] - x[k]) * g` with
position (n-1)*f = k + g. A bootstrap resample (n draws with replacement) has the same n, so
its percentile is the same interpolation between its own (k+1)-th and (k+2)-th smallest
values. Those are the sample's values at the indices where the resample's order statistics
fall, and the indices of n draws are ceil(n*U) for n uniforms U: the resample's (k+1)-th
smallest is x at ceil(n*U_(k+1)) - 1 (0-based), with U_(k+1) ~ Beta(k+1, n-k), and given it,
U_(k+2) is the least of the n-k-1 uniforms above it: U_(k+1) + (1 - U_(k+1)) * Beta(1, n-k-1).
Two draws per resample give the resampled percentile with exactly the distribution that
resampling the n values and taking their percentile gives, whatever n is (`percentile_draws`).
Two samples of pairs (a run's direct and mode tokens) are resampled together instead, a pair at
a time (`paired_ratio_draws`). The interval is the percentile interval of the draws, at
(1 - level) / 2 and (1 + level) / 2 (linear interpolation, as
`scipy.stats.bootstrap(method="percentile")`). No resampling reaches past the sample's extremes,
so an end the sample cannot bound is open (`open_ends`; docs/statistics.md has the coverage
measured, and the rule for a side of a two-sample difference or ratio). Each statistic draws from
a generator of its own, seeded by the user's seed and the statistic's key (`generator`): the same
seed gives the same interval for a row whichever other rows are computed beside it.

**Repeats** (`repeats_to_resolve`): the fewest pairs at which an objective `percentile <= threshold`
resolves on the exact interval with an 80 % chance, computed exactly (no simulation, no seed) from
how many measured pairs lie at or below the threshold (`resolving_chance`).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

DEFAULT_LEVEL = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0


def generator(seed: int, *key: str) -> np.random.Generator:
    """A PCG64 stream for one statistic: from `seed` and the statistic's `key` (its names)."""
    digest = hashlib.blake2b("\x1f".join(key).encode("utf-8"), digest_size=16).digest()
    words = [int.from_bytes(digest[at:at + 4], "little") for at in range(0, 16, 4)]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *words])))


def percentile(sorted_values: np.ndarray, fraction: float) -> float:
    """The percentile at `fraction` of sorted values: position (n-1)*f, linear interpolation."""
    position = (len(sorted_values) - 1) * fraction
    lower = math.floor(position)
    low = sorted_values[lower]
    return float(low + (sorted_values[math.ceil(position)] - low) * (position - lower))


def percentile_draws(sorted_values: np.ndarray, fraction: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` draws of the percentile at `fraction` of a bootstrap resample of the sorted
    values (see the module's text); the sample must not be empty."""
    n = len(sorted_values)
    position = (n - 1) * fraction
    k = math.floor(position)
    weight = position - k

    def at(uniform: np.ndarray) -> np.ndarray:
        return sorted_values[np.clip(np.ceil(uniform * n).astype(np.int64) - 1, 0, n - 1)]

    first = rng.beta(k + 1, n - k, size=resamples)
    low = at(first)
    if weight == 0:
        return low.astype(np.float64)
    # the least of the n-k-1 uniforms above `first`: 1 - (1 - V)^(1/(n-k-1)) of the way up
    step = -np.expm1(np.log1p(-rng.random(resamples)) / (n - k - 1))
    high = at(first + (1.0 - first) * step)
    return low + (high - low) * weight


def open_ends(n: int, fraction: float, level: float, two_sample: bool = False) -> tuple[bool, bool]:
    """(low open, high open): whether n values cannot bound the percentile at `fraction` below or
    above at `level` (two-sided), whatever their distribution: the chance that the true percentile
    lies beyond all n values, (1 - f)^n below and f^n above, exceeds (1 - level) / 2.

    `two_sample`: the percentile is one side of a difference or ratio of two percentiles, whose
    error the other side shares; a side's end is open where that chance exceeds 1 - level
    (medians of 4 values or fewer, p95 of 58 or fewer, at 95 %: there the percentile bootstrap of
    a ratio of two samples' percentiles falls short of its level, docs/statistics.md)."""
    miss = (1.0 - level) if two_sample else (1.0 - level) / 2.0
    if n == 0:
        return True, True
    return (1.0 - fraction) ** n > miss, fraction ** n > miss


def percentile_interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval of bootstrap draws at `level`."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval; an end is None where the sample cannot bound it (`open_ends`)."""

    low: float | None
    high: float | None

    def at_most(self, threshold: float) -> bool:
        return self.high is not None and self.high <= threshold

    def above(self, threshold: float) -> bool:
        return self.low is not None and self.low > threshold


def paired_ratio_draws(first: np.ndarray, second: np.ndarray, fraction: float, resamples: int,
                       rng: np.random.Generator) -> np.ndarray:
    """`resamples` draws of `percentile(second) / percentile(first)` at `fraction` over a bootstrap
    resample of the pairs (first[i], second[i]): the pairs drawn together, with replacement, so that
    what the two sides share (a run index's task, its day) stays in every resample."""
    n = len(first)
    out = np.empty(resamples)
    per = max(1, (1 << 22) // n)  # resamples drawn at once: 4 M indices at most
    for start in range(0, resamples, per):
        picks = rng.integers(0, n, (min(per, resamples - start), n))
        out[start:start + len(picks)] = (np.quantile(second[picks], fraction, axis=1)
                                         / np.quantile(first[picks], fraction, axis=1))
    return out


# ---- exact intervals from the order statistics ---------------------------------------------------
CELLS_AT_ONCE = 1 << 21  # cells of a probability table built at once: 16 MB of float64


def _probability_rows(sizes: np.ndarray, log_ratio) -> np.ndarray:
    """A distribution on 0..m for each m of `sizes`, a row each (as wide as the largest m plus one,
    zero beyond a row's m), from log P(k+1)/P(k) as `log_ratio(m, k)` gives it for k < m: summed up
    from P(0) = 1 and each row divided by its total, so no normalising constant is computed."""
    width = int(sizes.max()) + 1
    m = sizes[:, None].astype(np.float64)
    k = np.arange(width - 1, dtype=np.float64)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.where(k < m, log_ratio(m, k), -np.inf)
    log_weights = np.concatenate([np.zeros((len(sizes), 1)), np.cumsum(steps, axis=1)], axis=1)
    weights = np.exp(log_weights - log_weights.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def binomial_rows(sizes: np.ndarray, p: float) -> np.ndarray:
    """P(Binomial(m, p) = k) for k = 0.. and each m of `sizes`, a row each."""
    if p <= 0.0 or p >= 1.0:
        rows = np.zeros((len(sizes), int(sizes.max()) + 1))
        rows[np.arange(len(sizes)), 0 if p <= 0.0 else sizes] = 1.0
        return rows
    odds = math.log(p) - math.log1p(-p)
    return _probability_rows(sizes, lambda m, k: np.log(m - k) - np.log(k + 1.0) + odds)


def beta_binomial_rows(sizes: np.ndarray, a: float, b: float) -> np.ndarray:
    """P(K = k) for K ~ BetaBinomial(m, a, b) (a binomial count whose p is drawn from Beta(a, b)),
    k = 0.. and each m of `sizes`, a row each."""
    return _probability_rows(sizes, lambda m, k: np.log(m - k) - np.log(k + 1.0) + np.log(k + a)
                             - np.log(m - k - 1.0 + b))


def _tails(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(K <= k) and P(K >= k) of each row, each summed from its own end (no 1 - x: the small tail
    keeps its digits)."""
    return np.cumsum(rows, axis=1), np.cumsum(rows[:, ::-1], axis=1)[:, ::-1]


def order_statistic_ranks(sizes, fraction: float, level: float) -> tuple[np.ndarray, np.ndarray]:
    """For each sample size n of `sizes`: the ranks r and s (1-based; 0 for an end n values cannot
    bound) of the order statistics X(r) <= X(s) that bound the percentile at `fraction` at `level`,
    each end missing with a chance of at most (1 - level) / 2 whatever the distribution:
    X(r) lies above the true percentile only when fewer than r of the n values lie at or below it,
    P(B <= r - 1) for B ~ Binomial(n, fraction) (at most that with ties), so r is the largest rank
    with that chance within the tail; X(s) lies below it only when s values do, P(B >= s), and s is
    the smallest such rank. An end is open where even the extreme value misses more often:
    (1 - f)^n below, f^n above (as `open_ends` has it)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    unique, where = np.unique(sizes, return_inverse=True)
    low, high = np.zeros(len(unique), np.int64), np.zeros(len(unique), np.int64)
    if not len(unique):
        return low, high
    tail = (1.0 - level) / 2.0 * (1.0 + 1e-9)  # a chance equal to the tail, summed a hair above it, is within
    per = max(1, CELLS_AT_ONCE // (int(unique[-1]) + 1))
    for start in range(0, len(unique), per):
        part = unique[start:start + per]
        at_most, at_least = _tails(binomial_rows(part, fraction))
        k = np.arange(at_most.shape[1])[None, :]
        inside = k <= part[:, None]
        low[start:start + per] = ((at_most <= tail) & inside).sum(axis=1)  # the ranks 1..r: k = 0..r-1
        count = ((at_least <= tail) & inside & (k >= 1)).sum(axis=1)  # the ranks s..n
        high[start:start + per] = np.where(count > 0, part + 1 - count, 0)
    # the extreme ranks' own chances, (1 - f)^n and f^n, decide as `open_ends` does, to the last bit
    low[(1.0 - fraction) ** unique > (1.0 - level) / 2.0] = 0
    high[fraction ** unique.astype(np.float64) > (1.0 - level) / 2.0] = 0
    return low[where], high[where]


def order_statistic_ends(values: np.ndarray, sizes: np.ndarray, fraction: float,
                         level: float) -> tuple[np.ndarray, np.ndarray]:
    """Samples laid end to end in `values`, each sorted, of the lengths `sizes`: the low and high end
    of each one's exact interval for the percentile at `fraction` (`order_statistic_ranks`), NaN
    where the sample cannot bound that end."""
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.cumsum(sizes) - sizes
    low_rank, high_rank = order_statistic_ranks(sizes, fraction, level)
    padded = np.append(np.asarray(values, dtype=np.float64), np.nan)  # index -1 (an open end) reads NaN

    def at(rank: np.ndarray) -> np.ndarray:
        return padded[np.where(rank > 0, starts + rank - 1, -1)]

    return at(low_rank), at(high_rank)


# ---- the pairs that would resolve an objective ---------------------------------------------------
REPEATS_CHANCE = 0.8
REPEATS_MAXIMUM = 2000
SIZES_AT_ONCE = 128  # pair counts tried at once: their ranks are kept for the next objective


@lru_cache(maxsize=64)
def _block_ranks(block: int, fraction: float, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The ranks of `order_statistic_ranks` for the sizes block * SIZES_AT_ONCE and the next ones."""
    return order_statistic_ranks(np.arange(block * SIZES_AT_ONCE, (block + 1) * SIZES_AT_ONCE), fraction, level)


def resolving_chance(sizes: np.ndarray, below: int, measured: int, fraction: float, level: float) -> np.ndarray:
    """For each m of `sizes`: the chance that m new pairs resolve `percentile at fraction <= threshold`
    on the exact interval, when `below` of the `measured` pairs lie at or below the threshold.
    Only the count K of new pairs at or below the threshold decides: MET when K >= s (X(s) at or below
    it), VIOLATED when K <= r - 1 (X(r) above it). K is binomial given the share q of all pairs at or
    below the threshold, and q is as uncertain as the measured pairs leave it, Beta(below + 1/2,
    measured - below + 1/2) (Jeffreys): K ~ BetaBinomial(m, below + 1/2, measured - below + 1/2)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    blocks = [_block_ranks(block, fraction, level) for block in range(int(sizes.min()) // SIZES_AT_ONCE,
                                                                      int(sizes.max()) // SIZES_AT_ONCE + 1)]
    offset = sizes - sizes.min() // SIZES_AT_ONCE * SIZES_AT_ONCE
    low, high = (np.concatenate([block[side] for block in blocks])[offset] for side in (0, 1))
    at_most, at_least = _tails(beta_binomial_rows(sizes, below + 0.5, measured - below + 0.5))
    rows = np.arange(len(sizes))
    met = np.where(high > 0, at_least[rows, high], 0.0)
    violated = np.where(low > 0, at_most[rows, np.maximum(low - 1, 0)], 0.0)
    return met + violated


def repeats_to_resolve(values: np.ndarray, threshold: float, fraction: float, level: float,
                       chance: float = REPEATS_CHANCE, maximum: int = REPEATS_MAXIMUM) -> int | None:
    """The fewest pairs, more than the measured `values` and at most `maximum`, at which the objective
    `percentile at fraction <= threshold` resolves (MET or VIOLATED on the exact interval) with at
    least `chance` (`resolving_chance`); None without values, or when more than `maximum` are needed.
    Only how many values there are and how many lie at or below the threshold decide."""
    if len(values) == 0:
        return None
    return _repeats(int(np.count_nonzero(np.asarray(values) <= threshold)), len(values), fraction, level, chance, maximum)


@lru_cache(maxsize=4096)
def _repeats(below: int, measured: int, fraction: float, level: float, chance: float, maximum: int) -> int | None:
    first = measured + 1
    while first <= maximum:  # a block of sizes at a time, on the blocks whose ranks are kept
        sizes = np.arange(first, min((first // SIZES_AT_ONCE + 1) * SIZES_AT_ONCE, maximum + 1))
        found = np.flatnonzero(resolving_chance(sizes, below, measured, fraction, level) >= chance)
        if found.size:
            return int(sizes[found[0]])
        first = int(sizes[-1]) + 1
    return None


def level_text(level: float) -> str:
    """A confidence level in percent to 4 significant digits, or, nearer 100 %, to two digits of what it
    leaves out (99.9988 %, not 100 %: an interval at 100 % would be unbounded)."""
    left = (1.0 - level) * 100
    if left >= 0.01 or left <= 0:
        return f"{level * 100:.4g}%"
    places = math.ceil(-math.log10(left)) + 1
    return f"{level * 100:.{places}f}".rstrip("0").rstrip(".") + "%"
