"""Folders replaced whole: a stage writes a folder's new contents beside it, then swaps them in.

`stage(target, files)` builds `<parent>/.<name>.<token>.loopmeter-new`: the files whose text
changed written anew, every other entry of the current folder hard-linked (so an unchanged file
keeps its inode and modification time). The warehouse's publish journal names each staged folder
with its inode (`Warehouse.publish_folder`); `swap` then puts it in place with one
renameat2(RENAME_EXCHANGE), or, on a file system without it, by renaming the current folder aside
and the new one in. Either way a swap a killed writer's journal names is finished by the next
command (`swap` is idempotent: the inode says which of the two folders is the new one), and a
reader never sees a folder holding some old and some new files. `collect_leftovers` removes the
folders a killed writer left beside the targets.

A folder holding anything but regular files and symbolic links (a subdirectory, a socket) is not
staged: its files are replaced one by one, each atomically. A target that is itself a symbolic
link is refused: documents are never written through a link.
"""
from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import LoopmeterError, shown_path
from .. import faults
from .files import atomic_write, kind_of, remove_tree

NEW = ".loopmeter-new"  # a staged folder (after an exchange: the old contents, about to go)
OLD = ".loopmeter-old"  # the old contents renamed aside (file systems without RENAME_EXCHANGE)


@dataclass(frozen=True)
class Staged:
    staged: Path
    target: Path
    identity: tuple[int, int]  # st_dev, st_ino of the staged folder: the new contents, wherever they are

    def as_json(self) -> dict:
        return {"staged": str(self.staged), "target": str(self.target), "inode": list(self.identity)}

    @classmethod
    def from_json(cls, entry: dict) -> "Staged":
        """The entry a journal holds (ValueError for one `stage` would not have written: only a
        staged folder beside its target is ever swapped in)."""
        device, inode = entry["inode"]
        staged, target = Path(entry["staged"]), Path(entry["target"])
        if not (staged.is_absolute() and staged.parent == target.parent and staged.name.startswith(f".{target.name}.")
                and staged.name.endswith(NEW)):
            raise ValueError(f"not a staged folder of {target}: {staged}")
        return cls(staged, target, (int(device), int(inode)))

    @property
    def aside(self) -> Path:
        return self.staged.with_name(self.staged.name[: -len(NEW)] + OLD)


