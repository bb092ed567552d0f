"""Which table files were verified, and the digests of their bytes, so that a command does not open
them again (`.state/verified.json`).

A table file is verified (`conformance.file_problem`: a regular file, its footer readable, not a
decompression bomb, its table's schema) before anything reads it. That costs a footer parse a file,
about half a millisecond: seconds for a warehouse of a million runs, paid by every command. So:

- In one process, a file verified once is not opened again while it is the same: the same table, in
  a partition folder or not, device, inode, size, modification time and change time (carried
  across loopmeter's own links, below). A hard link of it (the unchanged partitions of a new
  version) is the same file. A file is taken as verified only when the descriptor verified is the
  file listed, its change time unchanged from the listing to the verification's end.
- Across processes, the writer records, as it lets the lock go, the files of the current versions
  verified in its process (the files it wrote are verified then), each with the identity above and
  the file's change time: the one it had when it was verified. A file changed since, by anyone, has
  another change time by then: the record matches it no more, and the next command verifies it. The links
  loopmeter itself makes and removes (`link`, `remove`: an unchanged partition kept in a new
  version, the old version removed) change it too; the change time seen just after each is taken
  as the one verified when the one seen just before was. A later command takes a file as verified
  without opening it only when the record holds exactly the identity the file has now, change time
  included, and the record is this user's own file that nobody else may write (mode 0600): another
  user sharing the warehouse cannot write one, and a command of theirs verifies every file.

The change time is set by the kernel alone, to the moment of any change to a file, to its times or
to its links; nothing can set it back. A file copied, unpacked, restored from a backup, rewritten in
place or given an old modification time has another one, so a record that came with a warehouse
(copied, shared, fetched from object storage) matches none of its files, and they are verified again.
Forging a record takes this user's own rights; what a record cannot stand against, someone changing
the warehouse while loopmeter reads it, no verification made before a read can either.

A file's digest (`digest`: what the aggregate's plan compares to know which run sets changed) is
kept beside its identity in the same record, under the same rule: taken from the record only when
the file's identity and change time are exactly those recorded, else read and digested again. A
digest is recorded only while the file's change time is the one it was taken at (carried
across loopmeter's own links as above): a change by another program while a command runs drops it,
so the next command reads the file again. What a change time cannot show, a change made in the
microseconds between a link loopmeter makes and its look at the file just after, a file written
through a memory mapping after its times were set, or a change in the same clock tick as a look at
the file where change times move once a tick (Linux before 6.13, without multigrain timestamps), no
record of times can.

The record saves time only: when it is missing, damaged or not what loopmeter writes, every file is
verified again. `loopmeter check` never uses it: it reads every file to its end.
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from ..errors import shown_path, warn
from . import conformance
from .files import digest_of, open_regular, remove_tree
from .state import State

RECORD = "verified.json"
FORMAT = 1
DIGEST = re.compile(r"[0-9a-f]{32}")


def identity(table: str, path: Path, status: os.stat_result) -> tuple:
    """What a verification of the file `path` of `table` depends on, as long as its content is the same."""
    return (table, conformance.in_partition(table, path), status.st_dev, status.st_ino, status.st_size,
            status.st_mtime_ns)


class Verified:
    def __init__(self, state: State):
        self.state = state
        self.here: dict[tuple, int] = {}  # identity verified in this process -> the change time it was verified at
        self.digests: dict[tuple, tuple[str, int]] = {}  # identity -> digest, and the change time it holds at
        self.linked: dict[tuple[int, int], tuple[str, Path]] = {}  # (device, inode) -> table, the last link made
        self._recorded: dict[tuple, str | None] | None = None  # identity and change time -> digest

    def known(self, table: str, path: Path, status: os.stat_result) -> bool:
        """Whether the file `path` of `table`, as `status` says it is now, was verified: by this process
        with the change time it has now, or by the record."""
        if not stat.S_ISREG(status.st_mode):
            return False
        found = identity(table, path, status)
        if self.here.get(found) == status.st_ctime_ns:
            return True
        recorded = self.recorded()
        key = (*found, status.st_ctime_ns)
        if key in recorded:
            self.here[found] = status.st_ctime_ns
            if recorded[key] is not None:
                self.digests.setdefault(found, (recorded[key], status.st_ctime_ns))
            return True
        return False

    def add(self, table: str, path: Path, status: os.stat_result) -> None:
        """The file `path` of `table` was verified; `status` is what it was before it was opened."""
        self.here[identity(table, path, status)] = status.st_ctime_ns

    def link(self, table: str, source: Path, target: Path) -> None:
        """Hard-link `source`, a file of `table`, as `target` (a link in its place linked as a link, never
        followed), keeping its verification and digest across the change of its change time."""
        before = os.lstat(source)
        os.link(source, target, follow_symlinks=False)
        after = os.lstat(target)
        self._carry(table, source, before, target, after)
        self.linked[(after.st_dev, after.st_ino)] = (table, Path(target))

    def remove(self, version: Path) -> None:
        """Remove the version folder `version` (no link followed). A file of it also linked elsewhere by
        this process keeps, there, its verification and digest across the change of its change time."""
        table = Path(version).parent.name  # .versions/<table>/<id>
        for path in map(os.fspath, conformance.list_version(table, Path(version)).files):
            try:
                before = os.lstat(path)
            except OSError:
                continue
            other = self.linked.get((before.st_dev, before.st_ino)) if before.st_nlink > 1 else None
            if other is None or os.fspath(other[1]) == path:
                continue
            try:
                os.unlink(path)
                after = os.lstat(other[1])
            except OSError:
                continue
            self._carry(other[0], path, before, other[1], after)
        remove_tree(version)

    def _carry(self, table: str, source: Path, before: os.stat_result, target: Path, after: os.stat_result) -> None:
        """`target` is a link of the file `source` was (`before`, `after`: as seen just before and after
        loopmeter changed its links): what held for it then holds now."""
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(after.st_mode):
            return
        was, now = identity(table, source, before), identity(table, target, after)
        if self.here.get(was) == before.st_ctime_ns:
            self.here[now] = after.st_ctime_ns
        taken = self.digests.get(was)
        if self._holds(taken, before):
            self.digests[now] = (taken[0], after.st_ctime_ns)

    def recorded(self) -> dict[tuple, str | None]:
        if self._recorded is None:
            self._recorded = _read(self.state)
        return self._recorded

    @staticmethod
    def _holds(taken: tuple[str, int] | None, status: os.stat_result) -> bool:
        """Whether the digest `taken` still holds for the file as `status` says it is: its change time
        is the one the digest was taken at (any change to the file, its times or its links sets another)."""
        return taken is not None and taken[1] == status.st_ctime_ns

    def digest(self, table: str, path: Path) -> str:
        """A digest of the bytes of the file `path` of `table` (a regular file, opened without
        following a link): from this process or the record while the file is the same, else read.
        A digest is kept only when the file did not change while it was read."""
        status = os.lstat(path)
        found = identity(table, path, status)
        taken = self.digests.get(found)
        if self._holds(taken, status):
            return taken[0]
        recorded = self.recorded().get((*found, status.st_ctime_ns))
        if recorded is not None:
            self.digests[found] = (recorded, status.st_ctime_ns)
            return recorded
        with os.fdopen(open_regular(path), "rb") as source:
            hashed = digest_of(source)
            after = os.fstat(source.fileno())
        if identity(table, path, after) == found and after.st_ctime_ns == status.st_ctime_ns:
            self.digests[found] = (hashed, status.st_ctime_ns)
        return hashed

    def save(self, files: Iterable[tuple[str, Path, os.stat_result]]) -> None:
        """Record the files of (table, file, status as seen just now) verified in this process with that
        status (the caller holds the lock); the others are left out, and verified by the command that reads
        them next. A file changed after its look has another change time then: its record matches nothing."""
        entries = []
        for table, path, status in files:
            found = identity(table, path, status)
            if self.here.get(found) == status.st_ctime_ns:
                taken = self.digests.get(found)
                entries.append([*found, status.st_ctime_ns, *([taken[0]] if self._holds(taken, status) else [])])
        try:
            self.state.write(RECORD, {"format": FORMAT, "files": entries}, private=True)
        except OSError as error:  # the work is done: without the record the next command verifies again
            warn(f"{shown_path(self.state.path(RECORD))} could not be written ({error.strerror or error}); "
                 "the next command verifies every table file again")
            return
        self._recorded = {tuple(entry[:7]): (entry[7] if len(entry) == 8 else None) for entry in entries}


def _read(state: State) -> dict[tuple, str | None]:
    value = state.read(RECORD, private=True)
    if value is None:
        return {}
    entries = value.get("files") if isinstance(value, dict) and value.get("format") == FORMAT else None
    if not isinstance(entries, list) or not all(_well_formed(entry) for entry in entries):
        warn(f"{shown_path(state.path(RECORD))} is not a record loopmeter writes; every table file is verified again")
        return {}
    return {tuple(entry[:7]): (entry[7] if len(entry) == 8 else None) for entry in entries}


def _well_formed(entry: object) -> bool:
    """[table, in a partition, device, inode, size, modification time, change time] and, where taken,
    the digest of the file's bytes (32 hexadecimal digits)."""
    return (isinstance(entry, list) and len(entry) in (7, 8) and isinstance(entry[0], str) and isinstance(entry[1], bool)
            and all(type(number) is int for number in entry[2:7])
            and (len(entry) == 7 or (isinstance(entry[7], str) and DIGEST.fullmatch(entry[7]) is not None)))
