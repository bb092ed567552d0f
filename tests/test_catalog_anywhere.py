"""loopmeter.duckdb as BI tools and notebooks meet it: opened from any working directory with no
setup, by DuckDB 2.x and by the 1.x line; repaired by the next command after the warehouse is
copied or moved; `loopmeter catalog`; `loopmeter sql` while another program holds the file open
for writing. Everything runs the installed `loopmeter` and DuckDB clients in processes of their
own, each in a working directory of its own."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import run_cli
from loopmeter.storage import Warehouse

# A DuckDB client as a notebook or BI tool is one: the file opened with the options given, every
# view counted, the comments read. A view that fails is reported with its error.
CLIENT = r'''
import json, os, sys
import duckdb

path, mode = sys.argv[1], sys.argv[2]
connection = duckdb.connect(path, read_only=(mode == "read-only"))
views = dict(connection.sql("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall())
counts = {}
for name in views:
    try:
        counts[name] = connection.sql(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
    except duckdb.Error as error:
        counts[name] = "error: " + " ".join(str(error).split())[:200]
print(json.dumps({
    "duckdb": duckdb.__version__,
    "cwd": os.getcwd(),
    "counts": counts,
    "sql": views,
    "comments": dict(connection.sql("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal").fetchall()),
    "columns": connection.sql("SELECT table_name, column_name, comment FROM duckdb_columns() "
                              "WHERE database_name = current_database()").fetchall(),
}))
'''

# Holds the file open read-write (DBeaver's default), says so, then runs a statement a line, answering
# each with the first value of its result.
HOLDER = r'''
import sys
import duckdb

connection = duckdb.connect(sys.argv[1])
connection.sql("SELECT count(*) FROM runs").fetchall()
print("held", flush=True)
for line in sys.stdin:
    result = connection.sql(line)
    print("done" if result is None else result.fetchall()[0][0], flush=True)
connection.close()
'''

DUCKDB1_CACHE = Path(os.environ.get("LOOPMETER_TEST_CACHE", Path.home() / ".cache" / "loopmeter-tests")) / "duckdb1"


def installed_loopmeter() -> str:
    """The console script installed beside this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "loopmeter"
    found = str(beside) if beside.exists() else shutil.which("loopmeter")
    if found is None:
        pytest.fail("no installed `loopmeter` command (pip install -e '.[test]')")
    return found


