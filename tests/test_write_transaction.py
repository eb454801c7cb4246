"""The writer's transaction begins at its first statement, and a record (or journal) insert
that bumps a counter, with nothing written before it, runs on its own: a lone store is one
statement that commits as it runs. Whatever ran before it, the rows and the counter come out
the same."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import cerememory
from cerememory import CMPError
from cerememory.storage.base import HEAD_COLUMNS
from cerememory.storage.duckdb.database import Database
from cerememory.storage.duckdb.driver import duckdb
from cerememory.storage.duckdb.tables import DuckTables
from cerememory.storage.duckdb.transaction import WriteTransaction

INTEGER_COLUMNS = {"access_count", "reinforcement_count", "version"}


def record_columns(ids: list[uuid.UUID]) -> dict[str, list]:
    heads = {name: ["semantic" if name == "store" else 1 if name in INTEGER_COLUMNS else 0.5] * len(ids)
             for name in HEAD_COLUMNS}
    return {"id": ids, **heads, "body": [b"body"] * len(ids)}


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "x.duckdb")
    yield database
    database.close()


def counter(db: Database) -> int:
    return int(DuckTables(db).state.get("records_seq") or 0)


def test_a_lone_insert_runs_on_its_own_and_bumps_the_counter(db):
    before = counter(db)
    with db.transaction() as tx:
        bumped = DuckTables(db, tx).records.insert(record_columns([uuid.uuid4()]), replace=False,
                                                    bump="records_seq")
        assert tx.ended and not tx.begun  # no BEGIN was sent: the statement committed as it ran
        with pytest.raises(RuntimeError):  # nothing may follow it
            tx.execute("INSERT INTO state VALUES ('after', 'x')")
    assert bumped == counter(db) == before + 1
    assert db.query("SELECT count(*) FROM records") == [(1,)]
    assert db.query("SELECT count(*) FROM state WHERE key = 'after'") == [(0,)]


def test_after_another_write_the_insert_runs_inside_the_transaction(db):
    with db.transaction() as tx:
        tables = DuckTables(db, tx)
        tables.state.set("before", "x")
        bumped = tables.records.insert(record_columns([uuid.uuid4()]), replace=False, bump="records_seq")
        assert tx.begun and not tx.ended
    assert bumped == counter(db)
    assert db.query("SELECT count(*) FROM records") == [(1,)]
    with pytest.raises(ValueError), db.transaction() as tx:  # and it is rolled back with the rest
        tables = DuckTables(db, tx)
        tables.state.set("rolled back", "x")
        tables.records.insert(record_columns([uuid.uuid4()]), replace=False, bump="records_seq")
        raise ValueError("a failure after the insert")
    assert db.query("SELECT count(*) FROM records") == [(1,)]
    assert db.query("SELECT count(*) FROM state WHERE key = 'rolled back'") == [(0,)]


def test_a_batch_or_a_refused_lone_insert_keeps_the_rows_and_the_counter_right(db):
    ids = [uuid.uuid4() for _ in range(20)]
    with db.transaction() as tx:  # more rows than a prepared statement takes: two statements
        bumped = DuckTables(db, tx).records.insert(record_columns(ids), replace=False, bump="records_seq")
        assert tx.begun
    assert bumped == counter(db)
    with pytest.raises(CMPError), db.transaction() as tx:  # an id stored already: refused, nothing kept
        DuckTables(db, tx).records.insert(record_columns([uuid.uuid4(), ids[0]]), replace=False, bump="records_seq")
    assert db.query("SELECT count(*) FROM records") == [(20,)]
    with db.transaction() as tx:  # and the next lone insert goes on from the counter as it stands
        again = DuckTables(db, tx).records.insert(record_columns([uuid.uuid4()]), replace=False, bump="records_seq")
    assert again == counter(db) > bumped
    with db.transaction() as tx:  # a body too long to write as a literal: parameters, in a transaction
        columns = {**record_columns([uuid.uuid4()]), "body": [b"x" * 40_000]}
        long = DuckTables(db, tx).records.insert(columns, replace=False, bump="records_seq")
        assert tx.begun
    assert long == counter(db) > again
    assert db.query("SELECT count(*) FROM records") == [(22,)]


def test_lone_stores_keep_the_text_index_current_across_a_reopen(tmp_path):
    """The stamp a lone store (or journal write) draws in its one statement is the one its index
    keeps: a reopen finds both indexes current, and a session's turns (written beside their
    tail) link as before."""
    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        alone = [mem.store(f"lone penguin {i}").record_id for i in range(3)]
        turns = [uuid.UUID(mem.dispatch("encode.store", {"content": {"blocks": [{"text": f"turn penguin {i}"}]},
                                                         "context": {"session_id": "s"}})["record_id"])
                 for i in range(2)]
        raw = [mem.store_raw(f"raw penguin {i}", session_id="s", turn_id=None if i else "t0").record_id
               for i in range(2)]  # a null and a text in the same column, each in one statement
    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        assert mem.engine.repaired == []
        found = {h.record.id for h in mem.recall("penguin", mode="perfect", reconsolidate=False, limit=10).memories}
        assert found == {*alone, *turns}
        linked = {a.target_id for a in mem.inspect(turns[1]).associations}
        assert turns[0] in linked
        assert {r.id for r in mem.recall_raw(query="penguin").records} == set(raw)


def test_a_lone_insert_reported_durable_despite_its_checkpoint_stands_with_its_counter(db, monkeypatch):
    """DuckDB may report a commit durable although the checkpoint after it failed (its message
    for it, injected here after the statement ran): the row stands, the database is reopened,
    and the counter is read back instead of the answer lost with the error."""
    run_last = WriteTransaction.run_last

    def durable_then_failed(self: WriteTransaction, statement: str) -> Any:
        run_last(self, statement)
        raise duckdb.Error("Transaction COMMIT succeeded and is durable, but the autocheckpoint failed: disk full")

    record = uuid.uuid4()
    with monkeypatch.context() as patch:
        patch.setattr(WriteTransaction, "run_last", durable_then_failed)
        with db.transaction() as tx:
            bumped = DuckTables(db, tx).records.insert(record_columns([record]), replace=False, bump="records_seq")
    assert bumped == counter(db) == 1
    assert db.query("SELECT id FROM records") == [(record,)]
