"""The ingest manifest's merge: the rows kept and this ingest's, each sorted, merged a batch at a
time into the order one sort of them all gives (checked against Python's sort); and the table's
files an ingest takes as they are."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli
from loopmeter.forgeloop import manifest
from loopmeter.forgeloop.manifest import merged
from loopmeter.storage import Warehouse
from runs import run, write_tree

ROW = st.tuples(st.sampled_from(["run", "scenario"]), st.sampled_from(["/a", "/a/b", "/b", "/ä"]),
                st.text(alphabet="ab/._-é0", max_size=6))


def batches(rows: list[tuple], size: int):
    for start in range(0, len(rows), size):
        chunk = rows[start:start + size]
        yield pa.RecordBatch.from_pydict({"kind": [row[0] for row in chunk], "source_root": [row[1] for row in chunk],
                                          "path": [row[2] for row in chunk], "n": list(range(start, start + len(chunk)))})


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(ROW, max_size=80), st.lists(ROW, max_size=80), st.integers(1, 9), st.integers(1, 9))
def test_two_sorted_streams_merge_into_one_sort(kept, new, kept_batch, new_batch):
    kept, new = sorted(kept, key=lambda row: [part.encode() for part in row]), sorted(new, key=lambda row: [part.encode() for part in row])
    out = [row[:3] for frame in merged(batches(kept, kept_batch), batches(new, new_batch)) for row in frame.iter_rows()]
    assert out == sorted(kept + new, key=lambda row: [part.encode() for part in row])
    sizes = [frame.height for frame in merged(batches(kept, kept_batch), batches(new, new_batch))]
    assert all(0 < size <= kept_batch + new_batch for size in sizes)  # never more than a batch of each at once


# ---- the table on disk: files with no replaced row and no new row among their keys are kept -------
def _results(root: Path, run_set: str, runs: int) -> Path:
    documents = [run("s1", mode, index, 1000 + index, run_set=run_set)
                 for mode in ("direct", "forgeloopBalanced") for index in range(1, runs + 1)]
    return write_tree(root, documents, {"s1": "balanced"})


def _ingest(warehouse: Path, results: Path) -> None:
    run_cli("ingest", "forgeloop", str(results), "--scenarios", str(results / "scenarios"), "--quiet", warehouse=warehouse)


def _files(warehouse: Path) -> list[tuple[int, list[tuple]]]:
    """The manifest's files in order: each one's inode and rows."""
    found = []
    for path in Warehouse(warehouse).table_files("ingest_manifest"):
        rows = pq.read_table(path).to_pylist()
        found.append((os.stat(path).st_ino, [tuple(row[name] for name in NAMES) for row in rows]))
    return found


NAMES = ["kind", "source_root", "path", "run_set_id", "status", "size_bytes", "content_hash", "ingested_at"]


def _key(row: tuple) -> list[bytes]:
    return [part.encode() for part in row[:3]]


def test_an_ingest_rewrites_the_files_its_rows_sort_into_and_links_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "MERGE_ROWS", 6)  # files of a few rows: many of them
    monkeypatch.setattr(manifest, "IN_MEMORY_ROWS", 4)  # every ingest's rows spooled, as a large one's are
    warehouse = tmp_path / "w"
    for name in ("a", "c", "e"):
        _ingest(warehouse, _results(tmp_path / name, f"rs-{name}", 10))
        if name == "a":  # a first ingest writes its rows in parts too
            assert [len(rows) for _, rows in _files(warehouse)] == [6, 6, 6, 3]
    steps = [("b", lambda: _results(tmp_path / "b", "rs-b", 10)),  # a new source, between a and c
             ("c changed", lambda: _changed(tmp_path / "c")),  # c's rows replaced: one file changed, one gone
             ("f", lambda: _results(tmp_path / "f", "rs-f", 3))]  # after every other source
    for step, make in steps:
        before = _files(warehouse)
        assert len(before) > 6, step
        results = make()
        _ingest(warehouse, results)
        after = _files(warehouse)
        rows = [row for _, file_rows in after for row in file_rows]
        assert rows == sorted(rows, key=_key), step  # one sorted table, file after file
        roots = {str(results.resolve()), str((results / "scenarios").resolve())}
        mine = [row for row in rows if row[1] in roots]
        kept = [row for _, file_rows in before for row in file_rows if row[1] not in roots]
        assert [row for row in rows if row[1] not in roots] == kept, step  # every other row as it was
        assert mine and len({row[7] for row in mine}) == 1 and mine[0][7] > max(row[7] for row in kept), step  # this ingest's
        # a file of the last version is taken as it is exactly when no row of it is replaced and no new row sorts among its rows
        linked = {inode for inode, _ in after}
        for inode, file_rows in before:
            untouched = not any(row[1] in roots for row in file_rows) and not any(
                _key(file_rows[0]) <= _key(row) <= _key(file_rows[-1]) for row in mine)
            assert (inode in linked) == untouched, (step, file_rows[0][:3], file_rows[-1][:3])
        assert any(inode in linked for inode, _ in before), step


def _changed(results: Path) -> Path:
    first, second = sorted((results / "raw").rglob("run-*.json"))[:2]
    first.write_text(first.read_text().replace('"totalTokens": 1001', '"totalTokens": 1501'))
    second.unlink()
    return results
