"""A full disk on a small tmpfs: STORAGE_FULL (507) instead of a bare 500, reads and health go on,
writes work again once space is freed (no restart), SIGTERM exits 0, nothing acknowledged is lost.

Mounting needs root, as CI has; elsewhere these tests are skipped.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.security.audit import AUDIT_FILE, verify
from cerememory.storage.duckdb.database import Database
from cerememory.storage.duckdb.tables import DuckTables

from .conftest import ServeProcess
from .test_write_transaction import record_columns

DISK_MB = 32


def fill(path: Path) -> None:
    """Write zeros to `path` until the disk is full."""
    with path.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == 28
    assert path.stat().st_size > 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs the tests as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def store(client: httpx.Client, text: str) -> httpx.Response:
    return client.post("/v1/encode", json={"content": {"blocks": [{"text": text}]}, "store": "semantic"})


def found(client: httpx.Client, word: str) -> list[str]:
    """The ids recall finds for a word no other record has."""
    hits = client.post("/v1/recall/query", json={"cue": {"text": word}, "recall_mode": "perfect",
                                                "reconsolidate": False, "activation_depth": 0})
    assert hits.status_code == 200, hits.text
    return [h["record"]["id"] for h in hits.json()["memories"]]


def test_a_full_disk_is_storage_full_and_the_server_recovers_without_a_restart(small_disk, tmp_path):
    data_dir = small_disk / "data"
    server = ServeProcess.serve(data_dir, tmp_path)
    acknowledged: dict[str, str] = {}  # record id -> its unique word
    filler = small_disk / "filler"
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for n in range(50):
                word = f"before{n}x"
                acknowledged[store(client, f"note {word} " + os.urandom(2000).hex()).json()["record_id"]] = word
            some_id, word = next(iter(acknowledged.items()))
            assert found(client, word) == [some_id]  # a search commits the text index: what it held stays searchable
            fill(filler)

            refused = None
            for n in range(100):  # a write can still fit in a page the files already have
                response = store(client, f"note full{n}x " + os.urandom(2000).hex())
                if response.status_code != 200:
                    refused = response
                    break
                acknowledged[response.json()["record_id"]] = f"full{n}x"
            assert refused is not None and refused.status_code == 507, refused and refused.text
            assert refused.json()["code"] == "STORAGE_FULL" and refused.json()["details"]["hint"]

            assert client.get("/health").status_code == 200  # reads go on
            assert client.get("/readiness").status_code == 200
            assert client.get("/v1/introspect/stats").json()["records_by_store"]["semantic"] == len(acknowledged)
            assert client.get(f"/v1/introspect/record/{some_id}").status_code == 200
            assert found(client, word) == [some_id]

            filler.unlink()  # space again: the same server writes again
            after = store(client, "note afterx written once space was freed")
            assert after.status_code == 200, after.text
            acknowledged[after.json()["record_id"]] = "afterx"
            for record_id, word in acknowledged.items():  # and its indexes hold every write
                assert found(client, word) == [record_id], word
            fill(filler)  # full again for the shutdown
    finally:
        code = server.stop()  # SIGTERM
    assert code == 0, server.log_path.read_text()[-3000:]
    filler.unlink()
    assert verify(data_dir / AUDIT_FILE).ok  # a cut-off entry was truncated away
    with cerememory.open(data_dir, semantic="off") as mem:
        for record_id, word in acknowledged.items():
            assert mem.inspect(record_id)
            hits = mem.recall(word, mode="perfect", reconsolidate=False, activation_depth=0).memories
            assert [str(h.record.id) for h in hits] == [record_id]


def test_a_failed_checkpoint_reopens_the_database_and_keeps_a_durable_commit(small_disk, caplog):
    """DuckDB invalidates its instance when a checkpoint fails for want of space; a commit it
    reports durable stands, the next write is STORAGE_FULL, and freed space needs no restart."""
    db = Database(small_disk / "db.duckdb")

    def write(count: int) -> list[str]:
        keys = [str(uuid.uuid4()) for _ in range(count)]
        with db.transaction() as tx:
            tx.execute("INSERT INTO state SELECT unnest(?::VARCHAR[]), repeat('v', 500)", [keys])
        return keys

    written = write(100)
    with db.transaction() as tx:
        tx.execute("SET checkpoint_threshold = '1KB'")  # every commit checkpoints
    filler = small_disk / "filler"
    fill(filler)
    os.truncate(filler, filler.stat().st_size - 1_300_000)  # room for the log, not for a checkpoint
    outcomes = []
    for _ in range(4):
        try:
            written += write(2000)
            outcomes.append("ok")
        except CMPError as exc:
            assert exc.code is ErrorCode.STORAGE_FULL
            outcomes.append("full")
    assert "full" in outcomes, outcomes
    assert any("reopened the database" in r.getMessage() for r in caplog.records), "no checkpoint failed"
    assert len(db.query("SELECT key FROM state")) == len(written)  # reads go on, durable commits kept
    filler.unlink()
    written += write(10)
    db.close()
    reopened = Database(small_disk / "db.duckdb")
    assert {k for (k,) in reopened.query("SELECT key FROM state")} == set(written)
    reopened.close()


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "in-a-transaction"])
def test_record_inserts_on_a_full_disk_keep_what_they_acknowledge_and_their_counter_rising(small_disk, alone,
                                                                                          caplog):
    """A lone record insert commits as it runs (test_write_transaction.py), one after another
    write inside a transaction: either way, on a disk too full to checkpoint, every insert
    acknowledged is kept, every one refused is not, and the counter each returns keeps rising."""
    db = Database(small_disk / "db.duckdb")
    with db.transaction() as tx:
        tx.execute("SET checkpoint_threshold = '1KB'")  # every commit checkpoints
    filler = small_disk / "filler"
    fill(filler)
    os.truncate(filler, filler.stat().st_size - 300_000)  # room for the log, not for many checkpoints
    stored: list[uuid.UUID] = []
    bumped: list[int | None] = []

    def insert() -> None:
        ids = [uuid.uuid4()]
        try:
            with db.transaction() as tx:
                tables = DuckTables(db, tx)
                if not alone:
                    tables.state.set("before", "x")
                columns = {**record_columns(ids), "body": [os.urandom(10_000)]}  # small enough to prepare
                value = tables.records.insert(columns, replace=False, bump="records_seq")
                assert tx.ended is alone
            stored.extend(ids)
            bumped.append(value)
        except CMPError as exc:
            assert exc.code is ErrorCode.STORAGE_FULL

    for _ in range(40):
        insert()
    assert len(stored) < 40
    assert any("reopened the database" in r.getMessage() for r in caplog.records), "no checkpoint failed"
    filler.unlink()
    for _ in range(3):
        insert()
    assert {i for (i,) in db.query("SELECT id FROM records")} == set(stored)
    assert len(bumped) == len(stored) and bumped == sorted(set(bumped))
    assert bumped[-1] == int(DuckTables(db).state.get("records_seq") or 0)
    db.close()
