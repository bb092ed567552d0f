"""A benchmark adapter whose token overheads come from a known law, for `execute --until-resolved`.

Each answer depends only on the seed, the scenario, the mode and the runIndex, so two run sets with the
same seed hold the same runs for the run indices they share (an until-resolved run set is the start of
a fixed one). The direct run of index i spends 50,000 tokens times e^N(0, 0.2); a ForgeLoop mode's run
of index i spends the direct run's tokens times (1 + o / 100), with the overhead o in percent drawn
from the law of its mode:

- LAW_TEST_LAW=clear (default): balanced N(40, 10), adaptive N(20, 4): every question clear
  (p50s far above the margin, the light p50 far below 35, the light p95 at 26.6, below 60);
- LAW_TEST_LAW=violated: balanced N(40, 10), adaptive N(55, 10): the light p50 objective violated.

Environment: LAW_TEST_SEED (default 0); LAW_TEST_LOG: append "scenario/mode/index" per call;
LAW_TEST_FAIL: comma-separated "scenario/mode/index" keys whose call raises.
"""
import math
import os
import random

LAWS = {"clear": {"forgeloopBalanced": (40.0, 10.0), "forgeloopAdaptive": (20.0, 4.0)},
        "violated": {"forgeloopBalanced": (40.0, 10.0), "forgeloopAdaptive": (55.0, 10.0)}}


def _draw(scenario, mode, index):
    return random.Random(f"{os.environ.get('LAW_TEST_SEED', '0')}:{scenario}:{mode}:{index}")


def tokens(scenario, mode, index):
    direct = round(50_000 * math.exp(_draw(scenario, "direct", index).gauss(0.0, 0.2)))
    if mode == "direct":
        return direct
    mean, spread = LAWS[os.environ.get("LAW_TEST_LAW", "clear")][mode]
    return round(direct * (1.0 + _draw(scenario, mode, index).gauss(mean, spread) / 100.0))


def run_benchmark(request):
    scenario, mode, index = request["scenario"]["scenarioId"], request["mode"], request["runIndex"]
    key = f"{scenario}/{mode}/{index}"
    if os.environ.get("LAW_TEST_LOG"):
        with open(os.environ["LAW_TEST_LOG"], "a") as log:
            log.write(key + "\n")
    if key in os.environ.get("LAW_TEST_FAIL", "").split(","):
        raise RuntimeError(f"host session crashed on {key}")
    total = tokens(scenario, mode, index)
    return {
        "usage": {"inputTokens": total - 800, "outputTokens": 800, "cacheReadTokens": 0, "cacheWriteTokens": 0,
                  "totalTokens": total, "model": "law-model", "provider": "law-host", "source": "HOST_REPORTED"},
        "verification": "PASS",
        "verificationCycles": 1,
        "comparableSteps": 3,
        "promptSpecFingerprint": f"fp-{scenario}",
        "metadata": {"environmentClass": "law-env"},
    }
