"""Where things live: the warehouse directory and the limits users can set."""
from __future__ import annotations

import os
from pathlib import Path

ENV_WAREHOUSE = "LOOPMETER_WAREHOUSE"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WAREHOUSE = Path("data") / "warehouse"
DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024


def warehouse_dir(option: str | os.PathLike | None = None) -> Path:
    """`--warehouse DIR`, else $LOOPMETER_WAREHOUSE, else data/warehouse (relative to the cwd)."""
    if option:
        return Path(option).expanduser().resolve()
    env = os.environ.get(ENV_WAREHOUSE)
    if env:
        return Path(env).expanduser().resolve()
    return DEFAULT_WAREHOUSE.resolve()


def queries_dir() -> Path:
    """The named SQL files: the source tree's `queries/`, or the installed copy."""
    source = PROJECT_ROOT / "queries"
    if source.is_dir():
        return source
    from importlib.resources import files

    return Path(str(files("pipeline.queries")))
