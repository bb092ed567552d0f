"""Ingest: every file accounted for, bad runs rejected with file, field and rule, re-ingest idempotent."""
from __future__ import annotations

import hashlib
import json
import os
import sys

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest

from conftest import run_as_a_user, run_cli
from loopmeter.forgeloop.ingest import ingest_forgeloop
from loopmeter.forgeloop.reader import ToRead, read_batch
from loopmeter.storage import Warehouse
from runs import DELETE, context, edited, run, write_tree

GOOD = run()


def manifest(warehouse) -> dict[str, tuple]:
    frame = Warehouse(warehouse).read("ingest_manifest").filter(pl.col("kind") == "run")
    return {row["path"]: (row["status"], row["field"], row["reason"]) for row in frame.iter_rows(named=True)}


def stored_runs(warehouse) -> pl.DataFrame:
    return Warehouse(warehouse).read("runs").sort("source_path")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "value", "field", "rule"),
    [
        ("schemaVersion", 2, "schemaVersion", "must be 1"),
        ("benchmarkVersion", 2, "benchmarkVersion", 'must be "1" or "2"'),
        ("runId", "run-", "runId", "must match ^run-[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"),
        ("runId", "x-1", "runId", "must match ^run-[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"),
        ("scenarioId", "Small", "scenarioId", "must match ^[a-z0-9][a-z0-9-]{0,127}$"),
        ("mode", "turbo", "mode", "must be one of direct, forgeloopBalanced, forgeloopAdaptive"),
        ("runIndex", 0, "runIndex", "must be an integer >= 1"),
        ("runIndex", 1.5, "runIndex", "must be an integer >= 1"),
        ("runIndex", True, "runIndex", "must be an integer >= 1"),
        ("recordedAt", "yesterday", "recordedAt", "must be a parseable timestamp (ISO 8601)"),
        ("usage", [1], "usage", "must be an object"),
        ("usage.totalTokens", -5, "usage.totalTokens", "must be an integer >= 0 or null"),
        ("usage.totalTokens", "1000", "usage.totalTokens", "must be an integer >= 0 or null"),
        ("usage.costUsd", -0.5, "usage.costUsd", "must be a finite number >= 0 or null"),
        ("usage.source", "GUESSED", "usage.source", "must be one of PROVIDER_REPORTED, HOST_REPORTED, UNKNOWN"),
        ("wallClockMs", -1, "wallClockMs", "must be a finite number >= 0 or null"),
        ("verification", "OK", "verification", "must be one of PASS, FAIL, NOT_AVAILABLE"),
        ("comparableSteps", -1, "comparableSteps", "must be an integer >= 0 or null"),
        ("metadata", None, "metadata", "must be an object"),
        ("metadata.mode", "forgeloopBalanced", "metadata.mode", "must equal the run's mode (direct)"),
        ("metadata.scenarioId", "api-feature", "metadata.scenarioId", "must equal the run's scenarioId (small-bug-fix)"),
        ("metadata.benchmarkVersion", "1", "metadata.benchmarkVersion", "must equal the run's benchmarkVersion (2)"),
        ("metadata.environmentClass", "", "metadata.environmentClass", "must be a non-empty string"),
        ("metadata.promptSpecFingerprint", None, "metadata.promptSpecFingerprint", "must be a non-empty string"),
        ("metadata.model", DELETE, "metadata.model", "is required (a non-empty string or null)"),
        ("metadata.model", "other", "metadata.model", "must equal usage.model (m1)"),
        ("metadata.requestedProfile", "auto", "metadata.requestedProfile", "must be null for direct runs"),
        ("metadata.resolvedProfile", "light", "metadata.resolvedProfile", "must be null for direct runs"),
        ("metadata.comparableSteps", 3, "metadata.comparableSteps", "must equal the run's comparableSteps (4)"),
        ("metadata.os", 7, "metadata.os", "must be a non-empty string"),
        ("diagnostics", {"modelTurns": -1}, "diagnostics.modelTurns", "must be an integer >= 0 or null"),
        ("diagnostics", {"mood": "good"}, "diagnostics.mood", "is not a diagnostics field"),
        ("diagnostics", {"flags": ["TOO_FAST"]}, "diagnostics.flags", "'TOO_FAST' is not a runaway signal"),
        ("diagnostics", {"guideIds": "clean"}, "diagnostics.guideIds", "must be an array"),
        ("contextUsage", context(profile="light"), "contextUsage.profile", "must equal metadata.resolvedProfile (null)"),
        ("contextUsage", {"source": "UNKNOWN", "items": {"guides": 5}}, "contextUsage.items", "UNKNOWN context usage must keep every item null"),
        ("contextUsage", {"items": {"memes": 5}}, "contextUsage.items.memes", "is not a context item"),
        ("quality", {"source": "EXTERNAL_REPORTED", "scores": {"accessibility": 6}}, "quality.scores.accessibility", "must be a number from 0 to 5 or null"),
        ("quality", {"source": "UNKNOWN", "scores": {"accessibility": 4}}, "quality.scores", "UNKNOWN quality must keep every score null"),
    ],
)
def test_a_rule_broken_is_reported_with_its_field(tmp_path, path, value, field, rule):
    bad = edited(run(index=2), path, value)
    results = write_tree(tmp_path / "results", [GOOD])
    target = results / "raw" / "rs-test" / "bad.json"
    target.write_text(json.dumps(bad))
    outcome = ingest_forgeloop(Warehouse(tmp_path / "w"), results)
    assert outcome.rejections == [("raw/rs-test/bad.json", field, rule)]
    assert outcome.accepted == 1
    assert stored_runs(tmp_path / "w")["source_path"].to_list() == ["raw/rs-test/small-bug-fix/direct/run-001.json"]


