"""`loopmeter check`: is the warehouse whole (every table file, the journal, the catalog)? `--repair`
rebuilds what the warehouse holds the inputs of (`operations/repair.py`)."""
from __future__ import annotations

import sys
from typing import Annotated

import typer

from .apps import app
from ..errors import Exit, one_line, shown_path
from .common import JsonOption, QuietOption, WaitOption, WarehouseOption, command, note, print_json, set_quiet
from .helptext import command_help


@app.command("check", **command_help(
    "Check that the warehouse is whole.",
    "Every table file is read to its end and its schema checked, then every entry loopmeter did not make, the "
    "publishing journal, loopmeter.duckdb and its views; one line per problem, exit 1 when there is one. --repair rebuilds what can be rebuilt from "
    "the warehouse and says what it could not.",
    example="loopmeter check --warehouse ~/lm\nloopmeter check --repair",
    codes=(Exit.BUSY,)))
@command
def check_command(
    repair: Annotated[bool, typer.Option("--repair", help="Rebuild what can be rebuilt (the catalog, the Forge summary "
                                         "tables, a journal left behind, a table's link), remove the links, FIFOs and "
                                         "strays loopmeter never makes; say how to rebuild the rest.")] = False,
    warehouse: WarehouseOption = None,
    json: JsonOption = False,
    quiet: QuietOption = False,
    wait: WaitOption = False,
) -> int:
    from ..operations import check

    set_quiet(quiet)
    try:
        found, report = check(warehouse=warehouse, repair=repair, wait=wait)
    except KeyboardInterrupt as interruption:  # what the repair did, and what its lines say to run, before the line
        for line in getattr(interruption, "repaired", []):
            print(f"loopmeter: repaired: {one_line(line)}", file=sys.stderr)
        raise
    if json:
        document = report.as_dict()
        document["found"] = [problem.as_dict() for problem in found]
        print_json(document)
    else:
        for problem in found:
            print(f"loopmeter: {one_line(problem.line())}", file=sys.stderr)
        for line in report.repaired:
            print(f"loopmeter: repaired: {one_line(line)}", file=sys.stderr)
        for line in report.not_repaired:
            print(f"loopmeter: not repaired: {one_line(line)}", file=sys.stderr)
        if not found:
            from ..storage.remote import is_mirror

            parts = "journal" if is_mirror(report.root) else "journal and catalog"  # none kept on object storage
            entries = "entry" if report.leftovers == 1 else "entries"
            left = (f"; {report.leftovers} {entries} of a writer at work, or left by one killed (in .scratch/, "
                    "beside the file or folder it replaces, or the journal of its publish), which the next writer "
                    "removes or finishes" if report.leftovers else "")
            note(f"{shown_path(report.root)}: {report.tables} tables, {report.files} files, {parts}: all whole{left}")
        elif repair and not report.problems:
            note(f"{shown_path(report.root)}: repaired; checked again: all whole")
    return int(Exit.FATAL) if report.problems else 0
