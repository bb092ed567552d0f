"""The numbers behind `compare`'s intervals: t intervals on log values, Student's t quantile,
the minimum detectable effect, the inverse-variance pooled row, and the Bonferroni levels that
hold the gate's family-wise error.

Everything is on the log scale: a ratio r is log(r), a row's estimate is the difference of the
two run sets' mean log values, so exp(estimate) is the ratio of their geometric means.

**A row** (`welch`): n runs with log values of mean m and variance v (ddof 1) on each side;
estimate d = m_c - m_b; Welch's variance v_b / n_b + v_c / n_c and degrees of freedom
df = (v_b / n_b + v_c / n_c)^2 / ((v_b / n_b)^2 / (n_b - 1) + (v_c / n_c)^2 / (n_c - 1)). The
variance used, s2, is the larger of Welch's and Student's pooled one,
((n_b - 1) v_b + (n_c - 1) v_c) / (n_b + n_c - 2) * (1 / n_b + 1 / n_c). With as many runs a side
the two are equal. With fewer runs on one side, Welch's trusts that side's own spread, and 5 runs
of clustered tokens often all land in one cluster and look tight: Welch's 95 % interval then
holds 0.88 of the time at 5 runs against 20 (0.71 at 3 against 20), the larger one 0.97.
The interval at level L is d +- t(1 - (1 - L) / 2, df) * sqrt(s2).

**The minimum detectable effect** (`detectable`): the true log ratio whose interval lies wholly
above 0 (no change) with probability POWER, the row's spread taken for the truth. Under that
effect d / sqrt(s2) is a noncentral t with df degrees of freedom; the MDE is the noncentrality at
which it passes the interval's quantile t(1 - (1 - L) / 2, df) POWER of the time, times sqrt(s2)
(`_caught` integrates the noncentral t's tail over the law of the spread's estimate). The usual
shortcut (t quantile + t(POWER, df)) * sqrt(s2) falls 5 % short at 8 degrees of freedom (5 runs a
side) and the level of one row among 48: its effect is caught 74 % of the time, not 80 %.

**A pooled row** (`pooled`): the rows' estimates weighted by the inverse of their variances. A
row's s2 comes from few runs, and weights from noisy variances make 1 / sum(w) too small (the
rows whose variance came out small weigh most). Each row enters with the variance of its own t
statistic, s2 * df / (df - 2) (a t with df degrees of freedom has variance df / (df - 2), so
this is the variance a normal of the same spread would need); a row with df <= 2 has none finite
and weighs nothing. The pooled interval is t on Satterthwaite's degrees of freedom of the
weighted sum. docs/statistics.md has the coverage this gives, measured against the alternatives.

**Student's t quantile** (`t_quantile`) without scipy: the tail from the regularized incomplete
beta function (its continued fraction), inverted by Newton's method kept inside a bracket that
always holds the root: the normal quantile below, the Cauchy quantile (t with 1 df) above. With 1
degree of freedom the Cauchy's closed form is the answer, beyond 1e5 the Cornish-Fisher expansion.
The search works on the smaller tail probability, so that no digits go to 1 - p.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

POWER = 0.80  # the chance of detection the minimum detectable effect is quoted at
_NORMAL = NormalDist()


# ---- Student's t -------------------------------------------------------------------------------------
def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), for x < (a+1)/(a+b+2)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 1000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return result


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """The regularized incomplete beta function I_x(a, b), given x and y = 1 - x (each computed
    on its own, so that neither loses its digits to a subtraction)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, y) / b


def _normal_tail(z: float) -> float:
    """P(Z > z) for a standard normal, to full relative precision far in either tail."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def t_tail(t: float, df: float) -> float:
    """P(T > t) for T ~ Student's t with `df` degrees of freedom (df = inf: the normal)."""
    if math.isinf(df):
        return _normal_tail(t)
    half = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))
    return half if t >= 0 else 1.0 - half


