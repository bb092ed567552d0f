"""Validation of one ForgeLoop run document and its flat row in the `runs` table.

`flatten_run(document)` checks every rule of the run contract, in the order ForgeLoop's
own validator applies them, and returns the run's values in `RUN_COLUMNS` order. A broken
rule raises `RunRejected(field, rule)`; the ingest step adds the file name.

Numbers follow JavaScript, which wrote the files: an integral float (`3.0`) is an integer,
booleans are not numbers. Integers must be safe in JavaScript (at most 2^53 - 1).
"""
from __future__ import annotations

import math
import sys
import re
from datetime import datetime, timezone
from typing import Any

from .contract import (
    BENCHMARK_VERSIONS,
    CONTEXT_ITEMS,
    CONTEXT_SOURCES,
    DIAGNOSTIC_COUNTS,
    DIAGNOSTIC_KEYS,
    MODES,
    PROFILES,
    QUALITY_SCORES,
    QUALITY_SOURCES,
    REQUESTED_PROFILE_BY_MODE,
    RUN_ID,
    RUN_ID_RULE,
    RUN_SET_ID,
    RUN_SET_RULE,
    RUNAWAY_SIGNALS,
    SCENARIO_ID,
    SCENARIO_RULE,
    USAGE_COUNTS,
    USAGE_SOURCES,
    VERIFICATION_RESULTS,
)

MAX_SAFE_INTEGER = 2**53 - 1
# field names as messages name them, made once (not per run)
_USAGE_FIELDS = tuple(f"usage.{name}" for name in USAGE_COUNTS)
_DIAGNOSTIC_FIELDS = tuple(f"diagnostics.{name}" for name in DIAGNOSTIC_COUNTS)
_CONTEXT_FIELDS = tuple(f"contextUsage.items.{name}" for name in CONTEXT_ITEMS)


class RunRejected(Exception):
    """A run document broke a rule of the contract."""

    def __init__(self, field: str, rule: str):
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


# (column, polars dtype name, unit or meaning) — the `runs` table, in order
RUN_COLUMNS: list[tuple[str, str, str]] = [
    ("run_set_id", "str", "run set id (the folder name under raw/)"),
    ("scenario_id", "str", "scenario id"),
    ("mode", "str", "direct, forgeloopBalanced or forgeloopAdaptive"),
    ("run_index", "i64", "repetition number within scenario and mode, from 1"),
    ("run_id", "str", "run id written by the runner"),
    ("schema_version", "i64", "run document schemaVersion"),
    ("benchmark_version", "str", "benchmark methodology version, \"1\" or \"2\""),
    ("recorded_at", "datetime", "when the run was recorded (UTC)"),
    *[(_snake(name), "i64", f"usage.{name}, tokens") for name in USAGE_COUNTS],
    ("cost_usd", "f64", "usage.costUsd, US dollars"),
    ("usage_model", "str", "usage.model (trimmed)"),
    ("usage_provider", "str", "usage.provider (trimmed)"),
    ("usage_source", "str", "usage.source: PROVIDER_REPORTED, HOST_REPORTED or UNKNOWN"),
    ("wall_clock_ms", "f64", "wall-clock time of the run, milliseconds"),
    ("verification", "str", "PASS, FAIL or NOT_AVAILABLE"),
    ("verification_cycles", "i64", "verification cycles reported by the run"),
    ("comparable_steps", "i64", "comparable steps reported by the run"),
    ("has_diagnostics", "bool", "the run carries a diagnostics object"),
    ("diag_execution_profile", "str", "diagnostics.executionProfile"),
    *[("diag_" + _snake(name), "i64", f"diagnostics.{name}, count") for name in DIAGNOSTIC_COUNTS],
    ("diag_guide_count", "i64", "diagnostics.guideCount, count"),
    ("diag_guide_ids", "list_str", "diagnostics.guideIds"),
    ("diag_host_warnings", "list_str", "diagnostics.hostWarnings"),
    ("diag_termination_reason", "str", "diagnostics.terminationReason"),
    ("diag_flags", "list_str", "diagnostics.flags: runaway signals the host reported, in ForgeLoop's order"),
    ("has_context_usage", "bool", "the run document has a contextUsage key"),
    ("context_source", "str", "contextUsage.source (UNKNOWN when absent)"),
    ("context_profile", "str", "contextUsage.profile (the resolved profile when absent)"),
    *[("context_" + _snake(name), "i64", f"contextUsage.items.{name}, tokens") for name in CONTEXT_ITEMS],
    ("context_total_tokens", "i64", "sum of the six context items when HOST_REPORTED and all present, tokens"),
    ("has_quality", "bool", "the run document has a quality key"),
    ("quality_source", "str", "quality.source (UNKNOWN when absent)"),
    *[("quality_" + _snake(name), "f64", f"quality.scores.{name}, 0 to 5") for name in QUALITY_SCORES],
    ("meta_model", "str", "metadata.model"),
    ("meta_provider", "str", "metadata.provider"),
    ("meta_prompt_spec_fingerprint", "str", "metadata.promptSpecFingerprint"),
    ("meta_project_revision", "str", "metadata.projectRevision"),
    ("meta_environment_class", "str", "metadata.environmentClass"),
    ("meta_requested_profile", "str", "metadata.requestedProfile"),
    ("meta_resolved_profile", "str", "metadata.resolvedProfile"),
    ("meta_node_version", "str", "metadata.nodeVersion"),
    ("meta_os", "str", "metadata.os"),
    ("meta_arch", "str", "metadata.arch"),
]
# columns the ingest step adds after the document's own
SOURCE_COLUMNS: list[tuple[str, str, str]] = [
    ("source_path", "str", "path of the run file, relative to the results directory"),
    ("content_hash", "str", "sha256 of the run file's bytes"),
]
RUN_COLUMN_NAMES = [name for name, _, _ in RUN_COLUMNS]