def test_unknown_usage_carrying_numbers_is_rejected(tmp_path):
    bad = edited(run(index=2), "usage.source", "UNKNOWN")
    results = write_tree(tmp_path / "results", [bad])
    outcome = ingest_forgeloop(Warehouse(tmp_path / "w"), results)
    assert outcome.rejections == [
        ("raw/rs-test/small-bug-fix/direct/run-002.json", "usage", "UNKNOWN usage must keep every measured value and identity field null")
    ]


HOSTILE = {
    "empty.json": (b"", "file", "is empty"),
    "truncated.json": (b'{"schemaVersion": 1, "benchm', "file", "is not valid JSON"),
    "latin1.json": ('{"a": "caf\u00e9"}'.encode("latin-1"), "file",
                    "is not valid UTF-8 (byte 0xe9 at offset 10: invalid continuation byte)"),
    "utf16.json": ('{"a": 1}'.encode("utf-16"), "file", "is not valid UTF-8 (byte 0xff at offset 0: invalid start byte)"),
    "nan.json": (b'{"schemaVersion": NaN}', "file", "is not valid JSON"),
    "infinity.json": (b'{"wallClockMs": Infinity}', "file", "is not valid JSON"),
    "array.json": (b"[1, 2, 3]", "run", "must be an object"),
    "scalar.json": (b"42", "run", "must be an object"),
    "deep.json": (b"[" * 1030 + b"]" * 1030, "file", "nests too deeply"),
}


