"""A folder of the user's that keeps the objects of a warehouse on object storage between commands
(`LOOPMETER_OBJECT_CACHE`), so that a command fetches only the objects it does not hold yet.

Objects are named by the SHA-256 of their bytes (`remote.py`), so a kept copy is checked the way a
fetched one is: a command takes a cached object only when its bytes, read as they are copied into
the mirror, have the size and digest the manifest names; anything else there (another file, a
link, a FIFO, a copy that changed) is not used, and the object is fetched and kept again. Nothing
in the folder is trusted, so it may be copied or damaged without a wrong table coming of it.

    <cache>/<16 hex digits of the warehouse URL's SHA-256>/<sha256>

One folder per warehouse URL, made by this user for this user alone (mode 0700): a folder in its
place that is a link, another user's or writable by others is not used (the command warns and runs
without the cache), and the folder is worked on through a descriptor opened without following a
link, so nothing is written or removed outside it. After each command, the objects its final state
does not name are removed from that folder (what the superseded states held), so it holds about one
state of each warehouse it serves. Files are put there by a rename: two commands sharing the cache
see whole copies or none.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
from pathlib import Path

from ..errors import LoopmeterError, shown_path, warn

ENV = "LOOPMETER_OBJECT_CACHE"
_OBJECT = re.compile(r"[0-9a-f]{64}")
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


def copy_checked(source, target: Path, size: int) -> tuple[int, str]:
    """Copy the stream `source` into the new file `target`, reading at most one byte more than the
    `size` expected: (the bytes read, the SHA-256 of those copied). Read more than `size` means the
    object is not the one named; what was copied is then the first `size` bytes."""
    hashed, got = hashlib.sha256(), 0
    with open(target, "xb") as out:
        while chunk := source.read(min(8 << 20, size - got + 1)):
            got += len(chunk)
            if got > size:
                break
            hashed.update(chunk)
            out.write(chunk)
    return got, hashed.hexdigest()


class ObjectCache:
    def __init__(self, descriptor: int, folder: Path):
        self.descriptor, self.folder = descriptor, folder

    def place(self, digest: str, size: int, target: Path) -> bool:
        """Copy the kept object `digest` to the new file `target` when it holds exactly the bytes the
        manifest names (True); else leave no `target` and return False (fetch it)."""
        try:
            descriptor = os.open(digest, _READ, dir_fd=self.descriptor)
        except OSError:
            return False
        try:
            with os.fdopen(descriptor, "rb") as source:
                if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
                    return False
                got, hexdigest = copy_checked(source, target, size)
        except OSError:
            got, hexdigest = -1, ""
        if got == size and hexdigest == digest:
            return True
        target.unlink(missing_ok=True)
        return False

    def keep(self, source: Path, digest: str) -> None:
        """Keep a copy of `source` (whose bytes' digest is `digest`) as object `digest`. A cache that
        cannot take it only costs a fetch later."""
        if not _OBJECT.fullmatch(digest):
            return
        temporary = f".{digest}.{secrets.token_hex(4)}.tmp"
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                                 dir_fd=self.descriptor)
            with os.fdopen(descriptor, "wb") as out, open(source, "rb") as data:
                shutil.copyfileobj(data, out, 8 << 20)
            os.replace(temporary, digest, src_dir_fd=self.descriptor, dst_dir_fd=self.descriptor)
        except OSError:
            try:
                os.unlink(temporary, dir_fd=self.descriptor)
            except OSError:
                pass

    def keep_only(self, digests: set[str]) -> None:
        """Remove the kept objects not in `digests`, and copies left half written."""
        try:
            entries = os.listdir(self.descriptor)
        except OSError:
            return
        for name in entries:
            stray = name.startswith(".") and name.endswith(".tmp")
            if (stray or _OBJECT.fullmatch(name)) and name not in digests:
                try:
                    os.unlink(name, dir_fd=self.descriptor)
                except OSError:
                    pass

    def close(self) -> None:
        os.close(self.descriptor)


def from_environment(url: str) -> ObjectCache | None:
    """The cache `LOOPMETER_OBJECT_CACHE` names for the warehouse at `url` (None: none named, or its
    folder for `url` is not one this user alone may write: said in a warning)."""
    given = os.environ.get(ENV)
    if not given:
        return None
    folder = Path(given).expanduser() / hashlib.sha256(url.encode()).hexdigest()[:16]
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # the folder named is a file, under one, or may not be made
        raise LoopmeterError(f"${ENV} {shown_path(given)}: the cache folder cannot be made there "
                             f"({error.strerror or error})") from None
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass  # made before (or something else is there: the open below tells)
    except OSError as error:
        raise LoopmeterError(f"${ENV} {shown_path(given)}: the cache folder cannot be made there "
                             f"({error.strerror or error})") from None
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:  # a link (ELOOP, or ENOTDIR with O_DIRECTORY), a file or a FIFO in its place
        what = "is not a folder" if error.errno in (errno.ELOOP, errno.ENOTDIR) else f"cannot be opened ({error.strerror})"
        warn(f"${ENV}: {shown_path(folder)} {what}; the objects are fetched without the cache")
        return None
    status = os.fstat(descriptor)
    if status.st_uid != os.geteuid() or status.st_mode & 0o022:
        os.close(descriptor)
        warn(f"${ENV}: {shown_path(folder)} is not this user's alone (another's, or writable by others); "
             "the objects are fetched without the cache")
        return None
    return ObjectCache(descriptor, folder)
