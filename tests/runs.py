"""Building valid ForgeLoop run documents and result trees for tests."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from loopmeter.forgeloop.contract import CONTEXT_ITEMS, QUALITY_SCORES

REQUESTED = {"direct": None, "forgeloopBalanced": "balanced", "forgeloopAdaptive": "auto"}


def run(
    scenario: str = "small-bug-fix",
    mode: str = "direct",
    index: int = 1,
    tokens: int | None = 1000,
    *,
    run_set: str = "rs-test",
    version: str = "2",
    wall: float | None = 1000.0,
    verification: str = "PASS",
    resolved: str | None = None,
    source: str = "HOST_REPORTED",
    diagnostics: dict | None = None,
    context: dict | None = None,
    quality: dict | None = None,
    steps: int | None = 4,
    cycles: int | None = 1,
    **metadata_overrides,
) -> dict:
    """A valid run; keyword arguments change what a test is about."""
    if mode != "direct" and resolved is None:
        resolved = "balanced"
    unknown = source == "UNKNOWN"
    document = {
        "schemaVersion": 1,
        "benchmarkVersion": version,
        "runSetId": run_set,
        "runId": f"run-{scenario}-{mode}-{index:03d}",
        "scenarioId": scenario,
        "mode": mode,
        "runIndex": index,
        "recordedAt": "2026-08-31T15:59:19.203Z",
        "usage": {"source": "UNKNOWN"} if unknown else {
            "inputTokens": None if tokens is None else max(tokens - 10, 0),
            "outputTokens": None if tokens is None else min(tokens, 10),
            "cacheReadTokens": 0,
            "cacheWriteTokens": 0,
            "totalTokens": tokens,
            "costUsd": None,
            "model": "m1",
            "provider": "p1",
            "source": source,
        },
        "wallClockMs": wall,
        "verification": verification,
        "verificationCycles": cycles,
        "comparableSteps": steps,
    }
    if diagnostics is not None:
        document["diagnostics"] = diagnostics
    if context is not None:
        document["contextUsage"] = context
    if quality is not None:
        document["quality"] = quality
    document["metadata"] = {
        "scenarioId": scenario,
        "mode": mode,
        "model": None if unknown else "m1",
        "provider": None if unknown else "p1",
        "promptSpecFingerprint": "fp",
        "projectRevision": "rev",
        "benchmarkVersion": version,
        "environmentClass": "env",
        "requestedProfile": REQUESTED[mode],
        "resolvedProfile": None if mode == "direct" else resolved,
        "verificationCycles": cycles,
        "comparableSteps": steps,
        **metadata_overrides,
    }
    return document


def context(items: dict | None = None, profile: str | None = None, source: str = "HOST_REPORTED") -> dict:
    values = {name: 100 for name in CONTEXT_ITEMS} if items is None else items
    return {"source": source, "profile": profile, "items": values}


def quality(score: float, source: str = "EXTERNAL_REPORTED") -> dict:
    return {"source": source, "scores": {name: score for name in QUALITY_SCORES}}


def write_tree(root: Path, runs: list[dict], scenarios: dict[str, str] | None = None) -> Path:
    """RESULTS/raw/<runSet>/<scenario>/<mode>/run-NNN.json for each run; scenario files if given."""
    for document in runs:
        path = root / "raw" / document["runSetId"] / document["scenarioId"] / document["mode"] / f"run-{document['runIndex']:03d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2))
    if scenarios:
        directory = root / "scenarios"
        directory.mkdir(parents=True, exist_ok=True)
        for scenario, profile in scenarios.items():
            (directory / f"{scenario}.json").write_text(json.dumps({
                "schemaVersion": 1, "benchmarkVersion": "2", "scenarioId": scenario, "description": "test",
                "input": {"workType": "x", "surfaces": [], "risks": [], "platforms": []},
                "expectedProfile": profile, "measurements": {},
            }))
    return root


def edited(document: dict, path: str, value) -> dict:
    """A copy with the field at dotted `path` set to `value` (value DELETE removes it)."""
    copy_ = copy.deepcopy(document)
    target = copy_
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[part]
    if value is DELETE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return copy_


DELETE = object()
