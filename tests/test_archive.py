"""CMA archives: lifecycle.export / lifecycle.import embedded, over the CLI, HTTP, gRPC and MCP.

A round trip must give back exactly what was stored (records with their fidelity state,
associations, vectors, raw journal); a damaged, truncated, tampered or wrong-key archive must be
refused with nothing imported, and so must one that asks for more key-derivation cost than the
server accepts; imports run one at a time; export paths must never escape, follow a link or
overwrite, and a server's exports stay in its export directory.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import struct
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.cmp import messages as m
from cerememory.storage import archive_crypto as crypto
from cerememory.storage import archive_format as fmt
from cerememory.storage.archive_gate import IMPORTS
from cerememory.storage.archive_paths import export_target, write_new
from cerememory.storage.crypto import KEYFILE, Vault
from cerememory.transport.client import Client
from cerememory.transport.grpc_client import GrpcClient
from cerememory.transport.grpc_server import build_grpc_server
from cerememory.v1 import cerememory_pb2 as pb
from cerememory.v1 import cerememory_pb2_grpc as pb_grpc

from .conftest import ServeProcess, ServerThread, clean_env

T0 = 1_760_000_000.0
KEY = "correct horse battery staple"


class Clock:
    """A clock the test moves by hand, shared by the engines it compares."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_mem(tmp_path: Path, clock: Clock) -> Iterator[Any]:
    """Open data directories under tmp_path by name; all are closed at the end."""
    opened: list[cerememory.Memory] = []

    def open_(name: str) -> cerememory.Memory:
        mem = cerememory.open(tmp_path / name, semantic="off", clock=clock)
        opened.append(mem)
        return mem

    yield open_
    for mem in opened:
        mem.close()


def populate(mem: cerememory.Memory, clock: Clock) -> dict[str, Any]:
    """Every kind of thing a data directory holds, with non-default decay and access state."""
    fact = mem.store("The deploy key rotates every Monday", store="semantic", embedding=[0.6, 0.8, 0.0],
                     meta={"intent": "remember the ops calendar", "rationale": "rotations break deploys"},
                     metadata={"team": "ops", "tags": ["security"]})
    clock.now += 3600
    event = mem.store("Lunch with Bob: we cut the Q3 roadmap to two projects", emotion="joy",
                      associations=[{"target_id": fact.record_id, "association_type": "semantic", "weight": 0.8}])
    rule = mem.store("Alice prefers tabs over spaces", store="procedural", embedding=[0.0, 1.0, 0.0])
    mem.store("The outage scared everyone", store="emotional", emotion="fear")
    mem.store("scratch: draft the release notes", store="working")
    mem.dispatch("encode.batch", {"infer_associations": True, "records": [
        {"content": {"blocks": [{"text": f"step {n} of the migration"}]}} for n in range(3)]})
    mem.dispatch("encode.store", {"content": {"blocks": [{"modality": "structured",
                                                         "data": list(b'{"host": "db-1", "port": 5432}')}]},
                                  "store": "semantic"})
    mem.store_raw("user: can you rotate the key?", session_id="chat-42", speaker="user")
    mem.store_raw("assistant: rotated", session_id="chat-42", speaker="assistant", visibility="private_scratch",
                  secrecy_level="secret", metadata={"tool": "vault"})
    clock.now += 86_400 * 3
    mem.dispatch("lifecycle.decay_tick", {})
    clock.now += 600
    mem.recall("deploy key rotates")  # reconsolidates: access counts and stability in RAM only
    return {"fact": fact.record_id, "event": event.record_id, "rule": rule.record_id}


def snapshot(mem: cerememory.Memory) -> dict[str, Any]:
    """Everything an import must reproduce, as comparable JSON-like values."""
    engine = mem.engine
    ids = sorted([*engine.core.records.heads, *(r.id for r in engine.core.working.records())])
    database = engine.core.backend.database
    edges = database.query("SELECT source_id, target_id, association_type, weight, created_at, "
                           "last_co_activation FROM associations ORDER BY ALL")
    stats = mem.stats()
    return {
        "records": {str(i): engine.core.get(i).model_dump(mode="json") for i in ids},
        "fidelity_base": {str(i): round(h.fidelity_base, 12) for i, h in engine.core.records.heads.items()},
        "raw": [r.model_dump(mode="json") for r in engine.core.journal.iter_all()],
        "vectors": database.query("SELECT record_id, dim, model, vec FROM vectors ORDER BY record_id"),
        "edges": [(str(s), str(t), k, w, round(c, 6), lc) for s, t, k, w, c, lc in edges],
        "graph": sorted((str(e.source), str(e.target), e.type, e.weight) for i in ids
                        for e in engine.core.graph.out_edges(i)),
        "counts": (stats.total_records, stats.records_by_store, stats.total_associations,
                   stats.vector_index_records, stats.raw_journal_records),
    }


