"""`ingest forge`: a SQLite store's repos rows and its rids and kinds, held to the rules of a JSON Lines export.

Every row is accounted for: a repos row that is not a mapping (a NULL, empty, non-text or non-UTF-8 repo or
path; a repo repeated with another path) is rejected like a bad repo line, and an event whose rid or kind is
not text (a number in a column without TEXT affinity, NULL) like a line whose rid or kind is not a string.
"""
from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import run_cli
from loopmeter.forge import sqlite_store as store_module
from loopmeter.forge import tables as t
from loopmeter.forge.ingest import ingest_forge
from loopmeter.storage import Warehouse

TYPED_REPOS = "CREATE TABLE repos(repo TEXT PRIMARY KEY, path TEXT)"
UNTYPED_REPOS = "CREATE TABLE repos(repo, path)"  # no affinity, no key: what a hand-made store may hold
TYPED_EVENTS = ("CREATE TABLE events(rid TEXT PRIMARY KEY, kind TEXT, src TEXT, ts REAL, run TEXT, task TEXT, "
                "repo TEXT, mode TEXT, data TEXT)")
UNTYPED_EVENTS = "CREATE TABLE events(rid, kind, src, ts, run, task, repo, mode, data)"


def row(rid, kind="attempt", ts=100.0, data='{"n": 1}'):
    return (rid, kind, "forge", ts, "r1", "t1", "api", "parallel", data)


def sqlite_store(path, repos, events, repos_sql=TYPED_REPOS, events_sql=TYPED_EVENTS, extra_sql=()):
    db = sqlite3.connect(path)
    db.execute(repos_sql)
    db.execute(events_sql)
    db.executemany("INSERT INTO repos VALUES (?, ?)", repos)
    db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", events)
    for statement in extra_sql:
        db.execute(statement)
    db.commit()
    db.close()
    return path


def rejections(result) -> list[tuple]:
    return [(r.line, r.rid, r.field, r.rule) for r in result.rejections]


def counts(result) -> tuple:
    return result.read, result.stored, result.duplicates, result.rejected, result.repos


def stored_repos(warehouse: Warehouse) -> list[tuple[str, str]]:
    return sorted(warehouse.read(t.REPOS).select("repo", "path").rows())


def stored_rejections(warehouse: Warehouse) -> list[tuple]:
    return warehouse.read(t.REJECTIONS).select("source", "line", "rid", "field", "rule").rows()


# ---- 1. repos rows that are not mappings ----------------------------------------------------------

BAD_REPOS = [  # (repo, path) rows of the typed table, in order
    ("api", "/r/api"),
    (None, "/r/x"),  # TEXT PRIMARY KEY lets a NULL in (SQLite's old rule), more than once
    ("web", None),
    ("", "/r/empty"),
    ("empty-path", ""),
    (None, None),
]
BAD_REPOS_RULES = [
    (None, None, "repo", 'a repos row needs repo, non-empty text (found null; the row\'s path: "/r/x")'),
    (None, None, "path", 'a repos row needs path, non-empty text (found null; the row\'s repo: "web")'),
    (None, None, "repo", 'a repos row needs repo, non-empty text (found empty text; the row\'s path: "/r/empty")'),
    (None, None, "path", 'a repos row needs path, non-empty text (found empty text; the row\'s repo: "empty-path")'),
    (None, None, "repo", "a repos row needs repo, non-empty text (found null; the row's path: null)"),
]


def test_a_repos_row_with_a_null_or_empty_repo_or_path_is_rejected_not_dropped(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", BAD_REPOS, [row("e1")])
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, store)
    assert rejections(result) == BAD_REPOS_RULES
    # read: the event and the 5 rejected rows; the one good row is the one repository
    assert counts(result) == (6, 1, 0, 5, 1)
    assert stored_repos(warehouse) == [("api", "/r/api")]
    assert stored_rejections(warehouse) == [(str(store.resolve()), *rule) for rule in BAD_REPOS_RULES]


