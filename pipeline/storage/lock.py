"""The warehouse's writer lock: `<warehouse>/.lock`, held with flock by the one process that writes.

The lock file names its holder (pid, host, what it does, since when), which a second writer is
told. It is opened without following a link and must be a regular file with no other link: a
`.lock` that is a symbolic link, or a hard link of a file elsewhere, is refused, never written
through. A reader takes the lock only for a moment of
writing (finishing a killed writer's publish, rebuilding the catalog), and only when it is free.
"""
from __future__ import annotations

import fcntl
import os
import re
import socket
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from ..errors import LoopmeterError, WarehouseBusy, shown_path
from .files import NotAFile, open_regular

FILE = ".lock"
FINISHING = "a reader finishing an interrupted publish"
REBUILDING = "a reader rebuilding loopmeter.duckdb"
# The warehouses this process held the lock of as a writer (or to repair): on object storage, only
# such a command's changes are published (`remote.mirrored`); a reader's moment of writing stays local.
WRITTEN: set[str] = set()
READER_FINISHING_WAIT = 10.0  # seconds a writer waits for such readers before saying the lock is held
UNNAMED_HOLDER_WAIT = 1.0  # seconds a writer waits for a holder to say who it is
NO_HOLDER_NAMED = "another process"


def _open(root: Path):
    """The lock file, opened to read and write (created when missing); NotAFile when it is not a
    regular file, or is one with other links (its holder's line would be written into a file
    elsewhere)."""
    descriptor = open_regular(root / FILE, os.O_RDWR | os.O_CREAT)
    links = os.fstat(descriptor).st_nlink
    if links > 1:
        os.close(descriptor)
        raise NotAFile(f"{shown_path(root / FILE)} is a file with {links - 1} other link(s) (a hard link of a file "
                       "elsewhere), which loopmeter would write the lock's holder into")
    return os.fdopen(descriptor, "r+", encoding="utf-8", errors="replace")


@contextmanager
def hold(root: Path, *, wait: bool = False, command: str = "") -> Iterator[None]:
    """Hold the writer lock of the warehouse at `root`; a second writer waits (`wait`) or leaves
    (WarehouseBusy) with who holds it. The holder's name is emptied as the lock is let go."""
    try:
        handle = _open(root)
    except NotAFile as error:
        raise LoopmeterError(f"{error}; it is the warehouse's lock file: remove it (what a link points to, and "
                             "another link of the file, are not touched)") from None
    with handle:
        if not _try_lock(handle) and not _lock_after_a_moment(handle):
            holder = _holder(handle)
            if not wait:
                raise WarehouseBusy(f"warehouse {shown_path(root)} is locked by {holder}; try again later or pass --wait")
            _wait_for(handle, holder)
        _name_holder(handle, _holder_line(command or "loopmeter"))
        WRITTEN.add(os.fspath(root))
        try:
            yield
        finally:
            _empty(handle)


@contextmanager
def hold_if_free(root: Path, what: str, *, leave_name: bool = False, wait: bool = False) -> Iterator[bool]:
    """The writer lock for a reader's moment of writing, taken only if no one holds it (or, with
    `wait`, once the holder lets it go): True inside when taken, False when another process holds
    it or the lock file cannot be opened (a read-only warehouse, or a lock file that is not a
    regular file). The lock file names the holder with `what` it does (FINISHING, REBUILDING: a
    writer starting meanwhile waits for those); the name is emptied as the lock is let go, unless
    `leave_name`, or unless this process holds the lock already (as a writer: its line stays for
    the rest of its work)."""
    try:
        handle = _open(root)
    except (OSError, NotAFile):
        yield False
        return
    with handle:
        if not _try_lock(handle):
            if not wait:
                yield False
                return
            _wait_for(handle, _holder(handle))
        ours = _holder(handle).startswith(f"pid {os.getpid()} ")
        if not ours:
            _name_holder(handle, _holder_line(what))
        if what not in (FINISHING, REBUILDING):
            WRITTEN.add(os.fspath(root))
        try:
            yield True
        finally:
            if not ours and not leave_name:
                _empty(handle)


def held(root: Path) -> bool:
    """Whether a process holds the writer lock of the warehouse at `root` now, asked without taking it
    for more than a moment (a shared lock tried and let go: a writer starting meanwhile retries) and
    without making the file. False when there is no lock file, or it is not a regular file."""
    try:
        descriptor = open_regular(root / FILE)
    except (OSError, NotAFile):
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)  # lets the shared lock go
    return False


def _wait_for(handle, holder: str) -> None:
    """Say who holds the lock, and wait until it is ours (Ctrl-C ends the wait)."""
    # one write, newline included: a Ctrl-C between print's two writes would leave the line open,
    # and the interruption's own line would be glued to it
    sys.stderr.write(f"waiting for the warehouse lock held by {holder} ...\n")
    sys.stderr.flush()
    _interruptible()
    fcntl.flock(handle, fcntl.LOCK_EX)


def _interruptible() -> None:
    """Ctrl-C interrupts the wait for the lock: a library loaded by then may have set SIGINT's handler to
    restart system calls, and flock would then wait on through it."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        try:
            signal.siginterrupt(signal.SIGINT, True)
        except (ValueError, OSError):
            pass


def _empty(handle) -> None:
    try:
        handle.seek(0)
        handle.truncate()
    except OSError:
        pass


def _try_lock(handle) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock_after_a_moment(handle) -> bool:
    """Wait for a holder that lets go in a moment: a reader finishing an interrupted publish or
    rebuilding the catalog (at most READER_FINISHING_WAIT), or one that has just taken the lock and
    not yet written who it is (the file empty, or naming a process of this host that is gone: at
    most UNNAMED_HOLDER_WAIT). True once the lock is taken; false as soon as the holder is a process
    that named itself."""
    start = time.monotonic()
    while True:
        holder = _holder(handle)
        if FINISHING in holder or REBUILDING in holder:
            limit = READER_FINISHING_WAIT
        elif _unnamed(holder):
            limit = UNNAMED_HOLDER_WAIT
        else:
            return False
        if time.monotonic() - start >= limit:
            return False
        time.sleep(0.02)
        if _try_lock(handle):
            return True


def _unnamed(holder: str) -> bool:
    """The lock file does not name its holder: empty, or a process of this host that is gone."""
    if holder == NO_HOLDER_NAMED:
        return True
    named = re.match(r"pid (\d+) on (\S+) ", holder)
    if named is None or named[2] != socket.gethostname():
        return False
    try:
        os.kill(int(named[1]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def _holder_line(what: str) -> str:
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"pid {os.getpid()} on {socket.gethostname()} ({what}) since {since}"


def _name_holder(handle, who: str) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(who + "\n")
    handle.flush()


def _holder(handle) -> str:
    """Who holds the lock, as the holder wrote it (its first line, at most 300 characters: the file
    is the folder's, and may hold anything)."""
    from ..errors import one_line

    handle.seek(0)
    return one_line(handle.read(4096).strip().split("\n")[0][:300]) or NO_HOLDER_NAMED
