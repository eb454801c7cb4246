"""The heads read at open stay columns until a record is asked for: the head made then is the
one every later reader sees and changes, and a reopened memory's heads are what was stored."""

from __future__ import annotations

import math
import threading
import uuid

import numpy as np

import cerememory
from cerememory.model import STORE_CODE, StoreType
from cerememory.storage.base import HEAD_COLUMNS
from cerememory.stores.columns import HeadColumns
from cerememory.stores.heads import Head, HeadTable


def _table(n: int) -> tuple[HeadTable, list[uuid.UUID]]:
    ids = [uuid.UUID(int=i + 1) for i in range(n)]
    stores = [StoreType.EPISODIC.value, StoreType.SEMANTIC.value]
    columns: dict[str, list] = {name: [float(i) for i in range(n)] for name in HEAD_COLUMNS}
    columns["store"] = [stores[i % 2] for i in range(n)]
    for name in ("access_count", "reinforcement_count", "version"):
        columns[name] = list(range(n))
    table = HeadTable()
    table.load(ids, [columns[name] for name in HEAD_COLUMNS])
    return table, ids


def test_a_head_is_made_once_and_changes_in_place_are_kept():
    table, ids = _table(10)
    assert len(table) == 10 and ids[3] in table and uuid.UUID(int=99) not in table
    head = table[ids[3]]
    assert (head.store, head.created_at, head.version) == (StoreType.SEMANTIC, 3.0, 3)
    head.stability = 42.0  # what a recall does to the head in RAM
    assert table.get(ids[3]) is head
    made = dict(table.items())  # every head made now; the one made earlier is kept
    assert made[ids[3]] is head and made[ids[3]].stability == 42.0
    assert [made[i].created_at for i in ids] == [float(i) for i in range(10)]
    assert table.get(uuid.UUID(int=99)) is None and table.get(ids[3]) is head and table[ids[5]] is made[ids[5]]


def test_store_codes_and_times_come_from_columns_and_made_heads_alike():
    table, ids = _table(4)
    table[ids[1]].created_at = 100.0  # made and changed
    replaced = Head(*(getattr(table[ids[0]], name) for name in HEAD_COLUMNS))
    replaced.store = StoreType.PROCEDURAL
    table.put_many([(ids[0], replaced)])
    table.discard_many([ids[2]])
    codes, created = table.stores_and_created([*ids, uuid.UUID(int=99)])
    assert codes.tolist() == [STORE_CODE[StoreType.PROCEDURAL], STORE_CODE[StoreType.SEMANTIC], -1,
                              STORE_CODE[StoreType.SEMANTIC], -1]
    assert created.tolist()[:2] == [0.0, 100.0] and created[3] == 3.0
    assert ids[2] not in table and len(table) == 3 and set(table) == {ids[0], ids[1], ids[3]}


def test_heads_asked_for_together_are_those_asked_for_one_by_one():
    table, ids = _table(6)
    made = table[ids[1]]  # one made before, the others made by the call
    table.discard_many([ids[4]])
    asked = [ids[5], uuid.UUID(int=99), ids[1], ids[4], ids[0], ids[0]]
    heads = table.get_many(asked)
    assert heads[2] is made and heads[1] is None and heads[3] is None and heads[4] is heads[5]
    assert heads == [table.get(i) for i in asked] and table.get_many([]) == []


