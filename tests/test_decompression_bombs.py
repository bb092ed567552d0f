"""A table file that expands far beyond its size when read (a decompression bomb) is named and never
read, whatever its footer says: what a reader decompresses and decodes is counted from the page
headers, which a footer cannot overrule."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import run_cli
from loopmeter.storage import conformance, pages

ROWS = 2_000_000  # 16 MB of int64 once read
FLOOR = 1 << 20


def _varint(value: int, width: int = 0) -> bytes:
    """Thrift compact's varint of `value`, padded with continuation bytes to `width` bytes."""
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value:
            break
        out[-1] |= 0x80
    while len(out) < width:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def _understate_footer(path: Path) -> None:
    """Rewrite the footer's sizes of the data once read (`RowGroup.total_byte_size`, and the column
    chunk's `total_uncompressed_size`: each an i64 field one after the one before) as 1000 bytes, in
    place, the footer's length unchanged."""
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[-8:-4], "little")
    footer_start = len(data) - 8 - length
    (total,) = [pq.ParquetFile(path).metadata.row_group(0).total_byte_size]
    honest = b"\x16" + _varint(total * 2)  # zigzag
    at = data.index(honest, footer_start)
    while at >= 0:  # the column chunk's uncompressed size (the one column's: the same number) too
        data[at:at + len(honest)] = b"\x16" + _varint(1000 * 2, len(honest) - 1)
        at = data.find(honest, at)
    path.write_bytes(bytes(data))
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    assert row_group.total_byte_size == row_group.column(0).total_uncompressed_size == 1000


def _bomb(path: Path, *, dictionary: bool, understated: bool) -> None:
    zeros = pa.table({"x": pa.array([0] * ROWS, pa.int64())})
    pq.write_table(zeros, path, compression="none" if dictionary else "zstd", use_dictionary=dictionary,
                   row_group_size=ROWS)
    if understated:
        _understate_footer(path)
    assert path.stat().st_size * 1000 < ROWS * 8


@pytest.mark.parametrize("dictionary, understated", [(False, False), (False, True), (True, False)],
                         ids=["zstd-footer-honest", "zstd-footer-understated", "run-length-encoded"])
def test_a_bomb_in_a_table_is_named_and_the_table_not_read(demo_warehouse, tmp_path, monkeypatch, dictionary,
                                                           understated):
    warehouse = tmp_path / "warehouse"
    shutil.copytree(demo_warehouse, warehouse, symlinks=True)
    partition = sorted((warehouse / "runs").iterdir())[0]
    bomb = partition / "part-09999.parquet"  # named as read: through the table's link
    _bomb(bomb, dictionary=dictionary, understated=understated)
    monkeypatch.setattr(conformance, "FLOOR", FLOOR)

    refused = run_cli("sql", "SELECT count(*) FROM runs", warehouse=warehouse, check=1)
    (line,) = refused.stderr.splitlines()
    size = bomb.stat().st_size
    assert line.startswith(f"loopmeter: error: {bomb}: expands to at least ")
    expanded = int(line.split("expands to at least ")[1].split(" bytes")[0].replace(",", ""))
    assert expanded > FLOOR  # counted until it passed the limit
    assert line.endswith(f"bytes when read, {expanded // size:,} times its size: not a file loopmeter wrote, and not "
                         "read; move it out of the warehouse and run the stage that writes runs again")


def test_the_page_headers_walked_are_every_page_pyarrow_wrote(tmp_path):
    """On ordinary files (several row groups and pages, nulls, lists, dictionaries, statistics),
    the pages walked hold every value the footer counts, and their headers and uncompressed data
    add up to the footer's uncompressed size of the column chunks, to the byte."""
    rows = 50_000
    table = pa.table({
        "n": pa.array([i if i % 7 else None for i in range(rows)], pa.int64()),
        "s": pa.array([f"scenario-{i % 13}" * (1 + i % 3) for i in range(rows)]),
        "l": pa.array([[f"x{i}", None] if i % 5 else None for i in range(rows)], pa.list_(pa.string())),
        "f": pa.array([i / 3 for i in range(rows)]),
    })
    for version in ("1.0", "2.0"):
        path = tmp_path / f"file-{version}.parquet"
        pq.write_table(table, path, row_group_size=20_000, data_page_size=4096, compression="zstd",
                       data_page_version=version)
        metadata = pq.ParquetFile(path).metadata
        chunks = [metadata.row_group(g).column(c) for g in range(metadata.num_row_groups)
                  for c in range(metadata.num_columns)]
        with open(path, "rb") as handle:
            walked = list(pages.walk(handle, metadata, os.path.getsize(path)))
        assert metadata.num_row_groups == 3 and len(walked) > 2 * len(chunks)
        assert sum(page.values for page in walked if not page.dictionary) == sum(chunk.num_values for chunk in chunks)
        assert sum(page.header + page.uncompressed for page in walked) == sum(chunk.total_uncompressed_size
                                                                              for chunk in chunks)


def _small_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.parquet"
    table = pa.table({"n": pa.array([i if i % 3 else None for i in range(3000)], pa.int64()),
                      "s": pa.array([f"v{i % 40}" for i in range(3000)])})
    pq.write_table(table, path, data_page_size=1024, compression="zstd")
    return path


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.integers(min_value=4), st.integers(min_value=0, max_value=255)),
                        min_size=1, max_size=8))