def loopmeter(*args: str, warehouse: Path, cwd: Path, check: int | None = 0) -> subprocess.CompletedProcess:
    """Run the installed `loopmeter ARGS --warehouse W` from the working directory `cwd`."""
    cwd.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([installed_loopmeter(), *args, "--warehouse", str(warehouse)], cwd=cwd,
                            capture_output=True, text=True, timeout=300)
    if check is not None:
        assert result.returncode == check, (args, result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    return result


def client(database: Path, cwd: Path, python: str = sys.executable, mode: str = "default") -> dict:
    """What a DuckDB client started in `cwd` sees in `database`."""
    cwd.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([python, "-c", CLIENT, str(database), mode], cwd=cwd, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def table_rows(warehouse: Path) -> dict[str, int]:
    """Every table of the warehouse (its links) and its rows, counted from the Parquet footers."""
    return {name: sum(pq.read_metadata(file).num_rows for file in (warehouse / name).rglob("*.parquet"))
            for name in Warehouse(warehouse).table_names()}


def copy_of(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target, symlinks=True)
    return target


def recorded_root(warehouse: Path) -> str:
    return json.loads((warehouse / ".state" / "catalog.json").read_text())["root"]


@pytest.fixture(scope="module")
def settled(tmp_path_factory, demo_warehouse) -> tuple[Path, dict[str, int]]:
    """A copy of the demo warehouse whose catalog `loopmeter catalog` rebuilt for its place, and
    its tables' rows (read-only for the tests)."""
    base = tmp_path_factory.mktemp("settled")
    warehouse = copy_of(demo_warehouse, base / "warehouse")
    loopmeter("catalog", "--quiet", warehouse=warehouse, cwd=base / "elsewhere")
    return warehouse, table_rows(warehouse)


@pytest.mark.slow
def test_the_demo_warehouse_answers_from_another_directory(demo_warehouse, tmp_path):
    """The warehouse as `loopmeter demo` leaves it, opened read-only (other tests read it meanwhile)."""
    seen = client(demo_warehouse / "loopmeter.duckdb", tmp_path / "elsewhere", mode="read-only")
    assert seen["cwd"] == str(tmp_path / "elsewhere")
    assert seen["counts"] == table_rows(demo_warehouse)
    assert seen["counts"]["runs"] == (30 + 5 + 5) * 6 * 3 and seen["counts"]["scenarios"] == 6


def test_every_view_answers_from_any_directory_with_a_plain_connect(settled, tmp_path):
    warehouse, rows = settled
    assert len(rows) >= 20 and rows["runs"] == 720 and sum(rows.values()) > 10_000
    seen = client(warehouse / "loopmeter.duckdb", tmp_path / "a" / "b")  # duckdb.connect(path): read-write
    assert seen["counts"] == rows
    root = os.path.realpath(warehouse)
    for name, sql in seen["sql"].items():
        assert f"'{root}/{name}/" in sql, sql  # an absolute path into the warehouse itself
    assert all(comment and comment != "(undocumented table)" for comment in seen["comments"].values()), seen["comments"]
    assert len(seen["columns"]) > 150
    assert [(table, column) for table, column, comment in seen["columns"] if not comment or comment == "(undocumented)"] == []


def test_the_file_is_written_in_the_v1_4_storage_format(settled):
    import duckdb

    warehouse, _ = settled
    header = (warehouse / "loopmeter.duckdb").read_bytes()[:20]
    assert header[8:12] == b"DUCK" and int.from_bytes(header[12:20], "little") == 67  # DuckDB 2.x's own is 69
    connection = duckdb.connect()
    connection.execute(f"ATTACH '{warehouse / 'loopmeter.duckdb'}' AS catalog (READ_ONLY)")
    tags = connection.sql("SELECT tags FROM duckdb_databases() WHERE database_name = 'catalog'").fetchall()[0][0]
    assert tags["storage_version"] == "v1.4.0+"


def duckdb1_python(spec: str = "duckdb<2") -> str:
    """A Python with DuckDB `spec` from PyPI (the latest 1.x by default), in a venv kept in a cache
    outside the repository and reused; made once, under a lock, by whichever test process comes first
    (`complete` is written last: a venv without it is made again)."""
    cache = DUCKDB1_CACHE if spec == "duckdb<2" else DUCKDB1_CACHE.with_name("duckdb-" + spec.replace("duckdb", "").strip("=<>*."))
    python, complete = cache / "bin" / "python", cache / "complete"
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not complete.exists():
            shutil.rmtree(cache, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(cache)], check=True, timeout=300)
            installed = subprocess.run([str(python), "-m", "pip", "install", "-q", spec],
                                       capture_output=True, text=True, timeout=900)
            if installed.returncode != 0:
                pytest.fail(f"could not install {spec} from PyPI: {installed.stderr[-2000:]}")
            complete.write_text(spec + "\n")
    return str(python)


# the latest 1.x, and the 1.4 long-term-support line that BI tools' drivers embed
@pytest.mark.slow
@pytest.mark.parametrize("spec, version", [("duckdb<2", "1."), ("duckdb==1.4.*", "1.4.")])
def test_duckdb_1x_reads_every_view_and_comment(settled, tmp_path, spec, version):
    warehouse, rows = settled
    seen = client(warehouse / "loopmeter.duckdb", tmp_path / "elsewhere", python=duckdb1_python(spec), mode="read-only")
    assert seen["duckdb"].startswith(version), seen["duckdb"]
    assert seen["counts"] == rows
    assert seen["comments"]["runs"].startswith("One row per accepted ForgeLoop benchmark run")
    assert [(table, column) for table, column, comment in seen["columns"] if not comment or comment == "(undocumented)"] == []
    assert len(seen["columns"]) > 150


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["report", "tail", "--json"],
    ["sql", "SELECT count(*) AS n FROM runs", "--format", "json"],
    ["schema", "--json"],
])
def test_a_moved_warehouse_is_repaired_by_the_next_command(settled, tmp_path, command):
    source, rows = settled
    original = copy_of(source, tmp_path / "original")
    loopmeter("catalog", "--quiet", warehouse=original, cwd=tmp_path / "elsewhere")
    moved = copy_of(original, tmp_path / "moved" / "warehouse")
    shutil.rmtree(original)
    stale = client(moved / "loopmeter.duckdb", tmp_path / "elsewhere")  # what a BI tool saw before: nothing
    assert all(str(count).startswith("error: IO Error: No files found") for count in stale["counts"].values()), stale["counts"]
    result = loopmeter(*command, warehouse=moved, cwd=tmp_path / "elsewhere")
    assert json.loads(result.stdout)  # the command did its own work too
    assert result.stderr == ""
    seen = client(moved / "loopmeter.duckdb", tmp_path / "somewhere else")
    assert seen["counts"] == rows
    assert all(f"'{moved}/" in sql for sql in seen["sql"].values())
    assert recorded_root(moved) == str(moved)


