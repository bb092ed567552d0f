"""Read-only git for the survival harvest: object-store queries, batched where git allows.

Every command here reads objects and refs only (rev-parse, cat-file, log, rev-list,
diff-tree between commits, blame at a commit) with GIT_OPTIONAL_LOCKS=0, so nothing
touches a working tree, an index or a lock file; GIT_CEILING_DIRECTORIES stops git from
walking up into an enclosing repository. A failing or timed-out query raises `GitError`:
it never reads as "nothing found".

No program a repository names runs (`safe_env`, `SAFE_CONFIG`): a repository's config,
its includes and its attributes can name textconv drivers, filters, external diffs, an
fsmonitor, a pager, hooks, a signature verifier and transports. blame and diff-tree run
with --no-textconv --no-ext-diff; the command line's `-c` settings, which win over every
config file, switch the rest off; the system and global config and every inherited
GIT_* variable are left out, so the numbers depend on the repository's objects alone.
The user's own `safe.directory` entries are carried over: git's refusal of a repository
another user owns stays theirs to lift.

Batching, so a harvest runs few processes: one `cat-file --batch-check` resolves every
candidate and branch of a repository, one `log --first-parent` per branch tip serves all
its integrations, one `diff-tree --stdin` computes every task's numstat, one `ls-tree`
per horizon revision says which files are still there, and a blame runs once per
(revision, path) however many tasks need it. `first_parent_changes` tells which paths each
first-parent commit changed, so that revisions between which a path did not change share
its blame too.
"""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from ..errors import one_line, shown_path

GIT_TIMEOUT_S = 120
_REVERTS = re.compile(r"This reverts commit ([0-9a-f]{7,64})")
_HUNK = re.compile(rb"^([0-9a-f]{40}|[0-9a-f]{64}) \d+ \d+ (\d+)$")
_SHA = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")


# Settings on the command line outrank the repository's config and its includes.
SAFE_CONFIG = (
    "core.fsmonitor=false",  # a program git would run to list changed files
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.sshCommand=false",
    "core.askPass=false",
    "core.attributesFile=/dev/null",
    "credential.helper=",  # an empty value clears the list of helpers
    "diff.external=",
    "log.showSignature=false",  # else log runs gpg.program on signed commits
    "gpg.program=false",
    "gpg.ssh.program=false",
    "gpg.x509.program=false",
    "gc.auto=0",
    "i18n.logOutputEncoding=UTF-8",  # else log re-encodes its output (UTF-16 puts a NUL in every character)
    "maintenance.auto=false",
    "protocol.allow=never",  # a partial clone's missing object is never fetched, by any transport
    *(f"protocol.{name}.allow=never" for name in ("file", "git", "ssh", "http", "https", "ext", "ftp", "ftps")),
)
_USER_SAFE_DIRECTORIES: list[str] | None = None


class GitError(Exception):
    pass


