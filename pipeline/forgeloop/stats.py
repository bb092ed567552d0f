"""ForgeLoop's statistics for every group of a table at once, with polars.

The values are sorted once by (group, value); each group is then a run of rows with a
start and a count, and every statistic is index arithmetic over the per-group table:

- percentile at fraction f: position (n-1)*f, `lo + (hi - lo) * (pos - floor)` with lo and
  hi gathered at start + floor(pos) and start + ceil(pos) — JavaScript's float operations
  exactly, not a library's interpolation;
- average: the running sum within the group (`cum_sum` over the group: ascending values
  added left to right, as ForgeLoop's `sorted.reduce` does) at the group's last row, / n;
- mad: the deviations from the group's median, sorted the same way, at the median position;
- outlierCount: values above q3 + 1.5 (q3 - q1), with unrounded quartiles.

Everything here is unrounded; `rounded` applies ForgeLoop's `toFixed(4)` rule.
"""
from __future__ import annotations

import polars as pl

from ..numbers import js_round4_expr

ROBUST_FIELDS = ("count", "average", "minimum", "p25", "p50", "p75", "p90", "p95", "maximum", "iqr", "mad", "outlierCount")
LEGACY_FIELDS = ("count", "average", "p50", "p95", "minimum", "maximum")
UNROUNDED = ("count", "minimum", "maximum", "outlierCount")


def group_ids(frame: pl.DataFrame, by: list[str]) -> tuple[pl.DataFrame, pl.Series]:
    """The distinct groups (in order of first appearance) and each row's group number."""
    keys = frame.select(by)
    groups = keys.unique(maintain_order=True)
    numbered = keys.join(groups.with_row_index("gid"), on=by, how="left", maintain_order="left", nulls_equal=True)
    return groups, numbered["gid"]


