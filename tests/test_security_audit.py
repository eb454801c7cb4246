"""The hash-chained audit log: what gets logged, by whom, and that every kind of tampering (edit,
delete, reorder, truncated write) is named by `audit-verify` and refused at start-up."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import pytest
from pydantic import BaseModel, Field, Strict

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.model import StoreType
from cerememory.security.audit import AUDIT_FILE, GENESIS, AuditLog, FileChain, summarize, verify

from .conftest import ServeProcess, ServerThread, free_port


def entries(data_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (data_dir / AUDIT_FILE).read_text().splitlines()]


def test_every_mutating_operation_is_logged_with_its_records(mem, data_dir):
    stored = mem.store("the boiler is serviced in March")
    batch = mem.store_batch([{"content": {"blocks": [{"text": "one"}]}},
                             {"content": {"blocks": [{"text": "two"}]}}])
    raw = mem.store_raw("user: hello", session_id="s1")
    mem.update(stored.record_id, text="the boiler is serviced in April")
    mem.set_mode("perfect")
    mem.decay_tick()
    recalled = [h.record.id for h in mem.recall("boiler").memories]  # recall's strengthening is logged
    mem.recall("boiler", reconsolidate=False)  # pure reads are not
    mem.stats()
    mem.forget(store="episodic", confirm=True)  # ids the response does not name
    everything = entries(data_dir)
    # each change committed has its intent, written inside its transaction, before the outcome
    assert [(e["op"], e["phase"]) for e in everything] == [
        *((op, phase) for op in ("encode.store", "encode.batch", "encode.store_raw", "encode.update",
                                 "lifecycle.set_mode", "lifecycle.decay_tick") for phase in ("intent", "done")),
        ("recall.reconsolidate", "done"), ("lifecycle.forget", "intent"), ("lifecycle.forget", "done")]
    intents = [e for e in everything if e["phase"] == "intent"]
    log = [e for e in everything if e["phase"] == "done"]
    assert log[6]["record_ids"] == [str(i) for i in recalled]
    assert log[0]["record_ids"] == intents[0]["record_ids"] == [str(stored.record_id)]
    assert log[1]["record_ids"] == intents[1]["record_ids"] == [str(r.record_id) for r in batch.results]
    assert log[2]["record_ids"] == intents[2]["record_ids"] == [str(raw.record_id)]
    assert intents[3]["record_ids"] == [str(stored.record_id)]
    assert log[4]["summary"] == {"mode": "perfect"}
    deleted = {str(stored.record_id), *(str(r.record_id) for r in batch.results)}
    assert set(log[7]["record_ids"]) == set(intents[6]["record_ids"]) == deleted
    assert log[7]["summary"]["records_deleted"] == 3
    assert intents[6]["summary"] == {"step": "delete", "records": 3}
    log = everything
    assert [e["seq"] for e in log] == list(range(1, 16))
    assert log[0]["prev"] == GENESIS and all(b["prev"] == a["hash"] for a, b in zip(log, log[1:], strict=False))
    assert all(e["transport"] == "embedded" and e["key_id"] is None for e in log)
    # content never reaches the log
    assert "boiler" not in (data_dir / AUDIT_FILE).read_text()
    assert verify(data_dir / AUDIT_FILE).ok


def test_http_calls_carry_request_id_and_transport(http_server, data_dir):
    with httpx.Client(base_url=http_server.url) as h:
        response = h.post("/v1/encode", headers={"x-request-id": "req-audit-1"},
                          json={"content": {"blocks": [{"text": "over http"}]}})
        assert response.status_code == 200
    last = entries(data_dir)[-1]
    assert last["request_id"] == "req-audit-1" and last["transport"] == "http"
    assert last["record_ids"] == [response.json()["record_id"]]


def test_mcp_over_http_calls_carry_key_and_request_id(mem, data_dir):
    import asyncio

    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from cerememory.security.auth import KeyRing
    from cerememory.transport.http import create_app
    from cerememory.transport.mcp_http import mount_streamable_http

    app = create_app(mem.engine, keys=KeyRing(["k-mcp"]), extra_routes=lambda a: mount_streamable_http(a, mem.engine))
    server = ServerThread(app=app)

    async def call() -> None:
        headers = {"authorization": "Bearer k-mcp", "x-request-id": "req-mcp-1"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            assert not (await session.call_tool("store", {"content": "remembered over MCP"})).is_error

    try:
        asyncio.run(asyncio.wait_for(call(), 60))
    finally:
        server.stop()
    last = entries(data_dir)[-1]
    assert (last["op"], last["request_id"], last["transport"]) == ("encode.store", "req-mcp-1", "mcp")
    assert last["key_id"] and last["key_id"].startswith("env-")


def test_concurrent_appends_keep_one_chain(mem, data_dir):
    def writer(n: int) -> None:
        for i in range(15):
            mem.store(f"writer {n} note {i}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = verify(data_dir / AUDIT_FILE)
    assert report.ok and report.entries == 120  # an intent and an outcome per store


def test_two_writers_in_two_processes_share_the_chain(tmp_path):
    """The keys CLI appends while a server owns the log: each writer chains from the other's tail."""
    path = tmp_path / AUDIT_FILE
    a, b = AuditLog(path), AuditLog(path)
    for i in range(5):
        (a if i % 2 else b).append("encode.store", record_ids=[str(i)])
    a.close()
    b.close()
    assert verify(path).ok and verify(path).entries == 5


