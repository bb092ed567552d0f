#!/usr/bin/env python3
"""A command adapter for the runner's tests: JSON lines on stdin and stdout, as a host
integration in any language would speak them (see docs/runner.md).

- CMD_TEST_LOG: append each method name received to this file
- CMD_TEST_FAIL: comma-separated scenario/mode/runIndex keys answered with an error
- CMD_TEST_CRASH: keys on which the process dies without answering
- CMD_TEST_CLEANUP: the cleanup method appends "cleanup" to this file
- CMD_TEST_STRAY: a line printed on stdout before the first answer (a stray debugging print)
- CMD_TEST_PIDS: append "adapter <pid>" (and "child <pid>" for CMD_TEST_CHILD) to this file at start,
  and "busy <key>" when a CMD_TEST_BUSY call begins
- CMD_TEST_CHILD: start `sleep 300` in the background at start (a host left running)
- CMD_TEST_BUSY: keys on which the call never returns (a host stuck), deaf to Ctrl-C (SIGINT ignored)
- CMD_TEST_HUGE: keys answered with usage.inputTokens 10**400 (JSON allows it; 64 bits do not); with
  CMD_TEST_DIGITS, a number of that many digits (more than 4,300: more than Python converts)
- CMD_TEST_HUGE_EXTRA: keys whose answer carries a field the contract ignores, "hostTrace": 10**400
- CMD_TEST_ENDLESS: keys answered with bytes that never end in a line break (a MiB at a time, for ever)
- CMD_TEST_BOOL_ID: keys answered with "id": true
- CMD_TEST_STDERR_MB: MiB written to stderr on each runBenchmark
"""
import json
import os
import signal
import subprocess
import sys
import time


def keys(name):
    return {key for key in os.environ.get(name, "").split(",") if key}


def log(text):
    if os.environ.get("CMD_TEST_LOG"):
        with open(os.environ["CMD_TEST_LOG"], "a") as handle:
            handle.write(text + "\n")


def _key(params):
    return f"{params['scenario']['scenarioId']}/{params['mode']}/{params['runIndex']}"


def run_benchmark(params):
    key = _key(params)
    if os.environ.get("CMD_TEST_STDERR_MB"):
        for _ in range(int(os.environ["CMD_TEST_STDERR_MB"])):
            sys.stderr.write("E" * (1 << 20))
        sys.stderr.write("\n")
        sys.stderr.flush()
    if key in keys("CMD_TEST_ENDLESS"):
        while True:
            sys.stdout.write("y" * (1 << 20))
            sys.stdout.flush()
    if key in keys("CMD_TEST_BUSY"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        record(f"busy {key}")
        while True:
            time.sleep(60)
    if key in keys("CMD_TEST_CRASH"):
        print(f"host process died on {key}", file=sys.stderr, flush=True)
        sys.exit(3)
    if key in keys("CMD_TEST_FAIL"):
        raise ValueError(f"host refused {key}")
    total = 40_000 + 1000 * params["runIndex"] + (500 if params["mode"] != "direct" else 0)
    answer = {
        "usage": {"totalTokens": total, "model": "cmd-model", "provider": "cmd-host", "source": "PROVIDER_REPORTED"},
        "verification": "PASS",
        "verificationCycles": 1,
        "comparableSteps": 3,
        "promptSpecFingerprint": "cmd-fp",
        "metadata": {"environmentClass": "cmd-env", "nodeVersion": "22.4.0", "os": "linux", "arch": "x64",
                     "resolvedProfile": "full" if params["mode"] == "forgeloopAdaptive" else None},
    }
    if key in keys("CMD_TEST_HUGE"):
        answer["usage"]["inputTokens"] = 10**400 if not os.environ.get("CMD_TEST_DIGITS") else "DIGITS"
    if key in keys("CMD_TEST_HUGE_EXTRA"):
        answer["hostTrace"] = 10**400
    return answer


def finalize_benchmark(params):
    quality = {record["runId"]: {"source": "EXTERNAL_REPORTED", "scores": {"requirementsCompleteness": 4}}
               for record in params["records"] if record["mode"] == "forgeloopAdaptive"}
    return {"qualityByRunId": quality}


def cleanup(_params):
    if os.environ.get("CMD_TEST_CLEANUP"):
        with open(os.environ["CMD_TEST_CLEANUP"], "a") as handle:
            handle.write("cleanup\n")
    return None


METHODS = {"runBenchmark": run_benchmark, "finalizeBenchmark": finalize_benchmark, "cleanup": cleanup}


def record(text):
    if os.environ.get("CMD_TEST_PIDS"):
        with open(os.environ["CMD_TEST_PIDS"], "a") as handle:
            handle.write(text + "\n")


def main():
    record(f"adapter {os.getpid()}")
    if os.environ.get("CMD_TEST_CHILD"):
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        record(f"child {child.pid}")
    if os.environ.get("CMD_TEST_STRAY"):
        print(os.environ["CMD_TEST_STRAY"], flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        log(request["method"])
        try:
            answer = {"id": request["id"], "result": METHODS[request["method"]](request["params"])}
        except Exception as error:  # the error travels back as the answer
            answer = {"id": request["id"], "error": f"{type(error).__name__}: {error}"}
        if request["method"] == "runBenchmark" and _key(request["params"]) in keys("CMD_TEST_BOOL_ID"):
            answer["id"] = True
        line = json.dumps(answer)
        if os.environ.get("CMD_TEST_DIGITS"):
            line = line.replace('"DIGITS"', "1" + "0" * int(os.environ["CMD_TEST_DIGITS"]))
        print(line, flush=True)


if __name__ == "__main__":
    main()