def _shown(value: Any) -> str:
    return "null" if value is None else str(value)


def _object(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise RunRejected(field, "must be an object")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole_or_finite(value: Any) -> bool:
    """A number that is an int or a finite float: an int beyond any double (an adapter's 10**400) is
    compared as it is, never given to math.isfinite, which cannot take it."""
    return _is_number(value) and (isinstance(value, int) or math.isfinite(value))


def _count(value: Any, field: str) -> int | None:
    """An integer >= 0 or null (JavaScript's Number.isInteger: 3.0 counts)."""
    if value is None:
        return None
    if type(value) is int and 0 <= value <= MAX_SAFE_INTEGER:  # the common case, first
        return value
    if _whole_or_finite(value) and value == int(value) and value >= 0:
        if value > MAX_SAFE_INTEGER:
            raise RunRejected(field, "must be at most 2^53 - 1")
        return int(value)
    raise RunRejected(field, "must be an integer >= 0 or null")


def _counts(source: dict, names: tuple[str, ...], fields: tuple[str, ...], blank_is_null: bool = False) -> list:
    """`_count` of each of `names` in `source` (`fields`: their names in messages), the
    common case (null or a safe integer) without a call; with `blank_is_null`, "" is null."""
    values = []
    for name, field in zip(names, fields):
        value = source.get(name)
        if value is None or (type(value) is int and 0 <= value <= MAX_SAFE_INTEGER):
            values.append(value)
        elif blank_is_null and value == "":
            values.append(None)
        else:
            values.append(_count(value, field))
    return values


def _finite(value: Any, field: str) -> float | None:
    if value is None:
        return None
    if _whole_or_finite(value) and 0 <= value <= sys.float_info.max:
        return float(value)
    raise RunRejected(field, "must be a finite number >= 0 or null")


def _text(value: Any, field: str, *, nullable: bool = False) -> str | None:
    if nullable and value is None:
        return None
    if isinstance(value, str) and value:
        return value
    raise RunRejected(field, "must be a non-empty string or null" if nullable else "must be a non-empty string")


def _choice(value: Any, field: str, allowed: tuple) -> Any:
    if value in allowed and (value is None or isinstance(value, str)):
        return value
    listed = ", ".join("null" if a is None else a for a in allowed)
    raise RunRejected(field, f"must be one of {listed}")


def _identifier(value: Any, field: str, pattern, rule: str) -> str:
    _text(value, field)
    if not pattern.fullmatch(value):
        raise RunRejected(field, rule)
    return value


# The instants a `datetime` column (timestamp[us] in UTC) is given from Python: those of its
# calendar, years 1 to 9999 (Parquet's and DuckDB's timestamps hold all of them and more)
TIMESTAMP_RANGE_RULE = "must lie between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z once in UTC"
_YEAR_OUTSIDE = re.compile(r"[+-]?(0000|\d{5,})-")  # year 0, or one of five digits or more
_LEAP_SECOND = re.compile(r"\d{4}-?\d\d-?\d\dT\d\d:?\d\d:?60")
LEAP_SECOND_RULE = "must be a parseable timestamp (ISO 8601): second 60, a leap second, is no instant a timestamp holds"


def _timestamp(value: Any, field: str) -> datetime:
    _text(value, field)
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        if _YEAR_OUTSIDE.match(text):
            raise RunRejected(field, TIMESTAMP_RANGE_RULE) from None
        if _LEAP_SECOND.match(text):
            raise RunRejected(field, LEAP_SECOND_RULE) from None
        raise RunRejected(field, "must be a parseable timestamp (ISO 8601)") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=timezone.utc)
    try:
        return parsed.astimezone(timezone.utc)
    except OverflowError:  # its offset takes it past either end of the calendar
        raise RunRejected(field, TIMESTAMP_RANGE_RULE) from None


