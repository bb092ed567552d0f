"""How long creating an aggregate's worth of files takes, on a quiet file system and after
many files beside them were deleted (the README's performance section):

    python bench/file_creation.py [DIR]      (default: a new directory under the temp dir)

On ext4 without a journal the inode allocator skips, one by one, every inode freed in the
last minute or more (kernel: `recently_deleted`), so file creation slows down for a few
minutes after a large delete. Benchmarks that delete their outputs between runs see it.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

FILES = 1946  # the documents of `aggregate --full` at 100k runs
SIZE = 30_000  # bytes, about one document


def create(directory: str) -> tuple[float, float]:
    """Wall and system seconds to create FILES files of SIZE bytes in a new `directory`."""
    os.makedirs(directory)
    data = b"x" * SIZE
    start, before = time.perf_counter(), os.times()
    for index in range(FILES):
        with open(os.path.join(directory, f"f{index}.json"), "wb") as handle:
            handle.write(data)
    return time.perf_counter() - start, os.times().system - before.system


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="loopmeter-fs-")
    try:
        print("quiet file system:          %.3f s (system %.3f s)" % create(os.path.join(base, "quiet")))
        junk = os.path.join(base, "junk")
        os.makedirs(junk)
        for index in range(8000):
            open(os.path.join(junk, str(index)), "wb").close()
        shutil.rmtree(junk)
        time.sleep(2)  # a deletion counts from the next second on
        print("2 s after deleting 8,000:   %.3f s (system %.3f s)" % create(os.path.join(base, "after")))
    finally:
        if len(sys.argv) <= 1:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
