"""How often `loopmeter compare --fail-on regression` fails when nothing changed, how often it catches a
regression, and whether the minimum detectable effect it prints is the truth: the measurement behind
docs/statistics.md (its compare section).

    .venv/bin/python bench/compare_gate.py [--comparisons 200] [--samples 20000] [--seed 1] [--corpus DIR]
                                           [--part methods|gate|all]

The laws (`laws`): 7 scenarios x 3 modes, as the corpus has them.
- `spreads`: each scenario and mode's tokens log-normal, log-sd evenly from 0.05 to 0.40 over the 21
  cells; wall time log-normal with the corpus's own spread per scenario and mode (the within-run-set
  sd of log wall time, pooled over the corpus's two run sets: 0.03 to 0.18).
- `corpus`: tokens drawn from the corpus's own values (`codex-tail-repeat20-20260831`, 20 runs per
  scenario and mode, with their clusters: many scenarios run at 56 k or at 70 k tokens and nothing
  between), times as above.

1. `methods` (numpy, no command): the intervals that could be used, on one row (Welch's, compare's: the larger
   of Welch's and Student's variances, and two others) and on a pooled row,
   each drawn `--samples` times: how often the 95 % interval holds the true ratio, how often the
   interval at a gated row's level (Bonferroni over 42 rows) lies wholly above 1 when nothing changed,
   and how often the pooled row catches +20 %.
2. `gate` (the command as users run it): run sets written as ForgeLoop writes them, ingested into a
   warehouse, and `loopmeter compare BASE CAND --json --fail-on regression` run in-process per
   comparison (`--comparisons` per cell). Cells, at 5 and 20 repeats: nothing changed (A/A); +20 % tokens
   in both ForgeLoop modes of every scenario; +50 % tokens in the adaptive mode of the noisiest
   scenario; nothing changed but the machine, each run set's wall times drifting as the corpus's did
   between its two run sets (`corpus_drift`), with and without `--adjust direct`; and a grid of
   effects around the predicted MDE, for the MDE's check. Rates with Wilson 95 % intervals.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from loopmeter.forgeloop import power  # noqa: E402
from runs import run, write_tree  # noqa: E402

MODES = ("direct", "forgeloopBalanced", "forgeloopAdaptive")
SCENARIOS = tuple(f"scenario-{index}" for index in range(7))
CORPUS = ROOT.parent / "shared" / "corpus" / "forgeloop"
TAIL_RUN_SET = "codex-tail-repeat20-20260831"


# ---- the laws ------------------------------------------------------------------------------------------
@dataclass
class Law:
    """Log tokens and log wall times per scenario and mode (7 x 3): a centre and a spread each, or
    for tokens the values to draw from (`token_values`, a list of 7 lists of 3 arrays)."""

    name: str
    token_centre: np.ndarray
    token_sd: np.ndarray
    time_centre: np.ndarray
    time_sd: np.ndarray
    token_values: list | None = field(default=None, repr=False)

    def draw(self, rng: np.random.Generator, repeats: int) -> tuple[np.ndarray, np.ndarray]:
        """Log tokens and log times, each (7, 3, repeats)."""
        shape = (*self.time_sd.shape, repeats)
        times = self.time_centre[..., None] + rng.standard_normal(shape) * self.time_sd[..., None]
        if self.token_values is None:
            tokens = self.token_centre[..., None] + rng.standard_normal(shape) * self.token_sd[..., None]
        else:
            tokens = np.stack([np.stack([values[rng.integers(0, len(values), repeats)] for values in scenario])
                               for scenario in self.token_values])
        return tokens, times


def corpus_cells(corpus: Path = CORPUS) -> dict:
    """Per scenario (sorted) and mode of the corpus: each run set's log tokens and log wall times."""
    cells: dict = {}
    for path in sorted((corpus / "results" / "raw").glob("*/*/*/*.json")):
        document = json.loads(path.read_text())
        tokens, wall = document["usage"].get("totalTokens"), document.get("wallClockMs")
        cell = cells.setdefault(document["scenarioId"], {}).setdefault(document["mode"], {}).setdefault(
            document["runSetId"], {"tokens": [], "time": []})
        if tokens and wall:
            cell["tokens"].append(math.log(tokens))
            cell["time"].append(math.log(wall))
    return cells


