"""Data survives close and reopen; derived indexes repair themselves; one owner per directory."""

from __future__ import annotations

import os
import pickle
import shutil
import uuid

import numpy as np
import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.model import uuids_of_hex


def open_mem(data_dir, **settings):
    return cerememory.open(data_dir, semantic="off", **settings)


def test_everything_survives_reopen(data_dir):
    with open_mem(data_dir) as mem:
        a = mem.store("the deploy key rotates on Monday", embedding=[1.0, 0.0]).record_id
        b = mem.store("Ana owns the key", store="semantic", associations=[
            {"target_id": str(a), "association_type": "semantic", "weight": 0.6}]).record_id
        raw = mem.store_raw("user: rotate it", session_id="s1").record_id
        mem.set_mode("perfect")
        mem.recall("deploy key")
    with open_mem(data_dir) as mem:
        assert mem.engine.repaired == []
        stats = mem.stats()
        assert stats.total_records == 2
        assert stats.total_associations == 1
        assert stats.vector_index_records == 1
        assert stats.recall_mode == "perfect"
        assert stats.total_recall_count == 1
        assert mem.inspect(a).access_count == 1
        assert mem.inspect(b).associations[0].target_id == a
        assert mem.recall("deploy key").memories[0].record.id == a
        assert mem.recall(embedding=[1.0, 0.1]).memories[0].record.id == a
        assert mem.raw_recall("rotate").records[0].id == raw


def test_vectors_read_at_first_use_see_every_change_since_open(data_dir, monkeypatch):
    """Opening leaves the vectors in storage; stores and forgets made before the first vector
    search are all in the index it reads then (two dimensions, one read each)."""
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((23, 8))
    with open_mem(data_dir) as mem:
        stored = mem.store_batch([{"content": {"blocks": [{"text": f"note {i}", "embedding": row.tolist()}]}}
                                  for i, row in enumerate(rows)]).results
        stored = [r.record_id for r in stored]
        wide = mem.store("a wider vector", embedding=[0.0, 1.0, 0.0]).record_id
    with open_mem(data_dir) as mem:
        gone = stored[-1]
        mem.forget(gone, confirm=True)
        late = mem.store("stored after the reopen", embedding=(-rows[0]).tolist()).record_id
        assert mem.recall(embedding=rows[-2].tolist(), limit=1).memories[0].record.id == stored[-2]
        assert mem.recall(embedding=(-rows[0]).tolist(), limit=1).memories[0].record.id == late
        assert mem.recall(embedding=rows[-1].tolist(), limit=3).memories[0].record.id != gone
        assert mem.recall(embedding=[0.0, 1.0, 0.1], limit=1).memories[0].record.id == wide
        assert mem.stats().vector_index_records == len(rows) + 1


def test_reopen_does_not_re_embed(data_dir):
    with open_mem(data_dir) as mem:
        mem.store("vector only", embedding=[0.0, 1.0, 0.0])
    with open_mem(data_dir) as mem:
        # the vector came back from DuckDB, bit for bit
        assert mem.stats().vector_index_records == 1
        hit = mem.recall(embedding=[0.0, 1.0, 0.0]).memories[0]
        assert hit.score_breakdown.vector == pytest.approx(1.0)


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_missing_or_damaged_text_index_is_rebuilt(data_dir, damage):
    with open_mem(data_dir) as mem:
        for i in range(30):
            mem.store(f"note {i} about penguins" if i == 7 else f"note {i}")
        mem.store_raw("raw penguin talk", session_id="s")
    index = data_dir / "index"
    if damage == "delete":
        shutil.rmtree(index)
    else:
        for path in (index / "records").iterdir():
            path.write_bytes(b"\x00garbage")
    with open_mem(data_dir) as mem:
        assert set(mem.engine.repaired) >= {"records"}
        assert [h.record.content.plain_text() for h in mem.recall("penguins").memories] == ["note 7 about penguins"]
        assert mem.raw_recall("penguin").records[0].content.plain_text() == "raw penguin talk"


def test_stale_index_after_crash_is_rebuilt(data_dir):
    with open_mem(data_dir) as mem:
        mem.store("first")
        stamp = (data_dir / "index" / "records.stamp.json").read_text()
        mem.store("second after the stamp")
    # as if the process died after the database commit but before the index commit
    (data_dir / "index" / "records.stamp.json").write_text(stamp)
    with open_mem(data_dir) as mem:
        assert mem.engine.repaired == ["records"]
        assert len(mem.recall("second").memories) == 1


def test_reindex_rebuilds_on_demand(data_dir):
    with open_mem(data_dir) as mem:
        for i in range(10):
            mem.store(f"item {i}")
        mem.store_raw("raw", session_id="s")
        seen = []
        counts = mem.reindex(lambda done, total: seen.append((done, total)))
        assert counts == {"records": 10, "journal": 1}
        assert seen[-1] == (1, 1)
        assert len(mem.recall("item", limit=20).memories) == 10


