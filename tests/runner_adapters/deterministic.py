"""A deterministic Python benchmark adapter for the runner's tests.

Its answers depend only on the scenario, mode and runIndex. Environment variables steer
what a test is about:

- RUNNER_TEST_LOG: append each call's input (one JSON line) to this file
- RUNNER_TEST_FAIL: comma-separated scenario/mode/runIndex keys whose call raises
- RUNNER_TEST_BAD: keys whose answer breaks the run contract (negative totalTokens)
- RUNNER_TEST_SLEEP_MS: sleep this long in every forgeloopAdaptive call
- RUNNER_TEST_CLEANUP: cleanup() appends "cleanup" to this file
- RUNNER_TEST_FINALIZE: "quality" attaches external quality to every run of the
  landing-page scenario; "unknown" returns a runId the runner never made; "invalid" a
  score out of range
"""
import json
import os
import time

TOKENS = {"small-bug-fix": 50_000, "static-landing-page": 120_000}
FACTOR = {"direct": 1.0, "forgeloopBalanced": 1.1, "forgeloopAdaptive": 1.05}


def _keys(name):
    return {key for key in os.environ.get(name, "").split(",") if key}


def run_benchmark(request):
    scenario = request["scenario"]["scenarioId"]
    mode, index = request["mode"], request["runIndex"]
    key = f"{scenario}/{mode}/{index}"
    if os.environ.get("RUNNER_TEST_LOG"):
        with open(os.environ["RUNNER_TEST_LOG"], "a") as log:
            log.write(json.dumps(request) + "\n")
    print(f"adapter chatter for {key}")  # must not reach the runner's stdout
    if key in _keys("RUNNER_TEST_FAIL"):
        raise RuntimeError(f"host session crashed on {key}")
    if mode == "forgeloopAdaptive" and os.environ.get("RUNNER_TEST_SLEEP_MS"):
        time.sleep(int(os.environ["RUNNER_TEST_SLEEP_MS"]) / 1000)
    total = int(TOKENS.get(scenario, 60_000) * FACTOR[mode]) + 7 * index
    answer = {
        "usage": {
            "inputTokens": total - 1000,
            "outputTokens": 1000,
            "cacheReadTokens": 0,
            "cacheWriteTokens": 0,
            "totalTokens": -5 if key in _keys("RUNNER_TEST_BAD") else total,
            "model": " test-model ",
            "provider": "test-host",
            "source": "HOST_REPORTED",
        },
        "verification": "PASS",
        "verificationCycles": 1,
        "comparableSteps": 4.0,
        "promptSpecFingerprint": f"fp-{scenario}",
        "metadata": {"environmentClass": "test-env", "projectRevision": "adapter-claims-this-revision"},
    }
    if mode != "direct":
        answer["diagnostics"] = {"modelTurns": 1, "toolCalls": 5 + index, "flags": ["MODEL_STALL", "HOST_RETRY"]}
    if mode == "forgeloopAdaptive":
        answer["contextUsage"] = {"source": "HOST_REPORTED", "items": {"taskContext": 100, "guides": 200}}
    return answer


def finalize_benchmark(payload):
    how = os.environ.get("RUNNER_TEST_FINALIZE")
    if how == "unknown":
        return {"qualityByRunId": {"run-nowhere-direct-001": {"source": "EXTERNAL_REPORTED", "scores": {}}}}
    if how == "invalid":
        return {"qualityByRunId": {"run-small-bug-fix-direct-001": {"source": "EXTERNAL_REPORTED", "scores": {"visualQuality": 7}}}}
    if how != "quality":
        return None
    quality = {}
    for record in payload["records"]:
        if record["scenarioId"] == "static-landing-page":
            quality[record["runId"]] = {
                "source": "EXTERNAL_REPORTED",
                "scores": {"visualQuality": 4.5, "accessibility": record["runIndex"]},
            }
    return {"qualityByRunId": quality, "summary": {"status": "EVALUATED", "evaluated": len(quality)}}


def cleanup():
    if os.environ.get("RUNNER_TEST_CLEANUP"):
        with open(os.environ["RUNNER_TEST_CLEANUP"], "a") as marker:
            marker.write("cleanup\n")
