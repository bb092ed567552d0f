"""`ingest forge` on stores made to hurt it, each run as a user runs it (a real `loopmeter` process).

- A store that is not a regular file (a named FIFO, a shell's `<(...)` pipe, a character device) is
  refused in one line before anything is read: a pipe cannot be looked at twice, a FIFO waits for a
  writer, /dev/zero never ends.
- One record over 4 MiB (a JSON Lines line, a SQLite value) is that record's rejection, naming the line
  or rid, the field and the rule; the rest is stored, and memory stays as it is for ordinary events.
- A WAL-mode store is read with what its -wal holds committed, and nothing is created or changed
  beside it, in a folder the user may not write too.
- A store whose events or repos are a view (one that never ends) or a virtual table is refused.
- Ctrl-C ends the ingest within a second or two with exit 130 and its one line, while it waits for a
  writer's lock on the store and while it reads and checks the store.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import file_powers_dropper
from forge_fixtures import ROOT
from loopmeter.forge import samples
from loopmeter.forge import tables as t
from loopmeter.forge.store import MAX_RECORD_BYTES
from loopmeter.storage import Warehouse

MIB = 1024 * 1024
REPOS = [("api", "/nowhere/api"), ("web", "/nowhere/web"), ("cli", "/nowhere/cli")]
LIMIT_RULE = "may hold at most 4 MiB (4,194,304 bytes)"


def loopmeter(*args: str, timeout: float = 120, prefix: tuple[str, ...] = (), shell: str | None = None,
              measure: bool = False, preexec=None) -> subprocess.CompletedProcess:
    """`loopmeter ARGS` in a fresh process (under `prefix`; or as a bash command line `shell`, whose
    `LOOPMETER` stands for the program; `preexec`: run in the child before the exec); `measure`: under
    /usr/bin/time -v."""
    program = [sys.executable, "-m", "loopmeter"]
    if shell is not None:
        command = ["bash", "-c", shell.replace("LOOPMETER", " ".join(program))]
    else:
        command = [*prefix, *(["/usr/bin/time", "-v"] if measure else []), *program, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=timeout, preexec_fn=preexec)


def peak_rss_mib(done: subprocess.CompletedProcess) -> float:
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1)) / 1024


def loopmeter_lines(stderr: str) -> list[str]:
    """loopmeter's closing lines on stderr (not the rejections listed, nor /usr/bin/time's report)."""
    return [line for line in stderr.splitlines() if line.startswith("loopmeter:")]


def events(runs: int = 50) -> list[dict]:
    return samples.routing_events(runs)


def stored_rids(warehouse: Path) -> set[str]:
    return set(Warehouse(warehouse).read(t.EVENTS, columns=["rid"])["rid"].to_list())


def rejections(warehouse: Path) -> list[dict]:
    return Warehouse(warehouse).read(t.REJECTIONS).select("line", "rid", "field", "rule").to_dicts()


def fingerprint(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


# ---- a store that is not a regular file -------------------------------------------------

def assert_refused_as_not_a_file(done: subprocess.CompletedProcess, shown: str, kind: str, warehouse: Path) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("loopmeter: error: "), done.stderr
    assert shown in lines[0] and f"is {kind}, not a regular file" in lines[0], lines[0]
    assert "copy it to a file first" in lines[0], lines[0]
    assert not warehouse.exists()  # refused before the warehouse was opened


def test_an_export_read_through_a_shell_pipe_is_refused_before_anything_is_read(tmp_path):
    """`loopmeter ingest forge <(cat export.jsonl)`: the format sniff would take the pipe's first MiB."""
    export = samples.write_jsonl(tmp_path / "export.jsonl", REPOS, events(400))
    assert export.stat().st_size > 2 * MIB  # more than what the sniff reads
    warehouse = tmp_path / "w"
    done = loopmeter(shell=f"LOOPMETER ingest forge <(cat {export}) --warehouse {warehouse}")
    assert_refused_as_not_a_file(done, "/dev/fd/", "a pipe", warehouse)


def test_a_named_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "export.jsonl"
    os.mkfifo(fifo)
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(fifo), "--warehouse", str(warehouse), timeout=60)  # never waits for a writer
    assert_refused_as_not_a_file(done, str(fifo), "a pipe", warehouse)


