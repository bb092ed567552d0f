"""The run document `loopmeter execute` writes: an adapter's answer shaped the way
ForgeLoop's `createBenchmarkRun` shapes it, with what the runner owns filled in.

The shape functions only fill in what createBenchmarkRun fills in (every key, in its
order, defaults for what is missing); they judge nothing. A value of the wrong kind is
passed on as it is, and `flatten_run` (ingest's rules) rejects it with the field and the
rule ingest would give. Unknown keys are kept for the same reason.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..jsjson import dumps
from .contract import (
    CONTEXT_ITEMS,
    DIAGNOSTIC_COUNTS,
    QUALITY_SCORES,
    REQUESTED_PROFILE_BY_MODE,
    RUNAWAY_SIGNALS,
    USAGE_COUNTS,
)
from .schema import RunRejected, flatten_run

BENCHMARK_VERSION = "2"


def _or(value: Any, default: Any) -> Any:
    """JavaScript's `value ?? default`."""
    return default if value is None else value


def _blank(value: Any) -> Any:
    return None if value == "" else value


def _filled(given: Any, names: tuple, defaults: dict | None = None) -> Any:
    """`given`'s values for `names` in that order, defaults (null) for the missing; other
    keys are kept after them so that ingest's rules reject them."""
    if not isinstance(given, dict):
        return given
    filled = {name: _or(given.get(name), (defaults or {}).get(name)) for name in names}
    filled.update((key, value) for key, value in given.items() if key not in filled)
    return filled


def usage_shape(value: Any) -> Any:
    """usage as ForgeLoop's normalizeUsage writes it: its nine keys (others dropped), "" as
    null, model and provider trimmed, a numeric costUsd string as its number, source UNKNOWN
    by default."""
    usage = _or(value, {})
    if not isinstance(usage, dict):
        return usage
    shaped = {name: _blank(usage.get(name)) for name in USAGE_COUNTS}
    cost = _blank(usage.get("costUsd"))
    if isinstance(cost, str):
        try:
            cost = float(cost)
        except ValueError:
            pass
    shaped["costUsd"] = cost
    for name in ("model", "provider"):
        text = _blank(usage.get(name))
        shaped[name] = text.strip() if isinstance(text, str) and text.strip() else text
    shaped["source"] = _or(usage.get("source"), "UNKNOWN")
    return shaped


DIAGNOSTIC_ORDER = ("executionProfile", *DIAGNOSTIC_COUNTS, "guideCount", "guideIds", "hostWarnings", "terminationReason", "flags")


def diagnostics_shape(value: Any) -> Any:
    """Every diagnostics key in ForgeLoop's order (lists default to []), flags in signal order."""
    shaped = _filled(value, DIAGNOSTIC_ORDER, {"guideIds": [], "hostWarnings": [], "flags": []})
    if isinstance(shaped, dict):
        flags = shaped["flags"]
        if isinstance(flags, list) and all(isinstance(flag, str) for flag in flags) and set(flags) <= set(RUNAWAY_SIGNALS):
            shaped["flags"] = [signal for signal in RUNAWAY_SIGNALS if signal in flags]
    return shaped


def context_usage_shape(value: Any, resolved: str | None) -> Any:
    """contextUsage, always present: source UNKNOWN, the resolved profile and null items by default."""
    context = _or(value, {})
    if not isinstance(context, dict):
        return context
    return {
        "source": _or(context.get("source"), "UNKNOWN"),
        "profile": _or(context.get("profile"), resolved),
        "items": _filled(_or(context.get("items"), {}), CONTEXT_ITEMS),
    }


def quality_shape(value: Any) -> Any:
    """quality, always present: source UNKNOWN and null scores by default."""
    quality = _or(value, {})
    if not isinstance(quality, dict):
        return quality
    return {"source": _or(quality.get("source"), "UNKNOWN"), "scores": _filled(_or(quality.get("scores"), {}), QUALITY_SCORES)}


def default_resolved_profile(scenario: dict, mode: str) -> str | None:
    return {"direct": None, "forgeloopBalanced": "balanced", "forgeloopAdaptive": scenario["expectedProfile"]}[mode]


def run_id(scenario_id: str, mode: str, run_index: int) -> str:
    return f"run-{scenario_id}-{mode}-{run_index:03d}"


def build_run(
    *,
    answer: Any,
    run_set_id: str,
    scenario: dict,
    mode: str,
    run_index: int,
    wall_clock_ms: float,
    recorded_at: str,
    revision: str | None,
    environment: dict[str, str],
) -> dict:
    """The run document of one adapter answer, in `createBenchmarkRun`'s key order, checked
    with ingest's rules (`flatten_run`); a broken rule raises RunRejected."""
    if not isinstance(answer, dict):
        raise RunRejected("answer", "must be an object")
    metadata = answer.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    usage = usage_shape(answer.get("usage"))
    reported_usage = usage if isinstance(usage, dict) else {}
    resolved = _or(metadata.get("resolvedProfile"), default_resolved_profile(scenario, mode))
    cycles, steps = answer.get("verificationCycles"), answer.get("comparableSteps")
    document: dict[str, Any] = {
        "schemaVersion": 1,
        "benchmarkVersion": BENCHMARK_VERSION,
        "runSetId": run_set_id,
        "runId": run_id(scenario["scenarioId"], mode, run_index),
        "scenarioId": scenario["scenarioId"],
        "mode": mode,
        "runIndex": run_index,
        "recordedAt": recorded_at,
        "usage": usage,
        "wallClockMs": wall_clock_ms,
        "verification": _or(answer.get("verification"), "NOT_AVAILABLE"),
        "verificationCycles": cycles,
        "comparableSteps": steps,
    }
    if answer.get("diagnostics") is not None:
        document["diagnostics"] = diagnostics_shape(answer["diagnostics"])
    document["contextUsage"] = context_usage_shape(answer.get("contextUsage"), resolved)
    document["quality"] = quality_shape(answer.get("quality"))

    def reported(name: str) -> Any:
        return _or(metadata.get(name), environment[name])

    document["metadata"] = {
        "scenarioId": scenario["scenarioId"],
        "mode": mode,
        "model": _or(reported_usage.get("model"), metadata.get("model")),
        "provider": _or(reported_usage.get("provider"), metadata.get("provider")),
        "promptSpecFingerprint": _or(answer.get("promptSpecFingerprint"), metadata.get("promptSpecFingerprint")),
        # derived from the target's git HEAD; the adapter's word only where there is no repository
        "projectRevision": _or(revision, metadata.get("projectRevision")),
        "benchmarkVersion": BENCHMARK_VERSION,
        "environmentClass": reported("environmentClass"),
        "requestedProfile": REQUESTED_PROFILE_BY_MODE[mode],
        "resolvedProfile": resolved,
        "verificationCycles": cycles,
        "comparableSteps": steps,
    }
    for name in ("nodeVersion", "os", "arch"):
        value = reported(name)
        if value:  # ForgeLoop drops an empty value
            document["metadata"][name] = value
    flatten_run(document)
    return document


def run_text(document: dict) -> str:
    """A run file's text, as ForgeLoop writes it: JSON.stringify(run, null, 2) + "\\n"."""
    return dumps(document, 2) + "\n"


def utc_timestamp() -> str:
    """new Date().toISOString(): milliseconds and Z."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
