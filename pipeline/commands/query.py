"""`loopmeter sql`, `loopmeter queries`, `loopmeter schema`, `loopmeter catalog`: the warehouse for people who
write SQL, and for the BI tools and notebooks that open its loopmeter.duckdb."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import Exit, shown_path
from .apps import app
from .common import JsonOption, QuietOption, WaitOption, WarehouseOption, command, note, path_option, print_json, \
    set_quiet, stdout_console, write_stdout
from .helptext import FORMAT_METAVAR, command_help


@app.command("sql", **command_help(
    "Run read-only SQL against the warehouse.",
    "Its tables are views in loopmeter.duckdb. Writes are refused. With --out, the format is told by the file's "
    "name (.csv, .json, .jsonl or .ndjson, .parquet) unless --format says it.",
    example="loopmeter sql \"SELECT mode, count(*) FROM runs GROUP BY mode\"\n"
            "loopmeter sql --query forgeloop_pairs --param run_set=R1 --out pairs.parquet"))
@command
def sql_command(
    text: Annotated[Optional[str], typer.Argument(help="The SQL to run.", show_default=False)] = None,
    file: Annotated[Optional[Path], path_option("--file", help="Read the SQL from this file (UTF-8, at most 16 MiB; "
                                                 "a pipe such as <(...) too; - for standard input).")] = None,
    query: Annotated[Optional[str], typer.Option("--query", help="Run a named query from queries/ (see `loopmeter queries`).")] = None,
    param: Annotated[list[str], typer.Option("--param", help="name=value for a $name in the SQL (repeatable). A name the SQL "
                                             "does not take is refused; so is a $name left without a value, except the "
                                             "optional parameters a named query documents (they are NULL).")] = [],
    output_format: Annotated[Optional[str], typer.Option(
        "--format", metavar=FORMAT_METAVAR, show_default=False,
        help="json: an array of objects; jsonl: one object a line. Default: the table (its first 10,000 rows), or as "
        "--out's name says. "
        "NaN and infinities: NaN, inf, -inf in csv and the table; null in json and jsonl.")] = None,
    out: Annotated[Optional[Path], path_option("--out", help="Write the result to this file instead of printing it, "
                                                "in the format its name says (x.csv, x.json, x.jsonl, x.parquet).")] = None,
    warehouse: WarehouseOption = None,
    quiet: QuietOption = False,
) -> int:
    from ..operations import sql
    from ..sql.output import TABLE_ROWS, parse_parameters, result_pieces, table_rows

    set_quiet(quiet)
    answer = sql(text, file=file, query=query, params=parse_parameters(param), output_format=output_format, out=out,
                 warehouse=warehouse)
    frame = answer.frame
    if answer.out is not None:
        return Exit.OK
    if answer.output_format == "table":
        from ..tables_text import add_row, new_table, print_table

        table = new_table(frame.columns, right=[name for name, dtype in frame.schema.items() if dtype.is_numeric()])
        for row in table_rows(frame.head(TABLE_ROWS)):
            add_row(table, row)
        print_table(stdout_console(250, emoji=False, markup=False, highlight=False), table)
        shown = "" if frame.height <= TABLE_ROWS else f"; the first {TABLE_ROWS} shown: --format csv or --out FILE gives them all"
        note(f"({frame.height} row{'' if frame.height == 1 else 's'}{shown})")
        return Exit.OK
    for piece in result_pieces(frame, answer.output_format):
        write_stdout(piece)
    return Exit.OK


@app.command("queries", **command_help(
    "List the named queries in queries/.",
    "Each with what it answers (the first sentence of its header); run one with `loopmeter sql --query NAME`.",
    example="loopmeter queries\nloopmeter queries --json"))
@command
def queries_command(json: JsonOption = False, quiet: QuietOption = False) -> int:
    from ..sql.queries import list_queries, optional_parameters, query_parameters, query_text, runs_inside

    set_quiet(quiet)
    listed = [(name, summary, runs_inside(name)) for name, summary in list_queries()]
    taken = {name: [(parameter, parameter in optional_parameters(name)) for parameter in query_parameters(query_text(name))]
             for name, _, _ in listed}
    if json:
        print_json([{"name": name, "summary": summary, "runsInside": stage,
                     "parameters": [{"name": parameter, "optional": optional} for parameter, optional in taken[name]]}
                    for name, summary, stage in listed], 2)
        return Exit.OK
    from ..tables_text import fit_line, listing, stdout_width

    def with_parameters(name: str, summary: str) -> str:
        if not taken[name]:
            return summary
        given = ", ".join(f"--param {parameter}=..." + (" (optional)" if optional else "") for parameter, optional in taken[name])
        return f"{summary} Takes {given}."

    width, shown = max((len(name) for name, _, _ in listed), default=0), stdout_width()
    queries = [(f"{name:<{width}}", with_parameters(name, summary)) for name, summary, stage in listed if not stage]
    if queries:
        print(listing([f"{lead}  {text}" for lead, text in queries], queries, shown))
    steps = [(f"{name:<{width}}", f"inside {stage}") for name, _, stage in listed if stage]
    if steps:
        print("\n" + fit_line("steps of stages (they read what the stage stages, not the warehouse):", shown))
        print(listing([f"{lead}  {text}" for lead, text in steps], steps, shown))
    return Exit.OK


@app.command("schema", **command_help(
    "List every table and column of the warehouse.",
    "Each with its documentation (Markdown with --markdown).",
    example="loopmeter schema\nloopmeter schema --markdown > schema.md"))
@command
def schema_command(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the Markdown schema page.")] = False,
    warehouse: WarehouseOption = None,
    json: JsonOption = False,
    quiet: QuietOption = False,
) -> int:
    set_quiet(quiet)
    if markdown and json:
        from ..errors import usage_error

        raise usage_error("--markdown and --json ask for two forms of the schema: give one")
    if markdown:
        from ..storage.documentation import schema_markdown

        sys.stdout.write(schema_markdown())
        return Exit.OK
    from ..operations import schema

    rows = schema(warehouse=warehouse)
    if json:
        print_json(rows, 2)
        return Exit.OK
    from ..tables_text import listing, stdout_width

    names = [f"{row['table']}.{row['column']}" for row in rows]
    width = max((len(name) for name in names), default=0)
    listed = listing([f"{name}\t{row['type']}\t{row['comment']}" for name, row in zip(names, rows)],
                     [(f"{name:<{width}}  {row['type']}", row["comment"]) for name, row in zip(names, rows)], stdout_width())
    if listed:
        print(listed)
    return Exit.OK


@app.command("catalog", **command_help(
    "Rebuild loopmeter.duckdb, the warehouse's DuckDB catalog.",
    "A documented view per table, reading its Parquet files by absolute path, so DBeaver, Metabase, Superset (duckdb-engine), Evidence or a notebook open it from "
             "anywhere with no setup; DuckDB 1.4 and later read it. Every loopmeter command rebuilds it by itself "
             "when the warehouse was copied or moved; this rebuilds it on request, under the writer lock.",
    example="loopmeter catalog --warehouse /srv/loopmeter/warehouse\n"
            "# then open /srv/loopmeter/warehouse/loopmeter.duckdb in any DuckDB client\n"
            "# (Python: duckdb.connect(path, read_only=True); more in docs/clients.md)",
    codes=(Exit.BUSY,)))
@command
def catalog_command(
    warehouse: WarehouseOption = None,
    wait: WaitOption = False,
    quiet: QuietOption = False,
    json: JsonOption = False,
) -> int:
    from ..operations import catalog

    set_quiet(quiet or json)
    built = catalog(warehouse=warehouse, wait=wait)
    if json:
        print_json(built, 2)
        return Exit.OK
    from ..tables_text import print_fitted

    print_fitted(f"{shown_path(built['database'])}: {built['views']} view{'' if built['views'] == 1 else 's'} reading "
                 f"the tables under {shown_path(str(built['root']))} (DuckDB storage {built['storageVersion']}: read by "
                 "DuckDB 1.4 and later)")
    return Exit.OK