def test_the_cli_names_each_rejected_repos_row_and_exits_3(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", BAD_REPOS[:3], [row("e1")])
    result = run_cli("ingest", "forge", str(store), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 3, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("rejected ")] == [
        f'rejected {store}: repo: a repos row needs repo, non-empty text (found null; the row\'s path: "/r/x")',
        f'rejected {store}: path: a repos row needs path, non-empty text (found null; the row\'s repo: "web")',
    ]
    assert "3 rows read: 1 new events, 0 already stored, 2 rejected, 1 repositories" in result.stdout
    assert "loopmeter: 2 of 3 rejected; the rest is stored" in result.stderr


def test_a_repos_value_that_is_a_number_a_blob_or_not_utf8_is_rejected(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", "/r/api"), (5, "/r/five"), ("blob", b"/r/b"),
                                                        ("real", 2.5)], [row("e1")], repos_sql=UNTYPED_REPOS,
                         extra_sql=["INSERT INTO repos VALUES (CAST(X'72ff' AS TEXT), '/r/bad')"])
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, store)
    assert rejections(result) == [
        (None, None, "repo", 'a repos row needs repo, non-empty text (found integer; the row\'s path: "/r/five")'),
        (None, None, "path", 'a repos row needs path, non-empty text (found blob; the row\'s repo: "blob")'),
        (None, None, "path", 'a repos row needs path, non-empty text (found real; the row\'s repo: "real")'),
        (None, None, "repo", "a repos row needs repo, non-empty text (found text that is not valid UTF-8; "
                             'the row\'s path: "/r/bad")'),
    ]
    assert counts(result) == (5, 1, 0, 4, 1)
    assert stored_repos(warehouse) == [("api", "/r/api")]


def test_a_json_lines_export_rejects_the_same_mappings_with_the_same_fields(tmp_path):
    """The rule of a bad repo line, which the SQLite rows now follow: the same fields, one rejection each."""
    lines = [json.dumps({"kind": "repo", "repo": repo, "path": path}) for repo, path in BAD_REPOS]
    lines.append(json.dumps({"rid": "e1", "kind": "attempt", "ts": 100, "data": {"n": 1}}))
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join(lines) + "\n")
    exported = ingest_forge(Warehouse(tmp_path / "a"), export)
    store = sqlite_store(tmp_path / "dataset.sqlite", BAD_REPOS, [row("e1")])
    from_sqlite = ingest_forge(Warehouse(tmp_path / "b"), store)
    assert [r.field for r in exported.rejections] == [r.field for r in from_sqlite.rejections] == [
        "repo", "path", "repo", "path", "repo"]
    assert [r.line for r in exported.rejections] == [2, 3, 4, 5, 6]
    assert (exported.stored, exported.rejected, exported.repos) == (from_sqlite.stored, from_sqlite.rejected,
                                                                    from_sqlite.repos) == (1, 5, 1)
    assert stored_repos(Warehouse(tmp_path / "a")) == stored_repos(Warehouse(tmp_path / "b")) == [("api", "/r/api")]


def test_rejected_repos_rows_are_reported_when_the_store_has_no_events(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", None)], [])
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, store)
    assert rejections(result) == [
        (None, None, "path", 'a repos row needs path, non-empty text (found null; the row\'s repo: "api")')]
    assert counts(result) == (1, 0, 0, 1, 0)
    assert stored_rejections(warehouse) == [(str(store.resolve()), *rule) for rule in rejections(result)]


@pytest.mark.slow
@pytest.mark.parametrize("arrow", [True, False])
def test_rejected_repos_rows_are_reported_once_when_the_reader_starts_again(tmp_path, arrow):
    """A row the Arrow reader cannot take makes the exact reader read again (`restart`), and text that
    is not UTF-8 makes it read a third time: the repos rows' rejections come with each reading's first
    batch, so the ingest, which forgets what came before a restart, has them once."""
    events = [row(f"e{i}") for i in range(5)] + [row("other", ts="soon")]  # a text ts: not plain
    store = sqlite_store(tmp_path / "dataset.sqlite", [(None, "/r/x"), ("api", "/r/api")], events,
                         events_sql=UNTYPED_EVENTS,
                         extra_sql=["INSERT INTO events VALUES ('bad', 'attempt', 'forge', 101.0, "
                                    "CAST(X'72ff31' AS TEXT), 't1', 'api', 'parallel', '{\"n\": 1}')"])
    container, batches = store_module.read_sqlite(store, batch_rows=2, arrow=arrow)
    batches = list(batches)
    kinds = [batch.kind for batch in batches]
    assert kinds.count("restart") == (2 if arrow else 1)
    after = batches[len(batches) - kinds[::-1].index("restart"):]  # the last reading
    assert [len(batch.rejected) > 0 for batch in after][:1] == [True]
    repo_rule = (None, None, "repo", 'a repos row needs repo, non-empty text (found null; the row\'s path: "/r/x")')
    assert [rejected for batch in after for rejected in batch.rejected].count(repo_rule) == 1
    assert container.repos == [("api", "/r/api")] and container.repo_rejections == [repo_rule]
    result = ingest_forge(Warehouse(tmp_path / f"w-{arrow}"), store, batch_rows=2)
    assert rejections(result) == [
        repo_rule,
        (None, "other", "ts", "must be unix seconds, a number (found text)"),
        (None, "bad", "run", "is not valid UTF-8"),
    ]
    assert counts(result) == (8, 5, 0, 3, 1)


