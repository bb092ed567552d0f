"""Files opened as what they claim to be: regular files, no link followed, read with a bound.

The warehouse folder is input too: a state file linked to /dev/zero, a lock file linked to a
file outside, a FIFO where a table file belongs would make a careless reader hang, grow without
limit or write outside. Here a file loopmeter reads or writes inside the warehouse is opened
without following a link (O_NOFOLLOW) and without blocking (O_NONBLOCK: a FIFO answers at once),
then checked to be a regular file on the open descriptor, and read with a size bound. A file a
user names for output (`--out`) is written only when it is new or a regular file: never through
a link, never in place of a device or a FIFO.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Callable

from ..errors import LoopmeterError, shown_path

STATE_LIMIT = 64 << 20  # bytes of a state file, the lock file or the marker: far more than loopmeter writes


class NotAFile(LoopmeterError):
    """A path that should be a regular file is something else (a link, a FIFO, a device, a folder)."""


class NotPrivate(LoopmeterError):
    """A file that must be this user's own, writable by nobody else, is not."""


def kind_of(path: str | os.PathLike) -> str | None:
    """What `path` is, without following a link: "file", "link", "directory", "FIFO", "device",
    "socket"; None when nothing is there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    return _kind(mode)


def entry_kind(entry: os.DirEntry) -> str | None:
    """`kind_of` a folder's entry, from what listing the folder told where it told it (no call to the
    system for a file, a link or a directory on most filesystems)."""
    try:
        if entry.is_symlink():
            return "link"
        if entry.is_file(follow_symlinks=False):
            return "file"
        if entry.is_dir(follow_symlinks=False):
            return "directory"
        return _kind(entry.stat(follow_symlinks=False).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "socket"


WHAT = {"link": "a symbolic link", "directory": "a directory", "FIFO": "a FIFO", "device": "a device",
        "socket": "a socket"}


def not_a_file(path: str | os.PathLike, kind: str, why: str = "") -> NotAFile:
    return NotAFile(f"{shown_path(path)} is {WHAT.get(kind, kind)}, not a regular file"
                    + (f"; {why}" if why else "; loopmeter never opens it (remove it or put the file back)"))


def is_real_directory(path: str | os.PathLike) -> bool:
    """A directory, not a symbolic link to one."""
    return kind_of(path) == "directory"


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of the regular file `path` (O_NOFOLLOW, O_NONBLOCK); NotAFile for anything else,
    FileNotFoundError when it is missing (and `flags` does not create it)."""
    try:
        descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise not_a_file(path, "link") from None
        if error.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO opened to write with no reader; a folder
            raise not_a_file(path, kind_of(path) or "socket") from None
        raise
    mode_now = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode_now):
        os.close(descriptor)
        raise not_a_file(path, _kind(mode_now))
    return descriptor


BEYOND_STATE = "more than loopmeter ever writes there; loopmeter does not read it (remove it)"


def read_bounded(path: str | os.PathLike, limit: int = STATE_LIMIT, *, private: bool = False,
                 beyond: str = BEYOND_STATE) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them (NotAFile beyond, saying `beyond`
    of the limit, or for what is not a regular file); FileNotFoundError when it is missing. `private`:
    NotPrivate unless the file (as opened) belongs to this user and neither its group nor others may
    write it."""
    descriptor = open_regular(path)
    with os.fdopen(descriptor, "rb") as handle:
        if private:
            status = os.fstat(handle.fileno())
            if status.st_uid != os.geteuid() or status.st_mode & 0o022:
                raise NotPrivate(f"{shown_path(path)} is not this user's own file, or others may write it")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise NotAFile(f"{shown_path(path)} is larger than {limit >> 20} MiB, {beyond}")
    return data


def digest_of(source) -> str:
    """The digest of the bytes an open binary file holds from where it is to its end, read a MiB at a time
    (what the verified and written records keep of a table file)."""
    import hashlib

    hashed = hashlib.blake2b(digest_size=16)
    while chunk := source.read(1 << 20):
        hashed.update(chunk)
    return hashed.hexdigest()


def parse_json(data: bytes | str) -> object:
    """`data` as JSON; ValueError when it is not JSON, not UTF-8, or nested deeper than Python's
    parser goes (which raises RecursionError: one exception for every way input is not a document)."""
    import json

    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deep to parse") from None


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `path` through a new temporary file beside it and a rename: a reader sees the old file
    or the new one, and a link at `path` is replaced, never written through."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def check_output(out: Path, option: str = "--out") -> None:
    """`out` may be written: nothing is there, or a regular file (replaced whole), in an existing
    folder. A link, a folder, a FIFO, a device or a socket is refused: loopmeter writes only a new
    file or replaces a regular one."""
    shown = shown_path(out)
    kind = kind_of(out)
    if kind == "directory":
        raise LoopmeterError(f"{option} {shown} is a directory; give the file to write")
    if kind not in (None, "file"):
        raise LoopmeterError(f"{option} {shown} is {WHAT[kind]}; {option} writes only a new file or replaces a "
                             "regular file (give another name)")
    parent = out.parent
    if not parent.is_dir():
        reason = f"the directory {shown_path(parent)} does not exist" if not os.path.lexists(parent) else \
            f"{shown_path(parent)} is not a directory"
        raise LoopmeterError(f"{option} {shown}: {reason}")


def write_output(out: Path, write: Callable[[Path], None], option: str = "--out") -> None:
    """Write the output file `out` a user named: `write(temporary)` writes a temporary file beside it,
    which replaces `out` in one rename, when `out` is still new or a regular file (`check_output`)."""
    check_output(out, option)
    temporary = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp")
    try:
        write(temporary)
        check_output(out, option)  # what is there now: a link or a FIFO put there meanwhile is not replaced
        os.replace(temporary, out)
    except OSError as error:
        raise LoopmeterError(f"{option} {shown_path(out)}: cannot write it: {error.strerror or error}") from None
    finally:
        temporary.unlink(missing_ok=True)


def remove_tree(path: str | os.PathLike) -> None:
    """Remove `path`: a real folder with everything in it, anything else (a link, a FIFO, a file) as
    itself. Never follows a link, never opens a FIFO (shutil.rmtree opens the path it is given to read
    it as a folder, and would wait for ever on a FIFO). Errors are ignored: what cannot be removed stays."""
    import shutil

    kind = kind_of(path)
    if kind is None:
        return
    if kind == "directory":
        shutil.rmtree(path, ignore_errors=True)  # below the top, rmtree opens only real folders
        return
    try:
        os.unlink(path)
    except OSError:
        pass
