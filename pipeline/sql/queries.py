"""Named DuckDB queries from `queries/`: list them, read their header, run them into polars."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import queries_dir
from ..errors import Exit, LoopmeterError

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
    """The $names a query's SQL takes, in order of first use (comments and quoted text left out)."""
    seen: list[str] = []
    for name in _PARAMETER.findall(_code(text)):
        if name not in seen:
            seen.append(name)
    return seen


# What is not SQL code: comments, string literals ('...', $$...$$) and quoted identifiers ("...").
_NOT_CODE = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$\$.*?\$\$", re.S)


def _code(text: str) -> str:
    """`text` with its comments, string literals and quoted identifiers blanked out (a $name in them is no parameter)."""
    return _NOT_CODE.sub(" ", text)


def optional_parameters(name: str) -> set[str]:
    """The parameters a named query's header documents as optional: a `$name (...)` whose parenthesis
    says what NULL means (`$run_set (a run set id, or NULL for all)`); left out, they are NULL."""
    header = " ".join(_header(query_text(name)))
    optional = set()
    for match in re.finditer(r"\$([A-Za-z_][A-Za-z0-9_]*)\s*\(", header):
        depth, end = 1, match.end()
        while end < len(header) and depth:
            depth += {"(": 1, ")": -1}.get(header[end], 0)
            end += 1
        if re.search(r"\bnull\b", header[match.end():end], re.IGNORECASE):
            optional.add(match.group(1))
    return optional


def named_query_parameters(name: str) -> tuple[list[str], set[str]]:
    """The $names `loopmeter sql --query NAME` takes (its own and those of the queries it builds
    first, see `prerequisites`), and which of them may be left out (NULL, as its header documents)."""
    taken: list[str] = []
    uses: dict[str, list[bool]] = {}
    for query in prerequisites(name) + [name]:
        optional = optional_parameters(query)
        for parameter in query_parameters(query_text(query)):
            if parameter not in taken:
                taken.append(parameter)
            uses.setdefault(parameter, []).append(parameter in optional)
    return taken, {parameter for parameter, documented in uses.items() if all(documented)}


def check_parameters(given: dict[str, Any], taken: list[str], optional: set[str], what: str) -> None:
    """`--param`s against the $names `what` (the SQL, or query NAME) takes: a name it does not take is a
    usage error naming the ones it does; so is a $name it takes but no --param gives, unless optional."""
    for name in given:
        if name not in taken:
            takes = ", ".join(f"${parameter}" for parameter in taken) if taken else "no parameters"
            raise LoopmeterError(f"--param {name}: {what} takes no ${name}; it takes {takes}", Exit.USAGE)
    positional = [parameter for parameter in taken if parameter.isdigit()]
    if positional:
        raise LoopmeterError(f"{what} has a positional parameter (? or ${positional[0]}); --param gives named ones: "
                             "write $name in the SQL and pass --param name=VALUE", Exit.USAGE)
    missing = [parameter for parameter in taken if parameter not in given and parameter not in optional]
    if missing:
        shown = ", ".join(f"${parameter}" for parameter in missing)
        raise LoopmeterError(f"{what} uses {shown}, which no --param gives: add "
                             + " ".join(f"--param {parameter}=VALUE" for parameter in missing), Exit.USAGE)


def _header(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.lstrip("-").strip())
    return lines


# A header line that starts a section of its own (Inputs:, Output:, Runs inside:, Defines:).
_SECTION = re.compile(r"[A-Z][A-Za-z ]*:(\s|$)")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def query_summary(name: str) -> str:
    """What the query answers: the first sentence of its header, over as many lines as it takes
    (it ends at a full stop, a blank comment line or the next section, as `Inputs:`)."""
    header = _header(query_text(name))
    if not header:
        return ""
    first = header[0]
    lines = [first[len(name) + 1 :].strip() if first.startswith(name + ":") else first]
    for line in header[1:]:
        if _SENTENCE_END.search(lines[-1]) or not line or _SECTION.match(line):
            break
        lines.append(line)
    text = " ".join(lines)
    end = _SENTENCE_END.search(text)
    return text[: end.end()] if end else text


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
    """(name, what it answers: the first sentence of its header) for every file in queries/."""
    return [(path.stem, query_summary(path.stem)) for path in sorted(queries_dir().glob("*.sql"))]


def run_query(connection: "duckdb.DuckDBPyConnection", name: str, **parameters: Any) -> "pl.DataFrame":
    """Run queries/<name>.sql with its $parameters (the stages' own calls: missing ones are NULL); return polars."""
    text = query_text(name)
    wanted = {key: parameters.get(key) for key in query_parameters(text)}
    return connection.sql(text, params=wanted).pl()
