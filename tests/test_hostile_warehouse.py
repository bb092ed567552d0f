"""A warehouse folder is input too: copied, shared, kept on object storage, anyone may have put
anything in it. Each test here makes a warehouse hostile in one way (names that are SQL, names
that climb out, links and FIFOs and devices where loopmeter keeps its files, a catalog it did not
write, values that are paths) and runs real `loopmeter` processes on it. Whatever the command
answers, it answers in bounded time, in one line naming the file and the rule, and nothing
outside the warehouse (and the outputs asked for) is created, changed or removed: each test
compares a snapshot of everything beside the warehouse (its parent folder, a folder of a user's
files, the working directory of the commands) before and after.
"""
from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import stat
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from runs import run, write_tree

IS_ROOT = os.geteuid() == 0
BOUND = 60  # seconds: the bound a command that could hang must end within (a subprocess timeout, never asserted as a time)
WIDE = {"COLUMNS": "250"}
DEMO_RUNS = 720  # the runs of the demo's sample data


# ---- places -----------------------------------------------------------------------------------

def snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """Every entry under `root` (links not followed, `skip` left out) with what it is: a file's
    size, modification time and SHA-256, a link's target, a folder's modification time (a file
    created and removed again changes it), a FIFO's or device's type and device number."""
    skipped = {os.path.abspath(path) for path in skip}
    found: dict[str, tuple] = {}
    for directory, folders, files in os.walk(root, followlinks=False):
        folders[:] = [name for name in folders if os.path.join(directory, name) not in skipped]
        for name in sorted(folders + files):
            path = os.path.join(directory, name)
            if path in skipped:
                continue
            status = os.lstat(path)
            relative = os.path.relpath(path, root)
            mode = status.st_mode
            if stat.S_ISLNK(mode):
                found[relative] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
                found[relative] = ("file", status.st_size, status.st_mtime_ns, stat.S_IMODE(mode), digest)
            elif stat.S_ISDIR(mode):
                found[relative] = ("dir", status.st_mtime_ns, stat.S_IMODE(mode))
            else:
                found[relative] = ("special", stat.S_IFMT(mode), status.st_rdev, status.st_mtime_ns)
    return found


@dataclass
class Place:
    """A warehouse (`root/base/warehouse`, a copy), a folder of a user's files beside it
    (`root/outside`) and the working directory of the commands (`root/cwd`)."""

    root: Path
    warehouse: Path
    outside: Path
    cwd: Path

    def beside(self) -> dict[str, tuple]:
        """Everything under `root` but the warehouse: its parent folder, the user's files, the
        working directory (where a relative `COPY ... TO 'p.csv'` would land)."""
        return snapshot(self.root, skip=(self.warehouse,))

    def version(self, table: str) -> Path:
        return self.warehouse / os.readlink(self.warehouse / table)

    def run(self, *args: str, timeout: float = 90, env: dict | None = None) -> subprocess.CompletedProcess:
        return bounded(lambda: run_cli(*args, warehouse=self.warehouse, check=None, timeout=timeout, cwd=self.cwd,
                                       env=env), args, timeout)


def bounded(start, args, timeout: float) -> subprocess.CompletedProcess:
    try:
        return start()
    except subprocess.TimeoutExpired:
        raise AssertionError(f"loopmeter {' '.join(map(str, args))} did not end within {timeout} s (killed)") from None


def make_place(source: Path, root: Path, *, settle: bool = True) -> Place:
    """A copy of the warehouse `source` under `root`, with a user's files beside it. `settle`: its
    catalog rebuilt for the new place first (a copied warehouse's catalog names the old one)."""
    warehouse = root / "base" / "warehouse"
    warehouse.parent.mkdir(parents=True)
    shutil.copytree(source, warehouse, symlinks=True)
    outside = root / "outside"
    (outside / "victim" / "config").mkdir(parents=True)
    (outside / "victim" / "config" / "settings.txt").write_text("a user's settings\n")
    (outside / "notes.txt").write_text("a user's notes\n")
    cwd = root / "cwd"
    cwd.mkdir()
    place = Place(root, warehouse, outside, cwd)
    if settle:
        result = place.run("catalog", "--quiet")
        assert result.returncode == 0, described(result)
    return place


def described(result) -> str:
    args = list(map(str, result.args))
    if args[:2] == [sys.executable, "-m"]:
        args = args[3:]
    return (f"loopmeter {' '.join(args)}\nexit {result.returncode}\nstdout: {result.stdout[-2000:]!r}\n"
            f"stderr: {result.stderr[-4000:]!r}")


def assert_sane_stderr(result: subprocess.CompletedProcess, *, quiet: bool = True) -> None:
    """No traceback, no panic, no MemoryError; with --quiet, every line loopmeter's own."""
    for word in ("Traceback", "panicked", "MemoryError"):
        assert word not in result.stderr, described(result)
    if quiet:
        for line in result.stderr.splitlines():
            assert line.startswith("loopmeter:"), described(result)


def the_one_line(result: subprocess.CompletedProcess, code: int, prefix: str) -> str:
    """The command exited `code` with exactly one line on stderr, starting with `prefix`."""
    lines = result.stderr.splitlines()
    assert result.returncode == code and len(lines) == 1 and lines[0].startswith(prefix), described(result)
    return lines[0]


def for_each(commands, check) -> None:
    """`check(command)` for every command, each failure told (not only the first)."""
    failures = []
    for command in commands:
        try:
            check(command)
        except AssertionError as error:
            failures.append(f"[{' '.join(map(str, command))}] {error}")
    assert not failures, f"{len(failures)} of {len(commands)} commands:\n\n" + "\n\n".join(failures)


def names_one_of(line: str, *paths) -> bool:
    return any(str(path) in line for path in paths)


def catalog_views(warehouse: Path) -> set[str]:
    import duckdb

    connection = duckdb.connect(str(warehouse / "loopmeter.duckdb"), read_only=True)
    try:
        return {name for (name,) in connection.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        connection.close()


def table_links(warehouse: Path) -> dict[str, str]:
    return {entry.name: os.readlink(entry.path) for entry in os.scandir(warehouse)
            if entry.is_symlink() and os.readlink(entry.path).startswith(".versions/")}


@pytest.fixture
def place(demo_warehouse, tmp_path) -> Place:
    return make_place(demo_warehouse, tmp_path)


def the_file(folder: Path) -> Path:
    """The one Parquet file of a version or partition folder (whatever loopmeter names it)."""
    (found,) = sorted(folder.glob("*.parquet"))
    return found


def write_arrow(path: Path, table) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, path)


# ---- 1. SQL injection through names ---------------------------------------------------------

