"""A run set's plan and places: what `loopmeter execute` settles before any adapter call.

The runs per scenario and mode (`resolve_runs`, by ForgeLoop's tiers, or the budget of
`--until-resolved`: `resolve_budget`), the run set's id (checked, or generated from the clock), the
scenarios (validated as ingest validates them), the project revision (git HEAD of `--target`), the
runner's environment under ForgeLoop's key names, where the run set's files lie (`RunSetPaths`), the
plan it was started with and its check on `--resume` (`reconcile_plan`), and the check of a run file
a previous invocation wrote (`read_existing_run`). `runner.py` executes the run set with these.
"""
from __future__ import annotations

import errno
import fcntl
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

import orjson

from ..config import DEFAULT_MAX_FILE_BYTES
from ..errors import LoopmeterError, usage_error
from ..jsjson import dumps
from ..storage.files import atomic_write, read_bounded
from .contract import MODES, RUN_SET_ID
from .contract import TIERS as BENCHMARK_TIERS
from .run_document import BENCHMARK_VERSION, utc_timestamp
from .scenarios import parse_scenario
from .schema import RunRejected, flatten_run


@dataclass(frozen=True)
class Tier:
    minimum_runs: int
    maximum_runs: int
    default_runs: int


# ForgeLoop's sample-size policy (BENCHMARK_TIERS)
TIERS = {name: Tier(*runs) for name, runs in BENCHMARK_TIERS.items()}
DEFAULT_RUNS = 5
MAXIMUM_RUNS = 100


# ---- options -----------------------------------------------------------------------------
def resolve_runs(tier: str | None, runs: int | None) -> int:
    """Runs per scenario and mode from --tier and --runs, by ForgeLoop's rules."""
    if tier is not None and tier not in TIERS:
        raise usage_error(f"--tier must be one of {', '.join(TIERS)} (got {tier!r})")
    policy = TIERS[tier] if tier is not None else None
    if runs is None:
        runs = DEFAULT_RUNS if policy is None else policy.default_runs
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAXIMUM_RUNS:
        raise usage_error(f"--runs must be an integer from 1 through {MAXIMUM_RUNS} (got {runs})")
    if policy is not None and not policy.minimum_runs <= runs <= policy.maximum_runs:
        raise usage_error(
            f"--runs must be between {policy.minimum_runs} and {policy.maximum_runs} for the {tier} tier (got {runs})"
        )
    return runs


def resolve_budget(until_resolved: bool, max_runs: int | None, tier: str | None, runs: int | None) -> int | None:
    """The most runs per scenario and mode of `--until-resolved` (None without it): `--max-runs`,
    default 30; `--tier` and `--runs` are refused beside it (it decides the runs itself)."""
    from .sequential import DEFAULT_MAX_RUNS

    if not until_resolved:
        if max_runs is not None:
            raise usage_error("--max-runs needs --until-resolved (a fixed size is --runs)")
        return None
    if tier is not None or runs is not None:
        raise usage_error("--until-resolved decides the runs itself: give --max-runs, not --tier or --runs")
    max_runs = DEFAULT_MAX_RUNS if max_runs is None else max_runs
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or not 1 <= max_runs <= MAXIMUM_RUNS:
        raise usage_error(f"--max-runs must be an integer from 1 through {MAXIMUM_RUNS} (got {max_runs})")
    return max_runs


def check_run_set_id(run_set_id: str) -> str:
    if not RUN_SET_ID.fullmatch(run_set_id):
        raise usage_error(
            f"--run-set {run_set_id!r} must match ^[A-Za-z0-9][A-Za-z0-9_-]{{0,63}}$ (letters, digits, _ and -)"
        )
    return run_set_id


def generated_run_set_id(now: datetime | None = None) -> str:
    """ForgeLoop's default: the UTC ISO timestamp without - : . (20260831T073638108Z)."""
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"


def read_file(path: Path) -> bytes:
    """A scenario, plan or run file's bytes, as `ingest forgeloop` would take them: a regular file (a
    link is never followed, a FIFO never opened: it would be waited on for ever), at most the largest
    run file `ingest forgeloop` takes; else one line naming it."""
    return read_bounded(path, DEFAULT_MAX_FILE_BYTES, beyond="the largest file `ingest forgeloop` takes")