def corpus_time_sd(cells: dict) -> np.ndarray:
    """The spread of log wall time within a run set, per scenario and mode, pooled over the run sets."""
    sd = np.empty((7, 3))
    for i, scenario in enumerate(sorted(cells)):
        for j, mode in enumerate(MODES):
            sides = [np.array(side["time"]) for side in cells[scenario][mode].values()]
            squares = sum(((values - values.mean()) ** 2).sum() for values in sides)
            sd[i, j] = math.sqrt(squares / sum(len(values) - 1 for values in sides))
    return sd


def corpus_drift(cells: dict) -> tuple[float, float]:
    """How far the corpus's wall times moved between its two run sets, split by the method of moments
    into a machine part common to every scenario and mode (the sd of one run set's log factor: the
    mean log ratio over sqrt 2) and a part of each scenario and mode's own (the variance of the log
    ratios about their mean less their sampling variance, halved, its root)."""
    shifts, noise = [], []
    for scenario in sorted(cells):
        for mode in MODES:
            first, second = (np.array(side["time"]) for _, side in sorted(cells[scenario][mode].items()))
            shifts.append(second.mean() - first.mean())
            noise.append(first.var(ddof=1) / len(first) + second.var(ddof=1) / len(second))
    shifts = np.array(shifts)
    return abs(shifts.mean()) / math.sqrt(2), math.sqrt(max(0.0, shifts.var(ddof=1) - np.mean(noise)) / 2)


def laws(corpus: Path = CORPUS) -> dict[str, Law]:
    cells = corpus_cells(corpus)
    time_sd = corpus_time_sd(cells)
    time_centre = np.full((7, 3), math.log(20_000.0))
    token_centre = np.full((7, 3), math.log(50_000.0))
    values = [[np.array(cells[scenario][mode][TAIL_RUN_SET]["tokens"]) for mode in MODES] for scenario in sorted(cells)]
    return {
        "spreads": Law("spreads", token_centre, np.linspace(0.05, 0.40, 21).reshape(7, 3), time_centre, time_sd),
        "corpus": Law("corpus", np.array([[v.mean() for v in row] for row in values]),
                      np.array([[v.std(ddof=1) for v in row] for row in values]), time_centre, time_sd, values),
    }


# ---- run sets through the command -----------------------------------------------------------------------
def run_set(name: str, law: Law, repeats: int, rng: np.random.Generator, token_factor=1.0, time_factor=1.0) -> list[dict]:
    """The run documents of one run set drawn from `law`, tokens and times multiplied by the factors
    (scalars or (7, 3) arrays)."""
    tokens, times = law.draw(rng, repeats)
    tokens = np.maximum(1, np.rint(np.exp(tokens) * np.broadcast_to(token_factor, (7, 3))[..., None])).astype(int)
    times = np.exp(times) * np.broadcast_to(time_factor, (7, 3))[..., None]
    return [run(scenario, mode, k + 1, int(tokens[i, j, k]), run_set=name, wall=round(float(times[i, j, k]), 4))
            for i, scenario in enumerate(SCENARIOS) for j, mode in enumerate(MODES) for k in range(repeats)]


def cli(*args: str) -> tuple[int, str]:
    """`loopmeter ARGS` in this process: its exit code and what it printed."""
    from loopmeter.cli import run as run_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = run_cli(list(args))
    return code, out.getvalue()


def ingest(warehouse: Path, sets: dict[str, list[dict]], scratch: Path) -> None:
    """The run sets written as ForgeLoop writes them and ingested; the files removed afterwards."""
    results = scratch / "results"
    shutil.rmtree(results, ignore_errors=True)
    write_tree(results, [document for documents in sets.values() for document in documents],
               {scenario: "light" for scenario in SCENARIOS})
    code, _ = cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"), "--quiet",
                  "--warehouse", str(warehouse))
    shutil.rmtree(results)
    if code != 0:
        raise SystemExit(f"ingest failed with {code}")


