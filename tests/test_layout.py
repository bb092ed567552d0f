"""Every table file holds its table's one Arrow schema (pipeline/storage/registry.py), partitions are standard
Hive folders, and a file that differs is named when read and rewritten by the next writer."""
from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_cli
from loopmeter.storage import registry
from loopmeter.storage.conformance import file_problem
from loopmeter.storage import Warehouse

EXPECTED_TYPES = {"str": pa.string(), "i64": pa.int64(), "f64": pa.float64(), "bool": pa.bool_(),
                  "datetime": pa.timestamp("us", tz="UTC"), "list_str": pa.list_(pa.field("element", pa.string())),
                  "list_i64": pa.list_(pa.field("element", pa.int64())), "list_f64": pa.list_(pa.field("element", pa.float64()))}


def _tables(root: Path) -> list[str]:
    return sorted(entry.name for entry in root.iterdir() if entry.is_symlink() and not entry.name.startswith("."))


def test_every_file_of_the_demo_holds_its_table_s_declared_schema_and_partitions_are_hive_folders(demo_warehouse):
    tables = _tables(demo_warehouse)
    assert set(tables) == set(registry.tables())
    for table in tables:
        declared = [(name, EXPECTED_TYPES[dtype]) for name, dtype, _ in registry.table(table).columns]
        partition = registry.PARTITIONED.get(table)
        files = sorted((demo_warehouse / table).rglob("*.parquet"))
        assert files, table
        for file in files:
            metadata = pq.read_metadata(file).metadata
            assert b"ARROW:schema" not in metadata, file
            assert metadata[b"loopmeter.table"] == table.encode()
            in_folder = file.parent.name.startswith(f"{partition}=") if partition else False
            if partition:
                assert in_folder, f"{file}: a partitioned table's file lies in a {partition}=<value> folder"
            expected = [(name, kind) for name, kind in declared if not (in_folder and name == partition)]
            schema = pq.read_schema(file)
            assert [(field.name, field.type) for field in schema] == expected, file
            assert [str(field.type) for field in schema] == [str(kind) for _, kind in expected], file


def test_a_partitioned_table_reads_back_its_partition_column_from_the_folder_names(demo_warehouse):
    warehouse = Warehouse(demo_warehouse)
    runs = warehouse.read("runs")
    folders = sorted(path.name.split("=", 1)[1] for path in (demo_warehouse / "runs").iterdir())
    assert sorted(runs["run_set_id"].unique().to_list()) == folders
    assert runs.columns == [name for name, _, _ in registry.table("runs").columns]
    counts = dict(runs.group_by("run_set_id").len().iter_rows())
    for value in folders:
        (file,) = (demo_warehouse / "runs" / f"run_set_id={value}").glob("*.parquet")
        assert pq.read_metadata(file).num_rows == counts[value]
        assert warehouse.read_partition("runs", "run_set_id", value).height == counts[value]
    events = warehouse.read("forge_events", columns=["rid", "month", "ts"])
    assert events.columns == ["rid", "ts", "month"]  # the table's order
    assert (events["ts"].dt.strftime("%Y-%m") == events["month"]).all()


def _copy(demo_warehouse: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, copy, symlinks=True)
    return copy


def _store(demo_warehouse: Path) -> Path:
    return demo_warehouse.parent / "data" / "sample" / "forge" / "dataset.sqlite"


