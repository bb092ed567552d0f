"""Forge: event stores of a parallel coding-agent runner -> routing and survival numbers.

    store.py     a store (SQLite read-only, or JSON Lines) -> batches of rows
    ingest.py    a store -> forge_events and the per-event tables: the flow, the counts
    staging.py   batches -> checked, typed events (DuckDB) in scratch files
    write.py     the staged new events -> the per-event tables, summaries, forge_events
    derive.py    per-event tables -> forge_attempts, forge_decisions, forge_tasks
    routing.py   forge_tasks -> the observational and randomized tables (the seed's numbers)
    git.py       read-only, batched git queries
    survival.py  integrations, merges, git -> survival outcomes (recorded as events)
    reports.py   the documents, their text and their tables
    tables.py    every forge_* table and column, documented
    samples.py   sample stores and git repositories for the demo, tests and benchmarks

The input contract is docs/forge-format.md; the SQL lives in queries/forge_*.sql.
"""