def test_hostile_files_are_rejected_and_the_good_ones_stored(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD, run(mode="forgeloopBalanced", tokens=1200)])
    folder = results / "raw" / "rs-test" / "junk"
    folder.mkdir()
    for name, (content, _, _) in HOSTILE.items():
        (folder / name).write_bytes(content)
    (folder / "big.json").write_bytes(b'{"pad": "' + b"x" * 3000 + b'"}')
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(GOOD))
    os.symlink(outside, folder / "escape.json")
    (results / "raw" / "bad run set!").mkdir()
    (results / "raw" / "bad run set!" / "r.json").write_text(json.dumps(GOOD))
    (results / "raw" / "loose.json").write_text(json.dumps(GOOD))

    result = run_cli("ingest", "forgeloop", str(results), "--max-file-mb", "0.002", warehouse=tmp_path / "w", check=3)
    assert "15 run files: 2 accepted, 0 unchanged, 13 rejected" in result.stdout
    assert "13 of 15 files rejected; the rest is stored" in result.stderr
    assert "Traceback" not in result.stderr
    seen = manifest(tmp_path / "w")
    for name, (_, field, rule) in HOSTILE.items():
        status, got_field, reason = seen[f"raw/rs-test/junk/{name}"]
        assert (status, got_field) == ("rejected", field) and reason.startswith(rule), name
        assert f"rejected raw/rs-test/junk/{name}: {field}: {rule}" in result.stderr
    assert seen["raw/rs-test/junk/big.json"][2] == "is larger than the 2097-byte limit (3011 bytes)"
    assert seen["raw/rs-test/junk/escape.json"] == ("rejected", "file", "symlink leads outside the results tree")
    assert seen["raw/bad run set!/r.json"] == ("rejected", "runSetId", "run set folder name must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    assert seen["raw/loose.json"] == ("rejected", "file", "lies directly in raw/, not in a run set folder")
    assert [s for s, _, _ in seen.values()].count("accepted") == 2
    assert stored_runs(tmp_path / "w")["mode"].to_list() == ["direct", "forgeloopBalanced"]


@pytest.mark.slow
def test_names_that_are_not_utf8_and_files_that_are_not_regular_are_rejected_not_fatal(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD, run(mode="forgeloopBalanced", tokens=1200)], {"small-bug-fix": "balanced"})
    raw = os.fsencode(results / "raw")
    with open(os.path.join(raw, b"rs-test", b"run-\xff.json"), "w") as handle:  # a name Python keeps as surrogates
        handle.write(json.dumps(run(mode="forgeloopAdaptive")))
    os.makedirs(os.path.join(raw, b"rs-\xfe", b"direct"))
    with open(os.path.join(raw, b"rs-\xfe", b"direct", b"run.json"), "w") as handle:
        handle.write(json.dumps(GOOD))
    os.mkfifo(results / "raw" / "rs-test" / "pipe.json")  # reading it would block for ever
    scenarios = os.fsencode(results / "scenarios")
    with open(os.path.join(scenarios, b"x\xff.json"), "w") as handle:
        handle.write("{}")
    os.mkfifo(results / "scenarios" / "pipe.json")

    for attempt in range(2):  # the second: the unchanged tree, answered from the record
        result = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"),
                         warehouse=tmp_path / "w", check=3, timeout=60)
        assert "Traceback" not in result.stderr
        assert (f"5 run files: {2 - 2 * attempt} accepted, {2 * attempt} unchanged, 3 rejected; run sets rs-test; "
                f"3 scenario files: 1 {('accepted', 'unchanged')[attempt]}, 2 rejected") in result.stdout
        for line in ("rejected raw/rs-\\xfe: file: name is not valid UTF-8: its files are not read",
                     "rejected raw/rs-test/run-\\xff.json: file: name is not valid UTF-8",
                     "rejected raw/rs-test/pipe.json: file: is not a regular file",
                     f"rejected {results / 'scenarios'}/x\\xff.json: file: name is not valid UTF-8",
                     f"rejected {results / 'scenarios'}/pipe.json: file: is not a regular file"):
            assert line in result.stderr.splitlines(), line
    seen = manifest(tmp_path / "w")
    assert seen["raw/rs-test/run-\\xff.json"] == ("rejected", "file", "name is not valid UTF-8")
    assert seen["raw/rs-test/pipe.json"] == ("rejected", "file", "is not a regular file")
    assert stored_runs(tmp_path / "w")["mode"].to_list() == ["direct", "forgeloopBalanced"]


def test_a_file_rejected_for_the_size_limit_is_judged_again_under_another_limit(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD, run(mode="forgeloopBalanced", tokens=1200)])
    small = run_cli("ingest", "forgeloop", str(results), "--max-file-mb", "0.0001", warehouse=tmp_path / "w", check=3)
    assert "2 run files: 0 accepted, 0 unchanged, 2 rejected" in small.stdout
    assert {status for status, _, _ in manifest(tmp_path / "w").values()} == {"rejected"}
    again = run_cli("ingest", "forgeloop", str(results), warehouse=tmp_path / "w")  # the default limit, 16 MB
    assert "2 run files: 2 accepted, 0 unchanged, 0 rejected" in again.stdout
    assert stored_runs(tmp_path / "w")["mode"].to_list() == ["direct", "forgeloopBalanced"]


def test_json_output_lists_every_rejection(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD])
    (results / "raw" / "rs-test" / "x.json").write_text("[]")
    report = json.loads(run_cli("ingest", "forgeloop", str(results), "--json", warehouse=tmp_path / "w", check=3).stdout)
    assert (report["seen"], report["accepted"], report["rejected"]) == (2, 1, 1)
    assert report["rejections"] == [{"path": "raw/rs-test/x.json", "field": "run", "reason": "must be an object"}]


def test_duplicates_keep_the_first_in_path_order(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD])
    (results / "raw" / "rs-test" / "zz-copy.json").write_text(json.dumps(edited(GOOD, "usage.totalTokens", 5)))
    (results / "raw" / "rs-test" / "aa-copy.json").write_text(json.dumps(edited(GOOD, "usage.totalTokens", 7)))
    outcome = ingest_forgeloop(Warehouse(tmp_path / "w"), results)
    assert [(p, f) for p, f, _ in outcome.rejections] == [
        ("raw/rs-test/small-bug-fix/direct/run-001.json", "duplicate"),
        ("raw/rs-test/zz-copy.json", "duplicate"),
    ]
    assert outcome.rejections[0][2] == (
        "repeats the run set, scenario, mode and runIndex of raw/rs-test/aa-copy.json (the first in path order is kept)"
    )
    assert stored_runs(tmp_path / "w")["total_tokens"].to_list() == [7]