def test_readers_racing_for_a_fresh_row_get_one_head():
    table, ids = _table(2000)
    seen: list[list[Head]] = [[], []]
    barrier = threading.Barrier(2)

    def read(out: list[Head]) -> None:
        barrier.wait()
        out.extend(table[i] for i in ids)

    threads = [threading.Thread(target=read, args=(out,)) for out in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(a is b for a, b in zip(*seen, strict=True))


def test_reopened_heads_are_what_was_stored_and_recall_strengthens_them(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        ids = [mem.store(f"note {i} about the harbour crane", store=store).record_id
               for i, store in enumerate(["episodic", "semantic", "procedural"])]
        hit = mem.store("the quarterly budget review with the team", store="episodic").record_id
        stored = {i: mem.inspect(i) for i in [*ids, hit]}
    clock.advance(86_400)
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        heads = mem.engine.core.records.heads
        assert len(heads) == 4
        for record_id, record in stored.items():
            again = mem.inspect(record_id)
            assert (again.store, again.created_at, again.version) == (record.store, record.created_at, record.version)
        before = heads[hit].access_count
        found = mem.recall("budget review", limit=1)
        assert [r.record.id for r in found.memories] == [hit]
        assert heads[hit].access_count == before + 1
        stability = heads[hit].stability
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        assert math.isclose(mem.engine.core.records.heads[hit].stability, stability)


def test_numpy_columns_give_python_values_and_a_null_number_comes_out_nan():
    ids = [uuid.UUID(int=1), uuid.UUID(int=2)]
    columns = {name: np.array([1.5, 2.5]) for name in HEAD_COLUMNS}
    columns["store"] = np.array([StoreType.EMOTIONAL.value, StoreType.EPISODIC.value], dtype=object)
    for name in ("access_count", "reinforcement_count", "version"):
        columns[name] = np.array([3, 4], dtype=np.int32)
    columns["fidelity_base"] = np.ma.masked_array([0.5, 0.0], mask=[False, True])
    table = HeadTable()
    table.load(ids, [columns[name] for name in HEAD_COLUMNS])
    head = table[ids[0]]
    assert head.store is StoreType.EMOTIONAL and type(head.version) is int and type(head.created_at) is float
    assert head.fidelity_base == 0.5 and math.isnan(table[ids[1]].fidelity_base)


def test_the_body_cache_is_warmed_after_the_first_recall_not_before(data_dir):
    with cerememory.open(data_dir, semantic="off") as mem:
        mem.store_batch([{"content": {"blocks": [{"text": f"crane log entry {i}"}]}} for i in range(50)])
    with cerememory.open(data_dir, semantic="off") as mem:
        cache = mem.engine.core.records.cache
        assert cache.bytes == 0  # opening read no body, and warming waits for the first recall
        mem.recall("crane log", limit=1)
        deadline = threading.Event()
        for _ in range(600):  # the warmer runs on its own thread: wait for it, however slow
            if len(cache.get_many(list(mem.engine.core.records.heads))) == 50:
                break
            deadline.wait(0.05)
        assert len(cache.get_many(list(mem.engine.core.records.heads))) == 50


def test_columns_of_unmade_rows_equal_those_of_made_heads():
    table, ids = _table(50)
    table[ids[7]].stability = 99.0  # made and changed
    replaced = Head(*(getattr(table[ids[8]], name) for name in HEAD_COLUMNS))
    replaced.store, replaced.created_at = StoreType.PROCEDURAL, 500.0
    table.put_many([(ids[8], replaced), (uuid.UUID(int=1000), replaced)])  # one replaced, one new
    table.discard_many([ids[9]])
    lazy = table.columns()
    made = HeadColumns.of(table.items())
    assert lazy.ids == made.ids and len(lazy) == 50 and lazy.row_of == made.row_of
    for name in ("codes", "created_at", "last_accessed_at", "stability", "emotion_intensity", "fidelity_base"):
        assert getattr(lazy, name).tolist() == getattr(made, name).tolist(), name
    assert lazy.newest([StoreType.PROCEDURAL], 5) == [ids[8], uuid.UUID(int=1000)]


def test_removed_rows_are_compacted_and_the_rest_keep_their_heads():
    table, ids = _table(5000)
    kept = ids[4500:]
    table.make_all()
    heads = {i: table[i] for i in kept}
    table.discard_many(ids[:4500])  # more removed rows than live ones: compacted
    assert len(table) == 500 and list(table) == kept and ids[0] not in table and table.get(ids[0]) is None
    assert all(table[i] is heads[i] for i in kept)
    again = Head(*(getattr(heads[kept[0]], name) for name in HEAD_COLUMNS))
    table.put_many([(ids[0], again), (kept[1], again)])  # one back, one replaced
    assert table[ids[0]] is again and table[kept[1]] is again and list(table) == [*kept, ids[0]]
    assert [h is again for _, h in table.items()][:2] == [False, True]