def test_a_symbolic_link_to_a_fifo_is_refused_too(tmp_path):
    fifo = tmp_path / "queue"
    os.mkfifo(fifo)
    link = tmp_path / "dataset.sqlite"
    link.symlink_to(fifo)
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(link), "--warehouse", str(warehouse), timeout=60)
    assert_refused_as_not_a_file(done, str(link), "a pipe", warehouse)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_character_device_is_refused(tmp_path, device):
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", device, "--warehouse", str(warehouse), timeout=60)
    assert_refused_as_not_a_file(done, device, "a character device", warehouse)


# ---- one record over the limit ----------------------------------------------------------

def oversize_event(rid: str, data_bytes: int) -> dict:
    return samples.routing_events(1)[0] | {"rid": rid, "data": {"blob": "x" * data_bytes}}


@pytest.mark.slow
def test_a_32_mb_json_lines_event_is_rejected_naming_its_line_and_the_rest_is_stored(tmp_path):
    ordinary = events(50)
    store = samples.write_jsonl(tmp_path / "export.jsonl", REPOS, ordinary[:100] + [oversize_event("big-1", 32 * MIB)]
                                + ordinary[100:])
    line = len(REPOS) + 101
    size = len(store.read_bytes().split(b"\n")[line - 1])
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse), measure=True)
    assert done.returncode == 3, done.stderr
    shown = f"rejected {store}:{line}: line: is {size:,} bytes long; a line {LIMIT_RULE}"
    assert shown in done.stderr.splitlines(), done.stderr
    assert loopmeter_lines(done.stderr) == [f"loopmeter: 1 of {len(ordinary) + len(REPOS) + 1} rejected; the rest is stored"]
    assert stored_rids(warehouse) == {e["rid"] for e in ordinary}
    assert len(Warehouse(warehouse).read(t.REPOS)) == len(REPOS)
    assert rejections(warehouse) == [{"line": line, "rid": None, "field": "line",
                                      "rule": f"is {size:,} bytes long; a line {LIMIT_RULE}"}]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["first", "last without a newline", "alone"])
def test_an_oversize_line_anywhere_is_that_line_s_rejection(tmp_path, where):
    ordinary = [json.dumps(e) for e in events(20)]
    big = json.dumps(oversize_event("big-1", 9 * MIB))
    lines = {"first": [big, *ordinary], "last without a newline": [*ordinary, big], "alone": [big]}[where]
    store = tmp_path / "export.jsonl"
    store.write_text("\n".join(lines) + ("" if where == "last without a newline" else "\n"))
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse))
    assert done.returncode == 3, done.stderr
    line = lines.index(big) + 1
    assert f"rejected {store}:{line}: line: is {len(big):,} bytes long; a line {LIMIT_RULE}" in done.stderr, done.stderr
    assert stored_rids(warehouse) == {json.loads(text)["rid"] for text in lines if text != big}
    assert [r["line"] for r in rejections(warehouse)] == [line]


@pytest.mark.slow
def test_an_event_just_under_the_limit_is_stored(tmp_path):
    near = oversize_event("near-1", MAX_RECORD_BYTES - 1000)
    assert len(json.dumps(near)) <= MAX_RECORD_BYTES
    ordinary = events(10)
    for store in (samples.write_jsonl(tmp_path / "export.jsonl", REPOS, ordinary + [near]),
                  samples.write_sqlite(tmp_path / "dataset.sqlite", REPOS, ordinary + [near])):
        warehouse = tmp_path / f"w-{store.suffix}"
        done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse))
        assert done.returncode == 0, done.stderr
        assert "near-1" in stored_rids(warehouse)


@pytest.mark.slow
def test_an_export_of_many_events_near_the_limit_is_stored_a_few_at_a_time(tmp_path):
    """Forty events of almost 4 MiB: checked together they would take DuckDB past its memory limit."""
    near = [oversize_event(f"near-{i}", MAX_RECORD_BYTES - 1000) for i in range(40)]
    ordinary = events(10)
    store = samples.write_jsonl(tmp_path / "export.jsonl", REPOS, ordinary[:100] + near + ordinary[100:])
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse), measure=True)
    assert done.returncode == 0, done.stderr
    assert stored_rids(warehouse) == {e["rid"] for e in ordinary + near}