def test_second_opener_is_told_who_owns_the_directory(data_dir):
    with open_mem(data_dir):
        with pytest.raises(CMPError) as err:
            open_mem(data_dir)
    assert err.value.code is ErrorCode.DATA_DIR_LOCKED
    assert str(os.getpid()) in err.value.message
    assert "--server-url" in err.value.hint
    with open_mem(data_dir) as mem:  # released on close
        assert mem.stats().total_records == 0


def test_failed_open_releases_the_lock(data_dir):
    with pytest.raises(CMPError):
        cerememory.open(data_dir, semantic="on", embedder="http")  # http backend without a URL
    with open_mem(data_dir) as mem:
        assert mem.stats().total_records == 0


def test_ids_read_in_bulk_are_ordinary_uuids():
    ids = [uuid.uuid4() for _ in range(5)] + [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    made = uuids_of_hex([i.hex for i in ids])
    assert made == ids and [hash(i) for i in made] == [hash(i) for i in ids]
    assert {made[0]: 1}[ids[0]] == 1 and str(made[-1]) == str(ids[-1])
    assert pickle.loads(pickle.dumps(made)) == ids


def test_edges_read_over_the_heads_or_on_their_own_are_the_same(data_dir):
    """DuckDB numbers the ends of the edges by the records' place in the heads it just read;
    when the table no longer holds as many records, by the edges' own ends: the same edges."""
    from cerememory.storage.base import StoredHeads
    from cerememory.storage.duckdb import DuckDBBackend

    with open_mem(data_dir) as mem:
        ids = [r.record_id for r in mem.store_batch(
            [{"content": {"blocks": [{"text": f"turn {i}"}]}, "context": {"session_id": "s"}}
             for i in range(6)]).results]
        mem.store("a loner")
    backend = DuckDBBackend(data_dir)
    try:
        heads = backend.read.records.heads()
        fewer = StoredHeads(heads.ids[:-1], [column[:-1] for column in heads.values])

        def edges(columns):
            return sorted((columns.nodes[s], columns.nodes[t], kind)
                          for s, t, kind in zip(columns.source, columns.target, columns.type, strict=True))

        over_heads = backend.read.edges.load(heads)
        assert over_heads.nodes == heads.ids
        found = edges(over_heads)
        assert found == edges(backend.read.edges.load()) == edges(backend.read.edges.load(fewer))
        assert {(a, b) for a, b, _ in found} >= {(ids[i + 1], ids[i]) for i in range(5)}
    finally:
        backend.close()


def test_a_data_directory_from_before_the_counter_sequences_keeps_its_text_index(data_dir):
    """Schema 5 moves the text-index stamps into sequences; a directory written before it opens
    without a rebuild, and its stamps count on from where they were."""
    from cerememory.storage.duckdb.driver import DB_NAME, connect

    with open_mem(data_dir) as mem:
        for i in range(3):
            mem.store(f"note {i} about penguins")
        mem.store_raw("raw penguin talk", session_id="s")
    with connect(data_dir / DB_NAME) as db:  # back to schema 4: the counts in state rows
        db.execute("DROP SEQUENCE counter_records_seq; DROP SEQUENCE counter_journal_seq; "
                   "DELETE FROM schema_migrations WHERE version = 5; "
                   "INSERT INTO state VALUES ('records_seq', '3'), ('journal_seq', '1')")
    with open_mem(data_dir) as mem:
        assert mem.engine.repaired == []
        mem.store("a fourth penguin")
    with open_mem(data_dir) as mem:
        assert mem.engine.repaired == []
        assert len(mem.recall("penguins", limit=10).memories) == 4
        assert mem.engine.core.read.state.get("records_seq") == "4"
    assert '"seq": 4' in (data_dir / "index" / "records.stamp.json").read_text()


def test_a_write_rolled_back_after_drawing_its_number_leaves_the_indexes_agreeing(data_dir, monkeypatch):
    """A sequence's draw survives a rollback: the skipped number costs at most a rebuild, never
    a record missing from the text index or one that was not committed found in it."""
    with open_mem(data_dir) as mem:
        mem.store("penguins before the failure")

        def refuse(*args, **kwargs):
            raise CMPError(ErrorCode.INTERNAL_ERROR, "the audit entry could not be written", hint="test")

        with monkeypatch.context() as patch:
            patch.setattr(mem.engine.core, "intend_audits", refuse)
            with pytest.raises(CMPError):
                mem.store("penguins that were never stored")
        mem.store("penguins after the failure")
    with open_mem(data_dir) as mem:
        assert mem.engine.repaired == []  # the later write's number is the stamp of both
        texts = sorted(h.record.content.plain_text() for h in mem.recall("penguins", limit=10).memories)
        assert texts == ["penguins after the failure", "penguins before the failure"]
        assert mem.stats().total_records == 2