def export(mem: cerememory.Memory, **request: Any) -> bytes:
    return mem.engine.lifecycle_export(m.ExportRequest(**request)).archive_data


def do_import(mem: cerememory.Memory, data: bytes, **request: Any) -> m.ImportResponse:
    return mem.engine.lifecycle_import(m.ImportRequest(archive_data=data, **request))


def lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines()]


def reseal(rows: list[dict[str, Any]]) -> bytes:
    """A plain archive with a correct footer over altered lines (to test more than the checksum)."""
    body = b"".join(fmt.dumps(r) for r in rows[:-1])
    return body + fmt.dumps({"kind": "footer", "lines": len(rows) - 2, "sha256": hashlib.sha256(body).hexdigest()})


# ---------------------------------------------------------------- round trip


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_round_trip_into_an_empty_dir_is_identical(open_mem, clock: Clock, encrypt: bool) -> None:
    source = open_mem("source")
    populate(source, clock)
    key = {"encryption_key": KEY} if encrypt else {}
    data = export(source, include_raw_journal=True, encrypt=encrypt, **key)
    assert data.startswith(b'{"kind":"encrypted"' if encrypt else b'{"kind":"header"')

    target = open_mem("target")
    response = do_import(target, data, **({"decryption_key": KEY} if encrypt else {}))
    assert (response.records_imported, response.raw_records_imported, response.records_skipped) == (9, 2, 0)
    expected = snapshot(source)
    assert snapshot(target) == expected
    assert expected["vectors"] and expected["edges"] and expected["raw"]
    # exporting the copy gives the same record lines (only the archive id and time differ)
    again = export(target, include_raw_journal=True)
    assert lines(again)[1:-1] == lines(export(source, include_raw_journal=True))[1:-1]

    # the indexes answer too: full text (records and journal), vectors, the graph
    assert target.recall("roadmap projects").memories[0].record.content.plain_text().startswith("Lunch with Bob")
    assert target.raw_recall("rotate", session_id="chat-42").records
    by_vector = target.recall(embedding=[0.0, 1.0, 0.0], limit=1).memories
    assert by_vector[0].record.content.plain_text() == "Alice prefers tabs over spaces"


def test_header_and_footer_describe_the_archive(open_mem, clock: Clock) -> None:
    mem = open_mem("source")
    populate(mem, clock)
    response = mem.engine.lifecycle_export(m.ExportRequest(stores=["semantic", "procedural"]))
    rows = lines(response.archive_data)
    header, footer = rows[0], rows[-1]
    assert header["format"] == "cma" and header["version"] == "3.0" and header["archive_id"] == response.archive_id
    assert header["stores"] == ["semantic", "procedural"] and header["include_raw_journal"] is False
    assert header["counts"] == {"records": 3, "by_store": {"semantic": 2, "procedural": 1}, "raw_journal": 0}
    assert {r["record"]["store"] for r in rows[1:-1]} == {"semantic", "procedural"}
    assert footer["kind"] == "footer" and footer["lines"] == 3
    body = response.archive_data[:response.archive_data.rindex(b"\n", 0, -1) + 1]
    assert footer["sha256"] == hashlib.sha256(body).hexdigest()
    assert response.checksum == hashlib.sha256(response.archive_data).hexdigest()
    assert response.size_bytes == len(response.archive_data) and response.record_count == 3


# ---------------------------------------------------------------- strategies and conflicts


