"""`ingest forge`: both containers, idempotence, hostile stores, the store left untouched, documented tables."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading

import polars as pl
import pytest

from conftest import run_cli
from forge_fixtures import event, write_store
from loopmeter.forge import samples
from loopmeter.forge import sqlite_store as store_module
from loopmeter.forge import tables as t
from loopmeter.forge.ingest import ingest_forge
from loopmeter.storage.registry import polars_type as polars_dtype
from loopmeter.storage import Warehouse


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ingest")
    events = samples.routing_events(80, seed=3)
    repos = [("api", "/repos/api"), ("web", "/repos/web")]
    store = samples.write_sqlite(tmp / "dataset.sqlite", repos, events)
    export = samples.write_jsonl(tmp / "export.jsonl", repos, events)
    return tmp, store, export, events


def test_sqlite_store_loads_every_event_and_is_left_byte_identical(sample, tmp_path):
    _, store, _, events = sample
    before = digest(store)
    siblings = sorted(p.name for p in store.parent.iterdir())
    result = run_cli("ingest", "forge", str(store), "--json", warehouse=tmp_path / "w", check=None)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["read"], report["stored"], report["rejected"], report["repos"]) == (len(events), len(events), 0, 2)
    assert report["unknownKinds"] == {"heartbeat": 2}
    assert digest(store) == before
    assert sorted(p.name for p in store.parent.iterdir()) == siblings  # no -journal, -wal or -shm left behind
    warehouse = Warehouse(tmp_path / "w")
    stored = warehouse.read(t.EVENTS)
    assert stored.height == len(events) and stored["rid"].n_unique() == len(events)
    assert set(stored["kind"].unique()) == {"plan", "attempt", "dispatch", "event", "heartbeat"}


@pytest.mark.slow
def test_second_ingest_and_the_jsonl_export_add_nothing(sample, tmp_path):
    _, store, export, events = sample
    warehouse = Warehouse(tmp_path / "w")
    first = ingest_forge(warehouse, store)
    tasks = warehouse.read(t.TASKS)
    again = ingest_forge(warehouse, store)
    exported = ingest_forge(warehouse, export)
    assert (first.stored, again.stored, again.duplicates, again.rebuilt) == (len(events), 0, len(events), False)
    assert (exported.stored, exported.duplicates, exported.rejected, exported.repo_lines) == (0, len(events), 0, 2)
    assert warehouse.read(t.TASKS).equals(tasks)


@pytest.mark.slow
def test_jsonl_and_sqlite_give_the_same_tables(sample, tmp_path):
    _, store, export, _ = sample
    from_sqlite, from_jsonl = Warehouse(tmp_path / "a"), Warehouse(tmp_path / "b")
    ingest_forge(from_sqlite, store)
    ingest_forge(from_jsonl, export)
    for table in (t.TASKS, t.ATTEMPTS, t.DECISIONS, t.DISPATCHES, t.PLAN_TASKS, t.MERGES):
        left = from_sqlite.read(table).sort(pl.all())
        right = from_jsonl.read(table).sort(pl.all())
        assert left.equals(right), table


@pytest.mark.slow
def test_every_table_matches_its_documented_columns(sample, tmp_path):
    _, store, _, _ = sample
    warehouse = Warehouse(tmp_path / "w")
    run_cli("ingest", "forge", str(store), warehouse=warehouse.root)  # stores the routing tables too
    run_cli("harvest", "survival", "--include-temp", warehouse=warehouse.root, check=None)  # the survival table
    written = [name for name in warehouse.table_names() if name.startswith("forge_")]
    assert set(written) == set(t.FORGE_TABLES)
    for name in written:
        frame = warehouse.read(name)
        documented = t.columns(name)
        assert frame.columns == [c for c, _, _ in documented], name
        for column, dtype, comment in documented:
            assert frame.schema[column] == polars_dtype(dtype), (name, column)
            assert comment.strip(), (name, column)
    assert warehouse.read(t.EVENTS).schema["ts"] == pl.Datetime("us", "UTC")
    # the catalog documents every column
    import duckdb

    catalog = duckdb.connect(str(warehouse.root / "loopmeter.duckdb"), read_only=True)
    try:
        undocumented = catalog.sql(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE table_name LIKE 'forge_%' "
            "AND (comment IS NULL OR comment = '(undocumented)')").fetchall()
    finally:
        catalog.close()
    assert undocumented == []


HOSTILE_LINES = [
    '{"kind":"repo","repo":"api","path":"/repos/api"}',
    json.dumps(event("p1", "plan", 100, data={"revision": 1, "tasks": {"t1": {"declared_difficulty": "low"}}})),
    "this is not json",
    '{"rid":"a1","kind":"attempt","ts":"yesterday","data":{"n":1}}',
    '{"rid":"a2","kind":"attempt","ts":110,"data":[1,2]}',
    '{"rid":"a3","kind":"attempt","ts":111,"run":"r1","task":"t1","data":{"dwarf":"flash","status":"started"}}',
    '{"rid":"h1","kind":"heartbeat","ts":112,"data":{"load":0.3}}',
    '[1, 2, 3]',
    '{"rid":"p2","kind":"plan","ts":113,"run":"r2","data":{"tasks":{"t1":{"route":[{"decision":"d","propensity":"high"}]}}}}',
    '{"rid":"x1","kind":"dispatch","ts":114,"run":"r1","task":"t1","data":{"role":"dwarf","wall_started":"noon"}}',
    '{"rid":"p1","kind":"plan","ts":100,"run":"r1","data":{"revision":2}}',
    '{"rid":"a4","kind":"attempt","ts":115,"run":"r1","task":"t1","data":{"n":1,"dwarf":"flash","status":"passed"}}',
    # a number the cheap check once took for an integer (DuckDB casts '1.5' to 2); 2.0 is the integer 2
    '{"rid":"a5","kind":"attempt","ts":116,"run":"r1","task":"t1","data":{"n":1.5,"status":"passed"}}',
    '{"rid":"a6","kind":"attempt","ts":117,"run":"r1","task":"t1","data":{"n":2.0,"status":"failed"}}',
]


def test_an_export_saved_with_a_byte_order_mark_keeps_its_first_line(tmp_path):
    export = tmp_path / "export.jsonl"
    export.write_bytes(b"\xef\xbb\xbf" + "\n".join(HOSTILE_LINES[:2]).encode() + b"\n")
    result = run_cli("ingest", "forge", str(export), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 0, result.stderr
    assert "2 lines read: 1 new events, 0 already stored, 0 rejected, 1 repositories" in result.stdout
    assert Warehouse(tmp_path / "w").read(t.REPOS).select("repo", "path").rows() == [("api", "/repos/api")]


def test_hostile_json_lines_each_rejection_names_line_rid_field_and_rule(tmp_path):
    export = tmp_path / "export.jsonl"
    export.write_bytes(("\n".join(HOSTILE_LINES) + "\n").encode() + b'{"rid":"bad\xff","kind":"x","ts":1,"data":{}}\n\n')
    result = run_cli("ingest", "forge", str(export), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 3
    lines = [line for line in result.stderr.splitlines() if line.startswith("rejected ")]
    assert lines == [
        f"rejected {export}:3: line: is not valid JSON",
        f"rejected {export}:4 rid a1: ts: must be unix seconds, a number",
        f"rejected {export}:5 rid a2: data: must be a JSON object (found a list)",
        f"rejected {export}:6 rid a3: data.n: must be the attempt number, an integer",
        f"rejected {export}:8: line: must be a JSON object",
        f"rejected {export}:9 rid p2: data.tasks.t1.route[0].propensity: must be a probability, a number in [0, 1], or null",
        f"rejected {export}:10 rid x1: data.wall_started: must be unix seconds, a number, or null",
        f"rejected {export}:13 rid a5: data.n: must be the attempt number, an integer",
        f"rejected {export}:15: line: is not valid UTF-8",
        f"rejected {export}:11 rid p1: rid: repeats the rid of an event already loaded with other content (line 2); "
        "the first is kept",
    ]
    assert "Traceback" not in result.stderr
    warehouse = Warehouse(tmp_path / "w")
    assert sorted(warehouse.read(t.EVENTS)["rid"].to_list()) == ["a4", "a6", "h1", "p1"]
    assert sorted(warehouse.read(t.ATTEMPT_EVENTS).select("rid", "attempt").rows()) == [("a4", 1), ("a6", 2)]
    assert warehouse.read(t.REJECTIONS).height == 10
    assert "kinds format 1 does not know (kept): heartbeat 1" in result.stdout
    assert "15 lines read: 4 new events, 0 already stored, 10 rejected" in result.stdout


def sqlite_store(path, rows, repos=(("api", "/repos/api"),), events_sql=None, repos_sql=None):
    db = sqlite3.connect(path)
    db.execute(repos_sql or "CREATE TABLE repos(repo TEXT PRIMARY KEY, path TEXT)")
    db.execute(events_sql or "CREATE TABLE events(rid TEXT PRIMARY KEY, kind TEXT, src TEXT, ts REAL, run TEXT, "
               "task TEXT, repo TEXT, mode TEXT, data TEXT)")
    db.executemany("INSERT INTO repos VALUES (?, ?)", repos)
    if rows:
        db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    return path


def test_hostile_sqlite_rows_are_rejected_by_rid(tmp_path):
    good = ("ok1", "attempt", "forge", 100.0, "r1", "t1", "api", "parallel", '{"n": 1, "status": "started"}')
    rows = [
        good,
        ("blob", "attempt", "forge", 101.0, "r1", "t1", "api", "parallel", b'{"n": 1}'),
        ("textts", "attempt", "forge", "soon", "r1", "t1", "api", "parallel", '{"n": 1}'),
        ("notjson", "attempt", "forge", 102.0, "r1", "t1", "api", "parallel", "{n: 1"),
        ("array", "plan", "forge", 103.0, "r1", None, "api", "parallel", "[]"),
        ("unknown", "telemetry", "forge", 104.0, None, None, None, None, '{"x": {"y": [1]}}'),
    ]
    store = sqlite_store(tmp_path / "dataset.sqlite", rows,
                         events_sql="CREATE TABLE events(rid, kind, src, ts, run, task, repo, mode, data)")
    result = run_cli("ingest", "forge", str(store), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 3, result.stderr
    rejected = [line for line in result.stderr.splitlines() if line.startswith("rejected ")]
    assert rejected == [
        f"rejected {store} rid blob: data: must be a JSON object as text (found blob)",
        f"rejected {store} rid textts: ts: must be unix seconds, a number (found text)",
        f"rejected {store} rid notjson: data: must be a JSON object (it is not valid JSON)",
        f"rejected {store} rid array: data: must be a JSON object (found a list)",
    ]
    assert sorted(Warehouse(tmp_path / "w").read(t.EVENTS)["rid"].to_list()) == ["ok1", "unknown"]


def test_sqlite_ts_null_is_rejected_and_an_integer_ts_kept_exactly(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", [
        ("int", "attempt", "forge", 1700000000, "r1", "t1", "api", "parallel", '{"n": 1}'),
        ("fine", "attempt", "forge", 1700000000.1234567, "r1", "t1", "api", "parallel", '{"n": 1}'),
        ("nots", "attempt", "forge", None, "r1", "t1", "api", "parallel", '{"n": 1}'),
    ], events_sql="CREATE TABLE events(rid, kind, src, ts, run, task, repo, mode, data)")
    result = run_cli("ingest", "forge", str(store), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 3, result.stderr
    assert f"rejected {store} rid nots: ts: must be unix seconds, a number (found null)" in result.stderr
    stored = Warehouse(tmp_path / "w").read(t.EVENTS).sort("rid")
    assert stored["rid"].to_list() == ["fine", "int"]
    assert stored["ts_unix"].to_list() == [1700000000.1234567, 1700000000.0]


def read_all(store, **options):
    _, batches = store_module.read_sqlite(store, **options)
    return collect(batches)


def collect(batches) -> tuple[list[str], pl.DataFrame | None]:
    """The kinds of the batches, and the rows read (a restart forgets the batches before it)."""
    kinds, frames = [], []
    for batch in batches:
        kinds.append(batch.kind)
        if batch.kind == "restart":
            frames.clear()
        else:
            frames.append(batch.frame if isinstance(batch.frame, pl.DataFrame) else pl.from_arrow(batch.frame))
    return kinds, pl.concat(frames) if frames else None


def test_the_arrow_reader_reads_what_the_exact_reader_reads(sample, tmp_path):
    _, store, _, _ = sample
    kinds, fast = read_all(store, batch_rows=97)
    assert set(kinds) == {"sqlite"} and len(kinds) > 1
    _, exact = read_all(store, batch_rows=97, arrow=False)
    assert fast.equals(exact)
    # columns null all through the first batch, text later; integer then real ts, across batches
    rows = [(f"e{i}", "attempt", None, 1700000000 + i, "r1", None, None, None, '{"n": 1}') for i in range(5)]
    rows += [("f1", "attempt", "forge", 1700000010.25, "r1", "t1", "api", "parallel", '{"n": 1}')]
    store = sqlite_store(tmp_path / "mixed.sqlite", rows)
    kinds, fast = read_all(store, batch_rows=2)
    assert "restart" not in kinds
    assert fast.equals(read_all(store, batch_rows=2, arrow=False)[1])
    assert fast["ts"].to_list()[-2:] == [1700000004.0, 1700000010.25] and fast["task"].to_list()[-1] == "t1"


def _finishing_times(plan: list[int]) -> list[int]:
    """When each of two workers is done, each taking the next batch when it is free (rows as time)."""
    done = [0, 0]
    for size in plan:
        done[done.index(min(done))] += size
    return sorted(done)


def test_batches_are_planned_so_the_two_checking_workers_start_soon_and_finish_together():
    # half a batch first; an even number of batches between, as equal as can be; the last about half of them
    assert store_module.batch_plan(40, 10) == [5, 8, 8, 8, 7, 4]  # rest 30: 4 batches of 7.5, last 4
    assert _finishing_times([5, 8, 8, 8, 7, 4]) == [20, 20]
    assert store_module.batch_plan(47, 10) == [5, 10, 9, 9, 9, 5]
    assert store_module.batch_plan(7, 10) == [5, 2]
    assert store_module.batch_plan(3, 10) == [3]
    assert store_module.batch_plan(0, 10) == []
    big = store_module.batch_plan(971929, 75000)
    assert big[0] == 37500 and len(big) == 14 and max(big) <= 75000
    early, late = _finishing_times(big)
    assert late - early <= 1000  # the plain cut (13 batches of 75,000) leaves one worker a batch alone
    assert _finishing_times([75000] * 12 + [71929]) == [450000, 521929]
    for total in range(1, 60):
        for batch_rows in (1, 2, 3, 10):
            plan = store_module.batch_plan(total, batch_rows)
            assert sum(plan) == total and all(0 < size <= batch_rows for size in plan)


def test_the_arrow_reader_cuts_the_batches_the_plan_says(tmp_path):
    rows = [(f"e{i:03d}", "attempt", "forge", 1700000000 + i, "r1", "t1", "api", "parallel", '{"n": 1}') for i in range(47)]
    store = sqlite_store(tmp_path / "plan.sqlite", rows)
    _, batches = store_module.read_sqlite(store, batch_rows=10)
    batches = list(batches)
    # planned with the typing row the driver's first batch (of 5 rows) holds: the first batch is its 4 events,
    # whole, so the check starts as soon as they are read
    assert [batch.frame.num_rows for batch in batches] == [4, 10, 10, 9, 9, 5]
    assert store_module.batch_plan(48, 10) == [5, 10, 10, 9, 9, 5]
    assert batches[0].frame.column("rid").num_chunks == 1
    for batch_rows in (1, 2, 3):  # a first driver batch of the typing row alone: no empty batch
        _, small = store_module.read_sqlite(store, batch_rows=batch_rows)
        sizes = [batch.frame.num_rows for batch in small]
        assert sum(sizes) == 47 and min(sizes) > 0 and max(sizes) <= batch_rows
    kinds, frame = read_all(store, batch_rows=10)
    assert frame["position"].to_list() == list(range(47)) and frame.equals(read_all(store, batch_rows=10, arrow=False)[1])


def test_a_row_the_arrow_reader_cannot_take_makes_the_exact_reader_read_the_store(tmp_path):
    good = ("ok1", "attempt", "forge", 100.0, "r1", "t1", "api", "parallel", '{"n": 1}')
    for other, outcome in ((7, ["7"]), (b"r2", "run: must be text or null (found blob)")):
        store = sqlite_store(tmp_path / f"{type(other).__name__}.sqlite",
                             [good, ("other", "attempt", "forge", 101.0, other, "t1", "api", "parallel", '{"n": 1}')],
                             events_sql="CREATE TABLE events(rid, kind, src, ts, run, task, repo, mode, data)")
        kinds, _ = read_all(store, batch_rows=1)
        assert kinds[0] == "sqlite" and "restart" in kinds  # the Arrow reader passes no such value on
        warehouse = Warehouse(tmp_path / f"w-{type(other).__name__}")
        result = ingest_forge(warehouse, store)
        if isinstance(outcome, list):  # what the exact reader has always done with a number there
            assert result.rejected == 0
            assert warehouse.read(t.EVENTS).filter(pl.col("rid") == "other")["run"].to_list() == outcome
        else:
            assert [f"{r.field}: {r.rule}" for r in result.rejections] == [outcome]


def test_a_store_whose_only_rows_are_not_plain_is_read_by_the_exact_reader(tmp_path):
    # the Arrow reader leaves such rows out and counts them: nothing it read may stand
    rows = [("a", "attempt", "forge", 100.0, 5, "t1", "api", "parallel", '{"n": 1}'),
            ("b", "attempt", "forge", "101", "r1", "t1", "api", "parallel", '{"n": 1}')]
    store = sqlite_store(tmp_path / "odd.sqlite", rows,
                         events_sql="CREATE TABLE events(rid, kind, src, ts, run, task, repo, mode, data)")
    for batch_rows in (1, 97):
        kinds, frame = read_all(store, batch_rows=batch_rows)
        assert "restart" in kinds
        assert frame.equals(read_all(store, batch_rows=batch_rows, arrow=False)[1])  # what the exact reader reads


def test_sqlite_text_that_is_not_utf8_rejects_only_its_row(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", [
        ("ok1", "attempt", "forge", 100.0, "r1", "t1", "api", "parallel", '{"n": 1}'),
    ])
    db = sqlite3.connect(store)
    db.execute("INSERT INTO events VALUES ('bad', 'attempt', 'forge', 101.0, CAST(X'72ff31' AS TEXT), 't1', 'api', "
               "'parallel', '{\"n\": 1}')")
    db.commit()
    db.close()
    result = run_cli("ingest", "forge", str(store), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 3
    assert f"rejected {store} rid bad: run: is not valid UTF-8" in result.stderr
    assert Warehouse(tmp_path / "w").read(t.EVENTS)["rid"].to_list() == ["ok1"]


@pytest.mark.parametrize("content, message", [
    (b"SQLite format 3\x00" + b"\x00" * 200, "is not a readable SQLite database"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "is neither a SQLite Forge store nor a JSON Lines export"),
])
def test_a_file_that_is_not_a_store(tmp_path, content, message):
    path = tmp_path / "dataset.bin"
    path.write_bytes(content)
    result = run_cli("ingest", "forge", str(path), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "w" / t.EVENTS).exists()


def test_missing_file_table_and_columns(tmp_path):
    result = run_cli("ingest", "forge", str(tmp_path / "nope.sqlite"), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 1 and "no such file" in result.stderr
    no_repos = tmp_path / "no_repos.sqlite"
    db = sqlite3.connect(no_repos)
    db.execute("CREATE TABLE events(rid TEXT, kind TEXT, src TEXT, ts REAL, run TEXT, task TEXT, repo TEXT, mode TEXT, data TEXT)")
    db.close()
    result = run_cli("ingest", "forge", str(no_repos), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 1 and "has no table 'repos'" in result.stderr
    short = sqlite_store(tmp_path / "short.sqlite", [], events_sql="CREATE TABLE events(rid TEXT, kind TEXT, ts REAL)")
    result = run_cli("ingest", "forge", str(short), warehouse=tmp_path / "w", check=None)
    assert result.returncode == 1
    assert "table events lacks column(s) src, run, task, repo, mode, data" in result.stderr


def test_a_store_locked_by_a_writer_is_reported_not_waited_for_forever(tmp_path):
    store = sqlite_store(tmp_path / "dataset.sqlite", [
        ("ok1", "attempt", "forge", 100.0, "r1", "t1", "api", "parallel", '{"n": 1}')])
    writer = sqlite3.connect(store, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        result = run_cli("ingest", "forge", str(store), "--busy-timeout", "0.2", warehouse=tmp_path / "w", check=None)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert result.returncode == 1
    assert "the store is locked by a writer (waited 0.2 s)" in result.stderr
    assert run_cli("ingest", "forge", str(store), warehouse=tmp_path / "w", check=None).returncode == 0


def test_a_store_in_wal_mode_with_a_live_reader_is_read(tmp_path):
    store = write_store(tmp_path / "dataset.sqlite", [event("a1", "attempt", 100, task="t1", data={"n": 1})])
    db = sqlite3.connect(store)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("INSERT INTO events VALUES ('a2', 'attempt', 'forge', 101, 'r1', 't1', 'api', 'parallel', '{\"n\": 2}')")
    db.commit()
    try:
        warehouse = Warehouse(tmp_path / "w")
        result = ingest_forge(warehouse, store)
    finally:
        db.close()
    assert (result.stored, result.rejected) == (2, 0)


def test_what_a_writer_commits_to_a_wal_store_after_it_was_opened_is_not_read(tmp_path):
    """One snapshot: the Arrow reader (a second connection) reads only if it sees what the first one saw."""
    store = write_store(tmp_path / "dataset.sqlite", [event("a1", "attempt", 100, task="t1", data={"n": 1})])
    writer = sqlite3.connect(store)
    writer.execute("PRAGMA journal_mode=WAL")
    try:
        for change, undo in (
            ("INSERT INTO events VALUES ('a2', 'attempt', 'forge', 101, 'r1', 't1', 'api', 'parallel', '{}')",
             "DELETE FROM events WHERE rid = 'a2'"),
            ("INSERT INTO repos VALUES ('web', '/nowhere/web')", "DELETE FROM repos WHERE repo = 'web'"),
        ):
            container, batches = store_module.read_sqlite(store)  # the first connection's snapshot
            writer.execute(change)
            writer.commit()
            kinds, frame = collect(batches)
            assert "restart" in kinds, change  # the Arrow reader saw another store: the first connection read
            assert frame["rid"].to_list() == ["a1"] and ("web", "/nowhere/web") not in container.repos
            writer.execute(undo)
            writer.commit()
    finally:
        writer.close()
    _, batches = store_module.read_sqlite(store)
    assert collect(batches)[0] == ["sqlite"]  # nothing changed meanwhile: the Arrow reader reads


@pytest.mark.slow
def test_ingest_streams_in_batches_with_the_same_result(sample, tmp_path):
    _, store, _, events = sample
    small, whole = Warehouse(tmp_path / "small"), Warehouse(tmp_path / "whole")
    assert ingest_forge(small, store, batch_rows=97).stored == len(events)
    ingest_forge(whole, store)
    assert small.read(t.TASKS).equals(whole.read(t.TASKS))
    assert small.read(t.EVENTS).drop("ingested_at").sort("rid").equals(whole.read(t.EVENTS).drop("ingested_at").sort("rid"))


@pytest.mark.slow
def test_a_first_ingest_takes_the_staged_files_and_stores_what_the_comparing_path_stores(sample, tmp_path):
    # a first ingest writes the tables' files as it stages; a warehouse holding Forge tables already
    # compares the staged events with the stored ones and adds the new rows: the same tables
    tmp, store, _, events = sample
    first = Warehouse(tmp_path / "first")
    assert ingest_forge(first, store, batch_rows=97).stored == len(events)
    attempt_files = list(first.table_dir(t.ATTEMPT_EVENTS).glob("*.parquet"))
    assert len(attempt_files) > 1  # one file per batch, taken as written
    compared = Warehouse(tmp_path / "compared")
    assert ingest_forge(compared, write_store(tmp_path / "empty.sqlite", [])).stored == 0
    assert ingest_forge(compared, store, batch_rows=97).stored == len(events)
    assert len(list(compared.table_dir(t.ATTEMPT_EVENTS).glob("*.parquet"))) == 1
    for name in (*t.FORGE_TABLES,):
        if name in (t.REPOS, t.REJECTIONS) or not first.has_table(name):
            continue
        left, right = first.read(name), compared.read(name)
        assert left.schema == right.schema, name
        left, right = (frame.drop([c for c in ("ingested_at", "source") if c in frame.columns]) for frame in (left, right))
        keys = [column for column, dtype in left.schema.items() if not dtype.is_nested()]
        assert left.sort(keys, nulls_last=True).equals(right.sort(keys, nulls_last=True)), name


def test_a_first_ingest_of_a_store_repeating_a_rid_compares_its_events(tmp_path):
    repeated = [event("a1", "attempt", 100, task="t1", data={"n": 1, "status": "started"}),
                event("a2", "attempt", 101, task="t1", data={"n": 1, "status": "passed"}),
                event("a1", "attempt", 100, task="t1", data={"n": 1, "status": "started"}),
                event("a2", "attempt", 102, task="t1", data={"n": 1, "status": "failed"})]
    export = samples.write_jsonl(tmp_path / "export.jsonl", [("api", "/repos/api")], repeated)
    warehouse = Warehouse(tmp_path / "w")
    result = ingest_forge(warehouse, export, batch_rows=2)
    assert (result.stored, result.duplicates, result.rejected) == (2, 1, 1)
    assert result.rejections[0].rid == "a2" and result.rejections[0].field == "rid"
    assert sorted(warehouse.read(t.ATTEMPT_EVENTS)["rid"].to_list()) == ["a1", "a2"]
    assert warehouse.read(t.ATTEMPTS)["passed"].to_list() == [True]


def test_a_second_writer_waits_or_leaves(sample, tmp_path):
    _, store, _, _ = sample
    warehouse = Warehouse(tmp_path / "w")
    holding, release = threading.Event(), threading.Event()

    def hold():
        with warehouse.lock(command="test"):
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(10)
    try:
        result = run_cli("ingest", "forge", str(store), warehouse=warehouse.root, check=None)
    finally:
        release.set()
        thread.join()
    assert result.returncode == 4 and "locked by" in result.stderr


def test_help_does_not_import_the_heavy_libraries():
    code = ("import sys; from loopmeter.cli import app; import loopmeter.commands.forge; "
            "print(sorted(m for m in ('polars', 'duckdb', 'pyarrow') if m in sys.modules))")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    result = run_cli("ingest", "forge", "--help", process=True, check=None)
    assert result.returncode == 0 and "STORE" in result.stdout


def test_a_plan_of_twenty_thousand_tasks_is_staged_within_the_sessions_memory(tmp_path):
    """Listing a plan's tasks with json_each copied the tasks text into every task's row: a plan of 5,000
    tasks (0.4 MB) ran the 384 MB session out of memory. A repeated task id keeps its first place and its
    last value, as json.loads keeps it."""
    tasks = {f"t{i}": {"difficulty": "low", "route": [{"id": f"d{i}", "model": "m", "propensity": 0.5}]} for i in range(20_000)}
    text = json.dumps({"rid": "p1", "kind": "plan", "ts": 100, "run": "r1", "data": {"revision": 1, "tasks": tasks}})
    text = text[:-3] + ', "t1": {"difficulty": "high"}}}}'  # t1 again, at the end of the tasks
    export = tmp_path / "export.jsonl"
    export.write_text(text + "\n")
    warehouse = Warehouse(tmp_path / "w")
    with warehouse.lock():
        result = ingest_forge(warehouse, export)
    assert (result.stored, result.rejected) == (1, 0)
    rows = warehouse.read("forge_plan_tasks").sort("place")
    assert rows.height == 20_000 and rows["place"].to_list() == list(range(1, 20_001))
    repeated = rows.filter(pl.col("task") == "t1").row(0, named=True)
    assert (repeated["place"], repeated["tier"], repeated["route_length"]) == (2, "high", 0)
