"""How often `report srm` calls a correct store untrustworthy, at one look and as the store grows, and how often
it catches a planted loss of one arm's outcomes: the measurement behind docs/statistics.md (its SRM section).

    .venv/bin/python bench/srm_rates.py [--stores 2000] [--looks 40] [--real-stores 30] [--seed 1]

The demo's shape: a store of `samples.routing_events(400, seed=7)`, ingested; its three pairs' assignments
(n), P(alternative) (0.15) and share of assignments with an outcome (q) are read from `report srm`.

1. Exact, one look at the demo's size: every split of the assignments (k = 0..n) and every arm-by-outcome table
   of non-negligible probability is put through loopmeter's own checks (`srm.srm_rows` for the assignment ratio,
   `forge_routing_attrition.sql` for the attrition); the flag rates are their null probabilities summed
   (binomial arms, binomial outcomes, hypergeometric splits, from scipy). No Monte Carlo error; the probability
   left out (tables beyond 6 standard deviations) is printed.
2. Simulated growth: STORES correct stores of the demo's shape, each looked at LOOKS times as it grows (after
   1/LOOKS of its assignments, 2/LOOKS, ..., all), every look through `srm.srm_rows`: the share of looks that
   flag, and the share of stores flagged at some look, with their Monte Carlo standard errors.
3. Real stores: REAL_STORES stores of the sample generator (seeds 1000, 1001, ...) ingested as users ingest
   them, as they are and with 30 % of one arm's outcomes lost (`tests/forge_fixtures.drop_outcomes`): the
   share of stores and of pairs flagged, with Wilson 95 % intervals.

Flags: `untrustworthy` (either check at p < 0.00025), and at one look's level (`srm` or `attrition_srm`,
p < 0.001).
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from loopmeter import operations  # noqa: E402
from loopmeter.forge import samples, srm  # noqa: E402
from loopmeter.sql.queries import query_text  # noqa: E402
from loopmeter.storage import Warehouse  # noqa: E402

LEVELS = {"untrustworthy": srm.UNTRUSTWORTHY_P, "one look (srm or attrition_srm)": srm.MISMATCH_P}
WIDTH = 6.0  # standard deviations of the binomial margins summed over in the exact rates


def demo_shape(scratch: Path) -> dict[str, tuple[int, float, float]]:
    """tier -> (assignments, P(alternative), share with an outcome) of the demo's store."""
    store = samples.write_sqlite(scratch / "demo.sqlite", [("api", "/x")], samples.routing_events(400, seed=7))
    warehouse = Warehouse(scratch / "demo")
    operations.ingest_forge(store, warehouse=warehouse)
    rows = srm.srm_document(warehouse)["rows"]
    return {r["tier"]: (r["assigned"], round(r["expected_alternative"] / r["assigned"], 12),
                        (r["default_with_outcome"] + r["alternative_with_outcome"]) / r["assigned"]) for r in rows}


def assignment_frame(labels: np.ndarray, alternative: np.ndarray, outcome: np.ndarray, p: float) -> pl.DataFrame:
    """A forge_routing_assignments table: one row per assignment, its pair named by the integer `labels`."""
    return pl.DataFrame({
        "task_order": np.arange(len(labels)), "paired": np.ones(len(labels), dtype=bool), "tier": labels,
        "alternative": alternative, "outcome": outcome,
    }).select("task_order", "paired", pl.col("tier").cast(pl.String), pl.lit("default").alias("default_spec"),
              pl.lit("alternative").alias("alternative"),
              pl.when("alternative").then(pl.lit("alternative")).otherwise(pl.lit("default")).alias("arm"),
              pl.when("alternative").then(p).otherwise(1 - p).alias("propensity"),
              pl.when("outcome").then(True).alias("first_pass"))


def checked(frame: pl.DataFrame) -> pl.DataFrame:
    """`srm.srm_rows` over a forge_routing_assignments frame, as a frame."""
    connection = duckdb.connect()
    try:
        connection.register("frame", frame)
        connection.execute("CREATE TEMP TABLE forge_routing_assignments AS SELECT * FROM frame")
        return pl.DataFrame(srm.srm_rows(connection), infer_schema_length=None)
    finally:
        connection.close()