@pytest.mark.slow
def test_a_copy_stops_reading_the_originals_files(settled, tmp_path):
    """A copy whose original is still there: its views read the original's files until repaired."""
    original, rows = settled
    copy = copy_of(original, tmp_path / "copy")
    before = client(copy / "loopmeter.duckdb", tmp_path / "elsewhere")
    assert before["counts"] == rows and all(f"'{original}/" in sql for sql in before["sql"].values())  # the original's
    loopmeter("report", "summary", "--json", warehouse=copy, cwd=tmp_path / "elsewhere")
    after = client(copy / "loopmeter.duckdb", tmp_path / "elsewhere")
    assert after["counts"] == rows
    assert all(f"'{copy}/" in sql and str(original) not in sql for sql in after["sql"].values())


@pytest.mark.slow
def test_a_reader_leaves_the_catalog_to_a_writer_holding_the_lock(settled, tmp_path):
    source, rows = settled
    original = copy_of(source, tmp_path / "original")
    loopmeter("catalog", "--quiet", warehouse=original, cwd=tmp_path / "elsewhere")
    moved = copy_of(original, tmp_path / "moved")
    shutil.rmtree(original)
    database = moved / "loopmeter.duckdb"
    built = (database.stat().st_ino, (moved / ".state" / "catalog.json").read_text())
    with Warehouse(moved).lock(command="test writer"):
        loopmeter("report", "tail", "--json", warehouse=moved, cwd=tmp_path / "elsewhere")
        assert (database.stat().st_ino, (moved / ".state" / "catalog.json").read_text()) == built  # left as it was
        # sql answers all the same, from the tables where they are now (the same views, built in memory)
        answered = loopmeter("sql", "SELECT count(*) AS n FROM loopmeter.runs", "--format", "json", warehouse=moved,
                             cwd=tmp_path / "elsewhere")
        assert json.loads(answered.stdout) == [{"n": rows["runs"]}]
        busy = loopmeter("catalog", warehouse=moved, cwd=tmp_path / "elsewhere", check=4)
        assert "is locked by pid" in busy.stderr and "(test writer)" in busy.stderr
    loopmeter("sql", "SELECT 1 AS one", "--format", "json", warehouse=moved, cwd=tmp_path / "elsewhere")
    assert database.stat().st_ino != built[0] and recorded_root(moved) == str(moved)
    assert client(database, tmp_path / "elsewhere")["counts"] == rows


