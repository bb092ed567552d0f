"""The walk of a ForgeLoop results tree: every `*.json` below `RESULTS/raw/`, with its size
and modification time, and the problems of place (a file outside a run set folder, a
symbolic link leading out of the tree, a name that is not UTF-8). Standard library only.

`walk_digested` is the walk a re-ingest makes to learn what changed: the run set folders
are walked by several processes at once (a `stat` per file is most of its cost, and
the kernel serves two processes in parallel where two threads of one contend), each
answering a digest per folder and the files only of the folders asked for."""
from __future__ import annotations

import hashlib
import os
import pickle
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from ..errors import LoopmeterError, is_utf8, shown_path
from ..lifetime import pdeathsig_setter, usable_cores
from .contract import RUN_SET_ID, RUN_SET_RULE, UNREADABLE, UNREADABLE_DIRECTORY


@dataclass(slots=True)
class SeenFile:
    path: str  # relative to the results directory
    run_set_id: str | None
    size: int
    mtime_ns: int
    problem: tuple[str, str] | None = None  # rejected before reading: (field, rule)



def no_raw_folder(results: Path) -> LoopmeterError:
    """RESULTS holds no raw/ folder: said, with the parent to give when RESULTS is raw/ itself."""
    raw = results / "raw"
    hint = ""
    if results.name == "raw" and results.is_dir():
        hint = f"; {shown_path(results)} looks like the raw/ folder itself: give its parent ({shown_path(results.parent)})"
    return LoopmeterError(f"{shown_path(raw)} is not a directory: expected RESULTS/raw/<runSetId>/**/*.json{hint}")


def discover_by_run_set(results: Path) -> Iterator[list[SeenFile]]:
    """Every `*.json` below `results/raw/`, in path order, a list per entry of `raw/` (a run set
    folder, or a stray file): one run set's files are held at a time."""
    raw = results / "raw"
    if not raw.is_dir():
        raise no_raw_folder(results)
    walker = _Walker(str(results.resolve()))
    raw_real = os.path.realpath(raw)
    entries = walker.entries(str(raw), "raw", None, found := [])
    if found:
        yield found
    for entry in entries:
        found = []
        walker.visit(entry, raw_real, "raw", None, None, found)
        yield found


