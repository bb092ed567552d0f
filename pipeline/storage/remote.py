"""A warehouse on object storage (`--warehouse s3://bucket/prefix`).

Object storage has no links, no rename and no lock, so a warehouse there is immutable objects and
one pointer written last:

    <prefix>/objects/<sha256>        a file's bytes, named by their digest (written once, never changed)
    <prefix>/manifests/<id>.json     one state of the warehouse: each file's path, digest and size, and
                                     each table's current version
    <prefix>/HEAD.json               {"manifest": "manifests/<id>.json"}: the current state
    <prefix>/uploads/                objects being uploaded, copied to objects/ once whole (an upload
                                     cut short stays here, never named by a manifest)

A command works on a mirror (`mirrored`): the current state's files are fetched into a scratch
folder (each checked against its size and digest; every path and version under the warehouse's own
rules), the command runs there as on a local warehouse, and, when it changed the warehouse, the
objects the state lacks are put, then a new manifest, then HEAD. A command stopped at any point
before HEAD leaves the state it started from whole (objects put before are unused, never read).
A reader fetches the state HEAD names: the old one or the new one, never a mix.

What object storage cannot promise here: a lock. HEAD is read again just before it is written and a
state that moved on is not replaced (the command fails, exit 4), but two writers that both read it
before either wrote it both pass that check, and the later one wins (pyarrow's S3 client has no
conditional write to refuse the second). Run one writer at a time. A prefix holding other objects
and no HEAD is not a warehouse: refused (`pull`).
The scratch mirror lives under the system's temporary folder and is removed when the command ends;
with `LOOPMETER_OBJECT_CACHE` set, the objects are also kept in that folder of the user's, and the
next command fetches only those it does not hold there (`object_cache.py`).
`loopmeter.duckdb` is built there and not kept (BI tools read the objects through their own engine:
docs/scale.md).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from .. import faults, interrupts
from ..errors import Exit, LoopmeterError, WarehouseBusy, shown_path
from . import lock, object_cache, registry, versions
from .files import parse_json
from .object_cache import ObjectCache, copy_checked

SCHEMES = ("s3",)
HEAD = "HEAD.json"
PUBLISHED: list[str] = []  # the warehouses whose new state this process published (HEAD written)
MAX_MANIFEST_BYTES = 512 * 1024 * 1024
MAX_OBJECT_BYTES = 16 * 1024 * 1024 * 1024
_DIGEST = re.compile(r"[0-9a-f]{64}")
_MANIFEST = re.compile(r"manifests/[0-9A-Za-z_-]{1,100}\.json")
# never sent: the catalog and its record, and the record of the files verified, belong to the machine
# that made them (the lock and loopmeter.duckdb are not in the places `path_problem` allows at all)
KEPT_LOCAL = {".state/catalog.json", ".state/verified.json"}
MIRRORS: set[str] = set()  # the mirrors commands of this process run on (`mirrored`)


def is_mirror(root: str | os.PathLike) -> bool:
    """Whether `root` is the mirror of a warehouse on object storage, which keeps no catalog."""
    return os.fspath(root) in MIRRORS


def remote_url(given: str | os.PathLike | None, source: str = "--warehouse") -> str | None:
    """`given` as the URL of a warehouse on object storage, `s3://bucket/prefix` (a Path, as Python code
    may give it, holds one slash after the scheme), spelled as pyarrow reads it: each part of the prefix
    percent-encoded once (a space or a `%` in a name, written as such or encoded, is that character);
    None when `given` does not start with `s3:`. Refused in one line: a URL with no bucket or prefix,
    a `.` or `..` part or an empty one (a server takes `a/../b` for `b`, in this bucket or another),
    an encoded `/`, a `?` or a `#` (which would end the prefix), text that is not UTF-8: a usage error
    naming `source`, where the URL came from."""
    from urllib.parse import quote, unquote

    if given is None:
        return None
    text = os.fspath(given)
    match = re.fullmatch(r"s3:(.*)", text, re.IGNORECASE | re.DOTALL)
    if match is None:
        return None
    rest = match.group(1)
    shown = shown_path(text)
    if not rest.startswith("/") or not rest.strip("/"):
        raise LoopmeterError(f"{source} {shown}: a warehouse on object storage is s3://bucket/prefix "
                             "(an absolute path, /.../s3:..., for a local folder of that name)", Exit.USAGE)
    for character in "?#":
        if character in rest:
            raise LoopmeterError(f"{source} {shown}: a `{character}` would end the prefix there; name a prefix "
                                 f"without one (%{ord(character):02X} for the character itself)", Exit.USAGE)
    parts = rest.lstrip("/").removesuffix("/").split("/")
    try:
        names = [unquote(part, errors="strict") for part in parts]
    except UnicodeDecodeError:
        raise LoopmeterError(f"{source} {shown}: its percent-encoded bytes are not UTF-8", Exit.USAGE) from None
    wrong = next((name for name in names if name in ("", ".", "..") or "/" in name), None)
    if wrong is not None:
        what = {"": "empty part (//)", ".": "part `.`", "..": "part `..`"}.get(wrong, "encoded `/` (%2F)")
        raise LoopmeterError(f"{source} {shown}: the bucket and prefix may hold no {what}: object storage would "
                             "take it for another place; name the prefix as it is (s3://bucket/prefix)", Exit.USAGE)
    if re.fullmatch(r"[A-Za-z0-9._-]+", names[0]) is None:  # user:password@, host:port: never echoed
        raise LoopmeterError(f"{source} s3://...: the part after s3:// is not a bucket's name (letters, digits, `.`, "
                             "`-`, `_`); the endpoint and credentials come from the AWS_* variables, never the URL",
                             Exit.USAGE)
    if len(names) < 2:
        raise LoopmeterError(f"{source} {shown}: give a prefix inside the bucket (s3://bucket/warehouse)", Exit.USAGE)
    return "s3://" + "/".join(quote(name, safe="") for name in names)


def _filesystem(url: str):
    """(pyarrow file system, "bucket/prefix") of `url`; credentials and endpoint from the AWS_* variables."""
    from pyarrow import fs

    try:
        filesystem, base = fs.FileSystem.from_uri(url)
    except Exception as error:  # noqa: BLE001 - pyarrow's own errors are plain ArrowInvalid/OSError
        raise LoopmeterError(f"--warehouse {shown_path(url)}: {error}") from None
    if "/" not in base.strip("/"):
        raise LoopmeterError(f"--warehouse {shown_path(url)}: give a prefix inside the bucket (s3://bucket/warehouse)")
    return filesystem, base.strip("/")


class Remote:
    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.fs, self.base = _filesystem(self.url)

    def _read(self, key: str, limit: int) -> bytes | None:
        """The object `key` (None: there is none), refused when larger than `limit`."""
        from pyarrow import fs

        info = self.fs.get_file_info(f"{self.base}/{key}")
        if info.type == fs.FileType.NotFound:
            return None
        if info.type != fs.FileType.File or info.size > limit:
            raise LoopmeterError(f"{self.url}/{key}: not an object of at most {limit} bytes")
        with self.fs.open_input_stream(f"{self.base}/{key}") as stream:
            return stream.read(limit + 1)

    def _write(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(f"{self.base}/{key}") as stream:
            stream.write(data)

    def head(self) -> str | None:
        """The key of the current manifest (None: an empty warehouse)."""
        data = self._read(HEAD, 4096)
        if data is None:
            return None
        try:
            key = parse_json(data)["manifest"]
        except (ValueError, KeyError, TypeError):
            key = None
        if not isinstance(key, str) or not _MANIFEST.fullmatch(key):
            raise LoopmeterError(f"{self.url}/{HEAD}: not a loopmeter warehouse's pointer")
        return key

    def missing_bucket(self) -> str | None:
        """The bucket's name when the store says it does not exist (None: it exists, or the store
        would not say: credentials that may read objects but not the bucket itself)."""
        from pyarrow import fs

        bucket = self.base.split("/", 1)[0]
        try:
            return bucket if self.fs.get_file_info(bucket).type == fs.FileType.NotFound else None
        except OSError:
            return None

    def foreign_entries(self) -> list[str]:
        """The names under the prefix that a warehouse there does not hold (its objects, manifests,
        uploads and HEAD): another's data, when the prefix has no HEAD."""
        from pyarrow import fs

        listed = self.fs.get_file_info(fs.FileSelector(self.base, recursive=False, allow_not_found=True))
        names = sorted(info.path.rsplit("/", 1)[-1] for info in listed)
        return [name for name in names if name not in (HEAD, "objects", "manifests", "uploads")]

    def manifest(self, key: str | None) -> dict:
        if key is None:
            return {"files": {}, "tables": {}}
        data = self._read(key, MAX_MANIFEST_BYTES)
        if data is None:
            raise LoopmeterError(f"{self.url}/{key}: the manifest HEAD names is missing")
        try:
            manifest = parse_json(data)
        except ValueError:
            manifest = None
        problem = manifest_problem(manifest)
        if problem:
            raise LoopmeterError(f"{self.url}/{key}: {problem}")
        return manifest

    def fetch(self, digest: str, size: int, target: Path) -> None:
        """Object `digest` into `target`, checked against its size and digest as it is read."""
        key = f"{self.base}/objects/{digest}"
        try:
            with self.fs.open_input_stream(key) as stream:
                got, hexdigest = copy_checked(stream, target, size)
        except FileNotFoundError:
            raise LoopmeterError(f"{self.url}/objects/{digest}: missing (the manifest names it)") from None
        if got != size or hexdigest != digest:
            raise LoopmeterError(f"{self.url}/objects/{digest}: its bytes are not those the manifest names "
                                 f"({got} bytes read, {size} expected)")

    def _holds(self, key: str, digest: str) -> bool:
        """Whether the object `key` holds bytes of that sha256 digest (read in pieces)."""
        hashed = hashlib.sha256()
        with self.fs.open_input_stream(key) as stream:
            while chunk := stream.read(8 << 20):
                hashed.update(chunk)
        return hashed.hexdigest() == digest

    def put(self, digest: str, source: Path) -> None:
        """Object `digest` from the file `source` (of those bytes). Uploaded under a key of its own and
        copied into place once whole: an upload cut short (Ctrl-C, SIGTERM, a lost connection) ends the
        stream as if it were whole, so only a whole upload may ever be named by its digest. An object of
        that name already there is kept only when it holds the file's bytes (anything else: written over)."""
        from pyarrow import fs

        key = f"{self.base}/objects/{digest}"
        size = os.path.getsize(source)
        found = self.fs.get_file_info(key)
        if found.type == fs.FileType.File and found.size == size and self._holds(key, digest):
            return
        upload = f"{self.base}/uploads/{digest}.{secrets.token_hex(8)}"
        with open(source, "rb") as data:
            stream = self.fs.open_output_stream(upload)
            try:
                faults.checkpoint("remote:uploading")
                shutil.copyfileobj(data, stream, 8 << 20)
            finally:
                stream.close()  # on an error too: whatever was sent is kept under `upload`, never named
        self.fs.copy_file(upload, key)
        self.fs.delete_file(upload)