def test_a_wal_store_with_a_null_repos_row_is_read_by_the_arrow_reader(tmp_path):
    """The two connections compare the repos rows as stored (a NULL, bytes that are not UTF-8 included)."""
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", "/r/api"), (None, "/r/x")], [row("e1")],
                         extra_sql=["INSERT INTO repos VALUES ('bad', CAST(X'2fff' AS TEXT))"])
    db = sqlite3.connect(store)
    db.execute("PRAGMA journal_mode=WAL")
    try:
        _, batches = store_module.read_sqlite(store)
        batches = list(batches)
        assert [batch.kind for batch in batches] == ["sqlite"]
        assert [rule[2] for rule in batches[0].rejected] == ["repo", "path"]
        result = ingest_forge(Warehouse(tmp_path / "w"), store)
    finally:
        db.close()
    assert counts(result) == (3, 1, 0, 2, 1)


def test_a_second_ingest_reports_the_same_rejections_and_stores_them_once(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", BAD_REPOS, [row("e1")])
    warehouse = Warehouse(tmp_path / "w")
    first = ingest_forge(warehouse, store)
    again = ingest_forge(warehouse, store)
    assert rejections(again) == rejections(first) == BAD_REPOS_RULES
    assert counts(again) == (6, 0, 1, 5, 1)
    assert len(stored_rejections(warehouse)) == 5


# ---- 2. a repo given by two rows ------------------------------------------------------------------

def test_a_repo_repeated_with_another_path_is_rejected_and_the_first_row_kept(tmp_path):
    repos = [("api", "/r/api"), ("web", "/r/web"), ("api", "/r/api"), ("api", "/r/other"), ("web", "/r/web2"),
             ("api", "/r/api")]
    store = sqlite_store(tmp_path / "dataset.sqlite", repos, [row("e1")], repos_sql=UNTYPED_REPOS)
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, store)
    assert rejections(result) == [
        (None, None, "repo", 'a repos row repeats repo "api" with another path ("/r/other"; an earlier row has '
                             '"/r/api"); the first is kept'),
        (None, None, "repo", 'a repos row repeats repo "web" with another path ("/r/web2"; an earlier row has '
                             '"/r/web"); the first is kept'),
    ]
    # the same path again is the same mapping: nothing to reject, nothing added
    assert counts(result) == (3, 1, 0, 2, 2)
    assert stored_repos(warehouse) == [("api", "/r/api"), ("web", "/r/web")]


def test_a_rejected_row_does_not_make_a_later_good_row_a_repeat(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", None), ("api", "/r/api")], [row("e1")],
                         repos_sql=UNTYPED_REPOS)
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, store)
    assert [r.field for r in result.rejections] == ["path"]
    assert stored_repos(warehouse) == [("api", "/r/api")]


@pytest.mark.parametrize("batch_rows", [1, 2, 1000])  # the repeat in another batch, or in the same one
def test_a_json_lines_repo_repeated_with_another_path_is_rejected_as_in_a_sqlite_store(tmp_path, batch_rows):
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join([
        '{"kind": "repo", "repo": "api", "path": "/r/api"}',
        '{"kind": "repo", "repo": "api", "path": "/r/other"}',
        '{"kind": "repo", "repo": "api", "path": "/r/api"}',  # the same mapping again: nothing to reject
        '{"rid": "e1", "kind": "attempt", "ts": 100, "data": {"n": 1}}',
    ]) + "\n")
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        result = ingest_forge(warehouse, export, batch_rows=batch_rows)
    assert [(r.line, r.rid, r.field, r.rule) for r in result.rejections] == [
        (2, None, "repo", 'a repo line repeats repo "api" with another path ("/r/other"; line 1 has "/r/api"); the first is kept')]
    assert (result.read, result.repo_lines, result.stored, result.rejected) == (4, 2, 1, 1)
    assert stored_repos(warehouse) == [("api", "/r/api")]


