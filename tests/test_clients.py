"""Every client opens the warehouse with its defaults, as docs/clients.md shows.

The snippets of docs/clients.md are the code that runs here: each fenced block after a
`<!-- test: ID -->` comment is taken from the page, its example warehouse
(`/home/me/loopmeter/data/warehouse`) replaced by a real one and its example table (`runs`,
or the one it names) by each table in turn. Each client runs in a process of its own (see
clients_harness.py), from a fresh working directory, so that nothing resolves against the
repository or the warehouse folder.

Two warehouses of `loopmeter demo`: one where it was built, and one copied elsewhere with its
links (`shutil.copytree(..., symlinks=True)`), the original removed, and one loopmeter command
run on the copy. For every table, every client must give the row count `loopmeter sql` gives,
the same set of column names, and for each column the type `loopmeter schema` gives, through
the mapping below (one per client, as the types table of docs/clients.md says).

DBeaver, Metabase and Evidence are configuration: their settings are read from the page, and
what their DuckDB drivers do with them is done here by DuckDB's 1.x line (the version those
drivers ship) opening the file read-only from another working directory. Superset is
SQLAlchemy with duckdb-engine in Superset's own pins (SQLAlchemy 1.4, DuckDB 1.x). The 1.x
line is installed from PyPI into a venv of its own, kept in ~/.cache/loopmeter-tests/clients-duckdb1
(or $LOOPMETER_TEST_CACHE) and reused when present.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.slow  # installs, real clients, browsers: the whole suite runs them, `-m "not slow"` does not

DOC = ROOT / "docs" / "clients.md"
HARNESS = (Path(__file__).parent / "clients_harness.py").read_text()
EXAMPLE_WAREHOUSE = "/home/me/loopmeter/data/warehouse"
EXAMPLE_DATABASE = f"{EXAMPLE_WAREHOUSE}/loopmeter.duckdb"
EXAMPLE_PARTITION = "run_set_id"
EXAMPLE_BUCKET = "my-bucket"

# Superset's own pins for DuckDB (apache-superset[duckdb]); the 1.x CLI (duckdb-cli) beside them
DUCKDB1_REQUIREMENTS = ["duckdb>=1.4.2,<2", "duckdb-cli<2", "sqlalchemy>=1.4,<2", "duckdb-engine>=0.17.0"]
DUCKDB14_REQUIREMENTS = ["duckdb>=1.4,<1.5"]
CACHE = Path(os.environ.get("LOOPMETER_TEST_CACHE", Path.home() / ".cache" / "loopmeter-tests"))


# ---- the page -----------------------------------------------------------------------------------
def doc_snippets() -> dict[str, tuple[str, str]]:
    """ID -> (language, code) of every marked fenced block of docs/clients.md."""
    found: dict[str, tuple[str, str]] = {}
    for match in re.finditer(r"<!-- test: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", DOC.read_text(), re.S):
        name, language, code = match.groups()
        assert name not in found, f"docs/clients.md marks two snippets `{name}`"
        found[name] = (language, code + "\n")
    return found


SNIPPETS = doc_snippets()


def snippet(name: str) -> str:
    assert name in SNIPPETS, f"docs/clients.md has no snippet marked <!-- test: {name} -->"
    return SNIPPETS[name][1]


def for_table(code: str, table: str, partition: str | None, *, example: str = "runs",
              database: str | None = None, warehouse: Path | None = None) -> str:
    """The snippet written for `example` made about `table` (its partition column for the example's),
    on `warehouse` (or with the database file `database`)."""
    code = re.sub(rf"\b{example}\b", table, code)
    if partition is not None:
        code = re.sub(rf"\b{EXAMPLE_PARTITION}\b", partition, code)
    if database is not None:
        assert EXAMPLE_DATABASE in code, f"the snippet does not name {EXAMPLE_DATABASE}:\n{code}"
        code = code.replace(EXAMPLE_DATABASE, database)
    elif warehouse is not None:
        assert EXAMPLE_WAREHOUSE in code, f"the snippet does not name {EXAMPLE_WAREHOUSE}:\n{code}"
        code = code.replace(EXAMPLE_WAREHOUSE, str(warehouse))
    return code


# ---- the types each client gives for loopmeter's ---------------------------------------------------
def _same(duck: str) -> str:
    return duck


ARROW = {"VARCHAR": "string", "BIGINT": "int64", "DOUBLE": "double", "BOOLEAN": "bool",
         "TIMESTAMP WITH TIME ZONE": "timestamp[us, tz=UTC]", "VARCHAR[]": "list<element: string>",
         "BIGINT[]": "list<element: int64>", "DOUBLE[]": "list<element: double>"}
POLARS = {"VARCHAR": "String", "BIGINT": "Int64", "DOUBLE": "Float64", "BOOLEAN": "Boolean",
          "TIMESTAMP WITH TIME ZONE": "Datetime(time_unit='us', time_zone='UTC')", "VARCHAR[]": "List(String)",
          "BIGINT[]": "List(Int64)", "DOUBLE[]": "List(Float64)"}
SPARK = {"VARCHAR": "string", "BIGINT": "bigint", "DOUBLE": "double", "BOOLEAN": "boolean",
         "TIMESTAMP WITH TIME ZONE": "timestamp", "VARCHAR[]": "array<string>", "BIGINT[]": "array<bigint>",
         "DOUBLE[]": "array<double>"}
# duckdb-engine reflects through PostgreSQL's catalog: lists are a type it does not know, and
# TIMESTAMP WITH TIME ZONE comes without its time zone
SQLALCHEMY = {"VARCHAR": "String", "BIGINT": "BigInteger", "DOUBLE": "FLOAT", "BOOLEAN": "BOOLEAN",
              "TIMESTAMP WITH TIME ZONE": "TIMESTAMP", "VARCHAR[]": "NullType", "BIGINT[]": "NullType",
              "DOUBLE[]": "NullType"}


def accepted(mapping: str, duck: str, partition: bool, has_nulls: bool | None) -> set[str]:
    """The types client `mapping` may give for a column loopmeter types `duck`."""
    if mapping == "duckdb":  # DuckDB itself, any version, any client of it
        return {duck}
    if mapping == "sqlalchemy":
        return {SQLALCHEMY[duck]}
    if mapping == "pyarrow-table":  # pq.read_table: hive partitions by default, as dictionaries
        return {"dictionary<values=string, indices=int32, ordered=0>"} if partition else {ARROW[duck]}
    if mapping == "pyarrow-dataset":  # ds.dataset(partitioning="hive"): partition values as strings
        return {"string"} if partition else {ARROW[duck]}
    if mapping == "datafusion":  # text as string_view (DataFusion's default), partitions as dictionaries
        if partition:
            return {"dictionary<values=string, indices=uint16, ordered=0>"}
        return {"string_view"} if duck == "VARCHAR" else {ARROW[duck]}
    if mapping == "polars":
        return {POLARS[duck]}
    if mapping == "spark":
        return {SPARK[duck]}
    if mapping == "pandas":  # NumPy-backed by default: no missing integers or booleans
        if partition:
            return {"category"}
        types = {"VARCHAR": {"str", "object"}, "BIGINT": {"int64"}, "DOUBLE": {"float64"}, "BOOLEAN": {"bool"},
                 "TIMESTAMP WITH TIME ZONE": {"datetime64[us, UTC]", "datetime64[ns, UTC]"}}.get(duck, {"object"})
        if has_nulls and duck == "BIGINT":
            types = types | {"float64"}
        if has_nulls and duck == "BOOLEAN":
            types = types | {"object"}
        return types
    raise ValueError(mapping)


def problems_of(mapping: str, expected: dict, seen: dict) -> list[str]:
    """What a client saw of one table that differs from loopmeter's answer (empty: it passes)."""
    if "error" in seen:
        return [f"error: {seen['error']}"]
    problems = []
    if seen["rows"] != expected["rows"]:
        problems.append(f"{seen['rows']} rows, loopmeter sql counts {expected['rows']}")
    names = {name for name, _, _ in seen["columns"]}
    if len(names) != len(seen["columns"]):
        problems.append(f"columns named twice: {sorted(n for n, *_ in seen['columns'] if [c[0] for c in seen['columns']].count(n) > 1)}")
    if names != set(expected["types"]):
        missing, extra = sorted(set(expected["types"]) - names), sorted(names - set(expected["types"]))
        problems.append(f"columns differ: missing {missing}, extra {extra}")
    for name, client_type, has_nulls in seen["columns"]:
        duck = expected["types"].get(name)
        if duck is None:
            continue
        allowed = accepted(mapping, duck, name == expected["partition"], has_nulls)
        if client_type not in allowed:
            problems.append(f"{name}: {client_type} (loopmeter: {duck}; expected {' or '.join(sorted(allowed))})")
    return problems


# ---- the warehouses and what loopmeter says of them ---------------------------------------------------
def build_demo(folder: Path) -> Path:
    folder.mkdir(parents=True)
    run_cli("demo", "--data", str(folder / "data"), "--quiet", warehouse=folder / "data" / "warehouse", cwd=folder,
            process=True)
    return folder / "data" / "warehouse"


def build_empty(folder: Path) -> Path:
    """A warehouse whose partitioned tables are empty: a run set whose one file is rejected, and an
    empty Forge export (each table one file at its root, the partition column inside)."""
    (folder / "results" / "raw" / "set-a").mkdir(parents=True)
    (folder / "results" / "raw" / "set-a" / "rejected.json").write_text("{}")
    (folder / "empty.jsonl").write_text("")
    warehouse = folder / "warehouse"
    run_cli("ingest", "forgeloop", str(folder / "results"), "--quiet", warehouse=warehouse, cwd=folder, check=3,
            process=True)
    run_cli("ingest", "forge", str(folder / "empty.jsonl"), "--quiet", warehouse=warehouse, cwd=folder, process=True)
    return warehouse


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory) -> dict[str, Path]:
    """`built`: a demo warehouse where `loopmeter demo` built it; `moved`: another, copied with its
    links to a new place, the original removed, one loopmeter command run on the copy; `empty`: the
    partitioned tables empty."""
    base = tmp_path_factory.mktemp("clients")
    with ThreadPoolExecutor(3) as pool:  # side by side, each command a process of its own
        built, origin, empty = pool.map(lambda build, folder: build(folder), [build_demo, build_demo, build_empty],
                                        [base / "built", base / "origin", base / "empty"])
    moved = base / "elsewhere" / "warehouse"
    shutil.copytree(origin, moved, symlinks=True)
    shutil.rmtree(base / "origin")
    run_cli("report", "tail", "--json", warehouse=moved)
    return {"built": built, "moved": moved, "empty": empty}