def exact_assignment(n: int, p: float) -> dict[str, float]:
    """P(the assignment ratio flags) at each level: every split k of n assignments, weighted Binomial(n, p)."""
    k = np.repeat(np.arange(n + 1), n)
    position = np.tile(np.arange(n), n + 1)
    rows = checked(assignment_frame(k, position < k, np.ones(len(k), dtype=bool), p))
    value = dict(zip(rows["tier"].cast(pl.Int64).to_list(), rows["p_value"].to_list()))
    weight = stats.binom.pmf(np.arange(n + 1), n, p)
    p_values = np.array([value[i] for i in range(n + 1)])
    return {name: float(weight[p_values < level].sum()) for name, level in LEVELS.items()}


def margin_range(n: int, p: float) -> np.ndarray:
    sd = math.sqrt(n * p * (1 - p))
    return np.arange(max(0, math.floor(n * p - WIDTH * sd)), min(n, math.ceil(n * p + WIDTH * sd)) + 1)


def exact_attrition(n: int, p: float, q: float) -> tuple[dict[str, float], float]:
    """P(the attrition check flags) at each level, and the probability left out: arms Binomial(n, p), assignments
    with an outcome Binomial(n, q), independent; given both, the split of the outcomes hypergeometric."""
    arms, kept = margin_range(n, p), margin_range(n, q)
    a, m = (grid.ravel() for grid in np.meshgrid(arms, kept, indexing="ij"))
    low, high = np.maximum(0, m - (n - a)), np.minimum(a, m)
    sizes = high - low + 1
    a, m = np.repeat(a, sizes), np.repeat(m, sizes)
    k = np.repeat(low, sizes) + (np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes))
    weight = stats.binom.pmf(a, n, p) * stats.binom.pmf(m, n, q) * stats.hypergeom.pmf(k, n, a, m)
    tables = pl.DataFrame({"tier": np.arange(len(k)).astype(str), "default_spec": "default",
                           "alternative": "alternative", "assigned": n, "alternative_assigned": a,
                           "alternative_with_outcome": k, "default_with_outcome": m - k})
    connection = duckdb.connect()
    try:
        connection.register("forge_routing_srm", tables)
        tested = connection.sql(query_text("forge_routing_attrition")).pl()
    finally:
        connection.close()
    p_values = np.empty(len(k))
    p_values[tested["tier"].cast(pl.Int64).to_numpy()] = tested["attrition_p_value"].to_numpy()
    left_out = 1 - stats.binom.pmf(arms, n, p).sum() * stats.binom.pmf(kept, n, q).sum()
    return {name: float(weight[p_values < level].sum()) for name, level in LEVELS.items()}, float(left_out)