@pytest.mark.slow
def test_a_hand_written_file_is_named_with_its_column_and_types_and_the_next_ingest_rewrites_it(demo_warehouse, tmp_path):
    warehouse = _copy(demo_warehouse, tmp_path)
    before = run_cli("report", "routing", "--json", warehouse=warehouse).stdout
    (file,) = (warehouse / "forge_tasks").glob("*.parquet")
    pl.read_parquet(file).write_parquet(file)  # polars' own writer: large strings in its Arrow schema
    for command in (["report", "routing", "--json"], ["sql", "SELECT count(*) FROM forge_plans"]):
        refused = run_cli(*command, warehouse=warehouse, check=1)
        assert refused.stdout == ""
        (line,) = refused.stderr.splitlines()
        assert line.startswith(f"loopmeter: error: {file}: column run is large_string, forge_tasks declares string;")
        assert "rewrites it" in line
    stored = run_cli("ingest", "forge", str(_store(demo_warehouse)), warehouse=warehouse)
    notes = [line for line in stored.stderr.splitlines() if "rewritten in forge_tasks's schema" in line]
    assert len(notes) == 1 and "column run is large_string" in notes[0]
    for path in (warehouse / "forge_tasks").glob("*.parquet"):
        assert file_problem("forge_tasks", path) is None
    assert run_cli("report", "routing", "--json", warehouse=warehouse).stdout == before


@pytest.mark.slow
def test_a_partition_written_by_an_earlier_loopmeter_is_rewritten_by_the_next_writer_with_the_same_rows(demo_warehouse, tmp_path):
    warehouse = _copy(demo_warehouse, tmp_path)
    value = "sample-tail-30"
    (file,) = (warehouse / "runs" / f"run_set_id={value}").glob("*.parquet")
    rows = pl.read_parquet(file)
    # the earlier layout: the partition column inside the file too, first, and polars' large strings
    rows.select(pl.lit(value).alias("run_set_id"), pl.all()).write_parquet(file)
    refused = run_cli("report", "html", "--run-set", value, "--out", str(tmp_path / "r.html"), warehouse=warehouse, check=1)
    (line,) = refused.stderr.splitlines()
    assert f"{file}: column scenario_id is large_string, runs declares string;" in line
    aggregate = run_cli("aggregate", "--json", "--out", str(tmp_path / "out"), warehouse=warehouse)
    assert "rewritten in runs's schema" in aggregate.stderr
    (rewritten,) = (warehouse / "runs" / f"run_set_id={value}").glob("*.parquet")
    assert file_problem("runs", rewritten) is None
    assert pl.read_parquet(rewritten).equals(rows)
    assert Warehouse(warehouse).read_partition("runs", "run_set_id", value).height == rows.height
    pristine = _copy(demo_warehouse, tmp_path / "pristine")
    run_cli("aggregate", "--json", "--out", str(tmp_path / "expected"), warehouse=pristine)
    for document in sorted((tmp_path / "expected" / value).iterdir()):
        assert (tmp_path / "out" / value / document.name).read_bytes() == document.read_bytes()


def test_a_file_that_cannot_be_rewritten_without_changing_a_value_stops_the_writer_in_one_line(demo_warehouse, tmp_path):
    warehouse = _copy(demo_warehouse, tmp_path)
    (file,) = (warehouse / "forge_plans").glob("*.parquet")
    frame = pl.read_parquet(file)
    frame.with_columns(pl.format("rev-{}", "revision").alias("revision")).write_parquet(file)
    failed = run_cli("ingest", "forge", str(_store(demo_warehouse)), warehouse=warehouse, check=1)
    (line,) = failed.stderr.splitlines()
    assert f"{file}: column rid is large_string, forge_plans declares string" in line
    assert "column revision is String, forge_plans declares Int64" in line
    assert "cannot be rewritten" in line and "move it out of the warehouse" in line
    assert pl.read_parquet(file)["revision"].to_list()[:1] == [f"rev-{frame['revision'][0]}"]  # left as it was


@pytest.mark.parametrize("frame, message", [
    (pl.DataFrame({"repo": ["r"], "path": ["/p"], "source": ["s"]}), "column ingested_at is missing"),
    (pl.DataFrame({"repo": ["r"], "path": ["/p"], "source": ["s"], "ingested_at": [None], "extra": [1]}),
     "column extra is not a column of forge_repos"),
    (pl.DataFrame({"repo": [1], "path": ["/p"], "source": ["s"], "ingested_at": [None]}),
     "column repo is Int64, forge_repos declares String"),
])
def test_a_frame_that_is_not_its_table_s_is_refused_before_anything_is_written(tmp_path, frame, message):
    warehouse = Warehouse(tmp_path / "w")
    with pytest.raises(ValueError, match=message):
        warehouse.write_table("forge_repos", frame)
    assert not (tmp_path / "w" / "forge_repos").exists()


