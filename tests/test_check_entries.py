"""`loopmeter check` names every entry of the warehouse loopmeter did not make, each in one line, and
`--repair` removes those that hold no one's data (never what a link names, never a user's file outside
loopmeter's own folders); a table whose link is gone or not loopmeter's is linked back at its version."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import run_cli

REPAIRS = "`loopmeter check --repair` removes it (the entry itself: what a link names is not touched)"
REPAIRS_FOLDER = "`loopmeter check --repair` removes it and everything in it (links in it, never what they name)"
USERS = "move it out of the warehouse (it may be yours: loopmeter does not remove it)"
DOCUMENTS = ("in aggregate/, which holds a folder of documents per run set (`aggregate` refuses to write a run set's of "
             "its name)")
BOUND = 120  # seconds: a command meeting a FIFO or a device runs in a process of its own, so a hang is a failure, not a stuck run


@pytest.fixture
def copy(demo_warehouse, tmp_path) -> Path:
    target = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, target, symlinks=True)
    run_cli("catalog", "--quiet", warehouse=target)  # its views, and the record of files verified, of this place
    return target


def _could_hang(warehouse: Path) -> bool:
    """Whether the warehouse holds an entry a wrong read would never finish: a FIFO, or a link to a device."""
    for folder, names, files in os.walk(warehouse):
        for name in names + files:
            status = os.lstat(os.path.join(folder, name))
            if stat.S_ISFIFO(status.st_mode) or stat.S_ISLNK(status.st_mode) and os.path.realpath(
                    os.path.join(folder, name)).startswith("/dev/"):
                return True
    return False


def checked(warehouse: Path, *options: str):
    result = run_cli("check", *options, warehouse=warehouse, check=None,
                     timeout=BOUND if _could_hang(warehouse) else None)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def problems(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("loopmeter: ") and
            not line.startswith(("loopmeter: repaired: ", "loopmeter: not repaired: "))]


def _outside(warehouse: Path) -> Path:
    path = warehouse.parent / "outside.txt"
    path.write_text("a user's file\n")
    return path


def lock_fifo(w):
    (w / ".lock").unlink()
    os.mkfifo(w / ".lock")
    return w / ".lock", f"is a FIFO, not the regular file that is the warehouse's lock: every writer refuses it; {REPAIRS}"


def lock_symlink(w):
    (w / ".lock").unlink()
    (w / ".lock").symlink_to(_outside(w))
    return w / ".lock", (f"is a symbolic link, not the regular file that is the warehouse's lock: every writer refuses "
                         f"it; {REPAIRS}")


def lock_hard_link(w):
    (w / ".lock").unlink()
    os.link(_outside(w), w / ".lock")
    return w / ".lock", (f"is a file with 1 other link(s) (a hard link of a file elsewhere), not the warehouse's own "
                         f"lock file: every writer refuses it; {REPAIRS}")


def lock_folder(w):
    (w / ".lock").unlink()
    (w / ".lock").mkdir()
    return w / ".lock", (f"is a directory, not the regular file that is the warehouse's lock: every writer refuses it; "
                         f"{USERS}")


def record_to_dev_zero(w):
    (w / ".state" / "verified.json").unlink()
    (w / ".state" / "verified.json").symlink_to("/dev/zero")
    return w / ".state" / "verified.json", (f"is a symbolic link, not a regular file: loopmeter never reads it (what it "
                                            f"would record is done again); {REPAIRS}")


def state_fifo(w):
    (w / ".state" / "catalog.json").unlink()
    os.mkfifo(w / ".state" / "catalog.json")
    return w / ".state" / "catalog.json", (f"is a FIFO, not a regular file: loopmeter never reads it (what it would "
                                           f"record is done again); {REPAIRS}")


def documents_link(w):
    shutil.rmtree(w / "aggregate" / "sample-tail-30")
    (w.parent / "v").mkdir()
    (w / "aggregate" / "sample-tail-30").symlink_to(w.parent / "v")
    return w / "aggregate" / "sample-tail-30", (f"is a symbolic link, {DOCUMENTS}; {REPAIRS}")


def documents_file(w):
    shutil.rmtree(w / "aggregate" / "sample-tail-30")
    (w / "aggregate" / "sample-tail-30").write_text("mine\n")
    return w / "aggregate" / "sample-tail-30", (f"is a regular file, {DOCUMENTS}; {USERS}")


def aggregate_link(w):
    shutil.rmtree(w / "aggregate")
    (w.parent / "v").mkdir()
    (w / "aggregate").symlink_to(w.parent / "v")
    return w / "aggregate", f"is a symbolic link, where loopmeter keeps a folder of its own: no writer can use it; {REPAIRS}"


def versions_of_no_table(w):
    (w / ".versions" / "evil" / "1").mkdir(parents=True)
    return w / ".versions" / "evil", f"is a directory, a folder of versions of no table loopmeter knows; {REPAIRS_FOLDER}"


def versions_fifo(w):
    os.mkfifo(w / ".versions" / "pipe")
    return w / ".versions" / "pipe", f"is a FIFO, in .versions/, which holds a folder of versions per table; {REPAIRS}"


def versions_file(w):
    (w / ".versions" / "notes.txt").write_text("x\n")
    return w / ".versions" / "notes.txt", (f"is a regular file, in .versions/, which holds a folder of versions per "
                                           f"table; {REPAIRS}")


def root_fifo(w):
    os.mkfifo(w / "pipe")
    return w / "pipe", f"is a FIFO, an entry loopmeter did not make; {REPAIRS}"


def root_file(w):
    (w / "notes.txt").write_text("mine\n")
    return w / "notes.txt", f"is a regular file, an entry loopmeter did not make; {USERS}"


# what is made, and whether `--repair` removes it
STRAYS = {
    "a FIFO as .lock": (lock_fifo, True), "a link as .lock": (lock_symlink, True),
    "a hard link as .lock": (lock_hard_link, True), "a folder as .lock": (lock_folder, False),
    ".state/verified.json linked to /dev/zero": (record_to_dev_zero, True), "a FIFO in .state": (state_fifo, True),
    "a link as a run set's documents": (documents_link, True), "a file as a run set's documents": (documents_file, False),
    "a link as aggregate/": (aggregate_link, True),
    ".versions/evil/": (versions_of_no_table, True), "a FIFO in .versions": (versions_fifo, True),
    "a file in .versions": (versions_file, True), "a FIFO in the root": (root_fifo, True),
    "a file in the root": (root_file, False),
}


@pytest.mark.parametrize("stray", list(STRAYS))
def test_an_entry_loopmeter_did_not_make_is_named_in_one_line_and_removed_when_safe(copy, stray):
    make, removed = STRAYS[stray]
    path, detail = make(copy)
    outside = copy.parent / "outside.txt"
    found = checked(copy)
    assert found.returncode == 1 and problems(found) == [f"loopmeter: {path}: {detail}"], found.stderr
    repaired = checked(copy, "--repair")
    if removed:
        assert repaired.returncode == 0, repaired.stderr
        assert f"loopmeter: repaired: {path}: removed ({detail.rsplit('; ', 1)[0]})" in repaired.stderr.splitlines()
        # gone; or made again as loopmeter makes it (the lock by the repair that takes it, a state file it writes)
        assert not os.path.lexists(path) or path.is_file() and not path.is_symlink() and os.lstat(path).st_nlink == 1
        assert checked(copy).returncode == 0
    else:
        assert repaired.returncode == 1 and problems(repaired)[-1] == f"loopmeter: {path}: {detail}", repaired.stderr
        if path.name == ".lock":  # no lock can be taken: nothing is repaired, and the line says why
            assert repaired.stderr.splitlines()[-1] == (
                f"loopmeter: not repaired: {path}: no lock can be taken while it is there, so nothing was repaired: "
                "remove it, then run `loopmeter check --repair` again")
        assert os.path.lexists(path) and not path.is_symlink()
    if outside.exists():  # what a link named, or the other name of a hard link: as it was
        assert outside.read_text() == "a user's file\n" and os.stat(outside).st_nlink == 1
    if (copy.parent / "v").exists():
        assert list((copy.parent / "v").iterdir()) == []


LEFTOVERS = ("all whole; {} of a writer at work, or left by one killed (in .scratch/, beside the file or folder "
             "it replaces, or the journal of its publish), which the next writer removes or finishes")


def test_a_writers_scratch_space_is_counted_not_named(copy):
    (copy / ".scratch").mkdir(exist_ok=True)
    (copy / ".scratch" / "tmpabc").mkdir()
    os.mkfifo(copy / ".scratch" / "pipe")
    found = checked(copy)
    assert found.returncode == 0 and problems(found) == [], found.stderr
    assert found.stderr.strip().endswith(LEFTOVERS.format("2 entries"))
    document = json.loads(checked(copy, "--json").stdout)
    assert document["ok"] and document["leftovers"] == 2


def _current(copy: Path) -> str:
    return os.readlink(copy / "runs")


def hijacked(copy):
    (copy / "runs").unlink()
    (copy / "runs").symlink_to("/etc")
    return ("a symbolic link loopmeter did not make (to /etc, never followed) in place of table runs, whose 1 version(s) "
            ".versions/runs/ holds: `loopmeter check --repair` points it back at one (what it points to now is not touched)")


def absolute(copy):
    version = (copy / _current(copy)).resolve()
    (copy / "runs").unlink()
    (copy / "runs").symlink_to(version)
    return (f"a symbolic link loopmeter did not make (to {version}, never followed) in place of table runs, whose 1 "
            "version(s) .versions/runs/ holds: `loopmeter check --repair` points it back at one (what it points to now "
            "is not touched)")


def removed(copy):
    (copy / "runs").unlink()
    return ("table runs has no link, though .versions/runs/ holds 1 version(s) of it: `loopmeter check --repair` links "
            "it again")


@pytest.mark.parametrize("how", [hijacked, absolute, removed], ids=["to /etc", "absolute", "removed"])
def test_a_table_whose_link_is_gone_or_not_loopmeters_is_named_and_linked_back_at_its_version(copy, how):
    version = _current(copy)
    detail = how(copy)
    found = checked(copy)
    assert found.returncode == 1 and problems(found) == [f"loopmeter: {copy / 'runs'}: {detail}"], found.stderr
    repaired = checked(copy, "--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert (f"loopmeter: repaired: table runs: its link points at {version} again (the version .state/verified.json "
            "records)") in repaired.stderr.splitlines()
    assert _current(copy) == version and os.listdir("/etc")  # what the link named: untouched
    counted = run_cli("sql", "SELECT count(*) AS n FROM runs", "--format", "csv", warehouse=copy)
    assert counted.stdout.splitlines() == ["n", "720"]


@pytest.mark.parametrize("record", ["kept", "gone"])
def test_of_several_versions_the_recorded_one_is_linked_else_the_newest(copy, record):
    version = _current(copy)
    newer = ".versions/runs/29991231T235959000000-1-abcdef"  # a killed writer's, say: whole, and newer by its id
    shutil.copytree(copy / version, copy / newer)
    (copy / "runs").unlink()
    if record == "gone":
        (copy / ".state" / "verified.json").unlink()
    repaired = checked(copy, "--repair")
    assert repaired.returncode == 0, repaired.stderr
    said = ("the version .state/verified.json records" if record == "kept" else
            "the newest of its 2 whole versions; no record names one")
    chosen = version if record == "kept" else newer
    assert f"loopmeter: repaired: table runs: its link points at {chosen} again ({said})" in repaired.stderr.splitlines()
    assert _current(copy) == chosen


def test_a_link_at_a_missing_version_is_named_once(copy):
    version = copy / os.readlink(copy / "forge_plans")
    shutil.rmtree(version)
    found = checked(copy)
    assert found.returncode == 1
    assert found.stderr.splitlines() == [f"loopmeter: {copy / 'forge_plans'}: table forge_plans points at a missing "
                                         f"version ({os.path.relpath(version, copy)})"]


def test_a_copied_warehouses_catalog_is_one_line_and_rebuilt_by_repair(demo_warehouse, tmp_path):
    copy = tmp_path / "copied"
    shutil.copytree(demo_warehouse, copy, symlinks=True)
    found = checked(copy)
    assert found.returncode == 1
    assert found.stderr.splitlines() == [
        f"loopmeter: {copy / 'loopmeter.duckdb'}: its views read the tables of the warehouse at {demo_warehouse}, not of "
        "this place (a copied or moved warehouse): any other loopmeter command that opens the warehouse, or `loopmeter "
        "check --repair`, builds them anew for this place"]
    repaired = checked(copy, "--repair")
    assert repaired.returncode == 0 and f"loopmeter: repaired: catalog {copy / 'loopmeter.duckdb'}: rebuilt" in \
        repaired.stderr.splitlines()
    assert checked(copy).returncode == 0


def test_a_copied_warehouse_with_one_view_changed_names_both(demo_warehouse, tmp_path):
    """Views of another place and a view loopmeter did not write: each is named, the one line for the
    first and one for the other."""
    import duckdb

    copy = tmp_path / "copied"
    shutil.copytree(demo_warehouse, copy, symlinks=True)
    with duckdb.connect(str(copy / "loopmeter.duckdb")) as connection:
        connection.execute("CREATE OR REPLACE VIEW runs AS SELECT 1 AS x")
    found = checked(copy)
    assert found.returncode == 1
    lines = found.stderr.splitlines()
    assert lines[0].startswith(f"loopmeter: {copy / 'loopmeter.duckdb'}: its views read the tables of the warehouse "
                               f"at {demo_warehouse}, not of this place")
    assert f"loopmeter: {copy / 'loopmeter.duckdb'}: its view runs is not the one loopmeter writes" in lines


def test_a_version_no_record_says_was_published_is_never_linked_as_the_table(copy):
    """A killed writer's first version of a table (perhaps half written) is not the table: with no record
    naming the table, its version is left for the next writer to remove, never linked by `--repair`."""
    (copy / "runs").unlink()
    for name in ("verified.json", "catalog.json"):
        (copy / ".state" / name).unlink()
    found = checked(copy, "--json")
    assert found.returncode == 1
    assert [(p["kind"], p["problem"]) for p in json.loads(found.stdout)["problems"]] == [
        ("catalog", "holds a view 'runs' of no table")]
    repaired = checked(copy, "--repair")
    assert repaired.returncode == 0 and not os.path.lexists(copy / "runs"), repaired.stderr


def test_the_journal_of_a_publish_under_way_is_a_writers_not_a_problem(copy):
    """While the writer lock is held, the publish journal is the holder's work (check once named it as left
    unfinished while a writer published); once nobody holds the lock, a journal left is named."""
    from loopmeter.storage import lock

    run_cli("aggregate", "--full", "--quiet", warehouse=copy, check=-9, env={"LOOPMETER_CRASH_AT": "publishing:journal"})
    assert (copy / ".state" / "publishing.json").is_file()
    with lock.hold(copy):  # a writer at work (flock: another open file, in this process too)
        during = checked(copy)
    assert during.returncode == 0 and problems(during) == [], during.stderr
    assert during.stderr.strip().endswith(LEFTOVERS.format("1 entry")), during.stderr
    after = checked(copy)
    assert after.returncode == 1 and problems(after) == [
        f"loopmeter: {copy}/.state/publishing.json: a publish was left unfinished (a reader finishes it when no writer "
        "holds the lock)"], after.stderr


def test_a_users_file_named_like_a_writers_temporary_file_is_named_and_kept(copy):
    """Only a temporary file beside a file a writer makes in the root is a writer's (counted, then removed
    by the next writer); a user's `.notes.deadbeef.tmp` is named and left, by check and by every writer."""
    users = copy / ".notes.deadbeef.tmp"
    users.write_text("mine\n")
    writers = copy / ".loopmeter.duckdb.0123abcd.tmp"
    writers.write_bytes(b"half a catalog")
    found = checked(copy)
    assert found.returncode == 1 and problems(found) == [
        f"loopmeter: {users}: is a regular file, an entry loopmeter did not make; {USERS}"], found.stderr
    assert json.loads(checked(copy, "--json").stdout)["leftovers"] == 1
    run_cli("aggregate", "--full", "--quiet", warehouse=copy)
    assert users.read_text() == "mine\n" and not writers.exists()


def test_a_file_in_state_not_named_as_a_writers_temporary_one_is_named_until_repair_removes_it(copy):
    """`.state/` holds loopmeter's files only; of its dot files, only `atomic_write`'s `.<name>.<8 hex>.tmp`
    is a writer's (counted, removed by the next writer). Another (`.notes.tmp`) is named by `check`, left by
    writers, and removed by `--repair`."""
    other = copy / ".state" / ".notes.tmp"
    other.write_text("not a writer's\n")
    writers = copy / ".state" / ".catalog.json.0123abcd.tmp"
    writers.write_text("{")
    found = checked(copy)
    assert found.returncode == 1 and problems(found) == [
        f"loopmeter: {other}: is a regular file, in .state/, which holds loopmeter's state files only; "
        "`loopmeter check --repair` removes it (the entry itself: what a link names is not touched)"], found.stderr
    run_cli("aggregate", "--full", "--quiet", warehouse=copy)
    assert other.exists() and not writers.exists()
    run_cli("check", "--repair", "--quiet", warehouse=copy)
    assert not other.exists() and checked(copy).returncode == 0
