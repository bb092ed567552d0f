"""The storage layer: the warehouse folder, its tables, their catalog.

Its modules, from the bottom up (each imports only those above it in this list):

    registry       every table: columns, types (polars, Arrow, SQL from one map), documentation
    names          the identifier rule, and quoting of every name that enters SQL or a path
    files          regular files opened without following links, read with a bound; --out files
    state          `.state/`: a JSON file per thing remembered, read and written safely
    lock           the writer lock
    versions       table versions and the links that make one current
    folders        document folders replaced whole
    publish        publishing several tables and folders as one (the journal)
    conformance    what a version folder and its files must be before they are read
    writing        writing table files in their schema; TableBuilder
    rewrite        files of another schema rewritten by the next writer
    warehouse      the Warehouse: reading, writing, the lock, the marker
    duck           DuckDB sessions confined to the warehouse
    catalog        loopmeter.duckdb
    documentation  the schema for people
"""
from .warehouse import Warehouse

__all__ = ["Warehouse"]
