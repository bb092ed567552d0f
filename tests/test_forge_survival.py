"""Survival: the harvest on real git history (merges, a revert, rewrites, a reset, binaries), the seed as
oracle, read-only git, shared blame, hostile repositories, and the survival join."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import run_cli
from forge_fixtures import retarget, seed_harvest, tree_fingerprint
from loopmeter.forge import samples
from loopmeter.forge import tables as t
from loopmeter.forge.ingest import ingest_forge
from loopmeter.forge.survival import harvest, outcome_rid, record
from loopmeter.storage import Warehouse


def build(root: Path, **options):
    sample = samples.build_git_sample(root / "repos", **options)
    repos = sample.repos + [("gone", str(root / "repos" / "gone"))]
    store = samples.write_sqlite(root / "store" / "dataset.sqlite", repos, sample.events)
    warehouse = Warehouse(root / "warehouse")
    ingest_forge(warehouse, store)
    return sample, store, warehouse


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("survival"))


def by_task(outcomes):
    return {(o["run"], o["task"]): o["data"] for o in outcomes}


def test_harvest_equals_the_seed(built):
    sample, store, warehouse = built
    events, counts, _ = seed_harvest(store.parent, include_temp=True, now=sample.now)
    mine = harvest(warehouse, include_temp=True, now=sample.now)
    assert [(e["rid"], e["run"], e["task"], e["data"]) for _, e in events] == [
        (o["rid"], o["run"], o["task"], o["data"]) for o in mine.outcomes]
    assert {k: v for k, v in mine.counts.items() if v} == {k: v for k, v in counts.items() if v}
    assert mine.counts["ok"] == 5 and mine.counts["lost"] == 1 and mine.counts["pending"] == 1


def test_harvest_by_hand(built):
    sample, _, warehouse = built
    outcomes = by_task(harvest(warehouse, include_temp=True, now=sample.now).outcomes)
    module = [f"src/module_{i}.py" for i in range(4)]
    t1 = outcomes[("run-a", "t1")]  # 6 lines in two commits; 2 rewritten on day 3, 1 more on day 20 (after the horizon)
    assert (t1["files"], t1["added"], t1["surviving"], t1["reverted_by"], t1["status"]) == (
        {module[0]: [6, 4]}, 6, 4, [], "ok")
    t2 = outcomes[("run-a", "t2")]  # 4 lines and a binary file, which has no lines to follow
    assert (t2["files"], t2["added"], t2["surviving"]) == ({module[1]: [4, 4]}, 4, 4)
    assert outcomes[("run-a", "t3")]["files"] == {module[0]: [5, 5], module[1]: [5, 5]}
    assert outcomes[("run-b", "t1")]["surviving"] == 4
    reverted = outcomes[("run-b", "t2")]
    revert = subprocess.run(["git", "-C", sample.repos[0][1], "log", "--format=%H", "--grep=This reverts commit",
                             "main"], capture_output=True, text=True, check=True).stdout.split()
    assert (reverted["added"], reverted["surviving"], reverted["reverted_by"]) == (3, 0, revert)
    run_a = sample.expected["runs"]["run-a"]
    assert t1["horizon_rev"] == revert[0]  # day 8 is the last first-parent commit before day 15; day 20 is after
    assert t1["integrated_ts"] == run_a["ts"] and t1["candidate"] == run_a["candidate"]
    lost = outcomes[("run-w", "t1")]
    assert (lost["status"], lost["horizon_rev"], lost["horizon_ts"]) == ("lost", None, None)
    assert ("run-z", "t1") not in outcomes  # its horizon is two weeks away: pending, nothing recorded
    assert outcome_rid(run_a["candidate"], run_a["tasks"][0]["reviewed"], 14) in {
        o["rid"] for o in harvest(warehouse, include_temp=True, now=sample.now).outcomes}


@pytest.mark.slow
def test_recording_is_idempotent_and_touches_neither_store_nor_repositories(tmp_path):
    sample, store, warehouse = build(tmp_path)
    repos = {name: tree_fingerprint(Path(path)) for name, path in sample.repos}
    store_before = tree_fingerprint(store.parent)
    dry = run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), "--dry-run", "--json",
              warehouse=warehouse.root, check=None)
    assert dry.returncode == 0 and json.loads(dry.stdout)["recorded"] == 0
    assert warehouse.read(t.OUTCOMES).height == 0
    first = run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), "--json", warehouse=warehouse.root, check=None)
    assert first.returncode == 0, first.stderr
    document = json.loads(first.stdout)
    assert document["recorded"] == 6 and len(document["outcomes"]) == 6
    assert set(document["outcomes"][0]) == {"rid", "run", "task", "data"}
    assert document["counts"] == {"ok": 5, "lost": 1, "pending": 1}
    second = json.loads(run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), "--json",
                            warehouse=warehouse.root, check=None).stdout)
    assert (second["recorded"], second["counts"]) == (0, {"pending": 1, "already": 6})
    assert warehouse.read(t.OUTCOMES).height == 6
    stored = warehouse.read(t.EVENTS).filter(t_kind("outcome"))
    assert sorted(stored["rid"].to_list()) == sorted(o["rid"] for o in document["outcomes"])
    assert {name: tree_fingerprint(Path(path)) for name, path in sample.repos} == repos
    assert tree_fingerprint(store.parent) == store_before
    # the horizon passes: the pending task is measured by the next harvest
    later = json.loads(run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now + 30 * 86400), "--json",
                           warehouse=warehouse.root, check=None).stdout)
    assert later["recorded"] == 1 and later["outcomes"][0]["run"] == "run-z"


def t_kind(kind):
    import polars as pl

    return pl.col("kind") == kind


def test_temporary_repositories_are_skipped_unless_asked(built):
    sample, _, warehouse = built
    result = harvest(warehouse, now=sample.now)
    assert result.outcomes == [] and result.counts["skipped_temp"] == 4  # run-a, run-b, run-w, run-z
    assert harvest(warehouse, now=sample.now, include_temp=True, repo=sample.repos[1][1]).counts["lost"] == 1



def test_the_command_says_how_to_measure_the_temporary_repositories_it_skipped(built):
    sample, _, warehouse = built
    result = run_cli("harvest", "survival", "--dry-run", "--now", str(sample.now), warehouse=warehouse.root)
    assert ("note: 4 integration(s) in repositories under the temporary directory were not harvested (pass "
            "--include-temp to measure them)") in result.stderr
    report = run_cli("report", "survival", warehouse=warehouse.root, check=None)
    assert "--include-temp" in report.stdout + report.stderr


@pytest.mark.slow
def test_blame_is_shared_and_git_runs_three_times_fewer_processes(tmp_path):
    sample, store, warehouse = build(tmp_path, extra_runs=6, tasks_per_run=4, files=3)
    events, counts, seed_processes = seed_harvest(store.parent, include_temp=True, now=sample.now)
    mine = harvest(warehouse, include_temp=True, now=sample.now)
    assert [e["rid"] for _, e in events] == [o["rid"] for o in mine.outcomes]
    assert [e["data"] for _, e in events] == [o["data"] for o in mine.outcomes]
    assert seed_processes >= 3 * mine.git_processes, (seed_processes, mine.git_processes)


def git(path, *args):
    subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)


@pytest.mark.slow
def test_unreachable_repositories_stay_unharvested_with_their_reason(tmp_path):
    sample, store, warehouse = build(tmp_path)
    api = Path(sample.repos[0][1])
    cases = {}
    # missing
    retarget(warehouse, store, "api", tmp_path / "nowhere")
    cases["repo_missing"] = harvest(warehouse, include_temp=True, now=sample.now)
    # a directory that is not a repository
    plain = tmp_path / "plain"
    plain.mkdir()
    retarget(warehouse, store, "api", plain)
    cases["not_git"] = harvest(warehouse, include_temp=True, now=sample.now)
    # a shallow clone
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--no-local", str(api), str(shallow)], check=True)
    retarget(warehouse, store, "api", shallow)
    cases["shallow"] = harvest(warehouse, include_temp=True, now=sample.now)
    for reason, result in cases.items():
        assert result.counts[reason] == 3, (reason, result.counts)  # run-a, run-b, run-z
        assert {e["reason"] for e in result.unharvested} == {reason}
        assert {(o["run"], o["data"]["status"]) for o in result.outcomes} == {("run-w", "lost")}
    result = run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), warehouse=warehouse.root, check=None)
    assert result.returncode == 3
    assert "not harvested: api" in result.stderr and "a shallow clone" in result.stderr
    assert "Traceback" not in result.stderr
    # the repository comes back: what was left is harvested now
    retarget(warehouse, store, "api", api)
    again = json.loads(run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), "--json",
                           warehouse=warehouse.root, check=None).stdout)
    assert again["recorded"] == 5 and again["counts"]["already"] == 1


@pytest.mark.slow
def test_a_corrupt_repository_is_a_git_error_never_nothing_survived(tmp_path):
    sample, store, warehouse = build(tmp_path)
    api = Path(sample.repos[0][1])
    broken = tmp_path / "broken"
    shutil.copytree(api, broken)
    # lose the blob of module_0 at run-a's horizon (the revert commit): blame there cannot run
    horizon = harvest(warehouse, include_temp=True, now=sample.now).outcomes[0]["data"]["horizon_rev"]
    blob = subprocess.run(["git", "-C", str(broken), "rev-parse", f"{horizon}:src/module_0.py"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (broken / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    retarget(warehouse, store, "api", broken)
    result = harvest(warehouse, include_temp=True, now=sample.now)
    failed = {(e["taskRun"], e["task"]) for e in result.unharvested if e["reason"] == "git_error"}
    assert failed == {("run-a", "t1"), ("run-a", "t3"), ("run-b", "t2")}  # the tasks that added lines to module_0
    assert result.counts["git_error"] == 3
    assert {(o["run"], o["task"]) for o in result.outcomes} == {("run-a", "t2"), ("run-b", "t1"), ("run-w", "t1")}
    assert record(warehouse, result) == 3
    # repaired, the next harvest measures exactly the three left
    retarget(warehouse, store, "api", api)
    again = harvest(warehouse, include_temp=True, now=sample.now)
    assert {(o["run"], o["task"]) for o in again.outcomes} == failed and again.counts["already"] == 3


def obvious_survival(warehouse) -> dict:
    """The survival join row by row: outcome -> attempt naming its reviewed commit -> dwarf dispatch and task tier;
    (model, tier, horizon) -> [tasks, lines added, lines surviving, reverted, lost]."""
    attempts = {r["reviewed_commit"]: r for r in warehouse.read(t.ATTEMPTS).iter_rows(named=True) if r["reviewed_commit"]}
    dispatches = {(r["run"], r["task"], r["attempt"]): r for r in warehouse.read(t.DISPATCHES).iter_rows(named=True)
                  if r["role"] == "dwarf"}
    tiers = {(r["run"], r["task"]): r["tier"] for r in warehouse.read(t.TASKS).iter_rows(named=True)}
    expected = defaultdict(lambda: [0, 0, 0, 0, 0])
    for o in warehouse.read(t.OUTCOMES).iter_rows(named=True):
        attempt = attempts[o["reviewed"]]
        dispatch = dispatches[(attempt["run"], attempt["task"], attempt["attempt"])]
        cell = expected[(f"{dispatch['model']}:{dispatch['effort']}", tiers[(attempt["run"], attempt["task"])],
                         o["horizon_days"])]
        if o["status"] == "lost":
            cell[4] += 1
            continue
        cell[0] += 1
        cell[1] += o["added"]
        cell[2] += o["surviving"]
        cell[3] += bool(o["reverted_by"])
    return dict(expected)


@pytest.mark.slow
def test_survival_join_per_model_and_tier(tmp_path):
    sample, store, warehouse = build(tmp_path)
    assert run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), warehouse=warehouse.root, check=None).returncode == 0
    result = run_cli("report", "survival", "--json", warehouse=warehouse.root, check=None)
    assert result.returncode == 0, result.stderr
    groups = json.loads(result.stdout)["groups"]
    assert sum(g["tasks"] for g in groups) == 5 and sum(g["lost"] for g in groups) == 1
    assert sum(g["lines_added"] for g in groups) == 6 + 4 + 10 + 4 + 3
    assert sum(g["lines_surviving"] for g in groups) == 4 + 4 + 10 + 4 + 0
    assert sum(g["reverted"] for g in groups) == 1 and sum(g["unmatched"] for g in groups) == 0
    # the obvious join, row by row: outcome -> attempt naming its reviewed commit -> dwarf dispatch, task tier
    assert {(g["model"], g["tier"], g["horizon_days"]): [g["tasks"], g["lines_added"], g["lines_surviving"],
                                                         g["reverted"], g["lost"]] for g in groups} == obvious_survival(warehouse)
    for g in groups:
        if g["tasks"]:
            assert g["revert_rate"] == g["reverted"] / g["tasks"]
            assert g["surviving_share"] == g["lines_surviving"] / g["lines_added"]
    stored = warehouse.read(t.SURVIVAL)
    assert stored.height == len(groups) and stored["lines_added"].sum() == 27
    text = run_cli("report", "survival", warehouse=warehouse.root, check=None)
    assert text.returncode == 0 and text.stdout.startswith("survival of merged work")


def test_the_sample_store_names_its_repositories_by_absolute_path(tmp_path, monkeypatch):
    """`loopmeter demo` writes data/sample/forge relative to where it runs; its store named the repositories
    relative to that directory too, so a harvest run from elsewhere found none (repo_missing)."""
    import sqlite3

    monkeypatch.chdir(tmp_path)
    samples.write_sample(Path("forge"), runs=5)
    with sqlite3.connect(tmp_path / "forge" / "dataset.sqlite") as store:
        paths = [path for (path,) in store.execute("SELECT path FROM repos ORDER BY repo")]
    assert paths == [str(tmp_path / "forge" / "repos" / name) for name in ("api", "infra", "web")]


# ---- entries that are not plain UTF-8-named files (a differential test against the seed found these) ----

BASE_TS = 1_767_600_000


def _one_task(tmp_path: Path, task_change, after=None, index=None) -> dict:
    """A repository (a `samples.RepoBuilder`, handed to the callbacks) where one task (run1/t1) changes
    files (`task_change(repo)`, `git add -A`, then `index(repo)` for what only the index holds, committed)
    and is merged --no-ff into main, `after(repo)` committed a day later; the task's outcome at 14 days."""
    from forge_fixtures import one_task_integration

    repo = samples.RepoBuilder(tmp_path / "r")
    (repo.path / "f.txt").write_text("a\nb\n")
    repo.git("add", "-A")
    repo.git("commit", "-qm", "base", ts=BASE_TS)
    base = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "-b", "task")
    task_change(repo)
    repo.git("add", "-A")
    if index is not None:
        index(repo)
    repo.git("commit", "-qm", "task", ts=BASE_TS + 100)
    reviewed = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-ff", "-m", "integrate", "task", ts=BASE_TS + 200)
    candidate = repo.git("rev-parse", "HEAD")
    if after is not None:
        after(repo)
        repo.git("commit", "-qm", "after", ts=BASE_TS + 86_400)
    events = one_task_integration(BASE_TS, base, reviewed, candidate)
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", [("r", str(repo.path))], events)
    warehouse = Warehouse(tmp_path / "warehouse")
    ingest_forge(warehouse, store)
    result = harvest(warehouse, include_temp=True, now=BASE_TS + 60 * 86_400)
    assert result.counts["git_error"] == 0, result.unharvested
    (outcome,) = result.outcomes
    return outcome["data"]


