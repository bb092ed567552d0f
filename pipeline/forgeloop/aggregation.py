"""The `aggregate` of the ForgeLoop runs: analyse the warehouse's runs, write ForgeLoop's documents, store the tables."""
from __future__ import annotations

import os
from collections.abc import Collection
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from .. import collector
from ..config import file_in_the_way
from ..engines import Engine
from ..errors import LoopmeterError, shown_path
from ..jsjson import dumps_bytes
from ..storage import Warehouse, folders, registry
from ..storage.names import child
from . import buckets, incremental
from .aggregate import RunSetDocuments
from .analysis import Analysis
from .contract import TIERS
from .stored import DOCUMENTS, expected_profiles
from .tiers import stored_tiers
from .tables import RUNS


@dataclass
class Aggregated:
    analysis: Analysis | None  # None when nothing had to be computed
    documents: list[RunSetDocuments]  # of the run sets computed (from `aggregate`: summaries and scenario names)
    written: list[Path] = field(default_factory=list)
    tier: str | dict[str, str] | None = None  # recorded in summary.json: one for all run sets, or per run set
    profiles: dict[str, str] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)  # run set -> identity of its runs, where known
    plan: incremental.Plan | None = None  # set by `aggregate`
    destination: Path | None = None  # where `aggregate` wrote the documents

    def unknown_scenarios_note(self) -> str | None:
        """What to tell about the scenarios computed without a scenario file, if any."""
        unknown = sorted({scenario for documents in self.documents for scenario in documents.unknown_scenarios})
        if not unknown:
            return None
        return f"note: no scenario file for {', '.join(unknown)}: expectedProfile unknown, lightObjectives null"

    def as_dict(self) -> dict:
        run_sets = [{"runSetId": docs.run_set_id, **incremental.facts(docs), "recomputed": True} for docs in self.documents]
        kept = self.plan.kept if self.plan else {}
        run_sets += [{"runSetId": run_set, **entry["facts"], "recomputed": False} for run_set, entry in kept.items()]
        for entry in run_sets:
            entry.pop("runCount")
        return {
            "runSets": sorted(run_sets, key=lambda entry: entry["runSetId"]),
            "removed": self.plan.removed if self.plan else [],
            "written": [str(path) for path in self.written],
        }


def require_runs(warehouse: Warehouse, tier: str | None = None) -> None:
    """The errors an aggregate can tell before it starts."""
    if not warehouse.has_table(RUNS):
        raise buckets.no_runs(warehouse)
    if tier is not None and tier not in TIERS:
        raise LoopmeterError(f"--tier must be one of {', '.join(TIERS)} (got {tier!r})")


def compute(warehouse: Warehouse, run_set: str | None = None, tier: str | None = None,
            run_sets: Collection[str] | None = None, profiles: dict[str, str] | None = None,
            rendered: bool = False, engine: Engine = Engine()) -> Aggregated:
    """Analyse the runs (of one run set, of `run_sets`, or all) and assemble ForgeLoop's documents
    (`rendered`: documents only to be written, see `iter_documents`), bucket by bucket of whole
    run sets (`buckets.py`), by `engine`."""
    require_runs(warehouse, tier)
    recorded = tier if tier is not None else stored_tiers(warehouse)
    identities = incremental.run_set_identities(warehouse) if run_set is None and run_sets is None else {}
    stored = warehouse.partitions(RUNS, "run_set_id")
    wanted = [run_set] if run_set is not None else sorted(run_sets) if run_sets is not None else sorted(stored)
    if run_set is not None and run_set not in stored:
        raise LoopmeterError(f"no run set {run_set!r} in {warehouse.root}")
    profiles = expected_profiles(warehouse) if profiles is None else profiles
    parts = list(buckets.compute(warehouse, wanted, profiles, recorded, rendered, engine))
    if not parts:
        raise buckets.no_runs(warehouse)
    analysis = buckets.merge([part.analysis for part in parts])
    documents = [documents for part in parts for documents in part.documents]
    return Aggregated(analysis, documents, tier=tier, profiles=profiles, identities=identities)