@pytest.mark.slow
def test_a_100_mb_sqlite_data_value_is_rejected_by_rid_with_memory_as_for_ordinary_events(tmp_path):
    ordinary = events(50)
    plain = samples.write_sqlite(tmp_path / "plain" / "dataset.sqlite", REPOS, ordinary)
    store = samples.write_sqlite(tmp_path / "big" / "dataset.sqlite", REPOS,
                                 ordinary[:100] + [oversize_event("big-1", 100 * MIB)] + ordinary[100:])
    size = len(json.dumps({"blob": "x" * (100 * MIB)}, separators=(",", ":")))
    base = loopmeter("ingest", "forge", str(plain), "--warehouse", str(tmp_path / "w-plain"), measure=True)
    assert base.returncode == 0, base.stderr
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse), measure=True)
    assert done.returncode == 3, done.stderr
    rule = f"is {size:,} bytes long; a value {LIMIT_RULE}"
    assert f"rejected {store} rid big-1: data: {rule}" in done.stderr.splitlines(), done.stderr
    assert stored_rids(warehouse) == {e["rid"] for e in ordinary}
    assert rejections(warehouse) == [{"line": None, "rid": "big-1", "field": "data", "rule": rule}]
    # the value is measured, never read: the peak is an ordinary ingest's, not 100 MB more
    assert peak_rss_mib(done) < peak_rss_mib(base) + 48, (peak_rss_mib(done), peak_rss_mib(base))


@pytest.mark.slow
@pytest.mark.parametrize("rowid", [True, False], ids=["rowid table", "WITHOUT ROWID"])
def test_an_oversize_rid_or_kind_is_named_with_its_rid_cut(tmp_path, rowid):
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", REPOS, events(5))
    if not rowid:  # the same store as a WITHOUT ROWID table: measured as it is read
        db = sqlite3.connect(store)
        db.execute("ALTER TABLE events RENAME TO old_events")
        db.execute("CREATE TABLE events(rid TEXT PRIMARY KEY, kind TEXT, src TEXT, ts REAL, run TEXT, task TEXT, "
                   "repo TEXT, mode TEXT, data TEXT) WITHOUT ROWID")
        db.execute("INSERT INTO events SELECT * FROM old_events")
        db.execute("DROP TABLE old_events")
        db.commit()
        db.close()
    long_rid = "r" * (9 * MIB)
    db = sqlite3.connect(store)
    db.execute("INSERT INTO events VALUES (?, 'attempt', 'forge', 100, 'r1', 't1', 'api', 'parallel', '{}')", (long_rid,))
    db.execute("INSERT INTO events VALUES ('kind-1', ?, 'forge', 100, 'r1', 't1', 'api', 'parallel', '{}')", ("k" * (9 * MIB),))
    db.commit()
    db.close()
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse))
    assert done.returncode == 3, done.stderr
    found = {r["field"]: r for r in rejections(warehouse)}
    assert set(found) == {"rid", "kind"}, found
    assert found["rid"]["rid"] == "r" * 200 + "..." and found["rid"]["rule"] == f"is {9 * MIB:,} bytes long; a value {LIMIT_RULE}"
    assert found["kind"]["rid"] == "kind-1" and found["kind"]["rule"] == f"is {9 * MIB:,} bytes long; a value {LIMIT_RULE}"
    assert stored_rids(warehouse) == {e["rid"] for e in events(5)}


# ---- a WAL-mode store -------------------------------------------------------------------

def wal_store(folder: Path, *, leave_wal: bool) -> tuple[Path, set[str]]:
    """A WAL-mode store whose last events are committed in its -wal only (a writer that was killed,
    or is still running, leaves them there); `leave_wal` False: closed cleanly, no -wal."""
    folder.mkdir(parents=True, exist_ok=True)
    all_events = events(10)
    store = samples.write_sqlite(folder / "build" / "dataset.sqlite", REPOS, all_events[:50])
    writer = sqlite3.connect(store)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [(e["rid"], e["kind"], e["src"], e["ts"], e["run"], e["task"], e["repo"], e["mode"],
                         json.dumps(e["data"])) for e in all_events[50:]])
    writer.commit()
    if leave_wal:
        for suffix in ("", "-wal"):  # as a killed writer leaves them (no -shm)
            shutil.copyfile(f"{store}{suffix}", folder / f"dataset.sqlite{suffix}")
        writer.close()
    else:
        writer.close()
        shutil.copyfile(store, folder / "dataset.sqlite")
    shutil.rmtree(folder / "build")
    return folder / "dataset.sqlite", {e["rid"] for e in all_events}


