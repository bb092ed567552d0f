"""Ad hoc SQL against the warehouse, read-only: `loopmeter sql` and `loopmeter queries`.

The warehouse's `loopmeter.duckdb` is opened read-only, DuckDB may only touch files inside
the warehouse (`allowed_directories`, external access off, configuration locked), and only
statements that read are run: a write is refused before it reaches DuckDB, with a message
saying what to do instead.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import LoopmeterError
from .warehouse import DATABASE, Warehouse

if TYPE_CHECKING:
    import duckdb
    import polars as pl

READING = {"SELECT", "EXPLAIN", "PRAGMA", "SHOW", "DESCRIBE", "SUMMARIZE", "CALL"}
FORMATS = ("table", "csv", "json", "parquet")


def open_read_only(warehouse: Warehouse) -> "duckdb.DuckDBPyConnection":
    """The warehouse database, read-only, confined to the warehouse folder."""
    import duckdb

    database = warehouse.root / DATABASE
    if not database.exists():
        raise LoopmeterError(f"no {DATABASE} in {warehouse.root}; ingest something first (or run `loopmeter demo`)")
    connection = duckdb.connect(str(database), read_only=True)
    root = str(warehouse.root.resolve())
    quoted = root.replace("'", "''")
    # The views read `<table>/**/*.parquet` relative to the current directory, which run_sql
    # makes the warehouse. (Not file_search_path: with it, DuckDB let '../..' escape the
    # allowed directory in a test; relative to the current directory it resolves, then checks.)
    connection.execute(f"SET allowed_directories = ['{quoted}/']")
    connection.execute("SET enable_external_access = false")
    connection.execute("SET lock_configuration = true")
    return connection


def _kind(statement: Any) -> str:
    return str(statement.type).rsplit(".", 1)[-1].upper()


def check_read_only(connection: "duckdb.DuckDBPyConnection", text: str) -> None:
    """Refuse anything but reading statements, naming the first one refused."""
    import duckdb

    try:
        statements = connection.extract_statements(text)
    except duckdb.Error as error:
        raise LoopmeterError(f"SQL does not parse: {_one_line(error)}") from None
    if not statements:
        raise LoopmeterError("no SQL statement given")
    for statement in statements:
        kind = _kind(statement)
        if kind not in READING:
            raise LoopmeterError(
                f"loopmeter sql is read-only: a {kind} statement is refused "
                "(to save a result, use --format csv|json|parquet --out FILE)"
            )


def run_sql(
    warehouse: Warehouse, text: str, parameters: dict[str, Any] | None = None, prerequisites: list[str] = ()
) -> "pl.DataFrame":
    """Run read-only SQL (the last statement's result) with $parameters; returns polars.

    `prerequisites` are named queries the SQL reads as tables: each is built first as a
    temporary table (temporary objects live in memory; the database stays read-only)."""
    import duckdb

    connection = open_read_only(warehouse)
    previous_directory = os.getcwd()
    try:
        os.chdir(warehouse.root)
        check_read_only(connection, text)
        for name in prerequisites:
            from .sql import query_text

            body = query_text(name)
            wanted = set(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", body))
            given = {key: (parameters or {}).get(key) for key in wanted}
            connection.execute(f'CREATE TEMP TABLE "{name}" AS {body}', given or None)
        statements = connection.extract_statements(text)
        for statement in statements[:-1]:
            connection.execute(statement)
        last = statements[-1]
        wanted = set(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", last.query))
        given = {key: value for key, value in (parameters or {}).items() if key in wanted}
        given.update({key: None for key in wanted if key not in given})
        return connection.sql(last.query, params=given or None).pl()
    except duckdb.Error as error:
        raise LoopmeterError(_one_line(error)) from None
    finally:
        os.chdir(previous_directory)
        connection.close()


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def write_result(frame: "pl.DataFrame", output_format: str, out: Path | None) -> str | None:
    """Render `frame` as csv/json text (returned when `out` is None) or write it to `out`."""
    import orjson
    import polars as pl

    if output_format not in FORMATS:
        raise LoopmeterError(f"--format must be one of {', '.join(FORMATS)}")
    if output_format == "parquet":
        if out is None:
            raise LoopmeterError("--format parquet needs --out FILE")
        frame.write_parquet(out)
        return None
    if output_format == "csv":
        nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
        flat = frame.with_columns(  # CSV has no lists: a list or struct cell is written as its JSON text
            pl.Series(name, [None if v is None else orjson.dumps(v).decode() for v in frame[name].to_list()], dtype=pl.String)
            for name in nested
        )
        text = flat.write_csv()
    elif output_format == "json":
        text = orjson.dumps(frame.to_dicts(), option=orjson.OPT_NAIVE_UTC | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
    else:
        raise LoopmeterError("--format table prints to the terminal; use csv, json or parquet with --out")
    if out is None:
        return text
    Path(out).write_text(text, encoding="utf-8")
    return None


def parse_parameters(pairs: list[str]) -> dict[str, Any]:
    """`--param name=value` pairs; values stay text (cast in SQL where needed)."""
    parameters = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise LoopmeterError(f"--param takes name=value (got {pair!r})")
        parameters[name] = value
    return parameters