def manifest_problem(manifest: object) -> str | None:
    """What makes `manifest` not one loopmeter wrote (None: nothing)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) \
            or not isinstance(manifest.get("tables"), dict):
        return "not a loopmeter manifest"
    for name, target in manifest["tables"].items():
        if not registry.known(name) or versions.parts(name, target) is None:
            return f"table {name!r}: not a version of a loopmeter table ({target!r})"
    for path, entry in manifest["files"].items():
        if path_problem(path) is not None:
            return f"file {path!r}: {path_problem(path)}"
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and _DIGEST.fullmatch(entry[0]) and isinstance(entry[1], int) and 0 <= entry[1] <= MAX_OBJECT_BYTES):
            return f"file {path!r}: not a digest and a size"
    return None


def path_problem(path: object) -> str | None:
    """What makes `path` not a place a warehouse keeps a file (None: nothing): relative, plain
    components, under the marker, .state/, aggregate/ or a table's version."""
    if not isinstance(path, str) or not path or "\0" in path or "\\" in path or len(path.encode()) > 4096:
        return "not a relative path"
    parts = path.split("/")
    if any(part in ("", ".", "..") or len(part.encode()) > 255 for part in parts):
        return "not a plain relative path"
    if path == ".loopmeter":
        return None
    if parts[0] == ".state" and len(parts) == 2 and parts[1].endswith(".json"):
        return None
    if parts[0] == "aggregate" and len(parts) >= 2:
        return None
    if parts[0] == versions.FOLDER and len(parts) >= 4 and versions.parts(parts[1], "/".join(parts[:3])) is not None \
            and registry.known(parts[1]):
        return None
    return "not a place a warehouse keeps files"


