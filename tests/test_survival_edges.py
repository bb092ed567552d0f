"""The survival harvest at the edges of its input: a clock set ahead, an integration logged twice or
naming no branch or candidate, a repository's log encoding, outcomes found in a store that no
harvest could have written. One real repository, built by hand: base B, a task commit R adding 5
lines to a.txt and a 3-line b.txt, its merge C into main, and 3 days later a commit deleting 2 of
the task's lines: 8 lines added, 6 surviving at 14 days."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli

T = 1_767_000_000
DAY = 86400


def _git(repo: Path, *args: str, at: int | None = None) -> str:
    env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    if at is not None:
        env.update(GIT_AUTHOR_DATE=f"@{at} +0000", GIT_COMMITTER_DATE=f"@{at} +0000")
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(repo: Path, at: int, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=t", "commit", "-q", "-m", message, at=at)
    return _git(repo, "rev-parse", "HEAD")


def _store(root: Path, *, integrated: int = T, later: int | None = None, integrations: list[dict] | None = None,
           extra: list[dict] = ()) -> tuple[Path, dict]:
    repo = root / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("".join(f"{n}\n" for n in range(1, 11)))
    base = _commit(repo, integrated, "base")
    _git(repo, "checkout", "-q", "-b", "task1")
    (repo / "a.txt").write_text("".join(f"{n}\n" for n in [*range(1, 11), *range(101, 106)]))
    (repo / "b.txt").write_text("x\ny\nz\n")
    reviewed = _commit(repo, integrated + 100, "task work")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=t", "merge", "-q", "--no-ff", "task1", "-m", "Integrate",
         at=integrated + 200)
    candidate = _git(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("".join(f"{n}\n" for n in [*range(1, 11), 103, 104, 105]))
    _commit(repo, integrated + 3 * DAY if later is None else later, "edit a")
    integration = {"name": "integrate_advanced", "branch": "main", "parent": base, "candidate": candidate}
    lines = [{"kind": "repo", "repo": "r1", "path": str(repo)}]
    events = [
        ("plan", None, {"revision": 1, "tasks": {"t1": {"declared_difficulty": "low"}}}),
        ("attempt", "t1", {"n": 1, "dwarf": "son", "status": "started"}),
        ("dispatch", "t1", {"role": "dwarf", "attempt": 1, "spec": "son", "model": "sonnet", "effort": "high"}),
        ("attempt", "t1", {"n": 1, "dwarf": "son", "status": "passed", "reviewed_commit": reviewed, "base_ref": base}),
        ("event", "t1", {"name": "merge", "status": "MERGED", "commit": reviewed}),
    ]
    for number, (kind, task, data) in enumerate(events, 1):
        lines.append({"rid": f"e{number}", "kind": kind, "ts": integrated + 10 + number, "run": "run1", "task": task,
                      "repo": "r1", "data": data})
    for number, changed in enumerate(integrations or [{}], 1):
        lines.append({"rid": f"i{number}", "kind": "event", "ts": integrated + 200 - number + 1, "run": "run1",
                      "task": None, "repo": "r1", "data": {**integration, **changed}})
    lines += list(extra)
    store = root / "store.jsonl"
    store.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return store, {"repo": repo, "base": base, "reviewed": reviewed, "candidate": candidate}


def _harvested(root: Path, store: Path, *options: str, check: int | None = 0):
    warehouse = root / "w"
    run_cli("ingest", "forge", str(store), "--quiet", warehouse=warehouse)
    result = run_cli("harvest", "survival", "--include-temp", "--json", *options, warehouse=warehouse, check=check)
    return json.loads(result.stdout), result, warehouse


def test_the_hand_built_repository_keeps_6_of_8_lines(tmp_path):
    store, made = _store(tmp_path)
    found, _, _ = _harvested(tmp_path, store, "--now", str(T + 30 * DAY))
    (outcome,) = found["outcomes"]
    assert (outcome["data"]["added"], outcome["data"]["surviving"], outcome["data"]["status"]) == (8, 6, "ok")
    assert outcome["data"]["files"] == {"a.txt": [5, 3], "b.txt": [3, 3]} and outcome["data"]["reviewed"] == made["reviewed"]


def test_a_horizon_ahead_of_now_is_pending_though_a_commit_is_dated_after_it(tmp_path):
    """A commit dated in 2030 (a clock set ahead) lies after every horizon; the present does not."""
    store, _ = _store(tmp_path, later=1_900_000_000)
    found, _, warehouse = _harvested(tmp_path, store, "--now", str(T + 260), "--horizon-days", "1",
                                     "--horizon-days", "14")
    assert [entry["counts"] for entry in found["horizons"]] == [{"pending": 1}, {"pending": 1}]
    assert found["recorded"] == 0
    # once the horizon has passed, it is measured
    later = json.loads(run_cli("harvest", "survival", "--include-temp", "--json", "--now", str(T + 2 * DAY),
                               "--horizon-days", "1", warehouse=warehouse).stdout)
    assert later["counts"] == {"ok": 1} and later["outcomes"][0]["data"]["surviving"] == 8


def test_an_integration_logged_twice_is_measured_once_and_one_without_a_branch_is_not_lost(tmp_path):
    store, _ = _store(tmp_path, integrations=[{}, {"branch": None}, {}])
    found, result, warehouse = _harvested(tmp_path, store, "--now", str(T + 30 * DAY))
    # i3 repeats i1; i2 names no branch, but its candidate was measured through i1: nothing is left undone
    assert found["counts"] == {"ok": 1, "already": 2} and found["recorded"] == 1 and found["unharvested"] == []
    (outcome,) = found["outcomes"]
    assert (outcome["data"]["surviving"], outcome["data"]["status"]) == (6, "ok")
    rids = run_cli("sql", "SELECT rid FROM forge_events WHERE kind = 'outcome'", "--format", "csv",
                   warehouse=warehouse).stdout.split()
    assert rids == ["rid", outcome["rid"]]
    again = json.loads(run_cli("harvest", "survival", "--include-temp", "--json", "--now", str(T + 30 * DAY),
                               warehouse=warehouse).stdout)
    assert again["counts"] == {"already": 3} and again["recorded"] == 0


def test_an_integration_that_cannot_be_read_is_measured_through_a_later_one_of_its_candidate(tmp_path):
    store, _ = _store(tmp_path, integrations=[{"branch": "gone"}, {}])
    found, _, _ = _harvested(tmp_path, store, "--now", str(T + 30 * DAY))
    assert found["counts"] == {"ok": 1, "already": 1} and found["unharvested"] == []
    assert found["outcomes"][0]["data"]["surviving"] == 6


def test_a_branch_that_is_not_in_the_repository_is_left_for_next_time(tmp_path):
    store, _ = _store(tmp_path, integrations=[{"branch": "no-such-branch"}])
    found, result, _ = _harvested(tmp_path, store, "--now", str(T + 30 * DAY), check=3)
    assert found["counts"] == {"branch_missing": 1} and found["outcomes"] == []
    assert found["unharvested"][0]["detail"] == f"branch no-such-branch is not in {tmp_path / 'repo'}"


@pytest.mark.parametrize("changed, counts, code", [
    ({"candidate": "1" * 40}, {"candidate_missing": 1}, 3),
    ({"candidate": None}, {"no_candidate": 1}, 0),
    ({"parent": ""}, {"no_candidate": 1}, 0),
])
def test_an_integration_that_cannot_be_measured_is_counted(tmp_path, changed, counts, code):
    store, _ = _store(tmp_path, integrations=[changed])
    found, _, _ = _harvested(tmp_path, store, "--now", str(T + 30 * DAY), check=code)
    assert found["counts"] == counts and found["outcomes"] == []


def test_the_repository_s_log_encoding_changes_nothing(tmp_path):
    store, made = _store(tmp_path)
    _git(made["repo"], "config", "i18n.logOutputEncoding", "UTF-16")
    found, _, _ = _harvested(tmp_path, store, "--now", str(T + 30 * DAY))
    assert found["counts"] == {"ok": 1} and found["outcomes"][0]["data"]["surviving"] == 6


def test_an_empty_now_is_refused(tmp_path):
    store, _ = _store(tmp_path)
    run_cli("ingest", "forge", str(store), "--quiet", warehouse=tmp_path / "w")
    result = run_cli("harvest", "survival", "--include-temp", "--now", "", warehouse=tmp_path / "w", check=2)
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "--now ''" in result.stderr


def test_outcomes_in_a_store_must_be_what_a_harvest_writes(tmp_path):
    def outcome(rid: str, **data) -> dict:
        return {"rid": rid, "kind": "outcome", "ts": T + 20 * DAY, "run": "run1", "task": "t1", "repo": "r1",
                "data": {"name": "survival", "candidate": "c", "reviewed": "x", "horizon_days": 14, "added": 8,
                         "surviving": 6, "reverted_by": [], "status": "ok", **data}}

    extra = [outcome("o1", surviving=99), outcome("o2", horizon_days=-3), outcome("o3", added=-5, surviving=-7),
             outcome("o7", added=2 ** 53, surviving=2 ** 53 + 1), outcome("o4", status="weird"),
             outcome("o5", status=None), outcome("o6")]
    store, _ = _store(tmp_path, extra=extra)
    ingested = run_cli("ingest", "forge", str(store), "--quiet", warehouse=tmp_path / "w", check=3)
    told = [line.split(": ", 1)[1] for line in ingested.stderr.splitlines() if line.startswith("rejected")]
    assert told == [
        "data.surviving: must be at most data.added (lines surviving of those added)",
        "data.horizon_days: must be a whole number of days from 0 to 2^53 - 1, or null",
        "data.added: must be a count of lines from 0 to 2^53 - 1, or null",
        "data.added: must be a count of lines from 0 to 2^53 - 1, or null",
        "data.status: must be ok, no_additions or lost (a survival outcome)",
        "data.status: must be ok, no_additions or lost (a survival outcome)",
    ], ingested.stderr
    stored = run_cli("sql", "SELECT rid FROM forge_outcomes", "--format", "csv", warehouse=tmp_path / "w").stdout.split()
    assert stored == ["rid", "o6"]


# ---- names and histories a hostile store or repository gives -------------------------------------

@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("field", ["candidate", "base_ref"])
def test_a_commit_named_like_an_option_is_measured_and_never_read_as_one(tmp_path, field, dry_run):
    """A store names the candidate (or the base) `--output=FILE`, and the repository holds a ref of that
    name: git is given the commit ids the names resolve to, never the names, so no file is written (git
    would open FILE for writing) and the task is measured as under its own name."""
    store, made = _store(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    name = f"--output={victim}"
    commit = made["candidate"] if field == "candidate" else made["base"]
    _git(made["repo"], "update-ref", f"refs/heads/{name}", commit)
    text = store.read_text()
    if field == "candidate":
        text = text.replace(f'"candidate": "{commit}"', f'"candidate": "{name}"')
    else:
        text = text.replace(f'"base_ref": "{commit}"', f'"base_ref": "{name}"')
    store.write_text(text)
    found, _, _ = _harvested(tmp_path, store, "--now", str(T + 30 * DAY), *(["--dry-run"] if dry_run else []))
    assert victim.read_text() == "precious\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["repo", "store.jsonl", "victim.txt", "w"])
    (outcome,) = found["outcomes"]
    assert (outcome["data"]["added"], outcome["data"]["surviving"], outcome["data"]["status"]) == (8, 6, "ok")
    assert outcome["data"][field] == name


def test_a_commit_dated_beyond_any_timestamp_is_recorded_with_its_number(tmp_path):
    """A candidate whose committer wrote a time of year 3170843 is the horizon revision: the outcome is
    recorded (its JSON keeps the number; the table's timestamp, which cannot hold it, is null) and
    nothing else is lost."""
    store, made = _store(tmp_path)
    repo = made["repo"]
    _git(repo, "reset", "-q", "--hard", made["candidate"])
    raw = _git(repo, "cat-file", "commit", "HEAD")
    far = subprocess.run(["git", "-C", str(repo), "hash-object", "-t", "commit", "-w", "--stdin"], check=True,
                         capture_output=True, text=True,
                         input=re.sub(r"(?m)^(committer .*) \d+ \+0000$", r"\1 99999999999999 +0000", raw) + "\n").stdout.strip()
    _git(repo, "update-ref", "refs/heads/main", far)
    store.write_text(store.read_text().replace(made["candidate"], far))
    found, _, warehouse = _harvested(tmp_path, store, "--now", str(T + 30 * DAY))
    (outcome,) = found["outcomes"]
    assert outcome["data"]["horizon_ts"] == 99999999999999 and outcome["data"]["status"] == "ok"
    assert found["recorded"] == 1
    stored = run_cli("sql", "SELECT horizon, added, surviving FROM forge_outcomes", "--format", "json",
                     warehouse=warehouse).stdout
    assert json.loads(stored) == [{"horizon": None, "added": 8, "surviving": 8}]


def test_a_grafts_file_in_the_repository_changes_nothing(tmp_path):
    """git still reads the deprecated `.git/info/grafts` (replace refs are already ignored): one that cuts
    the history would turn measured lines into lost ones. The harvest reads the repository's objects alone."""
    store, made = _store(tmp_path / "plain")
    plain, _, _ = _harvested(tmp_path / "plain", store, "--now", str(T + 30 * DAY))
    store, made = _store(tmp_path / "grafted")
    main = _git(made["repo"], "rev-parse", "main")
    (made["repo"] / ".git" / "info").mkdir(exist_ok=True)
    (made["repo"] / ".git" / "info" / "grafts").write_text(f"{main}\n")  # main's history cut: no parents
    grafted, _, _ = _harvested(tmp_path / "grafted", store, "--now", str(T + 30 * DAY))
    assert [o["data"]["status"] for o in grafted["outcomes"]] == [o["data"]["status"] for o in plain["outcomes"]] == ["ok"]
    assert grafted["outcomes"][0]["data"]["surviving"] == plain["outcomes"][0]["data"]["surviving"] == 6


def _unkeyed(key: str) -> str:
    """The path a file key names (the slow, obvious inverse of `file_key`)."""
    out, at = [], 0
    while at < len(key):
        if key[at] != "\\":
            out.append(key[at])
            at += 1
            continue
        kind = key[at + 1]
        if kind == "\\":
            out.append("\\")
            at += 2
        elif kind in "ntr":
            out.append({"n": "\n", "t": "\t", "r": "\r"}[kind])
            at += 2
        elif kind == "x":
            out.append(chr(0xDC00 + int(key[at + 2:at + 4], 16)))
            at += 4
        else:
            width = 4 if kind == "u" else 8
            out.append(chr(int(key[at + 2:at + 2 + width], 16)))
            at += 2 + width
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(name=st.binary(min_size=1, max_size=12).map(lambda raw: raw.decode("utf-8", "surrogateescape"))
       | st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12))
def test_no_two_files_share_a_key_and_a_plain_name_is_its_own(name):
    """An outcome's `files` once keyed a file named with a line break and one named `new\\nline.txt` alike,
    losing one. Each key names one path (it decodes back to it); a printable name without a backslash
    is its own key, as the seed keys it."""
    from loopmeter.forge.measure import file_key

    key = file_key(name)
    assert _unkeyed(key) == name
    assert (key == name) == (name.isprintable() and "\\" not in name)
    assert key.isprintable()
