"""`check --repair`'s set-aside: damaged (or gone) tables that the command which writes them computes
again without reading them, made so that it can, since a writer cannot read past a damaged file.

- A table `aggregate` computes: emptied. Its record then names another version, so the next
  `aggregate` computes every run set.
- The months of `forge_events` holding a damaged file: left out. Their events are new again to the
  next `ingest forge` of the store, which stores them and what derives from them; the survival
  outcomes a harvest stored there are measured again by the next harvest.
- A table a report stores (the routing tables, `forge_survival`, `forgeloop_confidence` and
  `forgeloop_objectives`): computed again now from the tables it is read from, when those are whole;
  else emptied for the command that computes it. `forge_repos`: emptied, for `ingest forge`.
- A per-event Forge table (`forge_plans`, `forge_outcomes`, ...): emptied, and the events it is made
  of (by kind, as the ingest sorts them) left out of `forge_events`, so the next `ingest forge` of
  their stores finds them new and stores them in it again (the other per-event tables replace their
  rows of an event stored again, never count it twice), and the summaries after them (a damaged
  summary of such a table is emptied: that ingest computes it again).
"""
from __future__ import annotations

import os

from ..storage import Warehouse, registry
from ..storage.integrity import Problem, Report

FORGELOOP_AGGREGATES = (
    "forgeloop_mode_runs", "forgeloop_mode_stats", "forgeloop_comparisons", "forgeloop_paired_runs",
    "forgeloop_outliers", "forgeloop_outlier_fences", "forgeloop_context_inflation", "forgeloop_documents",
)
HARVEST = "harvest"  # forge_events' source of the outcomes `harvest survival` stored


def per_event_tables() -> dict[str, str]:
    """Each per-event Forge table, and which events of forge_events it is made of (SQL over its columns)."""
    from ..forge.staging import EVENT_TABLES, PLAN_TABLES

    return {**EVENT_TABLES, **{table: EVENT_TABLES["forge_plans"] for table in PLAN_TABLES}}


def set_aside(warehouse: Warehouse, report: Report, damaged: set[str], gone: set[str],
              missing: set[str] = frozenset()) -> dict[str, str]:
    """Set aside the tables of `damaged` this module knows how to (`gone`: those of them of which nothing
    was left), and the events the per-event tables of `missing` hold no row for (`gaps`). Table -> the
    line saying what was done and what to run."""
    from ..forge.derive import summary_sources

    done: dict[str, str] = {}
    with warehouse.publishing():
        if missing - damaged:
            done.update(_events_set_aside(warehouse, sorted(missing - damaged), set(), missing_only=True))
        for name in sorted(damaged & set(FORGELOOP_AGGREGATES)):
            done[name] = f"table {name}: {_emptied(warehouse, name, gone)}; `loopmeter aggregate` computes it again"
        if "forge_events" in damaged and "forge_events" not in gone:
            done.update(_months_set_aside(warehouse, report))
        done.update(_reports(warehouse, damaged, gone))
        events = sorted(damaged & set(per_event_tables()))
        if events:
            done.update(_events_set_aside(warehouse, events, gone))
            for name in sorted(damaged & set(summary_sources())):  # computed again with the events set aside
                done[name] = (f"table {name}: {_emptied(warehouse, name, gone)}; the next `loopmeter ingest forge "
                              "<store>` computes it again with the events set aside")
    return done


def _emptied(warehouse: Warehouse, name: str, gone: set[str]) -> str:
    """Table `name` written empty, with its columns (partitioned as it is declared); what the line says of it."""
    table = registry.table(name)
    warehouse.write_table(name, table.empty_frame(), partition_by=table.partition)
    return "made again, empty" if name in gone else "emptied (damaged)"


def _missing_from(warehouse: Warehouse, table: str) -> str:
    """SQL over forge_events' columns: the event's rid is not among the rids of `table`."""
    return f"rid NOT IN (SELECT rid FROM ({warehouse.select_sql(table)}) WHERE rid IS NOT NULL)"


