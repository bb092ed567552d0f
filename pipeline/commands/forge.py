"""Forge commands: `ingest forge`, `report routing`, `report srm`, `harvest survival`, `report survival`."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..cli import harvest_app, ingest_app, report_app
from ..errors import Exit, LoopmeterError
from .common import (
    SHOWN_REJECTIONS, JsonOption, QuietOption, WaitOption, WarehouseOption, check_number, check_utf8_path, command, note,
    open_warehouse, print_rejections, set_quiet, store_report_tables, usage_error, write_stdout,
)
from .helptext import command_help

MAX_HORIZON_DAYS = 100_000  # about 270 years: a horizon beyond the calendar --now can name is always pending
RepoOption = Annotated[Optional[Path], typer.Option("--repo", help="Only this repository (its path).", show_default=False)]
SinceOption = Annotated[Optional[float], typer.Option("--since", help="Only tasks whose first attempt started in the last "
                                                     "DAYS days (0: no limit, as the seed).", metavar="DAYS")]


def _require(store, table: str) -> None:
    if not store.has_table(table):
        raise LoopmeterError(f"no Forge data in {store.root}; run `loopmeter ingest forge STORE` first")


@ingest_app.command("forge", **command_help(
    "Read a Forge event store into the warehouse.",
    "The store is dataset.sqlite, opened read-only, or a JSON Lines export; "
                    "a regular file, not a pipe) into the warehouse: forge_events and the flat forge_* tables. "
                    "Loading is idempotent by rid. A record (a line, a SQLite value) over 4 MiB is rejected. "
                    "A WAL-mode store is read from a copy in the warehouse's scratch space, so nothing is created "
                    "beside it.",
    example="loopmeter ingest forge ~/.forge/dataset.sqlite\nloopmeter ingest forge events.jsonl --json",
    codes=(Exit.REJECTED, Exit.BUSY)))
@command
def ingest_forge_command(
    store_path: Annotated[Path, typer.Argument(metavar="STORE", help="dataset.sqlite or a .jsonl export.", show_default=False)],
    busy_timeout: Annotated[float, typer.Option("--busy-timeout", help="Seconds to wait for a Forge writer holding the store.")] = 5.0,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    check_number("--busy-timeout", busy_timeout, minimum=0)
    check_utf8_path(store_path)  # an unreadable input, as a missing file: exit 1
    set_quiet(quiet or json)
    from ..storage.catalog import refresh_catalog
    from ..forge.ingest import ingest_forge
    from ..forge.store import detect_format
    from ..tables_text import print_fitted

    detect_format(Path(store_path))  # a clear error before taking the lock
    store = open_warehouse(warehouse, writing=True)
    with store.lock(wait=wait, command="ingest forge"):
        result = ingest_forge(store, store_path, busy_timeout=busy_timeout)
        refresh_catalog(store)
    if json:
        from ..forge.reports import routing_json

        write_stdout(routing_json(result.as_dict()) + "\n")
    else:
        print_rejections([f"rejected {r.where(result.source)}: {r.field}: {r.rule}" for r in result.rejections],
                         result.rejected, "forge_rejections")
        unknown = ", ".join(f"{kind} {count}" for kind, count in sorted(result.unknown_kinds.items()))
        print_fitted(f"{result.read} {'rows' if result.format == 'sqlite' else 'lines'} read: {result.stored} new events, "
              f"{result.duplicates} already stored, {result.rejected} rejected, {result.repos} repositories"
              + (f"; kinds format 1 does not know (kept): {unknown}" if unknown else "") + f" -> {store.root}")
    if result.rejected:
        if not json:
            print(f"loopmeter: {result.rejected_summary()}", file=sys.stderr)
        return Exit.REJECTED
    return Exit.OK


@report_app.command("routing", **command_help(
    "Forge's routing: first-pass rates and randomized pairs.",
    "First-pass by tier and model (observational), and the randomized "
                    "exploration pairs with Hajek means, bootstrap intervals and verdicts; the text marks "
                    "a pair whose draws fail the sample-ratio-mismatch check (`report srm`) as "
                    "untrustworthy. Stores forge_routing_observational, forge_routing_randomized and "
                    "forge_routing_srm.",
    example="loopmeter report routing\nloopmeter report routing --repo ~/src/app --since 30 --json",
    codes=(Exit.BUSY,)))
@command
def report_routing(
    repo: RepoOption = None,
    since: SinceOption = None,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    check_number("--since", since, minimum=0)
    set_quiet(quiet)
    from ..forge import tables as t
    from ..forge.reports import routing_frames, routing_json, routing_text
    from ..forge.srm import routing_and_srm, srm_frame
    from ..tables_text import stdout_width

    store = open_warehouse(warehouse)
    _require(store, t.TASKS)
    scope = _routing_scope(store, repo, since)
    document, srm = routing_and_srm(store, scope)
    if (repo or since) and not document["observational"] and not any("note" not in r for r in document["randomized"]):
        note(f"note: no task matched {_chosen(repo, since)}: the report is empty")
    write_stdout((routing_json(document) if json else routing_text(document, stdout_width(), srm)) + "\n")
    sys.stdout.flush()
    store_report_tables(store, {**routing_frames(document, scope), t.SRM: srm_frame(srm, scope)}, wait, "report routing")
    return Exit.OK


@report_app.command("srm", **command_help(
    "Forge's randomized pairs: sample ratio mismatch.",
    "Per randomized pair, over every paired assignment (before any window): "
                    "assignments to the alternative against the sum of their P(alternative), Pearson's "
                    "chi-square over the two cells (1 degree of freedom), its p-value, and srm: a mismatch "
                    "at p < 0.001, which makes the pair's comparison untrustworthy. Stores forge_routing_srm.",
    example="loopmeter report srm\nloopmeter report srm --since 30 --json",
    codes=(Exit.BUSY,)))
@command
def report_srm(
    repo: RepoOption = None,
    since: SinceOption = None,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    check_number("--since", since, minimum=0)
    set_quiet(quiet)
    from ..forge import tables as t
    from ..forge.srm import srm_document, srm_frame, srm_json, srm_text
    from ..tables_text import stdout_width

    store = open_warehouse(warehouse)
    _require(store, t.TASKS)
    scope = _routing_scope(store, repo, since)
    document = srm_document(store, scope)
    if (repo or since) and not document["rows"]:
        note(f"note: no paired assignment matched {_chosen(repo, since)}: the report is empty")
    write_stdout((srm_json(document) if json else srm_text(document, stdout_width())) + "\n")
    sys.stdout.flush()
    store_report_tables(store, {t.SRM: srm_frame(document, scope)}, wait, "report srm")
    return Exit.OK


def _routing_scope(store, repo: Path | None, since: float | None):
    """The scope of `report routing` and `report srm`: --since DAYS, and --repo as forge_repos spells
    its path (the query compares the text)."""
    from ..forge.reports import routing_scope

    scope = routing_scope(None, since)
    return dataclasses.replace(scope, repo=_require_repo(store, repo)) if repo else scope


def _chosen(repo: Path | None, since: float | None) -> str:
    return " and ".join(([f"--repo {repo}"] if repo else []) + ([f"--since {since:g}"] if since else []))


@harvest_app.command("survival", **command_help(
    "Measure how much merged work survives in git.",
    "Per task an integration brought in, the lines it "
                     "added that git blame still credits to it at the horizon, and later reverts. Runs git read-only "
                     "and records outcome events in the warehouse (never in the store or the repository). "
                     "--horizon-days repeated measures at each of its horizons, sharing the git work; --json then "
                     "gives a list `horizons` of per-horizon results.",
    example="loopmeter harvest survival --dry-run\n"
            "loopmeter harvest survival --horizon-days 7 --horizon-days 30 --json",
    codes=(Exit.REJECTED, Exit.BUSY)))
@command
def harvest_survival(
    repo: RepoOption = None,
    horizon_days: Annotated[Optional[list[int]], typer.Option(
        "--horizon-days", help="Days after the integration to measure at (default 14); repeat it for several horizons.",
        min=0, max=MAX_HORIZON_DAYS, show_default=False)] = None,
    now: Annotated[Optional[str], typer.Option("--now", help="Measure as of this time (unix seconds or ISO 8601) instead of now.", metavar="TS")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be recorded; write nothing.")] = False,
    include_temp: Annotated[bool, typer.Option("--include-temp", help="Also repositories under the temporary directory.")] = False,
    workers: Annotated[int, typer.Option("--workers", help="Git queries run in parallel.", min=1)] = 4,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    moment = _parse_time(now) if now else None
    set_quiet(quiet or json)
    from ..storage.catalog import refresh_catalog
    from ..forge import tables as t
    from ..forge.reports import harvest_problems_line, harvest_text, routing_json, unharvested_notes
    from ..forge.survival import harvest_horizons, record
    from ..tables_text import stdout_width

    store = open_warehouse(warehouse)
    _require(store, t.INTEGRATIONS)
    if repo:
        _require_repo(store, repo)
    options = dict(horizons=horizon_days or [14], repo=str(repo) if repo else None, include_temp=include_temp,
                   now=moment, workers=workers)
    if dry_run:
        found = harvest_horizons(store, **options)
    else:
        with store.lock(wait=wait, command="harvest survival"):
            found = harvest_horizons(store, **options)
            if record(store, found):
                refresh_catalog(store)
    if json:
        write_stdout(routing_json(found.as_dict(not dry_run, dry_run)) + "\n")
    else:
        write_stdout(harvest_text(found, dry_run, stdout_width()) + "\n")
        for line in unharvested_notes(found)[:SHOWN_REJECTIONS]:
            note(line)
        note(f"{found.git_processes} git processes")
    if found.problems:
        if not json:
            print(harvest_problems_line(found), file=sys.stderr)
        return Exit.REJECTED
    return Exit.OK


@report_app.command("survival", **command_help(
    "Forge's survival of merged work per model and tier.",
    "Joins outcomes to the attempt whose reviewed commit they name, to its "
                    "model and tier — tasks, lines added, surviving share, reverts and revert rate (Wilson "
                    "interval) per model, tier and horizon. Stores forge_survival.",
    example="loopmeter report survival\nloopmeter report survival --json",
    codes=(Exit.BUSY,)))
@command
def report_survival(
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet)
    from ..forge import tables as t
    from ..forge.reports import routing_json, survival_document, survival_frame, survival_text
    from ..tables_text import stdout_width

    store = open_warehouse(warehouse)
    _require(store, t.TASKS)
    document = survival_document(store)
    write_stdout((routing_json(document) if json else survival_text(document, stdout_width())) + "\n")
    sys.stdout.flush()
    store_report_tables(store, {t.SURVIVAL: survival_frame(document)}, wait, "report survival")
    return Exit.OK


def _require_repo(store, repo: Path) -> str:
    """The path of the Forge repository --repo names, as forge_repos holds it (the same directory,
    symbolic links and relative paths resolved); none is an error, as `--run-set` naming no run set."""
    import os

    from ..forge import tables as t

    frame = store.read(t.REPOS, columns=["path"])
    known = sorted({path for path in ([] if frame is None else frame["path"].to_list()) if path})
    wanted = os.path.realpath(repo)
    matching = [path for path in known if os.path.realpath(path) == wanted]
    if not matching:
        listed = ", ".join(known[:5]) + (f" and {len(known) - 5} more" if len(known) > 5 else "")
        raise LoopmeterError(f"--repo {repo}: no Forge repository of {store.root} has this path "
                             f"(known: {listed or 'none'})")
    return wanted if wanted in matching else matching[0]


def _parse_time(text: str) -> float:
    from datetime import datetime, timezone

    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise usage_error(f"--now {text!r}: give unix seconds or an ISO 8601 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        seconds = moment.timestamp()
    try:  # nan, inf, 1e400 and times no calendar holds would be compared with every horizon, and recorded
        datetime.fromtimestamp(seconds, timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise usage_error(f"--now {text!r}: must be a finite time (unix seconds or ISO 8601) "
                          "between the years 1 and 9999") from None
    return seconds
