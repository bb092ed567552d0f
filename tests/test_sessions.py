"""The process's own DuckDB database (`sql.session`): sessions share what is attached or created,
keep what they register to themselves, and a large analysis closes the database behind it."""
from __future__ import annotations

import polars as pl
import pytest

from loopmeter import sql
from loopmeter.forgeloop import stage
from loopmeter.frames import Scannable, from_duckdb
from loopmeter.warehouse import Warehouse


@pytest.fixture
def fresh_database():
    sql.release()
    yield
    sql.release()


def test_sessions_share_the_database_and_keep_their_registrations(fresh_database):
    first, second = sql.session(), sql.session()
    try:
        first.register("frame", Scannable(pl.DataFrame({"a": [1, 2, 3]})))
        first.execute("ATTACH ':memory:' AS shared_here")
        assert from_duckdb(first.sql("SELECT sum(a) AS s FROM frame"))["s"].to_list() == [6]
        assert from_duckdb(first.sql("SELECT sum(a) AS s FROM frame"))["s"].to_list() == [6]  # read again
        assert second.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = 'shared_here'").fetchall() == [(1,)]
        with pytest.raises(Exception, match="frame"):
            second.sql("SELECT * FROM frame").fetchall()
    finally:
        first.execute("DETACH shared_here")
        first.close()
        second.close()


def test_a_large_analysis_closes_the_database_a_small_one_keeps_it(fresh_database, corpus_warehouse, monkeypatch):
    warehouse = Warehouse(corpus_warehouse)
    stage.compute(warehouse)
    assert sql._database is not None  # 525 runs: kept for the catalog and what follows
    monkeypatch.setattr(stage, "LARGE_ANALYSIS", 0)
    stage.compute(warehouse)
    assert sql._database is None
    with sql.session() as again:  # and a session after it opens another database
        assert again.execute("SELECT 42").fetchall() == [(42,)]


def test_a_release_waits_for_the_blocks_holding_the_database(fresh_database):
    import threading

    inside, released = threading.Event(), threading.Event()
    seen = []

    def build():  # as the catalog built beside an aggregate
        with sql.holding():
            work = sql.session()
            inside.set()
            released.wait(timeout=60)
            seen.append(work.execute("SELECT 1 + 1").fetchall())  # still open after the release
            work.close()

    thread = threading.Thread(target=build)
    thread.start()
    assert inside.wait(timeout=60)
    sql.release()
    assert sql._database is not None
    released.set()
    thread.join(timeout=60)
    assert seen == [[(2,)]]
    assert sql._database is None  # closed as the block ended
