"""Forge commands: `ingest forge`, `report routing`, `report srm`, `harvest survival`, `report survival`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import Exit, shown_path
from ..operations.forge import MAX_HORIZON_DAYS, PART_ROWS
from .apps import harvest_app, ingest_app, report_app
from .common import EngineOption, JsonOption, QuietOption, SHOWN_REJECTIONS, SparkMasterOption, WaitOption, \
    WarehouseOption, WorkersOption, command, note, path_argument, path_option, print_rejections, set_quiet, \
    write_stdout
from .helptext import command_help
RepoOption = Annotated[Optional[Path], path_option("--repo", help="Only this repository (its path).", show_default=False)]
SinceOption = Annotated[Optional[float], typer.Option("--since", help="Only tasks whose first attempt started in the last "
                                                     "DAYS days (0: no limit).", metavar="DAYS")]


@ingest_app.command("forge", **command_help(
    "Read a Forge event store into the warehouse.",
    "The store (dataset.sqlite, opened read-only, or a JSON Lines export: a regular file, not a pipe) "
                    "goes into the warehouse as forge_events and the flat forge_* tables. "
                    "Loading is idempotent by rid. A record (a line, a SQLite value) over 4 MiB is rejected. "
                    "A WAL-mode store is read from a copy in the warehouse's scratch space, so nothing is created "
                    "beside it.",
    example="loopmeter ingest forge ~/.forge/dataset.sqlite\nloopmeter ingest forge events.jsonl --json",
    codes=(Exit.REJECTED, Exit.BUSY)))
@command
def ingest_forge_command(
    store_path: Annotated[Path, path_argument(metavar="STORE", help="dataset.sqlite or a .jsonl export.", show_default=False)],
    busy_timeout: Annotated[float, typer.Option("--busy-timeout", help="Seconds to wait for a Forge writer holding the store.")] = 5.0,
    engine: EngineOption = "local",
    spark_master: SparkMasterOption = None,
    workers: WorkersOption = None,
    part_rows: Annotated[int, typer.Option("--part-rows", help="Input rows per part of a summary table (forge_attempts, "
                                           "forge_decisions, forge_tasks), computed a part of whole runs at a time: "
                                           "what is in memory at once, and, with --engine, the tasks.")] = PART_ROWS,
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet or json)
    from ..operations import ingest_forge

    result = ingest_forge(store_path, warehouse=warehouse, busy_timeout=busy_timeout, engine=engine, workers=workers,
                          spark_master=spark_master, part_rows=part_rows, wait=wait)
    from ..tables_text import print_fitted

    if json:
        from ..forge.reports import routing_json

        write_stdout(routing_json(result.as_dict()) + "\n")
    else:
        print_rejections([f"rejected {r.where(result.source)}: {r.field}: {r.rule}" for r in result.rejections],
                         result.rejected, "forge_rejections")
        unknown = ", ".join(f"{kind} {count}" for kind, count in sorted(result.unknown_kinds.items()))
        print_fitted(f"{result.read} {'rows' if result.format == 'sqlite' else 'lines'} read: {result.stored} new events, "
              f"{result.duplicates} already stored, {result.rejected} rejected, {result.repos} repositories"
              + (f"; kinds format 1 does not know (kept): {unknown}" if unknown else "") + f" -> {shown_path(result.warehouse)}")
    if result.rejected:
        if not json:
            print(f"loopmeter: {result.rejected_summary()}", file=sys.stderr)
        return Exit.REJECTED
    return Exit.OK


@report_app.command("routing", **command_help(
    "Forge's routing: first-pass rates and randomized pairs.",
    "First-pass by tier and model (observational: tasks with an outcome, Wilson 95 % interval), and the "
                    "randomized exploration pairs: each arm's first-pass rate as a Hajek mean (weights 1/propensity), "
                    "judged at the largest window (30, 60 or 120 alternative assignments) reached, on the assignments "
                    "up to that window's last alternative one. difference: alternative minus default, as a proportion "
                    "(-1 to 1; the rates beside it are percent), with a 95 % run-cluster bootstrap interval (from 10 "
                    "alternative assignments and 3 runs). Verdict: low tier, switch when the interval is above 0; "
                    "medium and high, the alternative is non-inferior and faster when the interval's low end is above "
                    "-0.10 and its median runtime is lower; else keep the default. The text marks "
                    "a pair the sample-ratio-mismatch checks (`report srm`) find "
                    "untrustworthy. (`ingest forge` stores the report of every task as forge_routing_observational, "
                    "forge_routing_randomized and forge_routing_srm.)",
    example="loopmeter report routing\nloopmeter report routing --repo ~/src/app --since 30 --json"))
@command
def report_routing(
    repo: RepoOption = None,
    since: SinceOption = None,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet)
    from ..operations import report_routing as routing

    shown = routing(warehouse=warehouse, repo=repo, since=since)
    from ..forge.reports import routing_json, routing_text
    from ..tables_text import stdout_width

    for line in shown.notes:
        note(line)
    document, srm = shown.document
    write_stdout((routing_json(document) if json else routing_text(document, stdout_width(), srm)) + "\n")
    return Exit.OK


@report_app.command("srm", **command_help(
    "Forge's randomized pairs: sample ratio mismatch.",
    "Per randomized pair, over every paired assignment (before any window): "
                    "the assignment ratio (assignments to the alternative against the sum of their "
                    "P(alternative), Pearson's chi-square over the two cells, 1 degree of freedom, its "
                    "p-value, srm: p < 0.001) and the outcome attrition (each arm's assignments with an "
                    "outcome, Fisher's exact test, attrition_srm: p < 0.001). untrustworthy: either "
                    "p-value below 0.00025, which makes the pair's comparison untrustworthy.",
    example="loopmeter report srm\nloopmeter report srm --since 30 --json"))
@command
def report_srm(
    repo: RepoOption = None,
    since: SinceOption = None,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet)
    from ..operations import report_srm as srm

    shown = srm(warehouse=warehouse, repo=repo, since=since)
    from ..forge.srm import srm_json, srm_text
    from ..tables_text import stdout_width

    for line in shown.notes:
        note(line)
    write_stdout((srm_json(shown.document) if json else srm_text(shown.document, stdout_width())) + "\n")
    return Exit.OK


@harvest_app.command("survival", **command_help(
    "Measure how much merged work survives in git.",
    "Per task an integration brought in, the lines it "
                     "added that git blame still credits to it at the horizon, and later reverts. Runs git read-only "
                     "and records outcome events in the warehouse (never in the store or the repository), and the "
                     "survival report as forge_survival. "
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
    set_quiet(quiet or json)
    from ..operations import harvest_survival as harvest
    from ..operations.forge import parse_time

    moment = parse_time(now) if now is not None else None
    found = harvest(warehouse=warehouse, repo=repo, horizon_days=horizon_days or [14], now=moment, dry_run=dry_run,
                    include_temp=include_temp, workers=workers, wait=wait)
    from ..forge.reports import harvest_problems_line, harvest_text, routing_json, skipped_temp_note, unharvested_notes
    from ..tables_text import stdout_width

    if json:
        write_stdout(routing_json(found.as_dict(not dry_run, dry_run)) + "\n")
    else:
        write_stdout(harvest_text(found, dry_run, stdout_width()) + "\n")
        skipped = skipped_temp_note(found)
        if skipped:
            note(skipped)
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
                    "model and tier — tasks, lines added, surviving share (of all their added lines: surviving "
                    "lines / lines added, so a large task weighs more), reverts and revert rate (the share of "
                    "tasks reverted, with its Wilson 95 % interval) per model, tier and horizon. (`harvest "
                    "survival` stores it as forge_survival.)",
    example="loopmeter report survival\nloopmeter report survival --json"))
@command
def report_survival(
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    set_quiet(quiet)
    from ..operations import report_survival as survival

    document = survival(warehouse=warehouse).document
    from ..forge.reports import routing_json, survival_text
    from ..tables_text import stdout_width

    write_stdout((routing_json(document) if json else survival_text(document, stdout_width())) + "\n")
    return Exit.OK