def test_merge_keeps_what_is_stored_and_replace_swaps_the_archived_stores(open_mem, clock: Clock) -> None:
    source = open_mem("source")
    ids = populate(source, clock)
    data = export(source, stores=["semantic", "procedural"], include_raw_journal=True)

    merged = open_mem("merged")
    local = merged.store("a local episode", store="episodic")
    local_fact = merged.store("a local fact", store="semantic",
                              associations=[{"target_id": local.record_id, "association_type": "causal",
                                             "weight": 0.5}])
    merged.store_raw("local journal", session_id="here")
    do_import(merged, data)
    stats = merged.stats()
    assert stats.records_by_store["semantic"] == 3 and stats.records_by_store["episodic"] == 1
    assert stats.raw_journal_records == 3
    merged.inspect(local_fact.record_id)

    replaced = open_mem("replaced")
    kept = replaced.store("an episode outside the archive's stores", store="episodic")
    gone = replaced.store("a fact the archive replaces", store="semantic",
                          associations=[{"target_id": kept.record_id, "association_type": "causal",
                                         "weight": 0.5}])
    pointing = replaced.store("an episode pointing at the replaced fact", store="episodic",
                              associations=[{"target_id": gone.record_id, "association_type": "causal",
                                             "weight": 0.5}])
    replaced.store_raw("journal that the archive replaces", session_id="old")
    response = do_import(replaced, data, strategy="replace")
    assert response.records_imported == 3
    stats = replaced.stats()
    assert stats.records_by_store == {**stats.records_by_store, "semantic": 2, "procedural": 1, "episodic": 2}
    with pytest.raises(CMPError) as err:
        replaced.inspect(gone.record_id)
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND
    assert replaced.inspect(pointing.record_id).associations == []  # its target is gone
    assert [r.session_id for r in replaced.raw_recall(limit=10, include_private_scratch=True,
                                                      secrecy_levels=["public", "secret"]).records] == ["chat-42"] * 2
    assert replaced.inspect(ids["fact"]).content.plain_text() == "The deploy key rotates every Monday"
    assert not replaced.recall("replaces").memories or all(
        "replaces" not in hit.record.content.plain_text() for hit in replaced.recall("replaces").memories)


def test_replace_without_the_journal_keeps_the_journal(open_mem, clock: Clock) -> None:
    source = open_mem("source")
    populate(source, clock)
    target = open_mem("target")
    target.store_raw("stays", session_id="mine")
    do_import(target, export(source), strategy="replace")
    assert target.stats().raw_journal_records == 1 and target.stats().total_records == 9


@pytest.mark.parametrize(("conflict", "newer", "expected"), [
    ("keep_existing", "stored", "stored version"),
    ("keep_existing", "archived", "stored version"),
    ("keep_imported", "stored", "archived version"),
    ("keep_imported", "archived", "archived version"),
    ("keep_newer", "stored", "stored version"),
    ("keep_newer", "archived", "archived version"),
])
def test_conflict_resolution(open_mem, clock: Clock, conflict: str, newer: str, expected: str) -> None:
    source = open_mem("source")
    record = source.store("first version", store="semantic").record_id
    raw = source.store_raw("first raw", session_id="s").record_id
    target = open_mem("target")
    do_import(target, export(source, include_raw_journal=True))

    first, second = (target, source) if newer == "archived" else (source, target)
    clock.now += 60
    first.update(record, text=f"{'stored' if first is target else 'archived'} version")
    clock.now += 60
    second.update(record, text=f"{'stored' if second is target else 'archived'} version")
    response = do_import(target, export(source, include_raw_journal=True), conflict_resolution=conflict)

    assert target.inspect(record).content.plain_text() == expected
    assert response.records_imported + response.raw_records_imported + response.records_skipped == 2
    assert target.stats().total_records == 1 and target.stats().raw_journal_records == 1
    assert target.recall(expected.split()[0]).memories[0].record.id == record  # the text index follows
    assert target.raw_recall(record_ids=[raw]).records[0].content.plain_text() == "first raw"


def test_keep_newer_keeps_the_stored_record_on_a_tie(open_mem, clock: Clock) -> None:
    source = open_mem("source")
    record = source.store("same instant", store="semantic").record_id
    target = open_mem("target")
    do_import(target, export(source))
    response = do_import(target, export(source))
    assert (response.records_imported, response.records_skipped) == (0, 1)
    assert target.inspect(record).content.plain_text() == "same instant"


# ---------------------------------------------------------------- refused archives


def _assert_untouched(mem: cerememory.Memory, before: dict[str, Any], data: bytes, code: ErrorCode,
                      reason: str | None, **request: Any) -> CMPError:
    for strategy in ("merge", "replace"):
        with pytest.raises(CMPError) as err:
            do_import(mem, data, strategy=strategy, **request)
        assert err.value.code is code, err.value
        if reason is not None:
            assert err.value.details["reason"] == reason, err.value
        assert err.value.hint
        assert snapshot(mem) == before
    return err.value


