"""Routing analytics: how each model does per tier (observational), and what the randomized
exploration draws say (intent to treat, Hajek means, run-cluster bootstrap).

The numbers are the seed's (`forge dataset routing`), computed from `forge_tasks`:

- observational: `forge_routing_observational.sql` groups and counts in DuckDB; the Wilson
  interval and the mean are finished here, row by row (a handful of rows);
- randomized: `forge_routing_assignments.sql` lists each task in the arm its decision
  assigned; per pair the window, the Hajek means and Kish's n_eff follow the seed's order
  of summation exactly. The bootstrap draws the seed's resamples — `random.Random(7)`,
  `choice` over the pair's runs sorted by str, pairs in the seed's order — but reduces each
  run to its lists of weights and weighted passes per arm, draws the indices in bulk from
  the generator's 32-bit words, and folds each resample's sums in polars in the seed's order.
"""
from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..duckdb_module import duckdb
from ..sql.queries import query_text, run_query

WINDOWS = (30, 60, 120)
NONINFERIORITY = -0.10
BOOTSTRAP = 2000
MIN_ALTERNATIVES, MIN_RUNS = 10, 3
Z = 1.96
SEED = 7


@dataclass(frozen=True)
class Scope:
    repo: str | None = None  # a repository path (realpath of --repo)
    since: float | None = None  # unix seconds


def wilson(k: int, n: int, z: float = Z) -> tuple[float | None, float | None]:
    """Wilson score interval of k successes in n (the seed's formula, operation for operation)."""
    if not n:
        return None, None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _median(values: list[float]) -> float | None:
    """statistics.median: the middle value, or the mean of the two middle ones."""
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _mean_of_counts(total: int, n: int) -> int | float:
    """statistics.mean of integers: an int when the mean is whole, else the correctly rounded float."""
    return total // n if total % n == 0 else total / n


def scope_tasks(connection: duckdb.DuckDBPyConnection, scope: Scope) -> None:
    """Materialize forge_routing_scope (the task records routing reads) in `connection`."""
    connection.sql(
        f"CREATE OR REPLACE TEMP TABLE forge_routing_scope AS {query_text('forge_routing_scope')}",
        params={"repo": scope.repo, "since": scope.since},
    )


def observational(connection: duckdb.DuckDBPyConnection) -> list[dict]:
    rows = []
    for cell in run_query(connection, "forge_routing_observational").iter_rows(named=True):
        n = cell["tasks"]
        low, high = wilson(cell["first_passes"], n)
        median = cell["runtime_median_s"]
        rows.append(dict(
            tier=cell["tier"], spec=cell["spec"], tasks=n, first_pass=cell["first_passes"] / n, ci=[low, high],
            passed=cell["passed"] / n, unfinished=n - cell["passed"],
            attempts=_mean_of_counts(cell["attempts_sum"], n),
            runtime_min=None if median is None else median / 60,
        ))
    return rows


# ---- randomized ------------------------------------------------------------------------

@dataclass
class Item:
    run: Any
    arm: str
    weight: float  # 1 / propensity
    first_pass: bool | None
    runtime_s: float | None
    followed: bool | None
    at: float


def _hajek(items: list[Item]) -> tuple[float | None, float]:
    """(weighted first-pass, Kish effective n) over items with an outcome, summed in item order.
    Item by item, as the seed computes it: the reference `_hajek_frame` (which the report uses) is
    tested against."""
    known = [(i.weight, 1.0 if i.first_pass else 0.0) for i in items if i.first_pass is not None]
    total = sum(w for w, _ in known)
    if not total:
        return None, 0.0
    return sum(w * y for w, y in known) / total, total * total / sum(w * w for w, _ in known)


def _difference(items: list[Item]) -> float | None:
    a, _ = _hajek([i for i in items if i.arm == "alternative"])
    d, _ = _hajek([i for i in items if i.arm == "default"])
    return None if a is None or d is None else a - d