@pytest.mark.slow
@pytest.mark.parametrize("leave_wal", [True, False], ids=["committed rows only in -wal", "no -wal"])
def test_a_wal_store_is_read_whole_and_nothing_beside_it_is_created_or_changed(tmp_path, leave_wal):
    store, rids = wal_store(tmp_path / "forge", leave_wal=leave_wal)
    before = fingerprint(store.parent)
    assert ("dataset.sqlite-wal" in before) == leave_wal and "dataset.sqlite-shm" not in before
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse))
    assert done.returncode == 0, done.stderr
    assert stored_rids(warehouse) == rids  # what the -wal holds committed included
    assert fingerprint(store.parent) == before  # no -shm, no -wal created; nothing checkpointed


@pytest.mark.slow
def test_a_wal_store_in_a_folder_the_user_may_not_write_is_read(tmp_path):
    """The folder is 0555; as root, the ingest runs without the powers that pass over permissions."""
    base = Path(tempfile.mkdtemp(prefix="loopmeter-readonly-"))
    try:
        os.chmod(base, 0o755)
        store, rids = wal_store(base / "forge", leave_wal=True)
        os.chmod(store.parent, 0o555)
        for path in store.parent.iterdir():
            os.chmod(path, 0o444)
        warehouse = base / "w"
        warehouse.mkdir()
        os.chmod(warehouse, 0o777)
        before = fingerprint(store.parent)
        done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse), preexec=file_powers_dropper())
        assert done.returncode == 0, done.stderr
        assert "readonly" not in done.stderr
        assert stored_rids(warehouse) == rids
        assert fingerprint(store.parent) == before
    finally:
        os.chmod(base / "forge", 0o755)
        shutil.rmtree(base, ignore_errors=True)


# ---- events or repos that are not tables -------------------------------------------------

ENDLESS_VIEW = ("CREATE VIEW events AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                "SELECT 'e' || i AS rid, 'attempt' AS kind, 'forge' AS src, 100.0 + i AS ts, 'r1' AS run, "
                "'t1' AS task, 'api' AS repo, 'parallel' AS mode, '{}' AS data FROM n")


@pytest.mark.parametrize("table, definition, found", [
    ("events", ENDLESS_VIEW, "a view"),
    ("repos", "CREATE VIEW repos AS SELECT 'api' AS repo, '/nowhere/api' AS path", "a view"),
    ("events", "CREATE VIRTUAL TABLE events USING fts5(rid, kind, src, ts, run, task, repo, mode, data)",
     "a virtual table"),
])
def test_events_or_repos_that_are_not_tables_are_refused(tmp_path, table, definition, found):
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", REPOS, events(2))
    db = sqlite3.connect(store)
    db.execute(f"DROP TABLE {table}")
    db.execute(definition)
    db.commit()
    db.close()
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse), timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0] == (f"loopmeter: error: {store}: {table} is {found}, not a table; a Forge store's events and "
                        "repos are tables (format version 1), whose rows are stored, not computed")


# ---- Ctrl-C -------------------------------------------------------------------------------

def start(store: Path, warehouse: Path, *options: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "loopmeter", "ingest", "forge", str(store), "--warehouse",
                             str(warehouse), "-q", *options], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def wait_until(process: subprocess.Popen, ready, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"the ingest ended before {what}: {process.stderr.read()}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.005)


def has_open(pid: int, path: Path) -> bool:
    folder = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(folder / fd) == str(path) for fd in os.listdir(folder))
    except (FileNotFoundError, PermissionError):  # an fd closed meanwhile
        return False


def interrupt(process: subprocess.Popen) -> tuple[float, str]:
    """SIGINT, as Ctrl-C sends it; the seconds until the process ended, and its stderr."""
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return time.monotonic() - sent, stderr


