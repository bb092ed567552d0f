"""Ad hoc SQL against the warehouse, read-only: `loopmeter sql`.

The warehouse's documented views (those of `loopmeter.duckdb`) are built in memory for each
call, in a DuckDB session that may only touch files inside the warehouse (`storage/duck.py`),
and only statements that read are run: a write is refused before it reaches DuckDB, with a
message saying what to do instead. The views of the file `loopmeter.duckdb` are never run here:
the file is for other programs, and it could have been replaced by anyone who can write the
folder.
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from ..errors import LoopmeterError, flat_message, is_interruption, one_line, shown_path
from ..storage import Warehouse, registry

if TYPE_CHECKING:
    import duckdb
    import polars as pl


def open_read_only(warehouse: Warehouse, comments: bool = True) -> "duckdb.DuckDBPyConnection":
    """The warehouse's documented views, built in memory (loopmeter.duckdb is for other programs:
    its views are never run here), in a session confined to the warehouse folder; `comments`: with
    the comments on every view and column (about 500 statements, 80 ms)."""
    from ..duckdb_module import duckdb

    from ..storage.catalog import memory_catalog

    if not warehouse.table_names():
        raise LoopmeterError(f"no tables in {shown_path(warehouse.root)}; ingest something first (or run `loopmeter demo`)")
    try:
        return memory_catalog(warehouse, comments)
    except duckdb.Error as error:
        raise LoopmeterError(f"the warehouse's views cannot be built: {flat_message(error)}") from None


def check_read_only(connection: "duckdb.DuckDBPyConnection", text: str) -> Any:
    """The one statement of `text` when it only reads (readonly.py); else refused, naming the
    first statement refused."""
    from .readonly import check_statements

    return check_statements(connection, text)


def run_sql(
    warehouse: Warehouse, text: str, parameters: dict[str, Any] | None = None, prerequisites: list[str] = (),
    optional: set[str] = frozenset(), what: str = "the SQL",
) -> "pl.DataFrame":
    """Run read-only SQL (the last statement's result) with $parameters; returns polars.

    `prerequisites` are named queries the SQL reads as tables: each is built first as a
    temporary table (temporary objects live in memory; the database stays read-only).
    Every parameter given must be one the SQL or its prerequisites take, and every one they take
    must be given, except those in `optional` (a named query's documented defaults), which are NULL."""
    from ..duckdb_module import duckdb

    from .queries import check_parameters, query_parameters, query_text

    parameters = dict(parameters or {})
    for name in warehouse.table_names():  # a table holding what is not a table file is named, never read
        warehouse.check_table(name)
    bodies = [query_text(name) for name in prerequisites]
    # a parameter's value may be the name query_table reads
    read = "\n".join([*bodies, text, *map(str, parameters.values())])
    connection = open_read_only(warehouse, comments=reads_comments(read))
    previous_directory = os.getcwd()

    def answer() -> "pl.DataFrame":
        statement = check_read_only(connection, text)
        needs = [_named_parameters(connection, body) for body in bodies] + [_named_parameters(connection, text)]
        in_order = query_parameters("\n".join(bodies + [text]))  # DuckDB's names, in the order the SQL uses them
        every = set().union(*needs)
        check_parameters(parameters, [name for name in in_order if name in every] + sorted(every - set(in_order)),
                         optional, what)
        for name, body, wanted in zip(prerequisites, bodies, needs):
            connection.execute(f'CREATE TEMP TABLE "{name}" AS {body}', {key: parameters.get(key) for key in wanted} or None)
        given = {key: parameters.get(key) for key in needs[-1]}
        relation = connection.sql(statement.query, params=given or None)
        if relation is None:  # a statement without a result (e.g. a PRAGMA that sets nothing to show)
            import polars as pl

            return pl.DataFrame()
        return _to_polars(relation)

    worker: dict[str, bool] = {}
    try:
        # relative paths in the SQL are the warehouse's; the process's directory is changed here, in the
        # calling thread, so that it is always put back after (a change made in the query's thread could
        # come after the put-back of an interrupted call)
        os.chdir(warehouse.root)
        return _interruptible(connection, answer, worker)
    except duckdb.Error as error:
        if is_interruption(error):
            raise KeyboardInterrupt from None
        if isinstance(error, duckdb.OutOfMemoryException):
            raise LoopmeterError(out_of_memory(error)) from None
        missing = _MISSING.search(str(error)) if isinstance(error, duckdb.CatalogException) else None
        if missing is not None and registry.known(missing.group(1)):
            raise LoopmeterError(f"table {missing.group(1)} is not in {shown_path(warehouse.root)} yet; "
                                 f"{what_makes(missing.group(1))}") from None
        from ..failures import explain

        # a damaged page of a table file ("Out of buffer") names no file: the file found, named
        raise LoopmeterError(explain(error, [warehouse.root], []) or flat_message(error)) from None
    finally:
        os.chdir(previous_directory)
        if not worker.get("running"):  # else the query is still being stopped, in a thread the exit ends
            connection.close()


# The names through which SQL can read a comment: DuckDB's metadata functions (duckdb_views(), ...),
# information_schema and pg_catalog (DESCRIBE, SHOW and SUMMARIZE show none), and query_table, which
# reads a table named by text made as the query runs. Any letter case: DuckDB folds unquoted and
# quoted names alike there.
_COMMENT_SOURCES = re.compile(r"duckdb_|information_schema|pg_|query_table", re.IGNORECASE)


def reads_comments(text: str) -> bool:
    """Whether SQL `text` may read the views' comments: else they are not made (the views read alike)."""
    return _COMMENT_SOURCES.search(text) is not None


_MISSING = re.compile(r"Table with name (\w+) does not exist")


def out_of_memory(error: Exception) -> str:
    """DuckDB's out-of-memory error as one line of what `sql` can do: its first line (what it failed
    to allocate, of how much), without its advice to SET threads or memory_limit, statements `sql`
    refuses (it runs reads only)."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else "Out of Memory Error"
    return (f"the query needs more memory than DuckDB may take on this machine ({first}): ask for less at once "
            "(filter or aggregate its rows, fewer columns, a LIMIT)")


def what_makes(table: str) -> str:
    """The command that stores `table`, as a hint."""
    if table == "forge_survival":
        return "run `loopmeter ingest forge STORE`, then `loopmeter harvest survival`"
    if table.startswith("forge_"):
        return "run `loopmeter ingest forge STORE` first"
    if table in ("forgeloop_confidence", "forgeloop_objectives"):
        return "run `loopmeter aggregate --confidence` first"
    if table.startswith("forgeloop_"):
        return "run `loopmeter aggregate` first"
    return "run `loopmeter ingest forgeloop RESULTS --scenarios DIR` first"


INTERRUPT_WAIT = 0.5  # seconds Ctrl-C waits for DuckDB to stop the query before the command ends anyway
# How often the main thread looks for a signal while the query runs: the process's SIGINT may be
# delivered to any of its threads (one of DuckDB's), and Python runs its handler only in the main
# thread, once that thread runs Python code again (a wait without end would never return).
SIGNAL_CHECK = 0.05


def _interruptible(connection: "duckdb.DuckDBPyConnection", work, state: dict[str, bool]) -> Any:
    """What `work()` returns, run in a thread of its own, so that Ctrl-C reaches the main
    thread at once whatever DuckDB is doing (it notices a signal only at some steps, and never while
    polars takes a result): the query is interrupted, and KeyboardInterrupt raised within
    INTERRUPT_WAIT seconds (`state["running"]`: whether the thread goes on still). Outside the main
    thread, `work()` runs as it is."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return work()
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the main thread as it is
            outcome["error"] = error
        finally:
            done.set()

    worker = threading.Thread(target=run, name="loopmeter-sql", daemon=True)
    worker.start()
    try:
        while not done.wait(SIGNAL_CHECK):  # a signal that reached another thread is answered here
            pass
    except KeyboardInterrupt:
        state["running"] = True  # until seen to end: the connection is not closed under the query
        connection.interrupt()
        state["running"] = not done.wait(INTERRUPT_WAIT)
        raise
    if "error" in outcome:
        error = outcome.pop("error")
        if is_interruption(error):  # a SIGINT DuckDB took itself
            raise KeyboardInterrupt from None
        raise error
    return outcome["value"]


def _named_parameters(connection: "duckdb.DuckDBPyConnection", text: str) -> set[str]:
    """The $names (and positions, as '1') DuckDB's parser finds in `text`."""
    return set().union(*(statement.named_parameters for statement in connection.extract_statements(text)))


# Column types polars cannot take from DuckDB as they are (INTERVAL: "could not import from
# month_day_nano_interval", and a panic when nested; UNION: no polars type), or takes wrongly
# (BIT, BIGNUM: opaque bytes; TIME WITH TIME ZONE: the offset dropped). They are shown as
# DuckDB's text of them ('3 days', '0101', ...).
AS_TEXT = {"interval", "union", "bit", "bignum", "time with time zone"}
# 128-bit integers reach polars as DECIMAL(38,0), wrong beyond 38 digits (UHUGEINT's maximum
# reads as -1): they go through text to polars' Int128 / UInt128, exactly.
WIDE_INTEGERS = {"hugeint": "Int128", "uhugeint": "UInt128"}


# Dates and times a result can hold: polars and Python's datetime take the years 1 to 9999 (DuckDB's
# infinities and its farther years would end polars in a panic).
TEMPORAL = {"date", "timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns", "timestamp with time zone"}


def _in_range(position: int, name: str) -> str:
    """The column at `position` as it is, or DuckDB's error naming it where a value lies outside the
    years 1 to 9999 (an infinity among them): one clear line instead of a panic."""
    from ..storage.names import quote_literal

    column = f"#{position}"
    message = quote_literal(f"column {one_line(name)[:100]} holds ")
    advice = quote_literal(", outside the years 1 to 9999 a result can hold; cast it in SQL, "
                           f"e.g. CAST({one_line(name)[:100]} AS VARCHAR)")
    return (f"CASE WHEN {column} IS NULL OR (isfinite({column}) AND year({column}) BETWEEN 1 AND 9999) THEN {column} "
            f"ELSE error({message} || CAST({column} AS VARCHAR) || {advice}) END")


def _type_ids(duck_type: Any) -> set[str]:
    ids = {duck_type.id}
    if duck_type.id in ("list", "array", "struct", "map", "union"):
        for _, child in duck_type.children:
            if hasattr(child, "id"):
                ids |= _type_ids(child)
    return ids


def _to_polars(relation: Any) -> "pl.DataFrame":
    """The relation's rows as polars, every column type of DuckDB taken (see AS_TEXT, WIDE_INTEGERS)."""
    expressions, wide, changed = [], {}, False
    for position, (name, duck_type) in enumerate(zip(relation.columns, relation.types), start=1):
        alias = '"' + name.replace('"', '""') + '"'
        ids = _type_ids(duck_type)
        if ids & AS_TEXT or (ids & set(WIDE_INTEGERS) and duck_type.id not in WIDE_INTEGERS):
            expressions.append(f"CAST(#{position} AS VARCHAR) AS {alias}")  # nested: the whole value as text
            changed = True
        elif duck_type.id in WIDE_INTEGERS:
            expressions.append(f"CAST(#{position} AS VARCHAR) AS {alias}")
            wide[name] = WIDE_INTEGERS[duck_type.id]
            changed = True
        elif duck_type.id in TEMPORAL:
            expressions.append(f"{_in_range(position, name)} AS {alias}")
            changed = True
        else:
            expressions.append(f"#{position} AS {alias}")
    if changed:
        relation = relation.project(", ".join(expressions))
    from ..duckdb_module import duckdb

    try:
        frame = relation.pl()
    except duckdb.Error as error:  # the query's own errors: run_sql tells them
        if not changed:
            raise
        # the statement ran inside the projection above: the line DuckDB names is of that text, not the user's
        raise type(error)(re.sub(r"\s*LINE \d+:.*", "", str(error), flags=re.DOTALL)) from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except RuntimeError as error:
        if is_interruption(error):
            raise
        _unconvertible(relation, error)
    except BaseException as error:  # noqa: BLE001 - polars panics (a BaseException) on a type it cannot take
        _unconvertible(relation, error)
    if wide:
        import polars as pl

        frame = frame.with_columns(pl.col(name).cast(getattr(pl, dtype)) for name, dtype in wide.items())
    return frame


def _unconvertible(relation: Any, error: BaseException) -> None:
    types = ", ".join(f"{name} {duck_type}" for name, duck_type in zip(relation.columns, relation.types))
    raise LoopmeterError(f"the result's column types ({types}) cannot be converted: {flat_message(error)[:200]}; "
                         "cast the column in SQL, e.g. CAST(x AS VARCHAR)") from None


