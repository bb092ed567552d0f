"""What the last `aggregate` stored, read back for the reports.

`aggregate` stores the analysis as the forgeloop_* tables and its documents, text for text, as
the rows of `forgeloop_documents`; the reports read those, never the runs. They are current when
the record the aggregate left (`incremental.py`) names the tables as they are now and every run
set's runs partition as it is now; otherwise a report says which run sets changed and that
`loopmeter aggregate` brings the tables up to date (it computes only what changed).
This module imports no DuckDB; polars only for the tables a report reads.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from ..errors import LoopmeterError, shown_path
from . import incremental
from .tables import RUNS, SCENARIOS

if TYPE_CHECKING:
    import polars as pl

    from ..storage import Warehouse

DOCUMENTS = "forgeloop_documents"
# the frames of `Analysis` a report may read, and the table `aggregate` stores each in
TABLE_OF = {"mode_runs": "forgeloop_mode_runs", "comparisons": "forgeloop_comparisons", "outliers": "forgeloop_outliers",
            "paired_runs": "forgeloop_paired_runs"}


@dataclass
class RunSetDocuments:
    """A run set's aggregate documents, computed (`aggregate.py`) or read back (here)."""
    run_set_id: str
    scenarios: dict[str, dict] = field(default_factory=dict)  # scenario id -> aggregate document
    summary: dict = field(default_factory=dict)
    unknown_scenarios: list[str] = field(default_factory=list)  # no scenario file: expectedProfile unknown


class StoredAnalysis:
    """The forgeloop_* tables a report reads, under the names `Analysis` gives their frames."""

    def __init__(self, frames: dict[str, "pl.DataFrame"]):
        self.__dict__.update(frames)


@dataclass
class StoredResult:
    """What a report needs of an aggregate: the documents and some of the analysis frames."""
    analysis: StoredAnalysis
    documents: "StoredDocuments"


def expected_profiles(warehouse: "Warehouse") -> dict[str, str]:
    """Scenario id -> expectedProfile, from the scenario files given at ingest."""
    frame = warehouse.read(SCENARIOS, columns=["scenario_id", "expected_profile"])
    return {} if frame is None else dict(frame.iter_rows())


def check_current(warehouse: "Warehouse", run_set: str | None = None) -> list[str]:
    """Refuse, in one line saying what to run, when the stored aggregate is missing or older than the
    runs (of `run_set`, or of every run set): each run set's documents carry the digest of the runs
    they were computed from (`incremental.run_set_identities`), compared with the runs stored now.
    Returns the run sets that have documents, in id order."""
    import polars as pl

    where = shown_path(warehouse.root)
    if not warehouse.has_table(RUNS):
        raise LoopmeterError(f"no runs in {where}; run `loopmeter ingest forgeloop RESULTS` first")
    partitions = warehouse.partitions(RUNS, "run_set_id")
    if run_set is not None and run_set not in partitions:
        raise LoopmeterError(f"no run set {run_set!r} in {where}")
    if not warehouse.has_table(DOCUMENTS):
        raise LoopmeterError(f"the runs in {where} are not aggregated yet; run `loopmeter aggregate` first")
    wanted = sorted(partitions) if run_set is None else [run_set]
    stored = warehouse.read(DOCUMENTS, columns=["run_set_id", "runs_digest"]).unique()
    digests = dict(stored.filter(pl.col("runs_digest").is_not_null()).iter_rows())
    identities = incremental.run_set_identities(warehouse, wanted)
    changed = [name for name in wanted if digests.get(name) != identities.get(name)]
    gone = sorted(set(stored["run_set_id"].to_list()) - set(partitions)) if run_set is None else []
    if changed or gone:
        # a runs file changed by hand (not by an ingest), or damaged, is named for what it is first:
        # its footer checked, then its pages read
        files = warehouse.partition_files(RUNS, "run_set_id", changed)
        warehouse.check_table(RUNS, files)
        if files:
            warehouse.read_files(RUNS, files, ["source_path", "content_hash"])
        names = changed + gone
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise LoopmeterError(f"the stored aggregate is older than the runs in {where} (run set{'s' if len(names) > 1 else ''} "
                             f"{shown}); run `loopmeter aggregate` (it computes only what changed)")
    return sorted(set(stored["run_set_id"].to_list()))


