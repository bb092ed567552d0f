"""Deterministic sample Forge data for the demo, the tests and the benchmarks.

- `routing_events(runs=...)`: a realistic store of routed runs — tiers, several models,
  aliases resolved by dispatches (`sol` is `gpt-6.1-sol:medium`), exploration draws with
  propensities, older all-spec draws, re-plans after attempt 1 started, retries,
  censored (timeout, infra, in flight) and never-run tasks, acceptances, merges, a
  fractal run and events of a kind format 1 does not know.
- `build_git_sample(root)`: real git repositories with dated commits whose history the
  survival harvest reads — `--no-ff` task and run merges, lines rewritten before and after
  the horizon, a revert, binary files, an integration lost to a reset and one whose
  horizon is still ahead — and the store events of the runs that made them.
- `write_sqlite`, `write_jsonl`: the two containers of the input contract.

`python -m loopmeter.forge.samples DIR [--runs N] [--no-git]` writes DIR/dataset.sqlite,
DIR/export.jsonl and (unless --no-git) DIR/repos/*.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

DAY = 86400.0
START = 1767600000.0  # 2026-01-05 08:00 UTC
SPECS = {  # spec -> (model, effort, harness)
    "flash": ("gemini-3-flash", "low", "gemini"),
    "sonnet": ("claude-5-sonnet", "medium", "claude"),
    "opus": ("claude-5-opus", "high", "claude"),
    "sol": ("gpt-6.1-sol", "medium", "codex"),
    "gpt-6.1-sol:medium:codex": ("gpt-6.1-sol", "medium", "codex"),
}
PAIRS = {"low": ("flash", "sonnet"), "medium": ("sonnet", "flash"), "high": ("opus", "gpt-6.1-sol:medium:codex")}
PASS_RATE = {  # (model, tier) -> P(review passes)
    "gemini-3-flash": {"low": 0.80, "medium": 0.55, "high": 0.30},
    "claude-5-sonnet": {"low": 0.90, "medium": 0.75, "high": 0.55},
    "claude-5-opus": {"low": 0.93, "medium": 0.85, "high": 0.72},
    "gpt-6.1-sol": {"low": 0.90, "medium": 0.80, "high": 0.66},
}
MINUTES = {"gemini-3-flash": 2.5, "claude-5-sonnet": 7.0, "claude-5-opus": 15.0, "gpt-6.1-sol": 10.0}
EXPLORE = 0.3  # P(a task's draw explores); explored draws pick either candidate with 1/2


@dataclass
class EventLog:
    events: list[dict] = field(default_factory=list)
    counter: int = 0

    def add(self, kind: str, ts: float, run: str | None, task: str | None, repo: str | None, data: dict,
            src: str = "forge") -> dict:
        self.counter += 1
        event = dict(rid=f"{run or 'global'}/{self.counter:07d}", kind=kind, src=src, ts=round(ts, 3), run=run,
                     task=task, repo=repo, mode="parallel", data=data)
        self.events.append(event)
        return event


@dataclass
class TaskPlan:
    task: str
    tier: str
    commit: dict | None = None  # {"reviewed", "base", "integration"} for git-backed tasks
    force_pass: bool | None = None


def _decision(rng: random.Random, run: str, task: str, tier: str, at: float, *, old_draw: bool, number: int) -> dict:
    default, alternative = PAIRS[tier]
    if old_draw:  # an older draw among every spec, without a propensity
        candidates = ["flash", "sonnet", "opus", "sol"]
        return dict(decision=f"{run}:{task}:{number}", at=round(at, 3), tier=tier, default=default,
                    candidates=candidates, chosen=rng.choice(candidates))
    if rng.random() < EXPLORE:
        chosen = rng.choice([default, alternative])
    else:
        chosen = default
    p_alternative = EXPLORE / 2
    propensity = p_alternative if chosen == alternative else 1 - p_alternative
    return dict(decision=f"{run}:{task}:{number}", at=round(at, 3), tier=tier, default=default,
                candidates=[default, alternative], chosen=chosen, propensity=propensity)


def _run(log: EventLog, rng: random.Random, run: str, repo: str, t0: float, tasks: list[TaskPlan], *,
         fractal: bool = False, old_draws: bool = False, replan: bool = False, in_flight: bool = False,
         never_run: float = 0.05) -> list[dict]:
    """The events of one run; returns the merge records of tasks that passed (for integrations)."""
    plan_tasks, routes = {}, {}
    for index, spec in enumerate(tasks):
        decision = _decision(rng, run, spec.task, spec.tier, t0 + 1 + index, old_draw=old_draws, number=1)
        routes[spec.task] = [decision]
        key = "difficulty" if rng.random() < 0.05 else "declared_difficulty"
        plan_tasks[spec.task] = {key: spec.tier, "route": [decision]}
    first_plan = dict(revision=1, tasks=plan_tasks)
    if fractal:
        first_plan["fractal_selection"] = {"enabled": True, "depth": 2}
    log.add("plan", t0, run, None, repo, first_plan)
    start = t0 + 60
    merged = []
    replan_at = t0 + 400
    for index, spec in enumerate(tasks):
        decision = routes[spec.task][-1]
        if spec.commit is None and rng.random() < never_run:
            continue  # planned, never run (cancelled run, dependency failed)
        task_start = start + 45 * index
        ran = decision["chosen"]
        if rng.random() < 0.05:
            ran = decision["default"] if ran != decision["default"] else PAIRS[spec.tier][1]  # approval gate
        attempt, passed_once = 1, False
        while attempt <= 3:
            model, effort, harness = SPECS.get(ran, SPECS["sonnet"])
            minutes = max(0.5, rng.lognormvariate(0, 0.45) * MINUTES[model])
            duration = round(minutes * 60, 1)
            log.add("attempt", task_start, run, spec.task, repo, dict(n=attempt, dwarf=ran, status="started"))
            log.add("dispatch", task_start + 1.5, run, spec.task, repo, dict(
                role="dwarf", attempt=attempt, spec=ran, model=model, effort=effort, harness=harness,
                wall_started=round(task_start + 2, 3), duration_s=duration))
            end = task_start + 2 + duration
            if in_flight and index == len(tasks) - 1:
                break  # still running when the store was exported
            roll = rng.random()
            if spec.commit is None and roll < 0.06:
                reason = rng.choice(["timeout", "infra", "cancelled"])
                log.add("attempt", end, run, spec.task, repo, dict(n=attempt, dwarf=ran, status="abandoned", reason=reason))
                break
            passes = spec.force_pass if spec.force_pass is not None else rng.random() < PASS_RATE[model][spec.tier]
            log.add("dispatch", end + 5, run, spec.task, repo, dict(
                role="reviewer", attempt=attempt, spec="opus", model="claude-5-opus", effort="high",
                harness="claude", wall_started=round(end + 5, 3), duration_s=round(rng.uniform(40, 160), 1)))
            data = dict(n=attempt, dwarf=ran, status="passed" if passes else "failed")
            if passes and spec.commit:
                data.update(reviewed_commit=spec.commit["reviewed"], base_ref=spec.commit["base"])
            elif passes:
                data.update(reviewed_commit=_fake_sha(rng), base_ref=_fake_sha(rng))
            log.add("attempt", end + 170, run, spec.task, repo, data)
            if passes:
                passed_once = True
                merged.append(dict(task=spec.task, commit=data["reviewed_commit"],
                                   integration=(spec.commit or {}).get("integration") or _fake_sha(rng), at=end + 200))
                break
            if rng.random() < 0.3:
                break  # the task was given up after a failure
            attempt += 1
            task_start = end + 240
            ran = PAIRS[spec.tier][0] if rng.random() < 0.5 else ran
        if (passed_once and rng.random() < 0.3) or (not passed_once and rng.random() < 0.1):
            log.add("event", task_start + 3600, run, spec.task, repo, dict(name="accepted", by="user"))
    if replan and tasks:
        # revision 2 after attempt 1 began: a new draw for the first task must not relabel it,
        # a new task's draw applies to it
        first = tasks[0]
        revised = {k: dict(v) for k, v in plan_tasks.items()}
        late = _decision(rng, run, first.task, first.tier, replan_at, old_draw=False, number=2)
        revised[first.task] = dict(revised[first.task], route=routes[first.task] + [late])
        extra = f"t{len(tasks) + 1}"
        extra_tier = rng.choice(["low", "medium", "high"])
        revised[extra] = {"declared_difficulty": extra_tier,
                          "route": [_decision(rng, run, extra, extra_tier, replan_at, old_draw=False, number=1)]}
        log.add("plan", replan_at, run, None, repo, dict(revision=2, tasks=revised))
    for merge in merged:
        log.add("event", merge["at"], run, merge["task"], repo, dict(
            name="merge", status="MERGED", commit=merge["commit"], integration=merge["integration"]))
    return merged


def _fake_sha(rng: random.Random) -> str:
    return "%040x" % rng.getrandbits(160)


def routing_events(runs: int = 400, *, seed: int = 7, start: float = START, days: float = 120,
                   repos: tuple[str, ...] = ("api", "web", "infra")) -> list[dict]:
    """A store of `runs` routed runs (about 40 events each), spread over `days`."""
    rng = random.Random(seed)
    log = EventLog()
    spacing = days * DAY / max(runs, 1)
    for i in range(runs):
        run = f"run-{i:06d}"
        count = rng.randint(2, 6)
        tiers = rng.choices(["low", "medium", "high"], weights=[4, 4, 2], k=count)
        tasks = [TaskPlan(f"t{j + 1}", tier) for j, tier in enumerate(tiers)]
        t0 = start + i * spacing + rng.uniform(0, spacing / 2)
        _run(log, rng, run, rng.choice(repos), t0, tasks,
             fractal=(i % 97 == 13), old_draws=(i < runs * 0.08), replan=rng.random() < 0.15,
             in_flight=(i >= runs - 3))
        if i % 50 == 0:
            log.add("heartbeat", t0 + 5, run, None, None, dict(worker="w1", load=0.4), src="daemon")
    return sorted(log.events, key=lambda e: (e["ts"], e["rid"]))  # a store holds events as they happened


# ---- git ----------------------------------------------------------------------------------

class RepoBuilder:
    """A scratch repository written with dated commits (only the sample writes git)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.files: dict[str, list[str] | bytes] = {}
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "forge@example.invalid")
        self.git("config", "user.name", "Forge Sample")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str, ts: float | None = None) -> str:
        env = dict(os.environ, LC_ALL="C", GIT_CONFIG_NOSYSTEM="1")
        if ts is not None:
            stamp = f"@{int(ts)} +0000"
            env.update(GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
        result = subprocess.run(["git", "-C", str(self.path), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, text=True)
        if result.returncode:
            raise RuntimeError(f"git {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout.strip()

    def _sync(self) -> None:
        for path, content in self.files.items():
            target = self.path / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text("".join(line + "\n" for line in content))

    def _load(self) -> None:
        self.files = {}
        for path in self.git("ls-files").splitlines():
            raw = (self.path / path).read_bytes()
            self.files[path] = raw if b"\0" in raw else raw.decode().splitlines()

    def checkout(self, ref: str, new: str | None = None) -> None:
        if new:
            self.git("checkout", "-q", "-b", new, ref)
        else:
            self.git("checkout", "-q", ref)
        self._load()

    def commit(self, message: str, ts: float) -> str:
        self._sync()
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message, ts=ts)
        return self.rev("HEAD")

    def merge(self, branch: str, message: str, ts: float) -> str:
        self.git("merge", "-q", "--no-ff", "-m", message, branch, ts=ts)
        self._load()
        return self.rev("HEAD")

    def revert(self, sha: str, ts: float) -> str:
        self.git("revert", "--no-edit", sha, ts=ts)
        self._load()
        return self.rev("HEAD")

    def reset(self, sha: str) -> None:
        self.git("reset", "-q", "--hard", sha)
        self._load()

    def rev(self, ref: str) -> str:
        return self.git("rev-parse", ref)

    def insert(self, path: str, after: str, lines: list[str]) -> None:
        """Insert `lines` after the line `after` of `path` (a text file)."""
        content = self.files[path]
        index = content.index(after) + 1
        self.files[path] = content[:index] + lines + content[index:]

    def replace(self, path: str, old: str, new: str) -> None:
        content = self.files[path]
        self.files[path] = [new if line == old else line for line in content]


@dataclass
class GitSample:
    repos: list[tuple[str, str]]
    events: list[dict]
    now: float
    expected: dict = field(default_factory=dict)  # hand-computed facts for tests


def _skeleton(name: str, slots: int) -> list[str]:
    return [f"# {name}"] + [f"# slot {i}" for i in range(slots)]


def build_git_sample(root: Path, *, seed: int = 3, start: float = START, extra_runs: int = 0,
                     tasks_per_run: int = 3, files: int = 4) -> GitSample:
    """Two repositories under `root` and the events of the runs that built them.

    `api`: run-a (day 1: three tasks, one adds a binary file, one two commits), lines of
    a task rewritten on day 3 (before run-a's 14-day horizon) and day 20 (after it);
    run-b (day 5) touching the same files, one task reverted on day 8; then `extra_runs`
    more runs of `tasks_per_run` tasks over the same `files` files; run-z integrated two
    days before `now` (horizon pending).
    `web`: run-w integrated on day 2, then the branch reset to before it (lost).
    """
    rng = random.Random(seed)
    log = EventLog()
    root = Path(root)
    api = RepoBuilder(root / "api")
    names = [f"src/module_{i}.py" for i in range(files)]
    slots = 40 + 8 * (extra_runs + 3) * tasks_per_run
    for name in names:
        api.files[name] = _skeleton(name, slots)
    api.files["README.md"] = ["# api", "", "A sample service."]
    day = lambda d: start + d * DAY  # noqa: E731
    api.commit("initial layout", day(0))
    expected: dict = {"runs": {}}
    slot = iter(range(1, slots, 4))

    def run_on(builder: RepoBuilder, repo: str, run: str, when: float, edits: list[list[tuple]]) -> dict:
        """Branch per task from main, commit its edits, merge --no-ff into the run branch, then
        merge the run branch --no-ff into main (the candidate). Returns shas."""
        parent = builder.rev("main")
        builder.checkout("main", f"forge/{run}")
        tasks = []
        for index, commits in enumerate(edits):
            task = f"t{index + 1}"
            builder.checkout(parent, f"forge-task/{run}/{task}")
            shas = []
            for number, changes in enumerate(commits):
                for change in changes:
                    if change[0] == "insert":
                        builder.insert(change[1], change[2], change[3])
                    elif change[0] == "binary":
                        builder.files[change[1]] = change[2]
                shas.append(builder.commit(f"{run} {task}: part {number + 1}", when + 600 * index + 60 * number))
            builder.checkout(f"forge/{run}")
            integration = builder.merge(f"forge-task/{run}/{task}", f"Merge {task} into {run}", when + 600 * index + 300)
            tasks.append(dict(task=task, base=parent, reviewed=shas[-1], commits=shas, integration=integration))
        builder.checkout("main")
        candidate = builder.merge(f"forge/{run}", f"Integrate {run}", when + 3600 * 2)
        return dict(parent=parent, candidate=candidate, tasks=tasks, ts=when + 3600 * 2 + 30)

    def lines(tag: str, count: int) -> list[str]:
        return [f"value_{tag}_{i} = {rng.randint(0, 999)}" for i in range(count)]

    def task_edit(tag: str, file_names: list[str], count: int) -> tuple[list[tuple], list[str]]:
        changes, anchors = [], []
        for name in file_names:
            anchor = f"# slot {next(slot)}"
            anchors.append((name, anchor))
            changes.append(("insert", name, anchor, lines(f"{tag}_{name.split('/')[-1][:-3]}", count)))
        return changes, anchors

    # run-a: t1 adds 6 lines to module_0 (two commits), t2 adds 4 lines to module_1 and a binary, t3 5 lines to module_0
    a1a, _ = task_edit("a1a", [names[0]], 3)
    a1b, _ = task_edit("a1b", [names[0]], 3)
    a2, _ = task_edit("a2", [names[1]], 4)
    a2.append(("binary", "assets/logo.bin", bytes(range(256)) * 4))
    a3, _ = task_edit("a3", [names[0], names[1 % files]], 5)
    run_a = run_on(api, "api", "run-a", day(1), [[a1a, a1b], [a2], [a3]])
    # day 3: rewrite two of t1's lines (before the horizon of day 15)
    first_block = a1a[0][3]
    api.replace(names[0], first_block[0], first_block[0] + "  # tuned")
    api.replace(names[0], first_block[1], first_block[1] + "  # tuned")
    api.commit("tune module_0 values", day(3))
    # run-b: t1 touches module_1 like run-a t2, t2 adds to module_0 (reverted on day 8)
    b1, _ = task_edit("b1", [names[1]], 4)
    b2, _ = task_edit("b2", [names[0]], 3)
    run_b = run_on(api, "api", "run-b", day(5), [[b1], [b2]])
    api.revert(run_b["tasks"][1]["reviewed"], day(8))
    extra = []
    for r in range(extra_runs):
        edits = []
        for k in range(tasks_per_run):
            chosen = rng.sample(names, k=min(len(names), rng.randint(1, 3)))
            change, _ = task_edit(f"x{r}_{k}", chosen, rng.randint(2, 6))
            edits.append([change])
        extra.append((f"run-x{r:03d}", run_on(api, "api", f"run-x{r:03d}", day(9 + r * 10 / max(extra_runs, 1)), edits)))
    # day 20: rewrite one more of run-a t1's lines (after its horizon: must not count)
    api.replace(names[0], first_block[2], first_block[2] + "  # late")
    api.commit("late cleanup", day(20))
    now = day(40)
    z1, _ = task_edit("z1", [names[2 % files]], 3)
    run_z = run_on(api, "api", "run-z", now - 2 * DAY, [[z1]])

    web = RepoBuilder(root / "web")
    web.files["app/page.tsx"] = _skeleton("page", 40)
    web.commit("initial page", day(0))
    w1 = [("insert", "app/page.tsx", "# slot 3", [f"const w{i} = {i};" for i in range(5)])]
    run_w = run_on(web, "web", "run-w", day(2), [[w1]])
    web.reset(run_w["parent"])
    web.files["app/page.tsx"] = web.files["app/page.tsx"] + ["// rewritten by hand"]
    web.commit("hand rewrite after reset", day(2.5))

    for repo, run, info in [("api", "run-a", run_a), ("api", "run-b", run_b), *[("api", n, i) for n, i in extra],
                            ("web", "run-w", run_w), ("api", "run-z", run_z)]:
        tasks = [TaskPlan(task["task"], rng.choice(["low", "medium", "high"]), commit=task, force_pass=True)
                 for task in info["tasks"]]
        merged = _run(log, rng, run, repo, info["ts"] - 3 * 3600, tasks)
        log.add("event", info["ts"], run, None, repo, dict(
            name="integrate_advanced", branch="main", parent=info["parent"], candidate=info["candidate"],
            target="main"))
        expected["runs"][run] = dict(info, merged=len(merged))
    expected["reverted_task"] = ("run-b", "t2", run_b["tasks"][1]["reviewed"])
    expected["rewritten"] = ("run-a", "t1", 2)  # two of its lines rewritten before the horizon
    events = sorted(log.events, key=lambda e: (e["ts"], e["rid"]))  # a store holds events as they happened
    return GitSample(repos=[("api", str(api.path)), ("web", str(web.path))], events=events, now=now,
                     expected=expected)


# ---- containers ---------------------------------------------------------------------------

def write_sqlite(path: Path, repos: list[tuple[str, str]], events: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    db = sqlite3.connect(path)
    try:
        db.execute("CREATE TABLE repos(repo TEXT PRIMARY KEY, path TEXT)")
        db.execute("CREATE TABLE events(rid TEXT PRIMARY KEY, kind TEXT, src TEXT, ts REAL, run TEXT, task TEXT, "
                   "repo TEXT, mode TEXT, data TEXT)")
        db.executemany("INSERT INTO repos VALUES (?, ?)", repos)
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((e["rid"], e["kind"], e["src"], e["ts"], e["run"], e["task"], e["repo"], e["mode"],
              json.dumps(e["data"], separators=(",", ":"))) for e in events),
        )
        db.commit()
    finally:
        db.close()
    return path


def write_jsonl(path: Path, repos: list[tuple[str, str]], events: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for repo, where in repos:
            handle.write(json.dumps({"kind": "repo", "repo": repo, "path": where}) + "\n")
        for event in events:
            handle.write(json.dumps(event, separators=(",", ":")) + "\n")
    return path


def write_sample(directory: Path, *, runs: int = 400, git: bool = True, seed: int = 7) -> dict:
    """The demo: DIR/dataset.sqlite, DIR/export.jsonl and DIR/repos/{api,web}. The stores name the
    repositories by absolute path (as Forge does), so a harvest finds them from any directory."""
    directory = Path(directory).absolute()
    events = routing_events(runs, seed=seed)
    repos = [("api", str(directory / "repos" / "api")), ("web", str(directory / "repos" / "web")),
             ("infra", str(directory / "repos" / "infra"))]
    now = None
    if git:
        sample = build_git_sample(directory / "repos")
        events = events + sample.events
        now = sample.now
    events.sort(key=lambda e: (e["ts"], e["rid"]))
    write_sqlite(directory / "dataset.sqlite", repos, events)
    write_jsonl(directory / "export.jsonl", repos, events)
    return dict(events=len(events), now=now)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopmeter.forge.samples", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--runs", type=int, default=400, help="routed runs (about 40 events each)")
    parser.add_argument("--no-git", action="store_true", help="no git repositories (routing data only)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    info = write_sample(args.directory, runs=args.runs, git=not args.no_git, seed=args.seed)
    print(f"{info['events']} events -> {args.directory}/dataset.sqlite and export.jsonl"
          + (f"; harvest with --now {info['now']:.0f} --include-temp if under a temporary directory" if info["now"] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