@pytest.fixture
def archives(open_mem, clock: Clock) -> dict[str, Any]:
    source = open_mem("source")
    populate(source, clock)
    target = open_mem("target")
    target.store("already here", store="semantic")
    target.store_raw("journal already here", session_id="mine")
    return {"plain": export(source, include_raw_journal=True),
            "sealed": export(source, include_raw_journal=True, encrypt=True, encryption_key=KEY),
            "target": target, "before": snapshot(target)}


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def test_truncated_plain_archives_are_refused(archives: dict[str, Any]) -> None:
    data, target, before = archives["plain"], archives["target"], archives["before"]
    cut_after_line = data[:data.index(b"\n", data.index(b"\n") + 1) + 1]
    for cut in (data[:len(data) // 2], data[:-1], data[:data.rindex(b"\n", 0, -1) + 1], cut_after_line):
        _assert_untouched(target, before, cut, ErrorCode.IMPORT_CONFLICT, "truncated")
    _assert_untouched(target, before, b"", ErrorCode.IMPORT_CONFLICT, "truncated")


def test_tampered_plain_archives_are_refused(archives: dict[str, Any]) -> None:
    data, target, before = archives["plain"], archives["target"], archives["before"]
    in_record = data.index(b"The deploy key")
    _assert_untouched(target, before, _flip(data, in_record), ErrorCode.IMPORT_CONFLICT, "checksum")
    footer_digest = data.rindex(b'"sha256":"') + 12
    _assert_untouched(target, before, _flip(data, footer_digest), ErrorCode.IMPORT_CONFLICT, "checksum")
    rows = lines(data)
    dropped = reseal(rows[:3] + rows[4:])  # a valid checksum, but a record missing
    _assert_untouched(target, before, dropped, ErrorCode.IMPORT_CONFLICT, "counts")


def test_an_invalid_record_late_in_the_archive_imports_nothing(archives: dict[str, Any]) -> None:
    """Validation covers every line before the first write, so replace cannot half-happen."""
    rows = lines(archives["plain"])
    rows[-2] = {"kind": "raw", "record": {**rows[-2]["record"], "session_id": "  "}}
    error = _assert_untouched(archives["target"], archives["before"], reseal(rows), ErrorCode.IMPORT_CONFLICT,
                              "invalid_line")
    assert f"line {len(rows) - 1}" in error.message
    rows = lines(archives["plain"])
    rows[2]["vector"] = {"model": "caller", "dim": 3, "data": base64.b64encode(b"\0" * 8).decode()}
    _assert_untouched(archives["target"], archives["before"], reseal(rows), ErrorCode.IMPORT_CONFLICT,
                      "invalid_line")


def test_other_versions_and_other_files_are_refused(archives: dict[str, Any]) -> None:
    rows = lines(archives["plain"])
    rows[0]["version"] = "2.0"
    error = _assert_untouched(archives["target"], archives["before"], reseal(rows), ErrorCode.IMPORT_CONFLICT,
                              "version")
    assert "2.0" in error.message and error.details["supported"] == ["3.0"]
    for other in (b"CMA", b'{"records": []}\n', b"\x00" * 100):
        _assert_untouched(archives["target"], archives["before"], other, ErrorCode.IMPORT_CONFLICT,
                          "not_an_archive")


def test_encrypted_archives_need_the_right_key_and_every_chunk(archives: dict[str, Any]) -> None:
    data, target, before = archives["sealed"], archives["target"], archives["before"]
    assert b"deploy key" not in data and b"chat-42" not in data
    _assert_untouched(target, before, data, ErrorCode.VALIDATION_ERROR, None)
    error = _assert_untouched(target, before, data, ErrorCode.IMPORT_CONFLICT, "wrong_key", decryption_key="nope")
    assert "wrong passphrase" in error.message
    body = data.index(b"\n") + 1
    _assert_untouched(target, before, _flip(data, len(data) - 20), ErrorCode.IMPORT_CONFLICT, "tampered",
                      decryption_key=KEY)
    _assert_untouched(target, before, _flip(data, body + 10), ErrorCode.IMPORT_CONFLICT, "tampered",
                      decryption_key=KEY)
    _assert_untouched(target, before, data[:-5], ErrorCode.IMPORT_CONFLICT, "truncated", decryption_key=KEY)
    _assert_untouched(target, before, data[:body], ErrorCode.IMPORT_CONFLICT, "truncated", decryption_key=KEY)
    salt_at = data.index(b'"salt":"') + 9
    salted = data[:salt_at] + (b"B" if data[salt_at:salt_at + 1] != b"B" else b"C") + data[salt_at + 1:]
    _assert_untouched(target, before, salted, ErrorCode.IMPORT_CONFLICT, None, decryption_key=KEY)


def test_sealed_chunks_detect_reordering_dropping_and_appending() -> None:
    """Small chunks, so one payload spans many: each change to their sequence is caught."""
    key, preamble = bytes(range(32)), b'{"kind":"encrypted"}\n'
    out = io.BytesIO()
    writer = crypto.SealingWriter(out, key, preamble, chunk_bytes=64)
    payload = bytes(range(256)) * 3
    writer.write(payload[:100])
    writer.write(payload[100:])
    writer.close()
    sealed = out.getvalue()
    assert crypto.open_sealed(memoryview(sealed), key, preamble, 64) == payload
    frames, pos = [], 0
    while pos < len(sealed):
        (size,) = struct.unpack_from(">I", sealed, pos)
        frames.append(sealed[pos:pos + 4 + size])
        pos += 4 + size
    assert len(frames) == 12  # 768 bytes in 64-byte chunks, the last one final
    variants = {
        "tampered": [b"".join([frames[1], frames[0], *frames[2:]]),  # reordered
                     b"".join(frames[:5] + frames[6:]),  # one dropped from the middle
                     sealed + frames[-1]],  # a final chunk appended again
        "truncated": [b"".join(frames[:-1]), sealed[:-3]],
    }
    for reason, datas in variants.items():
        for data in datas:
            with pytest.raises(CMPError) as err:
                crypto.open_sealed(memoryview(data), key, preamble, 64)
            assert err.value.details["reason"] == reason
    with pytest.raises(CMPError):
        crypto.open_sealed(memoryview(sealed), key, b'{"kind":"other"}\n', 64)  # the preamble is bound


# ---------------------------------------------------------------- what an import may cost


def _costly_archive(**cost: int) -> bytes:
    """A small encrypted archive whose preamble asks for the given Argon2id cost."""
    encryption = {"cipher": crypto.CIPHER, "kdf": crypto.KDF, "salt": base64.b64encode(os.urandom(16)).decode(),
                  "time_cost": 3, "memory_cost_kib": 65536, "parallelism": 1, "chunk_bytes": crypto.CHUNK_BYTES,
                  "key_check": "0" * 64, **cost}
    return fmt.preamble("01960000-0000-7000-8000-000000000000", encryption) + os.urandom(600)


@pytest.fixture
def no_key_derivation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deriving a key fails the test: a refused cost must be refused before any derivation."""

    def derive(*_: Any) -> bytes:
        raise AssertionError("a key was derived")

    monkeypatch.setattr(crypto, "derive_key", derive)


def test_a_huge_key_derivation_cost_is_refused_over_http_before_deriving(open_mem, no_key_derivation) -> None:
    """The attack of the issue: 1 GiB and 16 passes named by a 791-byte import request."""
    target = open_mem("target")
    target.store("already here", store="semantic")
    before = snapshot(target)
    server = ServerThread(target.engine)
    cases = [  # (what the archive asks for, the parameter refused, its limit, the setting that raises it)
        ({"memory_cost_kib": 1024 * 1024, "time_cost": 16}, "memory_cost_kib", 262144, "memory_kib"),
        ({"time_cost": 16}, "time_cost", 8, "time_cost"),
        ({"parallelism": 16}, "parallelism", 4, "parallelism")]
    try:
        with Client(server.url, retries=0) as client:
            for cost, name, limit, setting in cases:
                with pytest.raises(CMPError) as err:
                    client.dispatch("lifecycle.import", {"archive_data": _costly_archive(**cost),
                                                         "decryption_key": KEY, "strategy": "replace"})
                error = err.value
                assert error.code is ErrorCode.IMPORT_CONFLICT and error.http_status == 409
                assert error.details["reason"] == "kdf_cost" and error.details["field"] == f"encryption.{name}"
                assert (error.details["value"], error.details["limit"]) == (cost[name], limit)
                assert f"encryption.{name}" in error.message and str(limit) in error.message
                assert error.details["setting"] == f"archive.import_max_kdf_{setting}"
                assert f"CEREMEMORY_ARCHIVE__IMPORT_MAX_KDF_{setting.upper()}" in error.hint
    finally:
        server.stop()
    assert snapshot(target) == before


def test_the_accepted_key_derivation_cost_is_configurable(tmp_path: Path, clock: Clock) -> None:
    source = cerememory.open(tmp_path / "source", semantic="off", clock=clock)
    strict = cerememory.open(tmp_path / "strict", semantic="off", clock=clock,
                             archive__import_max_kdf_time_cost=2, archive__import_max_kdf_memory_kib=32768)
    try:
        source.store("sealed with the default cost", store="semantic")
        sealed = export(source, encrypt=True, encryption_key=KEY)  # 64 MiB, 3 passes
        with pytest.raises(CMPError) as err:
            do_import(strict, sealed, decryption_key=KEY)
        assert err.value.details["setting"] == "archive.import_max_kdf_memory_kib"
        assert (err.value.details["value"], err.value.details["limit"]) == (65536, 32768)
        assert strict.stats().total_records == 0
    finally:
        strict.close()
    relaxed = cerememory.open(tmp_path / "strict", semantic="off", clock=clock)
    try:
        assert do_import(relaxed, sealed, decryption_key=KEY).records_imported == 1
    finally:
        relaxed.close()
        source.close()


def test_imports_run_one_at_a_time(open_mem, clock: Clock, tmp_path: Path) -> None:
    """While one import runs, another is told to come back (429 with Retry-After), not queued in
    memory beside it; with the slot free again it goes through."""
    source = open_mem("source")
    populate(source, clock)
    data = export(source, include_raw_journal=True)
    target = cerememory.open(tmp_path / "busy", semantic="off", clock=clock, archive__import_wait_seconds=0)
    server = ServerThread(target.engine)
    try:
        with Client(server.url, retries=0) as client:
            with IMPORTS.slot(0):  # an import in progress
                with pytest.raises(CMPError) as err:
                    client.dispatch("lifecycle.import", {"archive_data": data})
                assert err.value.code is ErrorCode.RATE_LIMITED and err.value.http_status == 429
                assert err.value.retry_after == 5 and err.value.details["reason"] == "import_in_progress"
                assert "archive.import_wait_seconds" in err.value.hint
                assert target.stats().total_records == 0
            assert client.dispatch("lifecycle.import", {"archive_data": data})["records_imported"] == 9
    finally:
        server.stop()
        target.close()


def test_a_key_file_with_an_absurd_cost_is_refused_before_deriving(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The key file of an encrypted data directory names its own Argon2id cost: a planted or
    damaged one must not make opening the directory allocate without bound."""
    from cerememory.storage import crypto as at_rest

    data_dir = tmp_path / "sealed"
    Vault.create(data_dir, KEY, crypto.KdfParams(time_cost=1, memory_cost_kib=8 * 1024))
    document = json.loads((data_dir / KEYFILE).read_text())
    document["kdf"]["memory_cost_kib"] = 64 * 1024 * 1024  # 64 GiB
    (data_dir / KEYFILE).write_text(json.dumps(document))
    monkeypatch.setattr(at_rest, "derive_key", lambda *_: pytest.fail("a key was derived"))
    with pytest.raises(CMPError, match="out of range") as err:
        cerememory.open(data_dir, semantic="off", encryption__passphrase=KEY)
    assert err.value.hint


def test_export_request_errors(open_mem) -> None:
    mem = open_mem("source")
    cases = [({"encrypt": True}, "encryption_key"), ({"encryption_key": "x"}, "encrypt"),
             ({"format": "zip"}, "format")]
    for request, field in cases:
        with pytest.raises(CMPError) as err:
            mem.dispatch("lifecycle.export", request)
        assert err.value.code is ErrorCode.VALIDATION_ERROR and err.value.details["field"] == field
    assert mem.dispatch("lifecycle.export", {"format": "jsonl"})["record_count"] == 0


# ---------------------------------------------------------------- export paths


def test_export_paths_never_escape_follow_links_or_overwrite(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "precious").write_text("precious")
    (tmp_path / "link.cma").symlink_to(tmp_path / "precious")
    refused = {"real/../x.cma": "'..'", str(tmp_path / "linked" / "x.cma"): "symbolic link",
               "linked/x.cma": "symbolic link", "link.cma": "symbolic link", "precious": "already exists",
               "real": "already exists", "missing/x.cma": "does not exist", " ": "empty"}
    for path, message in refused.items():
        with pytest.raises(CMPError, match=message) as err:
            export_target(path)
        assert err.value.code is ErrorCode.VALIDATION_ERROR
    assert export_target("real/x.cma") == tmp_path / "real" / "x.cma"

    target = export_target("real/x.cma")
    with pytest.raises(RuntimeError), write_new(target) as out:
        out.write(b"half an archive")
        raise RuntimeError("the export failed")
    assert list((tmp_path / "real").iterdir()) == []  # no partial file, no temp file
    with write_new(target) as out:
        out.write(b"archive")
    assert target.read_bytes() == b"archive" and target.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "precious").read_text() == "precious"


def test_a_servers_exports_stay_in_its_export_directory(tmp_path: Path) -> None:
    root, outside = tmp_path / "data" / "exports", tmp_path / "outside"
    outside.mkdir()
    assert export_target("first.cma", root) == root / "first.cma" and root.is_dir()  # created on first use
    (root / "sub").mkdir()
    (root / "out").symlink_to(outside)
    (root / "taken.cma").write_text("keep me")
    refused = {"../x.cma": "'..'", "sub/../../x.cma": "'..'", str(outside / "x.cma"): "outside the export directory",
               "/x.cma": "outside the export directory", "out/x.cma": "symbolic link", "out": "symbolic link",
               "taken.cma": "already exists", "missing/x.cma": "does not exist", "": "empty", "a\0b": "NUL"}
    for path, message in refused.items():
        with pytest.raises(CMPError, match=message) as err:
            export_target(path, root)
        assert err.value.code is ErrorCode.VALIDATION_ERROR and err.value.details["field"] == "output_path"
        assert err.value.hint
    assert export_target("sub/x.cma", root) == root / "sub" / "x.cma"
    assert export_target(str(root / "sub" / "y.cma"), root) == root / "sub" / "y.cma"  # absolute, but inside
    linked_root = tmp_path / "linked-exports"
    linked_root.symlink_to(root)  # the configured directory itself may be a link: it is resolved once
    assert export_target(str(linked_root / "z.cma"), linked_root) == root / "z.cma"
    assert list(outside.iterdir()) == [] and (root / "taken.cma").read_text() == "keep me"


# ---------------------------------------------------------------- CLI


def test_cli_export_and_import(cli, tmp_path: Path, data_dir: Path) -> None:
    assert cli("store", "The deploy key rotates every Monday", "--store", "semantic").code == 0
    assert cli("raw-store", "user: rotate it", "--session-id", "chat").code == 0
    env = {"CEREMEMORY_ARCHIVE_PASSPHRASE": KEY}
    plain, sealed = tmp_path / "plain.cma", tmp_path / "sealed.cma"

    result = cli("export", str(plain), "--raw", "--json")
    assert result.code == 0, result.stderr
    exported = result.json()
    assert exported["record_count"] == 1 and exported["raw_record_count"] == 1
    assert exported["path"] == str(plain) and exported["size_bytes"] == plain.stat().st_size
    result = cli("export", str(sealed), "--encrypt", "--stores", "semantic", env=env)
    assert result.code == 0 and "exported 1 record and" in result.stdout, result.stderr
    assert b"deploy key" not in sealed.read_bytes()

    other = tmp_path / "other"
    result = cli("import", str(plain), "--json", data=other)
    assert result.code == 0, result.stderr
    assert result.json()["records_imported"] == 1 and result.json()["raw_records_imported"] == 1
    result = cli("import", str(sealed), "--strategy", "replace", "--conflict", "keep_imported", "--json",
                 data=other, env=env)
    assert result.code == 0 and result.json()["records_imported"] == 1, result.stderr
    assert cli("stats", "--json", data=other).json()["total_records"] == 1

    result = cli("import", str(sealed), "--json", data=other)  # no passphrase, no terminal
    assert result.code == 2 and "CEREMEMORY_ARCHIVE_PASSPHRASE" in result.stdout
    result = cli("import", str(sealed), "--json", data=other, env={"CEREMEMORY_ARCHIVE_PASSPHRASE": "wrong"})
    assert result.code == 2 and result.json()["error"]["code"] == "IMPORT_CONFLICT"


def test_cli_export_refuses_unsafe_paths(cli, tmp_path: Path) -> None:
    (tmp_path / "existing.cma").write_text("keep me")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    for path in ("existing.cma", "dir/../escape.cma", "link/x.cma"):
        result = cli("export", str(tmp_path / path) if path != "dir/../escape.cma" else f"{tmp_path}/{path}",
                     "--json")
        assert result.code == 2 and result.json()["error"]["code"] == "VALIDATION_ERROR", result.stdout
    assert (tmp_path / "existing.cma").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".cma") == ["existing.cma"]
    assert list((tmp_path / "dir").iterdir()) == []


