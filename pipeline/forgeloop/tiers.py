"""The runner's tier of each run set, from ForgeLoop's own summary.json beside the raw runs.

ForgeLoop's runner writes `RESULTS/aggregate/<runSetId>/summary.json` with the `--tier` it ran at;
`ingest forgeloop` reads that tier for the run sets it ingests (`run_set_tiers`), and `aggregate`
records it in the summary.json it writes when no --tier is given, as ForgeLoop does. A file that is
missing, not a regular file, larger than a summary could be, not JSON, or naming no known tier
gives no tier: the run set's summary then says null, as without the file.
"""
from __future__ import annotations

import os
from pathlib import Path

import orjson
import polars as pl

from ..storage import Warehouse
from ..storage.files import NotAFile, read_bounded
from ..storage.names import child
from .contract import TIERS
from .tables import RUN_SET_TIERS

MAX_SUMMARY_BYTES = 16 << 20


def read_tiers(results: Path, run_sets: list[str]) -> pl.DataFrame:
    """(run_set_id, tier, source_path) of the run sets whose summary.json names a tier."""
    rows = []
    for run_set in sorted(set(run_sets)):
        path = child(results / "aggregate", "run set", run_set, where=str(results / "raw")) / "summary.json"
        try:
            document = orjson.loads(read_bounded(path, MAX_SUMMARY_BYTES))
        except (OSError, NotAFile, orjson.JSONDecodeError, ValueError):
            continue
        tier = document.get("tier") if isinstance(document, dict) else None
        if isinstance(tier, str) and tier in TIERS:
            rows.append((run_set, tier, os.path.abspath(path)))
    return pl.DataFrame(rows, schema={"run_set_id": pl.String, "tier": pl.String, "source_path": pl.String}, orient="row")


def store_tiers(warehouse: Warehouse, found: pl.DataFrame, run_sets: list[str]) -> bool:
    """The rows of `run_sets` replaced by `found` (the others kept), written only when that changes
    the table; True when it was written."""
    current = warehouse.read(RUN_SET_TIERS)
    kept = None if current is None else current.filter(~pl.col("run_set_id").is_in(list(run_sets)))
    table = found if kept is None else pl.concat([kept, found.select(kept.columns).cast(kept.schema)])
    table = table.sort("run_set_id")
    if current is not None and current.sort("run_set_id").equals(table):
        return False
    warehouse.write_table(RUN_SET_TIERS, table)  # the first time even empty: the table exists once runs do
    return True


def stored_tiers(warehouse: Warehouse) -> dict[str, str]:
    """Run set -> the tier ingest read for it."""
    frame = warehouse.read(RUN_SET_TIERS, columns=["run_set_id", "tier"])
    return {} if frame is None else dict(frame.iter_rows())