def _digest(path: Path) -> str:
    hashed = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(8 << 20):
            hashed.update(chunk)
    return hashed.hexdigest()


def pull(remote: Remote, root: Path, cache: ObjectCache | None = None
         ) -> tuple[str | None, dict, dict[str, tuple[int, int, str]]]:
    """The current state into the empty folder `root`: (its manifest key, the manifest, path -> the
    (size, mtime_ns, digest) of each file as placed). An object `cache` holds whole is copied from
    there; the others are fetched (and kept there)."""
    key = remote.head()
    if key is None and (bucket := remote.missing_bucket()) is not None:  # told now, not after a writer's work
        raise LoopmeterError(f"{remote.url}: the bucket {bucket} does not exist (or these credentials cannot see it); "
                             "loopmeter makes no bucket: create it, or name another")
    if key is None and (foreign := remote.foreign_entries()):
        raise LoopmeterError(f"{remote.url} holds objects and is not a loopmeter warehouse (no {HEAD}: "
                             f"{', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); give --warehouse a new "
                             "or empty prefix")
    manifest = remote.manifest(key)
    placed = {}
    for path, (digest, size) in sorted(manifest["files"].items()):
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if cache is None or not cache.place(digest, size, target):
            remote.fetch(digest, size, target)
            if cache is not None:
                cache.keep(target, digest)
        status = target.stat()
        placed[path] = (status.st_size, status.st_mtime_ns, digest)
    for name, target in sorted(manifest["tables"].items()):
        (root / target).mkdir(parents=True, exist_ok=True)  # an empty table's version may hold no file
        os.symlink(target, root / name)
    return key, manifest, placed