def test_cli_against_a_server(cli, tmp_path: Path) -> None:
    served = ServeProcess.serve(tmp_path / "served", tmp_path)
    try:
        url = ["--server-url", served.url]
        assert cli("store", "remote fact", "--store", "semantic", *url).code == 0
        path = tmp_path / "remote.cma"
        result = cli("export", str(path), "--json", *url)
        assert result.code == 0 and result.json()["record_count"] == 1, result.stderr
        result = cli("import", str(path), "--strategy", "replace", "--json", *url)
        assert result.code == 0 and result.json()["records_imported"] == 1, result.stderr
    finally:
        served.stop()
    local = cli("import", str(path), "--json", data=tmp_path / "local")
    assert local.code == 0 and local.json()["records_imported"] == 1


# ---------------------------------------------------------------- HTTP, gRPC, MCP


def test_http_export_and_import(open_mem, clock: Clock) -> None:
    source, target = open_mem("source"), open_mem("target")
    populate(source, clock)
    servers = [ServerThread(source.engine), ServerThread(target.engine)]
    try:
        with Client(servers[0].url) as a, Client(servers[1].url) as b:
            exported = a.dispatch("lifecycle.export", {"include_raw_journal": True, "encrypt": True,
                                                       "encryption_key": KEY})
            data = base64.b64decode(exported["archive_data"])
            assert len(data) == exported["size_bytes"]
            with pytest.raises(CMPError) as err:
                b.dispatch("lifecycle.import", {"archive_data": exported["archive_data"], "decryption_key": "no"})
            assert err.value.code is ErrorCode.IMPORT_CONFLICT and err.value.http_status == 409
            imported = b.dispatch("lifecycle.import", {"archive_data": exported["archive_data"],
                                                       "decryption_key": KEY})
            assert imported == {"records_imported": 9, "raw_records_imported": 2, "records_skipped": 0}
        assert snapshot(target) == snapshot(source)
    finally:
        for server in servers:
            server.stop()


