"""The statistics ForgeLoop does not compute: how sure each overhead figure is, and two run sets compared.
Both only read: they compute from the stored runs what they show."""
from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import usage_error
from ..storage import Warehouse
from .checks import check_choice, check_number, check_text
from .common import open_warehouse
from .forgeloop import Shown

COMPARE_FORMATS = ("table", "markdown", "json")


MAX_SEED = 2**53 - 1  # the largest whole number every JSON reader (JavaScript's too) holds exactly


def settings(level: float = 0.95, resamples: int = 2000, seed: int = 0):
    """The intervals' settings, checked: a level strictly between 0 and 1, a seed `--json` writes
    exactly (a JSON reader takes a whole number beyond 2^53 as a rounded float)."""
    from ..forgeloop.confidence import Settings

    check_level(level)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise usage_error(f"--seed must be a whole number from 0 to {MAX_SEED:,} (got {seed!r})")
    return Settings(level=level, resamples=resamples, seed=seed)


def check_level(level: float) -> None:
    check_number("--level", level, minimum=0, inclusive=False)
    if not 0 < level < 1:
        raise usage_error(f"--level must be between 0 and 1, e.g. 0.95 (got {level:g})")


def report_confidence(*, warehouse: str | os.PathLike | Warehouse | None = None, run_set: str | None = None,
                      level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Shown:
    """Per run set, scenario and ForgeLoop mode: intervals on the paired token and time overhead and
    the token distribution deltas; the light objectives judged MET, VIOLATED, INCONCLUSIVE or NOT_VERIFIED."""
    from ..forgeloop.confidence import confidence_report
    from ..forgeloop.aggregation import require_runs

    chosen = settings(level, resamples, seed)
    check_text("--run-set", run_set)
    store = open_warehouse(warehouse)
    require_runs(store)
    return Shown(confidence_report(store, run_set, chosen))


def compare(baseline: str, candidate: str, *, warehouse: str | os.PathLike | Warehouse | None = None,
            margin: float = 0.10, level: float = 0.95, adjust: str | None = None, adjust_tokens: bool = False,
            fail_on: Sequence[str] = ()) -> Shown:
    """Two run sets compared per scenario and mode, for tokens and wall time, and pooled over the
    scenarios per mode: the ratio CANDIDATE / BASELINE with an interval (all the gated intervals
    holding at once at `level`), the minimum detectable effect, a verdict (REGRESSED, IMPROVED,
    NO_CHANGE or INCONCLUSIVE), and what a gate failing on `fail_on` reads (`.document["gate"]`).
    `adjust="direct"` divides a ForgeLoop mode's time ratio (and token ratio with `adjust_tokens`) by
    the same scenario's direct-mode ratio."""
    from ..forgeloop.compare import ADJUSTMENTS, compare_run_sets

    check_text("BASELINE", baseline)
    check_text("CANDIDATE", candidate)
    check_number("--margin", margin, minimum=0)
    if margin >= 1:
        raise usage_error(f"--margin must be below 1, e.g. 0.10 for ±10% (got {margin:g})")
    check_level(level)
    conditions = fail_on_conditions(fail_on)
    check_choice("--adjust", adjust, ADJUSTMENTS)
    if adjust_tokens and adjust is None:
        raise usage_error("--adjust-tokens needs --adjust direct")
    store = open_warehouse(warehouse)
    notes = [f"note: {baseline} is compared with itself: every ratio is 1, every verdict NO_CHANGE or INCONCLUSIVE; "
             "give the run set to compare against first, then the one compared"] if baseline == candidate else []
    return Shown(compare_run_sets(store, baseline, candidate, margin, level, adjust, adjust_tokens, conditions), notes)


def fail_on_conditions(fail_on: Sequence[str] | str | None) -> tuple[str, ...]:
    """`--fail-on` as given (repeated, or comma-separated), checked, each condition once."""
    from ..forgeloop.compare import FAIL_ON

    given = [fail_on] if isinstance(fail_on, str) else list(fail_on or ())
    conditions: list[str] = []
    for part in (piece.strip() for text in given for piece in text.split(",")):
        check_choice("--fail-on", part, FAIL_ON)
        if part not in conditions:
            conditions.append(part)
    return tuple(conditions)


def check_compare_options(output_format: str, json: bool) -> None:
    check_choice("--format", output_format, COMPARE_FORMATS)
    if json and output_format not in ("table", "json"):
        raise usage_error(f"--json and --format {output_format} say two things; give one")
