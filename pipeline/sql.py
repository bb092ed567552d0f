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


def _header(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.lstrip("-").strip())
    return lines


def query_summary(name: str) -> str:
    header = _header(query_text(name))
    summary = header[0] if header else ""
    return summary[len(name) + 1 :].strip() if summary.startswith(name + ":") else summary


def runs_inside(name: str) -> str | None:
    """For a pipeline step that only runs inside a stage (on data that stage stages), which stage."""
    for line in _header(query_text(name)):
        if line.startswith("Runs inside:"):
            return line[len("Runs inside:") :].strip()
    return None


def prerequisites(name: str) -> list[str]:
    """Named queries a query reads as tables (its `Inputs:` line), in the order to build them."""
    names = {path.stem for path in queries_dir().glob("*.sql")}
    found: list[str] = []
    for line in _header(query_text(name)):
        if line.startswith("Inputs:"):
            for part in re.split(r"[,;]", line[len("Inputs:") :]):
                word = part.strip().split(" ")[0].split("(")[0].rstrip(".")
                if word in names and word != name:
                    for earlier in prerequisites(word) + [word]:
                        if earlier not in found:
                            found.append(earlier)
    return found


def list_queries() -> list[tuple[str, str]]:
    """(name, first line of the header comment) for every file in queries/."""
    return [(path.stem, query_summary(path.stem)) for path in sorted(queries_dir().glob("*.sql"))]


def run_query(connection: "duckdb.DuckDBPyConnection", name: str, **parameters: Any) -> "pl.DataFrame":
    """Run queries/<name>.sql with its $parameters (missing ones are NULL); return polars."""
    text = query_text(name)
    wanted = {key: parameters.get(key) for key in query_parameters(_strip_comments(text))}
    return connection.sql(text, params=wanted).pl()


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())
