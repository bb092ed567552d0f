"""What the table files held as loopmeter wrote them (`.state/written.json`): so that `check` tells a
file whose bytes changed in place since (a disk's damage, a stray write into it) from a whole one, where
Parquet itself cannot (pages carry no checksum, and changed bytes inside a page often still decode).

- A writer saves it as it lets the lock go: each file of the current versions, by its path in its
  version, with a digest of its bytes, its device, inode, size and modification time. A file the record
  names at that path keeps its digest (it is what was written there, whatever it holds now); a file
  linked from an earlier version (an unchanged partition kept) carries that file's digest by device,
  inode, size and modification time (an inode alone may be a removed file's, given to a new one); any
  other (one this writer wrote, or one of a warehouse no writer recorded) is read and digested.
- `check` reads it, only when it is this user's own file that nobody else may write (a record another
  user could have written is not taken): each file it names must hold the bytes of its digest. A
  warehouse on object storage keeps none.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

from ..errors import shown_path, warn
from .files import digest_of, open_regular
from .state import State

RECORD = "written.json"
FORMAT = 1
_DIGEST = re.compile(r"[0-9a-f]{32}")


def digest(path: Path) -> str:
    """A digest of the bytes of the regular file `path` (opened without following a link)."""
    with os.fdopen(open_regular(path), "rb") as source:
        return digest_of(source)


def recorded(state: State) -> dict[str, tuple]:
    """Path in the warehouse -> (digest, device, inode, size, modification time), from this user's own
    record; empty without one."""
    value = state.read(RECORD, private=True)
    files = value.get("files") if isinstance(value, dict) and value.get("format") == FORMAT else None
    if not isinstance(files, dict):
        return {}
    return {path: tuple(entry) for path, entry in files.items()
            if isinstance(path, str) and isinstance(entry, list) and len(entry) == 5 and isinstance(entry[0], str)
            and _DIGEST.fullmatch(entry[0]) and all(type(number) is int for number in entry[1:])}


def save(state: State, root: Path, files: Iterable[tuple[str, Path, os.stat_result]]) -> None:
    """Record the digest of each of `files` (table, file, status as listed) of the current versions (the
    caller holds the lock)."""
    before = recorded(state)
    same_file = {tuple(entry[1:]): entry[0] for entry in before.values()}
    entries = {}
    for _, path, status in files:
        where = os.path.relpath(path, root)
        file = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        kept = before.get(where)
        try:
            found = kept[0] if kept is not None else same_file.get(file) or digest(path)
        except OSError:
            continue  # gone or not a file: `check` names it
        entries[where] = [found, *file]
    try:
        state.write(RECORD, {"format": FORMAT, "files": entries}, private=True)
    except OSError as error:
        warn(f"{shown_path(state.path(RECORD))} could not be written ({error.strerror or error}); `check` cannot "
             "tell a table file changed in place until the next writer records them")