def partition_column(table_folder: Path) -> str | None:
    names = {entry.name.split("=", 1)[0] for entry in table_folder.iterdir() if entry.is_dir() and "=" in entry.name}
    assert len(names) <= 1, f"{table_folder}: partitioned by several columns {names}"
    return names.pop() if names else None


def loopmeter_answer(warehouse: Path) -> dict[str, dict]:
    """table -> rows, column types and partition column, as `loopmeter schema`/`loopmeter sql` give them."""
    tables: dict[str, dict] = {}
    for row in json.loads(run_cli("schema", "--json", warehouse=warehouse).stdout):
        tables.setdefault(row["table"], {"types": {}})["types"][row["column"]] = row["type"]
    assert tables, f"loopmeter schema lists no table in {warehouse}"
    counts = " UNION ALL ".join(f"SELECT '{name}' AS name, count(*) AS n FROM \"{name}\"" for name in sorted(tables))
    for row in json.loads(run_cli("sql", "--format", "json", counts, warehouse=warehouse).stdout):
        tables[row["name"]]["rows"] = row["n"]
    for name, table in tables.items():
        table["partition"] = partition_column(warehouse / name)
    return tables


@pytest.fixture(scope="module")
def expected(warehouses) -> dict[str, dict[str, dict]]:
    return {scenario: loopmeter_answer(warehouse) for scenario, warehouse in warehouses.items()}