class _Walker:
    """The recursive walk below one run set folder, appending to a list (a generator per
    level costs more than the system calls)."""

    def __init__(self, root: str):
        self.root = root
        self.visited: set[str] = set()  # real paths of the directories walked (a symlink may lead back)
        self.linked = False  # a symbolic link was met (`visited` then depends on the order of the walk)

    @staticmethod
    def entries(directory: str, relative: str, run_set: str | None, found: list[SeenFile]) -> list[os.DirEntry]:
        """The entries of `directory` in name order; those whose name is not UTF-8 (a run file or a
        folder: its files are not read) are noted as rejected in `found` instead, under a path that
        shows the name's bytes (`\\xff`)."""
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as error:
            found.append(SeenFile(relative, run_set, 0, 0, ("file", f"{UNREADABLE_DIRECTORY} ({error.strerror})")))
            return []
        if is_utf8("".join([entry.name for entry in entries])):
            return entries
        kept = []
        for entry in entries:
            if is_utf8(entry.name):
                kept.append(entry)
            elif entry.name.endswith(".json") or entry.is_dir():
                rule = "name is not valid UTF-8" + ("" if entry.name.endswith(".json") else ": its files are not read")
                found.append(SeenFile(f"{relative}/{shown_path(entry.name)}", run_set, 0, 0, ("file", rule)))
        return kept

    def visit(self, entry: os.DirEntry, real_parent: str, relative: str, run_set: str | None,
              folder_problem: tuple[str, str] | None, found: list[SeenFile]) -> None:
        path = f"{relative}/{entry.name}"
        link = entry.is_symlink()
        if link:
            self.linked = True
            target = os.path.realpath(entry.path)
            if os.path.commonpath([target, self.root]) != self.root:
                if entry.name.endswith(".json") or os.path.isdir(target):
                    found.append(SeenFile(path, run_set, 0, 0, ("file", "symlink leads outside the results tree")))
                return
            # a run file is filed under the run set folder it lies in: a link into another run set's
            # folder (or from raw/ to one) would file that run set's runs under this one's name
            inside = os.path.relpath(target, os.path.join(self.root, "raw")).split(os.sep)
            leads_to = inside[0] if inside[0] not in ("..", ".") else None
            if (entry.name.endswith(".json") or os.path.isdir(target)) and leads_to is not None and leads_to != run_set:
                where = f"the run set folder {shown_path(leads_to)}" if len(inside) > 1 or os.path.isdir(target) else "raw/"
                found.append(SeenFile(path, run_set, 0, 0, ("file", f"symlink leads into {where}: a run is read "
                                                                    "from its own run set folder only")))
                return
        try:
            is_dir = entry.is_dir()
            stat = None if is_dir else entry.stat()
        except OSError as error:
            found.append(SeenFile(path, run_set, 0, 0, ("file", f"{UNREADABLE} ({error.strerror})")))
            return
        if is_dir:
            real = target if link else f"{real_parent}/{entry.name}"  # no system call for a real directory
            if real in self.visited:
                return
            self.visited.add(real)
            if run_set is None:
                run_set = entry.name
                folder_problem = None if RUN_SET_ID.fullmatch(entry.name) else ("runSetId", f"run set folder name {RUN_SET_RULE}")
            for inner in self.entries(entry.path, path, run_set, found):
                self.visit(inner, real, path, run_set, folder_problem, found)
        elif entry.name.endswith(".json"):
            if not S_ISREG(stat.st_mode):  # a FIFO would block the reading forever
                problem = ("file", "is not a regular file")
            elif run_set is None:
                problem = ("file", "lies directly in raw/, not in a run set folder")
            else:
                problem = folder_problem
            found.append(SeenFile(path, run_set, stat.st_size, stat.st_mtime_ns, problem))


def group_of(path: str) -> str:
    """The entry of raw/ a file lies under: its run set folder, or "" for a file directly in raw/."""
    parts = path.split("/", 2)
    return parts[1] if len(parts) == 3 else ""


def digest(files: list[SeenFile], before: str = "") -> str:
    """What a list of files looked like: paths, sizes, modification times and problems of place."""
    text = before + "".join([f"{f.path}\0{f.size}\0{f.mtime_ns}\0{f.problem}\n" for f in files])
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(slots=True)
class Digested:
    """A run set folder as a helper walked it: the digest and number of its files, and the
    files themselves only when they were asked for."""
    group: str
    digest: str
    count: int
    files: list[SeenFile] | None


MAX_WALKERS = 4