def _tamper(path: Path, how: str) -> int:
    """Damage the log; returns the line number audit-verify must name."""
    lines = path.read_bytes().splitlines(keepends=True)
    if how == "edit":
        lines[4] = lines[4].replace(b'"lifecycle.set_mode"', b'"lifecycle.set_mod3"')
        bad = 5
    elif how == "delete":
        del lines[1]
        bad = 2
    elif how == "reorder":
        lines[1], lines[2] = lines[2], lines[1]
        bad = 2
    elif how == "truncate_mid_line":
        lines[-1] = lines[-1][:40]
        bad = len(lines)
    else:  # a forged entry with a correct hash of its own but no link to the chain
        forged = json.loads(lines[1])
        forged.pop("hash")
        forged["record_ids"] = []
        from cerememory.security.audit import seal

        lines[1] = seal(forged)[0]
        bad = 3
    path.write_bytes(b"".join(lines))
    return bad


def _populate(data_dir: Path) -> None:
    with cerememory.open(data_dir, semantic="off") as mem:
        rid = mem.store("first").record_id
        mem.store("second")
        mem.set_mode("perfect")
        mem.forget([rid], confirm=True)


@pytest.mark.parametrize("how", ["edit", "delete", "reorder", "truncate_mid_line", "rehash"])
def test_tampering_is_named_by_audit_verify_and_refused_at_start(data_dir, cli, how):
    _populate(data_dir)
    bad = _tamper(data_dir / AUDIT_FILE, how)
    result = cli("audit-verify", "--json")
    assert result.code == 6, result.stdout
    report = result.json()
    assert report["ok"] is False and report["first_bad_line"] == bad, report
    assert report["entries"] == bad - 1
    text = " ".join(cli("audit-verify").stderr.split())  # as read, whatever the terminal's width
    assert f"line {bad}" in text and "AUDIT_BROKEN" in text

    with pytest.raises(CMPError) as refused:
        cerememory.open(data_dir, semantic="off")
    assert refused.value.code is ErrorCode.AUDIT_BROKEN
    assert refused.value.details["first_bad_line"] == bad
    assert "--allow-broken-audit" in refused.value.hint
    stats = cli("stats", "--json")
    assert stats.code == 6 and stats.json()["error"]["code"] == "AUDIT_BROKEN"


def test_allow_broken_keeps_the_evidence_and_logs_the_acceptance(data_dir, cli):
    _populate(data_dir)
    _tamper(data_dir / AUDIT_FILE, "delete")
    with cerememory.open(data_dir, semantic="off", audit__allow_broken=True) as mem:
        mem.store("after the break")
    aside = list(data_dir.glob("audit.broken-*.jsonl"))
    assert len(aside) == 1
    log = entries(data_dir)
    assert log[0]["op"] == "audit.allow_broken"
    assert log[0]["summary"]["broken_file"] == aside[0].name and log[0]["summary"]["first_bad_line"] == 2
    assert log[1]["op"] == "encode.store"
    result = cli("audit-verify", "--json")
    assert result.code == 0 and result.json()["broken_logs_kept"] == [aside[0].name]