def test_the_warehouses_have_partitioned_plain_and_empty_tables(expected, warehouses):
    """The cases every client is checked on are there: both partitioned tables, the others, and the
    partitioned tables empty (one file at the folder's root)."""
    for scenario in ("built", "moved"):
        tables = expected[scenario]
        assert {name: t["partition"] for name, t in tables.items() if t["partition"]} == {
            "runs": "run_set_id", "forge_events": "month", "forgeloop_documents": "run_set_id"}, scenario
        assert len(tables) > 20 and all(t["rows"] > 0 for name, t in tables.items() if t["partition"]), scenario
    empty = expected["empty"]
    for name in ("runs", "forge_events"):
        assert empty[name]["rows"] == 0 and empty[name]["partition"] is None
        assert [p.name for p in (warehouses["empty"] / name).iterdir()] == ["part-empty.parquet"]


# ---- running a client --------------------------------------------------------------------------------
def run_harness(python: Path | str, items: list[dict], *, cwd: Path | None = None, env: dict | None = None,
                timeout: float = 600) -> dict:
    """Run the items in one process of `python`, from `cwd` (a fresh empty folder by default)."""
    with tempfile.TemporaryDirectory(prefix="client-job-") as job, tempfile.TemporaryDirectory(prefix="client-cwd-") as fresh:
        scratch = Path(job)
        (scratch / "job.json").write_text(json.dumps(items))
        environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOOPMETER_WAREHOUSE")}
        environment.update(env or {})
        done = subprocess.run([str(python), "-c", HARNESS, str(scratch / "job.json"), str(scratch / "result.json")],
                              cwd=fresh if cwd is None else cwd, env=environment, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0 or not (scratch / "result.json").exists():
            raise AssertionError(f"{python} exited {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}")
        return json.loads((scratch / "result.json").read_text())


def items_for(code: str, expected: dict, warehouses: dict, *, select=lambda table: True, example: str = "runs",
              database: Path | None = None) -> list[dict]:
    """One item per scenario and table: the snippet about that table on that scenario's warehouse."""
    items = []
    for scenario, warehouse in warehouses.items():
        for table, answer in sorted(expected[scenario].items()):
            if not select(answer):
                continue
            items.append({"key": f"{scenario}/{table}", "table": table, "code": for_table(
                code, table, answer["partition"], example=example, warehouse=warehouse,
                database=str(database or warehouse / "loopmeter.duckdb") if EXAMPLE_DATABASE in code else None)})
    return items


def verdict(client: str, mapping: str, expected: dict, results: dict, *, tables_seen: set | None = None) -> None:
    """Fail with every table a client got wrong, by scenario; print what passed."""
    failures, passed = [], {}
    for key, seen in sorted(results["results"].items()):
        scenario, table = key.split("/", 1)
        found = problems_of(mapping, expected[scenario][table], seen)
        if found:
            failures.append(f"  {key}: " + "\n      ".join(found))
        else:
            passed.setdefault(scenario, []).append(table)
        if "views" in seen and set(seen["views"]) != set(expected[scenario]):
            failures.append(f"  {key}: the database's views {sorted(seen['views'])} are not the tables "
                            f"{sorted(expected[scenario])}")
    summary = ", ".join(f"{scenario} {len(tables)} tables" for scenario, tables in passed.items())
    seconds = sum(seen.get("seconds", 0) for seen in results["results"].values())
    print(f"{client} ({results.get('versions')}): passed {summary or 'nothing'}; {seconds:.1f} s in the snippets")
    assert not failures, (f"{client} {results.get('versions')} differs from loopmeter on "
                          f"{len(failures)} table(s):\n" + "\n".join(failures))


PROJECT_PYTHON = Path(sys.executable)


# ---- DuckDB: the database file ---------------------------------------------------------------------
def cached_venv(name: str, requirements: list[str], version_prefix: str) -> Path:
    """A venv of `requirements` in the cache, built once (rebuilt when the requirements change)
    and checked to hold a DuckDB of `version_prefix`."""
    venv = CACHE / name
    marker = venv / "loopmeter-requirements.txt"
    wanted = "\n".join(requirements) + "\n"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test worker may be building it
        if not (marker.exists() and marker.read_text() == wanted and (venv / "bin" / "python").exists()):
            shutil.rmtree(venv, ignore_errors=True)
            base_python = getattr(sys, "_base_executable", None) or shutil.which("python3")
            for command in ([base_python, "-m", "venv", str(venv)],
                            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *requirements]):
                done = subprocess.run(command, capture_output=True, text=True, timeout=900)
                if done.returncode != 0:
                    pytest.fail(f"could not make the venv {venv} ({' '.join(command)}):\n{done.stdout}\n{done.stderr}")
            marker.write_text(wanted)
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import duckdb; print(duckdb.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith(version_prefix), f"the venv {venv} holds DuckDB {version}"
    return venv


@pytest.fixture(scope="session")
def duckdb1() -> Path:
    """The latest DuckDB 1.x (Python and CLI) and SQLAlchemy 1.4 with duckdb-engine, as Superset pins
    them (not in `duckdb1`: another test of the suite keeps its own venv there)."""
    return cached_venv("clients-duckdb1", DUCKDB1_REQUIREMENTS, "1.")


@pytest.fixture(scope="session")
def duckdb14() -> Path:
    """The latest of DuckDB's 1.4 line (its long-term-support line, the oldest the page names)."""
    return cached_venv("clients-duckdb14", DUCKDB14_REQUIREMENTS, "1.4.")


def test_duckdb_python_reads_every_view(expected, warehouses):
    items = items_for(snippet("duckdb"), expected, warehouses)
    verdict("duckdb", "duckdb", expected, run_harness(PROJECT_PYTHON, items))


def test_duckdb_1x_reads_every_view_read_only(expected, warehouses, duckdb1):
    items = items_for(snippet("duckdb"), expected, warehouses)
    verdict("duckdb 1.x", "duckdb", expected, run_harness(duckdb1 / "bin" / "python", items))


def test_duckdb_1_4_reads_every_view_read_only(expected, warehouses, duckdb14):
    """The oldest DuckDB line the page says opens the database."""
    items = items_for(snippet("duckdb"), expected, warehouses)
    verdict("duckdb 1.4", "duckdb", expected, run_harness(duckdb14 / "bin" / "python", items))


def test_a_plain_duckdb_connect_reads_and_leaves_the_file_readable_by_1x(expected, warehouses, duckdb1, tmp_path):
    """`duckdb.connect(path)` without read_only (read-write, DuckDB's default), on copies of the
    database files: it reads every view, and DuckDB 1.x still opens the file after it."""
    code = snippet("duckdb")
    plain = code.replace(", read_only=True", "")
    assert plain != code and "read_only" not in plain
    copies = {}
    for scenario, warehouse in warehouses.items():  # the views name the warehouse's files by absolute paths
        copies[scenario] = tmp_path / scenario / "loopmeter.duckdb"
        copies[scenario].parent.mkdir()
        shutil.copy2(warehouse / "loopmeter.duckdb", copies[scenario])
    items = [item for scenario in warehouses for item in items_for(
        plain, expected, {scenario: warehouses[scenario]}, database=copies[scenario])]
    verdict("duckdb, plain connect", "duckdb", expected, run_harness(PROJECT_PYTHON, items))
    items = [item for scenario in warehouses for item in items_for(
        code, expected, {scenario: warehouses[scenario]}, database=copies[scenario])]
    verdict("duckdb 1.x after a read-write 2.x connection", "duckdb", expected,
            run_harness(duckdb1 / "bin" / "python", items))


def test_duckdb_cli_opens_the_database_read_only(expected, warehouses, duckdb1):
    """The page's command line, with DuckDB's 1.x CLI, a query at a time typed at its prompt."""
    command = snippet("duckdb-cli").strip()
    assert command.startswith("duckdb ") and EXAMPLE_DATABASE in command
    env = dict(os.environ, PATH=f"{duckdb1 / 'bin'}{os.pathsep}{os.environ['PATH']}")
    results = {"results": {}, "versions": {}}
    for scenario, warehouse in warehouses.items():
        line = command.replace(EXAMPLE_DATABASE, str(warehouse / "loopmeter.duckdb"))
        for table in sorted(expected[scenario]):
            typed = f'.mode json\nSELECT count(*) AS n FROM "{table}";\nDESCRIBE "{table}";\n'
            with tempfile.TemporaryDirectory(prefix="client-cwd-") as fresh:
                done = subprocess.run(["bash", "-c", line], input=typed, capture_output=True, text=True, env=env,
                                      cwd=fresh, timeout=120)
            outputs, text, position = [], done.stdout, 0
            while position < len(text.rstrip()):
                value, position = json.JSONDecoder().raw_decode(text, position)
                outputs.append(value)
                while position < len(text) and text[position].isspace():
                    position += 1
            if done.returncode != 0 or done.stderr.strip() or len(outputs) != 2:
                seen = {"error": (done.stderr.strip() or f"exit {done.returncode}, printed {done.stdout[:300]!r}")}
            else:
                seen = {"rows": outputs[0][0]["n"],
                        "columns": [[row["column_name"], row["column_type"], None] for row in outputs[1]]}
            results["results"][f"{scenario}/{table}"] = seen
    version = subprocess.run(["bash", "-c", "duckdb -version"], capture_output=True, text=True, env=env).stdout.strip()
    results["versions"] = {"duckdb-cli": version}
    verdict("duckdb CLI", "duckdb", expected, results)


def configured_database(name: str, pattern: str) -> str:
    match = re.search(pattern, snippet(name), re.M)
    assert match, f"the {name} settings on the page have no {pattern!r}"
    return match.group(1)


def test_dbeaver_settings_open_the_database_read_only(expected, warehouses, duckdb1):
    """DBeaver's DuckDB JDBC driver: the JDBC URL's path, read-only; done by DuckDB 1.x."""
    settings = snippet("dbeaver")
    assert re.search(r"^Driver properties:\s+duckdb\.read_only = true$", settings, re.M), settings
    path = configured_database("dbeaver", r"^JDBC URL:\s+jdbc:duckdb:(\S+)$")
    assert path == configured_database("dbeaver", r"^Path:\s+(\S+)$") == EXAMPLE_DATABASE
    items = items_for(snippet("duckdb"), expected, warehouses)
    verdict("DBeaver (DuckDB 1.x, read-only)", "duckdb", expected, run_harness(duckdb1 / "bin" / "python", items))


def test_metabase_settings_open_the_database_read_only(expected, warehouses, duckdb1):
    settings = snippet("metabase")
    assert re.search(r"^Establish a read-only connection:\s+on$", settings, re.M), settings
    assert configured_database("metabase", r"^Database file:\s+(\S+)$") == EXAMPLE_DATABASE
    items = items_for(snippet("duckdb"), expected, warehouses)
    verdict("Metabase (DuckDB 1.x, read-only)", "duckdb", expected, run_harness(duckdb1 / "bin" / "python", items))


def test_evidence_source_opens_the_database(expected, warehouses, duckdb1, tmp_path):
    """Evidence joins `filename` to the source's folder and opens it read-only, from the project's
    folder: the page's layout is made here (the warehouse linked where the page has it)."""
    connection = snippet("evidence")
    assert re.search(r"^type: duckdb$", connection, re.M), connection
    filename = configured_database("evidence", r"^\s+filename:\s+(\S+)$")
    assert not filename.startswith("/"), "Evidence joins filename to the source's folder: it must be relative"
    results = {"results": {}, "versions": {}}
    for scenario, warehouse in warehouses.items():
        home = tmp_path / scenario / "home" / "me"
        source = home / "reports" / "sources" / "loopmeter"
        source.mkdir(parents=True)
        (source / "connection.yaml").write_text(connection)
        (home / "loopmeter" / "data").mkdir(parents=True)
        (home / "loopmeter" / "data" / "warehouse").symlink_to(warehouse)
        database = os.path.normpath(os.path.join(source, filename))  # as Node's path.join
        assert os.path.exists(database), f"{filename} from {source} is not the warehouse's database"
        items = items_for(snippet("duckdb"), expected, {scenario: warehouse}, database=Path(database))
        seen = run_harness(duckdb1 / "bin" / "python", items, cwd=home / "reports")
        results["results"].update(seen["results"])
        results["versions"] = seen["versions"]
    verdict("Evidence (DuckDB 1.x, read-only)", "duckdb", expected, results)


def test_sqlalchemy_duckdb_engine_reflects_every_view(expected, warehouses):
    """SQLAlchemy and duckdb-engine as the project's test extra installs them."""
    items = items_for(snippet("sqlalchemy"), expected, warehouses)
    verdict("SQLAlchemy + duckdb-engine", "sqlalchemy", expected, run_harness(PROJECT_PYTHON, items))


def test_superset_stack_reflects_every_view(expected, warehouses, duckdb1):
    """The same snippet with Superset's pins: SQLAlchemy 1.4, DuckDB 1.x, duckdb-engine."""
    items = items_for(snippet("sqlalchemy"), expected, warehouses)
    verdict("Superset's SQLAlchemy + duckdb-engine", "sqlalchemy", expected,
            run_harness(duckdb1 / "bin" / "python", items))


# ---- the Parquet files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("client, mapping", [
    ("pandas", "pandas"),
    ("pyarrow-table", "pyarrow-table"),
    ("pyarrow-dataset", "pyarrow-dataset"),
    ("polars-read", "polars"),
    ("polars-scan", "polars"),
    ("polars-glob", "polars"),
])
def test_dataframe_libraries_read_every_table(client, mapping, expected, warehouses):
    items = items_for(snippet(client), expected, warehouses)
    verdict(client, mapping, expected, run_harness(PROJECT_PYTHON, items))