class StoredDocuments:
    """The documents of run sets `names` (in that order) as the last aggregate stored them, read
    `BATCH` run sets at a time as they are iterated: a report of every run set holds one batch."""

    BATCH = 64

    def __init__(self, warehouse: "Warehouse", names: list[str], profiles: dict[str, str]):
        self.warehouse, self.names, self.profiles = warehouse, names, profiles
        self.version = warehouse.table_version(DOCUMENTS)
        self.files: dict[str, list[str]] = {}
        for file in warehouse.partition_files(DOCUMENTS, "run_set_id", names):  # checked here, once
            self.files.setdefault(os.path.basename(os.path.dirname(file)).partition("=")[2], []).append(file)

    def __len__(self) -> int:
        return len(self.names)

    def _parsed(self, run_set: str, file: str, text: str) -> dict:
        """The document `file` of `run_set`: a JSON object, or one line naming it."""
        where = f"{shown_path(self.warehouse.root / DOCUMENTS)}: {run_set}/{file}"
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as error:
            raise LoopmeterError(f"{where} is not JSON ({error}); {NOT_AS_WRITTEN}") from None
        if not isinstance(value, dict):
            raise LoopmeterError(f"{where} is not a JSON object; {NOT_AS_WRITTEN}")
        return value

    def __iter__(self) -> Iterator[RunSetDocuments]:
        for start in range(0, len(self.names), self.BATCH):
            batch = self.names[start:start + self.BATCH]
            try:
                texts = self.warehouse.read_files(DOCUMENTS, [file for name in batch for file in self.files.get(name, [])])
            except FileNotFoundError:
                if self.warehouse.table_version(DOCUMENTS) == self.version:
                    raise
                # a writer published new documents and removed these: nothing of the report is printed yet
                raise LoopmeterError(f"{shown_path(self.warehouse.root)}: another loopmeter command replaced the stored "
                                     "aggregate while this report read it; run the report again") from None
            for (name,), rows in texts.partition_by("run_set_id", as_dict=True, maintain_order=True).items():
                docs = RunSetDocuments(name)
                for file, text in rows.select("file", "document").iter_rows():
                    if file == "summary.json":
                        docs.summary = self._parsed(name, file, text)
                    else:
                        docs.scenarios[file.removesuffix(".json")] = self._parsed(name, file, text)
                docs.unknown_scenarios = sorted(scenario for scenario in docs.scenarios if scenario not in self.profiles)
                yield docs


NOT_AS_WRITTEN = "run `loopmeter aggregate --full` to store the documents anew"


def not_as_written(error: Exception) -> LoopmeterError:
    """What a report says when a stored document lacks what `aggregate` writes in it (a field missing, or
    of another type): the table's rows are the warehouse's, which may be anyone's."""
    return LoopmeterError(f"table {DOCUMENTS}: a stored document is not as `aggregate` writes it "
                          f"({type(error).__name__}: {error}); {NOT_AS_WRITTEN}")


def stored_result(warehouse: "Warehouse", run_set: str | None, frames: tuple[str, ...],
                  profiles: dict[str, str]) -> StoredResult:
    """The documents of `run_set` (or of all run sets, in id order: read as they are iterated) and
    the analysis `frames` (names in `TABLE_OF`) as the last aggregate stored them; refused
    (`check_current`) when not current."""
    import polars as pl

    stored = check_current(warehouse, run_set)
    documents = StoredDocuments(warehouse, [name for name in stored if run_set is None or name == run_set], profiles)
    tables = {}
    for name in frames:
        frame = warehouse.read(TABLE_OF[name])
        tables[name] = frame if run_set is None else frame.filter(pl.col("run_set_id") == run_set)
    return StoredResult(StoredAnalysis(tables), documents)
