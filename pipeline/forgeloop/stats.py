"""ForgeLoop's statistics as polars expressions over long tables of values.

Every function takes a frame with group columns and a `value` column (nulls allowed) and
returns one row per group, so a whole warehouse is summarised in one pass.

- percentile: sorted finite values, position (n-1)*f, `lo + (hi - lo) * (pos - floor)`,
  written out with `gather` so the float operations are JavaScript's exactly;
- average: the sum in ascending order, one addition after the other (what
  `sorted.reduce` does), divided by the count;
- robustStatistic (v2) and statistic (v1) are built from those, unrounded here; the
  documents round with `numbers.js_round4_expr`.
"""
from __future__ import annotations

import polars as pl

from ..numbers import js_round4_expr

ROBUST_FIELDS = ("count", "average", "minimum", "p25", "p50", "p75", "p90", "p95", "maximum", "iqr", "mad", "outlierCount")
LEGACY_FIELDS = ("count", "average", "p50", "p95", "minimum", "maximum")
UNROUNDED = ("count", "minimum", "maximum", "outlierCount")


def percentile(sorted_values: pl.Expr, fraction: float) -> pl.Expr:
    """Linear percentile of a sorted, non-empty, null-free expression (inside a group)."""
    position = (sorted_values.len() - 1).cast(pl.Float64) * fraction
    lower = position.floor()
    low = sorted_values.gather(lower.cast(pl.Int64)).first()
    high = sorted_values.gather(position.ceil().cast(pl.Int64)).first()
    return low + (high - low) * (position - lower)


def sequential_sum(sorted_values: pl.Expr) -> pl.Expr:
    """The sum of sorted values added left to right, as JavaScript's reduce does."""
    return sorted_values.cum_sum().last()


def sorted_finite(values: pl.DataFrame | pl.LazyFrame, by: list[str], column: str = "value") -> pl.LazyFrame:
    """The finite values only, as Float64, sorted within each group (groups keep that order)."""
    value = pl.col(column).cast(pl.Float64)
    return (
        values.lazy()
        .with_columns(value.alias(column))
        .filter(pl.col(column).is_not_null() & pl.col(column).is_finite())
        .sort([*by, column], nulls_last=True)
    )


def _with_empty_groups(statistics: pl.LazyFrame, values, by: list[str], empty: dict) -> pl.LazyFrame:
    groups = values.lazy().select(by).unique(maintain_order=True)
    joined = groups.join(statistics, on=by, how="left", nulls_equal=True, maintain_order="left")
    return joined.with_columns(pl.col(name).fill_null(fill) for name, fill in empty.items())


def robust_statistics(values: pl.DataFrame | pl.LazyFrame, by: list[str], column: str = "value") -> pl.LazyFrame:
    """Unrounded robustStatistic per group of `values` (groups without a finite value: count 0)."""
    value = pl.col(column)
    q1, median, q3 = percentile(value, 0.25), percentile(value, 0.5), percentile(value, 0.75)
    statistics = sorted_finite(values, by, column).group_by(by, maintain_order=True).agg(
        value.len().cast(pl.Int64).alias("count"),
        (sequential_sum(value) / value.len()).alias("average"),
        value.first().alias("minimum"),
        q1.alias("p25"),
        median.alias("p50"),
        q3.alias("p75"),
        percentile(value, 0.9).alias("p90"),
        percentile(value, 0.95).alias("p95"),
        value.last().alias("maximum"),
        (q3 - q1).alias("iqr"),
        percentile((value - median).abs().sort(), 0.5).alias("mad"),
        (value > q3 + 1.5 * (q3 - q1)).sum().cast(pl.Int64).alias("outlierCount"),
    )
    return _with_empty_groups(statistics, values, by, {"count": 0, "outlierCount": 0})


def statistics(values: pl.DataFrame | pl.LazyFrame, by: list[str], column: str = "value") -> pl.LazyFrame:
    """Unrounded statistic (benchmarkVersion 1) per group: count, average, p50, p95, min, max."""
    value = pl.col(column)
    result = sorted_finite(values, by, column).group_by(by, maintain_order=True).agg(
        value.len().cast(pl.Int64).alias("count"),
        (sequential_sum(value) / value.len()).alias("average"),
        percentile(value, 0.5).alias("p50"),
        percentile(value, 0.95).alias("p95"),
        value.first().alias("minimum"),
        value.last().alias("maximum"),
    )
    return _with_empty_groups(result, values, by, {"count": 0})


def rounded(statistics: pl.LazyFrame | pl.DataFrame, fields: tuple[str, ...] = ROBUST_FIELDS) -> pl.LazyFrame:
    """Round what ForgeLoop rounds (everything but count, minimum, maximum, outlierCount)."""
    return statistics.lazy().with_columns(
        js_round4_expr(pl.col(name)).alias(name) for name in fields if name not in UNROUNDED
    )