def test_a_file_that_changed_size_after_it_was_listed_is_read_whole_or_rejected(tmp_path):
    """The reader asks for the listed size plus one byte; a file that grew or shrank since the
    walk is read to its end (or past the limit), never cut at the listed size."""
    document = json.dumps(GOOD).encode()
    padded, oversized = document + b" " * 50, document + b" " * 500  # the same run, longer
    results = tmp_path / "results"
    (results / "raw" / "rs-test").mkdir(parents=True)
    for name, content in (("grew.json", padded), ("shrank.json", document), ("over.json", oversized)):
        (results / "raw" / "rs-test" / name).write_bytes(content)
    listed = ToRead(
        ["raw/rs-test/grew.json", "raw/rs-test/shrank.json", "raw/rs-test/over.json"],
        ["rs-test"] * 3,
        [len(document), len(padded), len(document)],  # what the walk saw
        [None] * 3,
    )
    (statuses, fields, reasons, digests), table = read_batch(str(results), listed, len(document) + 100)
    assert statuses == ["accepted", "accepted", "rejected"]
    assert digests[:2] == [hashlib.sha256(padded).hexdigest(), hashlib.sha256(document).hexdigest()]
    assert (fields[2], reasons[2]) == ("file", f"is larger than the {len(document) + 100}-byte limit")
    assert table.column("source_path").to_pylist() == ["raw/rs-test/grew.json", "raw/rs-test/shrank.json"]


def test_a_run_naming_another_run_set_than_its_folder(tmp_path):
    results = write_tree(tmp_path / "results", [edited(GOOD, "runSetId", "other-set")])
    (results / "raw" / "other-set").rename(results / "raw" / "rs-test")
    outcome = ingest_forgeloop(Warehouse(tmp_path / "w"), results)
    assert outcome.rejections == [("raw/rs-test/small-bug-fix/direct/run-001.json", "runSetId", "must equal its run set folder (rs-test)")]


@pytest.mark.slow
def test_reingest_adds_nothing_and_a_changed_file_replaces_its_run(tmp_path):
    warehouse = tmp_path / "w"
    results = write_tree(tmp_path / "results", [GOOD, run(index=2, tokens=2000), run(run_set="rs-two", tokens=3000)])
    first = run_cli("ingest", "forgeloop", str(results), warehouse=warehouse)
    assert "3 accepted, 0 unchanged" in first.stdout
    before = stored_runs(warehouse)
    second = run_cli("ingest", "forgeloop", str(results), warehouse=warehouse)
    assert "0 accepted, 3 unchanged, 0 rejected" in second.stdout
    assert stored_runs(warehouse).equals(before)
    # a changed file replaces its run; touching a file without changing it keeps it unchanged
    changed = results / "raw" / "rs-test" / "small-bug-fix" / "direct" / "run-002.json"
    changed.write_text(json.dumps(run(index=2, tokens=2500)))
    touched = results / "raw" / "rs-two" / "small-bug-fix" / "direct" / "run-001.json"
    os.utime(touched, ns=(1, 1))
    third = run_cli("ingest", "forgeloop", str(results), warehouse=warehouse)
    assert "1 accepted, 2 unchanged" in third.stdout
    assert stored_runs(warehouse)["total_tokens"].to_list() == [1000, 2500, 3000]
    assert manifest(warehouse)["raw/rs-test/small-bug-fix/direct/run-002.json"][0] == "accepted"
    # a removed file drops its run; run sets not in the results directory are left alone
    changed.unlink()
    fourth = run_cli("ingest", "forgeloop", str(results), warehouse=warehouse)
    assert "0 accepted, 2 unchanged" in fourth.stdout
    assert stored_runs(warehouse)["total_tokens"].to_list() == [1000, 3000]
    other = write_tree(tmp_path / "elsewhere", [run(run_set="rs-three", tokens=4000)])
    run_cli("ingest", "forgeloop", str(other), warehouse=warehouse)
    assert sorted(stored_runs(warehouse)["run_set_id"].unique().to_list()) == ["rs-test", "rs-three", "rs-two"]