def compare(warehouse: Path, baseline: str, candidate: str, *options: str) -> tuple[int, dict]:
    code, out = cli("compare", baseline, candidate, "--json", "--fail-on", "regression", *options,
                    "--warehouse", str(warehouse))
    return code, json.loads(out)


def build(warehouse: Path, law: Law, repeats: int, comparisons: int, effects: dict[str, tuple], seed: int,
          scratch: Path, batch: int = 60) -> None:
    """`base-0` .. `base-<comparisons>` from `law`, and for each effect `<name>-0` .. with its factors
    (token factor, time factor), or with factors drawn afresh for each run set by a callable of the
    generator (and then one run set more, to compare them with each other)."""
    rng = np.random.default_rng(seed)
    names = [(f"base-{i}", (1.0, 1.0)) for i in range(comparisons + 1)]
    names += [(f"{effect}-{i}", factors) for effect, factors in effects.items() for i in range(comparisons)]
    names += [(f"{effect}-{comparisons}", factors) for effect, factors in effects.items() if callable(factors)]
    for start in range(0, len(names), batch):
        ingest(warehouse, {name: run_set(name, law, repeats, rng, *(factors(rng) if callable(factors) else factors))
                           for name, factors in names[start:start + batch]}, scratch)


def wilson(k: int, n: int) -> str:
    if n == 0:
        return "-"
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{p * 100:.1f} % [{max(0, centre - half) * 100:.1f}, {min(1, centre + half) * 100:.1f}]"


def pooled_row(report: dict, mode: str, metric: str) -> dict | None:
    return next((row for row in report["pooled"] if row["mode"] == mode and row["metric"] == metric), None)


# ---- part 2: the gate ---------------------------------------------------------------------------------------
def gate_cells(law: Law, repeats: int, comparisons: int, seed: int, scratch: Path,
               drift: tuple[float, float]) -> list[tuple[str, str]]:
    """The gate's rates on `law` at `repeats`: (what, rate) lines. `drift`: the sd of a run set's log
    wall-time factor common to all its scenarios and modes, and of each scenario and mode's own."""
    noisiest = np.unravel_index(np.argmax(np.where(np.arange(3) == 2, law.token_sd, -1)), law.token_sd.shape)
    local = np.ones((7, 3))
    local[noisiest] = 1.5
    forgeloop = np.array([1.0, 1.2, 1.2])[None, :].repeat(7, 0)
    machine, own = drift

    def drifted(rng: np.random.Generator) -> tuple[float, np.ndarray]:
        return 1.0, np.exp(machine * rng.standard_normal() + own * rng.standard_normal((7, 3)))

    effects = {"uniform": (forgeloop, 1.0), "local": (local, 1.0), "drift": drifted}
    warehouse = scratch / f"w-{law.name}-{repeats}"
    build(warehouse, law, repeats, comparisons, effects, seed, scratch)
    lines = []
    failed = [compare(warehouse, f"base-{i}", f"base-{i + 1}")[0] == 5 for i in range(comparisons)]
    lines.append(("nothing changed (A/A): the gate fails", wilson(sum(failed), comparisons)))
    failed = [compare(warehouse, f"base-{i}", f"base-{i + 1}", "--adjust", "direct")[0] == 5 for i in range(comparisons)]
    lines.append(("  the same with --adjust direct", wilson(sum(failed), comparisons)))
    uniform = [compare(warehouse, f"base-{i}", f"uniform-{i}") for i in range(comparisons)]
    rows = [pooled_row(report, "forgeloopAdaptive", "tokens") for _, report in uniform]
    lines.append(("+20 % tokens, both ForgeLoop modes: pooled adaptive row REGRESSED",
                  wilson(sum(row is not None and row["verdict"] == "REGRESSED" for row in rows), comparisons)))
    lines.append(("  the same: pooled adaptive interval wholly above 1",
                  wilson(sum(row is not None and row["low"] is not None and row["low"] > 1 for row in rows), comparisons)))
    lines.append(("  the same: the gate fails", wilson(sum(code == 5 for code, _ in uniform), comparisons)))
    lines.append(("  the same: median MDE of the pooled adaptive tokens row",
                  f"{np.median([row['mde'] for row in rows if row and row['mde']]):.3f}"))
    local_runs = [compare(warehouse, f"base-{i}", f"local-{i}") for i in range(comparisons)]
    lines.append((f"+50 % tokens in one scenario's adaptive mode (log-sd {law.token_sd[noisiest]:.2f}): the gate fails",
                  wilson(sum(code == 5 for code, _ in local_runs), comparisons)))
    drifts = [compare(warehouse, f"drift-{i}", f"drift-{i + 1}")[0] == 5 for i in range(comparisons)]
    adjusted = [compare(warehouse, f"drift-{i}", f"drift-{i + 1}", "--adjust", "direct")[0] == 5 for i in range(comparisons)]
    lines.append((f"wall times drifting between run sets as the corpus's (log-sd {machine:.3f} common, {own:.3f} per "
                  "scenario and mode), nothing else: the gate fails", wilson(sum(drifts), comparisons)))
    lines.append(("  the same with --adjust direct", wilson(sum(adjusted), comparisons)))
    shutil.rmtree(warehouse)
    return lines


