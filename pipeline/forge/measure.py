"""The git measurements of the survival harvest: the tasks' commits and numstats, the blames at
the horizon revisions and the revert scans, each query run once for every task and horizon
that needs it.

`History` holds one repository's integrations as git sees them (landed commits, first-parent
chains); a `Job` is one task at one horizon; `measure` fills in every job's survival (the
seed's fields: files, added, surviving, reverted_by, status) or its error. Blames are shared
by (revision, path) and, further, between first-parent revisions where the path did not
change (`blame_classes`).
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .git import Git, GitError


class History:
    """One repository's integrations as git sees them, each query run once for every horizon: the
    commits an integration landed and a branch tip's first-parent chain (a failed query is kept
    and raised again to every horizon that asks)."""

    def __init__(self, git: Git, resolved: dict):
        self.git, self.resolved = git, resolved
        self._landed: dict[tuple[str, str], set[str] | GitError] = {}
        self._chains: dict[str, tuple[list, dict[str, int]] | GitError] = {}

    def landed(self, candidate: str, parent: str) -> set[str]:
        key = (candidate, parent)
        if key not in self._landed:
            self._landed[key] = _try(lambda: set(self.git.rev_list(candidate, "^" + parent)))
        return _raised(self._landed[key])

    def chain(self, tip: str) -> tuple[list, dict[str, int]]:
        if tip not in self._chains:
            found = _try(self.git.first_parent_chain, tip)
            self._chains[tip] = found if isinstance(found, GitError) else (
                found, {sha: i for i, (sha, _, _) in enumerate(found)})
        return _raised(self._chains[tip])


def _raised(value):
    if isinstance(value, GitError):
        raise value
    return value


@dataclass
class Job:
    """One task of one integration whose survival is measured at `rev`, for the harvest at one
    horizon (`result`; its outcome goes to `slots[slot]`)."""

    slot: int
    path: str
    integration: dict
    merge: dict
    base: str
    rev: str
    data: dict
    result: object  # the HarvestResult of its horizon
    slots: list
    tip: str  # the branch tip whose first-parent chain holds `rev`
    rev_sha: str  # `rev` as a commit id (`rev` keeps the candidate as the event names it): what git is given
    candidate_sha: str  # the integration's candidate as a commit id
    commits: list[str] | None = None
    files: list[tuple[int | None, str]] | None = None
    error: str | None = None


def measure(history: History, jobs: list[Job], workers: int) -> None:
    """Survival and reverts of every task at every horizon, sharing git work between them: each
    job ends with its `data` filled in, or its `error`."""
    git = history.git
    pairs = list(dict.fromkeys((job.base, job.merge["commit"]) for job in jobs))
    try:
        present = git.resolve([f"{commit}^{{commit}}" for pair in pairs for commit in pair])
    except GitError as error:
        present = {}
        for job in jobs:
            job.error = str(error)
    usable = [pair for pair in pairs if present.get(f"{pair[0]}^{{commit}}") and present.get(f"{pair[1]}^{{commit}}")]
    # git is given the commit ids the batch resolved, never a name as the store gives it (a name such as
    # `--output=FILE` would be read as an option)
    ids = {pair: tuple(present[f"{name}^{{commit}}"][0] for name in pair) for pair in usable}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        commit_sets = dict(zip(usable, pool.map(lambda pair: _try(git.rev_list, "%s..%s" % ids[pair]), usable)))
        numstats: dict[tuple[str, str], object] = {}
        try:
            for pair, files in zip(usable, git.numstats([ids[pair] for pair in usable])):
                numstats[pair] = files
        except GitError:  # isolate the pair git cannot diff
            for pair, files in zip(usable, pool.map(lambda pair: _try(lambda: git.numstats([ids[pair]])[0]), usable)):
                numstats[pair] = files
        for job in jobs:
            pair = (job.base, job.merge["commit"])
            if job.error:
                continue
            if pair not in commit_sets:
                job.error = f"commit {pair[0]} or {pair[1]} is not in the repository"
            elif isinstance(commit_sets[pair], GitError):
                job.error = str(commit_sets[pair])
            elif isinstance(numstats.get(pair), GitError):
                job.error = str(numstats[pair])
            else:
                job.commits, job.files = commit_sets[pair], numstats[pair]
        wanted = list(dict.fromkeys((job.rev_sha, path) for job in jobs if not job.error
                                    for added, path in job.files if added))
        by_rev: dict[str, list[str]] = defaultdict(list)
        for rev, path in wanted:
            by_rev[rev].append(path)
        trees = dict(zip(by_rev, pool.map(lambda rev: _try(git.existing_paths, rev, by_rev[rev]), by_rev)))
        for job in jobs:
            if not job.error and isinstance(trees.get(job.rev_sha), GitError):
                job.error = str(trees[job.rev_sha])
        to_blame = [(rev, path) for rev, path in wanted
                    if not isinstance(trees[rev], GitError) and path in trees[rev]]
        same = blame_classes(history, [job for job in jobs if not job.error])
        runs: dict[tuple[str, str], tuple[str, str]] = {}  # a class of equal blames -> the (rev, path) blamed for it
        for key in to_blame:
            runs.setdefault(same.get(key, key), key)
        found = dict(zip(runs.values(), pool.map(lambda key: _try(git.blame_counts, *key), runs.values())))
        blames = {key: found[runs[same.get(key, key)]] for key in to_blame}
        scans = list(dict.fromkeys((job.candidate_sha, job.rev_sha) for job in jobs
                                   if not job.error and job.rev_sha != job.candidate_sha))
        reverts = dict(zip(scans, pool.map(lambda key: _try(git.reverting_commits, *key), scans)))
    for job in jobs:
        if not job.error:
            _finish(job, blames, reverts)


def blame_classes(history: History, jobs: list[Job]) -> dict[tuple[str, str], tuple[str, str]]:
    """(rev, path) of the jobs' added files -> (first-parent commit, path) whose blame it equals.

    git blame hands a file's lines whole to the first parent that holds the same file, so along a
    first-parent chain a path's blame is the same at every commit back to the last one that changed
    it (against its first parent). One `log --first-parent --raw` per branch tip, over the span its
    revisions cover, says which commits changed which paths. A (rev, path) whose class is unknown
    (the log failed) is not in the answer: it is blamed on its own."""
    by_tip: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        by_tip[job.tip].append(job)
    classes: dict[tuple[str, str], tuple[str, str]] = {}
    for tip, tip_jobs in by_tip.items():
        chain, index = history.chain(tip)
        positions = {job.rev_sha: index[job.rev_sha] for job in tip_jobs}  # 0 is the tip, higher is older
        newest, oldest = min(positions.values()), max(positions.values())
        if newest == oldest:
            continue
        changes = _try(history.git.first_parent_changes, chain[oldest][0], chain[newest][0])
        if isinstance(changes, GitError) or [sha for sha, _ in changes] != [sha for sha, _, _ in chain[newest:oldest]]:
            continue
        changed_at: dict[str, list[int]] = defaultdict(list)  # path -> positions of the commits that changed it
        for offset, (_, paths) in enumerate(changes):
            for path in paths:
                changed_at[path].append(newest + offset)
        for job in tip_jobs:
            for added, path in job.files:
                if added:
                    at = changed_at.get(path, [])
                    later = bisect_left(at, positions[job.rev_sha])  # the last change at or before rev
                    classes[(job.rev_sha, path)] = (chain[at[later] if later < len(at) else oldest][0], path)
    return classes


def _try(function, *args):
    try:
        return function(*args)
    except GitError as error:
        return error


def _finish(job: Job, blames: dict, reverts: dict) -> None:
    commits = set(job.commits)
    files, added_total, surviving_total = {}, 0, 0
    for added, path in job.files:
        if not added:
            continue  # binary (no lines to follow) or nothing added
        counts = blames.get((job.rev_sha, path))
        if isinstance(counts, GitError):
            job.error = str(counts)
            return
        kept = sum(counts[sha] for sha in commits) if counts is not None else 0
        kept = min(kept, added)
        files[file_key(path)] = [added, kept]
        added_total += added
        surviving_total += kept
    candidate = job.integration["candidate"]
    shas = commits | {s for s in (job.merge.get("integration"), candidate) if s}
    reverted_by: list[str] = []
    if job.rev_sha != job.candidate_sha:
        scan = reverts.get((job.candidate_sha, job.rev_sha))
        if isinstance(scan, GitError):
            job.error = str(scan)
            return
        reverted_by = [sha for sha, named in scan if any(any(s.startswith(m) for s in shas) for m in named)]
    job.data.update(files=files, added=added_total, surviving=surviving_total, reverted_by=reverted_by,
                    status="ok" if added_total else "no_additions")


def file_key(path: str) -> str:
    """A file's path (as git names it: bytes that are not UTF-8 as surrogates) as a key of an outcome's
    `files`: itself when it is printable text without a backslash; else every backslash doubled, a
    byte that is not UTF-8 as \\xNN, and a character that is not printable as \\n, \\t, \\r or
    \\uNNNN (\\UNNNNNNNN), so no two files share a key (a name shown with escapes always holds a
    backslash; a printable one without escapes holds none)."""
    if path.isprintable() and "\\" not in path:  # (a byte that is not UTF-8, a surrogate, is not printable)
        return path
    shown = []
    for ch in path:
        if ch == "\\":
            shown.append("\\\\")
        elif "\udc80" <= ch <= "\udcff":
            shown.append(f"\\x{ord(ch) - 0xdc00:02x}")
        elif ch in "\n\t\r":
            shown.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif not ch.isprintable():
            shown.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            shown.append(ch)
    return "".join(shown)
