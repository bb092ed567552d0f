"""A folder of the user's that keeps the objects of a warehouse on object storage between commands
(`LOOPMETER_OBJECT_CACHE`), so that a command fetches only the objects it does not hold yet.

Objects are named by the SHA-256 of their bytes (`remote.py`), so a kept copy is checked the way a
fetched one is: a command takes a cached object only when its bytes, read as they are copied into
the mirror, have the size and digest the manifest names; anything else there (another file, a
link, a FIFO, a copy that changed) is not used, and the object is fetched and kept again. Nothing
in the folder is trusted, so it may be shared, copied or damaged without a wrong table coming of it.

    <cache>/<16 hex digits of the warehouse URL's SHA-256>/<sha256>

One folder per warehouse URL: after each command, the objects its final state does not name are
removed from that warehouse's folder (what the superseded states held), so the cache holds about
one state of each warehouse it serves. Files are put there by a rename: two commands sharing the
cache see whole copies or none.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

from ..errors import LoopmeterError, shown_path
from .files import NotAFile, open_regular

ENV = "LOOPMETER_OBJECT_CACHE"
_OBJECT = re.compile(r"[0-9a-f]{64}")


class ObjectCache:
    def __init__(self, folder: str | os.PathLike, url: str):
        self.folder = Path(folder) / hashlib.sha256(url.encode()).hexdigest()[:16]
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:
            raise LoopmeterError(f"${ENV} {shown_path(folder)}: the cache folder cannot be made there "
                                 f"({error.strerror or error})") from None
        if not self.folder.is_dir():
            raise LoopmeterError(f"${ENV} {shown_path(folder)}: {shown_path(self.folder)} is not a folder")

    def place(self, digest: str, size: int, target: Path) -> bool:
        """Copy the kept object `digest` to the new file `target` when it holds exactly the bytes the
        manifest names (True); else leave no `target` and return False (fetch it)."""
        hashed, got = hashlib.sha256(), 0
        try:
            with os.fdopen(open_regular(self.folder / digest), "rb") as source, open(target, "xb") as out:
                while chunk := source.read(min(8 << 20, size - got + 1)):
                    got += len(chunk)
                    if got > size:
                        break
                    hashed.update(chunk)
                    out.write(chunk)
        except (OSError, NotAFile):
            got = -1
        if got == size and hashed.hexdigest() == digest:
            return True
        target.unlink(missing_ok=True)
        return False

    def keep(self, source: Path, digest: str) -> None:
        """Keep a copy of `source` (whose bytes' digest is `digest`) as object `digest`. A cache that
        cannot take it only costs a fetch later."""
        if not _OBJECT.fullmatch(digest):
            return
        temporary = self.folder / f".{digest}.{secrets.token_hex(4)}.tmp"
        try:
            with open(source, "rb") as data, open(temporary, "xb") as out:
                while chunk := data.read(8 << 20):
                    out.write(chunk)
            os.replace(temporary, self.folder / digest)
        except OSError:
            temporary.unlink(missing_ok=True)

    def keep_only(self, digests: set[str]) -> None:
        """Remove the kept objects not in `digests`, and copies left half written."""
        try:
            entries = os.listdir(self.folder)
        except OSError:
            return
        for name in entries:
            stray = name.startswith(".") and name.endswith(".tmp")
            if (stray or _OBJECT.fullmatch(name)) and name not in digests:
                try:
                    os.unlink(self.folder / name)
                except OSError:
                    pass


def from_environment(url: str) -> ObjectCache | None:
    folder = os.environ.get(ENV)
    return ObjectCache(folder, url) if folder else None