def gaps(warehouse: Warehouse) -> list[Problem]:
    """The per-event tables (one row per event: forge_plans, forge_outcomes, ...) that hold no row for
    events forge_events holds for them (a repair that kept the events of a store not at its path, a
    file's rows lost): one line each, with the stores those events came from."""
    from ..duckdb_module import duckdb
    from ..forge.staging import EVENT_TABLES
    from ..storage import duck
    from ..storage.files import kind_of

    if not warehouse.has_table("forge_events"):
        return []
    problems = []
    connection = duck.connect(warehouse.root, lock=False)
    try:
        events = warehouse.select_sql("forge_events")
        for table, condition in EVENT_TABLES.items():
            if not warehouse.has_table(table):
                continue
            counted = connection.execute(f"SELECT source, count(*) FROM ({events}) WHERE ({condition}) AND "
                                         f"{_missing_from(warehouse, table)} GROUP BY source ORDER BY source").fetchall()
            if not counted:
                continue
            absent = [source for source, _ in counted if source != HARVEST and kind_of(source) != "file"]
            problems.append(Problem("table gap", warehouse.root / table, (
                f"table {table} holds no row for {sum(n for _, n in counted)} of the events forge_events holds for it "
                f"(from {', '.join(source for source, _ in counted)}): `loopmeter check --repair` sets them aside "
                "for their store's next `loopmeter ingest forge` (or `harvest survival`) to read again"
                + (f"; {', '.join(absent)} is not at its path: put it back first" if absent else "")), table))
    except duckdb.Error:  # a file that cannot be read: named by the checks of the table files
        return problems
    finally:
        connection.close()
    return problems


def checked(warehouse: Warehouse) -> Report:
    """`check` of the warehouse (`storage.integrity`), and the per-event tables' gaps (`gaps`)."""
    from ..storage.integrity import check

    report = check(warehouse)
    if not report.problems:  # compared once the tables are whole (a damaged one would only be named again)
        report.problems += gaps(warehouse)
    return report


ROUTING = ("forge_routing_observational", "forge_routing_randomized", "forge_routing_srm")
CONFIDENCE = ("forgeloop_confidence", "forgeloop_objectives")


def _reports(warehouse: Warehouse, damaged: set[str], gone: set[str]) -> dict[str, str]:
    """The tables a report stores, computed from other tables: computed again now when none of the tables
    they are read from is damaged too; else emptied, and the line names the command that computes them
    once those are stored again. `forge_repos` (read from the stores) emptied, for `ingest forge`."""
    from ..forge.derive import summary_sources
    from ..forge.reports import survival_document, survival_frame
    from .forge import store_routing
    from .forgeloop import store_confidence

    done: dict[str, str] = {}

    def empty(name: str, then: str) -> None:
        done[name] = f"table {name}: {_emptied(warehouse, name, gone)}; {then}"

    forge_inputs = damaged & ({"forge_events", *per_event_tables(), *summary_sources()})
    routing = sorted(damaged & set(ROUTING))
    if routing and not forge_inputs:
        store_routing(warehouse)
        done.update({name: f"table {name}: computed again from forge_tasks" for name in routing})
    for name in routing if forge_inputs else []:
        empty(name, "the next `loopmeter ingest forge <store>` computes it again")
    if "forge_survival" in damaged and not forge_inputs:
        warehouse.write_table("forge_survival", survival_frame(survival_document(warehouse)))
        done["forge_survival"] = "table forge_survival: computed again from forge_outcomes"
    elif "forge_survival" in damaged:
        empty("forge_survival", "`loopmeter harvest survival` computes it again")
    if "forge_repos" in damaged:
        empty("forge_repos", "`loopmeter ingest forge <store>` stores each store's repositories again")
    confidence = sorted(damaged & set(CONFIDENCE))
    if confidence and not damaged & {"runs", "scenarios"}:
        store_confidence(warehouse)
        done.update({name: f"table {name}: computed again from runs (`aggregate --confidence`'s defaults)"
                     for name in confidence})
    for name in confidence if damaged & {"runs", "scenarios"} else []:
        empty(name, "`loopmeter aggregate --confidence` computes it again")
    return done


def _months_set_aside(warehouse: Warehouse, report: Report) -> dict[str, str]:
    months = warehouse.partitions("forge_events", "month")
    files = {os.path.abspath(p.path) for p in report.problems if p.kind == "table file" and p.table == "forge_events"}
    drop = {month for month, folder in months.items()
            if any(os.path.dirname(file) == os.path.abspath(folder) for file in files)}
    if not drop:
        return {}
    with warehouse.build_table("forge_events", "month") as builder:
        builder.keep_others, builder.drop = True, drop
        builder.schema_frame = registry.table("forge_events").empty_frame()
    return {"forge_events": (f"table forge_events: the damaged months set aside ({', '.join(sorted(drop))}); "
                             f"{ingest_of_every_store(warehouse)} reads their events again, and "
                             "`loopmeter harvest survival` measures again any outcome it had stored there")}