def state_of(root: Path, placed: dict[str, tuple[int, int, str]]) -> tuple[dict, dict[str, Path]]:
    """The manifest of the local warehouse `root` (its current tables' files, the marker, .state/ and
    aggregate/), and path -> file of each; a file unchanged since `pull` placed it keeps its digest."""
    tables, sources = {}, {}
    for entry in sorted(os.listdir(root)):
        target = versions.link_target(root, entry)
        if target is not None and versions.current(root, entry) is not None:
            tables[entry] = target
            sources |= _files(root, target)
    for top in (".state", "aggregate"):
        if (root / top).is_dir() and not (root / top).is_symlink():
            sources |= _files(root, top)
    if (root / ".loopmeter").is_file():
        sources[".loopmeter"] = root / ".loopmeter"
    sources = {path: source for path, source in sources.items() if path not in KEPT_LOCAL}
    files = {}
    for path, source in sources.items():
        status = source.stat()
        known = placed.get(path)
        same = known is not None and known[:2] == (status.st_size, status.st_mtime_ns)
        files[path] = [known[2] if same else _digest(source), status.st_size]
    return {"files": files, "tables": tables}, sources


def _files(root: Path, top: str) -> dict[str, Path]:
    found = {}
    for directory, folders, names in os.walk(root / top):
        folders[:] = [name for name in folders if not name.startswith(".") or top != "aggregate"]
        for name in names:
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            if path.is_file() and not path.is_symlink() and path_problem(relative) is None:
                found[relative] = path
    return found


