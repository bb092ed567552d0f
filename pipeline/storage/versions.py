"""Table versions and the links that make one current.

A table `<name>` is the symbolic link `<warehouse>/<name>` to `.versions/<name>/<id>`, a real
directory holding one complete version of the table. A version is written aside, then made
current by replacing the link in one atomic rename, so a reader (or a process killed half way)
sees the old version or the new one, never a mix.

The only links loopmeter trusts in a warehouse are these: a link is a table when its name is a
table loopmeter knows and its target, read without following it, is `.versions/<name>/<id>`
with each of the three a real directory. Any other link is not followed: a reader leaves it out
(with a warning), a publish replaces it.
"""
from __future__ import annotations

import os
import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..errors import LoopmeterError, is_utf8, shown_path
from . import registry
from .files import is_real_directory, kind_of, remove_tree

FOLDER = ".versions"
# a version's id (`new`): when it was made (UTC, to the microsecond; its text sorts as its time), the
# process that made it, a random token
ID = re.compile(r"(\d{8}T\d{12})-\d+-[0-9a-f]{6}")


def parts(name: str, relative: object) -> tuple[str, str, str] | None:
    """`relative` as (.versions, name, id) when it names a version of table `name`, else None."""
    if not isinstance(relative, str) or "\0" in relative or not is_utf8(relative):
        return None  # a name not in UTF-8 is none loopmeter made, and no reader takes it as a path
    split = relative.split("/")
    if len(split) != 3 or split[0] != FOLDER or split[1] != name or split[2] in ("", ".", ".."):
        return None
    return split[0], split[1], split[2]


def own(root: Path, name: str, relative: object) -> Path | None:
    """The version `relative` names (as a table's link or the journal holds it), when it is one of
    table `name`'s: `.versions/<name>/<id>`, each a real directory (no link on the way); else None."""
    found = parts(name, relative)
    if found is None or not registry.known(name) or blocked_at(root, found) is not None:
        return None
    return Path(root).joinpath(*found)


def blocked_at(root: Path, found: tuple[str, str, str]) -> Path | None:
    """The first of the folders `root/.versions`, `.../<name>`, `.../<id>` (`parts`) that is not a real
    directory (missing, or a link, a file...); None when all three are."""
    path = Path(root)
    for part in found:
        path = path / part
        if not is_real_directory(path):
            return path
    return None


def current(root: Path, name: str) -> Path | None:
    """The current version of table `name`: its link's target when the link is loopmeter's own."""
    link = Path(root) / name
    try:
        target = os.readlink(link)
    except OSError:
        return None
    return own(root, name, target)


def link_target(root: Path, name: str) -> str | None:
    """What the link `<root>/<name>` holds, unfollowed (None: not a link)."""
    try:
        return os.readlink(Path(root) / name)
    except OSError:
        return None


def folder(root: Path, name: str) -> Path:
    """`.versions/<name>/`, made when missing; a link in its place is refused (loopmeter writes and
    removes in it, never through a link)."""
    registry.table(name)
    path = Path(root) / FOLDER
    for step in (path, path / name):
        kind = kind_of(step)
        if kind is None:
            step.mkdir(parents=True, exist_ok=True)
        elif kind != "directory":
            raise LoopmeterError(f"{shown_path(step)} is {'a symbolic link' if kind == 'link' else 'not a directory'}; "
                                 "loopmeter keeps its own files there and never follows a link out of the warehouse: "
                                 "remove it (what a link points to is not touched)")
    return path / name


def new(root: Path, name: str) -> Path:
    """A new, empty version folder of table `name`."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    directory = folder(root, name) / f"{stamp}-{os.getpid()}-{secrets.token_hex(3)}"
    directory.mkdir()
    return directory


def held(root: Path, name: str) -> list[Path]:
    """The versions `.versions/<name>/` holds, oldest first by the time in their ids: real folders
    named as `new` names them (anything else there is none of loopmeter's versions)."""
    folder = Path(root) / FOLDER / name
    if not registry.known(name) or not is_real_directory(folder.parent) or not is_real_directory(folder):
        return []
    with os.scandir(folder) as entries:
        ids = [entry.name for entry in entries if ID.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)]
    return [folder / id for id in sorted(ids, key=lambda id: (ID.fullmatch(id)[1], id))]


def swap(root: Path, name: str, version: Path) -> Path | None:
    """Point table `name`'s link at `version` (one atomic rename); the version it left, when that
    was one of the table's own (a link to anywhere else is replaced, what it named left alone).
    A real directory in the link's place is refused: it is not loopmeter's."""
    link = Path(root) / name
    if kind_of(link) not in (None, "link"):
        raise LoopmeterError(f"{shown_path(link)} is not a loopmeter table (a table is a link loopmeter makes); "
                             "move it out of the warehouse first")
    previous = current(root, name)
    temporary = Path(root) / f".{name}.{secrets.token_hex(4)}.link"
    os.symlink(os.path.relpath(version, root), temporary)
    os.replace(temporary, link)
    return previous


def discard(version: Path, remove: Callable[[Path], None] = remove_tree) -> None:
    """Remove (with `remove`) a version never published, and its table's folder of versions when that
    is left empty (a table's first version: nothing of the table stays behind)."""
    remove(version)
    try:
        os.rmdir(Path(version).parent)
    except OSError:  # other versions in it (the current one among them): kept
        pass


def remove_superseded(previous: Path | None, version: Path, remove: Callable[[Path], None] = remove_tree) -> None:
    """Remove (with `remove`) the version a table's link left for `version` (none, or the same one:
    nothing); `previous` is a real directory of the table's (`own`). No link inside is followed."""
    if previous is not None and os.path.realpath(previous) != os.path.realpath(version):
        remove(previous)


def fsync_directory(path: Path) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