def test_serve_refuses_a_broken_chain_unless_allowed(data_dir, tmp_path, cli):
    _populate(data_dir)
    _tamper(data_dir / AUDIT_FILE, "edit")
    refused = cli("serve", "--port", str(free_port()), "--json")
    assert refused.code == 6 and refused.json()["error"]["code"] == "AUDIT_BROKEN"
    served = ServeProcess.serve(data_dir, tmp_path, "--allow-broken-audit")
    try:
        with httpx.Client(base_url=served.url) as h:
            assert h.post("/v1/encode", json={"content": {"blocks": [{"text": "x"}]}}).status_code == 200
    finally:
        assert served.stop() == 0
    ops = [(e["op"], e.get("phase")) for e in entries(data_dir)]
    assert ops == [("audit.allow_broken", "done"), ("encode.store", "intent"), ("encode.store", "done")]


def test_audit_can_be_turned_off(data_dir):
    with cerememory.open(data_dir, semantic="off", audit__enabled=False) as mem:
        mem.store("unaudited")
    assert not (data_dir / AUDIT_FILE).exists()


def test_a_busy_writer_and_another_process_keep_one_chain(tmp_path):
    """A writer whose threads append back to back keeps its flock between them; another
    process's writer still gets its turn (at the next fsync at most), and the chain stays whole."""
    path = tmp_path / AUDIT_FILE
    busy, other = AuditLog(path, fsync_interval=0.05), AuditLog(path, fsync_interval=0.05)

    def append(log, n):
        for i in range(n):
            log.append("encode.store", record_ids=[str(i)])

    threads = [threading.Thread(target=append, args=(busy, 50)) for _ in range(4)]
    threads.append(threading.Thread(target=append, args=(other, 20)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy.close()
    other.close()
    report = verify(path)
    assert report.ok and report.entries == 220


def test_appends_queued_together_keep_each_callers_entries_adjacent(tmp_path):
    """Appends that arrive while another is written go in with it: each caller's entries stay
    adjacent and in order, each caller learns its own, and the chain stays whole."""
    chain = FileChain(tmp_path / AUDIT_FILE, fsync_interval=0.05)
    answers: dict[int, list[list[tuple[dict, str]]]] = {n: [] for n in range(8)}

    def append(n: int) -> None:
        for i in range(25):
            answers[n].append(chain.extend([{"op": f"writer-{n}", "i": i, "part": part} for part in range(3)]))

    threads = [threading.Thread(target=append, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    chain.close()
    for n, linked in answers.items():
        for i, three in enumerate(linked):
            assert [(e["op"], e["i"], e["part"]) for e, _ in three] == [(f"writer-{n}", i, p) for p in range(3)]
            assert [e["seq"] for e, _ in three] == list(range(three[0][0]["seq"], three[0][0]["seq"] + 3))
    written = entries(tmp_path)
    assert {(e["seq"], e["hash"]) for e in written} == {(e["seq"], h) for lk in answers.values() for t in lk
                                                        for e, h in t}
    report = verify(tmp_path / AUDIT_FILE)
    assert report.ok and report.entries == 8 * 25 * 3


def test_an_append_to_a_closed_log_is_refused(tmp_path):
    chain = FileChain(tmp_path / AUDIT_FILE)
    chain.extend([{"op": "first"}])
    chain.close()
    with pytest.raises(CMPError) as refused:
        chain.extend([{"op": "late"}])
    assert refused.value.code is ErrorCode.INTERNAL_ERROR
    assert verify(tmp_path / AUDIT_FILE).entries == 1


def test_a_summary_keeps_counts_flags_and_enum_values_and_never_content():
    class Inner(BaseModel):
        n: int = 1

    class Shapes(BaseModel):
        header: Inner | None = None
        store: StoreType = StoreType.EPISODIC
        scope: list[StoreType] | None = [StoreType.SEMANTIC, StoreType.WORKING]
        maybe: Annotated[StoreType | None, Field(description="an optional enum")] = StoreType.PROCEDURAL
        strict: Annotated[int, Strict()] | None = 3
        flag: bool = True
        ratio: float = 0.5
        level: Literal[1, 2] = 2
        anything: Any = 7
        text: str = "a secret"
        word: Literal["a", "b"] = "a"
        record_id: uuid.UUID = uuid.UUID(int=1)
        at: datetime = datetime(2025, 1, 1, tzinfo=UTC)
        inner: Inner = Inner()
        mapping: dict[str, int] = {"n": 1}
        items: list[Inner] = [Inner()]
        ids: list[uuid.UUID] = [uuid.UUID(int=2)]
        empty: list[StoreType] = []

    assert summarize(Shapes()) == {"store": "episodic", "scope": ["semantic", "working"], "maybe": "procedural",
                                   "strict": 3, "flag": True, "ratio": 0.5, "level": 2, "anything": 7}