def mde_cells(law: Law, repeats: int, comparisons: int, seed: int, scratch: Path) -> list[tuple[str, str]]:
    """The MDE told against the truth: every token row of the spreads law given one effect of a grid
    around its predicted MDE (the ratio whose interval lies above 1 in 80 % of comparisons)."""
    spread = 0.2
    flat = Law(law.name, law.token_centre, np.full((7, 3), spread), law.time_centre, law.time_sd)
    warehouse = scratch / f"w-mde-{repeats}"
    row_level, _ = power.family_levels(0.95, 7 * 3 * 2, 3 * 2)
    n = repeats
    predicted = power.detectable(2 * spread ** 2 / n, 2 * (n - 1), row_level)
    grid = np.linspace(0.4, 1.6, 21) * predicted
    build(warehouse, flat, repeats, comparisons, {"grid": (np.exp(grid).reshape(7, 3), 1.0)}, seed, scratch)
    caught, reported = np.zeros(21), []
    for i in range(comparisons):
        _, report = compare(warehouse, f"base-{i}", f"grid-{i}")
        tokens = [row for row in report["rows"] if row["metric"] == "tokens"]
        caught += [row["low"] is not None and row["low"] > 1 for row in tokens]
        reported += [row["mde"] for row in tokens if row["mde"] is not None]
    shutil.rmtree(warehouse)
    rate = caught / comparisons
    above = np.nonzero(rate >= 0.8)[0]
    if len(above) == 0 or above[0] == 0:
        return [(f"MDE at {repeats} repeats, log-sd {spread}", "80 % not bracketed by the grid")]
    k = above[0]
    effect80 = grid[k - 1] + (grid[k] - grid[k - 1]) * (0.8 - rate[k - 1]) / (rate[k] - rate[k - 1])
    median = float(np.median(reported))
    return [(f"MDE at {repeats} repeats, log-sd {spread}: ratio caught 80 % of the time (simulated)", f"{math.exp(effect80):.3f}"),
            ("  median MDE the command printed", f"{median:.3f}"),
            ("  printed / simulated, on the log scale", f"{math.log(median) / effect80:.3f}"),
            ("  printed / simulated, as the change (ratio - 1)", f"{(median - 1) / (math.exp(effect80) - 1):.3f}")]


# ---- part 1: the methods, in numpy ------------------------------------------------------------------------------
def welch_rows(b: np.ndarray, c: np.ndarray):
    return power.welch(b.shape[-1], b.mean(-1), b.var(-1, ddof=1), c.shape[-1], c.mean(-1), c.var(-1, ddof=1))


def t_quantiles(p: float, dfs: np.ndarray) -> np.ndarray:
    unique, inverse = np.unique(np.round(dfs, 2), return_inverse=True)  # t moves little within 0.005 df
    return np.array([power.t_quantile(p, df) for df in unique])[inverse].reshape(dfs.shape)