# ---- 3. rids and kinds that are not text ----------------------------------------------------------

NOT_TEXT_EVENTS = [
    row("ok1"),
    row(5),  # an integer rid in a column without TEXT affinity: stored as an integer
    row(6.5),
    row(None),
    row("k1", kind=7),
    row("k2", kind=None),
    row("ok2", ts=101.0),
]
NOT_TEXT_RULES = [
    (None, "5", "rid", "must be text (found integer)"),
    (None, "6.5", "rid", "must be text (found real)"),
    (None, None, "rid", "must be text (found null)"),
    (None, "k1", "kind", "must be text (found integer)"),
    (None, "k2", "kind", "must be text (found null)"),
]


@pytest.mark.parametrize("arrow", [True, False])
def test_a_rid_or_kind_that_is_not_text_is_rejected_by_rid(tmp_path, arrow, monkeypatch):
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", "/r/api")], NOT_TEXT_EVENTS, events_sql=UNTYPED_EVENTS)
    if not arrow:
        real = store_module.read_sqlite
        monkeypatch.setattr(store_module, "read_sqlite", lambda *a, **k: real(*a, **k, arrow=False))
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, store)
    assert sorted(rejections(result), key=str) == sorted(NOT_TEXT_RULES, key=str)
    assert counts(result) == (7, 2, 0, 5, 1)
    assert sorted(warehouse.read(t.EVENTS)["rid"].to_list()) == ["ok1", "ok2"]


def test_a_rid_or_kind_that_is_not_text_is_rejected_when_the_store_is_read_as_bytes(tmp_path):
    """Text that is not UTF-8 makes the exact reader read the store as bytes: the same rules hold there."""
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", "/r/api")], NOT_TEXT_EVENTS, events_sql=UNTYPED_EVENTS,
                         extra_sql=["INSERT INTO events VALUES ('bad', 'attempt', 'forge', 101.0, "
                                    "CAST(X'72ff31' AS TEXT), 't1', 'api', 'parallel', '{\"n\": 1}')"])
    result = ingest_forge(Warehouse(tmp_path / "w"), store)
    assert sorted(rejections(result), key=str) == sorted(NOT_TEXT_RULES + [(None, "bad", "run", "is not valid UTF-8")],
                                                         key=str)
    assert counts(result) == (8, 2, 0, 6, 1)


def test_an_integer_given_to_a_text_column_is_text_and_kept(tmp_path):
    """TEXT affinity stores the integer 5 as the text '5': a string rid, as "5" in JSON Lines."""
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", "/r/api")], [row(5), row("ok1")])
    db = sqlite3.connect(store)
    assert db.execute("SELECT typeof(rid) FROM events").fetchall() == [("text",), ("text",)]
    db.close()
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, store)
    assert counts(result) == (2, 2, 0, 0, 1)
    assert sorted(warehouse.read(t.EVENTS)["rid"].to_list()) == ["5", "ok1"]


def test_json_lines_and_sqlite_reject_the_same_rids_and_kinds(tmp_path):
    lines = [json.dumps({"rid": rid, "kind": kind, "ts": ts, "run": "r1", "task": "t1", "repo": "api",
                         "mode": "parallel", "data": json.loads(data)})
             for rid, kind, _, ts, _, _, _, _, data in NOT_TEXT_EVENTS]
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join(lines) + "\n")
    exported = ingest_forge(Warehouse(tmp_path / "a"), export)
    store = sqlite_store(tmp_path / "dataset.sqlite", [], NOT_TEXT_EVENTS, events_sql=UNTYPED_EVENTS)
    from_sqlite = ingest_forge(Warehouse(tmp_path / "b"), store)
    assert [r.field for r in exported.rejections] == ["rid", "rid", "rid", "kind", "kind"]
    assert sorted(r.field for r in from_sqlite.rejections) == sorted(r.field for r in exported.rejections)
    assert (exported.stored, exported.rejected) == (from_sqlite.stored, from_sqlite.rejected) == (2, 5)