# A name cannot hold a slash: the COPY writes `p.csv` in the working directory of the command,
# which is outside the warehouse (and snapshotted).
LINK_NAMES = {
    "double quote": 'x" AS SELECT 1; COPY (SELECT 1) TO \'p.csv\'; CREATE VIEW "y',
    "single quote": "x'); COPY (SELECT 1) TO 'p.csv'; CREATE VIEW z AS (SELECT '",
}
NAME_READERS = [("report", "summary"), ("sql", "select 1"), ("catalog",), ("check",), ("report", "routing")]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LINK_NAMES))
def test_a_link_named_like_sql_is_never_a_table_and_runs_nothing(place, name):
    warehouse = place.warehouse
    link = warehouse / LINK_NAMES[name]
    link.symlink_to(os.readlink(warehouse / "runs"))  # a real version folder
    before = place.beside()

    def check(command):
        result = place.run(*command, "--quiet")
        assert_sane_stderr(result)
        for line in result.stderr.splitlines():  # the link is named, and left out: nothing else is said
            assert str(link) in line and "a symbolic link loopmeter did not make" in line, described(result)
        if command == ("check",):
            assert result.returncode in (0, 1), described(result)
        else:
            assert result.returncode == 0, described(result)
        assert place.beside() == before, described(result)

    for_each(NAME_READERS, check)
    assert link.name not in catalog_views(warehouse)
    assert catalog_views(warehouse) <= set(table_links(warehouse))
    listed = place.run("sql", "SELECT table_name FROM information_schema.tables", "--format", "csv", "--quiet")
    assert listed.returncode == 0, described(listed)
    assert link.name not in listed.stdout and "runs" in listed.stdout.splitlines()
    assert place.beside() == before


READING_IT = [("sql", "select count(*) from scenarios"), ("report", "summary")]


def sql_column(outside: Path) -> str:
    return f'x" AS SELECT 1; COPY (SELECT 1) TO \'{outside}/p.csv\'; CREATE VIEW "y'


@pytest.mark.slow
@pytest.mark.parametrize("how", ["an extra file with one more column", "a column renamed"])
def test_a_column_named_like_sql_refuses_its_table_in_one_line(place, how):
    import pyarrow as pa
    import pyarrow.parquet as pq

    warehouse, version = place.warehouse, place.version("scenarios")
    source = the_file(version)
    table = pq.read_table(source)
    if how == "a column renamed":
        target = source
        names = table.column_names
        names[1] = sql_column(place.outside)
        table = table.rename_columns(names)
    else:
        target = version / "part-99999.parquet"
        table = table.append_column(sql_column(place.outside), pa.array([1] * table.num_rows, pa.int64()))
    write_arrow(target, table)
    shown = (warehouse / "scenarios" / target.name, target)
    before = place.beside()

    def check(command):
        if command in READING_IT:  # the table is refused, in one line naming the file
            result = place.run(*command)
            line = the_one_line(result, 1, "loopmeter: error: ")
            assert names_one_of(line, *shown), described(result)
        else:
            result = place.run(*command, "--quiet")
            assert_sane_stderr(result)
            assert result.returncode in (0, 1), described(result)
            if result.returncode == 1:
                assert any(names_one_of(line, *shown) for line in result.stderr.splitlines()), described(result)
                if command != ("check",):
                    the_one_line(result, 1, "loopmeter: error: ")
        assert place.beside() == before, described(result)

    for_each([*READING_IT, *NAME_READERS], check)


# ---- 2. path traversal through values and partition folders ---------------------------------

def replace_column(path: Path, column: str, value: str) -> None:
    """The Parquet file at `path` with every value of `column` made `value`, in the same schema."""
    import polars as pl
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    frame = pl.read_parquet(path, hive_partitioning=False)
    frame = frame.with_columns(pl.lit(value, dtype=pl.String).alias(column))
    pq.write_table(frame.to_arrow().cast(schema), path)


@pytest.mark.slow
@pytest.mark.parametrize("value", ["../../../victim/config", "ROOT/victim/config"])
def test_a_scenario_id_that_is_a_path_writes_no_document_anywhere(place, value):
    value = value.replace("ROOT", str(place.root))
    partition = the_file(place.version("runs") / "run_set_id=sample-legacy-5")
    replace_column(partition, "scenario_id", value)
    (place.root / "victim" / "config").mkdir(parents=True)  # where `--out root/a/out` climbs to
    (place.root / "victim" / "config" / "kept.txt").write_text("kept\n")
    out = place.root / "a" / "out"
    out.mkdir(parents=True)
    before = snapshot(place.root, skip=(place.warehouse, out))  # --out is the command's own: it may use it

    def check(command):
        result = place.run(*command)
        line = the_one_line(result, 1, "loopmeter: error: ")
        assert value[:40] in line and "breaks the rule" in line, described(result)  # a long name is cut short
        assert snapshot(place.root, skip=(place.warehouse, out)) == before, described(result)
        assert [path for path in out.rglob("*.json") if out not in path.resolve().parents] == []

    for_each([("aggregate", "--out", str(out)), ("aggregate",)], check)
    assert [path for path in place.root.rglob("*.json") if place.warehouse not in path.parents] == []
    assert sorted(os.listdir(place.root / "victim" / "config")) == ["kept.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["renamed", "added"])
def test_a_partition_folder_named_dot_dot_is_refused_in_one_line(place, how):
    version = place.version("runs")
    folder = version / "run_set_id=.."
    if how == "renamed":
        (version / "run_set_id=sample-legacy-5").rename(folder)
    else:
        shutil.copytree(version / "run_set_id=sample-legacy-5", folder)
    shown = (place.warehouse / "runs" / "run_set_id=..", folder)
    before = place.beside()

    def check(command):
        result = place.run(*command, timeout=BOUND)
        line = the_one_line(result, 1, "loopmeter: " if command == ("check",) else "loopmeter: error: ")
        assert names_one_of(line, *shown), described(result)
        assert place.beside() == before

    for_each([("check",), ("report", "summary"), ("report", "tail"), ("sql", "select count(*) from runs"),
              ("aggregate",)], check)


# ---- 3. links followed ----------------------------------------------------------------------

PAST = 1_500_000_000_000_000_000  # a modification time the test sets, in ns


@pytest.mark.slow
@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_lock_linked_elsewhere_stops_every_writer_and_the_file_is_untouched(place, demo_warehouse, link):
    target = place.outside / "precious.txt"
    target.write_text("precious\n")
    os.utime(target, ns=(PAST, PAST))
    lock = place.warehouse / ".lock"
    lock.unlink()
    lock.symlink_to(target) if link == "symbolic" else os.link(target, lock)
    sample = demo_warehouse.parent / "data" / "sample" / "forgeloop"
    before = place.beside()

    def untouched():
        assert target.read_text() == "precious\n" and os.stat(target).st_mtime_ns == PAST
        assert os.readlink(lock) == str(target) if link == "symbolic" else os.path.samefile(lock, target)
        assert place.beside() == before

    def check(command):
        result = place.run(*command, "--quiet")
        assert result.returncode != 0, described(result)
        line = the_one_line(result, result.returncode, f"loopmeter: error: {lock}")
        assert link == "symbolic" or "other link(s)" in line, line
        untouched()

    for_each([("ingest", "forgeloop", str(sample), "--scenarios", str(sample / "scenarios")), ("aggregate",),
              ("catalog",)], check)
    # a reader never writes the lock: it reads on (the catalog left as it is) and the file stays as it was
    os.unlink(place.warehouse / "loopmeter.duckdb")  # so that a reader would rebuild it, were the lock free to write
    result = place.run("sql", "SELECT count(*) AS n FROM runs", "--format", "csv")
    assert result.returncode == 0 and result.stdout.splitlines()[1:] == ["720"], described(result)
    untouched()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["aggregate", "aggregate/sample-tail-30"])