def test_runs_table_is_partitioned_typed_and_readable_everywhere(tmp_path, corpus_warehouse):
    runs_dir = corpus_warehouse / "runs"
    partitions = sorted(p.name for p in runs_dir.iterdir())
    assert partitions == ["run_set_id=codex-quality-repeat5-20260831", "run_set_id=codex-tail-repeat20-20260831"]
    part = next((runs_dir / partitions[1]).glob("*.parquet"))
    table = pq.read_table(part)
    assert table.num_rows == 420
    assert str(table.schema.field("recorded_at").type) == "timestamp[us, tz=UTC]"
    flags = table.schema.field("diag_flags").type
    assert flags.num_fields == 1 and str(flags) == "list<element: string>"
    assert "run_set_id" not in table.schema.names  # in the folder name only
    assert pq.read_metadata(part).metadata[b"loopmeter.schema_version"] == b"2"  # the footer's key-value metadata
    assert pl.read_parquet(part).height == 420
    connection = duckdb.connect()
    count, = connection.sql(
        f"SELECT count(*) FROM read_parquet('{runs_dir}/**/*.parquet', hive_partitioning = true) "
        "WHERE run_set_id = 'codex-tail-repeat20-20260831' AND mode = 'direct'"
    ).fetchall()[0]
    assert count == 140
    plan = connection.sql(
        f"EXPLAIN SELECT count(*) FROM read_parquet('{runs_dir}/**/*.parquet', hive_partitioning = true) "
        "WHERE run_set_id = 'codex-tail-repeat20-20260831'"
    ).fetchall()[0][1]
    assert "Scanning Files: 1/2" in plan


def test_missing_results_directory_is_a_fatal_one_line_error(tmp_path):
    result = run_cli("ingest", "forgeloop", str(tmp_path / "nowhere"), warehouse=tmp_path / "w", check=1)
    assert result.stderr.strip() == f"loopmeter: error: {tmp_path / 'nowhere' / 'raw'} is not a directory: expected RESULTS/raw/<runSetId>/**/*.json"
    assert not (tmp_path / "w").exists()


def test_the_raw_folder_given_for_results_is_told_its_parent(tmp_path, corpus):
    raw = corpus / "results" / "raw"
    result = run_cli("ingest", "forgeloop", str(raw), warehouse=tmp_path / "w", check=1)
    assert result.stderr.strip() == (f"loopmeter: error: {raw / 'raw'} is not a directory: expected "
                                     f"RESULTS/raw/<runSetId>/**/*.json; {raw} looks like the raw/ folder itself: give "
                                     f"its parent ({corpus / 'results'})")
    assert not (tmp_path / "w").exists()


def test_scenario_files_are_validated(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD], {"small-bug-fix": "balanced"})
    (results / "scenarios" / "bad-one.json").write_text(json.dumps({"schemaVersion": 1, "benchmarkVersion": "2", "scenarioId": "bad-one", "expectedProfile": "huge"}))
    (results / "scenarios" / "renamed.json").write_text(json.dumps({"schemaVersion": 1, "benchmarkVersion": "2", "scenarioId": "other", "expectedProfile": "light"}))
    outcome = ingest_forgeloop(Warehouse(tmp_path / "w"), results, results / "scenarios")
    assert sorted((p.rsplit("/", 1)[1], f, r) for p, f, r in outcome.rejections) == [
        ("bad-one.json", "expectedProfile", "must be one of light, balanced, full"),
        ("renamed.json", "scenarioId", "must match the file name (renamed.json)"),
    ]
    assert Warehouse(tmp_path / "w").read("scenarios")["scenario_id"].to_list() == ["small-bug-fix"]


