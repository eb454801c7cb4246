"""Recall's reinforcement is a change the database applies to the row it finds, so writers that
each hold their own copy of a record's head (a second process, a second node) never overwrite
one another's recalls."""

from __future__ import annotations

import pytest

import cerememory
from cerememory.dynamics import decay
from cerememory.model import StoreType
from cerememory.storage.duckdb import DuckDBBackend
from cerememory.stores.records import RecordStore, Reinforcement


def _recall(store: RecordStore, record_id, at: float) -> None:
    """What recall does to a record: the head in RAM first, then the queued change."""
    params = decay.DEFAULT_PARAMS[StoreType.EPISODIC]
    head = store.heads[record_id]
    before = (head.fidelity_base, head.stability, head.last_accessed_at)
    head.fidelity_base, head.stability = decay.reinforce(head.fidelity_base, at - head.last_accessed_at,
                                                         head.stability, params)
    head.access_count += 1
    head.last_accessed_at = at
    store.reinforced(Reinforcement(record_id, at, params.exponent, params.boost, decay.RECALL_FIDELITY_BOOST,
                                   before, (head.fidelity_base, head.stability)))


def test_two_writers_interleaved_reinforcements_of_one_record_both_count(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        record_id = mem.store("the deploy key rotates on mondays", store="episodic").record_id
    backend = DuckDBBackend(data_dir)
    try:
        first, second = RecordStore(backend.read.records), RecordStore(backend.read.records)  # two copies
        first.load()
        second.load()
        start = first.heads[record_id]
        base, stability = start.fidelity_base, start.stability
        _recall(first, record_id, clock.now + 3600)
        _recall(second, record_id, clock.now + 7200)
        with backend.transaction() as uow:
            first.flush_reinforcements(uow)
        with backend.transaction() as uow:
            second.flush_reinforcements(uow)
        row = backend.database.query("SELECT access_count, reinforcement_count, fidelity_base, stability, "
                                     "last_accessed_at FROM records WHERE id = ?", [str(record_id)])[0]
    finally:
        backend.close()
    params = decay.DEFAULT_PARAMS[StoreType.EPISODIC]
    base, stability = decay.reinforce(base, 3600, stability, params)
    base, stability = decay.reinforce(base, 3600, stability, params)  # the second recall, an hour later
    assert row[0] == 2 and row[1] == 2
    assert row[2] == pytest.approx(base, rel=1e-12) and row[3] == pytest.approx(stability, rel=1e-12)
    assert row[4] == clock.now + 7200


def test_recalls_survive_a_reopen_exactly(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        record_id = mem.store("the build cache lives in /var/cache/ci").record_id
        for _ in range(3):
            clock.advance(600)
            mem.recall("build cache")
        before = mem.inspect(record_id)
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        after = mem.inspect(record_id)
    assert after.access_count == before.access_count == 3
    assert after.fidelity == before.fidelity