def test_page_headers_damaged_anyhow_end_the_walk_and_never_stop_it(tmp_path, changes):
    """Bytes changed anywhere before the footer (page headers among them): the walk ends, in a few
    steps a byte at most, with sizes or refusing the file (Malformed), never another exception."""
    path = _small_file(tmp_path)
    data = bytearray(path.read_bytes())
    metadata = pq.ParquetFile(path).metadata
    footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    for at, value in changes:
        data[4 + at % (footer_start - 4)] = value
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(bytes(data))
    walked = []
    with open(damaged, "rb") as handle:
        try:
            walked += pages.walk(handle, metadata, len(data))
        except pages.Malformed:
            pass
    assert len(walked) <= len(data)
    assert all(page.header > 0 and page.uncompressed >= 0 and page.values >= 0 for page in walked)


@given(header=st.binary(max_size=200))
def test_any_bytes_parse_as_a_page_header_or_are_refused(header):
    reader = pages._Reader(header)
    try:
        found = reader.struct(0, pages.WANTED)
    except pages.Malformed:
        return
    assert reader.position <= len(header)
    assert all(isinstance(value, int) for value in found.values())


def test_a_page_header_larger_than_one_read_is_read_whole():
    """A header whose statistics hold 300 KB (beyond the first read's 64 KiB): read again, larger."""
    import io

    def field(delta: int, kind: int) -> bytes:
        return bytes([delta << 4 | kind])

    def i32(value: int) -> bytes:
        return _varint(value << 1 if value >= 0 else (-value << 1) - 1)

    statistics = field(1, 8) + _varint(300_000) + b"m" * 300_000 + b"\x00"
    data_page = field(1, 5) + i32(7) + field(4, 12) + statistics + b"\x00"
    header = field(1, 5) + i32(0) + field(1, 5) + i32(5000) + field(1, 5) + i32(40) + field(2, 12) + data_page + b"\x00"
    window = pages._Window(io.BytesIO(header + b"\x00" * 40), len(header) + 40)
    assert window.page(0) == (len(header), 5000, 40, 7, False)


@pytest.mark.parametrize("header, why", [
    ("15000b28ffffffffffffff7f1100", "a map of booleans counting 2^63 (a byte each, so it ends)"),
    ("0584800815001500150000", "field id 65538 (Thrift cuts it to 2: out of its range)"),
    ("150015021580808080800100", "a compressed size with bit 40 set (beyond an i32)"),
    ("00", "no type and no sizes"),
    ("1500" + "1c" * 70 + "00" * 71 + "15021502", "nesting deeper than Thrift's 64"),
])
def test_a_page_header_a_reader_could_take_otherwise_is_refused(header, why):
    import io

    data = bytes.fromhex(header)
    with pytest.raises(pages.Malformed):
        pages._Window(io.BytesIO(data), len(data)).page(0)


class _Chunk:
    def __init__(self, data, dictionary=None, size=100, values=10):
        self.data_page_offset, self.dictionary_page_offset = data, dictionary
        self.total_compressed_size, self.num_values = size, values


class _Metadata:
    serialized_size = 100

    def __init__(self, *chunks):
        self.chunks, self.num_row_groups = chunks, 1

    def row_group(self, _):
        chunks = self.chunks

        class Group:
            num_columns = len(chunks)

            def column(self, index):
                return chunks[index]
        return Group()


@pytest.mark.parametrize("chunks, why", [
    ((_Chunk(0),), "data pages at byte 0 (the magic bytes)"),
    ((_Chunk(100, dictionary=2),), "a dictionary page at byte 2, which DuckDB takes as none"),
    ((_Chunk(100, dictionary=150),), "a dictionary page after the data pages' start"),
    ((_Chunk(4), _Chunk(50)), "two chunks over the same bytes"),
    ((_Chunk(4, size=2000),), "a chunk running into the footer"),
])
def test_column_chunks_a_reader_could_take_otherwise_are_refused(chunks, why):
    with pytest.raises(pages.Malformed):
        pages._chunks(_Metadata(*chunks), 1000)
    assert len(pages._chunks(_Metadata(_Chunk(4, size=96), _Chunk(100, size=792)), 1000)) == 2  # up to the footer


def test_a_dictionary_of_long_strings_repeated_by_every_value_is_a_bomb(tmp_path):
    """A 400 KB file of three dictionary-encoded columns, each value its dictionary's one 4,000
    byte entry: 3.6 GB once read, though its data pages and footer are small."""
    from loopmeter.storage import registry

    schema = registry.table("run_set_tiers").arrow_schema(False)
    rows, length = 300_000, 4000
    columns = [pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([f"x{i}" * (length // 2)]))
               for i in range(len(schema))]
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.Table.from_arrays(columns, names=schema.names), path, compression="zstd", store_schema=False)
    problem = conformance.file_problem("run_set_tiers", path)
    assert problem is not None and problem.startswith("expands to at least "), problem
    assert int(problem.split(" ")[4].replace(",", "")) > conformance.MAX_EXPANSION * path.stat().st_size