def _sorted_runs(gid: pl.Series, values: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Finite values sorted by (group, value), and per present group its start row and count."""
    data = (
        pl.DataFrame({"gid": gid, "value": values.cast(pl.Float64)})
        .filter(pl.col("value").is_not_null() & pl.col("value").is_finite())
        .sort("gid", "value")
    )
    runs = (
        data.with_row_index("row")
        .group_by("gid", maintain_order=True)
        .agg(pl.col("row").first().cast(pl.Int64).alias("start"), pl.len().cast(pl.Int64).alias("count"))
    )
    return data, runs


def _percentile(values: pl.Series, runs: pl.DataFrame, fraction: float) -> pl.Series:
    position = (runs["count"] - 1).cast(pl.Float64) * fraction
    lower = position.floor()
    low = values.gather(runs["start"] + lower.cast(pl.Int64))
    high = values.gather(runs["start"] + position.ceil().cast(pl.Int64))
    return low + (high - low) * (position - lower)


def _per_row(group_values: pl.Series, data: pl.DataFrame, runs: pl.DataFrame) -> pl.Series:
    """Spread one value per present group back onto the group's rows."""
    numbered = runs.select("gid").with_row_index("at")
    return group_values.gather(data.select("gid").join(numbered, on="gid", how="left", maintain_order="left")["at"])


def _robust_by_group(gid: pl.Series, values: pl.Series, legacy: bool = False) -> pl.DataFrame:
    """One row per group with a finite value: `gid` and the unrounded statistics."""
    data, runs = _sorted_runs(gid, values)
    sorted_values = data["value"]
    last = runs["start"] + runs["count"] - 1
    running = data.select(pl.col("value").cum_sum().over("gid"))["value"]
    median = _percentile(sorted_values, runs, 0.5)
    result = {
        "gid": runs["gid"],
        "count": runs["count"],
        "average": running.gather(last) / runs["count"].cast(pl.Float64),
        "minimum": sorted_values.gather(runs["start"]),
        "p50": median,
        "p95": _percentile(sorted_values, runs, 0.95),
        "maximum": sorted_values.gather(last),
    }
    if not legacy:
        q1, q3 = _percentile(sorted_values, runs, 0.25), _percentile(sorted_values, runs, 0.75)
        fence = _per_row(q3 + 1.5 * (q3 - q1), data, runs)
        deviations = (
            pl.DataFrame({"gid": data["gid"], "value": (sorted_values - _per_row(median, data, runs)).abs()})
            .sort("gid", "value")["value"]
        )
        outliers = (
            pl.DataFrame({"gid": data["gid"], "above": sorted_values > fence})
            .group_by("gid", maintain_order=True)
            .agg(pl.col("above").sum().cast(pl.Int64))["above"]
        )
        result.update(
            p25=q1, p75=q3, p90=_percentile(sorted_values, runs, 0.9), iqr=q3 - q1,
            mad=_percentile(deviations, runs, 0.5), outlierCount=outliers,
        )
    return pl.DataFrame(result).select("gid", *(LEGACY_FIELDS if legacy else ROBUST_FIELDS))


def _statistics(values: pl.DataFrame | pl.LazyFrame, by: list[str], column: str, legacy: bool) -> pl.DataFrame:
    frame = values.collect() if isinstance(values, pl.LazyFrame) else values
    groups, gid = group_ids(frame, by)
    present = _robust_by_group(gid, frame[column], legacy)
    joined = groups.with_row_index("gid").join(present, on="gid", how="left", maintain_order="left").drop("gid")
    zero = ["count"] if legacy else ["count", "outlierCount"]
    return joined.with_columns(pl.col(zero).fill_null(0))


def robust_statistics(values: pl.DataFrame | pl.LazyFrame, by: list[str], column: str = "value") -> pl.DataFrame:
    """Unrounded robustStatistic per group (groups without a finite value: count 0, the rest null)."""
    return _statistics(values, by, column, legacy=False)


def statistics(values: pl.DataFrame | pl.LazyFrame, by: list[str], column: str = "value") -> pl.DataFrame:
    """Unrounded statistic (benchmarkVersion 1) per group: count, average, p50, p95, min, max."""
    return _statistics(values, by, column, legacy=True)


def metric_statistics(frame: pl.DataFrame, by: list[str], metrics: list[str]) -> pl.DataFrame:
    """robustStatistic of each metric column per group, as a long table with a `metric` column
    (metric by metric, the groups of each in order of first appearance).

    All metrics in one pass: the values stacked metric by metric, each (metric, group) a
    cell numbered metric * groups + group, so one sort serves every metric (one per metric
    cost more in polars' fixed cost per call than in sorting)."""
    groups, gid = group_ids(frame, by)
    size = groups.height
    values = pl.concat([frame[name].cast(pl.Float64) for name in metrics])
    cells = pl.concat([gid.cast(pl.Int64) + index * size for index in range(len(metrics))])
    present = _robust_by_group(cells, values)
    grid = pl.DataFrame({"gid": pl.int_range(0, size * len(metrics), dtype=pl.Int64, eager=True)})
    statistics_ = grid.join(present, on="gid", how="left", maintain_order="left")
    metric = pl.Series("metric", metrics, dtype=pl.String).gather(statistics_["gid"] // size)
    return (
        pl.concat([groups] * len(metrics))
        .with_columns(metric)
        .hstack(statistics_.select(ROBUST_FIELDS))
        .with_columns(pl.col("count", "outlierCount").fill_null(0))
    )


def rounded(statistics_: pl.LazyFrame | pl.DataFrame, fields: tuple[str, ...] = ROBUST_FIELDS) -> pl.LazyFrame:
    """Round what ForgeLoop rounds (everything but count, minimum, maximum, outlierCount)."""
    present = statistics_.collect_schema().names()
    return statistics_.lazy().with_columns(
        js_round4_expr(pl.col(name)).alias(name) for name in fields if name not in UNROUNDED and name in present
    )