def aggregate(warehouse: Warehouse, out: Path, tier: str | None = None, full: bool = False,
              run_set: str | None = None, engine: Engine = Engine()) -> Aggregated:
    """The `aggregate` of all run sets into `out`: only the run sets that changed since the last one
    (see `incremental.py`), or all with `full`; with `run_set`, that run set only (the others keep
    what the last aggregate recorded for them). `engine` computes the buckets of run sets
    (`buckets.py`). The caller holds the lock."""
    with collector.paused():  # the documents are many small objects and no cycles
        require_runs(warehouse, tier)
        check_out(out, (), warehouse)
        profiles = expected_profiles(warehouse)
        tier = tier if tier is not None else stored_tiers(warehouse) or None  # --tier, else each run set's runner's
        plan = incremental.Plan(full=True) if full else incremental.plan(warehouse, out, tier, profiles)
        result = Aggregated(None, [], tier=tier, profiles=profiles)
        if run_set is not None:
            if run_set not in warehouse.partitions(RUNS, "run_set_id"):
                raise LoopmeterError(f"no run set {run_set!r} in {shown_path(warehouse.root)}")
            identities = plan.identities or incremental.run_set_identities(warehouse)
            plan = incremental.Plan(full=False, changed=[run_set], identities=identities,
                                    kept={name: entry for name, entry in plan.kept.items() if name != run_set})
            result.identities = identities
            _write(warehouse, result, out, [run_set], {run_set}, engine)
        elif plan.full:
            result.identities = incremental.run_set_identities(warehouse)
            plan.changed, plan.identities = sorted(result.identities), result.identities
            _write(warehouse, result, out, plan.changed, None, engine)
        elif plan.changed or plan.removed:
            result.identities = plan.identities
            _write(warehouse, result, out, plan.changed, {*plan.changed, *plan.removed}, engine)
        if plan.full or plan.changed or plan.removed:
            incremental.record(warehouse, out, tier, profiles, result.documents, plan.kept, plan.identities)
    result.plan, result.destination = plan, Path(out)
    return result


