"""What a statement given to `loopmeter sql` is, decided by DuckDB's own parser: only reads pass.

Every statement is classified by the type DuckDB's parser gives it (`extract_statements`):

- a SELECT (FROM-first, VALUES, SHOW, DESCRIBE, SUMMARIZE, UNPIVOT are SELECTs too) passes when
  its syntax tree (DuckDB's `json_serialize_sql`) holds query nodes only (a CTE may hold a COPY,
  INSERT, UPDATE or DELETE: refused), its table functions are ones that only read
  (`READING_TABLE_FUNCTIONS`; `query('...')` runs text no check has seen: refused) and it calls
  none of the scalar functions that change state (`WRITING_FUNCTIONS`);
- an EXPLAIN passes when it is not EXPLAIN ANALYZE (which runs the statement it explains) in any
  spelling, its options are known ones, and the statement it explains passes;
- a CALL passes when `SELECT * FROM <what it calls>` passes; a PRAGMA when it is one of
  `READING_PRAGMAS` with constant arguments (COPY FROM DATABASE is a PRAGMA to DuckDB: refused);
- every other type (COPY, INSERT, CREATE, SET, ATTACH, LOAD, EXPORT, TRANSACTION, ...) is refused,
  named as a person names it.

What cannot be checked is refused. The connection's settings are locked besides (adhoc.py), so a
statement that got through could still not change them.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..errors import LoopmeterError, flat_message

# Table functions that read and change nothing; any other is refused (fail closed: a function a
# newer DuckDB adds is refused until it is known here).
READING_TABLE_FUNCTIONS = frozenset({
    "read_parquet", "parquet_scan", "read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_json_objects",
    "read_json_objects_auto", "read_ndjson", "read_ndjson_auto", "read_ndjson_objects", "read_text", "read_blob",
    "glob", "sniff_csv", "parquet_metadata", "parquet_schema", "parquet_file_metadata", "parquet_kv_metadata",
    "parquet_full_metadata", "parquet_page_index", "parquet_bloom_probe", "range", "generate_series", "unnest",
    "repeat", "repeat_row", "json_each", "json_tree", "query_table", "summary", "histogram", "histogram_values",
    "duckdb_columns", "duckdb_constraints", "duckdb_databases", "duckdb_dependencies", "duckdb_extensions",
    "duckdb_functions", "duckdb_indexes", "duckdb_keywords", "duckdb_memory", "duckdb_optimizers", "duckdb_schemas",
    "duckdb_sequences", "duckdb_settings", "duckdb_tables", "duckdb_temporary_files", "duckdb_types",
    "duckdb_variables", "duckdb_views", "table_info", "show", "show_tables", "show_tables_expanded", "show_databases",
    "database_list", "database_size", "version", "platform", "collations", "functions", "storage_info",
    "metadata_info", "user_agent", "extension_versions", "pragma_table_info", "pragma_show", "pragma_version",
    "pragma_platform", "pragma_database_size", "pragma_storage_info", "pragma_metadata_info", "pragma_collations",
    "pragma_user_agent", "test_all_types", "icu_calendar_names", "pg_timezone_names",
})
# PRAGMAs that only show something (PRAGMA name, or PRAGMA name(constants)).
READING_PRAGMAS = frozenset({
    "table_info", "show", "show_tables", "show_tables_expanded", "show_databases", "database_list", "database_size",
    "version", "platform", "collations", "functions", "storage_info", "metadata_info", "user_agent",
    "extension_versions",
})
# Scalar functions that change state (a sequence's value, the log).
WRITING_FUNCTIONS = frozenset({"nextval", "setval", "write_log"})
# The nodes of a query's syntax tree that are queries; any other node is a statement inside it.
QUERY_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
# What may stand in EXPLAIN's parenthesised options (none of them makes it run the statement).
EXPLAIN_OPTIONS = frozenset({"FORMAT", "TEXT", "JSON", "HTML", "GRAPHVIZ", "YAML", "MERMAID", ","})
ANALYZE_WORDS = frozenset({"ANALYZE", "ANALYSE"})

SAVE = "to save a result, use --out FILE.csv (or .json, .jsonl, .parquet)"
REFUSALS = {
    **dict.fromkeys(("CREATE", "INSERT", "COPY", "EXPORT"), SAVE),
    **dict.fromkeys(("UPDATE", "DELETE", "MERGE", "ALTER", "DROP", "VACUUM", "ANALYZE", "CHECKPOINT", "DEALLOCATE",
                     "TRUNCATE"), "the warehouse's tables change only through loopmeter's stages"),
    **dict.fromkeys(("ATTACH", "DETACH", "USE"), "it reads the warehouse's own database only"),
    **dict.fromkeys(("INSTALL", "LOAD"), "it installs and loads no extension"),
    **dict.fromkeys(("SET", "RESET", "PRAGMA"), "its settings are locked"),
    **dict.fromkeys(("BEGIN", "COMMIT", "ROLLBACK", "ABORT", "START", "END", "TRANSACTION"),
                    "each call runs one reading statement on its own"),
    **dict.fromkeys(("PREPARE", "EXECUTE"), "give the statement itself, its $names with --param name=value"),
    "EXPLAIN ANALYZE": "it runs the statement it explains; EXPLAIN alone shows the plan",
}
# Statement types DuckDB gives several statements, named here by their own first word instead.
NAMED_BY_WORD = {"LOAD", "SET", "VARIABLE_SET", "TRANSACTION", "VACUUM", "DROP", "CALL", "PRAGMA", "COPY_DATABASE",
                 "CREATE_FUNC", "MERGE_INTO", "EXTENSION", "INVALID"}


def refusal(name: str, reason: str | None = None) -> LoopmeterError:
    article = "an" if name[:1] in "AEIO" or (name[:1] == "U" and not name.startswith("US")) else "a"
    reason = REFUSALS.get(name) if reason is None else reason
    return LoopmeterError(f"loopmeter sql is read-only: {article} {name} statement is refused"
                          + (f" ({reason})" if reason else ""))


def check_statements(connection: Any, text: str) -> Any:
    """The one statement of `text`, when it only reads; else a LoopmeterError naming the first
    statement refused (or saying the SQL does not parse, is empty, or holds several statements)."""
    statements = _parse(connection, text)
    if not statements:
        raise LoopmeterError("no SQL statement given")
    for statement in statements:
        check_statement(connection, statement)
    if len(statements) > 1:
        raise LoopmeterError(f"loopmeter sql runs one statement at a time; this SQL has {len(statements)} "
                             "(run them one by one)")
    return statements[0]


def _parse(connection: Any, text: str) -> list:
    from ..duckdb_module import duckdb

    try:
        return connection.extract_statements(text)
    except duckdb.Error as error:
        raise LoopmeterError(f"SQL does not parse: {flat_message(error)}") from None


def check_statement(connection: Any, statement: Any, depth: int = 0) -> None:
    """Refuse `statement` (one of `extract_statements`) unless it only reads."""
    if depth > 8:
        raise LoopmeterError("loopmeter sql is read-only: statements nested this deep are not checked")
    kind = kind_of(statement)
    if kind == "SELECT":
        check_select(connection, statement.query)
    elif kind == "EXPLAIN":
        check_statement(connection, _explained(connection, statement.query), depth + 1)
    elif kind == "CALL" and _first_word(statement.query) == "CALL":
        inner = _after_first_word(statement.query)
        called = _parse(connection, f"SELECT * FROM {inner}")
        if len(called) != 1:
            raise refusal("CALL", "it calls one table function that reads")
        check_select(connection, called[0].query)
    elif kind == "PRAGMA" and _first_word(statement.query) == "PRAGMA":
        _check_pragma(statement.query)
    elif kind == "MULTI":  # DuckDB runs it as several statements: a PIVOT creates the type of its columns first
        raise refusal("PIVOT", "DuckDB runs it as several statements, creating a type first; name the values it "
                               "pivots on: PIVOT ... ON column IN (value, ...)")
    else:
        name = statement_name(statement, kind)
        raise refusal(name, "" if kind == "INVALID" and name == kind else None)


def kind_of(statement: Any) -> str:
    try:
        return str(statement.type).rsplit(".", 1)[-1].upper()
    except ValueError:  # a statement type this duckdb's Python module has no name for (UPDATE EXTENSIONS)
        return "INVALID"


def statement_name(statement: Any, kind: str) -> str:
    """The statement as a person names it: INSTALL (DuckDB's type says LOAD), RESET (SET), ..."""
    if kind not in NAMED_BY_WORD:
        return kind
    words = [word for _, _, word in tokens(statement.query) if re.fullmatch(r"[A-Za-z_]+", word)]
    word = words[0].upper() if words else kind
    if word == "FORCE" and len(words) > 1:  # FORCE INSTALL, FORCE CHECKPOINT
        word = words[1].upper()
    return word


def tokens(text: str) -> list[tuple[int, str, str]]:
    """(offset, DuckDB's token type, text) of every token of `text` but comments; a quoted
    identifier's text is its name."""
    from ..duckdb_module import duckdb

    found = []
    for offset, kind in duckdb.tokenize(text):
        kind = str(kind).rsplit(".", 1)[-1]
        if kind == "comment":
            continue
        if text.startswith('"', offset):
            end = re.match(r'"((?:[^"]|"")*)"', text[offset:])
            word = end[1].replace('""', '"') if end else text[offset:]
        else:
            match = re.match(r"[A-Za-z_][A-Za-z0-9_$]*|\S", text[offset:])
            word = match[0] if match else ""
        found.append((offset, kind, word))
    return found


def _first_word(text: str) -> str:
    found = tokens(text)
    return found[0][2].upper() if found else ""


def _after_first_word(text: str) -> str:
    found = tokens(text)
    return text[found[1][0]:] if len(found) > 1 else ""


def _explained(connection: Any, text: str) -> Any:
    """The statement an EXPLAIN explains; refused when it is EXPLAIN ANALYZE in any spelling, or
    has options not known to leave the statement unrun."""
    found = tokens(text)
    position = 1
    if len(found) > position and found[position][2].upper() in ANALYZE_WORDS:
        raise refusal("EXPLAIN ANALYZE")
    if len(found) > position and found[position][2] == "(":
        position += 1
        while position < len(found) and found[position][2] != ")":
            word = found[position][2].upper()
            if word in ANALYZE_WORDS:
                raise refusal("EXPLAIN ANALYZE")
            if word not in EXPLAIN_OPTIONS and found[position][1] != "string_const":
                raise refusal("EXPLAIN", f"its option {found[position][2]} is not one loopmeter sql knows to leave "
                                         "the statement unrun")
            position += 1
        position += 1
    if position >= len(found):
        raise refusal("EXPLAIN", "it explains no statement")
    inner = _parse(connection, text[found[position][0]:])
    if len(inner) != 1:
        raise refusal("EXPLAIN", "it explains one statement")
    return inner[0]


def _check_pragma(text: str) -> None:
    found = tokens(text)
    name = found[1][2].lower() if len(found) > 1 else ""
    if name not in READING_PRAGMAS:
        raise refusal(f"PRAGMA {name}".strip(), "it runs the PRAGMAs that only show something: "
                      + ", ".join(sorted(READING_PRAGMAS)))
    for _, kind, word in found[2:]:  # PRAGMA name('constant', 1)
        if word not in ("(", ")", ",", ";") and kind not in ("string_const", "numeric_const"):
            raise refusal(f"PRAGMA {name}", "its arguments are constants")


def check_select(connection: Any, text: str) -> None:
    """Refuse a SELECT whose syntax tree holds a statement, a table function that is not a reading
    one, or a scalar function that changes state."""
    from ..duckdb_module import duckdb

    cursor = connection.cursor()  # the connection itself keeps no result open
    try:
        ((serialized,),) = cursor.execute("SELECT json_serialize_sql($1)", [text]).fetchall()
    except duckdb.Error as error:
        raise LoopmeterError(f"loopmeter sql is read-only: the statement cannot be checked ({flat_message(error)})") from None
    finally:
        cursor.close()
    tree = json.loads(serialized)
    if tree.get("error"):
        raise LoopmeterError("loopmeter sql is read-only: the statement cannot be checked "
                             f"({tree.get('error_message') or tree.get('error_type')})")
    _check_tree(tree.get("statements"))


def _check_tree(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _check_tree(item)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if isinstance(kind, str):
        if kind.endswith("_NODE") and kind not in QUERY_NODES:
            name = kind.removesuffix("_NODE").removesuffix("_QUERY").replace("_INTO", "")
            raise refusal(name, f"{REFUSALS.get(name, 'only queries run')}; a WITH clause holds it")
        if kind == "TABLE_FUNCTION":
            function = node.get("function") if isinstance(node.get("function"), dict) else {}
            name = str(function.get("function_name", "")).lower()
            if name not in READING_TABLE_FUNCTIONS:
                reason = ("it runs SQL text, which no check has seen; give the statement itself" if name == "query"
                          else "it is not one of the table functions that only read")
                raise LoopmeterError(f"loopmeter sql is read-only: the table function {name} is refused ({reason})")
    if node.get("class") == "FUNCTION" and str(node.get("function_name", "")).lower() in WRITING_FUNCTIONS:
        raise LoopmeterError(f"loopmeter sql is read-only: the function {node['function_name']} is refused "
                             "(it changes state)")
    for value in node.values():
        _check_tree(value)
