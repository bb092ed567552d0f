"""Run snippets of docs/clients.md in one client's own process and write down what the client saw.

tests/test_clients.py runs this file's text as `python -c TEXT JOB RESULT` with the client's
interpreter (the project's, or one of its own venvs) in a fresh working directory, so that
nothing resolves against the repository. It uses the standard library only: the client is
whatever the snippets import.

JOB (JSON) is a list of items `{"key", "table", "code"}`. Each item's code is executed in a
namespace of its own; the variable named after the table is what the client made of it (a
DuckDB relation, an Arrow table or dataset, a pandas, polars, DataFusion or Spark frame, a
SQLAlchemy Table). RESULT (JSON) gets, per key, the rows and the columns (name, the client's
own name of the type, whether the column holds an empty value) or the error the snippet
raised, plus the versions of the client packages imported.
"""
from __future__ import annotations

import json
import sys
import time
import traceback

PACKAGES = ["duckdb", "duckdb-engine", "sqlalchemy", "pandas", "pyarrow", "polars", "datafusion", "pyspark"]


def _duckdb_relation(value, namespace, table):
    rows = value.aggregate("count(*)").fetchall()[0][0]
    columns = [[name, str(dtype), None] for name, dtype in zip(value.columns, value.types)]
    described = {"rows": rows, "columns": columns}
    connection = next((v for v in namespace.values() if type(v).__name__ == "DuckDBPyConnection"), None)
    on_a_file = connection is not None and connection.sql(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0]
    if on_a_file:  # what the database file holds: its views
        described["views"] = sorted(
            name for (name,) in connection.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall())
    return described


def _arrow_schema(schema):
    return [[field.name, str(field.type), None] for field in schema]


def _arrow_table(value, namespace, table):
    return {"rows": value.num_rows, "columns": _arrow_schema(value.schema)}


def _arrow_dataset(value, namespace, table):
    return {"rows": value.count_rows(), "columns": _arrow_schema(value.schema)}


def _pandas(value, namespace, table):
    columns = [[str(name), str(dtype), bool(value[name].isna().any())] for name, dtype in value.dtypes.items()]
    return {"rows": len(value), "columns": columns}


def _polars(value, namespace, table):
    import polars as pl

    if isinstance(value, pl.LazyFrame):
        schema = value.collect_schema()
        rows = value.select(pl.len()).collect().item()
    else:
        schema, rows = value.schema, value.height
    return {"rows": rows, "columns": [[name, str(dtype), None] for name, dtype in schema.items()]}


def _datafusion(value, namespace, table):
    return {"rows": value.count(), "columns": _arrow_schema(value.schema())}


def _spark(value, namespace, table):
    # counted afterwards, every frame in one job (spark_counts): a job a table is most of the time
    return {"rows": value, "columns": [[field.name, field.dataType.simpleString(), None] for field in value.schema.fields]}


def spark_counts(frames: dict) -> dict:
    """key -> rows of each Spark frame, in one job (one frame at a time if that job fails)."""
    from functools import reduce

    from pyspark.sql import functions as F

    try:
        union = reduce(lambda a, b: a.unionAll(b), [frame.select(F.lit(key).alias("key")) for key, frame in frames.items()])
        counted = dict(union.groupBy("key").count().collect())
        return {key: counted.get(key, 0) for key in frames}
    except Exception:
        counts = {}
        for key, frame in frames.items():
            try:
                counts[key] = frame.count()
            except Exception as error:
                counts[key] = f"{type(error).__name__}: {error}".splitlines()[0]
        return counts


def _sqlalchemy(value, namespace, table):
    from sqlalchemy import func, select

    engine = next(v for v in namespace.values() if type(v).__name__ == "Engine")
    with engine.connect() as connection:
        rows = connection.execute(select(func.count()).select_from(value)).scalar()
    return {"rows": rows, "columns": [[column.name, type(column.type).__name__, None] for column in value.columns],
            "views": sorted(__import__("sqlalchemy").inspect(engine).get_view_names())}


def describe(value, namespace, table):
    kind = (type(value).__module__.split(".")[0], type(value).__name__)
    if kind[1] == "DuckDBPyRelation":
        return _duckdb_relation(value, namespace, table)
    if kind[0] == "pyarrow" and kind[1] == "Table":
        return _arrow_table(value, namespace, table)
    if kind[0] == "pyarrow" and hasattr(value, "count_rows"):
        return _arrow_dataset(value, namespace, table)
    if kind[0] == "pandas":
        return _pandas(value, namespace, table)
    if kind[0] == "polars":
        return _polars(value, namespace, table)
    if kind[0] == "datafusion":
        return _datafusion(value, namespace, table)
    if kind[0] == "pyspark":
        return _spark(value, namespace, table)
    if kind[0] == "sqlalchemy":
        return _sqlalchemy(value, namespace, table)
    raise TypeError(f"the snippet left {table} as a {kind[0]}.{kind[1]}, which this harness cannot describe")


def main(job_path: str, result_path: str) -> None:
    with open(job_path) as handle:
        items = json.load(handle)
    results = {}
    for item in items:
        namespace = {"__name__": "__snippet__"}
        started = time.monotonic()
        try:
            exec(compile(item["code"], f"<snippet {item['key']}>", "exec"), namespace)
            if item["table"] not in namespace:
                raise NameError(f"the snippet defines no variable {item['table']}")
            results[item["key"]] = describe(namespace[item["table"]], namespace, item["table"])
            results[item["key"]]["seconds"] = round(time.monotonic() - started, 3)
        except Exception as error:  # the client's own error is the finding
            text = f"{type(error).__name__}: {error}".strip()
            lines = [line for line in text.splitlines() if line.strip()]
            results[item["key"]] = {"error": "\n".join(line[:400] for line in lines[:6]), "traceback": traceback.format_exc()[-3000:]}
    frames = {key: seen["rows"] for key, seen in results.items() if type(seen.get("rows")).__module__.startswith("pyspark")}
    if frames:
        for key, rows in spark_counts(frames).items():
            if isinstance(rows, int):
                results[key]["rows"] = rows
            else:
                results[key] = {"error": rows}
    from importlib import metadata

    versions = {}
    for package in PACKAGES:
        if package.replace("-", "_") in sys.modules:
            try:
                versions[package] = metadata.version(package)
            except metadata.PackageNotFoundError:
                pass
    with open(result_path, "w") as handle:
        json.dump({"results": results, "versions": versions, "python": sys.version.split()[0]}, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