def test_the_scenarios_table_mirrors_the_scenario_files_given(tmp_path):
    """A scenario file now rejected, or gone, no longer gives its profile: the warehouse then holds
    what a fresh one given the same files would (scenarios of other directories are kept)."""
    results = write_tree(tmp_path / "results", [GOOD], {"small-bug-fix": "light", "api-feature": "balanced"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "docs-fix.json").write_text(json.dumps(
        {"schemaVersion": 1, "benchmarkVersion": "2", "scenarioId": "docs-fix", "expectedProfile": "full"}))
    warehouse = Warehouse(tmp_path / "w")
    ingest_forgeloop(warehouse, results, elsewhere)
    ingest_forgeloop(warehouse, results, results / "scenarios")

    def profiles() -> dict:
        return dict(warehouse.read("scenarios").select("scenario_id", "expected_profile").iter_rows())

    assert profiles() == {"api-feature": "balanced", "docs-fix": "full", "small-bug-fix": "light"}
    (results / "scenarios" / "small-bug-fix.json").write_text('{"broken')
    outcome = ingest_forgeloop(warehouse, results, results / "scenarios")
    assert [(field, rule.split(" (")[0]) for _, field, rule in outcome.rejections] == [("file", "not valid JSON")]
    assert profiles() == {"api-feature": "balanced", "docs-fix": "full"}
    (results / "scenarios" / "small-bug-fix.json").unlink()
    (results / "scenarios" / "api-feature.json").unlink()
    assert ingest_forgeloop(warehouse, results, results / "scenarios").scenarios == 0
    assert profiles() == {"docs-fix": "full"}


def test_ingest_can_be_limited_to_some_run_sets(tmp_path):
    results = write_tree(tmp_path / "results", [run(run_set="rs-one"), run(run_set="rs-two", tokens=2000)])
    (results / "raw" / "rs-two" / "broken.json").write_text("{")
    outcome = run_cli("ingest", "forgeloop", str(results), "--run-set", "rs-one", warehouse=tmp_path / "w")
    assert "1 run file: 1 accepted" in outcome.stdout
    assert stored_runs(tmp_path / "w")["run_set_id"].to_list() == ["rs-one"]
    missing = run_cli("ingest", "forgeloop", str(results), "--run-set", "rs-nine", warehouse=tmp_path / "w", check=1)
    assert f"no run set folder rs-nine in {results / 'raw'}" in missing.stderr


def _versions(warehouse) -> dict[str, str]:
    return {name: os.readlink(warehouse / name) for name in ("runs", "ingest_manifest", "scenarios")}


@pytest.mark.slow
def test_unchanged_tree_is_answered_from_the_last_ingest_and_nothing_is_written(tmp_path):
    warehouse = tmp_path / "w"
    results = write_tree(tmp_path / "results", [GOOD, run(index=2, tokens=2000), edited(run(index=3), "usage.totalTokens", -1)],
                         scenarios={"small-bug-fix": "light"})
    scenarios = results / "scenarios"
    command = ["ingest", "forgeloop", str(results), "--scenarios", str(scenarios)]
    first = run_cli(*command, warehouse=warehouse, check=3)
    assert "3 run files: 2 accepted, 0 unchanged, 1 rejected" in first.stdout, first.stdout + first.stderr
    versions = _versions(warehouse)
    again = run_cli(*command, warehouse=warehouse, check=3)
    # the same verdicts (the rejection too, exit 3), no table written
    assert "3 run files: 0 accepted, 2 unchanged, 1 rejected; run sets rs-test; 1 scenario file: 1 unchanged, 0 rejected" in again.stdout
    assert "rejected raw/rs-test/small-bug-fix/direct/run-003.json: usage.totalTokens: must be" in again.stderr
    assert _versions(warehouse) == versions
    # a touched scenario file, a touched run file, a table written by someone else: a real ingest
    os.utime(scenarios / "small-bug-fix.json", ns=(5, 5))  # same bytes: read again, nothing new
    touched = run_cli(*command, warehouse=warehouse, check=3)
    assert "3 run files: 0 accepted, 2 unchanged, 1 rejected" in touched.stdout and _versions(warehouse) != versions
    versions = _versions(warehouse)
    os.utime(results / "raw" / "rs-test" / "small-bug-fix" / "direct" / "run-002.json", ns=(5, 5))
    run_cli(*command, warehouse=warehouse, check=3)
    assert _versions(warehouse)["ingest_manifest"] != versions["ingest_manifest"]  # its mtime recorded anew
    versions = _versions(warehouse)
    run_cli(*command, warehouse=warehouse, check=3)
    assert _versions(warehouse) == versions
    other = write_tree(tmp_path / "elsewhere", [run(run_set="rs-two", tokens=4000)])
    ingest_forgeloop(Warehouse(warehouse), other)
    versions = _versions(warehouse)
    after_other = run_cli(*command, warehouse=warehouse, check=3)
    assert "3 run files: 0 accepted, 2 unchanged, 1 rejected" in after_other.stdout
    assert _versions(warehouse)["ingest_manifest"] != versions["ingest_manifest"]  # the tables changed: read again
    # other options are another question, answered by a real ingest
    versions = _versions(warehouse)
    limited = run_cli(*command, "--max-file-mb", "8", warehouse=warehouse, check=3)
    assert "0 accepted, 2 unchanged, 1 rejected" in limited.stdout and _versions(warehouse) != versions


@pytest.mark.slow
def test_only_changed_run_set_folders_are_ingested_again_and_the_answer_covers_the_tree(tmp_path):
    from loopmeter.forgeloop.ingest import TreeState

    results = write_tree(tmp_path / "results", [GOOD, run(index=2, tokens=2000), run(run_set="rs-two", tokens=3000),
                                                edited(run(run_set="rs-three"), "usage.totalTokens", -1)])
    warehouse = Warehouse(tmp_path / "w")
    ingest_forgeloop(warehouse, results)
    (results / "raw" / "rs-two" / "small-bug-fix" / "direct" / "run-001.json").write_text(json.dumps(run(run_set="rs-two", tokens=3500)))
    write_tree(results, [run(run_set="rs-four", tokens=4000)])
    (results / "raw" / "stray.json").write_text("{}")
    tree = TreeState(warehouse, results, None, 16 << 20, None)
    assert tree.scope() == ["", "rs-four", "rs-two"]  # rs-test and rs-three are as the last ingest saw them
    partial = ingest_forgeloop(warehouse, results)
    fresh = ingest_forgeloop(Warehouse(tmp_path / "fresh"), results)
    assert (partial.accepted, partial.unchanged) == (2, 2) and (fresh.accepted, fresh.unchanged) == (4, 0)
    assert partial.run_sets == fresh.run_sets == ["rs-four", "rs-test", "rs-three", "rs-two"]
    assert partial.rejections == fresh.rejections == [
        ("raw/rs-three/small-bug-fix/direct/run-001.json", "usage.totalTokens", "must be an integer >= 0 or null"),
        ("raw/stray.json", "file", "lies directly in raw/, not in a run set folder"),
    ]
    assert stored_runs(tmp_path / "w").drop("content_hash").equals(stored_runs(tmp_path / "fresh").drop("content_hash"))
    assert sorted(manifest(tmp_path / "w")) == sorted(manifest(tmp_path / "fresh"))  # every file has its row
    again = ingest_forgeloop(warehouse, results)
    assert (again.accepted, again.unchanged, again.rejections, again.wrote) == (0, 4, partial.rejections, False)
    # a run set folder removed: its manifest rows go, its runs stay (run sets not given are left alone)
    import shutil

    shutil.rmtree(results / "raw" / "rs-four")
    gone = ingest_forgeloop(warehouse, results)
    assert gone.run_sets == ["rs-test", "rs-three", "rs-two"] and "rs-four" in set(stored_runs(tmp_path / "w")["run_set_id"])
    assert not any(path.startswith("raw/rs-four/") for path in manifest(tmp_path / "w"))


def test_ingesting_one_run_set_keeps_the_manifest_rows_of_the_others(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD, run(run_set="rs-two", tokens=3000)])
    warehouse = Warehouse(tmp_path / "w")
    ingest_forgeloop(warehouse, results)
    ingest_forgeloop(warehouse, results, run_sets=["rs-two"])
    assert sorted(manifest(tmp_path / "w")) == [
        "raw/rs-test/small-bug-fix/direct/run-001.json", "raw/rs-two/small-bug-fix/direct/run-001.json"]