def test_polars_given_a_pattern_of_files_reads_what_is_inside_them(expected, warehouses):
    """Without `hive_partitioning=True` a glob gives the files' columns only: every column but the
    partition column (why the page adds it)."""
    code = snippet("polars-glob").replace(", hive_partitioning=True", "")
    assert "hive_partitioning" not in code
    items = items_for(code, expected, warehouses, select=lambda table: table["partition"] is not None)
    results = run_harness(PROJECT_PYTHON, items)
    for key, seen in results["results"].items():
        scenario, table = key.split("/", 1)
        answer = expected[scenario][table]
        assert "error" not in seen, (key, seen)
        assert {name for name, *_ in seen["columns"]} == set(answer["types"]) - {answer["partition"]}, key
        assert seen["rows"] == answer["rows"], key


def test_datafusion_external_tables_read_every_table(expected, warehouses):
    """CREATE EXTERNAL TABLE ... LOCATION '<folder>/': with PARTITIONED BY for the partitioned tables."""
    items = (items_for(snippet("datafusion-partitioned"), expected, warehouses,
                       select=lambda table: table["partition"] is not None)
             + items_for(snippet("datafusion"), expected, warehouses, example="scenarios",
                         select=lambda table: table["partition"] is None))
    verdict("DataFusion", "datafusion", expected, run_harness(PROJECT_PYTHON, items))


