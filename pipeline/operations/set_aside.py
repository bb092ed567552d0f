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
from ..storage.integrity import Report

FORGELOOP_AGGREGATES = (
    "forgeloop_mode_runs", "forgeloop_mode_stats", "forgeloop_comparisons", "forgeloop_paired_runs",
    "forgeloop_outliers", "forgeloop_outlier_fences", "forgeloop_context_inflation", "forgeloop_documents",
)
HARVEST = "harvest"  # forge_events' source of the outcomes `harvest survival` stored


def per_event_tables() -> dict[str, str]:
    """Each per-event Forge table, and which events of forge_events it is made of (SQL over its columns)."""
    from ..forge.staging import EVENT_TABLES, PLAN_TABLES

    return {**EVENT_TABLES, **{table: EVENT_TABLES["forge_plans"] for table in PLAN_TABLES}}


def set_aside(warehouse: Warehouse, report: Report, damaged: set[str], gone: set[str]) -> dict[str, str]:
    """Set aside the tables of `damaged` this module knows how to (`gone`: those of them of which nothing
    was left). Table -> the line saying what was done and what to run."""
    done: dict[str, str] = {}
    with warehouse.publishing():
        for name in sorted(damaged & set(FORGELOOP_AGGREGATES)):
            warehouse.write_table(name, registry.table(name).empty_frame(), partition_by=registry.table(name).partition)
            done[name] = (f"table {name}: {'made again, empty' if name in gone else 'emptied (damaged)'}; "
                          "`loopmeter aggregate` computes it again")
        if "forge_events" in damaged and "forge_events" not in gone:
            done.update(_months_set_aside(warehouse, report))
        done.update(_reports(warehouse, damaged, gone))
        events = sorted(damaged & set(per_event_tables()))
        if events:
            done.update(_events_set_aside(warehouse, events, gone))
            for name in sorted(damaged & set(_summaries())):  # computed again with the events set aside
                warehouse.write_table(name, registry.table(name).empty_frame())
                done[name] = (f"table {name}: {'made again, empty' if name in gone else 'emptied (damaged)'}; the next "
                              "`loopmeter ingest forge <store>` computes it again with the events set aside")
    return done


ROUTING = ("forge_routing_observational", "forge_routing_randomized", "forge_routing_srm")
CONFIDENCE = ("forgeloop_confidence", "forgeloop_objectives")


def _reports(warehouse: Warehouse, damaged: set[str], gone: set[str]) -> dict[str, str]:
    """The tables a report stores, computed from other tables: computed again now when none of the tables
    they are read from is damaged too; else emptied, and the line names the command that computes them
    once those are stored again. `forge_repos` (read from the stores) emptied, for `ingest forge`."""
    from ..forge.reports import survival_document, survival_frame
    from .forge import store_routing
    from .forgeloop import store_confidence

    done: dict[str, str] = {}

    def empty(name: str, then: str) -> None:
        warehouse.write_table(name, registry.table(name).empty_frame())
        done[name] = f"table {name}: {'made again, empty' if name in gone else 'emptied (damaged)'}; {then}"

    forge_inputs = damaged & ({"forge_events", *per_event_tables(), *_summaries()})
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


def _summaries() -> list[str]:
    from ..forge.derive import SUMMARIES

    return [table for table, _, _ in SUMMARIES]


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
                             "`loopmeter ingest forge <store>` reads their events again, and "
                             "`loopmeter harvest survival` measures again any outcome it had stored there")}


def _events_set_aside(warehouse: Warehouse, tables: list[str], gone: set[str]) -> dict[str, str]:
    """Empty each per-event table of `tables`, and leave the events they are made of out of forge_events
    (every month of it rewritten without them)."""
    from ..forge.derive import store_query, typed_sql
    from ..storage import duck
    from ..storage.names import quote_path

    chosen = " OR ".join(sorted({f"({per_event_tables()[table]})" for table in tables}))
    sources: list[str] = []
    if warehouse.has_table("forge_events"):
        connection = duck.connect(warehouse.root, lock=False)
        try:
            months = warehouse.partitions("forge_events", "month")
            for month in sorted(months):
                listed = ", ".join(quote_path(file) for file in warehouse.partition_files("forge_events", "month", [month]))
                if not listed:
                    continue
                stored = f"read_parquet([{listed}], hive_partitioning = false)"
                sources += [source for (source,) in connection.execute(
                    f"SELECT DISTINCT source FROM {stored} WHERE {chosen}").fetchall() if source not in sources]
                kept = f"SELECT *, $month AS month FROM {stored} WHERE NOT ({chosen})"
                store_query(connection, warehouse, "forge_events", typed_sql("forge_events", kept), partition=month,
                            params={"month": month})
        finally:
            connection.close()
    for table in tables:
        warehouse.write_table(table, registry.table(table).empty_frame())
    stores = sorted(str(source) for source in sources if source != HARVEST)
    told = [f"`loopmeter ingest forge` of {', '.join(stores)} stores them again"] if stores else []
    if HARVEST in sources:
        told.append("`loopmeter harvest survival` measures again, at the horizons given it, the outcomes it had stored")
    told = "; ".join(told) or "`loopmeter ingest forge <store>` stores any of them again"
    return {table: (f"table {table}: {'made again, empty' if table in gone else 'emptied (damaged)'}, and the events it "
                    f"is made of set aside from forge_events; {told}") for table in tables}