def stage(target: Path, files: dict[str, bytes]) -> Staged | None:
    """The new contents of folder `target` (file name -> bytes; its other entries kept) staged
    beside it, or None when there is nothing to swap: every file holds its text already, or the
    folder cannot be staged and its files were replaced one by one."""
    target = Path(os.path.abspath(target))  # the journal's paths hold from any working directory
    if kind_of(target) not in (None, "directory"):
        raise LoopmeterError(f"{shown_path(target)} is not a folder (a symbolic link, or a file): documents are "
                             "never written through a link or in place of a file; remove it")
    current = _entries(target)
    if current is None:
        _write_each(target, files)
        return None
    unchanged = {name for name, data in files.items() if name in current and _holds(target / name, data)}
    exists = os.path.isdir(target)
    if exists and len(unchanged) == len(files):
        return None
    staged = target.with_name(f".{target.name}.{secrets.token_hex(4)}{NEW}")
    os.mkdir(staged)
    try:
        if exists:  # the folder's mode and owner carry over (a root's aggregate into a user's folder)
            before = os.stat(target)
            os.chmod(staged, before.st_mode & 0o7777)
            if (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.chown(staged, before.st_uid, before.st_gid)
                except OSError:
                    pass  # not ours to give away: the folder is the writer's, as its files are
        for name, is_link in current.items():
            if name not in files or name in unchanged:
                _keep(target / name, staged / name, is_link)
        for name, data in files.items():
            if name not in unchanged:
                with open(staged / name, "wb") as handle:
                    handle.write(data)
        faults.checkpoint(f"staged:{target.name}")
        status = os.stat(staged)
    except BaseException:
        remove_tree(staged)
        raise
    return Staged(staged, target, (status.st_dev, status.st_ino))


def swap(entry: Staged, remove: bool = True) -> None:
    """Put `entry`'s staged folder in place of its target and (`remove`) remove the old contents
    (`remove_old`); what is already done is not done again. Where the new contents are gone
    (removed by hand), the old stay (put back from aside); where the target is no longer a
    folder (replaced meanwhile), it stays and the new contents go."""
    current = _identity(entry.target)
    if current != entry.identity:
        if _identity(entry.staged) != entry.identity:
            if current is None and _identity(entry.aside) is not None:
                os.rename(entry.aside, entry.target)
            return
        if current is not None and not _is_folder(entry.target):
            discard(entry)
            return
        if current is None:
            os.rename(entry.staged, entry.target)
        else:
            _carry_over(entry.target, entry.staged)
            if not _exchange(entry.staged, entry.target):
                os.rename(entry.target, entry.aside)
                faults.checkpoint(f"aside:{entry.target.name}")
                os.rename(entry.staged, entry.target)
    if remove:
        remove_old(entry)


def _carry_over(target: Path, staged: Path) -> None:
    """What appeared in the folder since it was staged (a user's file saved meanwhile) goes
    into the new folder too, rather than away with the old."""
    present = set(os.listdir(staged))
    for entry in os.scandir(target):
        if entry.name in present:
            continue
        if entry.is_symlink() or entry.is_file(follow_symlinks=False):
            _keep(Path(entry.path), staged / entry.name, entry.is_symlink())
        else:
            os.rename(entry.path, staged / entry.name)  # a folder: moved, its contents and all


def remove_old(entry: Staged) -> None:
    """Remove the old contents a swap left (under the staged name after an exchange, or aside)."""
    for place in (entry.staged, entry.aside):
        if os.path.lexists(place) and _identity(place) != entry.identity:
            remove_tree(place)


def discard(entry: Staged) -> None:
    """A staged folder not to be swapped in after all."""
    if _identity(entry.staged) == entry.identity:
        remove_tree(entry.staged)


def collect_leftovers(parent: Path) -> None:
    """Remove the staged and set-aside folders a killed writer left in `parent` (the caller
    holds the lock, and the journal of any interrupted publish has been finished)."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith((NEW, OLD)) and entry.is_dir(follow_symlinks=False):
            remove_tree(entry.path)


def _entries(target: Path) -> dict[str, bool] | None:
    """The folder's entries (name -> whether a symbolic link); {} when it does not exist; None
    when it cannot be staged (a symbolic link itself, or holding anything but files and links)."""
    try:
        if target.is_symlink():
            return None
        scanned = list(os.scandir(target))
    except FileNotFoundError:
        return {}
    except NotADirectoryError:
        return None
    entries = {}
    for entry in scanned:
        if entry.is_symlink():
            entries[entry.name] = True
        elif entry.is_file(follow_symlinks=False):
            entries[entry.name] = False
        else:
            return None
    return entries


def _holds(path: Path, data: bytes) -> bool:
    """The regular file `path` holds `data` (a link or a FIFO holds nothing: it is replaced)."""
    from .files import NotAFile, read_bounded

    try:
        return read_bounded(path, len(data)) == data
    except (OSError, NotAFile):
        return False


def _keep(source: Path, destination: Path, is_link: bool) -> None:
    """An entry of the current folder in the staged one: a symbolic link made again, a file linked."""
    if is_link:
        os.symlink(os.readlink(source), destination)
    else:
        _link(source, destination)


def _link(source: Path, destination: Path) -> None:
    """`source` as `destination` too: a hard link, or a copy keeping its times where links fail."""
    try:
        os.link(source, destination, follow_symlinks=False)
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
        shutil.copy2(source, destination, follow_symlinks=False)


def _write_each(target: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        if not _holds(target / name, data):
            atomic_write(target / name, data)


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2 = None  # the libc function, once looked up; False where there is none


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (renameat2 with RENAME_EXCHANGE); False where the C library,
    the kernel or the file system cannot."""
    global _renameat2
    if _renameat2 is None:
        import ctypes  # here: most commands that load this module never swap a folder

        try:
            function = ctypes.CDLL(None, use_errno=True).renameat2
            function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            _renameat2 = function
        except (OSError, AttributeError):
            _renameat2 = False
    if _renameat2 is False or os.environ.get("LOOPMETER_NO_EXCHANGE") == "1":  # tests: the other way
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes

    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))
