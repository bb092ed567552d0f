"""Deterministic ForgeLoop run sets for the demo, the tests and the benchmark.

`write_results(root, plan, seed)` writes `root/raw/<runSetId>/<scenario>/<mode>/run-NNN.json`
and `root/scenarios/<scenario>.json` in ForgeLoop's layout. The runs look like real ones:
token counts with a long tail and occasional spikes, low-baseline direct runs, FAIL and
UNKNOWN-usage runs, diagnostics with runaway flags, host-reported context usage where
adaptive resolves to light, external quality scores, and version-1 run sets.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .contract import CONTEXT_ITEMS, MODES, QUALITY_SCORES

SCENARIOS = {
    # scenario id: (expected profile, work type, typical direct tokens)
    "documentation-correction": ("light", "documentation", 56_000),
    "static-landing-page": ("light", "frontend", 140_000),
    "small-bug-fix": ("balanced", "bugfix", 57_000),
    "api-feature": ("balanced", "api", 60_000),
    "authentication-change": ("full", "security", 62_000),
    "infrastructure-release": ("full", "infrastructure", 69_000),
}
MODE_FACTOR = {"direct": 1.0, "forgeloopBalanced": 1.06, "forgeloopAdaptive": 1.03}


@dataclass
class RunSetPlan:
    run_set_id: str
    runs_per_mode: int
    benchmark_version: str = "2"
    scenarios: tuple[str, ...] = tuple(SCENARIOS)


def scenario_document(scenario: str) -> dict:
    profile, work_type, _ = SCENARIOS.get(scenario, ("balanced", "generic", 60_000))
    return {
        "schemaVersion": 1,
        "benchmarkVersion": "2",
        "scenarioId": scenario,
        "description": f"Sample scenario {scenario}.",
        "input": {"workType": work_type, "surfaces": [], "risks": [], "platforms": []},
        "expectedProfile": profile,
        "measurements": {},
    }


def make_run(rng: random.Random, plan: RunSetPlan, scenario: str, mode: str, run_index: int, started: datetime) -> dict:
    profile, _, typical = SCENARIOS.get(scenario, ("balanced", "generic", 60_000))
    version = plan.benchmark_version
    low_baseline = mode == "direct" and rng.random() < 0.12
    spike = rng.random() < 0.04
    base = typical * MODE_FACTOR[mode] * (0.45 if low_baseline else 1.0)
    total = int(base * rng.lognormvariate(0, 0.08) * (1.9 if spike else 1.0))
    unknown = rng.random() < 0.02
    failed = rng.random() < 0.07
    resolved = None if mode == "direct" else ("balanced" if mode == "forgeloopBalanced" else profile)
    output = int(total * rng.uniform(0.01, 0.03))
    steps = 4 if profile != "light" else 8
    cycles = 1 if rng.random() > 0.05 else 2
    usage = (
        {"source": "UNKNOWN"}
        if unknown
        else {
            "inputTokens": total - output,
            "outputTokens": output,
            "cacheReadTokens": int(total * 0.8) // 1024 * 1024,
            "cacheWriteTokens": 0,
            "totalTokens": total,
            "costUsd": None,
            "model": "gpt-5.4-mini",
            "provider": "codex-chatgpt",
            "source": "HOST_REPORTED",
        }
    )
    run: dict = {
        "schemaVersion": 1,
        "benchmarkVersion": version,
        "runSetId": plan.run_set_id,
        "runId": f"run-{scenario}-{mode}-{run_index:03d}",
        "scenarioId": scenario,
        "mode": mode,
        "runIndex": run_index,
        "recordedAt": (started + timedelta(seconds=run_index * 97)).isoformat().replace("+00:00", "Z"),
        "usage": usage,
        "wallClockMs": round(rng.uniform(18_000, 65_000) * (1.4 if spike else 1.0), 4),
        "verification": "FAIL" if failed else "PASS",
        "verificationCycles": cycles,
        "comparableSteps": steps,
    }
    if version == "2":
        turns = 1 if rng.random() > 0.05 else rng.randint(3, 6)
        tools = rng.randint(3, 14) * (3 if spike and rng.random() < 0.5 else 1)
        flags = ["MODEL_STALL"] if spike and rng.random() < 0.3 else []
        run["diagnostics"] = {
            "executionProfile": resolved,
            "verificationCycles": cycles,
            "modelTurns": turns,
            "toolCalls": tools,
            "retries": 1 if rng.random() < 0.03 else None,
            "correctionCycles": None,
            "filesRead": None,
            "filesWritten": rng.randint(0, 3),
            "contextRefreshes": None,
            "guideCount": 2,
            "guideIds": ["clean", "test"],
            "hostWarnings": [],
            "terminationReason": "VERIFICATION_FAILED" if failed else "COMPLETED",
            "flags": flags,
        }
    light_context = resolved == "light" or mode == "forgeloopBalanced" and profile == "light"
    if light_context:
        items = {name: rng.randint(500, 9000) for name in CONTEXT_ITEMS}
        run["contextUsage"] = {"source": "HOST_REPORTED", "profile": resolved, "items": items}
    else:
        run["contextUsage"] = {"source": "UNKNOWN", "profile": resolved, "items": {name: None for name in CONTEXT_ITEMS}}
    if work_type_has_quality(scenario):
        run["quality"] = {
            "source": "EXTERNAL_REPORTED",
            "scores": {name: round(rng.uniform(3.5, 4.9), 1) for name in QUALITY_SCORES},
        }
    run["metadata"] = {
        "scenarioId": scenario,
        "mode": mode,
        "model": None if unknown else "gpt-5.4-mini",
        "provider": None if unknown else "codex-chatgpt",
        "promptSpecFingerprint": f"{plan.run_set_id}-prompt",
        "projectRevision": "3cf40c202d84bbc0cf19f0439497698b2e56b652",
        "benchmarkVersion": version,
        "environmentClass": "sample-linux-x64",
        "requestedProfile": {"direct": None, "forgeloopBalanced": "balanced", "forgeloopAdaptive": "auto"}[mode],
        "resolvedProfile": resolved,
        "verificationCycles": cycles,
        "comparableSteps": steps,
        "nodeVersion": "22.1.0",
        "os": "linux",
        "arch": "x64",
    }
    return run


def work_type_has_quality(scenario: str) -> bool:
    return scenario.endswith("landing-page")


def write_results(root: Path, plans: list[RunSetPlan], seed: int = 7, indent: int | None = 2) -> int:
    """Write the run sets and the scenario files; returns the number of runs written."""
    rng = random.Random(seed)
    root = Path(root)
    scenarios_dir = root / "scenarios"
    scenarios_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    started = datetime(2026, 9, 1, 8, 0, tzinfo=timezone.utc)
    scenario_ids = sorted({s for plan in plans for s in plan.scenarios})
    for scenario in scenario_ids:
        (scenarios_dir / f"{scenario}.json").write_text(json.dumps(scenario_document(scenario), indent=2) + "\n")
    for plan in plans:
        for scenario in plan.scenarios:
            for mode in MODES:
                directory = root / "raw" / plan.run_set_id / scenario / mode
                os.makedirs(directory, exist_ok=True)
                for run_index in range(1, plan.runs_per_mode + 1):
                    run = make_run(rng, plan, scenario, mode, run_index, started)
                    text = json.dumps(run, indent=indent)
                    (directory / f"run-{run_index:03d}.json").write_text(text + "\n")
                    written += 1
    return written


def scaled_plans(total_runs: int, runs_per_mode: int = 20) -> list[RunSetPlan]:
    """Run sets of `runs_per_mode` runs per scenario and mode adding up to about `total_runs`."""
    scenarios = tuple(SCENARIOS)
    per_run_set = runs_per_mode * len(MODES) * len(scenarios)
    count = max(1, round(total_runs / per_run_set))
    return [RunSetPlan(f"bench-{index:04d}", runs_per_mode, "2" if index % 5 else "1", scenarios) for index in range(count)]