def test_grpc_streams_an_archive_larger_than_one_chunk(open_mem, clock: Clock) -> None:
    source, target = open_mem("source"), open_mem("target")
    source.dispatch("encode.batch", {"records": [
        {"content": {"blocks": [{"text": f"memory {n}: " + "lorem ipsum dolor " * 20}]}} for n in range(400)]})
    servers = [build_grpc_server(mem.engine) for mem in (source, target)]
    for server, _ in servers:
        server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{servers[0][1]}") as channel:
            chunks = list(pb_grpc.CerememoryServiceStub(channel).Export(pb.ExportRequest(), timeout=60))
        data = b"".join(c.data for c in chunks)
        assert len(data) > 3 * 65536 and all(len(c.data) == 65536 for c in chunks[:-1])
        assert chunks[0].metadata.record_count == 400 and chunks[0].metadata.size_bytes == len(data)
        with GrpcClient(f"127.0.0.1:{servers[1][1]}", timeout=60) as client:
            response = client.dispatch("lifecycle.import", {"archive_data": data, "strategy": "replace"})
            assert response["records_imported"] == 400
            with pytest.raises(CMPError) as err:
                client.dispatch("lifecycle.import", {"archive_data": data[:-70_000]})
            assert err.value.code is ErrorCode.IMPORT_CONFLICT
        assert snapshot(target)["records"] == snapshot(source)["records"]
    finally:
        for server, _ in servers:
            server.stop(None).wait(10)