def ingest_of_every_store(warehouse: Warehouse) -> str:
    """`loopmeter ingest forge` of each store the warehouse knows it read (forge_repos' and forge_events'
    sources, where readable): the command that reads events again whose store cannot be told."""
    from ..duckdb_module import duckdb
    from ..storage import duck

    stores: set[str] = set()
    connection = duck.connect(warehouse.root, lock=False)
    try:
        for table in ("forge_repos", "forge_events"):
            if warehouse.has_table(table):
                try:
                    stores |= {source for (source,) in connection.execute(
                        f"SELECT DISTINCT source FROM ({warehouse.select_sql(table)}) WHERE source IS NOT NULL").fetchall()}
                except duckdb.Error:  # a damaged file: its sources are not known
                    pass
    finally:
        connection.close()
    stores.discard(HARVEST)
    return (f"`loopmeter ingest forge` of each store ingested ({', '.join(sorted(stores))})" if stores
            else "`loopmeter ingest forge <store>` of each store ingested")


def _events_set_aside(warehouse: Warehouse, tables: list[str], gone: set[str], *,
                      missing_only: bool = False) -> dict[str, str]:
    """Leave the events the per-event `tables` are made of out of forge_events (each month holding one
    rewritten without them), and empty the tables; `missing_only`: only the events a table holds no row
    for, the table kept. The events of a store that is not at its path now are kept: forge_events may
    hold their only copy (`gaps` names the rows the table lacks until the store is back)."""
    from ..forge.derive import store_query, typed_sql
    from ..storage import duck
    from ..storage.files import kind_of
    from ..storage.names import quote_literal, quote_path

    conditions = []
    for table in tables:
        condition = f"({per_event_tables()[table]})"
        if missing_only:
            condition = f"({condition} AND {_missing_from(warehouse, table)})"
        conditions.append(condition)
    chosen = " OR ".join(conditions)
    sources: list[str] = []
    if warehouse.has_table("forge_events"):
        connection = duck.connect(warehouse.root, lock=False)
        try:
            events = warehouse.select_sql("forge_events")
            sources = [source for (source,) in connection.execute(
                f"SELECT DISTINCT source FROM ({events}) WHERE {chosen} ORDER BY source").fetchall()]
            present = [source for source in sources if source == HARVEST or kind_of(source) == "file"]
            removed = f"({chosen}) AND source IN ({', '.join(quote_literal(source) for source in present) or 'NULL'})"
            months = [month for (month,) in connection.execute(
                f"SELECT DISTINCT month FROM ({events}) WHERE {removed} ORDER BY month").fetchall()]
            for month in months:
                listed = ", ".join(quote_path(file) for file in warehouse.partition_files("forge_events", "month", [month]))
                kept = (f"SELECT *, $month AS month FROM read_parquet([{listed}], hive_partitioning = false) "
                        f"WHERE NOT ({removed})")
                store_query(connection, warehouse, "forge_events", typed_sql("forge_events", kept), partition=month,
                            params={"month": month})
        finally:
            connection.close()
    emptied = {} if missing_only else {table: _emptied(warehouse, table, gone) for table in tables}
    stores = [source for source in sources if source != HARVEST and kind_of(source) == "file"]
    absent = [source for source in sources if source != HARVEST and kind_of(source) != "file"]
    told = [f"`loopmeter ingest forge` of {', '.join(stores)} stores them again"] if stores else []
    if HARVEST in sources:
        told.append("`loopmeter harvest survival` measures again, at the horizons given it, the outcomes it had stored")
    if absent:
        told.append(f"the events of {', '.join(absent)} stay in forge_events (that store is not at its path now): "
                    "put it back, then run `loopmeter check --repair` again")
    told = "; ".join(told) or "`loopmeter ingest forge <store>` stores any of them again"

    def done(table: str) -> str:
        if missing_only:
            return f"table {table}: the events it holds no row for set aside from forge_events; {told}"
        return f"table {table}: {emptied[table]}, and the events it is made of set aside from forge_events; {told}"

    return {table: done(table) for table in tables}