def push(remote: Remote, started_from: str | None, manifest: dict, sources: dict[str, Path],
         cache: ObjectCache | None = None, placed: dict[str, tuple[int, int, str]] | None = None) -> str:
    """The objects `manifest` names, then the manifest, then HEAD (unless the state moved on since
    `started_from`); returns the new manifest's key. The objects not `placed` by the pull are kept
    in `cache` too."""
    fetched = {entry[2] for entry in (placed or {}).values()}
    for path, (digest, _size) in manifest["files"].items():
        remote.put(digest, sources[path])
        if cache is not None and digest not in fetched:
            cache.keep(sources[path], digest)
    faults.checkpoint("remote:objects-put")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    key = f"manifests/{stamp}-{secrets.token_hex(4)}.json"
    remote._write(key, json.dumps(manifest, sort_keys=True).encode())
    faults.checkpoint("remote:manifest-written")
    if remote.head() != started_from:
        raise WarehouseBusy(f"{remote.url}: another command changed the warehouse while this one ran; nothing of "
                            "this one was published (run it again)")
    try:
        remote._write(HEAD, json.dumps({"manifest": key}).encode())
        PUBLISHED.append(remote.url)  # an interruption from here on leaves this state published
        faults.checkpoint("remote:head-written")
    except OSError as error:  # the store may have taken the object and lost its answer
        raise LoopmeterError(f"{remote.url}: publishing to it: writing {HEAD} failed ({' '.join(str(error).split())}), "
                             "so whether this command's state was published is not known: a report or `loopmeter check` "
                             "there shows which state it holds (run the command again if it is the one before)") from None
    return key


@contextmanager
def mirrored(url: str) -> Iterator[Path]:
    """A scratch mirror of the warehouse at `url`, published back when the block ends without
    error and the warehouse changed; removed in any case."""
    remote = Remote(url)
    cache = object_cache.from_environment(url)
    # its real path: the warehouse's root is resolved as it is opened, and must be the mirror's as named here
    scratch = Path(os.path.realpath(tempfile.mkdtemp(prefix="loopmeter-mirror-")))
    root = scratch / "warehouse"
    MIRRORS.add(os.fspath(root))
    terminate = _ended_by_sigterm()
    try:
        root.mkdir()
        with _told(url, "reading it"):
            started_from, manifest, placed = pull(remote, root, cache)
        manifest["files"] = {path: entry for path, entry in manifest["files"].items() if path not in KEPT_LOCAL}
        yield root
        now, sources = state_of(root, placed)
        # a reader publishes nothing: what it changed in the mirror (a journal a forged state named,
        # finished) stays there; only a command that held the lock as a writer publishes
        if now != manifest and os.fspath(root) in lock.WRITTEN:
            with _told(url, "publishing to it (the warehouse there is as it was)"):
                push(remote, started_from, now, sources, cache, placed)
        if cache is not None:
            cache.keep_only({digest for digest, _size in now["files"].values()})
    finally:
        # removed whole even when Ctrl-C or SIGTERM comes now: the command's work is done or undone by
        # then (a signal during the block has already ended it), and a copy left would stay for ever
        with interrupts.ignored():
            faults.checkpoint("remote:removing-mirror")
            MIRRORS.discard(os.fspath(root))
            shutil.rmtree(scratch, ignore_errors=True)
            if cache is not None:
                cache.close()
        terminate()


def _ended_by_sigterm():
    """While a mirror exists, SIGTERM ends the command as an exit (143, as the signal's default does), so
    the mirror is removed on the way out rather than left in the temporary folder; returns what puts the
    handler before back. Only where SIGTERM is at its default: one ignored stays ignored, and one the
    command line already answers (`interrupts.answer`, which unwinds as Ctrl-C does) keeps its answer.
    Only the main thread sets handlers: elsewhere nothing changes."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None

    def leave(signum, frame):
        raise SystemExit(128 + signal.SIGTERM)

    before = signal.signal(signal.SIGTERM, leave)
    return lambda: signal.signal(signal.SIGTERM, before)


@contextmanager
def _told(url: str, doing: str) -> Iterator[None]:
    """The object store's own errors (pyarrow's OSError) as one line naming the warehouse."""
    try:
        yield
    except LoopmeterError:
        raise
    except OSError as error:
        raise LoopmeterError(f"{url}: {doing}: {' '.join(str(error).split())}") from None
