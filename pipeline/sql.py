"""Named DuckDB queries from `queries/`: list them, read their header, run them into polars."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import queries_dir
from .errors import LoopmeterError

if TYPE_CHECKING:
    import duckdb
    import polars as pl

_PARAMETER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def query_path(name: str) -> Path:
    path = queries_dir() / f"{name}.sql"
    if not path.is_file():
        raise LoopmeterError(f"no query named {name!r} in {queries_dir()} (see `loopmeter queries`)")
    return path


def query_text(name: str) -> str:
    return query_path(name).read_text(encoding="utf-8")


def query_parameters(text: str) -> list[str]:
    """The $names a query takes, in order of first use (comments included)."""
    seen: list[str] = []
    for name in _PARAMETER.findall(text):
        if name not in seen:
            seen.append(name)
    return seen


def list_queries() -> list[tuple[str, str]]:
    """(name, first line of the header comment) for every file in queries/."""
    result = []
    for path in sorted(queries_dir().glob("*.sql")):
        first = path.read_text(encoding="utf-8").splitlines()[0] if path.stat().st_size else ""
        summary = first.lstrip("-").strip()
        if summary.startswith(path.stem + ":"):
            summary = summary[len(path.stem) + 1 :].strip()
        result.append((path.stem, summary))
    return result


def run_query(connection: "duckdb.DuckDBPyConnection", name: str, **parameters: Any) -> "pl.DataFrame":
    """Run queries/<name>.sql with its $parameters (missing ones are NULL); return polars."""
    text = query_text(name)
    wanted = {key: parameters.get(key) for key in query_parameters(_strip_comments(text))}
    return connection.sql(text, params=wanted).pl()


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())