def _gitlink(repo, path: str) -> None:
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{'12' * 20},{path}")


def test_a_file_that_became_a_submodule_entry_survives_in_no_line(tmp_path):
    def after(repo):
        repo.git("rm", "-q", "--cached", "f.txt")
        (repo.path / "f.txt").unlink()
        _gitlink(repo, "f.txt")
    data = _one_task(tmp_path, lambda repo: (repo.path / "f.txt").write_text("a\nb\nx1\nx2\nx3\n"), after)
    assert (data["status"], data["files"], data["added"], data["surviving"]) == ("ok", {"f.txt": [3, 0]}, 3, 0)


def test_a_submodule_entry_a_task_added_is_a_line_that_blame_cannot_follow(tmp_path):
    """As the seed counts it: numstat gives the entry one line, and no file holds it at the horizon.
    The task's other file is measured as usual (the whole task failed on `git blame vendor/lib`)."""
    data = _one_task(tmp_path, lambda repo: (repo.path / "g.txt").write_text("g1\ng2\n"),
                     index=lambda repo: _gitlink(repo, "vendor/lib"))
    assert data["files"] == {"g.txt": [2, 2], "vendor/lib": [1, 0]} and (data["added"], data["surviving"]) == (3, 2)


def test_a_file_name_that_is_not_utf8_is_measured_under_its_own_name(tmp_path):
    """Both the seed and loopmeter looked the file up under its name with U+FFFD, found nothing, and
    recorded that none of its lines survived; it is intact. Its key shows the byte as \\xe9."""
    def change(repo):
        with open(os.path.join(os.fsencode(repo.path), b"caf\xe9.txt"), "w") as handle:
            handle.write("c1\nc2\n")
    data = _one_task(tmp_path, change)
    assert data["files"] == {"caf\\xe9.txt": [2, 2]} and (data["added"], data["surviving"]) == (2, 2)
