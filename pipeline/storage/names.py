"""Names that come from data or from the warehouse folder, and the one way they enter SQL or a path.

A name read from a file, a table or a folder (a table or column name, a partition value, a run
set, a scenario) may have been written by anyone: a folder link named `x" AS SELECT 1; COPY ...`
or a scenario id `../../victim` are names too. Every such name is checked against its kind's
rule where it is read (`problem`, `checked`), and enters SQL only through `quote_identifier` or
`quote_literal`, and a path only through `child`: never pasted. A path DuckDB reads enters SQL
through `file_pattern` (or `quote_path`): DuckDB expands `*`, `?` and `[...]` in every path it
reads, a list of files included, so a warehouse at `/data/w[1]` must be named `/data/w[[]1]`.

Every rule is within one identifier rule: an ASCII letter or digit, then letters, digits, `_`
and `-`, at most 128 characters (no dot, slash, quote, space or control character). Each kind
narrows it: ForgeLoop's own patterns for run sets and scenarios, loopmeter's table and column
names, the partition values loopmeter writes.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import LoopmeterError, one_line

GLOB_CHARACTER = re.compile(r"[*?[]")
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
RULES = {
    "table": re.compile(r"[a-z][a-z0-9_]{0,62}"),
    "column": re.compile(r"[a-z][a-z0-9_]{0,62}"),
    "run set": re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"),  # ForgeLoop's runSetId
    "scenario": re.compile(r"[a-z0-9][a-z0-9-]{0,127}"),  # ForgeLoop's scenarioId
    "month": re.compile(r"[0-9]{4}-[0-9]{2}"),
    "name": IDENTIFIER,
}


class UnsafeName(LoopmeterError):
    """A name from data or from the folder that breaks its kind's rule."""


def problem(kind: str, value: object) -> str | None:
    """Why `value` cannot be a name of `kind` (None: it can)."""
    rule = RULES[kind]
    if not isinstance(value, str) or rule.fullmatch(value) is None:
        shown = one_line(repr(value))[:80]
        return f"{kind} name {shown} breaks the rule {rule.pattern}"
    return None


def checked(kind: str, value: object, where: str = "") -> str:
    """`value` when it is a name of `kind`; else UnsafeName, naming `where` it was found."""
    found = problem(kind, value)
    if found is not None:
        raise UnsafeName(f"{where}: {found}" if where else found)
    return value  # type: ignore[return-value]


def quote_identifier(name: str) -> str:
    """`name` as a quoted SQL identifier (DuckDB), whatever it holds."""
    if "\0" in name:
        raise UnsafeName(f"identifier {one_line(repr(name))[:80]} holds a NUL character")
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """`text` as a quoted SQL string literal (DuckDB), whatever it holds."""
    if "\0" in text:
        raise UnsafeName(f"text {one_line(repr(text))[:80]} holds a NUL character")
    return "'" + text.replace("'", "''") + "'"


def file_pattern(path: str | os.PathLike) -> str:
    """`path` as a DuckDB file pattern that matches that one path: each `*`, `?` and `[` in a
    bracket of its own (a `]` alone is plain text to DuckDB's glob)."""
    return GLOB_CHARACTER.sub(r"[\g<0>]", os.fspath(path))


def quote_path(path: str | os.PathLike) -> str:
    """`path` as a quoted SQL string literal that DuckDB reads as that one path (`file_pattern`)."""
    return quote_literal(file_pattern(path))


def child(root: Path, kind: str, name: str, suffix: str = "", where: str = "") -> Path:
    """`root / (name + suffix)`, `name` checked as a name of `kind`: one component that stays under `root`."""
    checked(kind, name, where)
    path = Path(root) / f"{name}{suffix}"
    if os.path.dirname(os.path.normpath(path)) != os.path.normpath(root):  # the rule allows no separator: belt and braces
        raise UnsafeName(f"{where}: {name!r} leaves {root}" if where else f"{name!r} leaves {root}")
    return path
