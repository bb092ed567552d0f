"""The walk a re-ingest makes with helper processes (`walk_digested`) against the plain
sequential walk (`discover_by_run_set`): the same folders, digests and files, or None
where it cannot stand for it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_as_a_user
from loopmeter.forgeloop.walk import Digested, digest, discover_by_run_set, group_of, walk_digested
from runs import run, write_tree

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the helpers need two cores")


def sequential(results: Path, selected=lambda name: True) -> dict[str, tuple[str, int, list]]:
    """group -> (digest, count, files), as TreeState builds it from the sequential walk."""
    groups: dict[str, tuple[str, int, list]] = {}
    for found in discover_by_run_set(results):
        found = [seen for seen in found if seen.run_set_id is None or selected(seen.run_set_id)]
        add(groups, found)
    return groups


def add(groups: dict, found: list) -> None:
    """A list of files the walk gave, added to its group as TreeState adds it (digests chained)."""
    if found:
        group = group_of(found[0].path)
        before, count, files = groups.get(group, ("", 0, []))
        groups[group] = (digest(found, before), count + len(found), files + found)


def parallel(results: Path, wanted: set[str], selected=lambda name: True) -> dict[str, tuple[str, int, list | None]] | None:
    walked = walk_digested(results, selected, lambda group, seen: group in wanted)
    if walked is None:
        return None
    groups: dict[str, tuple[str, int, list | None]] = {}
    for found in walked:
        if isinstance(found, Digested):
            if found.count:
                assert found.group not in groups
                groups[found.group] = (found.digest, found.count, found.files)
            continue
        add(groups, found)
    return groups


def same(results: Path, wanted: set[str], selected=lambda name: True) -> None:
    expected = sequential(results, selected)
    got = parallel(results, wanted, selected)
    assert got is not None
    assert list(got) == list(expected)  # the order of the groups too: the answer lists them in it
    for group, (seen, count, files) in expected.items():
        assert got[group][:2] == (seen, count), group
        if group == "" or group in wanted:
            assert got[group][2] == files, group
        else:
            assert got[group][2] is None, group


def write(path: Path, text: str = "{}") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_every_kind_of_entry_is_answered_as_the_sequential_walk_does(tmp_path):
    raw = tmp_path / "raw"
    for run_set in ("rs-a", "rs-b", "rs-c", "rs-d", "rs-e"):
        write(raw / run_set / "one.json")
        write(raw / run_set / "deeper" / "two.json", "{" * 7)
    write(raw / "rs-b" / "notes.txt")  # not a run file
    (raw / "rs-empty").mkdir()  # no run file: no group
    write(raw / "bad name!" / "x.json")  # rejected by its folder's name, still walked
    write(raw / "a.json")  # files directly in raw/: one group, ""
    write(raw / "z.json")
    os.mkfifo(raw / "rs-c" / "pipe.json")
    os.mkdir(os.fsencode(raw) + b"/caf\xe9")  # a folder whose name is not UTF-8
    with open(os.fsencode(raw / "rs-d") + b"/\xff.json", "w") as handle:
        handle.write("{}")
    same(tmp_path, wanted={"rs-b", "bad name!"})
    same(tmp_path, wanted=set())
    same(tmp_path, wanted={"rs-a", "rs-c", "rs-d", "rs-e"}, selected=lambda name: name in {"rs-a", "rs-c", "rs-e"})


def test_a_symbolic_link_anywhere_leaves_the_walk_to_the_caller(tmp_path):
    raw = tmp_path / "raw"
    for run_set in ("rs-a", "rs-b", "rs-c"):
        write(raw / run_set / "one.json")
    assert parallel(tmp_path, set()) is not None
    (raw / "rs-c" / "inner").symlink_to(raw / "rs-a")  # met by a helper or by this process
    assert parallel(tmp_path, set()) is None
    (raw / "rs-c" / "inner").unlink()
    (raw / "rs-link").symlink_to(raw / "rs-a")  # an entry of raw/
    assert parallel(tmp_path, set()) is None
    (raw / "rs-link").unlink()
    # in a folder not selected: the sequential walk enters it too, and then skips what it visited
    (raw / "rs-a" / "inner").symlink_to(raw / "rs-b")
    assert parallel(tmp_path, set(), selected=lambda name: name in {"rs-b", "rs-c"}) is None


@pytest.mark.slow
def test_a_folder_that_cannot_be_read_is_reported_alike_by_every_ingest(tmp_path):
    """Its rejection belongs to raw/ itself in the sequential walk ("raw/rs-b"): the walk of a
    re-ingest, where a helper reads that folder, answers it the same way."""
    results = write_tree(tmp_path / "results", [run(run_set=name) for name in ("rs-a", "rs-b", "rs-c")])
    (results / "raw" / "rs-b").chmod(0o000)
    command = [sys.executable, "-m", "loopmeter", "ingest", "forgeloop", str(results), "--json", "--warehouse", str(tmp_path / "w")]
    try:
        answers = [run_as_a_user(command) for _ in range(3)]
    finally:
        (results / "raw" / "rs-b").chmod(0o755)
    for attempt, done in enumerate(answers):
        assert done.returncode == 3, (attempt, done.stderr)
        answer = json.loads(done.stdout)
        assert answer["rejections"] == [{"path": "raw/rs-b", "field": "file", "reason": "directory cannot be read (Permission denied)"}]
        assert (answer["accepted"], answer["unchanged"], answer["runSets"]) == ((2, 0) if attempt == 0 else (0, 2)) + (["rs-a", "rs-c"],)


def test_a_helper_that_fails_leaves_the_walk_to_the_caller(tmp_path):
    for run_set in ("rs-a", "rs-b", "rs-c", "rs-d"):
        write(tmp_path / "raw" / run_set / "one.json")
    me = os.getpid()

    def wanted(group: str, seen: str) -> bool:
        if os.getpid() != me:
            raise RuntimeError("a helper's failure")
        return False
    assert walk_digested(tmp_path, lambda name: True, wanted) is None
    with pytest.raises(ChildProcessError):  # and no helper is left behind, running or not reaped
        os.waitpid(-1, os.WNOHANG)


names = st.sampled_from(["a", "b", "rs-1", "rs-2", "rs-3", "rs x", "z"])
trees = st.lists(
    st.tuples(st.lists(names, min_size=0, max_size=3), names, st.sampled_from([".json", ".txt"]), st.binary(max_size=3)),
    max_size=25,
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees, wanted=st.sets(names), selected=st.none() | st.sets(names))
def test_random_trees_are_answered_as_the_sequential_walk_does(tree, wanted, selected):
    with tempfile.TemporaryDirectory() as directory:
        results = Path(directory)
        (results / "raw").mkdir()
        for folders, name, suffix, content in tree:
            path = results.joinpath("raw", *folders, name + suffix)
            if any(parent.is_file() for parent in path.parents) or path.is_dir():
                continue  # a file where a folder should be (or the reverse): not this tree
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        chosen = (lambda name: True) if selected is None else (lambda name: name in selected)
        folders = [entry for entry in os.scandir(results / "raw") if entry.is_dir() and chosen(entry.name)]
        if len(folders) < 2:  # too few folders to share: the caller walks
            assert parallel(results, wanted, chosen) is None
        else:
            same(results, wanted, chosen)


HELPER_LIFE = """
import fcntl, os, signal, sys, time
from loopmeter.forgeloop.walk import _fork_helpers
lock = open(sys.argv[1], "a+")
fcntl.flock(lock, fcntl.LOCK_EX)
def work(share):
    open(sys.argv[1] + ".working", "w").close()  # past its start: its forker's files closed
    time.sleep(60)
helpers = []
_fork_helpers([[1]], work, helpers)
while not os.path.exists(sys.argv[1] + ".working"):
    time.sleep(0.01)
lock.close()  # the lock is free once this process lets it go: the helper holds no copy of it
again = open(sys.argv[1], "a+")
fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
print(helpers[0].pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # a helper still walking ends with its forker
"""


def test_a_helper_holds_no_file_of_its_forker_and_ends_with_it(tmp_path):
    started = time.monotonic()
    # the helper keeps stdout and stderr: the run ends (EOF) only once it is gone too
    done = subprocess.run([sys.executable, "-c", HELPER_LIFE, str(tmp_path / ".lock")], capture_output=True, text=True,
                          cwd=ROOT, timeout=30)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.strip().isdigit() and time.monotonic() - started < 20
