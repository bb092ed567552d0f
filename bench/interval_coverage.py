"""How often the intervals of `report confidence` cover the truth: the measurement behind
docs/statistics.md.

Simulated samples from known laws: for each statistic, law and number of pairs n, the share of
samples whose 95 % interval holds the true value, and how often each end misses it (the low end
above the truth, the high end below it). An open end never misses.

    python bench/interval_coverage.py [--samples 4000] [--resamples 2000]

- One sample (the paired overhead p50 and p95 of `report confidence`): the exact interval from the
  order statistics (`intervals.order_statistic_ends`), beside the percentile bootstrap of the same
  samples with the same open ends (`percentile_draws`, `open_ends`), for comparison.
- The distribution delta of paired tokens, (mode pK - direct pK) / direct pK: the bootstrap with the
  pairs resampled together (`paired_ratio_draws`, what `report confidence` does), beside each side
  resampled on its own, for comparison; both with the open ends of a two-sample statistic.
- The ratio of two independent samples' percentiles: the percentile bootstrap alone, and with the
  open ends of a two-sample statistic (`open_ends(two_sample=True)`), the measurement behind that rule.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from loopmeter import intervals  # noqa: E402

LEVEL = 0.95
NORMAL = NormalDist()
ONE_SAMPLE_SIZES = [5, 6, 7, 10, 20, 50, 72, 100, 150, 300]
DELTA_SIZES = [5, 10, 20, 60, 100, 300]


def _mixture_quantile(f: float, weights: list[float], centres: list[float], spread: float) -> float:
    """The quantile at f of a mixture of normals of one spread (bisection on its distribution function)."""
    low, high = min(centres) - 12 * spread, max(centres) + 12 * spread
    for _ in range(200):
        middle = (low + high) / 2
        share = sum(w * NORMAL.cdf((middle - c) / spread) for w, c in zip(weights, centres))
        low, high = (middle, high) if share < f else (low, middle)
    return (low + high) / 2


def laws(rng: np.random.Generator) -> dict:
    """name -> (draw an array of the given shape of paired overheads in %, true quantile at f)."""
    z = NORMAL.inv_cdf
    weights, centres, spread = [0.75, 0.25], [float(np.log(1.028)), float(np.log(1.28))], 0.012
    t3 = np.random.default_rng(0).standard_t(3, 4_000_000)

    def clusters(shape):
        upper = rng.random(shape) < weights[1]
        return 100 * np.expm1(np.where(upper, centres[1], centres[0]) + spread * rng.standard_normal(shape))

    return {
        "normal(20, 15)": (lambda shape: rng.normal(20, 15, shape), lambda f: 20 + 15 * z(f)),
        "lognormal (median 3 %, log-sd 0.4)": (lambda shape: 100 * np.expm1(np.log(1.03) + 0.4 * rng.standard_normal(shape)),
                                              lambda f: 100 * (np.exp(np.log(1.03) + 0.4 * z(f)) - 1)),
        "two clusters (75 % at +2.8 %, 25 % at +28 %)": (
            clusters, lambda f: 100 * np.expm1(_mixture_quantile(f, weights, centres, spread))),
        "heavy-tailed (t, 3 df)": (lambda shape: 20 + 10 * rng.standard_t(3, shape), lambda f: 20 + 10 * float(np.quantile(t3, f))),
    }


def _bootstrap(ordered: np.ndarray, f: float, resamples: int, rng: np.random.Generator) -> tuple[float, float]:
    """The percentile bootstrap interval, its ends open where n values cannot bound them."""
    low, high = intervals.percentile_interval(intervals.percentile_draws(ordered, f, resamples, rng), LEVEL)
    low_open, high_open = intervals.open_ends(len(ordered), f, LEVEL)
    return (-np.inf if low_open else low, np.inf if high_open else high)


def one_sample(samples: int, resamples: int, sizes: list[int], bootstrap: bool) -> list[tuple]:
    rng = np.random.default_rng(20261202)
    out = []
    for f in (0.5, 0.95):
        for name, (draw, truth_of) in laws(rng).items():
            truth = truth_of(f)
            for n in sizes:
                ordered = np.sort(draw((samples, n)), axis=1)
                low, high = intervals.order_statistic_ends(ordered.ravel(), np.full(samples, n), f, LEVEL)
                found = {"exact": _shares(np.where(np.isnan(low), -np.inf, low), np.where(np.isnan(high), np.inf, high), truth)}
                if bootstrap:
                    ends = np.array([_bootstrap(row, f, resamples, rng) for row in ordered])
                    found["percentile bootstrap"] = _shares(ends[:, 0], ends[:, 1], truth)
                out.append((f"paired p{round(f * 100)}", name, n, found))
    return out


def _shares(low: np.ndarray, high: np.ndarray, truth: float) -> tuple:
    """(covered, low end above the truth, high end below it, median width) of intervals."""
    width = float(np.median(high - low))
    return float(np.mean((low <= truth) & (truth <= high))), float(np.mean(low > truth)), float(np.mean(high < truth)), width


def paired_delta(samples: int, resamples: int, sizes: list[int]) -> list[tuple]:
    """The distribution delta of paired tokens: direct ~ lognormal, the mode's tokens direct times a
    paired ratio; the truth from 4 million pairs."""
    rng = np.random.default_rng(11)
    cases = {"lognormal ratio (log-sd 0.2)": lambda size: np.exp(np.log(1.03) + 0.2 * rng.standard_normal(size)),
             "two-cluster ratio": lambda size: np.where(rng.random(size) < 0.25, 1.28, 1.028) * np.exp(0.012 * rng.standard_normal(size))}
    out = []
    for f in (0.5, 0.95):
        for name, ratio in cases.items():
            big = np.exp(np.log(5e4) + 0.3 * rng.standard_normal(4_000_000))
            truth = (np.quantile(big * ratio(big.size), f) / np.quantile(big, f) - 1) * 100
            for n in sizes:
                hits = {"pairs together": [], "sides on their own": []}
                low_open, high_open = intervals.open_ends(n, f, LEVEL, two_sample=True)
                either = low_open or high_open
                for _ in range(samples):
                    direct = np.exp(np.log(5e4) + 0.3 * rng.standard_normal(n))
                    mode = direct * ratio(n)
                    together = (intervals.paired_ratio_draws(direct, mode, f, resamples, rng) - 1) * 100
                    apart = (intervals.percentile_draws(np.sort(mode), f, resamples, rng)
                             / intervals.percentile_draws(np.sort(direct), f, resamples, rng) - 1) * 100
                    for method, draws in (("pairs together", together), ("sides on their own", apart)):
                        low, high = intervals.percentile_interval(draws, LEVEL)
                        hits[method].append((-np.inf if either else low, np.inf if either else high))
                found = {method: _shares(np.array(ends)[:, 0], np.array(ends)[:, 1], truth) for method, ends in hits.items()}
                out.append((f"distribution Δ p{round(f * 100)}", name, n, found))
    return out


def two_sample(samples: int, resamples: int, sizes: list[int]) -> list[tuple]:
    """The ratio of two independent samples' percentiles: the percentile interval alone, and with the
    open ends of a two-sample statistic."""
    rng = np.random.default_rng(7)
    z = NORMAL.inv_cdf
    cases = {"same shape": (0.3, 0.3), "candidate's tail wider": (0.1, 0.6)}
    out = []
    for f in (0.5, 0.95):
        for name, (s_base, s_cand) in cases.items():
            truth = np.exp(np.log(6e4) + s_cand * z(f)) / np.exp(np.log(5e4) + s_base * z(f))
            for n in sizes:
                hits = {"percentile": 0, "loopmeter": 0}
                for _ in range(samples):
                    base = np.sort(np.exp(rng.normal(np.log(5e4), s_base, n)))
                    cand = np.sort(np.exp(rng.normal(np.log(6e4), s_cand, n)))
                    ratio = (intervals.percentile_draws(cand, f, resamples, rng)
                             / intervals.percentile_draws(base, f, resamples, rng))
                    low, high = intervals.percentile_interval(ratio, LEVEL)
                    hits["percentile"] += int(low <= truth <= high)
                    side_low, side_high = intervals.open_ends(n, f, LEVEL, two_sample=True)
                    # the ratio falls with the baseline's percentile: each end opens with either side's
                    low_open = high_open = side_low or side_high
                    low, high = (-np.inf if low_open else low), (np.inf if high_open else high)
                    hits["loopmeter"] += int(low <= truth <= high)
                out.append((f"ratio of p{round(f * 100)}s", name, n, {m: h / samples for m, h in hits.items()}))
    return out


def exact_misses(n: int, f: float) -> str:
    """The chance each end of the exact interval misses, whatever the (continuous) law: the low end
    P(B <= r - 1), the high end P(B >= s), B ~ Binomial(n, f); "-" for an open end."""
    (low,), (high,) = intervals.order_statistic_ranks([n], f, LEVEL)
    pmf = intervals.binomial_rows(np.array([n]), f)[0]
    return " / ".join("-" if rank == 0 else f"{chance:.3f}" for rank, chance in
                      ((low, pmf[:low].sum()), (high, pmf[high:].sum())))


def coverage_table(rows: list[tuple], methods: list[str], exact: bool = False) -> str:
    """A cell: covered (low end misses / high end misses) and the median width, "open" when infinite;
    `exact`: a last column with the exact interval's own chances of missing (`exact_misses`)."""
    heads = [*methods, *(["exact chance to miss"] if exact else [])]
    lines = ["| statistic | law | n | " + " | ".join(heads) + " |", "|" + "---|" * 3 + "---:|" * len(heads)]
    for statistic, name, n, found in rows:
        cells = [exact_misses(n, 0.5 if statistic.endswith("p50") else 0.95)] if exact else []
        for method in methods:
            covered, low, high, width = found[method]
            shown = "open" if not np.isfinite(width) else f"{width:.1f}"
            cells.insert(len(cells) - bool(exact), f"{covered:.3f} ({low:.3f} / {high:.3f}) {shown}")
        lines.append(f"| {statistic} | {name} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def share_table(rows: list[tuple], methods: list[str]) -> str:
    lines = ["| statistic | shapes | n | " + " | ".join(methods) + " |", "|" + "---|" * 3 + "---:|" * len(methods)]
    lines += [f"| {statistic} | {name} | {n} | " + " | ".join(f"{found[m]:.3f}" for m in methods) + " |"
              for statistic, name, n, found in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4000, help="simulated samples per cell (one-sample table)")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--bootstrap-samples", type=int, default=1000,
                        help="simulated samples per cell where a bootstrap is drawn (slower)")
    arguments = parser.parse_args()
    print("95 % intervals; cells: covered (low end above the truth / high end below it) median width\n")
    print(f"One sample, exact: {arguments.samples} samples per cell; percentile bootstrap: {arguments.bootstrap_samples}\n")
    exact = one_sample(arguments.samples, arguments.resamples, ONE_SAMPLE_SIZES, bootstrap=False)
    bootstrap = one_sample(arguments.bootstrap_samples, arguments.resamples, ONE_SAMPLE_SIZES, bootstrap=True)
    merged = [(s, name, n, {"exact": a[3]["exact"], "percentile bootstrap": b[3]["percentile bootstrap"]})
              for a, b in zip(exact, bootstrap) for s, name, n in [a[:3]]]
    print(coverage_table(merged, ["exact", "percentile bootstrap"], exact=True))
    print(f"\nDistribution delta of paired tokens, {arguments.bootstrap_samples} samples per cell\n")
    print(coverage_table(paired_delta(arguments.bootstrap_samples, arguments.resamples, DELTA_SIZES),
                         ["pairs together", "sides on their own"]))
    print(f"\nRatio of two independent samples, {arguments.bootstrap_samples} samples per cell\n")
    print(share_table(two_sample(arguments.bootstrap_samples, arguments.resamples, [3, 5, 10, 20, 60]),
                      ["percentile", "loopmeter"]))


if __name__ == "__main__":
    main()