def mann_whitney_ends(b: np.ndarray, c: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The distribution-free interval for a shift of c against b (Hodges-Lehmann, from the exact
    Mann-Whitney null): the k-th smallest and largest pairwise difference; None where no k reaches `level`."""
    m, n = b.shape[-1], c.shape[-1]
    ways = {}  # (i, j) -> the number of orderings of i and j values giving U = 0, 1, ..., i * j
    for i in range(m + 1):
        for j in range(n + 1):
            if i == 0 or j == 0:
                ways[i, j] = np.ones(1)
                continue
            counted = np.zeros(i * j + 1)
            counted[j:j + (i - 1) * j + 1] += ways[i - 1, j]  # the largest value is c's: above all j of b's
            counted[:i * (j - 1) + 1] += ways[i, j - 1]
            ways[i, j] = counted
    cdf = np.cumsum(ways[m, n]) / math.comb(m + n, m)
    k = int(np.sum(cdf <= (1 - level) / 2))
    if k == 0:
        return None
    differences = np.sort((c[..., :, None] - b[..., None, :]).reshape(*c.shape[:-1], -1), axis=-1)
    return differences[..., k - 1], differences[..., m * n - k]


def median_bootstrap(b: np.ndarray, c: np.ndarray, level: float, rng, resamples: int = 1000):
    """The two-sample percentile bootstrap of the ratio of medians: each side resampled on its own."""
    lows, highs = [], []
    for start in range(0, len(b), 200):
        bb, cc = b[start:start + 200], c[start:start + 200]
        pick_b = rng.integers(0, bb.shape[-1], (len(bb), resamples, bb.shape[-1]))
        pick_c = rng.integers(0, cc.shape[-1], (len(cc), resamples, cc.shape[-1]))
        ratios = (np.median(np.take_along_axis(cc[:, None, :].repeat(resamples, 1), pick_c, -1), -1)
                  - np.median(np.take_along_axis(bb[:, None, :].repeat(resamples, 1), pick_b, -1), -1))
        lows.append(np.quantile(ratios, (1 - level) / 2, axis=1))
        highs.append(np.quantile(ratios, (1 + level) / 2, axis=1))
    return np.concatenate(lows), np.concatenate(highs)


def method_lines(all_laws: dict[str, Law], samples: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    row_level, pool_level = power.family_levels(0.95, 42, 6)
    one = {"log-normal, log-sd 0.05": lambda s: 0.05 * rng.standard_normal(s),
           "log-normal, log-sd 0.40": lambda s: 0.40 * rng.standard_normal(s),
           "log-t, 3 df (heavy tails)": lambda s: 0.2 * rng.standard_t(3, s),
           "corpus tokens, api-feature adaptive (clusters)": None, "corpus tokens, static-landing-page direct": None}
    corpus = all_laws["corpus"].token_values
    one["corpus tokens, api-feature adaptive (clusters)"] = lambda s: corpus[0][2][rng.integers(0, len(corpus[0][2]), s)]
    one["corpus tokens, static-landing-page direct"] = lambda s: corpus[6][0][rng.integers(0, len(corpus[6][0]), s)]
    lines = ["| law | runs a side | Welch t | compare | Mann-Whitney | median bootstrap | compare above 1 at the row level | "
             "nominal |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, draw in one.items():
        for m, n in ((5, 5), (20, 20), (5, 20), (3, 20)):
            b, c = draw((samples, m)), draw((samples, n))
            d, v, f = welch_rows(b, c)  # compare's: the larger of Welch's and Student's variance
            welch_v = b.var(-1, ddof=1) / m + c.var(-1, ddof=1) / n
            welch_cover = np.mean(np.abs(d) <= t_quantiles(0.975, f) * np.sqrt(welch_v))
            compare_cover = np.mean(np.abs(d) <= t_quantiles(0.975, f) * np.sqrt(v))
            above = np.mean(d - t_quantiles(1 - (1 - row_level) / 2, f) * np.sqrt(v) > 0)
            ends = mann_whitney_ends(b, c, 0.95)
            mw = "-" if ends is None else f"{np.mean((ends[0] <= 0) & (ends[1] >= 0)):.3f}"
            count = min(samples, 2000)
            low, high = median_bootstrap(b[:count], c[:count], 0.95, rng)
            boot = np.mean((low <= 0) & (high >= 0))
            lines.append(f"| {name} | {m}, {n} | {welch_cover:.3f} | {compare_cover:.3f} | {mw} | {boot:.3f} | {above:.5f} | "
                         f"{(1 - row_level) / 2:.5f} |")
    lines += ["", f"Pooled rows (7 scenarios, log-sd 0.05 to 0.40; level {pool_level:.4f} each):", "",
              "| pooling | runs a side | covers | above 1 when nothing changed | catches +20 % (above 1) | REGRESSED at +20 % |",
              "|---|---|---:|---:|---:|---:|"]
    spreads = np.linspace(0.05, 0.40, 21).reshape(7, 3)[:, 2]
    for n in (5, 20):
        for effect in (0.0, math.log(1.2)):
            b = rng.standard_normal((samples, 7, n)) * spreads[None, :, None]
            c = rng.standard_normal((samples, 7, n)) * spreads[None, :, None] + effect
            d, v, f = welch_rows(b, c)
            for kind in ("normal, 1 / sum(w)", "t, Satterthwaite", "t variance, Satterthwaite (chosen)", "Hartung-Knapp"):
                est, var, df = _pool(d, v, f, kind)
                q = t_quantiles(1 - (1 - pool_level) / 2, df)
                low = est - q * np.sqrt(var)
                key = (kind, n)
                if effect == 0.0:
                    _pool.cache[key] = (np.mean(np.abs(est) <= q * np.sqrt(var)), np.mean(low > 0))
                else:
                    covers, false = _pool.cache[key]
                    lines.append(f"| {kind} | {n} | {covers:.4f} | {false:.4f} | {np.mean(low > 0):.3f} | "
                                 f"{np.mean(low > math.log(1.1)):.3f} |")
    return lines


def _pool(d: np.ndarray, v: np.ndarray, f: np.ndarray, kind: str):
    """Pooled rows over the last axis, each way measured."""
    if kind.startswith("t variance"):
        found = [power.pooled(d[i], v[i], f[i]) for i in range(len(d))]
        return tuple(np.array([row[k] for row in found]) for k in range(3))
    w = 1 / v
    est = (w * d).sum(-1) / w.sum(-1)
    var = 1 / w.sum(-1)
    if kind.startswith("normal"):
        return est, var, np.full(len(d), np.inf)
    if kind == "Hartung-Knapp":
        spread = (w * (d - est[:, None]) ** 2).sum(-1) / (d.shape[-1] - 1)
        return est, var * np.maximum(spread, 1), np.full(len(d), d.shape[-1] - 1.0)
    share = w / w.sum(-1, keepdims=True)
    parts = share ** 2 * v
    return est, var, parts.sum(-1) ** 2 / (parts ** 2 / f).sum(-1)


_pool.cache = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=200, help="comparisons per cell of the gate")
    parser.add_argument("--samples", type=int, default=20_000, help="draws per cell of the methods")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--part", choices=("methods", "gate", "all"), default="all")
    options = parser.parse_args()
    all_laws = laws(options.corpus)
    print("Wall-time log-sd per scenario (rows) and mode (direct, balanced, adaptive), fitted from the corpus:")
    print(np.array2string(all_laws["spreads"].time_sd, precision=3))
    started = time.time()
    if options.part in ("methods", "all"):
        print(f"\n## The intervals, {options.samples} draws per cell (95 % intervals unless said)\n")
        print("\n".join(method_lines(all_laws, options.samples, options.seed)))
    if options.part in ("gate", "all"):
        print(f"\n## The gate through `loopmeter compare --fail-on regression`, {options.comparisons} comparisons per cell\n")
        with tempfile.TemporaryDirectory(prefix="compare-gate-") as scratch:
            drift = corpus_drift(corpus_cells(options.corpus))
            for law in all_laws.values():
                for repeats in (5, 20):
                    print(f"\n### law {law.name}, {repeats} repeats\n")
                    for what, rate in gate_cells(law, repeats, options.comparisons, options.seed, Path(scratch), drift):
                        print(f"- {what}: {rate}", flush=True)
            for repeats in (5, 20):
                print(f"\n### the MDE, {repeats} repeats\n")
                for what, rate in mde_cells(all_laws["spreads"], repeats, options.comparisons, options.seed, Path(scratch)):
                    print(f"- {what}: {rate}", flush=True)
    print(f"\n({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