def load_scenarios(directory: Path, only: list[str] | None = None) -> list[dict]:
    """The scenario files of `directory` in file-name order, each validated as ingest does."""
    directory = Path(directory)
    if not directory.is_dir():
        raise LoopmeterError(f"--scenarios {directory} is not a directory")
    scenarios = []
    for path in sorted(directory.glob("*.json")):
        try:
            content = read_file(path)
        except OSError as error:
            raise LoopmeterError(f"scenario file {path} cannot be read ({error.strerror})") from None
        try:
            parse_scenario(content, path.name)
        except RunRejected as error:
            raise LoopmeterError(f"scenario file {path}: {error.field}: {error.rule}") from None
        scenarios.append(orjson.loads(content))
    if not scenarios:
        raise LoopmeterError(f"no scenario files (<scenarioId>.json) in {directory}")
    if only:
        known = {scenario["scenarioId"] for scenario in scenarios}
        missing = [scenario_id for scenario_id in only if scenario_id not in known]
        if missing:
            raise usage_error(f"--scenario {', '.join(missing)}: no such scenario file in {directory}")
        scenarios = [scenario for scenario in scenarios if scenario["scenarioId"] in only]
    return scenarios


def project_revision(target: Path) -> str | None:
    """The commit checked out in `target` (git HEAD), or None outside a git repository."""
    from ..forge.git import safe_argv, safe_env

    try:
        result = subprocess.run(
            safe_argv(str(target), "rev-parse", "--verify", "--quiet", "HEAD^{commit}"),
            capture_output=True, text=True, timeout=30, env=safe_env(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    revision = result.stdout.strip()
    return revision if result.returncode == 0 and revision else None


NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64", "i386": "ia32", "i686": "ia32"}


def environment_defaults() -> dict[str, str]:
    """The runner's own environment under ForgeLoop's key names: `nodeVersion` holds the
    Python version, `os` and `arch` use Node's names (linux, darwin, win32; x64, arm64)."""
    machine = platform.machine().lower()
    return {
        "environmentClass": f"{sys.platform}-python{sys.version_info.major}",
        "nodeVersion": platform.python_version(),
        "os": sys.platform,
        "arch": NODE_ARCH.get(machine, machine or "unknown"),
    }


# ---- the run set on disk -------------------------------------------------------------------
@dataclass(frozen=True)
class RunSetPaths:
    results: Path
    run_set_id: str

    @property
    def raw(self) -> Path:
        return self.results / "raw" / self.run_set_id

    @property
    def aggregate(self) -> Path:
        return self.results / "aggregate" / self.run_set_id

    @property
    def runner(self) -> Path:
        return self.results / "runner" / self.run_set_id

    @property
    def plan(self) -> Path:
        return self.runner / "plan.json"

    @property
    def failures(self) -> Path:
        return self.runner / "failures.jsonl"

    @property
    def adapter_log(self) -> Path:
        return self.runner / "adapter-stderr.log"

    @property
    def stopping(self) -> Path:
        """`--until-resolved`: each scenario's runs and why it stopped (beside raw/, never in it)."""
        return self.runner / "stopping.json"

    @property
    def claim(self) -> Path:
        """Held (flock) by the one `execute` working on the run set (`claim`)."""
        return self.runner / ".execute.lock"

    def run_file(self, scenario_id: str, mode: str, run_index: int) -> Path:
        return self.raw / scenario_id / mode / f"run-{run_index:03d}.json"

    def exists(self) -> list[Path]:
        """What marks the run set as started: runs, an aggregate, a plan or failures."""
        return [path for path in (self.raw, self.aggregate, self.plan, self.failures, self.stopping) if path.exists()]


class Claim:
    """The run set for one invocation alone: `paths.claim` locked (flock) until `close`, which removes the
    file while the lock still holds. The kernel lets the lock go when the process ends, however it ends,
    so a run set an interrupted or killed execute left can be resumed. Python's files are not inherited:
    the adapter does not hold it."""

    def __init__(self, paths: RunSetPaths):
        self.path = paths.claim
        refused = LoopmeterError(f"run set {paths.run_set_id} is being executed by another loopmeter execute (it holds "
                                 f"{paths.claim}); wait for it to end, or choose another --run-set")
        for _ in range(3):
            self.handle = self._open(paths)
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(self.handle.fileno()).st_ino == os.stat(self.path).st_ino:
                    return
            except BlockingIOError:
                self.handle.close()
                raise refused from None
            except FileNotFoundError:
                pass
            except OSError as error:
                self.handle.close()
                raise LoopmeterError(f"run set {paths.run_set_id}: {paths.claim} cannot be locked: "
                                     f"{error.strerror or error}") from None
            self.handle.close()  # its holder let it go and removed it after we opened it: take the new one
        raise refused

    @staticmethod
    def _open(paths: RunSetPaths) -> BinaryIO:
        """The claim file, opened without following a link and without waiting (a FIFO there would block
        the open for ever); anything but a regular file there is refused."""
        import stat

        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            paths.runner.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(paths.claim, flags, 0o644)
        except OSError as error:
            reason = {errno.ELOOP: "a symbolic link", errno.ENXIO: "a FIFO or device, not a regular file"}.get(
                error.errno, error.strerror or str(error))
            raise LoopmeterError(f"run set {paths.run_set_id} cannot be started in {paths.results}: "
                                 f"{paths.claim}: {reason}") from None
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise LoopmeterError(f"run set {paths.run_set_id} cannot be started in {paths.results}: {paths.claim} is "
                                 "not a regular file (loopmeter's claim on the run set): remove it")
        return os.fdopen(descriptor, "ab")

    def close(self) -> None:
        try:
            self.path.unlink(missing_ok=True)  # while the lock holds: whoever opened it finds it gone and reopens
        except OSError:
            pass  # a claim file left is taken again by the next execute
        self.handle.close()


def write_text(path: Path, text: str) -> None:
    """A file of the run set, written whole (a temporary file and a rename), its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode())


def write_json(path: Path, document: dict) -> None:
    write_text(path, dumps(document, 2) + "\n")


def append_failure(paths: RunSetPaths, failure: dict) -> None:
    paths.runner.mkdir(parents=True, exist_ok=True)
    with open(paths.failures, "ab") as handle:
        handle.write(orjson.dumps(failure) + b"\n")


# ---- the plan ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Size:
    """How many runs: a tier and runs per mode, or the budget of `--until-resolved` (`max_runs`)."""
    tier: str | None
    runs: int | None
    max_runs: int | None = None
    rule: dict | None = None  # the plan's `untilResolved`: the stopping rule's settings


def plan_document(run_set_id: str, size: Size, scenarios: list[dict], adapter: str, target: Path,
                  stopping: dict | None) -> dict:
    """What the run set was started with; `stopping`: the settings of `--until-resolved`."""
    document = {
        "schemaVersion": 1,
        "benchmarkVersion": BENCHMARK_VERSION,
        "runSetId": run_set_id,
        "tier": size.tier,
        "runsPerMode": size.runs,
        "scenarios": [scenario["scenarioId"] for scenario in scenarios],
        "modes": list(MODES),
        "adapter": adapter,
        "target": str(target),
        "startedAt": utc_timestamp(),
    }
    if stopping is not None:
        document["untilResolved"] = stopping
    return document


def reconcile_plan(paths: RunSetPaths, size: Size, until_resolved: bool, scenarios: list[dict]) -> Size | None:
    """On --resume: the size the run set was started with (None without a plan), unless the command
    line asks for another (`size`: what it gave), which is refused: a run set has one size, and an
    until-resolved one keeps its budget."""
    if not paths.plan.is_file():
        return None
    try:
        plan = orjson.loads(read_file(paths.plan))
        rule = plan.get("untilResolved")
        planned = Size(plan["tier"], plan["runsPerMode"], None if rule is None else rule["maxRuns"], rule)
        planned_scenarios = plan["scenarios"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise LoopmeterError(f"{paths.plan} is damaged; remove it to resume without its checks") from None
    name = paths.run_set_id
    if planned.max_runs is not None:
        if size.tier is not None or size.runs is not None:
            raise usage_error(f"run set {name} was started with --until-resolved; resume it without --tier and --runs")
        if size.max_runs is not None and size.max_runs != planned.max_runs:
            raise usage_error(f"run set {name} was started with --max-runs {planned.max_runs}; "
                              "resume it without --max-runs or with the same")
    elif until_resolved:
        raise usage_error(f"run set {name} was started with a fixed size; resume it without --until-resolved")
    if size.tier is not None and size.tier != planned.tier:
        raise usage_error(f"run set {name} was started with --tier {planned.tier}; resume it without --tier or with the same")
    if size.runs is not None and size.runs != planned.runs:
        raise usage_error(f"run set {name} was started with {planned.runs} runs per mode; resume it without --runs or with the same")
    ids = [scenario["scenarioId"] for scenario in scenarios]
    if ids != planned_scenarios:
        raise usage_error(
            f"run set {name} was started with scenarios {', '.join(planned_scenarios)}; "
            f"this command has {', '.join(ids)} (use the same --scenarios and --scenario)"
        )
    return planned


def read_existing_run(path: Path, paths: RunSetPaths, scenario_id: str, mode: str, run_index: int) -> dict:
    """A run file a previous invocation wrote; it must be valid and be the run its path names."""
    shown = path.relative_to(paths.results)
    try:
        document = orjson.loads(read_file(path))
        flatten_run(document)
    except OSError as error:
        raise LoopmeterError(f"{shown} cannot be read ({error.strerror})") from None
    except orjson.JSONDecodeError as error:
        raise LoopmeterError(f"{shown} is not valid JSON ({error}); remove it to run it again") from None
    except RunRejected as error:
        raise LoopmeterError(f"{shown} is not a valid run: {error.field}: {error.rule}; remove it to run it again") from None
    identity = (document["runSetId"], document["scenarioId"], document["mode"], document["runIndex"])
    if identity != (paths.run_set_id, scenario_id, mode, run_index):
        raise LoopmeterError(f"{shown} holds run {document['runId']} of run set {document['runSetId']}, not the run its path names")
    return document
