"""When a benchmark may stop (`execute --until-resolved`): confidence sequences for the percentiles of
the paired token overheads, the questions a scenario asks of them, and the rule applied after each round.

**The confidence sequence** (`sequence_ranks`). `report confidence` bounds the percentile at fraction
f of n pairs by two order statistics [X(r), X(s)]: X(r) lies above the true percentile only when fewer
than r of the n values lie at or below it, and the count K of such values is Binomial(n, f) whatever
the distribution. Looking at that interval after every round and stopping when it settles a question
would be wrong more often than its level says: checked at every one of 30 looks, a median's
97.5 % end misses 6.7 % of the time. The runner therefore uses ranks r_n, s_n for every pair count n up
to the budget N (`--max-runs`) chosen so that the chance that *any* look misses stays within
(1 - level) / 2 per end. As pairs come one at a time, K_1, K_2, ... is a walk that rises by one with
chance f at each step; the end X(s_n) misses at look n exactly when K_n >= s_n, and X(r_n) when
K_n <= r_n - 1. The chance that the walk crosses the ranks at some n <= N is computed exactly by
summing over the walk's states step by step (`miss_chance`), and the ranks are those of the
fixed-size interval at one nominal tail, the largest at which that chance stays within
(1 - level) / 2 (a constant nominal level, as in Pocock's group-sequential tests, calibrated exactly
rather than by a union bound). Distribution-free, no simulation, and valid whatever rule decides to
stop, so long as at most N pairs are looked at; with ties the miss is rarer still. At every n the
interval holds the fixed-size interval of `report confidence` at the same level, so a question the
sequence settles is settled the same way by `report confidence` on the same pairs.

**The questions** (`questions`). For each ForgeLoop mode, the paired token overhead's p50 against
direct: MORE (the low end above +margin), LESS (the high end below -margin) or SIMILAR (both
ends within the margin); for a light scenario also ForgeLoop's light objectives on the adaptive
mode: MET (high end at most the threshold) or VIOLATED (low end above it), as `report confidence`
judges them.

**The rule** (`judge`, `stop_reason`). After each round every question is RESOLVED (its interval
gives a verdict), OUT_OF_REACH (the verdict its estimate points to cannot be reached within the
rounds left, whatever the new pairs are: e.g. the high end of a p95, which 30 pairs cannot bound) or
OPEN. A scenario stops when no question is OPEN, or when its budget is spent. Stopping for a reason
other than a verdict never makes a verdict wrong, so the level holds for the verdicts given.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import intervals
from ..numbers import js_round4
from .contract import CANDIDATE_MODES, LIGHT_OBJECTIVES, TRUSTED_USAGE_SOURCES
from .schema import RUN_COLUMN_NAMES, flatten_run

LEVEL = intervals.DEFAULT_LEVEL
MARGIN = 10.0  # percentage points of overhead within which a mode counts as SIMILAR to direct
DEFAULT_MAX_RUNS = 30  # the tail tier's largest size
METHOD = ("exact confidence sequence: order statistics whose ranks keep the chance that any look "
          "misses within (1 - level) / 2 per end, for at most maxRuns pairs")
RESOLVED, OUT_OF_REACH, OPEN = "RESOLVED", "OUT_OF_REACH", "OPEN"
BUDGET_SPENT = "BUDGET_SPENT"
SLACK = 1.0 + 1e-9  # a chance equal to its bound, summed a hair above it, is within


# ---- the binomial walk ----------------------------------------------------------------------------
def binomial_table(max_n: int, p: float) -> np.ndarray:
    """Row n: P(Binomial(n, p) = k) for k = 0..max_n (zero beyond n), from Pascal's recursion."""
    table = np.zeros((max_n + 1, max_n + 1))
    table[0, 0] = 1.0
    for n in range(1, max_n + 1):
        table[n] = table[n - 1] * (1.0 - p)
        table[n, 1:] += table[n - 1, :-1] * p
    return table