def _items_frame(items: list[Item]) -> pl.DataFrame:
    """Items as the frame the randomized table works on (item order kept)."""
    return pl.DataFrame(
        {"run": [i.run for i in items], "arm": [i.arm for i in items], "weight": [i.weight for i in items],
         "first_pass": [i.first_pass for i in items], "runtime_s": [i.runtime_s for i in items],
         "followed": [i.followed for i in items], "at": [i.at for i in items]},
        schema=_ITEM_SCHEMA)


_ITEM_SCHEMA = {"run": pl.String, "arm": pl.String, "weight": pl.Float64, "first_pass": pl.Boolean,
                "runtime_s": pl.Float64, "followed": pl.Boolean, "at": pl.Float64}


def _in_order_sum(values: pl.Expr) -> pl.Expr:
    """Python's sum() of the values: folded left to right (a cumulative sum's last value), 0 when none."""
    return values.cum_sum().last().fill_null(0.0)


def _hajek_frame(items: pl.DataFrame) -> tuple[float | None, float]:
    """`_hajek` of the items of a frame (run, arm, weight, first_pass, ...), in its row order."""
    known = items.filter(pl.col("first_pass").is_not_null())
    total, weighted, squares = known.select(
        _in_order_sum(pl.col("weight")).alias("total"),
        _in_order_sum(pl.col("weight") * pl.when(pl.col("first_pass")).then(1.0).otherwise(0.0)).alias("weighted"),
        _in_order_sum(pl.col("weight") * pl.col("weight")).alias("squares"),
    ).row(0)
    if not total:
        return None, 0.0
    return weighted / total, total * total / squares


def _difference_frame(items: pl.DataFrame) -> float | None:
    a, _ = _hajek_frame(items.filter(pl.col("arm") == "alternative"))
    d, _ = _hajek_frame(items.filter(pl.col("arm") == "default"))
    return None if a is None or d is None else a - d


