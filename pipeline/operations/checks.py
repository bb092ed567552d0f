"""The checks of what a caller gives an operation, before anything is read or written: each a
LoopmeterError of one line; a wrong option or argument ends with exit 2, as the command line's own."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Iterable

from ..errors import LoopmeterError, is_utf8, shown_path, starts_as_url, usage_error, without_credentials


def check_number(option: str, value: float | None, *, minimum: float, inclusive: bool = True,
                 maximum: float | None = None) -> None:
    """A float option must be finite and at least (or above) `minimum`, and at most `maximum` when
    given (a number a count of bytes or milliseconds is made from): `nan`, `inf` and `1e400` parse as
    floats, and would pass any range check typer makes."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # from Python: `level="0.9"`
        raise usage_error(f"{option} must be a number (got {value!r})")
    low_ok = value >= minimum if inclusive else value > minimum
    if not math.isfinite(value) or not low_ok or (maximum is not None and value > maximum):
        bound = f"{'at least' if inclusive else 'greater than'} {minimum:g}"
        bound += (f" and at most {int(maximum):,}" if maximum == int(maximum) else f" and at most {maximum:g}") \
            if maximum is not None else ""
        raise usage_error(f"{option} must be a finite number {bound} (got {value:g})")


def check_text(option: str, value: str | None) -> None:
    """A text option (a run set's id, say) given from Python must be text: `run_set=["a"]` is refused as
    the option it stands for, not a TypeError from deep inside."""
    if value is not None and not isinstance(value, str):
        raise usage_error(f"{option} must be text (got {value!r})")


def check_choice(option: str, value: str | None, allowed: Iterable[str], *, required: bool = False) -> None:
    allowed = list(allowed)
    if (value is not None or required) and (not isinstance(value, str) or value not in allowed):
        raise usage_error(f"{option} must be one of {', '.join(allowed)} (got {value!r})")


def check_utf8_path(path: str | os.PathLike | None, what: str = "") -> None:
    """Refuse a path that is not valid UTF-8: DuckDB, polars and the manifest take paths as UTF-8 text."""
    if path is None:
        return
    if not is_utf8(os.fspath(path)):
        label = f"{what} {shown_path(path)}" if what else shown_path(path)
        raise LoopmeterError(f"{label}: the path is not valid UTF-8; use a UTF-8 name (rename or link it)")


def refuse_inside_warehouse(option: str, path: Path, root: Path, allowed: Callable[[Path], bool] | None = None,
                            hint: str = "write it outside the warehouse") -> None:
    """An output path inside the warehouse would overwrite what loopmeter keeps there (its tables,
    loopmeter.duckdb, its state): refused (a usage error), unless `allowed` accepts the path
    relative to the warehouse root. Symbolic links are followed, so `link/x` is caught too. A URL
    (`s3://bucket/x`, which a path option receives as `s3:/bucket/x`) is refused first: outputs are
    local files, and it would make a folder named `s3:` here."""
    if os.fspath(path) == "-":
        raise usage_error(f"{option} -: {option} names a file or folder to write, never standard output")
    if starts_as_url(os.fspath(path)):
        raise usage_error(f"{option} {without_credentials(shown_path(path))}: a URL; {option} writes local files only "
                          "(an absolute path for a local folder of that name)")
    real, real_root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    if real != real_root and real_root not in real.parents:
        return
    if allowed is not None and allowed(real.relative_to(real_root)):
        return
    where = "is the warehouse" if real == real_root else "is inside the warehouse"
    raise usage_error(f"{option} {shown_path(path)} {where} {shown_path(real_root)}, whose files only loopmeter writes; {hint}")


AGGREGATE_HINT = "inside it, documents go under its aggregate/ folder (the default); or write them outside it"


def inside_aggregate(relative: Path) -> bool:
    """Inside the warehouse, documents go under aggregate/ (the default --out) and nowhere else."""
    return relative.parts[:1] == ("aggregate",)
