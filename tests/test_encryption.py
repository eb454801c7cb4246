"""Encryption at rest: no plaintext anywhere in the data directory, forget as a cryptographic
erase, wrong passphrases, rekey, and search that still works over keyed-hash tokens."""

from __future__ import annotations

import hashlib
import shutil
import struct
import uuid
from pathlib import Path

import duckdb
import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.storage.crypto import KEYSTORE, Vault
from cerememory.storage.kdf import KdfParams

PASSPHRASE = "correct horse battery staple"
CANARY = "zqxcanary"
VECTOR = [0.123456, 0.654321, 0.111111, 0.999999]
FAST_KDF = KdfParams(time_cost=1, memory_cost_kib=8 * 1024)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _leaks(root: Path, needle: bytes) -> list[str]:
    return [name for name, data in _files(root).items() if needle in data]


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    data_dir = tmp_path / "vault"
    Vault.create(data_dir, PASSPHRASE, FAST_KDF)
    return data_dir


def _open(data_dir: Path, passphrase: str | None = PASSPHRASE) -> cerememory.Memory:
    return cerememory.open(data_dir, semantic="off", encryption__passphrase=passphrase)


def _fill(mem: cerememory.Memory) -> str:
    record = mem.store(f"The {CANARY} runs a bakery in Lisbon", embedding=VECTOR,
                       metadata={"note": f"{CANARY} metadata"},
                       meta={"intent": f"{CANARY} intent", "rationale": f"because {CANARY}"}).record_id
    mem.store("Unrelated note about the weather")
    mem.store_raw(f"user said {CANARY} twice", session_id="s1")
    return record


def test_no_plaintext_reaches_any_file_and_everything_still_works(secret_dir):
    with _open(secret_dir) as mem:
        record = _fill(mem)
        assert [h.record.id for h in mem.recall(CANARY).memories] == [record]
        assert [h.record.id for h in mem.recall("running bakeries").memories] == [record]  # stemming survives
        assert mem.recall(embedding=VECTOR, limit=1).memories[0].record.id == record
        assert len(mem.dispatch("recall.raw_query", {"query": CANARY})["records"]) == 1
        mem.recall(CANARY)
    packed = struct.pack("<4f", *VECTOR)
    for needle in (CANARY.encode(), b"Lisbon", b"bakery", packed):
        assert _leaks(secret_dir, needle) == [], needle
    with _open(secret_dir) as mem:  # reopen: nothing to repair, everything readable
        assert mem.engine.repaired == []
        again = mem.inspect(record)
        assert again.content.blocks[0].text.startswith(f"The {CANARY}")
        assert again.metadata["note"] == f"{CANARY} metadata" and again.meta.intent == f"{CANARY} intent"
        assert mem.recall(embedding=VECTOR, limit=1).memories[0].record.id == record
        mem.reindex()
        assert [h.record.id for h in mem.recall(CANARY).memories] == [record]
    assert _leaks(secret_dir, CANARY.encode()) == []


def test_forget_erases_the_data_key_so_a_backup_cannot_be_read(secret_dir, tmp_path):
    with _open(secret_dir) as mem:
        record = _fill(mem)
    backup = tmp_path / "backup"
    shutil.copytree(secret_dir, backup)
    with _open(secret_dir) as mem:
        assert mem.forget([record], confirm=True).records_deleted == 1
    old = duckdb.connect(str(backup / "cerememory.duckdb"), read_only=True)
    sealed = old.execute("SELECT body FROM records WHERE id = ?", [str(record)]).fetchone()[0]
    old.close()
    current = Vault.unlock(secret_dir, PASSPHRASE)
    with pytest.raises(CMPError) as erased:
        current.open(record, sealed)
    assert erased.value.code is ErrorCode.RECORD_NOT_FOUND
    # the backup's own keystore still opens it: the erase is the keystore rewrite, nothing else
    assert CANARY.encode() in Vault.unlock(backup, PASSPHRASE).open(record, sealed)


def test_wrong_or_missing_passphrase_is_refused_and_changes_nothing(secret_dir):
    with _open(secret_dir) as mem:
        _fill(mem)
    before = {k: v for k, v in _files(secret_dir).items() if not k.endswith(".lock")}
    for passphrase in ("wrong", None):
        with pytest.raises(CMPError) as refused:
            _open(secret_dir, passphrase)
        assert refused.value.code is ErrorCode.UNAUTHORIZED and refused.value.hint
    after = {k: v for k, v in _files(secret_dir).items() if not k.endswith(".lock")}
    assert after == before