def test_documents_are_never_written_or_removed_through_a_link(place, where):
    documents = place.outside / "documents"
    (documents / ".x.loopmeter-new").mkdir(parents=True)
    (documents / ".x.loopmeter-new" / "f.json").write_text("{}\n")
    (documents / ".sample-tail-30.0badc0de.loopmeter-new").mkdir()
    (documents / ".sample-tail-30.0badc0de.loopmeter-new" / "summary.json").write_text("{}\n")
    (documents / "sample-tail-30").mkdir()
    (documents / "sample-tail-30" / "summary.json").write_text('{"mine": true}\n')
    (documents / "file.txt").write_text("a user's file\n")
    link = place.warehouse / where
    shutil.rmtree(link)
    link.symlink_to(documents)
    before = place.beside()

    def check(command):
        result = place.run(*command)
        assert_sane_stderr(result)
        assert result.returncode == 1, described(result)
        errors = [line for line in result.stderr.splitlines() if line.startswith("loopmeter: error: ")]
        assert len(errors) == 1 and str(link) in errors[0], described(result)
        assert place.beside() == before
        assert os.readlink(link) == str(documents)

    for_each([("aggregate",), ("aggregate", "--run-set", "sample-tail-30")], check)


# ---- 4. --out that is not a regular file ----------------------------------------------------

OUT_COMMANDS = {
    "sql csv": (("sql", "select 1 AS n", "--out"), ".csv"),
    "sql parquet": (("sql", "select 1 AS n", "--out"), ".parquet"),
    "report html": (("report", "html", "--out"), ".html"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "link", "device"])
@pytest.mark.parametrize("command", list(OUT_COMMANDS))
def test_out_that_is_not_a_regular_file_is_refused_and_left_as_it_was(demo_warehouse, tmp_path, command, kind):
    if kind == "device" and not IS_ROOT:
        pytest.skip("making a device needs root")
    place = make_place(demo_warehouse, tmp_path, settle=False)
    args, suffix = OUT_COMMANDS[command]
    out = place.outside / f"out{suffix}"
    kept = place.outside / "kept.txt"
    kept.write_text("a user's file\n")
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "link":
        out.symlink_to(kept)
    else:
        os.mknod(out, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    status, before = os.lstat(out), place.beside()
    result = place.run(*args, str(out), timeout=BOUND)
    the_one_line(result, 1, f"loopmeter: error: --out {out}")
    after = os.lstat(out)
    assert (after.st_mode, after.st_rdev, after.st_ino) == (status.st_mode, status.st_rdev, status.st_ino)
    if kind == "link":
        assert os.readlink(out) == str(kept) and kept.read_text() == "a user's file\n"
    assert place.beside() == before


# ---- 5. check never runs a view it did not write ----------------------------------------------

def forged_catalog(place: Place, source: Path) -> None:
    """loopmeter.duckdb replaced by a DuckDB file of DuckDB's defaults whose view `runs` reads `source`."""
    import duckdb

    database = place.warehouse / "loopmeter.duckdb"
    database.unlink()
    connection = duckdb.connect(str(database))
    connection.execute(f"CREATE VIEW runs AS SELECT * FROM read_csv('{source}')")
    connection.close()


@pytest.mark.slow
@pytest.mark.parametrize("reads", ["a secret file", "a FIFO"])
def test_check_never_runs_a_view_it_did_not_write(place, reads):
    secret = place.outside / "secret.csv"
    secret.write_text("TOPSECRET-7f3a9c,42\n")
    forged_catalog(place, secret)
    if reads == "a FIFO":  # a view that is run blocks for ever on it
        secret.unlink()
        os.mkfifo(secret)
    database = place.warehouse / "loopmeter.duckdb"
    before = place.beside()
    checked = place.run("check", timeout=BOUND)
    assert checked.returncode == 1, described(checked)
    assert_sane_stderr(checked, quiet=False)
    assert any(line.startswith(f"loopmeter: {database}: ") and "view runs" in line
               for line in checked.stderr.splitlines()), described(checked)
    assert "TOPSECRET" not in checked.stdout + checked.stderr
    counted = place.run("sql", "select count(*) AS n from runs", "--format", "csv", timeout=BOUND)
    assert counted.returncode == 0 and counted.stdout == f"n\n{DEMO_RUNS}\n", described(counted)
    assert "TOPSECRET" not in counted.stdout + counted.stderr
    assert place.beside() == before
    rebuilt = place.run("catalog", "--quiet", timeout=BOUND)
    assert rebuilt.returncode == 0, described(rebuilt)
    again = place.run("check", "--quiet", timeout=BOUND)
    assert again.returncode == 0 and again.stderr == "", described(again)
    assert place.beside() == before


@pytest.mark.slow
def test_a_sqlite_file_in_place_of_the_catalog_loads_no_extension_and_is_named(place):
    # DuckDB opens a SQLite file through its sqlite extension, which it would fetch into ~/.duckdb and load
    database = place.warehouse / "loopmeter.duckdb"
    database.unlink()
    with sqlite3.connect(database) as made:
        made.execute("CREATE TABLE runs (secret TEXT)")
    made.close()
    home = place.root / "home"
    home.mkdir()
    before = place.beside()
    told = f"loopmeter: {database}: is not a DuckDB database (its first bytes are not DuckDB's header)"
    checked = place.run("check", timeout=BOUND, env={"HOME": str(home)})
    assert checked.returncode == 1 and told in checked.stderr.splitlines(), described(checked)
    repaired = place.run("check", "--repair", timeout=BOUND, env={"HOME": str(home)})
    assert repaired.returncode == 0 and told in repaired.stderr.splitlines(), described(repaired)
    assert "catalog" in repaired.stderr and "rebuilt" in repaired.stderr and database.read_bytes()[8:12] == b"DUCK"
    counted = place.run("sql", "select count(*) AS n from runs", "--format", "csv", timeout=BOUND, env={"HOME": str(home)})
    assert counted.returncode == 0 and counted.stdout == f"n\n{DEMO_RUNS}\n", described(counted)
    assert place.beside() == before  # nothing in HOME, beside the warehouse or in the working directory


@pytest.mark.slow
def test_a_fifo_in_place_of_the_catalog_is_named_by_check_in_bounded_time(place):
    database = place.warehouse / "loopmeter.duckdb"
    database.unlink()
    os.mkfifo(database)
    before = place.beside()
    checked = place.run("check", timeout=BOUND)
    assert checked.returncode == 1, described(checked)
    assert any(line.startswith(f"loopmeter: {database}") for line in checked.stderr.splitlines()), described(checked)
    counted = place.run("sql", "select count(*) AS n from runs", "--format", "csv", timeout=BOUND)
    assert counted.returncode == 0 and counted.stdout == f"n\n{DEMO_RUNS}\n", described(counted)
    assert place.beside() == before


# ---- 6. hangs and unbounded reads ------------------------------------------------------------

FIFO_FILES = {
    "a runs partition file": ("runs", "run_set_id=sample-tail-30", "select count(*) from runs"),
    "the scenarios file": ("scenarios", "", "select count(*) from scenarios"),
}


@pytest.mark.slow
@pytest.mark.parametrize("which", list(FIFO_FILES))
def test_a_fifo_in_place_of_a_table_file_is_named_in_one_line_and_nothing_hangs(place, which):
    table, folder, query = FIFO_FILES[which]
    path = the_file(place.version(table) / folder)
    path.unlink()
    os.mkfifo(path)
    shown = (place.warehouse / table / path.relative_to(place.version(table)), path)
    each_refuses_naming(place, [("check",), ("report", "tail"), ("aggregate",), ("sql", query)], shown,
                        kept=lambda: stat.S_ISFIFO(os.lstat(path).st_mode))


def each_refuses_naming(place: Place, commands, shown: tuple, kept=lambda: True) -> None:
    """Each command exits non-zero with one line (`check` a problem's, the others an error's) naming one of
    `shown`; `kept()` holds after it, and nothing beside the warehouse changed."""
    before = place.beside()

    def check(command):
        result = place.run(*command, timeout=BOUND)
        assert result.returncode != 0, described(result)
        line = the_one_line(result, result.returncode, "loopmeter: " if command == ("check",) else "loopmeter: error: ")
        assert names_one_of(line, *shown), described(result)
        assert kept()
        assert place.beside() == before

    for_each(commands, check)


@pytest.mark.slow
@pytest.mark.parametrize("name", [".parquet", "..parquet", "notes.txt", "part-1.parquet.bak"])
def test_every_file_a_client_would_read_in_a_version_is_verified_or_refused(place, name):
    # DuckDB's `**/*.parquet` reads a file named `.parquet`; pyarrow, pandas and Spark read any name not starting
    # with `.` or `_`: each is verified as a table file (this one holds another schema) or refused as none
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = place.version("runs") / "run_set_id=sample-tail-30"
    path = folder / name
    pq.write_table(pa.table({"hidden": pa.array(["x"] * 3)}), path)
    shown = (place.warehouse / "runs" / "run_set_id=sample-tail-30" / name, path)
    each_refuses_naming(place, [("check",), ("report", "tail"), ("sql", "SELECT count(*) FROM runs")], shown)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["extra.parquet", "part-empty.parquet"])
