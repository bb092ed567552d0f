"""How often the intervals of `report confidence` and `compare` cover the truth, against the other
bootstrap intervals one could choose: the measurement behind docs/statistics.md.

Simulated samples from known distributions, at 5 to 20 pairs (and more): for each method and
statistic, the share of samples whose 95 % interval holds the true value, and the median width
(an open end counts as covering, and as infinitely wide).

    python bench/interval_coverage.py [--samples 1000] [--resamples 2000]

Methods: `percentile`, `basic` (2 * estimate - the percentile ends) and `BCa` (bias-corrected and
accelerated, jackknife acceleration), each as textbooks define it over n draws with replacement;
`loopmeter`: the percentile interval of `pipeline/intervals.py`, its ends open where the sample
cannot bound them.
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


def distributions(rng: np.random.Generator) -> dict:
    """name -> (draw n paired overheads in %, true quantile at f)."""
    z = NORMAL.inv_cdf
    return {
        "normal(20, 15)": (lambda n: rng.normal(20, 15, n), lambda f: 20 + 15 * z(f)),
        "skewed (lognormal)": (lambda n: 100 * (np.exp(rng.normal(0.15, 0.25, n)) - 1),
                               lambda f: 100 * (np.exp(0.15 + 0.25 * z(f)) - 1)),
        "heavy-tailed (t, 3 df)": (lambda n: 20 + 10 * rng.standard_t(3, n), None),
    }


def textbook(sample: np.ndarray, f: float, resamples: int, rng: np.random.Generator) -> dict:
    n = len(sample)
    estimate = np.quantile(sample, f)
    draws = np.quantile(sample[rng.integers(0, n, (resamples, n))], f, axis=1)
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    jack = np.array([np.quantile(np.delete(sample, i), f) for i in range(n)])
    d = jack.mean() - jack
    accel = np.sum(d ** 3) / (6 * np.sum(d ** 2) ** 1.5) if np.sum(d ** 2) > 0 else 0.0
    share = np.clip((np.sum(draws < estimate) + 0.5 * np.sum(draws == estimate)) / resamples, 1 / resamples, 1 - 1 / resamples)
    z0 = NORMAL.inv_cdf(share)
    ends = [NORMAL.cdf(z0 + (z0 + z) / (1 - accel * (z0 + z))) for z in (NORMAL.inv_cdf(tail), NORMAL.inv_cdf(1 - tail))]
    return {"percentile": (low, high), "basic": (2 * estimate - high, 2 * estimate - low),
            "BCa": tuple(np.quantile(draws, ends))}


def ours(sample: np.ndarray, f: float, resamples: int, rng: np.random.Generator) -> tuple:
    ordered = np.sort(sample)
    low, high = intervals.percentile_interval(intervals.percentile_draws(ordered, f, resamples, rng), LEVEL)
    low_open, high_open = intervals.open_ends(len(sample), f, LEVEL)
    return (-np.inf if low_open else low, np.inf if high_open else high)


def paired(samples: int, resamples: int, sizes: list[int]) -> list[tuple]:
    rng = np.random.default_rng(20261202)
    out = []
    for f in (0.5, 0.95):
        for name, (draw, truth_of) in distributions(rng).items():
            truth = truth_of(f) if truth_of else 20 + 10 * _t3_quantile(f)
            for n in sizes:
                hits: dict[str, int] = {}
                widths: dict[str, list] = {}
                for _ in range(samples):
                    sample = draw(n)
                    found = textbook(sample, f, resamples, rng)
                    found["loopmeter"] = ours(sample, f, resamples, rng)
                    for method, (low, high) in found.items():
                        hits[method] = hits.get(method, 0) + int(low <= truth <= high)
                        widths.setdefault(method, []).append(high - low)
                out.append((f"paired p{round(f * 100)}", name, n,
                            {m: (hits[m] / samples, float(np.median(widths[m]))) for m in hits}))
    return out


def _t3_quantile(f: float) -> float:
    big = np.random.default_rng(0).standard_t(3, 4_000_000)
    return float(np.quantile(big, f))


def two_sample(samples: int, resamples: int, sizes: list[int]) -> list[tuple]:
    """The ratio of two independent samples' percentiles (compare; a distribution delta is the same
    ratio less one): the percentile interval alone, and with loopmeter's open ends."""
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
                out.append((f"ratio of p{round(f * 100)}s", name, n, {m: (h / samples, None) for m, h in hits.items()}))
    return out


def markdown(rows: list[tuple], methods: list[str], widths: bool) -> str:
    head = "| statistic | distribution | n | " + " | ".join(methods) + " |"
    lines = [head, "|" + "---|" * 3 + "---:|" * len(methods)]
    for statistic, name, n, found in rows:
        cells = []
        for method in methods:
            share, width = found[method]
            shown = "open" if width is not None and not np.isfinite(width) else (f"{width:.1f}" if width is not None else "")
            cells.append(f"{share:.3f}" + (f" ({shown})" if widths and shown else ""))
        lines.append(f"| {statistic} | {name} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=2000)
    arguments = parser.parse_args()
    print(f"coverage of 95 % intervals, {arguments.samples} simulated samples each, "
          f"{arguments.resamples} resamples; cells: coverage (median width)\n")
    print(markdown(paired(arguments.samples, arguments.resamples, [5, 10, 20]), ["percentile", "basic", "BCa", "loopmeter"], True))
    print()
    print(markdown(two_sample(arguments.samples, arguments.resamples, [3, 5, 10, 20, 60]), ["percentile", "loopmeter"], False))


if __name__ == "__main__":
    main()