def test_a_repository_path_holding_a_nul_is_rejected_in_either_store_and_harvest_goes_on(tmp_path):
    # JSON and SQLite text may hold a NUL; no path on a file system can (git and os.path refuse it)
    store = sqlite_store(tmp_path / "dataset.sqlite", [("api", "/r/api"), ("web", "/srv/web\0x")], [row("e1")])
    result = ingest_forge(Warehouse(tmp_path / "w"), store)
    assert rejections(result) == [(None, None, "path", 'holds a NUL character, which no path on a file system can '
                                                       '(the row\'s repo: "web")')]
    assert stored_repos(Warehouse(tmp_path / "w")) == [("api", "/r/api")]
    lines = tmp_path / "store.jsonl"
    lines.write_text(json.dumps({"kind": "repo", "repo": "web", "path": "/srv/web\0x"}) + "\n" + json.dumps(
        {"rid": "e1", "kind": "event", "src": "forge", "ts": 1767693630, "run": "r", "repo": "web",
         "data": {"name": "integrate_advanced", "branch": "main", "parent": "a", "candidate": "b", "target": "main"}}) + "\n")
    ingested = run_cli("ingest", "forge", str(lines), warehouse=tmp_path / "j", check=None)
    assert ingested.returncode == 3 and (f"rejected {lines}:1: path: holds a NUL character, which no path on a file "
                                         "system can") in ingested.stderr.splitlines(), ingested.stderr
    harvested = run_cli("harvest", "survival", warehouse=tmp_path / "j", check=None)
    assert harvested.returncode == 3 and "repo_unknown" in harvested.stdout, harvested.stderr  # listed, tried again


@pytest.mark.parametrize("data, rejected", [
    ('{"x": NaN}', True), ('{"x": [1, -Infinity]}', True), ('{"a": 1,}', True), ('{"a": [1 , ] }', True),
    ('{"x": "NaN", "y": "a:Infinity,]"}', False), ('{"q": "\\\\", "x": NaN}', True), ('{"q": "\\":NaN"}', False),
])
def test_data_that_only_a_lenient_parser_takes_is_rejected(tmp_path, data, rejected):
    # DuckDB's JSON parser takes NaN, Infinity and trailing commas; a strict reader of forge_events.data would not
    store = sqlite_store(tmp_path / "dataset.sqlite", [], [row("e1", kind="note", data=data), row("e2")])
    result = ingest_forge(Warehouse(tmp_path / "w"), store)
    rule = "must be a JSON object (it is not valid JSON: NaN, Infinity or a trailing comma)"
    assert rejections(result) == ([(None, "e1", "data", rule)] if rejected else [])
    if not rejected:
        stored = Warehouse(tmp_path / "w").read(t.EVENTS).filter(rid="e1")["data"].item()
        assert json.loads(stored) == json.loads(data)


@pytest.mark.parametrize("line, rejected", [
    ('"data": {"x": NaN}}', True), ('"data": {"a": 1,}}', True), ('"data": {"a": 1},}', True),
    ('"data": {"a": [1 , ] }}', True), ('"data": {"x": "NaN", "y": "a:Infinity,]"}}', False),
    ('"data": {"q": "\\":NaN"}}', False), ('"data": {"a": 1}, "note": "1,}"}', False),
])
def test_a_line_that_only_a_lenient_parser_takes_is_rejected(tmp_path, line, rejected):
    # the JSON Lines export is held to the rule a SQLite store's data is: JSON as written, no NaN, no trailing comma
    text = '{"rid": "e1", "kind": "note", "ts": 100, ' + line
    export = tmp_path / "events.jsonl"
    export.write_text(text + "\n" + json.dumps({"rid": "e2", "kind": "note", "ts": 100, "data": {}}) + "\n")
    result = ingest_forge(Warehouse(tmp_path / "w"), export)
    rule = "is not valid JSON (NaN, Infinity or a trailing comma)"
    assert rejections(result) == ([(1, "e1", "line", rule)] if rejected else [])
    if not rejected:
        stored = Warehouse(tmp_path / "w").read(t.EVENTS).filter(rid="e1")["data"].item()
        assert json.loads(stored) == json.loads(text)["data"]