def assert_answered(process: subprocess.Popen, seconds: float, stderr: str) -> None:
    assert process.returncode == 130, (process.returncode, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopmeter: interrupted; "), stderr


def test_ctrl_c_while_the_ingest_waits_for_a_writer_s_lock_on_the_store(tmp_path):
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", REPOS, events(5))
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")  # a Forge writer committing: readers wait
    try:
        ingest = start(store, tmp_path / "w", "--busy-timeout", "120")
        wait_until(ingest, lambda: has_open(ingest.pid, store), "opened the store")
        seconds, stderr = interrupt(ingest)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert_answered(ingest, seconds, stderr)
    assert not Warehouse(tmp_path / "w").has_table(t.EVENTS)


def large_store(path: Path, count: int) -> Path:
    """`count` small attempt events, written fast."""
    store = samples.write_sqlite(path, REPOS, [])
    db = sqlite3.connect(store)
    db.executemany("INSERT INTO events VALUES (?, 'attempt', 'forge', ?, ?, 't1', 'api', 'parallel', ?)",
                   ((f"a{i}", 1_700_000_000 + i, f"r{i // 20}", '{"attempt": 1, "model": "m"}') for i in range(count)))
    db.commit()
    db.close()
    return store


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["reading", "checking"])
def test_ctrl_c_while_the_store_is_read_and_checked(tmp_path, stage):
    store = large_store(tmp_path / "dataset.sqlite", 1_500_000)
    warehouse = tmp_path / "w"
    ingest = start(store, warehouse)
    scratch = warehouse / ".scratch"
    if stage == "reading":
        ready = lambda: has_open(ingest.pid, store)  # noqa: E731
    else:  # a batch was checked: its files are in the scratch directory
        ready = lambda: any_parquet(scratch)  # noqa: E731
    wait_until(ingest, ready, f"began {stage}")
    seconds, stderr = interrupt(ingest)
    assert_answered(ingest, seconds, stderr)
    assert not Warehouse(warehouse).has_table(t.EVENTS)


def any_parquet(folder: Path) -> bool:
    try:
        return any(folder.rglob("*.parquet"))
    except FileNotFoundError:  # a scratch directory removed while it was looked through
        return False


@pytest.mark.slow
@pytest.mark.parametrize("reader", ["arrow", "exact"])
def test_a_sqlite_store_of_many_events_near_the_limit_is_stored_a_few_at_a_time(tmp_path, reader):
    """Forty values of almost 4 MiB in a SQLite store, read by either reader (one row whose src is a
    number sends the whole store to the exact one): checked together they would take DuckDB past its
    memory limit, so a batch ends once its large values reach 4 MiB."""
    near = [oversize_event(f"near-{i}", MAX_RECORD_BYTES - 1000) for i in range(40)]
    ordinary = events(10)
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", REPOS, ordinary[:100] + near + ordinary[100:])
    if reader == "exact":
        db = sqlite3.connect(store)
        db.execute("UPDATE events SET src = 7 WHERE rid = ?", (ordinary[0]["rid"],))
        db.commit()
        db.close()
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse), measure=True)
    assert done.returncode in (0, 3), done.stderr
    assert {e["rid"] for e in near} <= stored_rids(warehouse)
    assert peak_rss_mib(done) < 1024, peak_rss_mib(done)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_data_of_dense_arrays_is_checked_a_few_events_at_a_time(tmp_path, kind):
    """Events whose `data` is a dense JSON array (31,745 numbers in 63 KiB, under the size that makes a record
    large): parsed, each takes DuckDB about 28 bytes a number, so a batch of them ends by their commas, not
    their bytes. 400 of them in JSON Lines (25 MB), 1,200 in SQLite, took a batch past the memory limit it is
    checked in."""
    count = 400 if kind == "jsonl" else 1200
    array = "[" + "0," * (31 * 1024) + "0]"
    if kind == "jsonl":
        store = tmp_path / "dense.jsonl"
        store.write_text("".join(json.dumps({"rid": f"m{i}", "kind": "event", "src": "x", "ts": 1767601219, "run": "r1"})[:-1]
                                 + f', "data": {{"x": {array}}}}}\n' for i in range(count)))
    else:
        store = samples.write_sqlite(tmp_path / "dense.sqlite", REPOS, [])
        db = sqlite3.connect(store)
        db.executemany("INSERT INTO events (rid, kind, src, ts, run, data) VALUES (?, 'event', 'x', 1767601219, 'r1', ?)",
                       [(f"m{i}", f'{{"x": {array}}}') for i in range(count)])
        db.commit()
        db.close()
    warehouse = tmp_path / "w"
    done = loopmeter("ingest", "forge", str(store), "--warehouse", str(warehouse), measure=True)
    assert done.returncode == 0, done.stderr
    assert len(stored_rids(warehouse)) == count
    assert peak_rss_mib(done) < 1024, peak_rss_mib(done)
