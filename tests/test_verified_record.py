"""`.state/verified.json`: the table files a writer verified are not opened again by the next command,
unless anything about them changed since: a copied warehouse's record vouches for none of its files,
and a file changed in place (even given back its size and modification time) is verified again."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from loopmeter.storage import conformance

COUNT = "SELECT count(*) AS n FROM runs"


@pytest.fixture
def opened(monkeypatch) -> list[Path]:
    """The table files verified by opening them, in this process, from now on."""
    seen: list[Path] = []
    verify = conformance.file_problem

    def counting(table, path, **options):
        seen.append(Path(path))
        return verify(table, path, **options)

    monkeypatch.setattr(conformance, "file_problem", counting)
    return seen


def _copy(demo_warehouse: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, copy, symlinks=True)
    return copy


def _table_files(warehouse: Path) -> list[Path]:
    return sorted(path for path in (warehouse / ".versions").rglob("*.parquet"))


def test_a_writer_s_record_spares_the_next_command_every_file_and_a_copy_s_record_spares_none(
        demo_warehouse, tmp_path, opened):
    warehouse = _copy(demo_warehouse, tmp_path)  # the record came along, the files are new ones
    assert (warehouse / ".state" / "verified.json").is_file()
    run_cli("sql", COUNT, "--format", "json", warehouse=warehouse)
    assert {path.resolve() for path in (warehouse / "runs").rglob("*.parquet")} <= {p.resolve() for p in opened}

    opened.clear()
    run_cli("catalog", warehouse=warehouse)  # a writer: every file verified as it takes the lock, then recorded
    record = json.loads((warehouse / ".state" / "verified.json").read_bytes())
    assert len(record["files"]) == len(_table_files(warehouse))
    assert {entry[0] for entry in record["files"]} == {entry.name for entry in warehouse.iterdir()
                                                        if entry.is_symlink()}

    opened.clear()
    counted = run_cli("sql", COUNT, "--format", "json", warehouse=warehouse)
    assert opened == []
    assert json.loads(counted.stdout)[0]["n"] > 0
    run_cli("catalog", warehouse=warehouse)
    assert opened == []


def test_a_file_changed_in_place_with_its_size_and_times_given_back_is_verified_again(demo_warehouse, tmp_path):
    warehouse = _copy(demo_warehouse, tmp_path)
    run_cli("catalog", warehouse=warehouse)
    (file,) = sorted((warehouse / "runs").rglob("*.parquet"))[:1]
    before = os.stat(file)
    with open(file, "r+b") as handle:  # the same inode and size; its closing magic bytes no longer Parquet's
        handle.seek(-4, os.SEEK_END)
        handle.write(b"XXXX")
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(file)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)

    refused = run_cli("sql", COUNT, warehouse=warehouse, check=1)
    (line,) = refused.stderr.splitlines()
    assert line == (f"loopmeter: error: {file}: a file of table runs is damaged: cannot be read as Parquet (Parquet "
                    "magic bytes not found in footer. Either the file is corrupted or this is not a parquet file.); run "
                    f"`loopmeter check --repair --warehouse {warehouse}` to rebuild what can be rebuilt")


@pytest.mark.parametrize("record", [b"[]", b'{"format": 1, "files": [["runs", false, 1, 2, 3]]}', b"\xff"])
def test_a_record_loopmeter_did_not_write_is_named_and_every_file_verified(demo_warehouse, tmp_path, opened, record):
    warehouse = _copy(demo_warehouse, tmp_path)
    (warehouse / ".state" / "verified.json").write_bytes(record)
    counted = run_cli("sql", COUNT, "--format", "json", warehouse=warehouse)
    assert json.loads(counted.stdout)[0]["n"] > 0
    shown = warehouse / ".state" / "verified.json"
    assert counted.stderr.splitlines() == [f"loopmeter: warning: {shown} is not "
                                           + ("JSON; what it would record is done again" if record == b"\xff"
                                              else "a record loopmeter writes; every table file is verified again")]
    assert {path.resolve() for path in (warehouse / "runs").rglob("*.parquet")} <= {p.resolve() for p in opened}


@pytest.mark.parametrize("how", ["others may write it", "another user's"])
def test_a_record_that_is_not_this_user_s_own_vouches_for_nothing(demo_warehouse, tmp_path, opened, how):
    warehouse = _copy(demo_warehouse, tmp_path)
    run_cli("catalog", warehouse=warehouse)
    record = warehouse / ".state" / "verified.json"
    assert record.stat().st_mode & 0o777 == 0o600
    opened.clear()
    run_cli("sql", COUNT, warehouse=warehouse)
    assert opened == []
    if how == "others may write it":
        record.chmod(0o664)
    else:
        os.chown(record, os.geteuid() + 1234, -1)
    counted = run_cli("sql", COUNT, "--format", "json", warehouse=warehouse)
    assert counted.stderr == ""  # costs time only: nothing to say
    assert {path.resolve() for path in (warehouse / "runs").rglob("*.parquet")} <= {p.resolve() for p in opened}


def test_the_runs_digests_are_recorded_and_taken_again_from_a_file_only_when_its_change_time_changed(
        demo_warehouse, tmp_path, monkeypatch):
    """The aggregate's plan knows which run sets changed by the digests of the runs' files: taken
    from the record while a file is the one recorded, read again for a copied file but not for the
    files an ingest linked into a new version of `runs` (loopmeter's own links change the change
    time: it is taken again just after each), and a digest the record holds is the one used (so a
    wrong one makes its run set computed again: the record is trusted as a cache)."""
    from loopmeter.forgeloop.samples import RunSetPlan, write_results
    from loopmeter.storage import verified

    warehouse = _copy(demo_warehouse, tmp_path)
    read: list[Path] = []
    opening = verified.open_regular
    monkeypatch.setattr(verified, "open_regular", lambda path, *rest: read.append(Path(path).resolve()) or opening(path, *rest))

    def runs(run_set: str = "") -> set[Path]:
        return {path.resolve() for path in (warehouse / "runs").glob(f"run_set_id={run_set or '*'}/*.parquet")}

    def aggregate() -> dict[str, bool]:
        done = run_cli("aggregate", "--json", "--quiet", warehouse=warehouse)
        return {entry["runSetId"]: entry["recomputed"] for entry in json.loads(done.stdout)["runSets"]}

    stored = {"sample-evidence-5": False, "sample-legacy-5": False, "sample-tail-30": False}
    assert aggregate() == stored  # a copy: every file read again, to the same identities
    assert sorted(read) == sorted(runs())
    read.clear()
    assert aggregate() == stored and read == []

    write_results(tmp_path / "more", [RunSetPlan("more-1", 2, scenarios=("small-bug-fix",))], seed=3)
    run_cli("ingest", "forgeloop", str(tmp_path / "more"), "--quiet", warehouse=warehouse)
    assert aggregate() == {**stored, "more-1": True}
    assert sorted(read) == sorted(runs("more-1"))  # the kept ones, linked into the new version, keep their digests
    read.clear()
    assert aggregate() == {**stored, "more-1": False} and read == []

    record_path = warehouse / ".state" / "verified.json"
    record = json.loads(record_path.read_bytes())
    with_digest = [entry for entry in record["files"] if entry[0] == "runs" and len(entry) == 8]
    assert len(with_digest) == len(runs())
    legacy = next(path for path in runs("sample-legacy-5"))
    status = os.lstat(legacy)
    entry = next(entry for entry in with_digest if entry[3] == status.st_ino)
    entry[7] = "0" * 32
    record_path.write_text(json.dumps(record))
    read.clear()
    assert aggregate() == {**stored, "more-1": False, "sample-legacy-5": True}
    assert read == []


def test_a_runs_file_changed_while_an_aggregate_runs_is_read_again_by_the_next(demo_warehouse, tmp_path, monkeypatch):
    """A runs file another program rewrites in place (its size and modification time given back)
    while `aggregate` runs: the digest taken before the change is not recorded under the file's
    new change time, so the next aggregate reads the file and computes its run set again."""
    from loopmeter.storage import writing

    warehouse = _copy(demo_warehouse, tmp_path)
    run_cli("aggregate", "--quiet", warehouse=warehouse)  # the digests recorded
    (victim,) = (warehouse / "runs" / "run_set_id=sample-legacy-5").glob("*.parquet")
    write_file = writing.write_file
    changed = []

    def changing(*args, **kwargs):
        if not changed:  # the first table file the aggregate writes: its plan has read the digests
            status = os.stat(victim)
            data = bytearray(victim.read_bytes())
            data[len(data) // 2] ^= 1
            with open(victim, "r+b") as out:  # in place: the same inode, every other link of it too
                out.write(data)
            os.utime(victim, ns=(status.st_atime_ns, status.st_mtime_ns))
            changed.append(victim)
        return write_file(*args, **kwargs)

    monkeypatch.setattr(writing, "write_file", changing)
    run_cli("aggregate", "--full", "--quiet", warehouse=warehouse)
    assert changed
    monkeypatch.setattr(writing, "write_file", write_file)
    done = json.loads(run_cli("aggregate", "--json", "--quiet", warehouse=warehouse).stdout)
    assert {entry["runSetId"]: entry["recomputed"] for entry in done["runSets"]} == {
        "sample-evidence-5": False, "sample-legacy-5": True, "sample-tail-30": False}


def test_a_runs_file_changed_after_an_ingest_linked_it_is_read_again_by_the_next_aggregate(
        demo_warehouse, tmp_path, monkeypatch):
    """The ingest of a new run set links every other run set's file into the new version of `runs`
    (a change of the file's change time loopmeter made itself, and took again just after). A file
    another program rewrites in place after that link keeps no recorded digest: the next aggregate
    reads it again."""
    from loopmeter.forgeloop.samples import RunSetPlan, write_results
    from loopmeter.storage.verified import Verified

    warehouse = _copy(demo_warehouse, tmp_path)
    run_cli("aggregate", "--quiet", warehouse=warehouse)  # the digests recorded
    (victim,) = (warehouse / "runs" / "run_set_id=sample-legacy-5").glob("*.parquet")
    victim = victim.resolve()
    link = Verified.link
    changed = []

    def linking(self, table, source, target):
        link(self, table, source, target)
        if not changed and Path(source).resolve() == victim:
            status = os.stat(victim)
            data = bytearray(victim.read_bytes())
            data[len(data) // 2] ^= 1
            with open(victim, "r+b") as out:
                out.write(data)
            os.utime(victim, ns=(status.st_atime_ns, status.st_mtime_ns))
            changed.append(victim)

    write_results(tmp_path / "more", [RunSetPlan("more-1", 2, scenarios=("small-bug-fix",))], seed=3)
    monkeypatch.setattr(Verified, "link", linking)
    run_cli("ingest", "forgeloop", str(tmp_path / "more"), "--quiet", warehouse=warehouse)
    monkeypatch.setattr(Verified, "link", link)
    assert changed
    done = json.loads(run_cli("aggregate", "--json", "--quiet", warehouse=warehouse).stdout)
    assert {entry["runSetId"]: entry["recomputed"] for entry in done["runSets"]} == {
        "more-1": True, "sample-evidence-5": False, "sample-legacy-5": True, "sample-tail-30": False}


def test_a_file_changed_in_place_after_a_writer_verified_it_is_not_recorded_as_verified(
        demo_warehouse, tmp_path, monkeypatch):
    """A table file another program rewrites in place (its size and modification time given back)
    after a writer verified it and before the writer records what it verified: the record holds the
    change time it was verified at, which is not the one it has now, so the next command verifies it
    and names it."""
    from loopmeter.storage.verified import Verified

    warehouse = _copy(demo_warehouse, tmp_path)
    (victim,) = sorted((warehouse / "runs").rglob("*.parquet"))[:1]
    save = Verified.save

    def changing_first(self, files):
        status = os.stat(victim)
        with open(victim, "r+b") as handle:
            handle.seek(-4, os.SEEK_END)
            handle.write(b"XXXX")
        os.utime(victim, ns=(status.st_atime_ns, status.st_mtime_ns))
        return save(self, files)

    monkeypatch.setattr(Verified, "save", changing_first)
    run_cli("catalog", warehouse=warehouse)  # a writer: every file verified as it takes the lock
    monkeypatch.setattr(Verified, "save", save)
    record = json.loads((warehouse / ".state" / "verified.json").read_bytes())
    # recorded as it was when verified: its change time now is another, so the record does not match it
    entries = {entry[3]: entry for entry in record["files"]}
    now = os.lstat(victim)
    assert len(record["files"]) == len(_table_files(warehouse))
    assert entries[now.st_ino][6] != now.st_ctime_ns

    refused = run_cli("sql", COUNT, warehouse=warehouse, check=1)
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"loopmeter: error: {victim}: a file of table runs is damaged: cannot be read as Parquet "
                           "(Parquet magic bytes not found")


def test_after_an_ingest_and_an_aggregate_the_next_command_opens_no_table_file(demo_warehouse, tmp_path, opened):
    """The files a writer linked into new versions, and whose old links it removed, stay recorded as
    verified: the next command opens none of them."""
    from loopmeter.forgeloop.samples import RunSetPlan, write_results

    warehouse = _copy(demo_warehouse, tmp_path)
    run_cli("catalog", warehouse=warehouse)
    write_results(tmp_path / "more", [RunSetPlan("more-1", 2, scenarios=("small-bug-fix",))], seed=3)
    for command in (("ingest", "forgeloop", str(tmp_path / "more"), "--quiet"), ("aggregate", "--quiet")):
        run_cli(*command, warehouse=warehouse)
        record = json.loads((warehouse / ".state" / "verified.json").read_bytes())
        assert len(record["files"]) == len(_table_files(warehouse))
        opened.clear()
        counted = run_cli("sql", COUNT, "--format", "json", warehouse=warehouse)
        assert json.loads(counted.stdout)[0]["n"] > 0
        assert opened == []


def test_in_one_process_a_file_rewritten_in_place_after_its_verification_is_verified_again(demo_warehouse, tmp_path):
    """Within one command too: a file verified, then rewritten in place with its size and
    modification time given back, is not taken as verified (its change time is another)."""
    from loopmeter.storage.state import State
    from loopmeter.storage.verified import Verified

    warehouse = _copy(demo_warehouse, tmp_path)
    (path,) = sorted((warehouse / "runs").rglob("*.parquet"))[:1]
    verified = Verified(State(warehouse))
    verified.add("runs", path, os.lstat(path))
    assert verified.known("runs", path, os.lstat(path))
    status = os.lstat(path)
    with open(path, "r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(b"XXXX")
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert not verified.known("runs", path, os.lstat(path))


def test_a_file_swapped_while_it_is_verified_is_not_taken_as_verified(demo_warehouse, tmp_path, monkeypatch):
    """The file listed and the file opened for the verification must be one, unchanged: a good file
    put in its place for the moment of the verification leaves the bad one unverified."""
    from loopmeter.storage.warehouse import Warehouse

    warehouse = _copy(demo_warehouse, tmp_path)
    (path,) = sorted((warehouse / "runs").rglob("*.parquet"))[:1]
    path = path.resolve()
    good = path.read_bytes()
    bad = bytearray(good)
    bad[-5] ^= 0xFF  # the footer's length: no longer Parquet
    path.write_bytes(bytes(bad))
    verify = conformance.file_problem

    def swapping(table, file, **options):
        if Path(file).resolve() == path:
            aside = path.with_name("aside")
            os.rename(path, aside)
            path.write_bytes(good)  # the good file, opened and verified in place of the bad one
            try:
                return verify(table, file, **options)
            finally:
                os.replace(aside, path)
        return verify(table, file, **options)

    monkeypatch.setattr(conformance, "file_problem", swapping)
    store = Warehouse(warehouse)
    assert store.mismatches("runs") == []  # the good one was verified ...
    assert not store.verified.known("runs", path, os.lstat(path))  # ... the bad one is not taken as verified
