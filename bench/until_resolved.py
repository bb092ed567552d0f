"""`execute --until-resolved`: which confidence sequence, how many runs it saves, how often a verdict
is wrong: the measurement behind docs/statistics.md and docs/runner.md.

1. The constructions, computed exactly (no simulation): for a budget of N pairs, the chance that an
   end of the interval misses the true percentile at *any* look n <= N (the walk of
   `sequential.miss_chance`), the first look at which each end is bounded at all, and the ranks at
   10, 20 and N pairs, for
   - the fixed-size interval of `report confidence` checked after every round (not valid: shown for
     what looking costs it);
   - a union bound over the looks, alpha_n = alpha * 6 / (pi^2 n^2) (any number of looks);
   - a union bound over the N looks known in advance, alpha / N each;
   - a beta-binomial mixture (Howard & Ramdas' quantile confidence sequences, uniform prior on the
     side the end guards; any number of looks);
   - loopmeter's: the fixed-size ranks at the one nominal level that keeps the exact chance of any
     miss within (1 - level) / 2 per end over the N looks (`sequential.sequence_ranks`).
2. The stopping rule (`sequential.judge_scenario`) on simulated run sets drawn from known laws of the
   paired overheads: the rounds it takes, why it stops, how often a verdict it gives is wrong (against
   the law's true percentile), how often `report confidence` on the stopped run set (the fixed-size
   interval at the size reached) gives a wrong verdict, and whether it agrees with the fixed `tail`
   tier (20 pairs) where that resolves; the rounds each construction takes on the same draws.
3. The laws of the real runs: each scenario of the corpus's 20-repeat run set, its paired overheads
   resampled.

    python bench/until_resolved.py [--run-sets 2000] [--max-runs 30] [--seed 0] [--corpus ../shared/corpus/forgeloop]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from loopmeter.forgeloop import sequential  # noqa: E402

LEVEL = sequential.LEVEL
TAIL = (1.0 - LEVEL) / 2.0
FIXED_SIZE = 20  # the tail tier's default


# ---- the constructions ----------------------------------------------------------------------------
def _from_nominal(max_pairs: int, fraction: float, nominal) -> tuple[tuple, tuple]:
    table = sequential.binomial_table(max_pairs, fraction)
    low, high = np.zeros(max_pairs + 1, np.int64), np.zeros(max_pairs + 1, np.int64)
    for n in range(1, max_pairs + 1):
        ranks = sequential.nominal_ranks(table[: n + 1], nominal(n))
        low[n], high[n] = ranks[0][n], ranks[1][n]
    return tuple(low.tolist()), tuple(high.tolist())


@lru_cache(maxsize=None)
def fixed_every_look(max_pairs: int, fraction: float, level: float = LEVEL):
    return _from_nominal(max_pairs, fraction, lambda n: (1.0 - level) / 2.0)


@lru_cache(maxsize=None)
def union_any_looks(max_pairs: int, fraction: float, level: float = LEVEL):
    return _from_nominal(max_pairs, fraction, lambda n: (1.0 - level) / 2.0 * 6.0 / (math.pi ** 2 * n * n))


@lru_cache(maxsize=None)
def union_n_looks(max_pairs: int, fraction: float, level: float = LEVEL):
    return _from_nominal(max_pairs, fraction, lambda n: (1.0 - level) / 2.0 / max_pairs)


@lru_cache(maxsize=None)
def mixture(max_pairs: int, fraction: float, level: float = LEVEL):
    """One-sided beta-binomial mixtures (a uniform prior on theta above f for the high end, below f for
    the low end): an end excludes a value once the mixture's likelihood ratio for the count of values
    at or below it reaches 2 / (1 - level) (Ville's inequality)."""
    grid = (np.arange(20000) + 0.5) / 20000
    above, below = grid[grid > fraction], grid[grid < fraction]
    low, high = [0], [0]
    for n in range(1, max_pairs + 1):
        k = np.arange(n + 1)[:, None]

        def ratio(thetas):
            return np.exp(k * np.log(thetas / fraction) + (n - k) * np.log((1 - thetas) / (1 - fraction))).mean(axis=1)

        bound = 2.0 / (1.0 - level)
        up = np.flatnonzero(ratio(above) >= bound)
        down = np.flatnonzero(ratio(below) >= bound)
        high.append(int(up[0]) if up.size and up[0] >= 1 else 0)
        low.append(int(down[-1]) + 1 if down.size else 0)
    return tuple(low), tuple(high)


CONSTRUCTIONS = {
    "fixed interval every look": fixed_every_look,
    "union bound, 6/(pi^2 n^2)": union_any_looks,
    "union bound, alpha/N": union_n_looks,
    "beta-binomial mixture": mixture,
    "loopmeter: exact, calibrated": sequential.sequence_ranks,
}


def first(ranks) -> str:
    found = [n for n, rank in enumerate(ranks) if rank]
    return str(found[0]) if found else "-"


def constructions_table(sizes: tuple[int, ...]) -> None:
    print("## 1. Confidence sequences for a percentile, exactly (miss: the chance an end misses at any look)\n")
    print("| N | fraction | construction | miss low | miss high | first low | first high | ranks at 10 | at 20 | at N |")
    print("|---|---|---|---:|---:|---:|---:|---|---|---|")
    for size in sizes:
        for fraction in (0.5, 0.95):
            for name, ranks_of in CONSTRUCTIONS.items():
                low, high = ranks_of(size, fraction, LEVEL)
                miss_low = sequential.miss_chance(np.asarray(low), fraction, "low")
                miss_high = sequential.miss_chance(np.asarray(high), fraction, "high")
                at = [f"({low[n]}, {high[n]})" if n <= size else "" for n in (10, 20, size)]
                print(f"| {size} | {fraction:g} | {name} | {miss_low:.4f} | {miss_high:.4f} | {first(low)} | "
                      f"{first(high)} | {' | '.join(at)} |")
    print()


# ---- the stopping rule on known laws --------------------------------------------------------------
def normal(mean, sd):
    return (lambda rng, n: rng.normal(mean, sd, n)), (lambda f: mean + sd * _z(f))


def _z(fraction: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(fraction)


def student(centre, scale, df=3):
    draws = np.random.default_rng(12345).standard_t(df, 2_000_000)
    return (lambda rng, n: centre + scale * rng.standard_t(df, n)), (lambda f: centre + scale * float(np.quantile(draws, f)))


def skewed(shift, scale, sigma=0.8):
    return ((lambda rng, n: shift + scale * rng.lognormal(0.0, sigma, n)),
            (lambda f: shift + scale * math.exp(sigma * _z(f))))


# (name, profile, {mode: law}) — a law: (draw(rng, n), true percentile(fraction))
LAWS = [
    ("clear, light", "light", {"forgeloopBalanced": normal(40, 10), "forgeloopAdaptive": normal(20, 4)}),
    ("clear, balanced", "balanced", {"forgeloopBalanced": normal(45, 12), "forgeloopAdaptive": normal(-30, 8)}),
    ("clear, heavy tails", "light", {"forgeloopBalanced": student(40, 6), "forgeloopAdaptive": student(20, 3)}),
    ("clear, skewed", "light", {"forgeloopBalanced": skewed(15, 20), "forgeloopAdaptive": skewed(12, 6)}),
    ("p50 at 35 (worst case)", "light", {"forgeloopBalanced": normal(40, 10), "forgeloopAdaptive": normal(35 + 1e-9, 15)}),
    ("p50 violated", "light", {"forgeloopBalanced": normal(40, 10), "forgeloopAdaptive": normal(55, 10)}),
    ("p95 violated", "light", {"forgeloopBalanced": normal(40, 10), "forgeloopAdaptive": normal(30, 40)}),
    ("similar to direct", "balanced", {"forgeloopBalanced": normal(0, 4), "forgeloopAdaptive": normal(2, 3)}),
    ("on the margin", "balanced", {"forgeloopBalanced": normal(10 + 1e-9, 15), "forgeloopAdaptive": normal(-10 - 1e-9, 15)}),
]


def truth_of(question: sequential.Question, true_value: float) -> str:
    """The verdict the law itself gives the question."""
    t = question.threshold
    if question.objective is not None:
        return "MET" if true_value <= t else "VIOLATED"
    return "MORE" if true_value > t else "LESS" if true_value < -t else "SIMILAR"


def fixed_ranks_of(max_pairs, fraction, level=LEVEL):
    return fixed_every_look(max_pairs, fraction, level)


def fixed_verdicts(values: dict, profile: str, n: int) -> list[str | None]:
    """`report confidence`'s verdict on the first n pairs of each mode (the fixed-size interval)."""
    return [sequential.judge(question, np.sort(values[question.mode][:n]), n, n, LEVEL, fixed_ranks_of).verdict
            for question in sequential.questions(profile)]


def stop(values: dict, profile: str, max_runs: int, ranks_of) -> tuple[int, str, list]:
    """The round at which a run set stops, why, and its judgements."""
    for rounds in range(1, max_runs + 1):
        judgements = [sequential.judge(question, np.sort(values[question.mode][:rounds]), rounds, max_runs, LEVEL, ranks_of)
                      for question in sequential.questions(profile)]
        reason = sequential.stop_reason(judgements, rounds, max_runs)
        if reason is not None:
            return rounds, reason, judgements
    raise AssertionError("the budget always stops a run set")


def simulate(name: str, profile: str, laws: dict, draws_of, run_sets: int, max_runs: int, seed: int,
             compare: bool) -> dict:
    questions = sequential.questions(profile)
    truths = [truth_of(question, laws[question.mode](question.fraction)) for question in questions]
    rounds, reasons = [], {}
    verdicts = wrong = fixed_wrong_at_stop = fixed_resolved = agree = opposite = 0
    other_rounds = {label: [] for label in CONSTRUCTIONS} if compare else {}
    for index in range(run_sets):
        rng = np.random.default_rng([seed, index, sum(map(ord, name))])
        values = {mode: draws_of(mode, rng, max_runs) for mode in laws}
        took, reason, judgements = stop(values, profile, max_runs, sequential.sequence_ranks)
        rounds.append(took)
        reasons[reason] = reasons.get(reason, 0) + 1
        at_stop = fixed_verdicts(values, profile, took)
        at_twenty = fixed_verdicts(values, profile, FIXED_SIZE)
        for judgement, truth, shown, fixed in zip(judgements, truths, at_stop, at_twenty):
            verdicts += judgement.verdict is not None
            wrong += judgement.verdict is not None and judgement.verdict != truth
            fixed_wrong_at_stop += shown is not None and shown != truth
            if fixed is not None:
                fixed_resolved += 1
                agree += judgement.verdict == fixed
                opposite += judgement.verdict is not None and judgement.verdict != fixed
        for label, ranks_of in (CONSTRUCTIONS.items() if compare and index < run_sets // 4 else ()):
            other_rounds[label].append(stop(values, profile, max_runs, ranks_of)[0])
    asked = run_sets * len(questions)
    return {"law": name, "rounds": float(np.mean(rounds)), "reasons": reasons, "run_sets": run_sets,
            "wrong": wrong / asked, "wrong_of_verdicts": wrong / max(verdicts, 1), "shown_wrong": fixed_wrong_at_stop / asked,
            "agree": agree / max(fixed_resolved, 1), "opposite": opposite / max(fixed_resolved, 1),
            "fixed_resolved": fixed_resolved / asked,
            "others": {label: float(np.mean(values)) for label, values in other_rounds.items()}}


def laws_table(run_sets: int, max_runs: int, seed: int) -> None:
    print(f"## 2. The stopping rule on known laws ({run_sets} simulated run sets a law, at most {max_runs} rounds)\n")
    print("rounds: mean runs per mode; saved: against the tail tier's 20; wrong: wrong verdicts per question "
          "asked (and per verdict given); shown wrong: `report confidence` on the stopped run set; "
          "agree/opposite: against the fixed 20 pairs where those resolve\n")
    print("| law | rounds | saved | resolved | out of reach | budget spent | wrong | wrong of verdicts | shown wrong | "
          "fixed 20 resolves | agree | opposite |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    others = []
    for name, profile, laws in LAWS:
        def draws_of(mode, rng, n, laws=laws):
            return laws[mode][0](rng, n)

        found = simulate(name, profile, {mode: law[1] for mode, law in laws.items()}, draws_of, run_sets, max_runs,
                         seed, compare=True)
        print(_row(_cells(found)))
        others.append(found)
    print("\nMean rounds of each construction on the same draws (a quarter of the run sets):\n")
    print("| law | " + " | ".join(CONSTRUCTIONS) + " |")
    print("|---|" + "---:|" * len(CONSTRUCTIONS))
    for found in others:
        print(f"| {found['law']} | " + " | ".join(f"{found['others'][label]:.1f}" for label in CONSTRUCTIONS) + " |")
    print()


def _cells(found: dict) -> list[str]:
    share = {reason: found["reasons"].get(reason, 0) / found["run_sets"] for reason in
             (sequential.RESOLVED, sequential.OUT_OF_REACH, sequential.BUDGET_SPENT)}
    return [found["law"], f"{found['rounds']:.1f}", f"{1 - found['rounds'] / FIXED_SIZE:.0%}",
            f"{share[sequential.RESOLVED]:.0%}", f"{share[sequential.OUT_OF_REACH]:.0%}",
            f"{share[sequential.BUDGET_SPENT]:.0%}", f"{found['wrong']:.4f}", f"{found['wrong_of_verdicts']:.4f}",
            f"{found['shown_wrong']:.4f}", f"{found['fixed_resolved']:.0%}", f"{found['agree']:.3f}",
            f"{found['opposite']:.4f}"]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def corpus_table(corpus: Path, run_sets: int, max_runs: int, seed: int) -> None:
    import json

    raw = corpus / "results" / "raw" / "codex-tail-repeat20-20260831"
    profiles = {path.stem: json.loads(path.read_text())["expectedProfile"] for path in (corpus / "scenarios").glob("*.json")}
    print(f"## 3. The laws of the real runs (codex-tail-repeat20-20260831, each scenario's pairs resampled; "
          f"{run_sets} run sets a scenario)\n")
    print("| scenario | profile | rounds | saved | resolved | out of reach | budget spent | wrong | shown wrong | "
          "fixed 20 resolves | agree | opposite |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario in sorted(path.name for path in raw.iterdir()):
        documents = [json.loads(path.read_text()) for path in sorted((raw / scenario).rglob("*.json"))]
        pairs = sequential.token_overheads(documents)

        def draws_of(mode, rng, n, pairs=pairs):
            return rng.choice(pairs[mode], n)

        def truth(mode, pairs=pairs):  # the lower percentile of the resampled law: inf{x : F(x) >= f}
            return lambda f: float(pairs[mode][max(0, math.ceil(f * len(pairs[mode])) - 1)])

        found = simulate(scenario, profiles[scenario], {mode: truth(mode) for mode in pairs}, draws_of, run_sets,
                         max_runs, seed, compare=False)
        cells = _cells(found)
        print(_row([cells[0], profiles[scenario], *cells[1:7], *cells[8:]]))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-sets", type=int, default=2000)
    parser.add_argument("--max-runs", type=int, default=sequential.DEFAULT_MAX_RUNS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus" / "forgeloop")
    arguments = parser.parse_args()
    started = time.perf_counter()
    constructions_table(tuple(sorted({20, arguments.max_runs, 50})))
    laws_table(arguments.run_sets, arguments.max_runs, arguments.seed)
    if (arguments.corpus / "results" / "raw").is_dir():
        corpus_table(arguments.corpus, max(1, arguments.run_sets // 4), arguments.max_runs, arguments.seed)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
