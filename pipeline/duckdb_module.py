"""The `duckdb` module, for every part of loopmeter that uses it (`from ..duckdb_module import duckdb`).

It is imported with Ctrl-C held back (`interrupts.deferred`): DuckDB's native module calls back into
Python as it loads, to make its enums, and a KeyboardInterrupt raised there ends the process with an
abort instead of the command's one line. Held back, the Ctrl-C takes effect once the import is done.
"""
from __future__ import annotations

from .interrupts import deferred

with deferred():
    import duckdb

__all__ = ["duckdb"]