def _write(warehouse: Warehouse, result: Aggregated, out: Path, computed: list[str], replace: Collection[str] | None,
           engine: Engine) -> None:
    """The run sets `computed` (in buckets, by `engine`) and their documents written under `out`, and
    the tables: with `replace`, those run sets' rows replaced and the other run sets' kept, else the
    tables made of the computed rows alone; all published together, once `check_out` finds nothing in
    their way. A bucket's rows and documents are written as it comes, so memory holds one bucket."""
    check_out(out, {*computed, *(replace or ())}, warehouse)
    digests = {name: result.identities[name] for name in computed if name in result.identities}
    missing = [name for name in computed if name not in digests]
    if missing:
        digests |= incremental.run_set_identities(warehouse, missing)
    out = Path(out)
    made = not os.path.lexists(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        _compute_and_publish(warehouse, result, out, computed, replace, engine, digests)
    except BaseException:  # a folder this aggregate made and left empty goes with it
        if made:
            with suppress(OSError):
                out.rmdir()
        raise


def _compute_and_publish(warehouse: Warehouse, result: Aggregated, out: Path, computed: list[str],
                         replace: Collection[str] | None, engine: Engine, digests: dict) -> None:
    folders.collect_leftovers(out)
    staged: list[folders.Staged] = []
    with warehouse.publishing(), ExitStack() as stack:
        tables = {name: stack.enter_context(warehouse.build_table(name)) for name in _TABLE_FRAMES}
        documents = stack.enter_context(warehouse.build_table(DOCUMENTS, "run_set_id"))
        documents.keep_others, documents.drop = replace is not None, set(replace or ())
        try:
            held: dict = {}  # table -> its files and the run sets each holds, read once
            for kept, run_sets in _segments(warehouse, computed, replace):
                if kept:
                    _keep_rows(warehouse, tables, run_sets, held)
                    continue
                for part in buckets.compute(warehouse, run_sets, result.profiles, result.tier, True, engine):
                    for name, builder in tables.items():
                        _write_rows(builder, _TABLE_FRAMES[name](part.analysis).sort("run_set_id", maintain_order=True))
                    staged += write_documents(result, part.documents, out, documents, digests)
        except BaseException:  # what was staged goes (after a Ctrl-C, what is staged still: the next aggregate)
            for entry in staged:
                folders.discard(entry)
            raise
        for name, builder in tables.items():  # a table without rows still has its columns
            builder.schema_frame = registry.table(name).empty_frame()
        documents.schema_frame = registry.table(DOCUMENTS).empty_frame()
        for entry in staged:
            warehouse.publish_folder(entry)


def _segments(warehouse: Warehouse, computed: list[str], replace: Collection[str] | None) -> list[tuple[bool, list[str]]]:
    """The run sets of the new tables in id order, in runs of (kept, run sets): those computed now
    (kept False) and, with `replace`, those of the current tables not replaced (kept True). Written
    in this order, the tables hold the rows in the order one computation of them all gives."""
    kept: set[str] = set()
    if replace is not None:
        current = warehouse.read("forgeloop_mode_runs", ["run_set_id"])
        kept = set() if current is None else set(current.get_column("run_set_id").unique().to_list()) - set(replace)
    segments: list[tuple[bool, list[str]]] = []
    for run_set in sorted({*computed, *kept}):
        is_kept = run_set in kept
        if segments and segments[-1][0] == is_kept:
            segments[-1][1].append(run_set)
        else:
            segments.append((is_kept, [run_set]))
    return segments


def _keep_rows(warehouse: Warehouse, tables: dict, run_sets: list[str], held: dict) -> None:
    """The current tables' rows of `run_sets`, as they are, into the tables being built, file by file
    in the tables' order (their rows lie in run set order): a file holding rows of these run sets only
    is taken whole (hard-linked: adding a run set does not rewrite what is kept), one holding others
    too is read and its rows of these run sets written. `held`: what `_held` found, by table."""
    wanted = set(run_sets)
    for name, builder in tables.items():
        if name not in held:
            held[name] = _held(warehouse, name)
        for file, in_file in held[name]:
            if not in_file & wanted:
                continue
            if in_file <= wanted:
                builder.link_part(Path(file))
            else:
                _write_rows(builder, warehouse.read_files(name, [file]).filter(pl.col("run_set_id").is_in(run_sets)))


def _held(warehouse: Warehouse, name: str) -> list[tuple[str, set[str]]]:
    """Each (checked) file of table `name`, in order, with the run sets it holds: one read of the
    column for every file at once."""
    if not warehouse.has_table(name):
        return []
    files = warehouse.table_file_list(name)
    found: dict[str, set[str]] = {file: set() for file in files}
    if files:
        pairs = pl.scan_parquet(files, include_file_paths="file", hive_partitioning=False, glob=False).select(
            "file", "run_set_id").unique().collect()
        for file, run_set in pairs.iter_rows():
            found[file].add(run_set)  # a path not given here would be a KeyError, never a file passed over
    return list(found.items())


def _write_rows(builder, frame: pl.DataFrame) -> None:
    if frame.height:
        builder.write_part(frame)


def check_out(out: Path, run_sets: Collection[str], warehouse: Warehouse | None = None) -> None:
    """What would stop the documents from being written under `out`, told before anything is (the
    tables, written beside them, would otherwise tell another story than the documents). Inside the
    warehouse (its aggregate/ folder), no folder on the way may be a symbolic link: the folder is
    input too, and documents are never written, nor old ones removed, through a link there."""
    out = Path(out)
    if warehouse is not None:
        root, place = os.path.abspath(warehouse.root), os.path.abspath(out)
        if os.path.commonpath([root, place]) == root:
            step = Path(root)
            for part in Path(os.path.relpath(place, root)).parts:
                step = step / part
                if os.path.islink(step):
                    raise LoopmeterError(f"{shown_path(step)} is a symbolic link; loopmeter writes the documents in a "
                                         "folder of the warehouse, never through a link: remove it (what it points to is "
                                         "not touched)")
    blocking = file_in_the_way(out)
    if blocking is not None:
        raise LoopmeterError(f"--out {out}: {blocking} is not a directory")
    if out.is_dir():
        for run_set in sorted(run_sets):
            place = child(out, "run set", run_set, where="the runs table")
            if os.path.lexists(place) and (place.is_symlink() or not place.is_dir()):
                raise LoopmeterError(f"--out {shown_path(out)}: {shown_path(place)} is not a folder (a file, or a symbolic "
                                     f"link: never written through); the documents of run set {run_set} go there")


def write_documents(result: Aggregated, computed: list[RunSetDocuments], out: Path, table,
                    digests: dict[str, str]) -> list[folders.Staged]:
    """`out/<runSetId>/<scenarioId>.json` and `summary.json` of the run sets `computed`, staged, and
    the same texts as the rows of the forgeloop_documents table being built (`table`, partitioned by
    run set), which the reports read, each with the digest of the runs it was computed from
    (`digests`: run set -> digest). Returns the folders staged, which the caller publishes with the
    tables (`folders.py`): after an interruption the documents are all old or all new. A file that
    holds its document's text already stays as it is (its modification time too); a folder where
    nothing changed is not touched. `result` keeps what it tells of each run set (its summary and
    its scenarios' names), not the documents."""
    staged: list[folders.Staged] = []
    rows: list[pl.DataFrame] = []
    try:
        for docs in computed:
            directory = child(out, "run set", docs.run_set_id, where="the runs table")
            texts = {child(directory, "scenario", scenario, ".json", where="the runs table").name:
                     dumps_bytes(document, 2) + b"\n" for scenario, document in docs.scenarios.items()}
            texts["summary.json"] = dumps_bytes(docs.summary, 2) + b"\n"
            rows.append(pl.DataFrame({"run_set_id": [docs.run_set_id] * len(texts), "file": list(texts),
                                      "document": [text.decode() for text in texts.values()],
                                      "runs_digest": [digests.get(docs.run_set_id)] * len(texts)},
                                     schema_overrides={"runs_digest": pl.String}))
            entry = _stage(directory, texts)
            if entry is not None:
                staged.append(entry)
            result.written.extend(directory / name for name in texts)
            result.documents.append(RunSetDocuments(docs.run_set_id, dict.fromkeys(docs.scenarios), docs.summary,
                                                    docs.unknown_scenarios))
        if rows:  # one write per bucket: its partitions are written on every core
            table.write(pl.concat(rows))
    except BaseException:
        for entry in staged:
            folders.discard(entry)
        raise
    return staged


def _stage(directory: Path, texts: dict[str, bytes]) -> folders.Staged | None:
    try:
        return folders.stage(directory, texts)
    except OSError as error:
        raise LoopmeterError(f"--out {directory.parent}: the documents of run set {directory.name} cannot be written "
                             f"({error.strerror}: {error.filename})") from None


_TABLE_FRAMES = {
    "forgeloop_mode_runs": lambda a: a.mode_runs,
    "forgeloop_mode_stats": lambda a: a.mode_stats.rename({"outlierCount": "outlier_count"}),
    "forgeloop_comparisons": lambda a: a.comparisons,
    "forgeloop_paired_runs": lambda a: a.paired_runs,
    "forgeloop_outliers": lambda a: a.outliers,
    "forgeloop_outlier_fences": lambda a: a.outlier_modes,
    "forgeloop_context_inflation": lambda a: a.inflation,
}
