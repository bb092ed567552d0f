"""The ForgeLoop run contract (`spec/forgeloop-benchmarks.md`): names, enumerations, patterns.

Plain data only, no heavy imports, so the CLI and the runner can use it freely.
"""
from __future__ import annotations

import re

# The file-level rejections that say nothing about a file's bytes, only about the moment (it
# could not be read) or the options (the size limit): the next ingest judges such a file again.
UNREADABLE = "cannot be read"
UNREADABLE_DIRECTORY = "directory cannot be read"
TOO_LARGE = "is larger than the"
OF_THE_MOMENT = (UNREADABLE, UNREADABLE_DIRECTORY)

MODES = ("direct", "forgeloopBalanced", "forgeloopAdaptive")
CANDIDATE_MODES = MODES[1:]
PROFILES = ("light", "balanced", "full")
BENCHMARK_VERSIONS = ("1", "2")
VERIFICATION_RESULTS = ("PASS", "FAIL", "NOT_AVAILABLE")
USAGE_SOURCES = ("PROVIDER_REPORTED", "HOST_REPORTED", "UNKNOWN")
TRUSTED_USAGE_SOURCES = ("PROVIDER_REPORTED", "HOST_REPORTED")
CONTEXT_SOURCES = ("HOST_REPORTED", "UNKNOWN")
QUALITY_SOURCES = ("EXTERNAL_REPORTED", "HOST_REPORTED", "UNKNOWN")
REQUESTED_PROFILE_BY_MODE = {"direct": None, "forgeloopBalanced": "balanced", "forgeloopAdaptive": "auto"}

RUNAWAY_SIGNALS = (
    "EXCESSIVE_MODEL_TURNS",
    "EXCESSIVE_TOOL_CALLS",
    "EXCESSIVE_VERIFICATION_CYCLES",
    "REPEATED_CONTEXT_REFRESH",
    "REPEATED_FILE_READ",
    "REPEATED_GUIDE_LOAD",
    "UNEXPECTED_RETRY",
    "CORRECTION_LOOP",
    "HOST_RETRY",
    "MODEL_STALL",
    "UNKNOWN_TOKEN_SPIKE",
)
# the statistics directly under modeAggregates.<mode>, in ForgeLoop's order
MODE_METRICS = ("totalTokens", "wallClockMs", "verificationCycles", "comparableSteps", "tokensPerComparableStep")
# the eight diagnostics counts ForgeLoop summarises, in its order (guideCount is stored, not summarised)
DIAGNOSTIC_COUNTS = (
    "verificationCycles",
    "modelTurns",
    "toolCalls",
    "retries",
    "correctionCycles",
    "filesRead",
    "filesWritten",
    "contextRefreshes",
)
DIAGNOSTIC_KEYS = frozenset(
    ("executionProfile", *DIAGNOSTIC_COUNTS, "guideCount", "guideIds", "hostWarnings", "terminationReason", "flags")
)
CONTEXT_ITEMS = ("taskContext", "guides", "history", "protocolInstructions", "repositoryContext", "other")
QUALITY_SCORES = (
    "visualQuality",
    "responsiveQuality",
    "accessibility",
    "interactionPolish",
    "requirementsCompleteness",
)
USAGE_COUNTS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "totalTokens")
# metadata fields that must agree for a comparable pair (missing counts as null)
PAIR_METADATA = (
    "scenarioId",
    "model",
    "provider",
    "promptSpecFingerprint",
    "projectRevision",
    "benchmarkVersion",
    "environmentClass",
    "nodeVersion",
    "os",
    "arch",
)

RUN_SET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
RUN_ID = re.compile(r"run-[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
SCENARIO_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")

RUN_SET_RULE = "must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
RUN_ID_RULE = "must match ^run-[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"
SCENARIO_RULE = "must match ^[a-z0-9][a-z0-9-]{0,127}$"

# ForgeLoop's sample-size policy per tier (BENCHMARK_TIERS): (minimum, maximum, default) runs
TIERS = {"smoke": (1, 3, 1), "evidence": (5, 10, 5), "tail": (20, 30, 20)}

# policy constants of ForgeLoop's aggregator
OUTLIER_POLICY = "TOKEN_IQR_1_5"
OUTLIER_MINIMUM_SAMPLES = 4
TAIL_SAMPLE_MINIMUM = 20
TAIL_REGRESSION_PERCENT = 60
LOW_BASELINE_RATIO = 0.60
LIGHT_OBJECTIVES = {"p50TokenOverheadPercent": 35, "p95TokenOverheadPercent": 60}
SOURCE_POLICY = "PROVIDER_REPORTED_OR_HOST_REPORTED_ONLY"
CLAIM_REASON_ALLOWED = "Trusted usage, actual timing, verification, and matching comparability metadata are present."
CLAIM_REASON_DENIED = (
    "Efficiency claims require trusted usage, actual timing, PASS verification, positive comparable steps, "
    "and matching metadata."
)
INFLATION_REASONS = {
    "CONTEXT_INFLATION": "Host-reported LIGHT context exceeded the comparable BALANCED context in at least one repeated run.",
    "NOT_DETECTED": "Comparable host-reported LIGHT and BALANCED context values did not show inflation.",
    "NO_LIGHT": "The adaptive mode did not resolve to LIGHT for this scenario.",
    "INCOMPLETE": "Context inflation requires complete HOST_REPORTED context items for matching LIGHT and BALANCED runs.",
}
