"""Which table files were verified, so that a command does not open them again (`.state/verified.json`).

A table file is verified (`conformance.file_problem`: a regular file, its footer readable, not a
decompression bomb, its table's schema) before anything reads it. That costs a footer parse a file,
about half a millisecond: seconds for a warehouse of a million runs, paid by every command. So:

- In one process, a file verified once is not opened again while its content is the same: the same
  table, in a partition folder or not, device, inode, size and modification time. A hard link of
  it (the unchanged partitions of a new version) is the same content.
- Across processes, the writer records, as it lets the lock go, the files of the current versions
  verified in its process (the files it wrote are verified then), each with the identity above and
  the file's change time. A later command takes a file as verified without opening it only when
  the record holds exactly the identity the file has now, change time included, and the record is
  this user's own file that nobody else may write (mode 0600): another user sharing the warehouse
  cannot write one, and a command of theirs verifies every file.

The change time is set by the kernel alone, to the moment of any change to a file, to its times or
to its links; nothing can set it back. A file copied, unpacked, restored from a backup, rewritten in
place or given an old modification time has another one, so a record that came with a warehouse
(copied, shared, fetched from object storage) matches none of its files, and they are verified again.
Forging a record takes this user's own rights; what a record cannot stand against, someone changing
the warehouse while loopmeter reads it, no verification made before a read can either.

The record saves time only: when it is missing, damaged or not what loopmeter writes, every file is
verified again. `loopmeter check` never uses it: it reads every file to its end.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..errors import shown_path, warn
from . import conformance
from .state import State

RECORD = "verified.json"
FORMAT = 1


def identity(table: str, path: Path, status: os.stat_result) -> tuple:
    """What a verification of the file `path` of `table` depends on, as long as its content is the same."""
    return (table, conformance.in_partition(table, path), status.st_dev, status.st_ino, status.st_size,
            status.st_mtime_ns)


class Verified:
    def __init__(self, state: State):
        self.state = state
        self.here: set[tuple] = set()  # identities verified in this process
        self._recorded: set[tuple] | None = None

    def known(self, table: str, path: Path, status: os.stat_result) -> bool:
        """Whether the file `path` of `table`, as `status` says it is now, was verified."""
        if not stat.S_ISREG(status.st_mode):
            return False
        found = identity(table, path, status)
        if found in self.here:
            return True
        if (*found, status.st_ctime_ns) in self.recorded():
            self.here.add(found)
            return True
        return False

    def add(self, table: str, path: Path, status: os.stat_result) -> None:
        self.here.add(identity(table, path, status))

    def recorded(self) -> set[tuple]:
        if self._recorded is None:
            self._recorded = _read(self.state)
        return self._recorded

    def save(self, files: Iterable[tuple[str, Path]]) -> None:
        """Record the files of (table, file) verified in this process, as they are now (the caller
        holds the lock); the others are left out, and verified by the command that reads them next."""
        entries = []
        for table, path in files:
            try:
                status = os.lstat(path)
            except OSError:
                continue
            found = identity(table, path, status)
            if found in self.here:
                entries.append([*found, status.st_ctime_ns])
        try:
            self.state.write(RECORD, {"format": FORMAT, "files": entries}, private=True)
        except OSError as error:  # the work is done: without the record the next command verifies again
            warn(f"{shown_path(self.state.path(RECORD))} could not be written ({error.strerror or error}); "
                 "the next command verifies every table file again")
            return
        self._recorded = {tuple(entry) for entry in entries}


def _read(state: State) -> set[tuple]:
    value = state.read(RECORD, private=True)
    if value is None:
        return set()
    entries = value.get("files") if isinstance(value, dict) and value.get("format") == FORMAT else None
    if not isinstance(entries, list) or not all(_well_formed(entry) for entry in entries):
        warn(f"{shown_path(state.path(RECORD))} is not a record loopmeter writes; every table file is verified again")
        return set()
    return {tuple(entry) for entry in entries}


def _well_formed(entry: object) -> bool:
    return (isinstance(entry, list) and len(entry) == 7 and isinstance(entry[0], str) and isinstance(entry[1], bool)
            and all(type(number) is int for number in entry[2:]))