def test_nothing_is_imported_or_written_when_the_catalog_is_current(settled, tmp_path):
    """Opening a warehouse whose catalog is current reads .state/catalog.json and lists the folder:
    no DuckDB import, nothing written. A moved one is rebuilt (DuckDB imported)."""
    source, _ = settled
    warehouse = copy_of(source, tmp_path / "warehouse")
    probe = ("import sys; from pathlib import Path; from loopmeter.operations.common import open_warehouse; "
             "open_warehouse(Path(sys.argv[1])); print('duckdb' in sys.modules)")
    moved = subprocess.run([sys.executable, "-c", probe, str(warehouse)], capture_output=True, text=True, check=True)
    assert moved.stdout.strip() == "True" and recorded_root(warehouse) == str(warehouse)
    built = (warehouse / "loopmeter.duckdb").stat()
    current = subprocess.run([sys.executable, "-c", probe, str(warehouse)], capture_output=True, text=True, check=True)
    assert current.stdout.strip() == "False", current.stderr
    after = (warehouse / "loopmeter.duckdb").stat()
    assert (after.st_ino, after.st_mtime_ns) == (built.st_ino, built.st_mtime_ns)


@pytest.mark.slow
def test_loopmeter_catalog_rebuilds_and_says_what_it_built(settled, tmp_path):
    source, rows = settled
    warehouse = copy_of(source, tmp_path / "warehouse")
    loopmeter("catalog", "--quiet", warehouse=warehouse, cwd=tmp_path / "elsewhere")
    database = warehouse / "loopmeter.duckdb"
    first = database.stat().st_ino
    built = json.loads(loopmeter("catalog", "--json", warehouse=warehouse, cwd=tmp_path / "elsewhere").stdout)
    assert built == {"database": str(database), "views": len(rows), "root": str(warehouse), "storageVersion": "v1.4.0"}
    assert database.stat().st_ino != first  # rebuilt, though nothing had changed
    text = loopmeter("catalog", warehouse=warehouse, cwd=tmp_path / "elsewhere").stdout
    assert text == f"{database}: {len(rows)} views reading the tables under {warehouse} (DuckDB storage v1.4.0: read by DuckDB 1.4 and later)\n"
    assert client(database, tmp_path / "elsewhere")["counts"] == rows
    assert not list(warehouse.glob(".loopmeter.duckdb.*"))  # no temporary file left
    empty = loopmeter("catalog", warehouse=tmp_path / "empty", cwd=tmp_path / "elsewhere", check=1)
    assert empty.stderr == f"loopmeter: error: no tables in {tmp_path / 'empty'}; ingest something first (or run `loopmeter demo`)\n"
    assert not (tmp_path / "empty").exists()
    assert "Example:" in loopmeter("catalog", "--help", warehouse=warehouse, cwd=tmp_path / "elsewhere").stdout


@pytest.mark.slow
def test_loopmeter_catalog_wait_waits_for_the_writer(settled, tmp_path):
    source, rows = settled
    warehouse = copy_of(source, tmp_path / "warehouse")
    loopmeter("catalog", "--quiet", warehouse=warehouse, cwd=tmp_path / "elsewhere")
    first = (warehouse / "loopmeter.duckdb").stat().st_ino
    with Warehouse(warehouse).lock(command="test writer"):
        waiting = subprocess.Popen([installed_loopmeter(), "catalog", "--wait", "--json", "--warehouse", str(warehouse)],
                                   cwd=tmp_path / "elsewhere", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = waiting.stderr.readline()  # it says it waits, then waits for the lock
        assert "waiting for the warehouse lock held by" in said and "(test writer)" in said, said
        assert waiting.poll() is None and (warehouse / "loopmeter.duckdb").stat().st_ino == first
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert json.loads(out)["views"] == len(rows) and (warehouse / "loopmeter.duckdb").stat().st_ino != first


@pytest.fixture
def held(settled, tmp_path):
    """A settled copy whose loopmeter.duckdb another process holds open read-write, as DBeaver does:
    (warehouse, rows, the holder). The holder has said it holds the file before the test starts."""
    source, rows = settled
    warehouse = copy_of(source, tmp_path / "warehouse")
    loopmeter("catalog", "--quiet", warehouse=warehouse, cwd=tmp_path / "elsewhere")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(warehouse / "loopmeter.duckdb")], cwd=tmp_path / "elsewhere",
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n", holder.stderr.read()
        yield warehouse, rows, holder
    finally:
        if holder.poll() is None:
            holder.stdin.close()
            holder.wait(timeout=60)
        for pipe in (holder.stdin, holder.stdout, holder.stderr):
            pipe.close()


