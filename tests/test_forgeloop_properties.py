"""Property tests: the columnar pipeline against the slow, obvious per-run port, on random inputs."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import forgeloop_port as port
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopmeter.forgeloop.aggregate import build_documents
from loopmeter.forgeloop.contract import CONTEXT_ITEMS, MODES, RUNAWAY_SIGNALS
from loopmeter.forgeloop.fragments import js_number_text as js_number_text_expr
from loopmeter.forgeloop.fragments import plain_number
from loopmeter.forgeloop.ingest import ingest_forgeloop
from loopmeter.forgeloop.aggregation import compute
from loopmeter.forgeloop.stats import robust_statistics, rounded, statistics
from loopmeter.jsjson import dumps, dumps_bytes, js_number_text
from loopmeter.numbers import js_round4, js_round4_expr
from loopmeter.storage import Warehouse
from runs import run, write_tree

finite = st.floats(allow_nan=False, allow_infinity=False)
# values that make ties and repeated values likely: dyadic fractions, small integers, big and tiny floats
values = st.one_of(
    st.integers(-(10**12), 10**12).map(float),
    st.integers(-(2**20), 2**20).map(lambda n: n / 2**10),
    st.integers(0, 10**7).map(lambda n: n / 10**5 + 0.00005),
    finite,
)


@pytest.mark.slow
@given(st.lists(values, max_size=200))
@settings(max_examples=200, deadline=None)
def test_polars_rounding_is_tofixed(xs):
    got = pl.DataFrame({"x": xs}, schema={"x": pl.Float64}).select(js_round4_expr(pl.col("x")))["x"].to_list()
    assert got == [js_round4(x) for x in xs]


@given(finite)
def test_number_text_round_trips_and_has_no_python_spelling(x):
    text = js_number_text(x)
    assert float(text) == x or (x == 0 and text == "0")
    assert not text.endswith(".0") and "e+0" not in text and "e-0" not in text
    if x == int(x) and abs(x) < 1e21:
        assert "." not in text and "e" not in text


def test_number_text_examples():
    cases = {56165.0: "56165", 1e21: "1e+21", 1e20: "100000000000000000000", 1e-7: "1e-7", 0.000001: "0.000001",
             -0.0: "0", 84379.2: "84379.2", 1.5e22: "1.5e+22", 5e-324: "5e-324"}
    assert {x: js_number_text(x) for x in cases} == cases


groups = st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), values.filter(lambda v: abs(v) < 1e15))), max_size=120)


@pytest.mark.slow
@given(groups)
@settings(max_examples=150, deadline=None)
def test_statistics_equal_the_obvious_implementation(rows):
    frame = pl.DataFrame(rows, schema={"g": pl.Int64, "value": pl.Float64}, orient="row")
    robust = {row["g"]: row for row in rounded(robust_statistics(frame, ["g"])).collect().iter_rows(named=True)}
    legacy = {row["g"]: row for row in rounded(statistics(frame, ["g"]), ("average", "p50", "p95")).collect().iter_rows(named=True)}
    for group in {g for g, _ in rows}:
        members = [v for g, v in rows if g == group]
        assert {k: robust[group][k] for k in port.robust(members)} == port.robust(members)
        assert {k: legacy[group][k] for k in port.statistic(members)} == port.statistic(members)


# ---- whole run sets -------------------------------------------------------------------------
@st.composite
def run_sets(draw):
    """A few scenarios with random runs: versions, usage, failures, metadata drift, diagnostics."""
    documents = []
    run_set = draw(st.sampled_from(["rs-a", "rs-b"]))
    version = draw(st.sampled_from(["1", "2", "2"]))
    for scenario in draw(st.lists(st.sampled_from(["alpha", "beta-task", "gamma"]), min_size=1, max_size=2, unique=True)):
        base = draw(st.integers(1, 200_000))
        for mode in MODES:
            for index in range(1, draw(st.integers(0, 24)) + 1):
                tokens = draw(st.one_of(st.integers(0, 3 * base), st.just(base), st.none()))
                resolved = None if mode == "direct" else draw(st.sampled_from(["light", "balanced", "full"]))
                diagnostics = None
                if draw(st.booleans()):
                    diagnostics = {
                        "modelTurns": draw(st.one_of(st.none(), st.integers(0, 8))),
                        "toolCalls": draw(st.one_of(st.none(), st.integers(0, 30))),
                        "retries": draw(st.one_of(st.none(), st.integers(0, 2))),
                        "correctionCycles": draw(st.one_of(st.none(), st.integers(0, 3))),
                        "contextRefreshes": draw(st.one_of(st.none(), st.integers(0, 3))),
                        "verificationCycles": draw(st.one_of(st.none(), st.integers(0, 3))),
                        "flags": draw(st.lists(st.sampled_from(RUNAWAY_SIGNALS), max_size=2, unique=True)),
                    }
                context = None
                if draw(st.integers(0, 3)) == 0:
                    context = {"source": "HOST_REPORTED", "profile": resolved,
                               "items": {k: draw(st.one_of(st.integers(0, 5000), st.none(), st.just(2**53 - 1))) for k in CONTEXT_ITEMS}}
                run_version = version if draw(st.integers(0, 9)) else draw(st.sampled_from(["1", "2"]))  # mixed scenarios too
                document = run(
                    scenario, mode, index, tokens, run_set=run_set, version=run_version,
                    wall=draw(st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False), st.sampled_from([0.000001, 0.0000025]))),  # JavaScript prints these without an exponent
                    verification=draw(st.sampled_from(["PASS", "PASS", "PASS", "FAIL"])),
                    resolved=resolved,
                    source=draw(st.sampled_from(["HOST_REPORTED", "PROVIDER_REPORTED", "UNKNOWN"])) if draw(st.integers(0, 5)) == 0 else "HOST_REPORTED",
                    diagnostics=diagnostics,
                    context=context,
                    steps=draw(st.sampled_from([0, 1, 4, 4.0, 7, None])),  # 4.0 is an integer to JavaScript
                    cycles=draw(st.sampled_from([0, 1, 2, None])),
                )
                if draw(st.integers(0, 9)) == 0:
                    document["metadata"]["environmentClass"] = "drifted"
                if draw(st.integers(0, 4)) == 0:
                    document["quality"] = {"source": "EXTERNAL_REPORTED", "scores": {"accessibility": draw(st.integers(0, 50)) / 10}}
                documents.append(document)
    return documents


@pytest.mark.slow
@given(run_sets(), st.sampled_from([None, "light", "balanced"]))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_aggregate_equals_the_per_run_port(documents, profile):
    if not documents:
        return
    directory = Path(tempfile.mkdtemp())
    try:
        profiles = {} if profile is None else {s: profile for s in {d["scenarioId"] for d in documents}}
        results = write_tree(directory / "results", documents, profiles)
        warehouse = Warehouse(directory / "warehouse")
        outcome = ingest_forgeloop(warehouse, results, results / "scenarios" if profiles else None)
        assert outcome.rejections == []
        result = compute(warehouse, tier="tail")
        expected = port.aggregate_run_sets(port.read_run_sets(results), profiles, "tail")
        assert {d.run_set_id for d in result.documents} == set(expected)
        for docs in result.documents:
            expected_documents, expected_summary = expected[docs.run_set_id]
            assert list(docs.scenarios) == list(expected_documents)
            for scenario, document in docs.scenarios.items():
                assert dumps(document, 2) == dumps(expected_documents[scenario], 2)
            assert dumps(docs.summary, 2) == dumps(expected_summary, 2)
        # the documents `aggregate` writes: statistic blocks and pairedRuns rendered by polars
        for docs in build_documents(result.analysis, profiles, "tail", rendered=True):
            expected_documents, expected_summary = expected[docs.run_set_id]
            for scenario, document in docs.scenarios.items():
                assert dumps_bytes(document, 2) == dumps(expected_documents[scenario], 2).encode()
            assert dumps_bytes(docs.summary, 2) == dumps(expected_summary, 2).encode()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
@given(st.lists(st.one_of(values, st.floats(), st.floats(1e-7, 2e-5), st.floats(1e15, 1e22), st.none()), max_size=100))
@settings(max_examples=300, deadline=None)
def test_polars_number_text_is_javascripts_where_it_claims_to_be(xs):
    """The documents' statistic blocks and pairedRuns are written by polars (fragments.py): wherever
    `plain_number` holds, its text is JSON.stringify's; elsewhere the block takes the slow path."""
    frame = pl.DataFrame({"x": xs}, schema={"x": pl.Float64})
    got = frame.select(js_number_text_expr(pl.col("x")).alias("text"), plain_number(pl.col("x")).alias("plain"))
    for x, text, plain in zip(xs, got["text"], got["plain"]):
        if plain:
            assert text == ("null" if x is None else js_number_text(x))
    # the common values are plain: the fast path is not a dead letter
    assert all(frame.select(plain_number(pl.lit(v, dtype=pl.Float64)))["literal"][0] for v in (0.0, -0.0, 1.0, 0.1234, 56165.0, 1e-5))