def test_rekey_changes_the_passphrase_without_touching_records(secret_dir):
    with _open(secret_dir) as mem:
        record = _fill(mem)
    keystore = (secret_dir / KEYSTORE).read_bytes()
    db_digest = hashlib.sha256((secret_dir / "cerememory.duckdb").read_bytes()).hexdigest()
    Vault.rekey(secret_dir, PASSPHRASE, "new passphrase", FAST_KDF)
    assert (secret_dir / KEYSTORE).read_bytes() == keystore
    assert hashlib.sha256((secret_dir / "cerememory.duckdb").read_bytes()).hexdigest() == db_digest
    with pytest.raises(CMPError):
        _open(secret_dir, PASSPHRASE)
    with _open(secret_dir, "new passphrase") as mem:
        assert mem.inspect(record).metadata["note"] == f"{CANARY} metadata"
    with pytest.raises(CMPError) as wrong:
        Vault.rekey(secret_dir, PASSPHRASE, "third")
    assert wrong.value.code is ErrorCode.UNAUTHORIZED


def test_encryption_is_chosen_at_creation(tmp_path):
    plain = tmp_path / "plain"
    with cerememory.open(plain, semantic="off") as mem:
        mem.store("kept in the clear")
    with pytest.raises(CMPError) as refused:
        Vault.create(plain, PASSPHRASE)
    assert "unencrypted data" in refused.value.message and "export" in refused.value.hint
    with pytest.raises(CMPError):
        Vault.create(tmp_path / "empty", "")


def test_cli_init_encrypt_store_recall_and_rekey(cli, data_dir):
    env = {"CEREMEMORY_PASSPHRASE": PASSPHRASE}
    created = cli("init", "--encrypt", "--json", env=env)
    assert created.code == 0, created.stdout + created.stderr
    assert created.json()["encrypted"] is True
    assert cli("store", f"{CANARY} in a CLI", "--json", env=env).code == 0
    hits = cli("recall", CANARY, "--json", env=env).json()["memories"]
    assert len(hits) == 1
    locked = cli("recall", CANARY, "--json")
    assert locked.code == 7 and locked.json()["error"]["code"] == "UNAUTHORIZED"
    again = cli("init", "--encrypt", "--json", env=env)
    assert again.code == 2 and "already encrypted" in again.json()["error"]["message"]
    rekeyed = cli("rekey", "--json", env={**env, "CEREMEMORY_NEW_PASSPHRASE": "second"})
    assert rekeyed.code == 0 and rekeyed.json()["rekeyed"] is True
    assert cli("recall", CANARY, "--json", env=env).code == 7
    assert len(cli("recall", CANARY, "--json", env={"CEREMEMORY_PASSPHRASE": "second"}).json()["memories"]) == 1
    assert _leaks(data_dir, CANARY.encode()) == []


def test_archives_move_memories_between_encrypted_and_plain_directories(secret_dir, tmp_path):
    with _open(secret_dir) as mem:
        record = _fill(mem)
        archive = mem.dispatch("lifecycle.export", {"include_raw_journal": True})["archive_data"]
    with cerememory.open(tmp_path / "plain", semantic="off") as plain:
        assert plain.dispatch("lifecycle.import", {"archive_data": archive})["records_imported"] == 2
        assert plain.inspect(record).metadata["note"] == f"{CANARY} metadata"
        assert plain.recall(embedding=VECTOR, limit=1).memories[0].record.id == record
    other = tmp_path / "other-vault"
    Vault.create(other, "another", FAST_KDF)
    with _open(other, "another") as mem:
        mem.dispatch("lifecycle.import", {"archive_data": archive})
        assert [h.record.id for h in mem.recall(CANARY).memories] == [record]
        replaced = mem.dispatch("lifecycle.import", {"archive_data": archive, "strategy": "replace"})
        assert replaced["records_imported"] == 2
    assert _leaks(other, CANARY.encode()) == []


def test_keys_left_behind_by_a_crash_are_erased_at_the_next_open(secret_dir):
    with _open(secret_dir) as mem:
        record = _fill(mem)
    Vault.unlock(secret_dir, PASSPHRASE).ensure_keys([uuid.uuid4()])  # a write that never committed
    before = (secret_dir / KEYSTORE).stat().st_size
    with _open(secret_dir) as mem:
        assert mem.inspect(record).id == record
    assert (secret_dir / KEYSTORE).stat().st_size < before