def test_a_file_at_the_root_of_a_partitioned_table_beside_its_folders_is_refused(place, name):
    # of the table's own schema, partition column included: a client reads it beside the folders, where its
    # column clashes with theirs (DuckDB: a Binder error); only an empty table keeps a file there, alone
    import pyarrow as pa
    import pyarrow.parquet as pq

    from loopmeter.storage import registry

    folder = place.version("runs")
    rows = pq.read_table(the_file(folder / "run_set_id=sample-tail-30"))
    rows = rows.append_column("run_set_id", pa.array(["sample-tail-30"] * len(rows)))
    schema = registry.table("runs").arrow_schema(partitioned_file=False)
    pq.write_table(rows.select(schema.names).cast(schema), folder / name)
    shown = (place.warehouse / "runs" / name, folder / name)
    each_refuses_naming(place, [("check",), ("report", "tail"), ("aggregate",), ("sql", "SELECT count(*) FROM runs")],
                        shown)


DOCUMENT_EDITS = {  # a stored document's text as someone else wrote it, and what each report says of it
    "not JSON": (lambda file, text: "nope" if file == "summary.json" else text, "summary.json is not JSON ("),
    "nested past the parser": (lambda file, text: "[" * 5000 + "]" * 5000 if file == "summary.json" else text,
                               "summary.json is not JSON ("),
    "a list": (lambda file, text: "[]" if file == "api-feature.json" else text, "api-feature.json is not a JSON object"),
    "fields missing": (lambda file, text: '{"x": 1}' if file != "summary.json" else text,
                       "a stored document is not as `aggregate` writes it (KeyError: "),
}


@pytest.mark.parametrize("edit", list(DOCUMENT_EDITS))
def test_a_stored_document_not_as_aggregate_writes_it_is_named_in_one_line(demo_warehouse, tmp_path, edit):
    # forgeloop_documents holds the documents as text: a table file of its schema may hold any text there
    import pyarrow as pa
    import pyarrow.parquet as pq

    warehouse = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, warehouse, symlinks=True)
    change, told = DOCUMENT_EDITS[edit]
    (path,) = (warehouse / os.readlink(warehouse / "forgeloop_documents") / "run_set_id=sample-tail-30").glob("*.parquet")
    rows = pq.read_table(path)
    texts = [change(file, text) for file, text in zip(rows["file"].to_pylist(), rows["document"].to_pylist())]
    rows = rows.set_column(rows.schema.get_field_index("document"), "document", pa.array(texts, pa.string()))
    path.unlink()
    pq.write_table(rows, path)
    for command in (("report", "summary", "--json"), ("report", "tail"), ("report", "regression", "--json")):
        result = run_cli(*command, warehouse=warehouse, check=1)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("loopmeter: error: ") and told in lines[0], result.stderr
        assert lines[0].endswith("run `loopmeter aggregate --full` to store the documents anew"), result.stderr
    run_cli("aggregate", "--full", "--quiet", warehouse=warehouse)
    run_cli("report", "summary", "--json", warehouse=warehouse)


