"""Scenario specification files (`<scenarios>/<scenarioId>.json`) and the `scenarios` table."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from stat import S_ISREG
from typing import Any

import orjson

from ..errors import is_utf8, shown_path
from .contract import BENCHMARK_VERSIONS, PROFILES, SCENARIO_ID, SCENARIO_RULE, TOO_LARGE, UNREADABLE
from .schema import RunRejected

SCENARIO_COLUMNS: list[tuple[str, str, str]] = [
    ("scenario_id", "str", "scenario id (also the file name)"),
    ("expected_profile", "str", "the profile ForgeLoop's router should resolve: light, balanced or full"),
    ("benchmark_version", "str", "benchmarkVersion the scenario file carries"),
    ("description", "str", "what the scenario asks for"),
    ("work_type", "str", "input.workType"),
    ("surfaces", "list_str", "input.surfaces"),
    ("risks", "list_str", "input.risks"),
    ("platforms", "list_str", "input.platforms"),
    ("source_path", "str", "absolute path of the scenario file"),
    ("content_hash", "str", "sha256 of the scenario file's bytes"),
]


def _strings(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or any(not isinstance(item, str) or not item for item in value):
        raise RunRejected(field, "must be an array of non-empty strings")
    return value


def parse_scenario(content: bytes, file_name: str) -> tuple:
    """Validate a scenario file; return its row in SCENARIO_COLUMNS order (without source)."""
    try:
        document = orjson.loads(content)
    except orjson.JSONDecodeError as error:
        raise RunRejected("file", f"not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise RunRejected("scenario", "must be an object")
    if document.get("schemaVersion") != 1 or isinstance(document.get("schemaVersion"), bool):
        raise RunRejected("schemaVersion", "must be 1")
    if document.get("benchmarkVersion") not in BENCHMARK_VERSIONS:
        raise RunRejected("benchmarkVersion", 'must be "1" or "2"')
    scenario_id = document.get("scenarioId")
    if not isinstance(scenario_id, str) or not SCENARIO_ID.fullmatch(scenario_id):
        raise RunRejected("scenarioId", SCENARIO_RULE)
    if file_name != f"{scenario_id}.json":
        raise RunRejected("scenarioId", f"must match the file name ({file_name})")
    if document.get("expectedProfile") not in PROFILES:
        raise RunRejected("expectedProfile", "must be one of light, balanced, full")
    description = document.get("description")
    if description is not None and not isinstance(description, str):
        raise RunRejected("description", "must be a string")
    task_input = document.get("input") or {}
    if not isinstance(task_input, dict):
        raise RunRejected("input", "must be an object")
    work_type = task_input.get("workType")
    if work_type is not None and not isinstance(work_type, str):
        raise RunRejected("input.workType", "must be a string")
    return (
        scenario_id,
        document["expectedProfile"],
        document["benchmarkVersion"],
        description,
        work_type,
        _strings(task_input.get("surfaces"), "input.surfaces"),
        _strings(task_input.get("risks"), "input.risks"),
        _strings(task_input.get("platforms"), "input.platforms"),
    )


def read_scenarios(directory: Path, max_file_bytes: int) -> tuple[list[tuple], list[tuple[str, str, str]]]:
    """Every `*.json` in `directory`: (rows, rejections as (path, field, rule)). A file larger
    than `max_file_bytes` is rejected unread: at most that many bytes (and one) are ever read."""
    rows, rejected = [], []
    for path in sorted(directory.glob("*.json")):
        try:
            if not is_utf8(path.name):  # kept by Python as surrogates: no text to store
                rejected.append((shown_path(path), "file", "name is not valid UTF-8"))
                continue
            content = _read_bounded(path, max_file_bytes)
            row = parse_scenario(content, path.name)
        except RunRejected as error:
            rejected.append((str(path), error.field, error.rule))
            continue
        except OSError as error:
            rejected.append((str(path), "file", f"{UNREADABLE} ({error.strerror})"))
            continue
        rows.append((*row, str(path.resolve()), hashlib.sha256(content).hexdigest()))
    return rows, rejected


def _read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Opened without blocking (a FIFO put
    in its place since it was looked at would block the opening forever), then judged again by
    what was opened."""
    if not S_ISREG(path.stat().st_mode):  # a device is never opened: opening one may act
        raise RunRejected("file", "is not a regular file")
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        stat = os.fstat(descriptor)
        if not S_ISREG(stat.st_mode):
            raise RunRejected("file", "is not a regular file")
        if stat.st_size > limit:
            raise RunRejected("file", f"{TOO_LARGE} {limit}-byte limit ({stat.st_size} bytes)")
        parts, total = [], 0
        while total <= limit and (chunk := os.read(descriptor, limit + 1 - total)):  # it may grow meanwhile
            parts.append(chunk)
            total += len(chunk)
        if total > limit:
            raise RunRejected("file", f"{TOO_LARGE} {limit}-byte limit")
        return b"".join(parts)
    finally:
        os.close(descriptor)