def test_files_directly_in_raw_are_one_entry_however_they_lie(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD, run(run_set="rs-two")])
    for name in ("a.json", "zz.json"):
        (results / "raw" / name).write_text("{}")
    warehouse = Warehouse(tmp_path / "w")
    first = ingest_forgeloop(warehouse, results)
    assert [path for path, _, _ in first.rejections] == ["raw/a.json", "raw/zz.json"]
    (results / "raw" / "zz.json").unlink()
    second = ingest_forgeloop(warehouse, results)
    assert [path for path, _, _ in second.rejections] == ["raw/a.json"] and second.unchanged == 2
    assert sorted(manifest(tmp_path / "w")) == ["raw/a.json", "raw/rs-test/small-bug-fix/direct/run-001.json",
                                                "raw/rs-two/small-bug-fix/direct/run-001.json"]


@pytest.mark.slow
def test_a_file_that_could_not_be_read_is_read_again_once_it_can_be(tmp_path):
    """A rejection for the moment (the file could not be read) is not an answer about the file: the
    next ingest reads it again even though its size and modification time did not change (a chmod
    changes neither)."""
    results = write_tree(tmp_path / "results", [run(), run(index=2)], {"small-bug-fix": "balanced", "api-feature": "light"})
    locked = [results / "raw" / "rs-test" / "small-bug-fix" / "direct" / "run-002.json", results / "scenarios" / "api-feature.json"]
    for path in locked:
        path.chmod(0o000)
    command = [sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"),
               "--json", "--warehouse", str(tmp_path / "w")]
    first = run_as_a_user(command)
    assert first.returncode == 3, first.stderr
    answer = json.loads(first.stdout)
    assert answer["rejections"] == [
        {"path": "raw/rs-test/small-bug-fix/direct/run-002.json", "field": "file", "reason": "cannot be read (Permission denied)"},
        {"path": str(locked[1].resolve()), "field": "file", "reason": "cannot be read (Permission denied)"}]
    assert answer["scenarios"] == 1
    before = [path.stat() for path in locked]
    for path in locked:
        path.chmod(0o644)
    assert [(p.stat().st_size, p.stat().st_mtime_ns) for p in locked] == [(b.st_size, b.st_mtime_ns) for b in before]
    second = run_as_a_user(command)
    assert second.returncode == 0, second.stderr
    answer = json.loads(second.stdout)
    assert (answer["accepted"], answer["unchanged"], answer["rejected"], answer["scenarios"]) == (1, 1, 0, 2)


