"""`<warehouse>/.state/`: what the last ingests, aggregates and catalog builds saw, a JSON file each.

Every module keeps its state through `State`: a file is named, never given as a path; it is
read only when it is a regular file of at most STATE_LIMIT bytes (a link, a FIFO, a device or a
larger file is named in a warning and taken as absent: what it would have vouched for is done
again), and written atomically. The folder itself must be a real directory: loopmeter writes
and removes in it, never through a link.

A state file only ever saves work (an unchanged tree not walked again, a catalog not rebuilt):
loopmeter never trusts one for what it can verify, and losing one costs time, never a number.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..errors import LoopmeterError, shown_path, warn
from .files import NotAFile, NotPrivate, atomic_write, kind_of, parse_json, read_bounded, remove_tree

FOLDER = ".state"
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,120}\.json")


class State:
    def __init__(self, root: Path):
        self.folder = Path(root) / FOLDER

    def path(self, name: str) -> Path:
        if NAME.fullmatch(name) is None:
            raise ValueError(f"{name!r} is not the name of a state file")
        return self.folder / name

    def read(self, name: str, *, private: bool = False) -> object | None:
        """The JSON value the state file `name` holds; None when it is missing, or is not a regular
        file of JSON loopmeter could have written (said in a warning). `private`: None too (without
        a word) unless the file is this user's own and nobody else may write it."""
        path = self.path(name)
        if not self._folder_usable():
            return None
        try:
            data = read_bounded(path, private=private)
        except (FileNotFoundError, NotPrivate):
            return None
        except NotAFile as error:
            warn(f"{error}; it is not read, and what it would record is done again")
            return None
        except OSError as error:
            warn(f"{shown_path(path)} cannot be read ({error.strerror or error}); what it would record is done again")
            return None
        try:
            return parse_json(data)
        except ValueError:
            warn(f"{shown_path(path)} is not JSON; what it would record is done again")
            return None

    def write(self, name: str, value: object, *, private: bool = False) -> None:
        """Replace the state file `name` with `value` as JSON, atomically (the caller holds the lock);
        `private`: readable and writable by this user only."""
        path = self.path(name)
        self._make_folder()
        _remove_folder_at(path)
        atomic_write(path, json.dumps(value).encode(), 0o600 if private else 0o644)

    def remove(self, name: str) -> None:
        """Remove the state file `name` (a folder in its place with what it holds; a link as itself,
        never what it names); a file that cannot be removed raises, as unlinking it does."""
        if self._folder_usable():
            path = self.path(name)
            _remove_folder_at(path)
            path.unlink(missing_ok=True)

    def folders(self) -> list[str]:
        """The names of state files that are folders: never read, and in the way of a writer that
        renames its file there (a link or a FIFO is replaced as it is): named by `check`, removed by
        its `--repair` and by the next writer of that file."""
        if not self._folder_usable():
            return []
        with os.scandir(self.folder) as entries:
            return sorted(entry.name for entry in entries
                          if NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False))

    def exists(self, name: str) -> bool:
        return self._folder_usable() and os.path.lexists(self.path(name))

    def names(self, pattern: str) -> list[str]:
        """The names of the state files that match the glob `pattern`, sorted."""
        if not self._folder_usable():
            return []
        return sorted(path.name for path in self.folder.glob(pattern) if NAME.fullmatch(path.name))

    def _folder_usable(self) -> bool:
        kind = kind_of(self.folder)
        if kind in (None, "directory"):
            return kind == "directory"
        raise LoopmeterError(f"{shown_path(self.folder)} is {'a symbolic link' if kind == 'link' else 'not a directory'}; "
                             "loopmeter keeps its own files there and never follows a link out of the warehouse: "
                             "remove it (what a link points to is not touched)")

    def _make_folder(self) -> None:
        if not self._folder_usable():
            self.folder.mkdir(exist_ok=True)


def _remove_folder_at(path: Path) -> None:
    """A folder at a state file's name is none of loopmeter's: it goes, with what it holds."""
    if kind_of(path) == "directory":
        remove_tree(path)