def _t_density(t: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
                    - (df + 1) / 2 * math.log1p(t * t / df))


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` >= 1 degrees of freedom (inf: the normal's)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1 (got {p})")
    if p == 0.5:
        return 0.0
    # searched as the point above which `tail` lies: p itself below the median (no digits lost to 1 - p)
    return -_upper_point(p, df) if p < 0.5 else _upper_point(1.0 - p, df)


def _upper_point(tail: float, df: float) -> float:
    """The t > 0 with P(T > t) = tail < 1/2."""
    z = -_NORMAL.inv_cdf(tail)
    if math.isinf(df):
        return z
    # Cornish-Fisher: the start, and the answer itself where df is so large that its next term is nil
    g1, g2 = (z ** 3 + z) / 4, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    expansion = z + g1 / df + g2 / df ** 2 + g3 / df ** 3
    if df > 1e5:
        return expansion
    if df == 1:
        return 1.0 / math.tan(math.pi * tail)  # the Cauchy's, exactly
    low, high = z, math.tan(math.pi * (0.5 - tail))  # t(df) lies between the normal and the Cauchy (df = 1)
    if df < 1.0:
        while t_tail(high, df) > tail:
            high *= 2.0
    t = min(max(expansion, low), high)
    for _ in range(200):
        excess = t_tail(t, df) - tail
        if excess > 0:
            low = t
        else:
            high = t
        density = _t_density(t, df)
        guess = t + excess / density if density > 0 else high
        t_next = guess if low < guess < high else (low + high) / 2
        if abs(t_next - t) <= 1e-14 * t:
            return t_next
        t = t_next
    return t


def _caught(shift: float, critical: float, df: float) -> tuple[float, float]:
    """P(T' > critical) for T' a noncentral t with `df` degrees of freedom and noncentrality `shift`,
    and its derivative in `shift`. T' = (Z + shift) / U with U^2 ~ chi^2(df) / df, so the chance is
    the mean over U of P(Z > critical U - shift): integrated (trapezoids) on a grid that spans U's
    law and, finer, the band where that normal tail turns from 1 to 0 (1 / critical wide)."""
    if math.isinf(df):
        return _normal_tail(critical - shift), math.exp(-0.5 * (critical - shift) ** 2) / math.sqrt(2 * math.pi)
    width, centre = 9.0 / math.sqrt(df), shift / critical
    u = np.unique(np.concatenate([np.linspace(max(1.0 - width, 0.0), 1.0 + width, 401),
                                  np.linspace(centre - 12.0 / critical, centre + 12.0 / critical, 201)]))
    u = u[u >= 0]
    powers = (df - 1) * np.log(np.where(u > 0, u, 1.0))
    log_density = np.where(u > 0, powers, 0.0 if df == 1 else -np.inf) - df * u * u / 2  # U's, up to a constant
    density = np.exp(log_density - log_density.max())
    points = critical * u - shift
    tails = np.array([_normal_tail(x) for x in points])
    total = np.trapezoid(density, u)
    return (float(np.trapezoid(density * tails, u) / total),
            float(np.trapezoid(density * np.exp(-0.5 * points * points), u) / total) / math.sqrt(2 * math.pi))


# ---- rows ----------------------------------------------------------------------------------------------
def welch(n_b: np.ndarray, mean_b: np.ndarray, var_b: np.ndarray, n_c: np.ndarray, mean_c: np.ndarray,
          var_c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the estimate (difference of mean logs), its variance (the larger of Welch's and
    Student's, above) and Welch's degrees of freedom. NaN where a side has fewer than 2 values; df
    is inf where neither side varies."""
    n_b, n_c = np.asarray(n_b, float), np.asarray(n_c, float)
    var_b, var_c = np.asarray(var_b, float), np.asarray(var_c, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        part_b, part_c = var_b / n_b, var_c / n_c
        df = (part_b + part_c) ** 2 / (part_b ** 2 / (n_b - 1) + part_c ** 2 / (n_c - 1))
        student = ((n_b - 1) * var_b + (n_c - 1) * var_c) / (n_b + n_c - 2) * (1 / n_b + 1 / n_c)
        variance = np.maximum(part_b + part_c, student)
    measured = (n_b >= 2) & (n_c >= 2)
    df = np.where(measured & (variance == 0), np.inf, df)
    nan = np.full(variance.shape, np.nan)
    return (np.where(measured, np.asarray(mean_c, float) - np.asarray(mean_b, float), nan),
            np.where(measured, variance, nan), np.where(measured, df, nan))


def difference(first: tuple[np.ndarray, np.ndarray, np.ndarray],
               second: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two independent rows' estimate first - second: the variances add, the degrees of freedom
    by Satterthwaite (each variance counted with its own df)."""
    (d1, v1, f1), (d2, v2, f2) = first, second
    variance = v1 + v2
    with np.errstate(divide="ignore", invalid="ignore"):
        df = variance ** 2 / (np.where(np.isinf(f1), 0.0, v1 ** 2 / f1) + np.where(np.isinf(f2), 0.0, v2 ** 2 / f2))
    return d1 - d2, variance, np.where(variance == 0, np.inf, df)


def half_width(variance: float, df: float, level: float) -> float:
    """The half-width of the t interval at `level` on a variance and its degrees of freedom."""
    return t_quantile(1.0 - (1.0 - level) / 2.0, df) * math.sqrt(variance) if variance > 0 else 0.0


def detectable(variance: float, df: float, level: float, power: float = POWER) -> float:
    """The true log ratio the interval at `level` would put wholly above 0 with probability `power`:
    the noncentrality at which the noncentral t passes the interval's t quantile that often, in
    standard errors (Newton's method from the normal approximation's answer; the chance rises
    with the noncentrality, and is concave past it, so the steps approach from below)."""
    if variance <= 0:
        return 0.0
    critical = t_quantile(1.0 - (1.0 - level) / 2.0, df)
    z = _NORMAL.inv_cdf(power)
    shift = critical + z * (1.0 if math.isinf(df) else math.sqrt(1.0 + critical * critical / (2.0 * df)))
    for _ in range(50):
        chance, slope = _caught(shift, critical, df)
        step = (power - chance) / slope
        shift += step
        if abs(step) < 1e-7 * shift:
            break
    return shift * math.sqrt(variance)


def pooled(estimates: np.ndarray, variances: np.ndarray, dfs: np.ndarray) -> tuple[float, float, float, int]:
    """Rows pooled by inverse variance: (estimate, variance, degrees of freedom, rows that weigh).
    Each row's variance is its t statistic's, variance * df / (df - 2); rows with df <= 2 (no
    finite variance), no variance measured or none at all (a side that does not vary: their weight
    would be infinite) are left out. NaNs when no row weighs."""
    d, v, f = (np.asarray(x, float) for x in (estimates, variances, dfs))
    usable = np.isfinite(d) & np.isfinite(v) & (v > 0) & (f > 2)
    if not usable.any():
        return math.nan, math.nan, math.nan, 0
    d, v, f = d[usable], v[usable], f[usable]
    inflated = v * np.where(np.isinf(f), 1.0, f / np.where(np.isinf(f), 1.0, f - 2.0))
    weights = 1.0 / inflated
    total = weights.sum()
    share = weights / total
    parts = share ** 2 * inflated  # each row's part of the pooled variance, 1 / total in sum
    denominator = float(np.sum(np.where(np.isinf(f), 0.0, parts ** 2 / f)))
    df = math.inf if denominator == 0 else float(parts.sum() ** 2 / denominator)
    return float(share @ d), float(1.0 / total), df, int(usable.sum())


# ---- the family -------------------------------------------------------------------------------------------
def family_levels(level: float, scenario_rows: int, pooled_rows: int) -> tuple[float, float]:
    """Bonferroni: the level of each scenario row and of each pooled row, such that all the gated
    intervals hold at once with probability at least `level`. The error allowed, 1 - level, goes
    half to the pooled rows and half to the scenario rows (all of it to one kind when the other
    has none), split evenly within each kind."""
    alpha = 1.0 - level
    if scenario_rows and pooled_rows:
        return 1.0 - alpha / 2 / scenario_rows, 1.0 - alpha / 2 / pooled_rows
    return 1.0 - alpha / max(scenario_rows, 1), 1.0 - alpha / max(pooled_rows, 1)
