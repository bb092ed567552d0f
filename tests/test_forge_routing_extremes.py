"""Routing with extreme numbers: a propensity so small that its weight 1/p overflows, a runtime sum
that overflows. The seed's numbers are NaN or infinite there and its `json.dumps` writes NaN /
Infinity; loopmeter writes null (JSON), `-` (text) and null (the forge_routing_* tables), and every
finite number, bootstrap bounds included, is still the seed's."""
from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from forge_fixtures import decision, event, ingested, seed_routing, write_store
from forge_oracle import routing as oracle_routing
from loopmeter.forge import routing
from loopmeter.forge import tables as t
from loopmeter.forge.reports import routing_json, routing_text
from test_forge_routing import assignments_frame

TINY = 5e-324  # the smallest subnormal double: 1 / TINY is inf


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (Python's own extension to JSON)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def nulled(value):
    """The seed's document as loopmeter writes it: NaN and infinities null (written here independently)."""
    if isinstance(value, float) and (value != value or value in (math.inf, -math.inf)):
        return None
    if isinstance(value, dict):
        return {k: nulled(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [nulled(v) for v in value]
    return value


def exploration_events(runs: int, tasks: int, failing: int, odd: dict[tuple[int, int], float]) -> list[dict]:
    """`runs` runs of `tasks` low-tier tasks, each drawn between flash (default) and sonnet: even tasks
    get sonnet (propensity 0.2), odd ones flash (0.8), except the (run, task) pairs of `odd`, which get
    their own propensity. Task k of run r fails its only attempt when (k + r) % `failing` == 0."""
    events = []
    for r in range(runs):
        run = f"run-{r}"
        plan = {}
        for k in range(tasks):
            alternative = k % 2 == 0
            p = odd.get((r, k), 0.2 if alternative else 0.8)
            plan[f"t{k}"] = {"declared_difficulty": "low", "route": [
                decision(f"{run}-d{k}", 100 + k, "low", "flash", "sonnet", "sonnet" if alternative else "flash", p)]}
        events.append(event(f"{run}-p", "plan", 100, run=run, data=dict(revision=1, tasks=plan)))
        for k in range(tasks):
            spec = "sonnet" if k % 2 == 0 else "flash"
            status = "failed" if (k + r) % failing == 0 else "passed"
            events.append(event(f"{run}-a{k}s", "attempt", 200 + k, run=run, task=f"t{k}",
                                data=dict(n=1, dwarf=spec, status="started")))
            events.append(event(f"{run}-a{k}e", "attempt", 300 + k, run=run, task=f"t{k}",
                                data=dict(n=1, dwarf=spec, status=status)))
    return events


def report(tmp_path, events):
    store = write_store(tmp_path / "dataset.sqlite", events)
    warehouse = ingested(tmp_path, store)
    result = run_cli("report", "routing", "--json", warehouse=warehouse.root, check=None)
    assert result.returncode == 0, result.stderr
    return store, warehouse, result.stdout


def arm(spec, first_pass, n_eff):
    return dict(assigned=12, first_pass=first_pass, n_eff=n_eff, no_outcome=0, not_followed=0, runtime_min=None,
                spec=spec)


# ---- the smallest subnormal propensity: JSON, text and tables ---------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("where", ["alternative", "default"])
def test_a_subnormal_propensity_is_null_in_the_json_where_the_seed_writes_nan(tmp_path, where):
    at = (0, 0) if where == "alternative" else (0, 1)  # run-0 t0 failed (sonnet), run-0 t1 passed (flash)
    store, warehouse, text = report(tmp_path, exploration_events(4, 6, 3, {at: TINY}))
    seed = seed_routing(store)
    randomized = seed["randomized"][0]
    assert math.isnan(randomized["difference"]) and all(math.isnan(x) for x in randomized["ci"])
    assert "NaN" in json.dumps(seed)  # what the seed prints

    document = strict_loads(text)  # valid JSON
    assert text == json.dumps(nulled(seed), indent=2, sort_keys=True) + "\n"
    tiny_arm = arm("sonnet" if where == "alternative" else "flash", None, None)
    other_arm = arm("flash" if where == "alternative" else "sonnet", 0.6666666666666666, 12.0)
    assert document["randomized"] == [dict(
        alternative="sonnet", alternative_is="stronger",
        arms={where: tiny_arm, ("default" if where == "alternative" else "alternative"): other_arm},
        ci=[None, None], default="flash", difference=None, runs=4, tier="low",
        verdict="not enough randomized data (12/30 alternative assignments)", window=None)]
    assert [row["ci"] for row in document["observational"]] == [[0.3906175873976139, 0.8618821601026385]] * 2
    assert '"ci": [\n        null,\n        null\n      ],\n      "default": "flash",\n      "difference": null,' in text

    shown = run_cli("report", "routing", warehouse=warehouse.root, check=None)
    assert shown.returncode == 0, shown.stderr
    assert "nan" not in shown.stdout.lower() and "difference" not in shown.stdout
    line = "    %-11s %-24s assigned  12  first-pass    -  n_eff     -  not followed 0  no outcome 0  dwarf min -" % (
        where, tiny_arm["spec"])
    assert line in shown.stdout.splitlines()

    row = warehouse.read(t.RANDOMIZED).row(0, named=True)
    for column in (f"{where}_first_pass", f"{where}_n_eff", "difference", "ci_low", "ci_high"):
        assert row[column] is None, column  # null, not NaN
    other = "default" if where == "alternative" else "alternative"
    assert (row[f"{other}_first_pass"], row[f"{other}_n_eff"]) == (0.6666666666666666, 12.0)


@pytest.mark.slow
def test_a_bootstrap_bound_the_seed_finds_among_nans_is_kept(tmp_path):
    """Most resamples draw run-0 (difference NaN); the seed sorts its differences with NaN among them, and
    its interval is whatever that sort leaves at the two places: here 0.125 and NaN. Kept: 0.125, null."""
    store, warehouse, text = report(tmp_path, exploration_events(4, 8, 3, {(0, 0): TINY}))
    seed = seed_routing(store)["randomized"][0]
    assert seed["ci"][0] == 0.125 and math.isnan(seed["ci"][1])
    document = strict_loads(text)
    pair = document["randomized"][0]
    assert (pair["ci"], pair["difference"], pair["arms"]["alternative"]["first_pass"]) == ([0.125, None], None, None)
    assert pair["verdict"] == seed["verdict"] == "not enough randomized data (16/30 alternative assignments)"
    assert text == json.dumps(nulled(seed_routing(store)), indent=2, sort_keys=True) + "\n"
    shown = run_cli("report", "routing", warehouse=warehouse.root, check=None)
    assert "    difference -  95% [+0.12, -]" in shown.stdout.splitlines()
    row = warehouse.read(t.RANDOMIZED).row(0, named=True)
    assert (row["ci_low"], row["ci_high"], row["difference"]) == (0.125, None, None)


def test_a_weight_whose_square_overflows_leaves_only_kish_n_unknown(tmp_path):
    """1 / 1e-200 is finite, its square is not: the Hajek means, the difference and the interval are
    finite (the seed's), Kish's n_eff (inf / inf) is null."""
    store, warehouse, text = report(tmp_path, exploration_events(4, 6, 3, {(1, 0): 1e-200}))
    seed = seed_routing(store)
    pair = seed["randomized"][0]
    assert math.isnan(pair["arms"]["alternative"]["n_eff"])
    assert all(math.isfinite(x) for x in [pair["difference"], *pair["ci"], pair["arms"]["alternative"]["first_pass"]])
    document = strict_loads(text)
    assert document["randomized"][0]["arms"]["alternative"]["n_eff"] is None
    assert document["randomized"][0]["ci"] == pair["ci"] and document["randomized"][0]["difference"] == pair["difference"]
    assert text == json.dumps(nulled(seed), indent=2, sort_keys=True) + "\n"
    assert warehouse.read(t.RANDOMIZED).row(0, named=True)["alternative_n_eff"] is None


def test_a_runtime_that_overflows_is_null_not_infinity(tmp_path):
    plan = dict(revision=1, tasks={"t1": {"declared_difficulty": "low", "route": []},
                                   "t2": {"declared_difficulty": "low", "route": []}})
    events = [event("p", "plan", 100, data=plan)]
    for task, second in (("t1", 1e308), ("t2", 5.0)):  # t1: 1e308 + 1e308 = inf seconds
        dwarf = lambda rid, s: event(rid, "dispatch", 201, task=task, data=dict(  # noqa: E731
            role="dwarf", attempt=1, spec="flash", model="m", effort="low", duration_s=s))
        events += [event(f"{task}a", "attempt", 200, task=task, data=dict(n=1, dwarf="flash", status="started")),
                   dwarf(f"{task}x1", 1e308), dwarf(f"{task}x2", second),
                   event(f"{task}b", "attempt", 300, task=task, data=dict(n=1, dwarf="flash", status="passed"))]
    store, warehouse, text = report(tmp_path, events)
    seed = seed_routing(store)
    assert seed["observational"][0]["runtime_min"] == math.inf and "Infinity" in json.dumps(seed)
    assert strict_loads(text) == {"observational": [dict(
        attempts=1, ci=[0.34237195288961925, 1.0], first_pass=1.0, passed=1.0, runtime_min=None, spec="m:low",
        tasks=2, tier="low", unfinished=0)], "randomized": []}
    assert text == json.dumps(nulled(seed), indent=2, sort_keys=True) + "\n"
    shown = run_cli("report", "routing", warehouse=warehouse.root, check=None).stdout
    assert "  low     m:low                          2   100% [34%-100%]   100%          0      1.0        -" in shown
    assert warehouse.read(t.OBSERVATIONAL).row(0, named=True)["runtime_min"] is None


# ---- the outputs on documents made by hand -------------------------------------------------------

def test_json_and_text_of_non_finite_numbers_anywhere():
    arms = {"default": dict(spec="flash", assigned=3, first_pass=math.nan, n_eff=math.inf, not_followed=0,
                            no_outcome=0, runtime_min=-math.inf),
            "alternative": dict(spec="sonnet", assigned=3, first_pass=0.5, n_eff=2.0, not_followed=0, no_outcome=0,
                                runtime_min=1.5)}
    document = {"observational": [], "randomized": [dict(
        tier="low", default="flash", alternative="sonnet", alternative_is="stronger", window=None, runs=3, arms=arms,
        difference=0.25, ci=(math.nan, 0.5), verdict="v")]}
    assert strict_loads(routing_json(document))["randomized"][0]["ci"] == [None, 0.5]
    assert strict_loads(routing_json(document))["randomized"][0]["arms"]["default"] == dict(
        spec="flash", assigned=3, first_pass=None, n_eff=None, not_followed=0, no_outcome=0, runtime_min=None)
    assert routing_json({"x": [math.inf, -math.inf, math.nan, 1e308, 5e-324]}) == (
        '{\n  "x": [\n    null,\n    null,\n    null,\n    1e+308,\n    5e-324\n  ]\n}')
    lines = routing_text(document).splitlines()
    assert "    default     flash                    assigned   3  first-pass    -  n_eff     -  not followed 0  " \
           "no outcome 0  dwarf min -" in lines
    assert "    alternative sonnet                   assigned   3  first-pass  50%  n_eff   2.0  not followed 0  " \
           "no outcome 0  dwarf min 1.5" in lines
    assert "    difference +0.25  95% [-, +0.50]" in lines
    assert math.isnan(document["randomized"][0]["ci"][0])  # the document itself is left as it was


# ---- the randomized table against the seed, with extreme propensities ----------------------------

EXTREME = [TINY, 1e-320, 1e-310, 5e-309, 1e-308, 1e-300, 1e-200, 7e-155, 1e-150]


def seed_text(value) -> str:
    """Python's json of the seed's numbers, NaN and all: equal texts are equal numbers, bit for bit."""
    return json.dumps(value, sort_keys=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.sampled_from([True, False, None]),
                          st.one_of(st.sampled_from([0.2, 0.5, 0.8]), st.sampled_from(EXTREME)),
                          st.integers(0, 40)), min_size=1, max_size=80),
       st.sampled_from(["low", "medium"]))
def test_randomized_equals_the_seed_with_extreme_propensities(raw, tier):
    records = [dict(run=f"run-{run}", first_pass=y, runtime_s=None, ran=None,
                    decision=dict(tier=tier, at=at, default="flash", candidates=["flash", "sonnet"],
                                  chosen="sonnet" if alternative else "flash", propensity=p))
               for run, alternative, y, p, at in raw]
    expected = oracle_routing.randomized([dict(r) for r in records])
    mine = routing.randomized(assignments_frame(records))
    assert seed_text(mine) == seed_text(expected)
    assert strict_loads(routing_json({"randomized": mine})) == nulled({"randomized": expected})


@pytest.mark.slow
def test_randomized_reaches_intervals_with_nans_like_the_seed():
    """Many pairs that reach the bootstrap with an overflowing weight in some run: NaN differences are
    sorted among the finite ones as Python sorts them, so each interval is the seed's."""
    rng = random.Random(3)
    checked = mixed = 0
    for _ in range(60):
        runs, records = rng.randint(3, 7), []
        for i in range(rng.randint(30, 90)):
            alternative = rng.random() < 0.5
            p = rng.choice(EXTREME) if rng.random() < 0.04 else (0.3 if alternative else 0.7)
            records.append(dict(run=f"run-{rng.randrange(runs)}", first_pass=rng.choice([True, False, None]),
                                runtime_s=rng.uniform(10, 900), ran="flash",
                                decision=dict(tier="low", at=i, default="flash", candidates=["flash", "sonnet"],
                                              chosen="sonnet" if alternative else "flash", propensity=p)))
        expected = oracle_routing.randomized(records)
        assert seed_text(routing.randomized(assignments_frame(records))) == seed_text(expected)
        for row in expected:
            if row.get("ci"):
                checked += 1
                mixed += any(math.isnan(x) for x in row["ci"]) and any(math.isfinite(x) for x in row["ci"])
    assert checked > 30 and mixed > 3, (checked, mixed)  # the interesting cases happen


def test_polars_and_item_hajek_agree_on_overflowing_weights():
    item = lambda arm, w, y: routing.Item("r", arm, w, y, None, None, 0.0)  # noqa: E731
    for group in ([item("alternative", math.inf, False), item("alternative", 5.0, True)],
                  [item("alternative", math.inf, True)],
                  [item("default", 1e200, True), item("default", 2.0, False)]):
        frame = routing._hajek_frame(routing._items_frame(group))
        assert seed_text(frame) == seed_text(routing._hajek(group))