@pytest.mark.parametrize("table", ["runs", "scenarios"])
def test_a_version_holding_no_file_is_named_in_one_line(demo_warehouse, tmp_path, table):
    # loopmeter writes an empty table's columns in a file: a version emptied by hand (or a manifest listing no
    # file of it) is named, never handed to DuckDB, whose glob would fail as an internal error
    warehouse = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, warehouse, symlinks=True)
    run_cli("catalog", "--quiet", warehouse=warehouse)  # the copy's own catalog: no reader rebuilds it (and warns)
    version = warehouse / os.readlink(warehouse / table)
    for entry in version.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    told = f"{version}: holds no table file (an empty table keeps its columns in "
    for command in (("check",), ("sql", f"SELECT count(*) FROM {table}"), ("report", "summary")):
        result = run_cli(*command, warehouse=warehouse, check=1)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and told in lines[0] and "shows the traceback" not in lines[0], (command, result.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("raw", ["a link", "other run sets", "other scenarios"])
def test_a_forged_ingest_record_has_check_repair_read_nothing_the_warehouse_does_not_hold(place, demo_warehouse, raw):
    # the record of the ingest names where its run files were: forged, it names a folder of the user's whose `raw`
    # is a link to another tree, or holds run sets the warehouse never had, or the run files' own folder with
    # scenarios from a folder of the user's the warehouse's scenarios never came from
    sample = demo_warehouse.parent / "data" / "sample" / "forgeloop"
    results = place.outside / "results"
    results.mkdir()
    scenarios = None
    if raw == "a link":
        (results / "raw").symlink_to(sample / "raw")
    elif raw == "other run sets":
        shutil.copytree(sample / "raw" / "sample-tail-30", results / "raw" / "someone-elses")
    else:
        results = sample
        scenarios = place.outside / "someone-elses"
        shutil.copytree(sample / "scenarios", scenarios)
    (record,) = place.warehouse.joinpath(".state").glob("forgeloop-ingest-*.json")
    forged = json.loads(record.read_text())
    forged["key"].update(results=str(results), scenarios=None if scenarios is None else str(scenarios))
    record.write_text(json.dumps(forged))
    damaged = the_file(place.version("runs") / "run_set_id=sample-tail-30")
    os.truncate(damaged, 100)
    before = place.beside()
    repaired = place.run("check", "--repair", "--json", timeout=BOUND)
    assert repaired.returncode == 1, described(repaired)
    report = json.loads(repaired.stdout)
    assert not any("read again" in line for line in report["repaired"]), report
    assert any(line.startswith("runs") for line in report["notRepaired"]), report
    state = "".join(path.read_text(errors="replace") for path in place.warehouse.joinpath(".state").glob("*.json"))
    assert "someone-elses" not in state.replace(json.dumps(forged), "") and (raw == "other scenarios" or str(sample) not in state)
    assert place.beside() == before


@pytest.mark.slow
def test_a_version_named_in_bytes_that_are_not_utf8_is_no_table_and_told_in_one_line(place):
    version = place.version("runs")
    odd = os.fsencode(version.parent) + b"/\xff\xfe"
    os.rename(os.fsencode(version), odd)
    os.remove(place.warehouse / "runs")
    os.symlink(b".versions/runs/\xff\xfe", os.fsencode(place.warehouse / "runs"))
    before = place.beside()
    for command in (("aggregate", "--full", "--quiet"), ("check",), ("sql", "SELECT count(*) FROM runs")):
        result = place.run(*command, timeout=BOUND)
        assert result.returncode != 0 and "Traceback" not in result.stderr and "Error:" not in result.stderr, described(result)
        assert "runs: a symbolic link loopmeter did not make" in result.stderr, described(result)
        assert place.beside() == before


@pytest.mark.slow
@pytest.mark.parametrize("marker", ["not loopmeter's", "missing"])
def test_a_marker_that_is_not_loopmeters_or_missing_is_named_by_check_and_readers(place, marker):
    path = place.warehouse / ".loopmeter"
    if marker == "missing":
        path.unlink()
    else:
        path.write_text('{"loopmeter":"warehouse","format":999}')
    before = place.beside()
    read = place.run("sql", "SELECT 1")
    told = (f"{path} is not loopmeter's marker file, so {place.warehouse} is not taken for a loopmeter warehouse"
            if marker != "missing" else f"{place.warehouse} is not a loopmeter warehouse: it has no .loopmeter marker")
    the_one_line(read, 1, f"loopmeter: error: {told}")
    checked = place.run("check", "--json")
    assert checked.returncode == 1, described(checked)
    problems = [(p["kind"], p["path"]) for p in json.loads(checked.stdout)["problems"]]
    assert ("marker", str(path)) in problems, problems
    repaired = place.run("check", "--repair", "--json")
    report = json.loads(repaired.stdout)
    if marker == "missing":  # marked again: a warehouse of an earlier loopmeter, or its marker removed
        assert repaired.returncode == 0 and f"marker {path}: written" in report["repaired"], described(repaired)
        assert place.run("sql", "SELECT 1").returncode == 0
    else:  # the file may be the user's: left as it is, with what to do
        assert repaired.returncode == 1 and path.read_text() == '{"loopmeter":"warehouse","format":999}'
        assert any(line.startswith(f"marker {path}: not loopmeter's file; remove it") for line in report["notRepaired"])
    assert place.beside() == before


@pytest.mark.slow
def test_a_version_folder_that_is_a_link_is_named_as_one_by_check(place):
    version = place.version("runs")
    moved = place.outside / "a-copy"
    version.rename(moved)
    version.symlink_to(moved)
    before = place.beside()
    checked = place.run("check")
    assert checked.returncode == 1, described(checked)
    assert (f"loopmeter: {place.warehouse / 'runs'}: table runs points at {os.readlink(place.warehouse / 'runs')}, "
            f"where {version} is a symbolic link, not a folder (never followed)") in checked.stderr.splitlines(), \
        described(checked)
    assert place.beside() == before


ADDRESS_SPACE = 2 << 30  # bytes


# one process runs a test's commands one after the other, as they come on the pipe of fd
# argv[2], each with its own stdout and stderr (files it writes through fds 1 and 2), and answers
# each with its exit code on its own stdout, a line
LIMITED = r"""
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from loopmeter import progress
from loopmeter.cli import run
from loopmeter.commands import common
answer = os.fdopen(os.dup(1), "w")
for line in os.fdopen(int(sys.argv[2])):
    args, out, err = json.loads(line)
    progress.QUIET, common.DEBUG = False, False
    sys.stdout.flush(); sys.stderr.flush()
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    try:
        code = run(args)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    sys.stdout.flush(); sys.stderr.flush()
    answer.write(json.dumps(code) + "\n")
    answer.flush()
"""


class Limited:
    """`loopmeter` commands with the process's address space limited to 2 GiB, run one after the
    other by one process (started again after one that did not end, or ended it). glibc's arenas
    (64 MiB of address space reserved per thread that allocates) are held to two, so that the
    limit measures what the commands allocate, not how many threads DuckDB and polars start."""

    def __init__(self, place: Place):
        self.place, self.process, self.commands, self.count = place, None, None, 0
        self.scratch = Path(tempfile.mkdtemp(prefix="limited-"))

    def __call__(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
        if self.process is None:
            reading, writing = os.pipe()
            self.process = subprocess.Popen([sys.executable, "-c", LIMITED, str(ADDRESS_SPACE), str(reading)],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                                            cwd=self.place.cwd, pass_fds=(reading,),
                                            env=dict(os.environ, MALLOC_ARENA_MAX="2"))
            os.close(reading)
            self.commands = os.fdopen(writing, "w")
        self.count += 1
        command = [*args, "--warehouse", str(self.place.warehouse)]
        out, err = self.scratch / f"{self.count}.out", self.scratch / f"{self.count}.err"
        self.commands.write(json.dumps([command, str(out), str(err)]) + "\n")
        self.commands.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else None
        if not line:  # it did not end (killed here) or it ended the process
            if line is None:
                self.close(scratch=False)
                raise AssertionError(f"loopmeter {' '.join(map(str, args))} did not end within {timeout} s (killed)")
            code = self.process.wait()
            self.close(scratch=False)
        else:
            code = json.loads(line)
        read = lambda path: path.read_text(errors="replace") if path.exists() else ""
        return subprocess.CompletedProcess([sys.executable, "-m", "loopmeter", *command], code, read(out), read(err))

    def close(self, scratch: bool = True) -> None:
        if self.process is not None:
            self.commands.close()
            self.process.kill()
            self.process.wait()
            self.process.stdout.close()
            self.process = None
        if scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


@pytest.fixture
def limited():
    """`limited(place)`: the place's Limited runner (closed at the test's end)."""
    runners = []

    def make(place: Place) -> Limited:
        runners.append(Limited(place))
        return runners[-1]

    yield make
    for runner in runners:
        runner.close()


@pytest.mark.slow
@pytest.mark.parametrize("state", ["catalog.json", "forgeloop-aggregate.json", "forgeloop-ingest-*.json"])
def test_a_state_file_linked_to_dev_zero_is_not_read_without_bound(place, state, limited):
    (path,) = (place.warehouse / ".state").glob(state)
    before = place.beside()
    run = limited(place)

    def check(command):
        if os.path.lexists(path):
            path.unlink()
        path.symlink_to("/dev/zero")
        result = run(*command, "--quiet")
        assert_sane_stderr(result)
        if command == ("check",):  # named, as every entry loopmeter did not make is, and never read
            the_one_line(result, 1, f"loopmeter: {path}: is a symbolic link, not a regular file: loopmeter never reads it")
        else:
            assert result.returncode == 0, described(result)
        assert place.beside() == before

    for_each([("check",), ("report", "summary"), ("sql", "select count(*) from runs"), ("aggregate",)], check)


# ---- 7. Ctrl-C on a hostile warehouse ---------------------------------------------------------

def _holds(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_ctrl_c_on_a_hostile_warehouse_exits_130(corpus_warehouse, tmp_path):
    seen = []
    for attempt in range(5):
        place = make_place(corpus_warehouse, tmp_path / f"try{attempt}", settle=False)
        warehouse = place.warehouse
        (warehouse / LINK_NAMES["double quote"]).symlink_to(os.readlink(warehouse / "runs"))
        state = warehouse / ".state" / "forgeloop-aggregate.json"
        if os.path.lexists(state):
            state.unlink()
        state.symlink_to("/dev/zero")  # nothing remembered: every document computed again
        links, before = table_links(warehouse), place.beside()
        errors = tmp_path / f"stderr{attempt}.txt"
        with open(errors, "w") as handle:
            process = subprocess.Popen([sys.executable, "-m", "loopmeter", "aggregate", "--warehouse", str(warehouse)],
                                       cwd=place.cwd, stdout=subprocess.DEVNULL, stderr=handle)
        try:
            deadline = time.monotonic() + 120
            started = False
            while process.poll() is None and time.monotonic() < deadline:  # poll: the command is at work
                if errors.stat().st_size > 0 or _holds(process.pid, warehouse / ".lock"):
                    started = True
                    break
                time.sleep(0.002)
            if started:
                process.send_signal(signal.SIGINT)
            process.wait(timeout=BOUND)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
                pytest.fail("aggregate did not end within the bound after Ctrl-C")
        lines = errors.read_text().splitlines()
        if not started or process.returncode == 0:  # it ended before it was interrupted: again
            seen.append((process.returncode, lines[-2:]))
            continue
        assert process.returncode == 130, lines
        assert lines and lines[-1].startswith("loopmeter: interrupted"), lines
        assert all(line.startswith("loopmeter:") for line in lines), lines
        assert table_links(warehouse) == links  # the tables as they were
        assert place.beside() == before
        return
    pytest.fail(f"aggregate ended before it could be interrupted, every time: {seen}")


# ---- 8. smaller ones --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("command", [("report", "summary"), ("sql", "select 1"), ("schema",)])
@pytest.mark.parametrize("via", ["--warehouse", "LOOPMETER_WAREHOUSE"])
@pytest.mark.parametrize("folder", ["empty", "holding a file"])
def test_a_reader_on_a_folder_that_is_not_a_warehouse_writes_nothing_there(tmp_path, command, via, folder):
    target = tmp_path / "base" / "folder"
    target.mkdir(parents=True)
    if folder == "holding a file":
        (target / "mine.txt").write_text("a user's file\n")
    before = snapshot(tmp_path)
    if via == "--warehouse":
        result = run_cli(*command, warehouse=target, check=None, timeout=BOUND, cwd=tmp_path)
    else:
        result = run_cli(*command, env={"LOOPMETER_WAREHOUSE": str(target)}, check=None, timeout=BOUND, cwd=tmp_path)
    line = the_one_line(result, 1, "loopmeter: error: ")
    assert str(target) in line, described(result)
    assert snapshot(tmp_path) == before
    assert not any(os.path.lexists(target / name) for name in (".lock", ".state", "loopmeter.duckdb", ".loopmeter"))


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["ingest forgeloop", "ingest forge", "catalog"])
def test_a_writer_into_a_folder_holding_files_that_is_not_a_warehouse_creates_nothing(tmp_path, corpus, demo_warehouse,
                                                                                       writer):
    target = tmp_path / "base" / "folder"
    target.mkdir(parents=True)
    (target / "mine.txt").write_text("a user's file\n")
    args = {
        "ingest forgeloop": ("ingest", "forgeloop", str(corpus / "results")),
        "ingest forge": ("ingest", "forge", str(demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite")),
        "catalog": ("catalog",),
    }[writer]
    before = snapshot(tmp_path)
    result = run_cli(*args, "--quiet", warehouse=target, check=None, timeout=BOUND * 2, cwd=tmp_path)
    line = the_one_line(result, 1, "loopmeter: error: ")
    assert str(target) in line, described(result)
    assert snapshot(tmp_path) == before


RAW_CONTROLS = ["\x1b", "\x07", *map(chr, range(0x80, 0xa0))]
ESCAPED_NAMES = {
    "claude-5-sonnet": "claude-5-\x1b[31msonnet\x07",
    "sonnet": "son\x1b]0;pwned\x07net",
    "gemini-3-flash": "gemini-3-\x9b2Jflash",
    "flash": "fl\x1b[2Jash",
}


def _renamed(value):
    if isinstance(value, str):
        return ESCAPED_NAMES.get(value, value)
    if isinstance(value, list):
        return [_renamed(item) for item in value]
    if isinstance(value, dict):
        return {key: _renamed(item) for key, item in value.items()}
    return value


@pytest.mark.slow
def test_escape_sequences_in_model_names_never_reach_the_terminal(tmp_path):
    from loopmeter.forge import samples

    events = samples.routing_events(400, seed=7)
    for event in events:
        event["data"] = _renamed(event["data"])
    store = samples.write_sqlite(tmp_path / "store" / "dataset.sqlite",
                                 [(repo, f"/nowhere/{repo}") for repo in ("api", "web", "infra")], events)
    warehouse = tmp_path / "warehouse"
    ingested = run_cli("ingest", "forge", str(store), "--quiet", warehouse=warehouse, check=None, timeout=300)
    assert ingested.returncode in (0, 3), described(ingested)
    for command in [("report", "routing"), ("report", "srm")]:
        result = run_cli(*command, warehouse=warehouse, check=None, timeout=BOUND, env=WIDE)
        assert result.returncode == 0, described(result)
        shown = result.stdout + result.stderr
        raw = sorted({f"U+{ord(c):04X}" for c in shown if c in RAW_CONTROLS})
        assert raw == [], f"{command}: raw control characters reach the terminal: {raw}\n{described(result)}"
        assert "\\x1b" in result.stdout, described(result)


@pytest.fixture(scope="module")
def git_sample(tmp_path_factory):
    from loopmeter.forge import samples

    root = tmp_path_factory.mktemp("hostile-git")
    built = samples.build_git_sample(root / "repos")
    store = samples.write_sqlite(root / "store" / "dataset.sqlite", built.repos, built.events)
    warehouse = root / "warehouse"
    run_cli("ingest", "forge", str(store), "--quiet", warehouse=warehouse, timeout=300)
    baseline = harvest_numbers(warehouse, built.now)
    assert baseline[0]["ok"] == 5
    return {"root": root, "built": built, "warehouse": warehouse, "repos": [Path(path) for _, path in built.repos],
            "baseline": baseline}


def harvest_numbers(warehouse: Path, now: float) -> tuple:
    result = bounded(lambda: run_cli("harvest", "survival", "--include-temp", "--now", str(now), "--dry-run", "--json",
                                     warehouse=warehouse, check=None, timeout=BOUND), ("harvest", "survival"), BOUND)
    assert result.returncode == 0, described(result)
    document = json.loads(result.stdout)
    return document["counts"], [(outcome["rid"], outcome["data"]) for outcome in document["outcomes"]]


@pytest.mark.slow
@pytest.mark.parametrize("ignore_revs", ["a missing file", "a FIFO"])
def test_blame_measures_whatever_ignore_revs_file_the_repository_names(git_sample, tmp_path, ignore_revs):
    path = tmp_path / "ignore-revs"
    if ignore_revs == "a FIFO":
        os.mkfifo(path)
    saved = [(repo, (repo / ".git" / "config").read_bytes()) for repo in git_sample["repos"]]
    try:
        for repo in git_sample["repos"]:
            subprocess.run(["git", "-C", str(repo), "config", "blame.ignoreRevsFile", str(path)], check=True,
                           capture_output=True)
        assert harvest_numbers(git_sample["warehouse"], git_sample["built"].now) == git_sample["baseline"]
    finally:
        for repo, config in saved:
            (repo / ".git" / "config").write_bytes(config)


@pytest.mark.slow
def test_a_link_into_another_run_set_folder_is_rejected_not_filed_under_this_one(tmp_path):
    documents = [run(run_set=name, index=index) for name in ("rs-a", "rs-b") for index in (1, 2, 3)]
    results = write_tree(tmp_path / "results", documents, {"small-bug-fix": "balanced"})
    raw = results / "raw"
    (raw / "rs-a" / "small-bug-fix" / "direct" / "run-009.json").symlink_to("../../../rs-b/small-bug-fix/direct/run-001.json")
    (raw / "rs-a" / "api-feature").symlink_to("../rs-b/small-bug-fix")
    warehouse = tmp_path / "warehouse"
    before = snapshot(results)
    result = run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"), warehouse=warehouse,
                     check=None, timeout=BOUND)
    assert result.returncode == 3, described(result)
    ruled = [line for line in result.stderr.splitlines() if "symlink leads into the run set folder rs-b" in line]
    assert len(ruled) == 2, described(result)
    assert any("rs-a/small-bug-fix/direct/run-009.json" in line for line in ruled), described(result)
    assert any("rs-a/api-feature" in line for line in ruled), described(result)
    stored = run_cli("sql", "SELECT run_set_id, count(*) AS n FROM runs GROUP BY ALL ORDER BY 1", "--format", "csv",
                     warehouse=warehouse, check=None, timeout=BOUND)
    assert stored.returncode == 0 and stored.stdout == "run_set_id,n\nrs-a,3\nrs-b,3\n", described(stored)
    assert snapshot(results) == before


@pytest.mark.slow
@pytest.mark.parametrize("query", ["SELECT 'infinity'::TIMESTAMP", "SELECT DATE '5881580-07-10'"])
@pytest.mark.parametrize("output", ["table", "csv", "json"])
def test_a_date_or_time_out_of_range_in_sql_is_one_line(place, query, output):
    args = ("sql", query) if output == "table" else ("sql", query, "--format", output)
    result = place.run(*args, timeout=BOUND)
    assert "panicked" not in result.stderr and "Traceback" not in result.stderr, described(result)
    the_one_line(result, 1, "loopmeter: error: ")


@pytest.mark.slow
@pytest.mark.parametrize("query", ["SELECT '-infinity'::DATE", "SELECT TIMESTAMP '294247-01-10 04:00:54.775806'",
                                   "SELECT DATE '-5877641-06-24'", "SELECT 'infinity'::TIMESTAMPTZ"])
def test_other_dates_and_times_at_the_edges_answer_or_are_one_line(place, query):
    result = place.run("sql", query, "--quiet", timeout=BOUND)
    assert_sane_stderr(result)
    assert result.returncode in (0, 1), described(result)
    if result.returncode == 1:
        the_one_line(result, 1, "loopmeter: error: ")


# ---- properties: hostile names anywhere ---------------------------------------------------------

PIECES = ['"', "'", ";", "..", "\n", "\r", "\t", "\x1b[31m", "\x07", "\x9b", "\\", " ", "--", "/*", "*/", "é", "日本",
          "\u202e", "%", "$", "`", "(", ")", "=", ",", "*", "?", "[", "]", "{", "}", "\u00a0", "\U0001f600"]
PAYLOADS = [
    'x" AS SELECT 1; COPY (SELECT 1) TO \'p.csv\'; CREATE VIEW "y',
    "x'); COPY (SELECT 42) TO 'p.csv'; --",
    "\"; ATTACH 'p.duckdb' AS p; --",
    "x' || (SELECT 1) || '",
]
PATH_PAYLOADS = [
    'x" AS SELECT 1; COPY (SELECT 1) TO \'OUT/p.csv\'; CREATE VIEW "y',
    "../../../OUT/p",
    "a/../../b",
    "OUT/p.csv",
]


def _component_ok(name: str) -> bool:
    """A name one folder entry can have."""
    return name not in ("", ".", "..") and not {"\x00", "/"} & set(name) and len(os.fsencode(name)) <= 200


piece = st.one_of(st.sampled_from(PIECES), st.text(st.characters(blacklist_categories=("Cs",),
                                                                 blacklist_characters="\x00/"), max_size=4))
one_name = st.one_of(st.sampled_from(PAYLOADS), st.lists(piece, min_size=1, max_size=8).map("".join)).filter(_component_ok)
path_name = st.one_of(st.sampled_from(PATH_PAYLOADS), one_name,
                      st.lists(one_name, min_size=2, max_size=3).map("/".join))  # slashes: nested folders


def _hostile_place(source: Path, factory) -> Place:
    return make_place(source, factory.mktemp("hostile"), settle=False)


def _reader_answers_sanely(place: Place, before: dict, query: str) -> subprocess.CompletedProcess:
    result = place.run("sql", query, "--format", "csv", "--quiet", timeout=90)
    assert_sane_stderr(result)
    assert result.returncode in (0, 1), described(result)
    assert place.beside() == before, described(result)
    return result


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=one_name)
def test_any_link_name_in_the_root_is_left_out(demo_warehouse, tmp_path_factory, name):
    place = _hostile_place(demo_warehouse, tmp_path_factory)
    link = place.warehouse / name
    if os.path.lexists(link):
        return  # one of loopmeter's own names: another test's matter
    link.symlink_to(os.readlink(place.warehouse / "scenarios"))
    result = _reader_answers_sanely(place, place.beside(), "select count(*) AS n from scenarios")
    assert result.returncode == 0 and result.stdout == "n\n6\n", described(result)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=path_name)
def test_any_partition_folder_name_is_refused_or_read_never_followed(demo_warehouse, tmp_path_factory, name):
    place = _hostile_place(demo_warehouse, tmp_path_factory)
    name = name.replace("OUT", str(place.outside).lstrip("/"))
    parts = f"run_set_id={name}".split("/")
    if not all(_component_ok(part) for part in parts):
        return  # `..` as a whole component would put the test's own file outside the version
    version = place.version("runs")
    folder = version.joinpath(*parts)
    if os.path.lexists(folder):
        return
    folder.mkdir(parents=True)
    shutil.copy(the_file(version / "run_set_id=sample-legacy-5"), folder / "part-0.parquet")
    _reader_answers_sanely(place, place.beside(), "select count(*) AS n from runs")


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.one_of(path_name, st.sampled_from(PATH_PAYLOADS)), renamed=st.booleans())
def test_any_column_name_in_a_table_file_is_refused_or_read_never_run(demo_warehouse, tmp_path_factory, name, renamed):
    import pyarrow as pa
    import pyarrow.parquet as pq

    place = _hostile_place(demo_warehouse, tmp_path_factory)
    name = name.replace("OUT", str(place.outside))
    version = place.version("scenarios")
    source = the_file(version)
    table = pq.read_table(source)
    if name in table.column_names:
        return
    if renamed:
        names = table.column_names
        names[0] = name
        write_arrow(source, table.rename_columns(names))
    else:
        write_arrow(version / "part-99999.parquet", table.append_column(name, pa.array(["x"] * table.num_rows)))
    _reader_answers_sanely(place, place.beside(), "select count(*) AS n from scenarios")


