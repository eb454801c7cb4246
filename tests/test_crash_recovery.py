"""`kill -9` of a real `cerememory serve` in the middle of a stream of concurrent HTTP writes
(which the server commits in groups), in a plain and in an encrypted data directory: every
write the server acknowledged is there after the restart, with its vector in the vector index,
and the full-text indexes agree with the database (each acknowledged write is found by its text).

The kill lands at a fixed point of the stream, once a fixed number of writes were acknowledged;
writes still in flight then may or may not have been kept, and nothing is asserted of them.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import cerememory
from cerememory import CMPError
from cerememory.storage.crypto import Vault
from cerememory.storage.kdf import KdfParams
from cerememory.transport.client import Client

from .conftest import ServeProcess

PASSPHRASE = "correct horse battery staple"
WRITERS = 4
ACKNOWLEDGED_BEFORE_KILL = 40


@dataclass
class Acknowledged:
    """What the server answered with success, by kind: record id -> the unique word of its text."""

    records: dict[uuid.UUID, str] = field(default_factory=dict)
    raw: dict[uuid.UUID, str] = field(default_factory=dict)
    without_vector: set[uuid.UUID] = field(default_factory=set)  # of `records`
    writers_done: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add(self, kind: dict[uuid.UUID, str], pairs: list[tuple[uuid.UUID, str]]) -> None:
        with self.changed:
            kind.update(pairs)
            self.changed.notify_all()

    def writer_done(self) -> None:
        with self.changed:
            self.writers_done += 1
            self.changed.notify_all()

    def __len__(self) -> int:
        return len(self.records) + len(self.raw)


def _write_until_refused(url: str, writer: int, acked: Acknowledged) -> None:
    """Store (with a vector and without), batch-store and raw-store in turn, each text carrying
    a word no other text has."""
    try:
        with Client(url, timeout=30, retries=0) as client:
            for i in range(10_000):
                word = f"w{writer}n{i}crash"
                if i % 4 == 0:
                    rid = client.store(f"acknowledged note {word}", embedding=[1.0, float(writer), float(i)]).record_id
                    acked.add(acked.records, [(rid, word)])
                elif i % 4 == 3:  # no vector: a write of one statement, or of one shared by a few such
                    rid = client.store(f"acknowledged bare note {word}").record_id
                    acked.without_vector.add(rid)
                    acked.add(acked.records, [(rid, word)])
                elif i % 4 == 1:
                    words = [f"{word}a", f"{word}b"]
                    blocks = [[{"text": f"batch note {w}", "embedding": [0.5, 1.0]}] for w in words]
                    batch = client.store_batch([{"content": {"blocks": b}} for b in blocks])
                    acked.add(acked.records, [(r.record_id, w) for r, w in zip(batch.results, words, strict=True)])
                else:
                    rid = client.store_raw(f"user: raw turn {word}", session_id=f"s{writer}").record_id
                    acked.add(acked.raw, [(rid, word)])
    except CMPError:
        pass  # the server is gone
    finally:
        acked.writer_done()


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_kill_9_during_http_writes_loses_no_acknowledged_write(tmp_path: Path, encrypted: bool) -> None:
    data_dir = tmp_path / "data"
    env: dict[str, str] = {}
    if encrypted:
        Vault.create(data_dir, PASSPHRASE, KdfParams(time_cost=1, memory_cost_kib=8 * 1024))
        env["CEREMEMORY_PASSPHRASE"] = PASSPHRASE
    server = ServeProcess.serve(data_dir, tmp_path, **env)
    acked = Acknowledged()
    writers = [threading.Thread(target=_write_until_refused, args=(server.url, n, acked)) for n in range(WRITERS)]
    try:
        for thread in writers:
            thread.start()
        with acked.changed:
            acked.changed.wait_for(lambda: len(acked) >= ACKNOWLEDGED_BEFORE_KILL or acked.writers_done == WRITERS,
                                   timeout=300)
            reached = len(acked) >= ACKNOWLEDGED_BEFORE_KILL
        server.proc.kill()
        assert server.proc.wait(timeout=60) == -9
    finally:
        server.stop()
        for thread in writers:
            thread.join(timeout=60)
    assert reached, server.log_path.read_text()
    assert acked.records and acked.raw

    with cerememory.open(data_dir, semantic="off", encryption__passphrase=env.get("CEREMEMORY_PASSPHRASE")) as mem:
        engine = mem.engine
        assert set(acked.records) <= set(engine.core.records.heads)
        assert all(rid in engine.core.vectors for rid in acked.records if rid not in acked.without_vector)
        assert acked.without_vector
        assert engine.core.text.num_docs() == len(engine.core.records.heads)
        assert engine.core.raw_text.num_docs() == engine.core.journal.counts()[0]
        for rid, word in acked.records.items():
            hits = mem.recall(word, limit=5, reconsolidate=False, activation_depth=0).memories
            assert rid in [hit.record.id for hit in hits], word
        for rid, word in acked.raw.items():
            assert [r.id for r in mem.raw_recall(word).records] == [rid], word
        after = mem.store("written after the restart").record_id
        assert mem.recall("restart", reconsolidate=False).memories[0].record.id == after