def draw_indices(rng: random.Random, n: int, count: int) -> pl.Series:
    """`[rng.choice(range(n)) for _ in range(count)]`, exactly, leaving `rng` in the same state.

    `choice` is `_randbelow(n)`: take the top `n.bit_length()` bits of the generator's next
    32-bit word, draw again while the value is >= n. The words are taken in blocks with one
    `getrandbits` call and filtered in polars; the generator is then set to exactly the
    words used."""
    if count == 0:
        return pl.Series("index", [], dtype=pl.UInt32)
    if sys.byteorder != "little" or n >= 2**32:
        return pl.Series("index", [rng._randbelow(n) for _ in range(count)], dtype=pl.UInt64)
    import pyarrow as pa

    shift = 32 - n.bit_length()
    state = rng.getstate()
    chunks: list[pl.Series] = []
    have, used = 0, 0
    while have < count:
        need = count - have
        block = int(need * (2 ** n.bit_length()) / n * 1.05) + 64
        raw = rng.getrandbits(32 * block).to_bytes(4 * block, "little")
        words = pl.from_arrow(pa.Array.from_buffers(pa.uint32(), block, [None, pa.py_buffer(raw)]))
        values = (words // (1 << shift)).alias("index")  # the top bits of each word
        positions = (values < n).arg_true()
        if positions.len() >= need:
            last = positions[need - 1]
            chunks.append(values.gather(positions.head(need)))
            used += last + 1
            have = count
        else:
            chunks.append(values.gather(positions))
            used += block
            have += positions.len()
    rng.setstate(state)
    rng.getrandbits(32 * used)  # consume exactly the words the draws used
    return pl.concat(chunks).cast(pl.UInt32)


def bootstrap(items: list[Item], rng: random.Random, resamples: int = BOOTSTRAP) -> list[float] | None:
    """The seed's run-cluster percentile interval of the difference (see `_bootstrap_frame`)."""
    return _bootstrap_frame(_items_frame(items), rng, resamples)


def _bootstrap_frame(items: pl.DataFrame, rng: random.Random, resamples: int = BOOTSTRAP) -> list[float] | None:
    """The seed's run-cluster percentile interval of the difference, for the items of a frame.

    Each run is reduced to four lists — the weights of its default and alternative items
    with an outcome, and their weight * (1.0 if passed else 0.0) — in item order. A resample
    concatenates the drawn runs' lists and folds them left to right (a cumulative sum per
    resample), which is the seed's `sum()` over its resampled items, to the last bit.

    A failed item's term, weight * 0.0, is left out when it is 0.0 (adding it changes no sum),
    but kept when the weight is not finite (1/p overflows for a propensity below ~5.6e-309),
    where it is NaN, as in the seed. The differences are then sorted by Python's `list.sort`
    in resample order, as the seed sorts them: with NaN among them the order (and the
    interval) is the seed's, not a total order's."""
    runs = sorted(items.get_column("run").unique().to_list(), key=str)
    default = pl.col("arm") == "default"
    default = default.fill_null(False)
    passed = pl.col("first_pass")
    weighted = pl.col("weight") * pl.when(passed).then(1.0).otherwise(0.0)
    counted = passed | ~pl.col("weight").is_finite()  # a term that can change the sum
    lists = (
        items.filter(pl.col("first_pass").is_not_null())
        .group_by("run", maintain_order=True)
        .agg(wd=pl.col("weight").filter(default), yd=weighted.filter(default & counted),
             wa=pl.col("weight").filter(~default), ya=weighted.filter(~default & counted))
    )
    order = pl.DataFrame({"run": runs, "position": pl.int_range(0, len(runs), eager=True)},
                         schema={"run": items.schema["run"], "position": pl.Int64})
    per_run = (
        order.join(lists, on="run", how="left", nulls_equal=True).sort("position")
        .select([pl.col(name).fill_null(pl.lit([], dtype=pl.List(pl.Float64))).alias(name)
                 for name in ("wd", "yd", "wa", "ya")])
    )
    n = len(runs)
    index = draw_indices(rng, n, n * resamples)
    drawn = per_run.select(pl.all().gather(index)).with_columns(
        (pl.int_range(pl.len(), dtype=pl.UInt32) // n).alias("resample")
    )
    totals = pl.DataFrame({"resample": pl.int_range(0, resamples, dtype=pl.UInt32, eager=True)})
    for name in ("wd", "yd", "wa", "ya"):
        folded = (
            drawn.select("resample", name).explode(name).drop_nulls(name)
            .group_by("resample").agg(pl.col(name).cum_sum().last())
        )
        totals = totals.join(folded, on="resample", how="left")
    totals = totals.fill_null(0.0).sort("resample")  # resample order: the seed's order before its sort
    diffs = (
        totals.filter((pl.col("wa") != 0) & (pl.col("wd") != 0))
        .select((pl.col("ya") / pl.col("wa") - pl.col("yd") / pl.col("wd")).alias("difference"))
        .get_column("difference")
        .to_list()
    )
    if len(diffs) < resamples // 2:
        return None
    diffs.sort()  # Python's sort, as the seed's: NaN (an overflowed weight) compares false both ways
    return [diffs[int(0.025 * len(diffs))], diffs[int(0.975 * len(diffs)) - 1]]


def _arm_summary_frame(spec: str, group: pl.DataFrame) -> dict:
    """One arm of a pair: its assignments, Hajek first-pass rate and Kish n, and the rest, from the items of a frame."""
    rate, n_eff = _hajek_frame(group)
    runtime = _median(group.get_column("runtime_s").drop_nulls().to_list())
    not_followed, no_outcome = group.select((pl.col("followed") == False).sum(),  # noqa: E712 (null is not False)
                                            pl.col("first_pass").is_null().sum()).row(0)
    return dict(spec=spec, assigned=group.height, first_pass=rate, n_eff=round(n_eff, 1),
                not_followed=not_followed, no_outcome=no_outcome,
                runtime_min=None if runtime is None else runtime / 60)


def _verdict(tier, default, alternative, window, n_alt, ci, arms) -> str:
    if not window:
        return "not enough randomized data (%d/%d alternative assignments)" % (n_alt, WINDOWS[0])
    if ci is None:
        return "window %d reached, but too few runs for an interval" % window
    if tier == "low":
        return ("switch to %s: it passes more (interval above 0)" % alternative if ci[0] > 0
                else "keep %s: %s is not shown to pass more" % (default, alternative))
    faster = (arms["alternative"]["runtime_min"] or math.inf) < (arms["default"]["runtime_min"] or 0)
    return ("%s is non-inferior and faster: worth making the default" % alternative
            if ci[0] > NONINFERIORITY and faster
            else "keep %s: %s is not shown to be non-inferior" % (default, alternative))


def randomized(assignments: pl.DataFrame, seed: int = SEED) -> list[dict]:
    """The randomized table from forge_routing_assignments rows (in task order). Per pair, the items
    are a frame (no Python object per task); the pairs, in the seed's order, are few."""
    paired = assignments.filter(pl.col("paired"))
    old_draws = assignments.height - paired.height
    rows: list[dict] = []
    if old_draws:
        rows.append(dict(note="%d older exploratory draw(s) picked among every spec of their plan; they have no "
                              "fixed pair to compare in and are left out" % old_draws))
    items = paired.select(
        "tier", "default_spec", "alternative",
        pl.col("run").cast(pl.String), "arm", (1 / pl.col("propensity")).alias("weight"), "first_pass", "runtime_s",
        "followed", pl.col("at_unix").alias("at"),
    )
    keys = ["tier", "default_spec", "alternative"]
    pairs = items.partition_by(keys, maintain_order=True, include_key=False, as_dict=True)
    rng = random.Random(seed)
    for (tier, default, alternative), group in sorted(pairs.items(), key=lambda kv: pair_key(kv[0])):
        group = group.sort("at", maintain_order=True)  # stable: ties keep task order
        alternatives = group.filter(pl.col("arm") == "alternative").get_column("at")
        window = max((w for w in WINDOWS if alternatives.len() >= w), default=None)
        judged = group.filter(pl.col("at") <= alternatives[window - 1]) if window else group
        arms = {
            "default": _arm_summary_frame(default, judged.filter(pl.col("arm") == "default")),
            "alternative": _arm_summary_frame(alternative, judged.filter(pl.col("arm") == "alternative")),
        }
        run_count = judged.get_column("run").n_unique()
        ci = (_bootstrap_frame(judged, rng) if arms["alternative"]["assigned"] >= MIN_ALTERNATIVES
              and run_count >= MIN_RUNS else None)
        rows.append(dict(
            tier=tier, default=default, alternative=alternative,
            alternative_is="stronger" if tier == "low" else "cheaper",
            window=window, runs=run_count, arms=arms, difference=_difference_frame(judged), ci=ci,
            verdict=_verdict(tier, default, alternative, window, alternatives.len(), ci, arms),
        ))
    return rows


def assignments(connection: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """forge_routing_assignments of the scope materialized in `connection`, kept there as a table of that
    name (the sample-ratio-mismatch check reads it too), and returned in task order."""
    connection.sql(f"CREATE OR REPLACE TEMP TABLE forge_routing_assignments AS {query_text('forge_routing_assignments')}")
    return connection.sql("SELECT * FROM forge_routing_assignments ORDER BY task_order").pl()


def pair_key(pair: tuple) -> tuple[str, ...]:
    """The order of the randomized table's pairs, (tier, default, alternative), as the seed sorts them."""
    return tuple(map(str, pair))


def routing_report(connection: duckdb.DuckDBPyConnection, scope: Scope = Scope()) -> dict:
    """{"observational": [...], "randomized": [...]} as the seed's `--json` prints it."""
    scope_tasks(connection, scope)
    return dict(observational=observational(connection), randomized=randomized(assignments(connection)))