@pytest.mark.slow
def test_sql_answers_while_another_program_holds_the_file_read_write(held, tmp_path):
    import duckdb

    warehouse, rows, holder = held
    with pytest.raises(duckdb.IOException, match="lock"):  # what every other process meets
        duckdb.connect(str(warehouse / "loopmeter.duckdb"), read_only=True)
    elsewhere = tmp_path / "elsewhere"
    result = loopmeter("sql", "SELECT count(*) AS n FROM loopmeter.runs", "--format", "json", warehouse=warehouse, cwd=elsewhere)
    assert json.loads(result.stdout) == [{"n": rows["runs"]}]
    assert result.stderr == ""  # `sql` builds its views in memory whatever holds the file
    quiet = loopmeter("sql", "SELECT count(*) AS n FROM forge_events", "--format", "json", "--quiet", warehouse=warehouse, cwd=elsewhere)
    assert json.loads(quiet.stdout) == [{"n": rows["forge_events"]}] and quiet.stderr == ""
    schema = json.loads(loopmeter("schema", "--json", "--quiet", warehouse=warehouse, cwd=elsewhere).stdout)
    assert {row["table"] for row in schema} == set(rows)
    assert all(row["comment"] and row["comment"] != "(undocumented)" for row in schema)
    # confined exactly as the file is
    for statement, message in [
        ("SELECT * FROM read_text('/etc/passwd')", "Permission Error"),
        ("SELECT * FROM read_text('../../../../etc/passwd')", "Permission Error"),
        (f"SELECT * FROM read_text('{warehouse.parent}/elsewhere/x')", "Permission Error"),
        ("CREATE TABLE x AS SELECT 1", "loopmeter sql is read-only: a CREATE statement is refused"),
        ("SET enable_external_access = true", "loopmeter sql is read-only: a SET statement is refused"),
        ("ATTACH ':memory:' AS other", "loopmeter sql is read-only: an ATTACH statement is refused"),
    ]:
        refused = loopmeter("sql", statement, "--quiet", warehouse=warehouse, cwd=elsewhere, check=1)
        assert message in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, (statement, refused.stderr)
    # a path inside the warehouse, relative to it, reads
    inside = loopmeter("sql", "SELECT count(*) AS n FROM read_parquet('runs/**/*.parquet')", "--format", "json", "--quiet",
                       warehouse=warehouse, cwd=elsewhere)
    assert json.loads(inside.stdout) == [{"n": rows["runs"]}]
    assert ask(holder, "SELECT count(*) FROM scenarios") == str(rows["scenarios"])  # the holder is not disturbed


def ask(holder: subprocess.Popen, statement: str) -> str:
    holder.stdin.write(statement + "\n")
    holder.stdin.flush()
    return holder.stdout.readline().strip()


