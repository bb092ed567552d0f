"""Publishing several tables (and document folders) as one: a journal, then the swaps.

A stage that writes several tables publishes them together when it ends: a journal
(`.state/publishing.json`) names every new version and staged folder, then each link is
swapped and each folder exchanged. Ctrl-C waits for the last swap; a process killed among them
leaves the journal, by which the next writer (or a reader, when no writer holds the lock)
finishes them. So an interrupted stage leaves all its tables old, or all new.

The journal is input too (a warehouse may be copied, shared, or forged): it is followed only
when every table it names is one loopmeter knows, every version is `.versions/<table>/<id>` of
real directories, and every folder is a staged folder beside its target; a staged folder is moved
only when it belongs to this user, as every folder loopmeter stages does.
A journal loopmeter cannot have written is named in a warning and removed; nothing it names is done.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from ..errors import shown_path, warn
from .. import faults
from ..interrupts import deferred
from . import folders, registry, versions
from .files import parse_json, remove_tree
from .state import State

JOURNAL = "publishing.json"


def commit(root: Path, pending: dict[str, Path], staged: list[folders.Staged] = (), *,
           remove: Callable[[Path], None] = remove_tree) -> None:
    """Publish `pending` (table -> new version) and swap the `staged` folders in, as one: the
    journal first, then the swaps (the caller holds the lock). `remove` removes a version left."""
    state = State(root)
    for version in pending.values():
        versions.fsync_directory(version)
    previous: list[tuple[Path | None, Path]] = []
    try:
        with deferred():  # from the journal on, Ctrl-C waits for the last swap
            state.write(JOURNAL, {
                "tables": {name: os.path.relpath(version, root) for name, version in pending.items()},
                "folders": [entry.as_json() for entry in staged],
            })
            versions.fsync_directory(state.folder)
            faults.checkpoint("publishing:journal")
            for name, version in pending.items():
                previous.append((versions.swap(root, name, version), version))
                faults.checkpoint(f"publishing:swapped:{name}")
            for entry in staged:
                folders.swap(entry, remove=False)
                faults.checkpoint(f"publishing:swapped-folder:{entry.target.name}")
            versions.fsync_directory(root)
            state.remove(JOURNAL)
    finally:  # also when the Ctrl-C held above comes now: the versions left go with it
        for old, version in previous:
            versions.remove_superseded(old, version, remove)
        for entry in staged:
            folders.remove_old(entry)


def publish_one(root: Path, name: str, version: Path, *, remove: Callable[[Path], None] = remove_tree) -> None:
    """Make `version` table `name`'s current version now (outside a multi-table publish)."""
    versions.fsync_directory(version)
    previous = versions.swap(root, name, version)
    versions.fsync_directory(root)
    versions.remove_superseded(previous, version, remove)


def finish(root: Path) -> tuple[bool, str | None]:
    """Finish the swaps a killed writer's journal names (the caller holds the lock). Returns whether
    there was a journal, and why part of it could not be finished (None: all of it was): a folder
    that cannot be swapped in now stays in the journal, the rest is done."""
    state = State(root)
    if not state.exists(JOURNAL):
        return False, None
    entries, problem = read_journal(state)
    problem = problem or problem_of(root, entries)
    if problem is not None:
        warn(f"{shown_path(state.path(JOURNAL))}: {problem}; loopmeter did not write it: nothing it names was done, "
             "and it is removed")
        state.remove(JOURNAL)
        return True, None
    for name, relative in entries["tables"].items():
        version, link = versions.own(root, name, relative), root / name
        if version is None or (os.path.lexists(link) and not os.path.islink(link)):
            continue  # gone (removed by hand), or not a loopmeter table (left to the next publish to refuse)
        if versions.link_target(root, name) != relative:
            versions.swap(root, name, version)
    failed, error = [], None
    for entry in entries["folders"]:
        staged = folders.Staged.from_json(entry)
        if not _ours(staged):
            # a staged folder another user made: a journal anyone who can write the warehouse could have
            # written must not move a folder of this user's for it; the next aggregate writes them again
            warn(f"{shown_path(state.path(JOURNAL))}: the documents staged for {shown_path(staged.target)} are not "
                 "this user's and were not swapped in; run `loopmeter aggregate` with the same --out again")
            continue
        try:
            folders.swap(folders.Staged.from_json(entry))
        except OSError as trouble:
            failed.append(entry)
            error = error or trouble
    versions.fsync_directory(root)
    if failed:
        state.write(JOURNAL, {"tables": {}, "folders": failed})
        return True, f"{error.filename}: {error.strerror}" if error.filename else str(error)
    state.remove(JOURNAL)
    return True, None


def read_journal(state: State) -> tuple[object, str | None]:
    """The journal's entries, or why it cannot be read (not a regular file, too large, not JSON)."""
    from .files import WHAT, NotAFile, kind_of, read_bounded

    path = state.path(JOURNAL)
    try:
        data = read_bounded(path)
    except NotAFile:
        kind = kind_of(path)
        return None, f"it is {WHAT[kind]}, not a regular file" if kind in WHAT else "it is larger than loopmeter writes"
    except OSError as error:
        return None, f"it cannot be read ({error.strerror or error})"
    try:
        return parse_json(data), None
    except ValueError:
        return None, "it is not JSON"


def problem_of(root: Path, entries: object) -> str | None:
    """What in a journal loopmeter's `commit` never writes (None: nothing). A version or staged
    folder that is gone is no problem: a publish killed after its swap leaves such a journal."""
    if entries is None:
        return "it cannot be read as JSON"
    if not isinstance(entries, dict) or not isinstance(entries.get("tables"), dict) \
            or not isinstance(entries.get("folders"), list):
        return "it holds no tables and folders to publish"
    for name, relative in entries["tables"].items():
        if not registry.known(name):
            return f"{json.dumps(name)[:100]} is not a table loopmeter knows"
        if versions.parts(name, relative) is None:
            return f"the version of {name}, {json.dumps(relative)[:200]}, is not a folder of {versions.FOLDER}/{name}/"
        if os.path.lexists(root / relative) and versions.own(root, name, relative) is None:
            return f"the version of {name}, {relative}, is not a real directory of {versions.FOLDER}/{name}/"
    for entry in entries["folders"]:
        try:
            parsed = folders.Staged.from_json(entry)
        except (ValueError, TypeError, KeyError, AttributeError):
            return f"the folder entry {json.dumps(entry)[:200]} is not a staged folder beside its target"
        if os.path.islink(parsed.staged) or os.path.islink(parsed.aside) or os.path.islink(parsed.target):
            return f"the staged folder {shown_path(parsed.staged)} or its target is a symbolic link"
    return None


def _ours(staged: folders.Staged) -> bool:
    """The staged folder (or, after an exchange or a rename aside, what stands for it) belongs to this
    process's user, as every folder loopmeter stages does: one nobody else could have made."""
    for place in (staged.staged, staged.aside, staged.target):
        try:
            status = os.lstat(place)
        except OSError:
            continue
        if (status.st_dev, status.st_ino) == staged.identity:
            return status.st_uid == os.geteuid()
    return True  # gone everywhere: nothing to move, the swap finds nothing to do