def _user_safe_directories() -> list[str]:
    """The user's own `safe.directory` entries (system and global config), read once."""
    global _USER_SAFE_DIRECTORIES
    if _USER_SAFE_DIRECTORIES is None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
        found: list[str] = []
        for scope in ("--system", "--global"):
            try:
                result = subprocess.run(["git", "config", scope, "--get-all", "safe.directory"], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=dict(env, LC_ALL="C"), cwd="/", timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if result.returncode == 0:
                found += result.stdout.decode("utf-8", "surrogateescape").splitlines()
        _USER_SAFE_DIRECTORIES = found
    return _USER_SAFE_DIRECTORIES


def safe_env(**extra: str) -> dict[str, str]:
    """The environment git runs in: no inherited GIT_* variable (GIT_EXTERNAL_DIFF, GIT_PAGER,
    GIT_SSH_COMMAND, GIT_CONFIG_PARAMETERS, GIT_DIR ...), no system or global config, no system
    attributes, no replacement objects nor grafts (`.git/info/grafts`: the numbers depend on the
    repository's objects alone), no prompt."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_ATTR_NOSYSTEM="1",
               GIT_NO_REPLACE_OBJECTS="1", GIT_GRAFT_FILE=os.devnull, GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", PAGER="cat",
               GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    env.update(extra)
    return env


def safe_argv(repo: str, *args: str) -> list[str]:
    """`git -C repo ARGS` with every repository-named program switched off."""
    config = [item for setting in SAFE_CONFIG for item in ("-c", setting)]
    config += [item for entry in _user_safe_directories() for item in ("-c", f"safe.directory={entry}")]
    return ["git", "--no-pager", "-C", repo, *config, *args]


class Git:
    """Queries in one repository; counts the processes it starts."""

    def __init__(self, repo: str, timeout: float = GIT_TIMEOUT_S):
        self.repo = str(repo)
        self.timeout = timeout
        real = os.path.realpath(self.repo)
        self.env = safe_env(GIT_CEILING_DIRECTORIES=os.path.dirname(real))
        self.processes = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.processes += 1

    def _argv(self, args: tuple[str, ...]) -> list[str]:
        return safe_argv(self.repo, *args)

    def out(self, *args: str, ok: tuple[int, ...] = (0,), stdin: bytes | None = None) -> tuple[int, bytes]:
        self._count()
        try:
            result = subprocess.run(self._argv(args), input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    timeout=self.timeout, env=self.env)
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {self.timeout:g} s") from None
        except OSError as error:
            raise GitError(f"git {args[0]}: {error}") from None
        if result.returncode not in ok:
            detail = result.stderr.decode("utf-8", "replace").strip().splitlines()
            raise GitError(f"git {args[0]} exited {result.returncode}" + (f": {detail[-1]}" if detail else ""))
        return result.returncode, result.stdout

    def text(self, *args: str, stdin: bytes | None = None) -> str:
        return self.out(*args, stdin=stdin)[1].decode("utf-8", "replace")

    # ---- the repository -------------------------------------------------------------
    def repository_problem(self) -> str | None:
        """Why this path cannot be harvested (not a repository, shallow), or None."""
        self._count()
        try:
            result = subprocess.run(self._argv(("rev-parse", "--is-shallow-repository")), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, timeout=self.timeout, env=self.env)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"git failed ({error})"
        code, output = result.returncode, result.stdout
        if code == 128 and b"dubious ownership" in result.stderr:
            return self._not_trusted()
        if code == 128:
            return "not a git repository"
        if code:
            return f"git failed (rev-parse exited {code})"
        if output.strip() == b"true":
            return "a shallow clone: its history is incomplete, blame would credit the wrong commits"
        return None

    def _not_trusted(self) -> str:
        """git's refusal of a repository another user owns (a repository's config can name programs
        git runs, so git reads only its own user's unless told to trust them)."""
        try:
            owner = f"uid {os.stat(self.repo).st_uid}"
        except OSError:
            owner = "another user"
        return (f"owned by {owner}, not by this user (uid {os.getuid()}): git refuses to read it; run loopmeter as "
                f"its owner, or trust it with `git config --global --add safe.directory {shown_path(os.path.realpath(self.repo))}`")

    def resolve(self, names: list[str]) -> dict[str, tuple[str, str] | None]:
        """name -> (object id, type), or None when missing, for many names in one process.
        Names holding a newline (which the batch protocol cannot carry) are asked one by one."""
        unique = list(dict.fromkeys(names))
        found: dict[str, tuple[str, str] | None] = {}
        batchable = [name for name in unique if "\n" not in name]
        if batchable:
            output = self.text("cat-file", "--batch-check=%(objectname) %(objecttype)",
                               stdin=("\n".join(batchable) + "\n").encode())
            lines = output.splitlines()
            if len(lines) != len(batchable):
                raise GitError("cat-file --batch-check answered %d of %d names" % (len(lines), len(batchable)))
            for name, line in zip(batchable, lines):
                parts = line.split(" ")
                found[name] = (parts[0], parts[1]) if len(parts) == 2 and _SHA.match(parts[0]) else None
        for name in unique:
            if name not in found:
                code, output = self.out("rev-parse", "--verify", "-q", name, ok=(0, 1, 128))
                found[name] = (output.decode().strip(), "unknown") if code == 0 else None
        return found

    # ---- history -----------------------------------------------------------------------
    def first_parent_chain(self, tip: str) -> list[tuple[str, int, list[str]]]:
        """(commit, committer time, parents) along the first-parent chain from `tip`, newest first."""
        chain = []
        for line in self.text("log", "--no-show-signature", "--first-parent", "--format=%H %ct %P",
                              *_revisions(tip)).splitlines():
            parts = line.split()
            if len(parts) < 2 or not _SHA.match(parts[0]) or not parts[1].lstrip("-").isdigit():
                raise GitError(f"log --first-parent {tip}: a line that is not a commit and its time: {line[:80]!r}")
            chain.append((parts[0], int(parts[1]), parts[2:]))
        return chain

    def first_parent_changes(self, base: str, tip: str) -> list[tuple[str, set[str]]]:
        """The first-parent commits in base..tip (`base` on tip's first-parent chain), newest first,
        each with the paths (as git names them) that differ from its first parent."""
        output = self.out("log", "--no-show-signature", "--first-parent", "--diff-merges=first-parent", "--no-renames",
                          "--no-ext-diff", "--no-textconv", "--raw", "--no-abbrev", "-z", "--format=%H",
                          *_revisions(f"{base}..{tip}"))[1].decode("utf-8", "surrogateescape")
        commits: list[tuple[str, set[str]]] = []
        tokens = iter(output.split("\0"))
        for token in tokens:
            token = token.lstrip("\n")
            if token.startswith(":") and commits:
                commits[-1][1].add(next(tokens, ""))  # a raw entry: its path is the next token
            elif _SHA.match(token):
                commits.append((token, set()))
            elif token:
                raise GitError(f"log --raw printed an unexpected line: {token[:80]!r}")
        return commits

    def rev_list(self, *revisions: str) -> list[str]:
        return self.text("rev-list", *_revisions(*revisions)).split()

    def numstats(self, pairs: list[tuple[str, str]]) -> list[list[tuple[int | None, str]]]:
        """For each (base, reviewed): the files of `diff --numstat base reviewed` as
        (lines added, or None for a binary file, path), from one `diff-tree --stdin`."""
        if not pairs:
            return []
        stdin = "".join(f"{reviewed} {base}\n" for base, reviewed in pairs).encode()
        # paths as the bytes git names them (surrogates where not UTF-8): they go back to git as they came
        output = self.out("diff-tree", "--no-textconv", "--no-ext-diff", "--stdin", "-r", "--numstat", "-z", "--no-renames", "--always",
                          stdin=stdin)[1].decode("utf-8", "surrogateescape")
        blocks: list[list[tuple[int | None, str]]] = []
        for token in output.split("\0"):
            token = token.lstrip("\n")
            if not token:
                continue
            cells = token.split("\t", 2)
            if len(cells) == 1 and _SHA.match(cells[0]):
                blocks.append([])  # the header of the next pair's diff
                continue
            if len(cells) != 3 or not blocks:
                raise GitError(f"diff-tree printed an unexpected line: {token[:80]!r}")
            blocks[-1].append((None if cells[0] == "-" else int(cells[0]), cells[2]))
        if len(blocks) != len(pairs):
            raise GitError("diff-tree answered %d of %d pairs" % (len(blocks), len(pairs)))
        return blocks

    def existing_paths(self, rev: str, paths: list[str], chunk: int = 400) -> set[str]:
        """Which of `paths` are files in the tree of `rev` (trees only: a missing blob is not "absent",
        it makes the blame that needs it fail). A submodule entry (a gitlink) is no file: it has no
        lines for blame to follow, so its path counts as absent, as in the seed."""
        found: set[str] = set()
        wanted = list(dict.fromkeys(paths))
        for start in range(0, len(wanted), chunk):
            output = self.out("--literal-pathspecs", "ls-tree", "-r", "-z", "--full-tree", *_revisions(rev), "--",
                              *wanted[start:start + chunk])[1].decode("utf-8", "surrogateescape")
            for entry in output.split("\0"):
                header, tab, path = entry.partition("\t")
                if tab and header.split(" ")[1:2] == ["blob"]:
                    found.add(path)
        return found & set(wanted)

    def blame_counts(self, rev: str, path: str) -> Counter:
        """Lines of `path` at `rev` per originating commit, streamed, never capped."""
        self._count()
        try:
            # --no-ignore-revs-file drops every ignore-revs file the repository's configuration names (an empty
            # blame.ignoreRevsFile does not: git sorts the list, and reads the files after the empty entry):
            # every line keeps its own commit
            process = subprocess.Popen(self._argv(("blame", "--no-textconv", "--no-ignore-revs-file", "--incremental",
                                                   *_revisions(rev), "--", path)),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        except OSError as error:
            raise GitError(f"git blame: {error}") from None
        counts: Counter = Counter()
        deadline = time.monotonic() + self.timeout
        timer = threading.Timer(self.timeout, process.kill)
        said: list[bytes] = []  # what git writes on stderr, drained as it writes (a full pipe would stop it)
        drain = threading.Thread(target=lambda: said.append(process.stderr.read()), daemon=True)
        drain.start()
        timer.start()
        try:
            for line in process.stdout:
                match = _HUNK.match(line.rstrip(b"\n"))
                if match:
                    counts[match.group(1).decode()] += int(match.group(2))
            code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise GitError(f"git blame {shown_path(path)} timed out") from None
        finally:
            timer.cancel()
            process.stdout.close()
            drain.join(timeout=5)
            if not drain.is_alive():  # read to its end: closed here, not left to the garbage collector
                process.stderr.close()
        if time.monotonic() >= deadline:
            raise GitError(f"git blame {shown_path(path)} timed out after {self.timeout:g} s")
        if code:
            lines = b"".join(said).decode("utf-8", "replace").strip().splitlines()
            raise GitError(f"git blame {shown_path(path)} exited {code}" + (f": {one_line(lines[-1])}" if lines else ""))
        return counts

    def reverting_commits(self, candidate: str, rev: str) -> list[tuple[str, list[str]]]:
        """Commits in candidate..rev with the commits their message says they revert."""
        found = []
        for block in self.text("log", "--no-show-signature", "--format=%H%x00%B%x01",
                               *_revisions(f"{candidate}..{rev}")).split("\x01"):
            sha, _, body = block.strip("\n").partition("\x00")
            reverted = _REVERTS.findall(body)
            if sha and reverted:
                found.append((sha, reverted))
        return found


def _revisions(*names: str) -> tuple[str, ...]:
    """Revisions as git's command line takes them: one starting with `-` would be read as an option
    (`--output=FILE` opens FILE for writing), so it is refused (callers give commit ids)."""
    for name in names:
        if name.startswith("-"):
            raise GitError(f"{name!r} is no revision git can be given (it would be read as an option)")
    return names


def is_temporary(path: str) -> bool:
    """A path under the system's temporary directory (a test or scratch clone)."""
    import tempfile

    if "\0" in path:  # no path on a file system (ingest rejects it; a warehouse may still hold one)
        return False
    root = os.path.realpath(tempfile.gettempdir())
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


def is_directory(path: str) -> bool:
    return Path(path).is_dir()