def _strings(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise RunRejected(field, "must be an array")
    for item in value:
        if not isinstance(item, str) or not item:
            raise RunRejected(field, "must contain only non-empty strings")
    return value


def _usage(run: dict) -> tuple:
    usage = run.get("usage", {})  # a missing usage is UNKNOWN usage, as ForgeLoop reads it
    _object(usage, "usage")
    source = usage.get("source")
    source = "UNKNOWN" if source is None else _choice(source, "usage.source", USAGE_SOURCES)
    counts = _counts(usage, USAGE_COUNTS, _USAGE_FIELDS, blank_is_null=True)
    cost = usage.get("costUsd")
    cost = None if cost == "" else _finite(cost, "usage.costUsd")
    identity = []
    for name in ("model", "provider"):
        value = usage.get(name)
        if value is None or value == "":
            identity.append(None)
        elif isinstance(value, str) and value.strip():
            identity.append(value.strip())
        else:
            raise RunRejected(f"usage.{name}", "must be a non-empty string or null")
    if source == "UNKNOWN" and any(v is not None for v in (*counts, cost, *identity)):
        raise RunRejected("usage", "UNKNOWN usage must keep every measured value and identity field null")
    return (*counts, cost, *identity, source)


def _metadata(run: dict, counts: dict) -> dict:
    """`counts`: the run's verificationCycles and comparableSteps, as validated."""
    metadata = _object(run.get("metadata"), "metadata")
    _identifier(metadata.get("scenarioId"), "metadata.scenarioId", SCENARIO_ID, SCENARIO_RULE)
    _choice(metadata.get("mode"), "metadata.mode", MODES)
    if metadata["scenarioId"] != run["scenarioId"]:
        raise RunRejected("metadata.scenarioId", f"must equal the run's scenarioId ({run['scenarioId']})")
    if metadata["mode"] != run["mode"]:
        raise RunRejected("metadata.mode", f"must equal the run's mode ({run['mode']})")
    if metadata.get("benchmarkVersion") != run["benchmarkVersion"]:
        raise RunRejected("metadata.benchmarkVersion", f"must equal the run's benchmarkVersion ({run['benchmarkVersion']})")
    _text(metadata.get("environmentClass"), "metadata.environmentClass")
    for name in ("model", "provider", "projectRevision"):
        if name not in metadata:
            raise RunRejected(f"metadata.{name}", "is required (a non-empty string or null)")
        _text(metadata[name], f"metadata.{name}", nullable=True)
    _text(metadata.get("promptSpecFingerprint"), "metadata.promptSpecFingerprint")
    mode = run["mode"]
    for name in ("requestedProfile", "resolvedProfile"):
        if name not in metadata:
            raise RunRejected(f"metadata.{name}", "is required (a profile name or null)")
    resolved = metadata["resolvedProfile"]
    if mode == "direct":
        if resolved is not None:
            raise RunRejected("metadata.resolvedProfile", "must be null for direct runs")
    else:
        _choice(resolved, "metadata.resolvedProfile", PROFILES)
    requested = REQUESTED_PROFILE_BY_MODE[mode]
    if metadata["requestedProfile"] != requested:
        shown = "null" if requested is None else f'"{requested}"'
        raise RunRejected("metadata.requestedProfile", f"must be {shown} for {mode} runs")
    for name in ("verificationCycles", "comparableSteps"):
        if name not in metadata:
            raise RunRejected(f"metadata.{name}", "is required (an integer >= 0 or null)")
        value = _count(metadata[name], f"metadata.{name}")
        if value != counts[name]:
            raise RunRejected(f"metadata.{name}", f"must equal the run's {name} ({_shown(counts[name])})")
    for name in ("nodeVersion", "os", "arch"):
        if name in metadata:
            _text(metadata[name], f"metadata.{name}")
    return metadata


def _diagnostics(run: dict) -> tuple:
    if "diagnostics" not in run or run["diagnostics"] is None:
        return (False, None, *([None] * len(DIAGNOSTIC_COUNTS)), None, [], [], None, [])
    diagnostics = _object(run["diagnostics"], "diagnostics")
    for key in diagnostics:
        if key not in DIAGNOSTIC_KEYS:
            raise RunRejected(f"diagnostics.{key}", "is not a diagnostics field")
    profile = diagnostics.get("executionProfile")
    if profile is not None:
        _choice(profile, "diagnostics.executionProfile", PROFILES)
    counts = _counts(diagnostics, DIAGNOSTIC_COUNTS, _DIAGNOSTIC_FIELDS)
    guide_count = _count(diagnostics.get("guideCount"), "diagnostics.guideCount")
    guide_ids = _strings(diagnostics.get("guideIds"), "diagnostics.guideIds")
    warnings = _strings(diagnostics.get("hostWarnings"), "diagnostics.hostWarnings")
    termination = _text(diagnostics.get("terminationReason"), "diagnostics.terminationReason", nullable=True)
    flags = _strings(diagnostics.get("flags"), "diagnostics.flags")
    for flag in flags:
        if flag not in RUNAWAY_SIGNALS:
            raise RunRejected("diagnostics.flags", f"{flag!r} is not a runaway signal")
    ordered_flags = [signal for signal in RUNAWAY_SIGNALS if signal in flags]
    return (True, profile, *counts, guide_count, guide_ids, warnings, termination, ordered_flags)


def _context_usage(run: dict, resolved: str | None) -> tuple:
    present = "contextUsage" in run
    context = run.get("contextUsage")
    if context is None:
        return (present, "UNKNOWN", resolved, *([None] * len(CONTEXT_ITEMS)), None)
    _object(context, "contextUsage")
    source = context.get("source")
    source = "UNKNOWN" if source is None else _choice(source, "contextUsage.source", CONTEXT_SOURCES)
    profile = context.get("profile")
    profile = resolved if profile is None else _choice(profile, "contextUsage.profile", PROFILES)
    if profile != resolved:
        raise RunRejected("contextUsage.profile", f"must equal metadata.resolvedProfile ({_shown(resolved)})")
    items = context.get("items")
    items = {} if items is None else _object(items, "contextUsage.items")
    for key in items:
        if key not in CONTEXT_ITEMS:
            raise RunRejected(f"contextUsage.items.{key}", "is not a context item")
    values = _counts(items, CONTEXT_ITEMS, _CONTEXT_FIELDS)
    if source == "UNKNOWN" and any(v is not None for v in values):
        raise RunRejected("contextUsage.items", "UNKNOWN context usage must keep every item null")
    total = _js_total(values) if source == "HOST_REPORTED" and all(v is not None for v in values) else None
    return (present, source, profile, *values, total)


def _js_total(values: list[int]) -> int:
    """The items added as JavaScript adds them: doubles, in item order (beyond 2^53 a sum rounds at
    each step, and so may differ from the exact one)."""
    total = 0.0
    for value in values:
        total += value
    return int(total)


def _quality(run: dict) -> tuple:
    present = "quality" in run
    quality = run.get("quality")
    if quality is None:
        return (present, "UNKNOWN", *([None] * len(QUALITY_SCORES)))
    _object(quality, "quality")
    source = quality.get("source")
    source = "UNKNOWN" if source is None else _choice(source, "quality.source", QUALITY_SOURCES)
    scores = quality.get("scores")
    scores = {} if scores is None else _object(scores, "quality.scores")
    for key in scores:
        if key not in QUALITY_SCORES:
            raise RunRejected(f"quality.scores.{key}", "is not a quality score")
    values = []
    for name in QUALITY_SCORES:
        score = scores.get(name)
        if score is not None and not (_whole_or_finite(score) and 0 <= score <= 5):
            raise RunRejected(f"quality.scores.{name}", "must be a number from 0 to 5 or null")
        values.append(None if score is None else float(score))
    if source == "UNKNOWN" and any(v is not None for v in values):
        raise RunRejected("quality.scores", "UNKNOWN quality must keep every score null")
    return (present, source, *values)


def flatten_run(run: Any) -> tuple:
    """Validate one parsed run document; return its row in `RUN_COLUMNS` order."""
    _object(run, "run")
    if run.get("schemaVersion") != 1 or isinstance(run.get("schemaVersion"), bool):
        raise RunRejected("schemaVersion", "must be 1")
    version = run.get("benchmarkVersion")
    if version not in BENCHMARK_VERSIONS or not isinstance(version, str):
        raise RunRejected("benchmarkVersion", 'must be "1" or "2"')
    run_set_id = _identifier(run.get("runSetId"), "runSetId", RUN_SET_ID, RUN_SET_RULE)
    run_id = _identifier(run.get("runId"), "runId", RUN_ID, RUN_ID_RULE)
    scenario_id = _identifier(run.get("scenarioId"), "scenarioId", SCENARIO_ID, SCENARIO_RULE)
    mode = _choice(run.get("mode"), "mode", MODES)
    run_index = run.get("runIndex")
    if not (_whole_or_finite(run_index) and run_index == int(run_index) and run_index >= 1):
        raise RunRejected("runIndex", "must be an integer >= 1")
    if run_index > MAX_SAFE_INTEGER:
        raise RunRejected("runIndex", "must be at most 2^53 - 1")
    recorded_at = _timestamp(run.get("recordedAt"), "recordedAt")
    usage = _usage(run)
    wall_clock_ms = _finite(run.get("wallClockMs"), "wallClockMs")
    verification = _choice(run.get("verification"), "verification", VERIFICATION_RESULTS)
    cycles = _count(run.get("verificationCycles"), "verificationCycles")
    steps = _count(run.get("comparableSteps"), "comparableSteps")
    metadata = _metadata(run, {"verificationCycles": cycles, "comparableSteps": steps})
    diagnostics = _diagnostics(run)
    context = _context_usage(run, metadata.get("resolvedProfile"))
    quality = _quality(run)
    usage_model, usage_provider = usage[6], usage[7]
    if usage_model is not None and metadata["model"] != usage_model:
        raise RunRejected("metadata.model", f"must equal usage.model ({usage_model})")
    if usage_provider is not None and metadata["provider"] != usage_provider:
        raise RunRejected("metadata.provider", f"must equal usage.provider ({usage_provider})")
    return (
        run_set_id,
        scenario_id,
        mode,
        int(run_index),
        run_id,
        1,
        version,
        recorded_at,
        *usage,
        wall_clock_ms,
        verification,
        cycles,
        steps,
        *diagnostics,
        *context,
        *quality,
        metadata["model"],
        metadata["provider"],
        metadata["promptSpecFingerprint"],
        metadata["projectRevision"],
        metadata["environmentClass"],
        metadata["requestedProfile"],
        metadata["resolvedProfile"],
        metadata.get("nodeVersion"),
        metadata.get("os"),
        metadata.get("arch"),
    )
