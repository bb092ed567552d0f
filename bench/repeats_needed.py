"""How often `repeatsNeeded` pairs resolve a light objective, and how often a verdict is wrong: the
measurement behind docs/statistics.md.

The laws are those of the real runs: for each scenario and mode of the corpus's 20-repeat run set,
(1) a lognormal overhead ratio with that scenario's median and spread (the standard deviation of the
log ratio), and (2) the real paired overheads themselves, resampled (their clustered shapes). Each
law is judged against both light objectives (p50 <= 35 %, p95 <= 60 %).

With the exact interval, a verdict on n pairs depends only on K, the count of pairs at or below the
threshold, K ~ Binomial(n, q) with q = P(overhead <= threshold) under the law; so does the verdict on
the m new pairs a user then runs. Everything below is therefore computed exactly from q (no
simulation): for each n, over the run sets that come out INCONCLUSIVE, the chance that a new run set
of `repeatsNeeded` pairs resolves the objective ("settled"), and the share for which more than the
maximum would be needed ("beyond"), for

- loopmeter's repeatsNeeded (`intervals.repeats_to_resolve`: the share q as uncertain as the pairs
  leave it, Jeffreys' Beta(k + 1/2, n - k + 1/2));
- plain resampling of the measured pairs (q taken as k / n).

    python bench/repeats_needed.py [--corpus ../shared/corpus/forgeloop] [--run-set codex-tail-repeat20-20260831]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from loopmeter import intervals  # noqa: E402

LEVEL = 0.95
OBJECTIVES = (("p50 <= 35 %", 0.5, 35.0), ("p95 <= 60 %", 0.95, 60.0))
SIZES = (5, 10, 20)


def corpus_laws(corpus: Path, run_set: str) -> dict[str, np.ndarray]:
    """(scenario, mode) -> the real paired token overheads, in %, of the run set."""
    import polars as pl

    from loopmeter.forgeloop.confidence import load_pairs
    from loopmeter.operations import ingest_forgeloop
    from loopmeter.storage import Warehouse

    with tempfile.TemporaryDirectory() as scratch:
        ingest_forgeloop(corpus / "results", corpus / "scenarios", warehouse=Path(scratch) / "w", run_sets=[run_set])
        pairs, _ = load_pairs(Warehouse(Path(scratch) / "w"), run_set)
    pairs = pairs.filter(pl.col("token_pair")).sort("scenario_id", "mode", "run_index")
    return {f"{scenario} {mode}": frame["token_overhead_percent"].to_numpy()
            for (scenario, mode), frame in pairs.group_by(["scenario_id", "mode"], maintain_order=True)}


def shares_below(values: np.ndarray, threshold: float) -> dict[str, float]:
    """q = P(overhead <= threshold) of the two laws built from one scenario's real overheads."""
    logs = np.log1p(values / 100.0)
    centre, spread = float(np.median(logs)), float(np.std(logs, ddof=1))
    lognormal = NormalDist(centre, spread).cdf(float(np.log1p(threshold / 100.0)))
    return {"lognormal": lognormal, "resampled": float(np.mean(values <= threshold))}


@lru_cache(maxsize=None)
def _ranks(fraction: float) -> tuple[np.ndarray, np.ndarray]:
    return intervals.order_statistic_ranks(np.arange(intervals.REPEATS_MAXIMUM + 1), fraction, LEVEL)


@lru_cache(maxsize=None)
def plain_resampling(k: int, n: int, fraction: float) -> int | None:
    """The fewest pairs above n whose exact interval resolves with an 80 % chance if q were k / n."""
    sizes = np.arange(n + 1, intervals.REPEATS_MAXIMUM + 1)
    low, high = (ranks[sizes] for ranks in _ranks(fraction))
    chance = _resolving(sizes, low, high, k / n)
    found = np.flatnonzero(chance >= intervals.REPEATS_CHANCE)
    return int(sizes[found[0]]) if found.size else None


@lru_cache(maxsize=None)
def loopmeter_repeats(k: int, n: int, fraction: float) -> int | None:
    """repeatsNeeded of n measured pairs of which k lie at or below the threshold (only k decides)."""
    return intervals.repeats_to_resolve(np.r_[np.zeros(k), np.ones(n - k)], 0.5, fraction, LEVEL)