def test_scenario_files_are_counted_apart_from_run_files(tmp_path):
    """One run file and eight scenario files, two of them broken: the summary counts each kind, and
    the files rejected are said out of all the files seen (it said 2 of 3)."""
    results = write_tree(tmp_path / "results", [run()], {f"scenario-{n}": "balanced" for n in range(6)})
    (results / "scenarios" / "broken.json").write_text("{")
    (results / "scenarios" / "empty.json").write_text("")
    command = ["ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios")]
    result = run_cli(*command, warehouse=tmp_path / "w", check=3)
    assert "1 run file: 1 accepted, 0 unchanged, 0 rejected; run sets rs-test; 8 scenario files: 6 accepted, 2 rejected" in result.stdout
    assert "loopmeter: 2 of 9 files rejected; the rest is stored" in result.stderr
    report = json.loads(run_cli(*command, "--json", warehouse=tmp_path / "w2", check=3).stdout)
    assert (report["seen"], report["accepted"], report["rejected"], report["scenarios"], report["scenariosRejected"]) == (1, 1, 0, 6, 2)
    assert len(report["rejections"]) == 2


def test_when_every_file_is_rejected_nothing_is_said_to_be_stored(tmp_path):
    results = write_tree(tmp_path / "results", [GOOD])
    (results / "raw" / "rs-test" / "small-bug-fix" / "direct" / "run-001.json").write_text("[]")
    result = run_cli("ingest", "forgeloop", str(results), warehouse=tmp_path / "w", check=3)
    assert result.stderr.splitlines()[-1] == "loopmeter: 1 of 1 file rejected; nothing is stored"


@pytest.mark.slow
def test_an_ingest_without_scenario_files_says_what_that_leaves_out(tmp_path, corpus):
    bare = run_cli("ingest", "forgeloop", str(corpus / "results"), warehouse=tmp_path / "w")
    assert ("note: no scenario files stored: report tail and summary list only scenarios with one, and no light "
            "objective is judged; pass --scenarios DIR") in bare.stderr
    quiet = run_cli("ingest", "forgeloop", str(corpus / "results"), "--quiet", warehouse=tmp_path / "w")
    assert "note:" not in quiet.stderr
    run_cli("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"), warehouse=tmp_path / "w")
    again = run_cli("ingest", "forgeloop", str(corpus / "results"), warehouse=tmp_path / "w")  # stored before: enough
    assert "note:" not in again.stderr


@pytest.mark.slow
def test_scenario_files_read_before_are_told_unchanged(tmp_path, corpus):
    args = ("ingest", "forgeloop", str(corpus / "results"), "--scenarios", str(corpus / "scenarios"))
    assert "7 scenario files: 7 accepted, 0 rejected" in run_cli(*args, warehouse=tmp_path / "w").stdout
    again = run_cli(*args, warehouse=tmp_path / "w")
    assert "525 unchanged" in again.stdout and "7 scenario files: 7 unchanged, 0 rejected" in again.stdout
    told = json.loads(run_cli(*args, "--json", warehouse=tmp_path / "w").stdout)
    assert told["scenarios"] == 7 and told["scenariosUnchanged"] is True
    reread = json.loads(run_cli(*args, "--full", "--json", warehouse=tmp_path / "w").stdout)
    assert reread["scenariosUnchanged"] is False
