"""Survival at several horizons: per horizon exactly what a harvest at that one horizon records (the
seed's harvest and a lone harvest as oracles), git work shared between horizons (blames of
revisions between which a path did not change checked against git blame itself), the command's
--json, text and exit codes, and the report's rows per horizon."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import resource_warnings, run_cli
from forge_fixtures import retarget, seed_harvest
from loopmeter.forge import tables as t
from loopmeter.forge.git import Git
from loopmeter.forge.measure import History, Job, blame_classes
from loopmeter.forge.survival import harvest, harvest_horizons, outcome_rid
from test_forge_survival import build, obvious_survival

DAY = 86400


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """The git sample with six more integrations over three files: files change between horizons."""
    return build(tmp_path_factory.mktemp("horizons"), extra_runs=6, tasks_per_run=3, files=3)


def lone(warehouse, days, now):
    return harvest(warehouse, horizon_days=days, include_temp=True, now=now)


def same_as_lone(found, warehouse, now):
    for result in found.results:
        alone = lone(warehouse, result.horizon_days, now)
        assert result.outcomes == alone.outcomes, result.horizon_days
        assert result.counts == alone.counts, result.horizon_days
        assert result.unharvested == alone.unharvested, result.horizon_days


@pytest.mark.slow
def test_each_horizon_records_what_the_seed_records_at_that_horizon_alone(busy):
    sample, store, warehouse = busy
    horizons = [0, 7, 14, 30, 45]
    found = harvest_horizons(warehouse, horizons=[30, 7, 45, 0, 14, 7], include_temp=True, now=sample.now)
    assert [result.horizon_days for result in found.results] == horizons  # once each, ascending
    for result in found.results:
        events, counts, _ = seed_harvest(store.parent, include_temp=True, now=sample.now, horizon_days=result.horizon_days)
        assert [(e["rid"], e["run"], e["task"], e["data"]) for _, e in events] == [
            (o["rid"], o["run"], o["task"], o["data"]) for o in result.outcomes], result.horizon_days
        assert {k: v for k, v in result.counts.items() if v} == {k: v for k, v in counts.items() if v}
    by_days = {result.horizon_days: result.counts for result in found.results}
    # run-z came two days before now: pending from 7 days on; the extra runs (days 9 to 19) at 30 days in part
    assert by_days[0]["pending"] == 0 and by_days[7]["pending"] == 1 and 1 < by_days[30]["pending"] < by_days[45]["pending"]
    same_as_lone(found, warehouse, sample.now)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(horizons=st.lists(st.integers(0, 50), min_size=1, max_size=4),
       later=st.integers(-10, 40))
def test_property_several_horizons_equal_lone_harvests(busy, horizons, later):
    sample, _, warehouse = busy
    now = sample.now + later * DAY
    found = harvest_horizons(warehouse, horizons=horizons, include_temp=True, now=now)
    assert [result.horizon_days for result in found.results] == sorted(set(horizons))
    same_as_lone(found, warehouse, now)


def test_git_work_is_shared_between_horizons(busy, monkeypatch):
    """Every blame runs once whichever horizons ask for it, and three horizons run fewer git
    processes than three harvests (the numbers of bench/survival_horizons.py, at a small size)."""
    sample, _, warehouse = busy
    blamed = []
    real = Git.blame_counts
    monkeypatch.setattr(Git, "blame_counts", lambda git, rev, path: blamed.append((rev, path)) or real(git, rev, path))
    now = sample.now + 30 * DAY  # every horizon has passed
    alone = [lone(warehouse, days, now) for days in (7, 14, 30)]
    lone_blames = list(blamed)
    blamed.clear()
    found = harvest_horizons(warehouse, horizons=[7, 14, 30], include_temp=True, now=now)
    assert len(blamed) == len(set(blamed))
    assert len(blamed) < len(lone_blames)
    assert found.git_processes < 0.6 * sum(result.git_processes for result in alone)
    assert [o for r in found.results for o in r.outcomes] == [o for r in alone for o in r.outcomes]


def test_a_blame_closes_its_pipes_as_it_returns(busy):
    """A harvest runs thousands of blames: each one's pipes are closed when it returns, none left
    open for the garbage collector to find."""
    sample, _, _ = busy
    git = Git(sample.repos[0][1])
    tip = git.text("rev-parse", "main").strip()
    with resource_warnings() as left_open:
        counts = git.blame_counts(tip, "src/module_0.py")
    assert sum(counts.values()) > 0
    assert left_open == []


def test_a_path_unchanged_between_revisions_has_the_same_blame_there(busy):
    """The classes of (revision, path) that share one blame, checked against git blame at every
    first-parent commit of the sample's branch for every file the tasks touched: wherever two
    revisions share a class, git blame credits the same lines to the same commits."""
    sample, _, _ = busy
    git = Git(sample.repos[0][1])
    tip = git.text("rev-parse", "main").strip()
    history = History(git, {})
    chain, _ = history.chain(tip)
    paths = [f"src/module_{i}.py" for i in range(3)] + ["README.md", "assets/logo.bin"]
    jobs = [Job(0, "", {}, {}, "", sha, {}, None, [], tip, sha, chain[-1][0], files=[(1, path) for path in paths])
            for sha, _, _ in chain[:-1]]  # every first-parent commit after the first
    classes = blame_classes(history, jobs)
    assert len(classes) == len(jobs) * len(paths)
    assert len(set(classes.values())) < len(classes) / 2  # most revisions share their blame with others
    assert any(len({key for key in classes.values() if key[1] == path}) > 1 for path in paths)  # and not all
    present = {sha: git.existing_paths(sha, paths) for sha, _, _ in chain}
    blames: dict = {}

    def blame(rev, path):
        if (rev, path) not in blames:
            blames[rev, path] = git.blame_counts(rev, path) if path in present[rev] else None
        return blames[rev, path]

    for (rev, path), (same_rev, same_path) in classes.items():
        assert same_path == path
        assert (path in present[rev]) == (path in present[same_rev]), (rev, path)
        assert blame(rev, path) == blame(same_rev, path), (rev, path, same_rev)


# ---- the command ---------------------------------------------------------------------------------

def harvest_cli(warehouse, now, *args, check=None):
    result = run_cli("harvest", "survival", "--include-temp", "--now", str(now), *args, warehouse=warehouse.root, process=True, check=None)
    assert "Traceback" not in result.stderr
    if check is not None:
        assert result.returncode == check, result.stderr
    return result


@pytest.mark.slow
def test_json_of_several_horizons_and_of_one(tmp_path):
    sample, _, warehouse = build(tmp_path)
    single = harvest_cli(warehouse, sample.now, "--dry-run", "--json", check=0).stdout
    assert harvest_cli(warehouse, sample.now, "--dry-run", "--json", "--horizon-days", "14", check=0).stdout == single
    assert set(json.loads(single)) == {"recorded", "dryRun", "horizonDays", "now", "counts", "outcomes", "unharvested",
                                       "gitProcesses"}
    several = json.loads(harvest_cli(warehouse, sample.now, "--dry-run", "--json", "--horizon-days", "30",
                                     "--horizon-days", "7", "--horizon-days", "14", check=0).stdout)
    assert set(several) == {"recorded", "dryRun", "now", "gitProcesses", "horizons"}
    assert (several["recorded"], several["dryRun"], several["now"]) == (0, True, sample.now)
    assert [entry["horizonDays"] for entry in several["horizons"]] == [7, 14, 30]
    for entry in several["horizons"]:
        alone = json.loads(harvest_cli(warehouse, sample.now, "--dry-run", "--json", "--horizon-days",
                                       str(entry["horizonDays"]), check=0).stdout)
        assert entry == {key: value for key, value in alone.items() if key not in ("dryRun", "now", "gitProcesses")}
    assert warehouse.read(t.OUTCOMES).height == 0
    # recorded: each horizon's outcomes, in one write; the ids name the horizon, so a second harvest adds nothing
    first = json.loads(harvest_cli(warehouse, sample.now, "--json", "--horizon-days", "7", "--horizon-days", "14",
                                   "--horizon-days", "30", check=0).stdout)
    assert first["recorded"] == 18 and [entry["recorded"] for entry in first["horizons"]] == [6, 6, 6]
    assert [entry["counts"] for entry in first["horizons"]] == [{"ok": 5, "lost": 1, "pending": 1}] * 3
    rids = sorted(warehouse.read(t.OUTCOMES)["rid"].to_list())
    assert rids == sorted(o["rid"] for entry in first["horizons"] for o in entry["outcomes"]) and len(set(rids)) == 18
    run_a = sample.expected["runs"]["run-a"]
    assert {outcome_rid(run_a["candidate"], run_a["tasks"][0]["reviewed"], days) for days in (7, 14, 30)} <= set(rids)
    again = json.loads(harvest_cli(warehouse, sample.now, "--json", "--horizon-days", "7", "--horizon-days", "14",
                                   "--horizon-days", "30", "--horizon-days", "60", check=0).stdout)
    # at 60 days every horizon is still ahead of now: pending, even where the candidate is off the branch
    assert [entry["counts"] for entry in again["horizons"]] == [{"pending": 1, "already": 6}] * 3 + [{"pending": 7}]
    assert again["recorded"] == 0 and warehouse.read(t.OUTCOMES).height == 18
    stored = warehouse.read(t.EVENTS).filter(warehouse.read(t.EVENTS)["kind"] == "outcome")
    assert sorted(stored["rid"].to_list()) == sorted(warehouse.read(t.OUTCOMES)["rid"].to_list())


@pytest.mark.slow
def test_text_says_per_horizon_what_was_recorded_pending_and_left(tmp_path):
    sample, store, warehouse = build(tmp_path)
    three = ("--horizon-days", "7", "--horizon-days", "14", "--horizon-days", "30")
    dry = harvest_cli(warehouse, sample.now, "--dry-run", *three, check=0)
    assert dry.stdout == (
        "would record 18 survival outcome(s) at 7, 14 and 30 days\n"
        "  horizon  would record  ok  lost  pending\n"
        "       7d             6   5     1        1\n"
        "      14d             6   5     1        1\n"
        "      30d             6   5     1        1\n")
    one = harvest_cli(warehouse, sample.now, "--dry-run", "--horizon-days", "7", check=0)
    assert one.stdout == "would record 6 survival outcome(s) at 7 days\n  ok                5\n  lost              1\n  pending           1\n"
    # a repository gone: each integration is listed once, with the horizons it is missing at; exit 3
    retarget(warehouse, store, "api", tmp_path / "nowhere")
    gone = harvest_cli(warehouse, sample.now, "--horizon-days", "7", "--horizon-days", "60", check=3)
    # web's run-w: lost at 7 days; at 60 days, still ahead, pending
    assert gone.stdout.splitlines() == ["recorded 1 survival outcome(s) at 7 and 60 days",
                                        "  horizon  recorded  lost  pending  repo_missing",
                                        "       7d         1     1        0             3",
                                        "      60d         0     0        1             3"]
    listed = [line for line in gone.stderr.splitlines() if line.startswith("not harvested")]
    assert len(listed) == 3 and all(line.startswith("not harvested at 7 and 60 days: api (") for line in listed)
    assert gone.stderr.splitlines()[-1] == ("loopmeter: integration(s) or task(s) could not be harvested "
                                            "(3 at 7 days, 3 at 60 days); they are tried again next time")
    # 30 columns: the rows become a table that fits, no value split
    narrow = run_cli("harvest", "survival", "--include-temp", "--now", str(sample.now), "--dry-run", *three,
                     warehouse=warehouse.root, env={"COLUMNS": "30"}, check=3).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 30
    assert "would record 2 survival" in narrow and "repo_missing" in narrow and "30d" in narrow


@pytest.mark.slow
@pytest.mark.parametrize("value", ["-1", "100001", "7x"])
def test_a_horizon_out_of_range_is_a_usage_error(tmp_path, value):
    sample, _, warehouse = build(tmp_path)
    result = harvest_cli(warehouse, sample.now, "--horizon-days", "7", "--horizon-days", value, check=2)
    assert "--horizon-days" in result.stderr and warehouse.read(t.OUTCOMES).height == 0


# ---- the report ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_report_survival_has_rows_per_horizon(tmp_path):
    sample, _, warehouse = build(tmp_path)
    harvest_cli(warehouse, sample.now + 30 * DAY, "--horizon-days", "7", "--horizon-days", "14", "--horizon-days", "30",
                check=0)
    result = run_cli("report", "survival", "--json", warehouse=warehouse.root, process=True, check=None)
    assert result.returncode == 0, result.stderr
    groups = json.loads(result.stdout)["groups"]
    assert {(g["model"], g["tier"], g["horizon_days"]): [g["tasks"], g["lines_added"], g["lines_surviving"],
                                                         g["reverted"], g["lost"]] for g in groups} == obvious_survival(warehouse)
    surviving = defaultdict(int)
    for g in groups:
        surviving[g["horizon_days"]] += g["lines_surviving"]
    # run-a t1 loses one more line on day 20: after its 14-day horizon, before its 30-day one
    assert surviving[7] == surviving[14] == surviving[30] + 1
    assert {g["horizon_days"] for g in groups} == {7, 14, 30}
    text = run_cli("report", "survival", warehouse=warehouse.root, process=True, check=None).stdout
    assert all(f" {days}d " in text for days in (7, 14, 30))


def test_names_git_would_quote_are_followed_between_horizons(tmp_path):
    """Files named with a byte that is not UTF-8, a tab and a control character: a task adds three
    lines to each, a commit on day 3 rewrites one line of each. At 1 day all nine lines survive, at
    14 days six: the later horizon's blame is not taken for the earlier one's, whose path changed."""
    from forge_fixtures import one_task_integration
    from loopmeter.forge import samples
    from loopmeter.forge.ingest import ingest_forge
    from loopmeter.storage import Warehouse

    start = 1_767_600_000
    names = [b"caf\xe9.txt", b"tab\tand\x01.txt", b'quote".txt']
    repo = samples.RepoBuilder(tmp_path / "r")
    root = bytes(repo.path)

    def write(lines: dict[bytes, list[bytes]]) -> None:
        for name, content in lines.items():
            with open(root + b"/" + name, "wb") as handle:
                handle.write(b"".join(line + b"\n" for line in content))

    write({name: [b"a", b"b"] for name in names})
    repo.git("add", "-A")
    repo.git("commit", "-qm", "base", ts=start)
    base = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "-b", "task")
    write({name: [b"a", b"b", b"x1", b"x2", b"x3"] for name in names})
    repo.git("add", "-A")
    repo.git("commit", "-qm", "task", ts=start + 100)
    reviewed = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-ff", "-m", "integrate", "task", ts=start + 200)
    candidate = repo.git("rev-parse", "HEAD")
    write({name: [b"a", b"b", b"x1 rewritten", b"x2", b"x3"] for name in names})
    repo.git("commit", "-qam", "rewrite", ts=start + 3 * DAY)
    events = one_task_integration(start, base, reviewed, candidate)
    store = samples.write_sqlite(tmp_path / "dataset.sqlite", [("r", str(repo.path))], events)
    warehouse = Warehouse(tmp_path / "warehouse")
    ingest_forge(warehouse, store)
    now = start + 60 * DAY
    found = harvest_horizons(warehouse, horizons=[1, 14], include_temp=True, now=now)
    (early,), (late,) = (result.outcomes for result in found.results)
    assert (early["data"]["added"], early["data"]["surviving"]) == (9, 9)
    assert (late["data"]["added"], late["data"]["surviving"]) == (9, 6)
    assert sorted(late["data"]["files"].values()) == [[3, 2]] * 3
    same_as_lone(found, warehouse, now)