def test_mcp_export_tool_writes_an_importable_archive(tmp_path: Path, open_mem, clock: Clock) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    served = ServeProcess.serve(tmp_path / "served", tmp_path)
    try:
        with Client(served.url) as client:
            client.store("kept through MCP", store="semantic")
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "cerememory", "mcp", "--server-url", served.url],
                                       env=clean_env(tmp_path), cwd=str(tmp_path))

        async def body() -> dict[str, Any]:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("export", {"output_path": "mcp.cma", "encrypt": True,
                                                            "encryption_key": KEY})
                assert not result.is_error, result.content
                return json.loads(result.content[0].text)

        exported = anyio.run(body)
    finally:
        served.stop()
    assert exported["record_count"] == 1 and exported["output_path"] == str(tmp_path / "mcp.cma")
    target = open_mem("target")
    assert do_import(target, (tmp_path / "mcp.cma").read_bytes(), decryption_key=KEY).records_imported == 1
    assert target.recall("kept through MCP").memories


def test_archive_times_survive_exactly(open_mem, clock: Clock) -> None:
    source = open_mem("source")
    clock.now = T0 + 0.123456
    record = source.store("precise", created_at=datetime(2020, 2, 29, 12, 0, 0, 654321, tzinfo=UTC)).record_id
    target = open_mem("target")
    do_import(target, export(source))
    assert target.inspect(record).created_at == datetime(2020, 2, 29, 12, 0, 0, 654321, tzinfo=UTC)
    assert target.inspect(record) == source.inspect(record)
