"""The warehouse itself: read-only SQL on it, its DuckDB catalog, its schema, whether it is whole."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LoopmeterError, is_utf8, shown_path, usage_error
from ..storage import Warehouse
from .checks import check_utf8_path, refuse_inside_warehouse
from .common import open_warehouse, watch, writing

if TYPE_CHECKING:
    import polars as pl


@dataclass
class Answer:
    """What `sql` answered: its rows, and the format they go out in (and where, with `out`)."""
    frame: "pl.DataFrame"
    output_format: str
    out: Path | None


def sql(text: str | None = None, *, file: str | os.PathLike | None = None, query: str | None = None,
        params: dict[str, Any] | None = None, output_format: str | None = None, out: str | os.PathLike | None = None,
        warehouse: str | os.PathLike | Warehouse | None = None) -> Answer:
    """Run one read-only statement (SQL `text`, the SQL of `file`, or the named query `query`) on the
    warehouse's views, its $names from `params`; with `out`, the result written to that file in the
    format its name (or `output_format`) says."""
    from ..sql.output import output_format_of, read_sql_file, write_result
    from ..sql.queries import check_parameters, named_query_parameters, prerequisites, query_text, runs_inside
    from ..sql.run import run_sql
    from ..storage.files import check_output

    given = [value for value in (text, file, query) if value is not None]
    if len(given) != 1:
        raise usage_error("give exactly one of: SQL text, --file F, --query NAME")
    if out is not None and os.fspath(out) == "-":
        raise usage_error("--out -: the result is printed when --out is not given (with --format for its form)")
    for value in (text, *(params or {}).values()):
        if isinstance(value, str) and not is_utf8(value):
            raise usage_error("the SQL and its --param values must be UTF-8 text (an argument holds bytes that are not)")
    out = None if out is None else Path(out)
    chosen = output_format_of(output_format, out)
    parameters = dict(params or {})
    optional: set[str] = set()
    if query is not None:  # a named query's parameters are known before anything opens
        text = query_text(query)
        stage = runs_inside(query)
        if stage:
            raise LoopmeterError(f"{query} is a step of a stage, not a query of the warehouse: it runs inside {stage}")
        taken, optional = named_query_parameters(query)
        check_parameters(parameters, taken, optional, f"query {query}")
    store = open_warehouse(warehouse)
    if out is not None:
        check_utf8_path(out, "--out")
        refuse_inside_warehouse("--out", out, store.root)  # before any SQL runs: nothing there is touched
        check_output(out)
    if file is not None:
        text = read_sql_file(Path(file))
    frame = run_sql(store, text, parameters, prerequisites(query) if query else [], optional,
                    f"query {query}" if query else "the SQL")
    if out is not None:
        write_result(frame, chosen, out)
    return Answer(frame, chosen, out)


def catalog(*, warehouse: str | os.PathLike | Warehouse | None = None, wait: bool = False) -> dict:
    """Rebuild loopmeter.duckdb now, under the writer lock: what was built."""
    from ..config import warehouse_dir
    from ..storage.catalog import STATE, STORAGE_VERSION, refresh_catalog, viewable
    from ..storage.remote import is_mirror

    store = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse_dir(warehouse))
    watch(store.root)
    if is_mirror(store.root):
        raise LoopmeterError(f"{shown_path(store.root)}: a warehouse on object storage keeps no loopmeter.duckdb (BI "
                             "tools read its objects through their own engine: docs/scale.md); `loopmeter sql` reads it")
    if not store.table_names():
        raise LoopmeterError(f"no tables in {store.root}; ingest something first (or run `loopmeter demo`)")
    with writing(store, wait=wait, command="catalog"):
        refresh_catalog(store)  # built anew even when it is the one built: `catalog` is how a user asks for that
    built = store.state.read(STATE) or {}
    return {"database": str(store.root / "loopmeter.duckdb"), "views": len(built.get("tables", viewable(store))),
            "root": built.get("root"), "storageVersion": STORAGE_VERSION}


def schema(*, warehouse: str | os.PathLike | Warehouse | None = None) -> list[dict]:
    """Every table and column of the warehouse with its SQL type and meaning."""
    from ..storage.documentation import schema_rows

    return schema_rows(open_warehouse(warehouse))


def check(*, warehouse: str | os.PathLike | Warehouse | None = None, repair: bool = False, wait: bool = False):
    """Everything wrong with the warehouse, found without changing anything (the warehouse as it is:
    opened without being mended first); with `repair`, what can be rebuilt is (waiting for another
    writer's lock with `wait`, else leaving with WarehouseBusy), and the warehouse is checked again.
    Returns (the problems found first, the report: what is left, what was repaired)."""
    from ..config import warehouse_dir
    from .repair import repair as repair_warehouse
    from .set_aside import checked as check_warehouse

    store = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse_dir(warehouse))
    if store.root.is_dir() and not store.is_marked() and not (store.root / ".versions").is_dir():
        store.require_marked()  # a folder that is not a warehouse (one of an earlier loopmeter is checked)
    report = check_warehouse(store)
    found = list(report.problems)
    if repair and found:
        watch(store.root)
        try:
            repair_warehouse(store, report, wait=wait)
        except KeyboardInterrupt as interruption:
            interruption.repaired = list(report.repaired)  # what was done, with what to run next, told even so
            raise
    return found, report
