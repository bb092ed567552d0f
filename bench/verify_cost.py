"""What verifying every table file of a warehouse costs, by its footer only and by its footer and
page headers (`storage/pages.py`), alternating twice in one run.

    python bench/verify_cost.py WAREHOUSE
"""
import os, sys, time
from pathlib import Path
from loopmeter.storage import conformance, pages
W = Path(sys.argv[1])
files = [(t, f) for t in sorted(os.listdir(W)) if (W / t).is_symlink() for f in sorted((W / t).rglob('*.parquet'))]
real = pages.expanded_size
for rep in range(2):
    for label, walk in (("footer only", lambda *_: 0), ("footer and page headers", real)):
        pages.expanded_size = walk
        t0 = time.perf_counter()
        for t, f in files:
            assert conformance.file_problem(t, f) is None
        print(f"{label}: {len(files)} files {time.perf_counter() - t0:.2f} s", flush=True)