@pytest.mark.slow
def test_a_rebuild_replaces_the_file_a_program_holds_open_and_the_holder_goes_on(held, tmp_path):
    """Even one that wrote into it: its write-ahead log, left beside the new file, would keep DuckDB
    from opening the new one ("WAL does not match database file")."""
    warehouse, rows, holder = held
    database = warehouse / "loopmeter.duckdb"
    ask(holder, "CREATE TABLE notes AS SELECT 1 AS n")
    assert (warehouse / "loopmeter.duckdb.wal").exists()
    before = database.stat().st_ino
    built = json.loads(loopmeter("catalog", "--json", warehouse=warehouse, cwd=tmp_path / "elsewhere").stdout)
    assert built["views"] == len(rows) and database.stat().st_ino != before  # renamed over the held file
    assert ask(holder, "SELECT count(*) FROM runs") == str(rows["runs"])  # still reading the file it opened
    ask(holder, "INSERT INTO notes VALUES (2)")
    assert ask(holder, "SELECT count(*) FROM notes") == "2"
    # the new file is nobody's: loopmeter sql opens it as it is, no note
    result = loopmeter("sql", "SELECT count(*) AS n FROM runs", "--format", "json", warehouse=warehouse, cwd=tmp_path / "elsewhere")
    assert json.loads(result.stdout) == [{"n": rows["runs"]}] and result.stderr == ""
    rebuilt = database.stat().st_ino
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0, holder.stderr.read()
    assert database.stat().st_ino == rebuilt and not (warehouse / "loopmeter.duckdb.wal").exists()
    seen = client(database, tmp_path / "elsewhere")
    assert seen["counts"] == rows and "notes" not in json.dumps(seen["columns"])  # the new file, whole


@pytest.mark.slow
def test_a_missing_catalog_is_rebuilt_by_the_next_command(settled, tmp_path):
    """As a writer killed before it renamed its new catalog into place leaves it."""
    source, rows = settled
    warehouse = copy_of(source, tmp_path / "warehouse")
    loopmeter("catalog", "--quiet", warehouse=warehouse, cwd=tmp_path / "elsewhere")
    (warehouse / "loopmeter.duckdb").unlink()
    result = loopmeter("report", "tail", "--json", warehouse=warehouse, cwd=tmp_path / "elsewhere")
    assert json.loads(result.stdout) and result.stderr == ""
    assert client(warehouse / "loopmeter.duckdb", tmp_path / "elsewhere")["counts"] == rows
    assert (warehouse / ".lock").read_text() == ""  # let go as a writer leaves it


def test_a_writer_keeps_the_catalog_it_built_and_builds_anew_one_changed_or_not_its_own(settled, tmp_path):
    """A table's new version changes nothing in its view (it reads through the table's link): a writer
    keeps the catalog its record says it built, as the file is. Changed in place (its size and
    modification time set back), or its record writable by others, the catalog is built anew."""
    source, rows = settled
    warehouse = copy_of(source, tmp_path / "warehouse")
    database, record = warehouse / "loopmeter.duckdb", warehouse / ".state" / "catalog.json"
    run_cli("catalog", "--quiet", warehouse=warehouse)
    built = database.stat()
    run_cli("aggregate", "--full", "--quiet", warehouse=warehouse)  # every forgeloop table a new version
    assert (database.stat().st_ino, database.stat().st_ctime_ns) == (built.st_ino, built.st_ctime_ns)
    assert client(database, tmp_path / "elsewhere")["counts"] == table_rows(warehouse) == rows

    with open(database, "r+b") as handle:  # another program writes in it, and sets its time back
        handle.seek(built.st_size // 2)
        handle.write(b"\xff" * 4096)
    os.utime(database, ns=(built.st_atime_ns, built.st_mtime_ns))
    assert (database.stat().st_size, database.stat().st_mtime_ns) == (built.st_size, built.st_mtime_ns)
    run_cli("aggregate", "--quiet", warehouse=warehouse)
    assert database.stat().st_ino != built.st_ino
    assert client(database, tmp_path / "elsewhere")["counts"] == rows
    assert run_cli("check", "--quiet", warehouse=warehouse).stderr == ""

    rebuilt = database.stat()
    record.chmod(0o666)  # anybody may have written what it says
    run_cli("aggregate", "--quiet", warehouse=warehouse)
    assert database.stat().st_ino != rebuilt.st_ino
    assert record.stat().st_mode & 0o777 == 0o644