def test_percentile_positions_are_computed_like_javascript():
    # (7 - 1) * 0.95 is 5.699999999999999 in floating point, so p95 of 0..6 million is just below 5.7 million
    members = [float(v) * 1e6 for v in range(7)]
    frame = pl.DataFrame({"g": [0] * 7, "value": members})
    statistics_ = robust_statistics(frame, ["g"])
    assert statistics_["p95"][0] == port.pct(members, 0.95) == 5699999.999999999
    assert rounded(statistics_).collect()["p95"][0] == 5700000


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**60), 2**60), finite, st.floats(1e-7, 2e-5), st.text(max_size=6)),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=4), children, max_size=4)),
    max_leaves=30,
)


@pytest.mark.slow
@given(json_values)
@settings(max_examples=300, deadline=None)
def test_fast_json_text_equals_the_reference_encoder(value):
    """dumps() uses orjson where it prints what JSON.stringify prints; the slow encoder is the reference."""
    from copy import deepcopy

    from loopmeter.jsjson import _encode, dumps_bytes

    for indent in (None, 2):
        parts: list[str] = []
        _encode(value, " " * indent if indent else "", 0, parts)
        assert dumps(deepcopy(value), indent) == "".join(parts)
        assert dumps_bytes(deepcopy(value), indent) == "".join(parts).encode()  # what documents are written with