def simulate(shape: dict, stores: int, looks: int, seed: int, chunk: int = 100) -> pl.DataFrame:
    """One row per simulated store, look and pair: whether each level flags it."""
    rng = np.random.default_rng(seed)
    tiers = list(shape)
    found = []
    for first in range(0, stores, chunk):
        labels, alternative, outcome = [], [], []
        for store in range(first, min(stores, first + chunk)):
            for index, (n, p, q) in enumerate(shape.values()):
                arms, kept = rng.random(n) < p, rng.random(n) < q
                for look in range(1, looks + 1):
                    size = math.ceil(look * n / looks)
                    labels.append(np.full(size, (store * looks + look - 1) * len(tiers) + index))
                    alternative.append(arms[:size])
                    outcome.append(kept[:size])
        p = next(iter(shape.values()))[1]
        rows = checked(assignment_frame(np.concatenate(labels), np.concatenate(alternative),
                                        np.concatenate(outcome), p))
        label = rows["tier"].cast(pl.Int64)
        found.append(rows.select(
            (label // (looks * len(tiers))).alias("store"), (label // len(tiers) % looks + 1).alias("look"),
            (label % len(tiers)).replace_strict(dict(enumerate(tiers))).alias("pair"),
            *[pl.min_horizontal("p_value", "attrition_p_value").lt(level).alias(name)
              for name, level in LEVELS.items()],
            pl.col("untrustworthy").alias("verdict")))
    return pl.concat(found)


def rate(flags: pl.Series) -> str:
    """The share of `flags`, one per store, with its Monte Carlo standard error."""
    share = flags.mean()
    return "%.3f %% ± %.3f" % (100 * share, 100 * math.sqrt(share * (1 - share) / len(flags)))


def look_rate(frame: pl.DataFrame, name: str) -> str:
    """The share of looks flagged, with a standard error over the stores (a store's looks are not independent)."""
    per_store = frame.group_by("store").agg(pl.col(name).mean()).get_column(name)
    return "%.3f %% ± %.3f" % (100 * per_store.mean(), 100 * per_store.std() / math.sqrt(len(per_store)))


def wilson(k: int, n: int) -> str:
    z = 1.96
    centre = (k / n + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(k / n * (1 - k / n) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return "%d/%d (%.0f %%, 95 %% [%.0f %%, %.0f %%])" % (k, n, 100 * k / n, 100 * max(0, centre - half),
                                                          100 * min(1, centre + half))


def real_stores(count: int, scratch: Path) -> None:
    from forge_fixtures import drop_outcomes

    results: dict[str, list[dict]] = {"correct": [], "alternative's outcomes 30 % lost": [],
                                      "default's outcomes 30 % lost": []}
    for index in range(count):
        seed = 1000 + index
        events = samples.routing_events(400, seed=seed)
        variants = {"correct": events,
                    "alternative's outcomes 30 % lost": drop_outcomes(events, "alternative", 0.3, seed)[0],
                    "default's outcomes 30 % lost": drop_outcomes(events, "default", 0.3, seed)[0]}
        for number, (name, kept) in enumerate(variants.items()):
            where = scratch / f"real-{seed}-{number}"
            store = samples.write_sqlite(where / "dataset.sqlite", [("api", "/x")], kept)
            warehouse = Warehouse(where / "warehouse")
            operations.ingest_forge(store, warehouse=warehouse)
            results[name].append({r["tier"]: r for r in srm.srm_document(warehouse)["rows"]})
    print(f"\n3. real stores of the sample generator ({count} seeds), untrustworthy:")
    for name, stored in results.items():
        flagged = sum(1 for rows in stored if any(r["untrustworthy"] for r in rows.values()))
        pairs = ", ".join("%s %s" % (tier, wilson(sum(1 for rows in stored if rows[tier]["untrustworthy"]), count))
                          for tier in sorted(stored[0]))
        attrition = sum(1 for rows in stored for r in rows.values() if "attrition" in r["untrustworthy_checks"])
        print(f"  {name}: stores {wilson(flagged, count)}; pairs: {pairs}; pairs flagged by attrition: {attrition}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=2000, help="simulated growing stores")
    parser.add_argument("--looks", type=int, default=40, help="looks at each simulated store as it grows")
    parser.add_argument("--real-stores", type=int, default=30, help="stores of the sample generator (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    started = time.time()
    scratch = Path(tempfile.mkdtemp(prefix="loopmeter-srm-"))
    shape = demo_shape(scratch)
    print("demo's shape: " + "; ".join("%s: %d assignments, P(alternative) %.2f, %.1f %% with an outcome"
                                      % (tier, n, p, 100 * q) for tier, (n, p, q) in shape.items()))
    print("\n1. exact, one look at the demo's size (a correct store):")
    clean = {name: 1.0 for name in LEVELS}
    for tier, (n, p, q) in shape.items():
        ratio = exact_assignment(n, p)
        attrition, left_out = exact_attrition(n, p, q)
        for name in LEVELS:
            clean[name] *= (1 - ratio[name]) * (1 - attrition[name])
        print("  %-7s " % tier + "; ".join("%s: assignment %.4f %%, attrition %.4f %%" % (
            name, 100 * ratio[name], 100 * attrition[name]) for name in LEVELS) + " (left out: %.1e)" % left_out)
    print("  the store (any of its pairs): " + "; ".join("%s %.4f %%" % (name, 100 * (1 - clean[name]))
                                                          for name in LEVELS))
    if options.stores:
        looked = simulate(shape, options.stores, options.looks, options.seed)
        assert looked["verdict"].equals(looked["untrustworthy"].alias("verdict"))  # the level is the report's verdict
        print(f"\n2. simulated growth: {options.stores} correct stores, {options.looks} looks each (Monte Carlo "
              "standard errors after ±)")
        per_store_look = looked.group_by("store", "look").agg(pl.col(list(LEVELS)).any())
        per_store = looked.group_by("store").agg(pl.col(list(LEVELS)).any())
        per_pair = looked.group_by("store", "pair").agg(pl.col(list(LEVELS)).any())
        for name in LEVELS:
            print(f"  {name}: per look, a pair {look_rate(looked, name)}, the store {look_rate(per_store_look, name)}; "
                  f"over {options.looks} looks, a pair {rate(per_pair[name])}, the store {rate(per_store[name])}")
    if options.real_stores:
        real_stores(options.real_stores, scratch)
    print("\n(%.0f s)" % (time.time() - started))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