# ---- links, FIFOs and devices at every place of the tree ---------------------------------------

POSITIONS = {
    "a table link": lambda w: w / "runs",
    "a table's versions folder": lambda w: w / ".versions" / "runs",
    "a version": lambda w: w / os.readlink(w / "runs"),
    "a partition folder": lambda w: w / os.readlink(w / "runs") / "run_set_id=sample-tail-30",
    "a table file": lambda w: the_file(w / os.readlink(w / "scenarios")),
    "the state folder": lambda w: w / ".state",
    "a state file": lambda w: w / ".state" / "forgeloop-aggregate.json",
    "the lock": lambda w: w / ".lock",
    "the scratch folder": lambda w: w / ".scratch",
    "the catalog": lambda w: w / "loopmeter.duckdb",
    "the catalog's log": lambda w: w / "loopmeter.duckdb.wal",  # none is there: DuckDB opens one it finds
    "the aggregate folder": lambda w: w / "aggregate",
    "the marker": lambda w: w / ".loopmeter",
}


def plant(place: Place, path: Path, kind: str) -> None:
    """Put `kind` at `path`: a link to what was there, moved outside the warehouse; a FIFO; a
    character device (/dev/zero's: endless zeros to whoever reads it)."""
    if kind == "link":
        moved = place.outside / "moved" / path.name
        moved.parent.mkdir(exist_ok=True)
        if path.is_symlink():  # a table link: to the version, moved out
            version = path.parent / os.readlink(path)
            shutil.move(str(version), str(moved))
            path.unlink()
        elif not os.path.lexists(path):  # a place where nothing is: a link to a file outside
            moved.write_bytes(b"")
        else:
            shutil.move(str(path), str(moved))
        path.symlink_to(moved)
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["link", "fifo", "device"])
@pytest.mark.parametrize("position", list(POSITIONS))
def test_a_link_fifo_or_device_anywhere_in_the_tree_ends_in_bounded_time_and_changes_nothing_outside(
        demo_warehouse, tmp_path, position, kind, limited):
    if kind == "device" and not IS_ROOT:
        pytest.skip("making a device needs root")
    place = make_place(demo_warehouse, tmp_path, settle=False)
    plant(place, POSITIONS[position](place.warehouse), kind)
    before = place.beside()
    run = limited(place)

    def check(command):
        result = run(*command, "--quiet")
        assert_sane_stderr(result)
        assert result.returncode in (0, 1, 3, 4), described(result)
        assert place.beside() == before, described(result)

    for_each([("check",), ("sql", "select count(*) from runs"), ("aggregate",)], check)
