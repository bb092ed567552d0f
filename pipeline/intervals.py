"""Bootstrap intervals for percentiles, drawn exactly, in constant time per resample.

A percentile of n sorted values at fraction f is `x[k] + (x[k+1] - x[k]) * g` with
position (n-1)*f = k + g. A bootstrap resample (n draws with replacement) has the same n, so
its percentile is the same interpolation between its own (k+1)-th and (k+2)-th smallest
values. Those are the sample's values at the indices where the resample's order statistics
fall, and the indices of n draws are ceil(n*U) for n uniforms U: the resample's (k+1)-th
smallest is x at ceil(n*U_(k+1)) - 1 (0-based), with U_(k+1) ~ Beta(k+1, n-k), and given it,
U_(k+2) is the least of the n-k-1 uniforms above it: U_(k+1) + (1 - U_(k+1)) * Beta(1, n-k-1).
Two draws per resample give the resampled percentile with exactly the distribution that
resampling the n values and taking their percentile gives, whatever n is (`percentile_draws`).

The interval is the percentile interval of those draws, at (1 - level) / 2 and (1 + level) / 2
(linear interpolation, as `scipy.stats.bootstrap(method="percentile")`). A sample cannot bound
a percentile where the chance that the true one lies beyond all its values exceeds
(1 - level) / 2: above, f^n; below, (1 - f)^n (for any continuous distribution). No resampling
reaches past the sample's extremes, so such an end is open (None) rather than a number that
would claim more than the data holds (`open_ends`; docs/statistics.md has the coverage measured,
and the rule for a side of a two-sample difference or ratio).

Each statistic draws from a generator of its own, seeded by the user's seed and the
statistic's key (`generator`): the same seed gives the same interval for a row whichever other
rows are computed beside it.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

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

    `two_sample`: the percentile is one side of a difference or ratio of two independent samples,
    whose error the other side shares; a side's end is open where that chance exceeds 1 - level
    (medians of 4 values or fewer, p95 of 58 or fewer, at 95 %: the coverage measured in
    docs/statistics.md falls short there, and holds from there on)."""
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


def closed(low: float, high: float, low_open: bool, high_open: bool) -> Interval:
    return Interval(None if low_open else low, None if high_open else high)


def bound_needed(fraction: float, level: float, upper: bool) -> int:
    """The fewest values that can bound the percentile at `fraction` above (`upper`) or below."""
    tail = (1.0 - level) / 2.0
    p = fraction if upper else 1.0 - fraction
    if p <= 0.0:
        return 1
    return max(1, math.ceil(math.log(tail) / math.log(p) - 1e-12))


def repeats_needed(n: int, estimate: float | None, interval: Interval, threshold: float, fraction: float,
                   level: float) -> int | None:
    """How many pairs would let an interval that straddles `threshold` clear it, if the spread
    stayed as this sample shows it: the half-width toward the threshold shrinks as 1/sqrt(n), so
    n * (half-width / distance)^2, and at least what bounds that end at all (`bound_needed`).
    None when the estimate sits on the threshold or nothing is measured."""
    if estimate is None or n == 0 or estimate == threshold:
        return None
    upper = estimate < threshold  # the high end must come down to the threshold (else the low end up)
    toward = interval.high if upper else interval.low
    away = interval.low if upper else interval.high
    if toward is not None:
        half = abs(toward - estimate)
    elif away is not None:  # the end toward the threshold is open: the other side's spread, mirrored
        half = abs(estimate - away)
    else:
        half = None
    needed = bound_needed(fraction, level, upper)
    if half is not None and half > 0:
        needed = max(needed, math.ceil(n * (half / abs(threshold - estimate)) ** 2))
    return max(n + 1, needed)
