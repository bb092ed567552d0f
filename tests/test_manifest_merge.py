"""The ingest manifest's merge: the rows kept and this ingest's, each sorted, merged a batch at a
time into the order one sort of them all gives (checked against Python's sort)."""
from __future__ import annotations

import pytest
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from loopmeter.forgeloop.manifest import merged

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
