"""Stored vectors: every acknowledged batch survives a `kill -9` (checkpoints included), and a data
directory written before the vectors were stored uncompressed opens with all of them.

The kill lands at a named crash point (tests/crashpoint.py) the child reaches right after each
acknowledged batch, never after a delay.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import cerememory
from cerememory.embed import normalise_rows
from cerememory.storage.duckdb.driver import DB_NAME, connect

from .conftest import clean_env
from .crashpoint import kill_at

DIM = 384
BATCH = 200  # records a batch: 300 KB of vectors, more than the child's checkpoint threshold
KILLED_AFTER = 12  # acknowledged batches when the kill lands

CHILD = r"""
import json, sys
import numpy as np
import cerememory
from cerememory import crashpoints

data_dir, acked_path, batch, dim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with cerememory.open(data_dir, semantic="off") as mem:
    # a checkpoint at (nearly) every commit, as a large memory has every few batches
    mem.engine.core.backend.database.reader().execute("SET GLOBAL checkpoint_threshold = '256KB'")
    with open(acked_path, "a") as acked:
        for b in range(10_000):
            rows = np.random.default_rng(b).standard_normal((batch, dim))
            answer = mem.store_batch([{"content": {"blocks": [{"text": f"b{b} r{i}", "embedding": row.tolist()}]}}
                                      for i, row in enumerate(rows)])
            acked.write(json.dumps({"batch": b, "ids": [str(r.record_id) for r in answer.results]}) + "\n")
            acked.flush()
            crashpoints.reached("test.vectors_acknowledged")
"""


def _expected(batch: int) -> np.ndarray:
    return normalise_rows(np.random.default_rng(batch).standard_normal((BATCH, DIM)))


def test_kill_9_after_vector_batches_loses_no_acknowledged_vector(tmp_path: Path) -> None:
    data_dir, acked_path, script = tmp_path / "data", tmp_path / "acked.jsonl", tmp_path / "child.py"
    script.write_text(CHILD)
    kill_at(f"test.vectors_acknowledged:{KILLED_AFTER}",
            [sys.executable, str(script), str(data_dir), str(acked_path), str(BATCH), str(DIM)],
            clean_env(tmp_path))
    acked = [json.loads(line) for line in acked_path.read_text().splitlines()]
    assert [a["batch"] for a in acked] == list(range(KILLED_AFTER))
    # checkpoints ran before the kill: most vectors were in the database file, not only its log
    assert (data_dir / DB_NAME).stat().st_size > KILLED_AFTER * BATCH * DIM * 4 // 2
    with cerememory.open(data_dir, semantic="off") as mem:
        index = mem.engine.core.vectors
        assert mem.stats().total_records == len(index) == KILLED_AFTER * BATCH
        for entry in acked:
            ids = [uuid.UUID(i) for i in entry["ids"]]
            found = index.rows(ids)[DIM]
            assert found[0] == ids  # every one, in the order asked
            np.testing.assert_allclose(found[1], _expected(entry["batch"]), atol=1e-6)
        last = acked[-1]
        hit = mem.recall(embedding=_expected(last["batch"])[7].tolist(), limit=1).memories[0]
        assert str(hit.record.id) == last["ids"][7]


def test_a_data_directory_with_compressed_vectors_opens_with_every_vector(data_dir: Path) -> None:
    """Schema 6 moves the vectors into an uncompressed column; a directory written before it
    keeps every vector, bit for bit, and new ones go into the new column."""
    rows = np.random.default_rng(5).standard_normal((30, 16))
    with cerememory.open(data_dir, semantic="off") as mem:
        ids = [r.record_id for r in mem.store_batch(
            [{"content": {"blocks": [{"text": f"heron {i}", "embedding": row.tolist()}]}}
             for i, row in enumerate(rows)]).results]
        before = mem.engine.core.vectors.rows(ids)[16][1]
    with connect(data_dir / DB_NAME) as db:  # back to schema 5: the vectors' column compressed as DuckDB likes
        db.execute("CREATE TABLE old_vectors (record_id UUID PRIMARY KEY, dim INTEGER NOT NULL, "
                   "model VARCHAR NOT NULL, vec BLOB NOT NULL); "
                   "INSERT INTO old_vectors SELECT * FROM vectors; DROP TABLE vectors; "
                   "ALTER TABLE old_vectors RENAME TO vectors; DELETE FROM schema_migrations WHERE version = 6")
        (sql,), = db.execute("SELECT sql FROM duckdb_tables() WHERE table_name = 'vectors'").fetchall()
        assert "COMPRESSION" not in sql
    with cerememory.open(data_dir, semantic="off") as mem:
        later = mem.store("a later heron", embedding=(-rows[0]).tolist()).record_id
        found = mem.engine.core.vectors.rows(ids)[16]
        assert found[0] == ids
        np.testing.assert_array_equal(found[1], before)
        assert mem.recall(embedding=(-rows[0]).tolist(), limit=1).memories[0].record.id == later
    with connect(data_dir / DB_NAME) as db:
        (sql,), = db.execute("SELECT sql FROM duckdb_tables() WHERE table_name = 'vectors'").fetchall()
        assert "vec BLOB USING COMPRESSION Uncompressed" in sql
        assert db.execute("SELECT count(*) FROM vectors").fetchall() == [(31,)]


@pytest.mark.parametrize("rows", [1, 9, 1000])
def test_vectors_stored_as_rows_come_back_bit_for_bit(data_dir: Path, rows: int) -> None:
    """A few rows go in as statement parameters, more as a scanned column: both store each
    row's float32 bytes, zero bytes at the end included."""
    matrix = np.random.default_rng(rows).standard_normal((rows, 8))
    matrix[:, -1] = 0.0
    with cerememory.open(data_dir, semantic="off") as mem:
        ids = [r.record_id for r in mem.store_batch(
            [{"content": {"blocks": [{"text": f"row {i}", "embedding": row.tolist()}]}}
             for i, row in enumerate(matrix)]).results]
        before = mem.engine.core.vectors.rows(ids)[8][1]
    assert not before[:, -1].any()
    with cerememory.open(data_dir, semantic="off") as mem:
        found = mem.engine.core.vectors.rows(ids)[8]
        np.testing.assert_array_equal(found[1], before)