settings_ = settings(max_examples=40, deadline=None)
INTEGERS = [pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32, pl.Int64]


@pytest.mark.slow
@settings_
@given(values=st.lists(st.one_of(st.none(), st.integers(0, 2**31 - 1)), min_size=0, max_size=30),
       kind=st.sampled_from(INTEGERS), texts=st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=30, max_size=30))
def test_lossless_casts_are_made_and_every_reader_gets_the_declared_types_and_the_same_values(tmp_path_factory, values, kind, texts):
    values = [None if v is None else v % 127 if kind in (pl.Int8, pl.UInt8) else v % 32767 if kind in (pl.Int16, pl.UInt16) else v
              for v in values]
    frame = pl.DataFrame({"source": pl.Series(texts[:len(values)], dtype=pl.String),
                          "line": pl.Series(values, dtype=kind),
                          "rid": pl.Series([None] * len(values), dtype=pl.Null),
                          "field": pl.Series(texts[:len(values)], dtype=pl.String),
                          "rule": pl.Series(["r"] * len(values), dtype=pl.String),
                          "ingested_at": pl.Series([None] * len(values), dtype=pl.Datetime("ms", "UTC"))})
    warehouse = Warehouse(tmp_path_factory.mktemp("w"))
    warehouse.write_table("forge_rejections", frame)
    (file,) = (warehouse.root / "forge_rejections").glob("*.parquet")
    assert file_problem("forge_rejections", file) is None
    table = pq.read_table(file)
    assert table.column("line").to_pylist() == values
    assert table.column("source").to_pylist() == texts[:len(values)]
    import duckdb

    described = duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{file}')").fetchall()
    assert [(row[0], row[1]) for row in described] == [
        ("source", "VARCHAR"), ("line", "BIGINT"), ("rid", "VARCHAR"), ("field", "VARCHAR"), ("rule", "VARCHAR"),
        ("ingested_at", "TIMESTAMP WITH TIME ZONE")]
    back = warehouse.read("forge_rejections")
    assert back["line"].to_list() == values and back.schema["line"] == pl.Int64


def _damaged(data: bytes, damage: str) -> bytes:
    """A table file's bytes with one damage a copy, a disk or a hand can do to its footer."""
    length = int.from_bytes(data[-8:-4], "little")
    return {
        "tiny": data[:11],
        "no end magic": data[:-4] + b"PARX",
        "footer longer than the file": data[:-8] + (len(data) + 1).to_bytes(4, "little") + b"PAR1",
        "footer of 4 GiB": data[:-8] + (2**32 - 1).to_bytes(4, "little") + b"PAR1",
        "garbled footer": data[:-8 - length] + bytes(length) + data[-8:],
        "cut inside the footer": data[-8 - length // 2:],
    }[damage]


@pytest.mark.parametrize("damage", ["tiny", "no end magic", "footer longer than the file",
                                    "footer of 4 GiB", "garbled footer", "cut inside the footer"])
def test_a_damaged_footer_is_named_unreadable_and_pyarrow_refuses_it_too(demo_warehouse, tmp_path, damage):
    (good,) = (demo_warehouse / "runs" / "run_set_id=sample-tail-30").glob("*.parquet")
    assert file_problem("runs", good) is None
    damaged = tmp_path / "part-0.parquet"
    damaged.write_bytes(_damaged(good.read_bytes(), damage))
    assert file_problem("runs", damaged).startswith("cannot be read as Parquet (")
    with pytest.raises((OSError, ValueError)):  # what the footer check stands for: a reader gets no schema
        pq.ParquetFile(damaged).schema_arrow