def tails(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(K <= k) and P(K >= k) of each row, each summed from its own end."""
    return np.cumsum(table, axis=1), np.cumsum(table[:, ::-1], axis=1)[:, ::-1]


def nominal_ranks(table: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """For every n (a row of `table`): the fixed-size ranks at one-sided `tail`: r, the largest with
    P(K <= r - 1) <= tail, and s, the smallest with P(K >= s) <= tail (0 where none is)."""
    at_most, at_least = tails(table)
    n = np.arange(len(table))[:, None]
    k = np.arange(table.shape[1])[None, :]
    low = ((at_most <= tail * SLACK) & (k < n)).sum(axis=1)
    count = ((at_least <= tail * SLACK) & (k >= 1) & (k <= n)).sum(axis=1)
    high = np.where(count > 0, n[:, 0] + 1 - count, 0)
    return low, high


def miss_chance(ranks: np.ndarray, p: float, side: str) -> float:
    """The chance that the walk K_n (a step up with chance p) crosses the ranks at some n: the high
    end misses when K_n >= s_n, the low end when K_n <= r_n - 1 (a rank of 0 is no end, no look)."""
    states = np.zeros(len(ranks) + 1)
    states[0] = 1.0
    missed = 0.0
    for n in range(1, len(ranks)):
        states[1:] = states[1:] * (1.0 - p) + states[:-1] * p
        states[0] *= 1.0 - p
        rank = int(ranks[n])
        if rank >= 1:
            crossed = slice(rank, None) if side == "high" else slice(0, rank)
            missed += float(states[crossed].sum())
            states[crossed] = 0.0
    return missed


@lru_cache(maxsize=64)
def sequence_ranks(max_pairs: int, fraction: float, level: float = LEVEL) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ranks (r_n, s_n), n = 0..max_pairs, of the confidence sequence for the percentile at
    `fraction` (see the module's text); 0 where an end is not bounded at n."""
    table = binomial_table(max_pairs, fraction)
    at_most, at_least = tails(table)
    tail = (1.0 - level) / 2.0
    ranks = []
    for side, chances in (("low", at_most), ("high", at_least)):
        candidates = np.unique(chances[(chances <= tail * SLACK) & (chances > 0)])  # where a rank changes
        best, low, high = np.zeros(max_pairs + 1, np.int64), 0, len(candidates) - 1
        while low <= high:  # the largest nominal tail whose sequence misses within `tail`
            middle = (low + high) // 2
            found = nominal_ranks(table, float(candidates[middle]))[0 if side == "low" else 1]
            if miss_chance(found, fraction, side) <= tail * SLACK:
                best, low = found, middle + 1
            else:
                high = middle - 1
        ranks.append(tuple(int(rank) for rank in best))
    return ranks[0], ranks[1]


def fixed_ranks(n: int, fraction: float, level: float = LEVEL) -> tuple[int, int]:
    """The ranks of the fixed-size interval of n pairs (`report confidence`'s), for comparison."""
    low, high = nominal_ranks(binomial_table(n, fraction), (1.0 - level) / 2.0)
    return int(low[n]), int(high[n])


def sequence_interval(values: np.ndarray, max_pairs: int, fraction: float,
                      level: float = LEVEL) -> tuple[float | None, float | None]:
    """The sequence's interval for the percentile of the sorted `values` (at most `max_pairs`)."""
    n = len(values)
    if n > max_pairs:
        raise ValueError(f"{n} pairs exceed the sequence's {max_pairs}")
    low_ranks, high_ranks = sequence_ranks(max_pairs, fraction, level)
    low, high = low_ranks[n], high_ranks[n]
    return (float(values[low - 1]) if low else None), (float(values[high - 1]) if high else None)


# ---- the questions --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    mode: str
    statistic: str  # pairedOverheadP50 or pairedOverheadP95, of the token overhead
    fraction: float
    objective: str | None  # ForgeLoop's light objective, or None: the overhead against direct
    threshold: float  # the objective's threshold, or the margin

    def verdicts(self) -> dict[str, tuple]:
        """Each verdict's conditions on the ends, (end, t, strict): high <= t (< t when strict), low > t
        (>= t when not strict)."""
        t = self.threshold
        if self.objective is not None:
            return {"MET": (("high", t, False),), "VIOLATED": (("low", t, True),)}
        return {"MORE": (("low", t, True),), "LESS": (("high", -t, True),),
                "SIMILAR": (("low", -t, False), ("high", t, False))}

    def pointed(self, estimate: float) -> str:
        """The verdict the estimate points to."""
        t = self.threshold
        if self.objective is not None:
            return "MET" if estimate <= t else "VIOLATED"
        return "MORE" if estimate > t else "LESS" if estimate < -t else "SIMILAR"


OBJECTIVES = (("p50TokenOverheadPercent", "pairedOverheadP50", 0.5), ("p95TokenOverheadPercent", "pairedOverheadP95", 0.95))


def questions(profile: str | None, margin: float = MARGIN) -> list[Question]:
    """A scenario's questions: each ForgeLoop mode's token overhead p50 against direct, and for a light
    scenario the light objectives on the adaptive mode. (A p95 against direct is not asked: its low end
    sits near the 83rd percentile at 30 pairs, and with ForgeLoop's usual tails it would hold every
    scenario to its budget.)"""
    found = [Question(mode, "pairedOverheadP50", 0.5, None, margin) for mode in CANDIDATE_MODES]
    if profile == "light":
        found += [Question("forgeloopAdaptive", statistic, fraction, objective, float(LIGHT_OBJECTIVES[objective]))
                  for objective, statistic, fraction in OBJECTIVES]
    return found


@dataclass
class Judgement:
    question: Question
    pairs: int
    estimate: float | None
    low: float | None
    high: float | None
    status: str
    verdict: str | None
    note: str | None = None

    def as_dict(self) -> dict:
        """As the stopping record holds it: the figures rounded as `report confidence` rounds its own."""
        question = self.question

        def rounded(value: float | None) -> float | None:
            return None if value is None else js_round4(value)

        return {"mode": question.mode, "metric": "tokens", "statistic": question.statistic,
                "objective": question.objective, "threshold": question.threshold, "pairs": self.pairs,
                "estimate": rounded(self.estimate), "low": rounded(self.low), "high": rounded(self.high),
                "status": self.status, "verdict": self.verdict, "note": self.note}


def _holds(conditions: tuple, low_ranks: np.ndarray, high_ranks: np.ndarray, below: dict, added: np.ndarray) -> np.ndarray:
    """Whether each verdict condition holds at n + added pairs, when the added pairs all lie in the
    verdict's own region: a high-end condition's count rises with them, a low-end one's does not."""
    ok = np.ones(len(added), bool)
    for end, t, strict in conditions:
        if end == "high":  # X(s) <= t: at least s values <= t (X(s) < t: at least s values < t)
            count = below[(t, not strict)] + added
            ok &= (high_ranks >= 1) & (count >= high_ranks)
        else:  # X(r) > t: fewer than r values <= t (X(r) >= t: fewer than r values < t)
            ok &= (low_ranks >= 1) & (below[(t, strict)] <= low_ranks - 1)
    return ok


def judge(question: Question, values: np.ndarray, rounds: int, max_runs: int, level: float = LEVEL,
          ranks_of=sequence_ranks) -> Judgement:
    """The question after `rounds` rounds, on the sorted paired overheads `values`."""
    n = len(values)
    low_ranks, high_ranks = (np.asarray(side) for side in ranks_of(max_runs, question.fraction, level))
    low = float(values[low_ranks[n] - 1]) if low_ranks[n] else None
    high = float(values[high_ranks[n] - 1]) if high_ranks[n] else None
    estimate = intervals.percentile(values, question.fraction) if n else None
    verdicts = question.verdicts()
    below = {}  # (t, inclusive) -> how many values lie at or below t (below t when not inclusive)
    for conditions in verdicts.values():
        for _, t, _ in conditions:
            below[(t, True)] = int(np.searchsorted(values, t, side="right"))
            below[(t, False)] = int(np.searchsorted(values, t, side="left"))
    now = np.zeros(1, np.int64)
    for verdict, conditions in verdicts.items():
        if _holds(conditions, low_ranks[n:n + 1], high_ranks[n:n + 1], below, now)[0]:
            return Judgement(question, n, estimate, low, high, RESOLVED, verdict)
    if estimate is None or rounds >= max_runs:  # nothing to point with, or the budget is spent
        return Judgement(question, n, estimate, low, high, OPEN, None)
    pointed = question.pointed(estimate)
    conditions = verdicts[pointed]
    added = np.arange(1, max(0, max_runs - rounds) + 1)
    future = n + added
    if _holds(conditions, low_ranks[future], high_ranks[future], below, added).any():
        return Judgement(question, n, estimate, low, high, OPEN, None)
    return Judgement(question, n, estimate, low, high, OUT_OF_REACH, None,
                     _out_of_reach(question, pointed, conditions, low_ranks, high_ranks, max_runs))


def _out_of_reach(question: Question, pointed: str, conditions: tuple, low_ranks, high_ranks, max_runs: int) -> str:
    statistic = "p50" if question.fraction == 0.5 else "p95"
    for end, _, _ in conditions:
        if not any((low_ranks if end == "low" else high_ranks)[1:]):
            return (f"{pointed} needs the {end} end of the {statistic}, which {max_runs} pairs cannot bound "
                    f"(a fixed-size bound needs {_fixed_minimum(question.fraction, end)})")
    return f"{pointed} cannot be reached in the rounds left, whatever the new pairs"


def _fixed_minimum(fraction: float, end: str) -> int:
    """The fewest pairs whose fixed-size interval bounds that end at all: (1 - f)^n or f^n <= tail."""
    chance, tail, n = (1.0 - fraction if end == "low" else fraction), (1.0 - LEVEL) / 2.0, 1
    while chance ** n > tail:
        n += 1
    return n


def stop_reason(judgements: list[Judgement], rounds: int, max_runs: int) -> str | None:
    """Why the scenario stops after `rounds` rounds (RESOLVED, OUT_OF_REACH, BUDGET_SPENT), or None."""
    statuses = {judgement.status for judgement in judgements}
    if OPEN not in statuses:
        return OUT_OF_REACH if OUT_OF_REACH in statuses else RESOLVED
    return BUDGET_SPENT if rounds >= max_runs else None


def judge_scenario(overheads: dict[str, np.ndarray], profile: str | None, rounds: int, max_runs: int,
                   level: float = LEVEL, margin: float = MARGIN) -> tuple[list[Judgement], str | None]:
    """Every question of a scenario after `rounds` rounds, and why it stops (None: it goes on)."""
    judgements = [judge(question, overheads.get(question.mode, np.empty(0)), rounds, max_runs, level)
                  for question in questions(profile, margin)]
    return judgements, stop_reason(judgements, rounds, max_runs)


# ---- the pairs, as report confidence takes them ---------------------------------------------------
IDENTITY = ("meta_model", "meta_provider", "meta_prompt_spec_fingerprint", "meta_project_revision", "benchmark_version",
            "meta_environment_class", "meta_node_version", "meta_os", "meta_arch")


def _trusted(row: dict) -> bool:
    return (row["usage_source"] in TRUSTED_USAGE_SOURCES and row["verification"] == "PASS"
            and all(row[name] is not None for name in IDENTITY[:4])
            and row["comparable_steps"] is not None and row["comparable_steps"] > 0)


def token_overheads(documents: list[dict]) -> dict[str, np.ndarray]:
    """The sorted paired token overheads (percent) of one scenario's run documents, per ForgeLoop
    mode: a mode's run and the direct run of its runIndex, both trusted and alike in what makes runs
    comparable, direct's tokens above 0 (ForgeLoop's comparable token pairs, queries/forgeloop_pairs.sql)."""
    rows = [dict(zip(RUN_COLUMN_NAMES, flatten_run(document))) for document in documents]
    direct = {row["run_index"]: row for row in rows if row["mode"] == "direct" and _trusted(row)}
    found: dict[str, list[float]] = {mode: [] for mode in CANDIDATE_MODES}
    for row in rows:
        base = direct.get(row["run_index"])
        if row["mode"] == "direct" or base is None or not _trusted(row):
            continue
        if any(row[name] != base[name] for name in IDENTITY):
            continue
        if row["total_tokens"] is not None and base["total_tokens"] is not None and base["total_tokens"] > 0:
            found[row["mode"]].append((row["total_tokens"] - base["total_tokens"]) / base["total_tokens"] * 100)
    return {mode: np.sort(np.asarray(values, dtype=np.float64)) for mode, values in found.items()}


# ---- the record ---------------------------------------------------------------------------------------
def settings(max_runs: int, level: float = LEVEL, margin: float = MARGIN) -> dict:
    """What a run set's stopping rule is set by (kept in its plan)."""
    return {"maxRuns": max_runs, "level": level, "margin": margin, "method": METHOD}


def scenario_record(scenario_id: str, rounds: int, reason: str | None, judgements: list[Judgement]) -> dict:
    """A scenario's entry in the stopping record: the runs per mode it took, why it stopped (null while
    it runs) and its questions as the last round left them."""
    return {"scenarioId": scenario_id, "runs": rounds, "stopped": reason,
            "questions": [judgement.as_dict() for judgement in judgements]}
