"""The statistics ForgeLoop does not compute: how sure each overhead figure is, and two run sets compared.
Both only read: they compute from the stored runs what they show."""
from __future__ import annotations

import os

from ..errors import usage_error
from ..storage import Warehouse
from .checks import check_choice, check_number
from .common import open_warehouse
from .forgeloop import Shown

COMPARE_FORMATS = ("table", "markdown", "json")


def settings(level: float = 0.95, resamples: int = 2000, seed: int = 0):
    """The intervals' settings, checked: a level strictly between 0 and 1."""
    from ..forgeloop.confidence import Settings

    check_number("--level", level, minimum=0, inclusive=False)
    if not 0 < level < 1:
        raise usage_error(f"--level must be between 0 and 1, e.g. 0.95 (got {level:g})")
    return Settings(level=level, resamples=resamples, seed=seed)


def report_confidence(*, warehouse: str | os.PathLike | Warehouse | None = None, run_set: str | None = None,
                      level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Shown:
    """Per run set, scenario and ForgeLoop mode: intervals on the paired token and time overhead and
    the token distribution deltas; the light objectives judged MET, VIOLATED or INCONCLUSIVE."""
    from ..forgeloop.confidence import confidence_report
    from ..forgeloop.aggregation import require_runs

    chosen = settings(level, resamples, seed)
    store = open_warehouse(warehouse)
    require_runs(store)
    return Shown(confidence_report(store, run_set, chosen))


def compare(baseline: str, candidate: str, *, warehouse: str | os.PathLike | Warehouse | None = None,
            margin: float = 0.10, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Shown:
    """Two run sets compared per scenario and mode, for tokens and wall time: each one's median, the
    ratio CANDIDATE / BASELINE with its interval, and a verdict (REGRESSED, IMPROVED, NO_CHANGE or
    INCONCLUSIVE)."""
    from ..forgeloop.compare import compare_run_sets

    check_number("--margin", margin, minimum=0)
    if margin >= 1:
        raise usage_error(f"--margin must be below 1, e.g. 0.10 for ±10% (got {margin:g})")
    chosen = settings(level, resamples, seed)
    store = open_warehouse(warehouse)
    return Shown(compare_run_sets(store, baseline, candidate, margin, chosen))


def check_compare_options(output_format: str, fail_on: str | None, json: bool) -> None:
    check_choice("--format", output_format, COMPARE_FORMATS)
    check_choice("--fail-on", fail_on, ("regression",))
    if json and output_format not in ("table", "json"):
        raise usage_error(f"--json and --format {output_format} say two things; give one")