def _resolving(sizes: np.ndarray, low: np.ndarray, high: np.ndarray, q: float) -> np.ndarray:
    """P(MET or VIOLATED) of m new pairs, each m of `sizes`, when each lies at or below the threshold with chance q."""
    out = np.zeros(len(sizes))
    for start in range(0, len(sizes), 256):
        part = slice(start, start + 256)
        at_most, at_least = intervals._tails(intervals.binomial_rows(sizes[part], q))
        rows = np.arange(at_most.shape[0])
        out[part] = (np.where(high[part] > 0, at_least[rows, high[part]], 0.0)
                     + np.where(low[part] > 0, at_most[rows, np.maximum(low[part] - 1, 0)], 0.0))
    return out


def judged(q: float, n: int, fraction: float) -> dict:
    """For a law with share q at or below the threshold, and n pairs: the chance of each verdict, and for
    the INCONCLUSIVE ones the chance that repeatsNeeded new pairs settle it, by both methods."""
    (low,), (high,) = intervals.order_statistic_ranks([n], fraction, LEVEL)
    pmf = intervals.binomial_rows(np.array([n]), q)[0]
    k = np.arange(n + 1)
    met, violated = (k >= high) & (high > 0), (k <= low - 1) & (low > 0)
    open_ = ~(met | violated)
    out = {"met": float(pmf[met].sum()), "violated": float(pmf[violated].sum()), "inconclusive": float(pmf[open_].sum())}
    for method in ("loopmeter", "plain"):
        settled = beyond = 0.0
        needed = []
        for count in k[open_]:
            m = (loopmeter_repeats if method == "loopmeter" else plain_resampling)(int(count), n, fraction)
            if m is None:
                beyond += pmf[count]
                continue
            needed.append((m, pmf[count]))
            (m_low,), (m_high,) = intervals.order_statistic_ranks([m], fraction, LEVEL)
            settled += pmf[count] * _resolving(np.array([m]), np.array([m_low]), np.array([m_high]), q)[0]
        out[method] = (settled, beyond, needed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(os.environ.get("LOOPMETER_CORPUS", ROOT.parent / "shared" / "corpus" / "forgeloop"))
    parser.add_argument("--corpus", type=Path, default=default)
    parser.add_argument("--run-set", default="codex-tail-repeat20-20260831")
    arguments = parser.parse_args()
    laws = corpus_laws(arguments.corpus, arguments.run_set)
    print(f"{len(laws)} scenario-mode laws of {arguments.run_set}, each as a lognormal and resampled; "
          f"repeatsNeeded at an {intervals.REPEATS_CHANCE:.0%} chance, at most {intervals.REPEATS_MAXIMUM}\n")
    print("| objective | law | n | wrong verdicts | inconclusive | settled: loopmeter | beyond max: loopmeter "
          "| median repeats: loopmeter | settled: plain resampling | beyond max: plain |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, fraction, threshold in OBJECTIVES:
        for shape in ("lognormal", "resampled"):
            for n in SIZES:
                wrong = weight = 0.0
                totals = {"loopmeter": [0.0, 0.0, []], "plain": [0.0, 0.0, []]}
                for values in laws.values():
                    q = shares_below(values, threshold)[shape]
                    found = judged(q, n, fraction)
                    truth_met = q >= fraction  # the law's percentile at or below the threshold
                    wrong += found["violated"] if truth_met else found["met"]
                    weight += found["inconclusive"]
                    for method in totals:
                        settled, beyond, needed = found[method]
                        totals[method][0] += settled
                        totals[method][1] += beyond
                        totals[method][2] += needed
                cells = [f"{wrong / len(laws):.3f}", f"{weight / len(laws):.3f}"]
                for method in ("loopmeter", "plain"):
                    settled, beyond, needed = totals[method]
                    cells += [f"{settled / weight:.2f}" if weight else "-", f"{beyond / weight:.2f}" if weight else "-"]
                    if method == "loopmeter":
                        cells.append(_weighted_median(needed))
                print(f"| {name} | {shape} | {n} | " + " | ".join(cells) + " |")


def _weighted_median(needed: list[tuple[int, float]]) -> str:
    if not needed:
        return "-"
    values, weights = np.array([m for m, _ in needed]), np.array([w for _, w in needed])
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return str(int(values[order][np.searchsorted(cumulative, cumulative[-1] / 2)]))


if __name__ == "__main__":
    main()
