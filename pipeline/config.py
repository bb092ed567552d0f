"""Where things live: the warehouse directory and the limits users can set."""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import Exit, LoopmeterError, is_utf8, shown_path, without_credentials

ENV_WAREHOUSE = "LOOPMETER_WAREHOUSE"
PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent  # the source tree, when the package runs from one
DEFAULT_WAREHOUSE = Path("data") / "warehouse"
DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024


def warehouse_dir(option: str | os.PathLike | None = None) -> Path:
    """`--warehouse DIR`, else $LOOPMETER_WAREHOUSE, else data/warehouse (relative to the cwd).

    A path that is not valid UTF-8 or holds a `?` or a `\\`, or a file (or a path under a file) where the
    directory should be, is refused with a one-line error naming where the path came from."""
    if option is not None and not os.fspath(option):  # `--warehouse "$UNSET"`: neither here nor the default
        raise LoopmeterError("--warehouse is empty: give the warehouse's directory", Exit.USAGE)
    if option:
        given, source = os.fspath(option), "--warehouse"
    elif os.environ.get(ENV_WAREHOUSE):
        given, source = os.environ[ENV_WAREHOUSE], f"${ENV_WAREHOUSE}"
    else:
        given, source = str(DEFAULT_WAREHOUSE), "the default warehouse"
    shown = shown_path(given)
    url = _URL.match(given)
    if url is not None:
        scheme, rest = url.groups()
        supported = "the command line opens it on a mirror" if scheme.lower() == "s3" else "only s3:// is supported"
        raise LoopmeterError(
            f"{source} {without_credentials(shown_path(f'{scheme}://{rest}'))}: a warehouse at a URL ({scheme}://) is not a "
            f"local directory ({supported}: docs/scale.md); give a local directory (an absolute path for a folder of "
            "that name)", Exit.USAGE)
    if not is_utf8(given):
        raise LoopmeterError(f"{source} {shown}: the path is not valid UTF-8; rename it")
    try:
        root = Path(given).expanduser().resolve()
    except RuntimeError as error:  # `~user/...` for a user this machine does not know
        raise LoopmeterError(f"{source} {shown}: {error}") from None
    for character, why in (("?", "DuckDB takes what follows a `?` in a database's path as options"),
                           ("\\", "DuckDB takes a `\\` in a path it reads for a folder separator")):
        if character in str(root):
            where = "" if character in given else f" (it is {shown_path(root)})"
            raise LoopmeterError(f"{source} {shown}{where}: the warehouse cannot be at a path with a `{character}` in "
                                 f"it ({why}); rename the folder")
    blocking = file_in_the_way(root)
    if blocking is not None:
        what = "is a file, not a directory" if blocking == root else f": {blocking} is a file, not a directory"
        raise LoopmeterError(f"{source} {shown} {what}".replace(" :", ":"))
    return root


# a scheme (two letters or more: a drive letter is a path) and its slashes; a Path from Python code holds one slash
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/+(.*)", re.DOTALL)


def file_in_the_way(directory: Path) -> Path | None:
    """The nearest of `directory` and its parents that exists, when it is not a directory (the
    directory cannot be made there); None otherwise."""
    existing = next((place for place in (directory, *directory.parents) if place.exists()), None)
    return None if existing is None or existing.is_dir() else existing


def queries_dir() -> Path:
    """The named SQL files: the source tree's `queries/` when the package runs from its source tree
    (an editable install: users edit the queries there), else the copy installed as the package
    data `pipeline/queries/` beside this module (pip, pipx, a wheel)."""
    source = PROJECT_ROOT / "queries"
    # site-packages may hold another distribution's top-level `queries`: only the source tree has pyproject.toml
    if source.is_dir() and (PROJECT_ROOT / "pyproject.toml").is_file():
        return source
    return PACKAGE_DIR / "queries"
