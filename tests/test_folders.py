"""Folders replaced whole (`pipeline/folders.py`): what a swap leaves, whatever it finds, and
every state a killed swap can leave finished by the next one."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopmeter.errors import LoopmeterError
from loopmeter.storage import folders


def contents(folder: Path) -> dict[str, bytes | str]:
    """A folder's entries: a file's bytes, a link's target (as `link:<target>`)."""
    return {
        entry.name: f"link:{os.readlink(entry.path)}" if entry.is_symlink() else Path(entry.path).read_bytes()
        for entry in os.scandir(folder)
    }


def hidden(parent: Path) -> list[str]:
    return sorted(name for name in os.listdir(parent) if name.startswith("."))


@pytest.fixture(params=["exchange", "aside"])
def how(request, monkeypatch):
    """Both ways of swapping: renameat2(RENAME_EXCHANGE), and the current folder renamed aside."""
    if request.param == "aside":
        monkeypatch.setenv("LOOPMETER_NO_EXCHANGE", "1")
    return request.param


def test_exchange_is_what_the_swap_uses_where_there_is_one(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    (first / "a").write_text("1")
    second.mkdir()
    assert folders._exchange(first, second)  # this machine's ext4 has it
    assert os.listdir(second) == ["a"] and os.listdir(first) == []
    with pytest.raises(FileNotFoundError):
        folders._exchange(first, tmp_path / "missing")


def test_a_swap_keeps_unchanged_files_and_other_entries_and_replaces_the_rest(tmp_path, how):
    target = tmp_path / "run-set"
    target.mkdir()
    (target / "same.json").write_bytes(b"same\n")
    (target / "changed.json").write_bytes(b"old\n")
    (target / "notes.txt").write_bytes(b"a user's\n")  # not ours: kept
    os.symlink("same.json", target / "link")
    os.utime(target / "same.json", ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    os.chmod(target, 0o750)
    same, folder_inode = os.stat(target / "same.json"), target.stat().st_ino
    entry = folders.stage(target, {"same.json": b"same\n", "changed.json": b"new\n", "added.json": b"added\n"})
    assert entry is not None and entry.staged.parent == tmp_path and entry.staged.name.startswith(".run-set.")
    assert contents(target)["changed.json"] == b"old\n"  # nothing visible changes before the swap
    folders.swap(entry)
    assert contents(target) == {"same.json": b"same\n", "changed.json": b"new\n", "added.json": b"added\n",
                                "notes.txt": b"a user's\n", "link": "link:same.json"}
    now = os.stat(target / "same.json")
    assert (now.st_ino, now.st_mtime_ns) == (same.st_ino, same.st_mtime_ns)
    assert target.stat().st_ino != folder_inode and target.stat().st_mode & 0o777 == 0o750


def test_the_new_folder_keeps_the_old_one_s_owner_where_the_writer_may_give_it(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root may give a folder to another user")
    target = tmp_path / "run-set"
    target.mkdir()
    os.chown(target, 1234, 5678)
    folders.swap(folders.stage(target, {"a.json": b"a"}))
    assert (target.stat().st_uid, target.stat().st_gid) == (1234, 5678)
    assert hidden(tmp_path) == []


def test_nothing_changed_means_nothing_staged_and_a_new_folder_is_staged_whole(tmp_path):
    target = tmp_path / "run-set"
    target.mkdir()
    (target / "a.json").write_bytes(b"a")
    assert folders.stage(target, {"a.json": b"a"}) is None
    assert hidden(tmp_path) == []
    fresh = folders.stage(tmp_path / "new", {"a.json": b"a", "b.json": b"b"})
    assert not (tmp_path / "new").exists()
    folders.swap(fresh)
    assert contents(tmp_path / "new") == {"a.json": b"a", "b.json": b"b"} and hidden(tmp_path) == []


def test_a_folder_that_cannot_be_staged_has_its_files_replaced_one_by_one(tmp_path):
    target = tmp_path / "run-set"
    (target / "sub").mkdir(parents=True)
    (target / "a.json").write_bytes(b"old")
    assert folders.stage(target, {"a.json": b"new", "b.json": b"b"}) is None  # written already
    assert (target / "a.json").read_bytes() == b"new" and (target / "b.json").read_bytes() == b"b"
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "linked")
    with pytest.raises(LoopmeterError, match="documents are never written through a link"):
        folders.stage(tmp_path / "linked", {"a.json": b"a"})
    assert (tmp_path / "linked").is_symlink() and list(real.iterdir()) == []  # nothing written through the link
    assert hidden(tmp_path) == [] and hidden(target) == []


def _killed_states(tmp_path: Path, how: str) -> list[tuple[str, folders.Staged]]:
    """Every state a swap killed part way leaves, each in a folder of its own."""
    states = []
    for state in ("staged", "exchanged" if how == "exchange" else "aside", "swapped"):
        parent = tmp_path / state
        target = parent / "run-set"
        target.mkdir(parents=True)
        (target / "a.json").write_bytes(b"old")
        (target / "b.json").write_bytes(b"kept")
        entry = folders.stage(target, {"a.json": b"new", "b.json": b"kept"})
        if state == "exchanged":
            assert folders._exchange(entry.staged, target)
        elif state == "aside":
            os.rename(target, entry.aside)
        elif state == "swapped":
            folders.swap(entry, remove=False)
        states.append((state, entry))
    return states


def test_every_state_a_killed_swap_leaves_is_finished_by_the_next(tmp_path, how):
    for state, entry in _killed_states(tmp_path, how):
        folders.swap(entry)
        assert contents(entry.target) == {"a.json": b"new", "b.json": b"kept"}, state
        assert hidden(entry.target.parent) == [], state
        folders.swap(entry)  # and once more: nothing to do
        assert contents(entry.target) == {"a.json": b"new", "b.json": b"kept"}, state


def test_a_discarded_or_left_staged_folder_changes_nothing_and_is_collected(tmp_path):
    target = tmp_path / "run-set"
    target.mkdir()
    (target / "a.json").write_bytes(b"old")
    folders.discard(folders.stage(target, {"a.json": b"new"}))
    assert hidden(tmp_path) == []
    folders.stage(target, {"a.json": b"new"})  # a killed writer's
    (tmp_path / ".someone-else's").mkdir()
    assert len(hidden(tmp_path)) == 2
    folders.collect_leftovers(tmp_path)
    assert hidden(tmp_path) == [".someone-else's"] and contents(target) == {"a.json": b"old"}


names = st.sampled_from(["a.json", "b.json", "c.json", "summary.json", "notes.txt"])
data = st.sampled_from([b"", b"1", b"2", b"{}\n"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.none() | st.dictionaries(names, data), files=st.dictionaries(names, data),
       exchange=st.booleans())
def test_a_swap_leaves_what_replacing_each_file_would(tmp_path, before, files, exchange):
    """Against the obvious: the folder as before, each file of `files` written over it."""
    place = tmp_path / "case"
    shutil.rmtree(place, ignore_errors=True)
    place.mkdir()
    target = place / "run-set"
    if before is not None:
        target.mkdir()
        for name, value in before.items():
            (target / name).write_bytes(value)
    inodes = {name: (target / name).stat().st_ino for name in before or {}}
    expected = {**(before or {}), **files}
    os.environ.pop("LOOPMETER_NO_EXCHANGE", None)
    if not exchange:
        os.environ["LOOPMETER_NO_EXCHANGE"] = "1"
    try:
        entry = folders.stage(target, files)
        if entry is not None:
            folders.swap(entry)
    finally:
        os.environ.pop("LOOPMETER_NO_EXCHANGE", None)
    assert (entry is None) == (before is not None and all(before.get(k) == v for k, v in files.items()))
    assert contents(target) == expected
    for name, inode in inodes.items():  # what did not change is the same file
        if name not in files or files[name] == before[name]:
            assert (target / name).stat().st_ino == inode
    assert hidden(place) == []


def test_what_appears_in_the_folder_after_staging_is_carried_over(tmp_path, how):
    target = tmp_path / "run-set"
    target.mkdir()
    (target / "a.json").write_bytes(b"old")
    entry = folders.stage(target, {"a.json": b"new"})
    (target / "saved-meanwhile.txt").write_bytes(b"mine")  # a user's, while the tables were written
    (target / "folder").mkdir()
    (target / "folder" / "inside").write_bytes(b"x")
    folders.swap(entry)
    assert sorted(os.listdir(target)) == ["a.json", "folder", "saved-meanwhile.txt"]
    assert (target / "a.json").read_bytes() == b"new" and (target / "saved-meanwhile.txt").read_bytes() == b"mine"
    assert (target / "folder" / "inside").read_bytes() == b"x" and hidden(tmp_path) == []


def test_new_contents_gone_leave_the_old_in_place_even_when_renamed_aside(tmp_path):
    target = tmp_path / "run-set"
    target.mkdir()
    (target / "a.json").write_bytes(b"old")
    entry = folders.stage(target, {"a.json": b"new"})
    os.rename(target, entry.aside)  # killed between the two renames
    shutil.rmtree(entry.staged)  # and the new contents removed by hand
    folders.swap(entry)
    assert contents(target) == {"a.json": b"old"} and hidden(tmp_path) == []


def test_a_target_replaced_by_a_file_meanwhile_stays_and_the_new_contents_go(tmp_path):
    target = tmp_path / "run-set"
    target.mkdir()
    entry = folders.stage(target, {"a.json": b"new"})
    target.rmdir()
    target.write_text("a user's file")
    folders.swap(entry)
    assert target.read_text() == "a user's file" and hidden(tmp_path) == []


def test_the_journal_s_paths_are_absolute_whatever_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    entry = folders.stage(Path("run-set"), {"a.json": b"a"})
    assert entry.staged.is_absolute() and entry.target == tmp_path / "run-set"
    monkeypatch.chdir("/")
    folders.swap(folders.Staged.from_json(entry.as_json()))
    assert contents(tmp_path / "run-set") == {"a.json": b"a"}