def walk_digested(results: Path, selected: Callable[[str], bool],
                  wanted: Callable[[str, str], bool]) -> list[list[SeenFile] | Digested] | None:
    """`discover_by_run_set`'s answer in its order, each run set folder (when `selected(name)`)
    as a `Digested`, its files given when `wanted(name, digest)`; the other entries of raw/
    (files directly in it, names that are not UTF-8, a folder that cannot be read) as their
    lists of files. The folders are shared out among this process and helpers it forks;
    folders not selected are walked too (a symbolic link in them counts) and answered empty.

    None where this walk cannot stand for the sequential one: one core, fewer than two run
    set folders, a symbolic link met (whether a directory is walked twice then depends on
    the order of the walk), a helper that failed or was killed. The caller walks then."""
    raw = results / "raw"
    if not raw.is_dir():
        raise no_raw_folder(results)
    processes = min(usable_cores(), MAX_WALKERS)
    walker = _Walker(str(results.resolve()))
    raw_real = os.path.realpath(raw)
    found: list[SeenFile] = []
    entries = walker.entries(str(raw), "raw", None, found)
    if any(entry.is_symlink() for entry in entries):
        return None
    folders = [index for index, entry in enumerate(entries) if _is_folder(entry)]
    if processes < 2 or sum(selected(entries[index].name) for index in folders) < 2 or not hasattr(os, "fork"):
        return None

    forker = os.getpid()

    def walk(share: list[int]) -> dict[int, list[SeenFile] | Digested] | None:
        answers: dict[int, list[SeenFile] | Digested] = {}
        for index in share:
            if os.getpid() != forker and os.getppid() != forker:
                os._exit(1)  # a helper whose ingest is gone (where the kernel cannot be asked to end it)
            entry, files = entries[index], []
            walker.visit(entry, raw_real, "raw", None, None, files)
            if walker.linked:
                return None
            if not selected(entry.name):
                answers[index] = []  # every file of it is left out
            elif any(group_of(seen.path) != entry.name for seen in files):
                answers[index] = files  # a folder that cannot be read: noted as an entry of raw/ itself
            else:
                seen = digest(files)
                answers[index] = Digested(entry.name, seen, len(files), files if wanted(entry.name, seen) else None)
        return answers

    helpers: list[_Helper] = []
    try:
        _fork_helpers([folders[k::processes] for k in range(1, processes)], walk, helpers)
        answers = walk(folders[0::processes])
        for helper in helpers:
            if answers is None:
                return None  # the helpers are killed below: their answers would not be used
            answered = helper.answer()
            answers = None if answered is None else answers | answered
    finally:
        for helper in helpers:
            helper.end()
    if answers is None:
        return None
    walked: list[list[SeenFile] | Digested] = [found] if found else []
    for index, entry in enumerate(entries):
        if index in answers:
            walked.append(answers[index])
        else:
            files = []
            walker.visit(entry, raw_real, "raw", None, None, files)
            walked.append(files)
    return walked


def _is_folder(entry: os.DirEntry) -> bool:
    """A directory (an entry that cannot be told is walked by this process, which notes why)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


class _Helper:
    """A forked process computing `work(share)`, its pickled answer read through a pipe."""

    def __init__(self, pid: int, reading: int):
        self.pid: int | None = pid
        self.reading: int | None = reading

    def answer(self):
        """The helper's answer; None when it failed or gave none."""
        chunks = []
        with os.fdopen(self.reading, "rb") as pipe:
            self.reading = None
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if status != 0 or not chunks:
            return None
        return pickle.loads(b"".join(chunks))

    def end(self) -> None:
        """After an error or Ctrl-C (or an answer not needed): the helper killed and reaped, its
        pipe closed."""
        if self.reading is not None:
            try:
                os.close(self.reading)
            except OSError:
                pass
            self.reading = None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = None


def _fork_helpers(shares: list[list[int]], work: Callable[[list[int]], object], helpers: list[_Helper]) -> None:
    """A helper per share, appended to `helpers` as it is forked (the caller ends them, whatever
    happens). Ctrl-C is held while they fork and ignored in them (a terminal sends it to the
    whole process group): this process answers it. A helper ends with the thread that forked
    it, and holds no file of this process open but its pipe (the warehouse lock among them)."""
    set_pdeathsig = pdeathsig_setter()
    forker = os.getpid()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        for share in shares:
            reading, writing = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                os.close(reading)
                os.close(writing)
                raise
            if pid == 0:  # the helper: never returns
                status = 1
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                    if set_pdeathsig is not None:
                        set_pdeathsig()
                    if os.getppid() != forker:
                        os._exit(1)  # the forker died before the helper was tied to it
                    os.closerange(3, writing)
                    os.closerange(writing + 1, _max_fd())
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                    answer = work(share)
                    if answer is not None:
                        with os.fdopen(writing, "wb") as pipe:
                            pipe.write(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
                        status = 0
                finally:
                    os._exit(status)
            os.close(writing)
            helpers.append(_Helper(pid, reading))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a Ctrl-C held meanwhile is raised here


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 65536