# ---- one machine is not enough: the folders copied to object storage (a local folder here) --------------
FAKE_AWS = """#!/usr/bin/env python3
# `aws s3 sync SRC s3://BUCKET/KEY`: the folder copied (links followed, as aws does) to $FAKE_S3/BUCKET/KEY
import os, shutil, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
assert args[:2] == ["s3", "sync"] and args[3].startswith("s3://"), sys.argv
shutil.copytree(args[2], os.path.join(os.environ["FAKE_S3"], args[3][len("s3://"):]), dirs_exist_ok=True)
"""


@pytest.fixture(scope="module")
def object_store(warehouses, tmp_path_factory) -> Path:
    """The page's copy to object storage, run on the built warehouse with `aws` answering from a folder."""
    base = tmp_path_factory.mktemp("object-store")
    (base / "bin").mkdir()
    (base / "bin" / "aws").write_text(FAKE_AWS)
    (base / "bin" / "aws").chmod(0o755)
    script = snippet("cluster-copy").replace(EXAMPLE_WAREHOUSE, str(warehouses["built"]))
    env = dict(os.environ, FAKE_S3=str(base / "s3"), PATH=f"{base / 'bin'}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, env=env, cwd=base, timeout=300)
    assert done.returncode == 0, done.stderr
    return base / "s3"


def on_object_store(code: str, store: Path) -> str:
    for scheme in ("s3a://", "s3://"):
        code = code.replace(f"{scheme}{EXAMPLE_BUCKET}/", f"{store / EXAMPLE_BUCKET}/")
    assert "s3" not in code.replace(str(store), ""), code
    return code


def cluster_items(code: str, prelude: str, expected: dict, store: Path, *, select=lambda table: True) -> list[dict]:
    items = []
    for table, answer in sorted(expected["built"].items()):
        if select(answer):
            body = on_object_store(for_table(code, table, answer["partition"]), store)
            items.append({"key": f"object-store/{table}", "table": table, "code": prelude.format(body=body, table=table)})
    return items


def test_object_store_copy_holds_every_table(expected, object_store):
    copied = {entry.name for entry in (object_store / EXAMPLE_BUCKET / "loopmeter").iterdir()}
    assert copied == set(expected["built"])


def test_duckdb_reads_the_tables_on_object_storage(expected, object_store):
    prelude = 'import duckdb\ncon = duckdb.connect()\ncon.execute("""{body}""")\n{table} = con.sql(\'SELECT * FROM "{table}"\')\n'
    items = cluster_items(snippet("cluster-duckdb"), prelude, expected, object_store)
    expected = dict(expected, **{"object-store": expected["built"]})
    verdict("DuckDB on object storage", "duckdb", expected, run_harness(PROJECT_PYTHON, items))


def test_datafusion_reads_the_partitioned_tables_on_object_storage(expected, object_store):
    prelude = 'from datafusion import SessionContext\nctx = SessionContext()\nctx.sql("""{body}""")\n{table} = ctx.table("{table}")\n'
    items = cluster_items(snippet("cluster-datafusion"), prelude, expected, object_store,
                          select=lambda table: table["partition"] is not None)
    expected = dict(expected, **{"object-store": expected["built"]})
    verdict("DataFusion on object storage", "datafusion", expected, run_harness(PROJECT_PYTHON, items))


# ---- Spark: one session for the module -------------------------------------------------------------------
def test_spark_reads_every_table(expected, warehouses, object_store):
    """spark.read.parquet(folder) for every table of both warehouses and of the object-store copy, in
    one local Spark session (Java needed: .ci/run installs it where it is missing)."""
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if os.environ.get("JAVA_HOME") else shutil.which("java")
    if not java or not Path(java).exists():
        pytest.fail("Spark needs a Java runtime and none is installed (no `java` on PATH, no JAVA_HOME): "
                    "install one (Debian: apt-get install -y default-jre-headless; .ci/run does as root)")
    items = items_for(snippet("spark"), expected, warehouses)
    items += cluster_items(snippet("cluster-spark"), "from pyspark.sql import SparkSession\n"
                           "spark = SparkSession.builder.getOrCreate()\n{body}", expected, object_store)
    env = {"SPARK_LOCAL_IP": "127.0.0.1",
           # no web UI, few shuffle partitions: a faster start and faster counts, reading unchanged
           "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --conf spark.sql.shuffle.partitions=2 pyspark-shell"}
    expected = dict(expected, **{"object-store": expected["built"]})
    verdict("Spark", "spark", expected, run_harness(PROJECT_PYTHON, items, env=env, timeout=900))


def test_every_snippet_of_the_page_is_run_here():
    """A snippet added to docs/clients.md without a test here would drift: every marked one is used."""
    source = Path(__file__).read_text()
    unused = [name for name in SNIPPETS if f'snippet("{name}")' not in source and f'"{name}"' not in source]
    assert not unused, f"docs/clients.md snippets no test runs: {unused}"
    fenced = len(re.findall(r"^```\w+$", DOC.read_text(), re.M))  # the layout sketch has no language
    assert fenced == len(SNIPPETS), "every fenced code block of docs/clients.md is a marked snippet"
