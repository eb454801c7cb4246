"""A stored record that cannot be decoded costs only itself: every read answers with the good
records and names the bad one in `undecodable_ids`, export leaves it out and says so, stats and
/metrics count it, and it can still be forgotten.

The poison is planted straight into DuckDB, as a record stored before the request limits
existed (metadata nested 256 deep) or a damaged body would be, and read through a real HTTP
server, the CLI and the embedded API."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2

import cerememory
from cerememory.storage import codec
from cerememory.storage.crypto import Vault
from cerememory.storage.kdf import KdfParams
from cerememory.transport.grpc_client import GrpcClient
from cerememory.transport.grpc_server import build_grpc_server
from cerememory.v1 import cerememory_pb2 as pb
from cerememory.v1 import cerememory_pb2_grpc as pb_grpc
from tests.conftest import ServerThread

WIDE = {"start": "2000-01-01T00:00:00Z", "end": "2100-01-01T00:00:00Z"}


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def plant_record_body(engine: Any, record_id: str, body: bytes) -> None:
    """Overwrite a curated record's stored body, bypassing every check."""
    with engine.core.backend.database.transaction() as tx:
        tx.execute("UPDATE records SET body = ? WHERE id = ?", [body, record_id])
    engine.core.records.cache.discard([uuid.UUID(record_id)])


def deep_body(engine: Any, record_id: str, table: str = "records") -> bytes:
    """The record's own body with its metadata nested 256 levels deep (what the unbounded
    encode.store used to accept)."""
    (body,) = engine.core.backend.database.query(f"SELECT body FROM {table} WHERE id = ?", [record_id])[0]
    values = codec.unpack(body)
    values["metadata"] = deep(256)
    return codec.pack(values)


def store(mem: cerememory.Memory, text: str, **extra: Any) -> str:
    return mem.dispatch("encode.store", {"content": {"blocks": [{"text": text}]}, **extra})["record_id"]


@pytest.fixture
def poisoned(mem):
    """Two good records (one linked to everything), one too deep to answer, one garbage body,
    and one good and one too-deep raw journal record."""
    engine = mem.engine
    good = store(mem, "harbour lights, the good one", metadata={"n": 1})
    too_deep = store(mem, "harbour lights, nested too deep")
    garbage = store(mem, "harbour lights, a damaged body")
    hub = store(mem, "harbour lights, the hub", associations=[
        {"target_id": i, "association_type": "semantic", "weight": 0.9} for i in (good, too_deep, garbage)])
    raw_good = mem.dispatch("encode.store_raw", {"session_id": "s", "content": {"blocks": [
        {"text": "tide table, good"}]}})["record_id"]
    raw_bad = mem.dispatch("encode.store_raw", {"session_id": "s", "content": {"blocks": [
        {"text": "tide table, poisoned"}]}})["record_id"]
    plant_record_body(engine, too_deep, deep_body(engine, too_deep))
    plant_record_body(engine, garbage, b"\xc1 not msgpack")
    with engine.core.backend.database.transaction() as tx:
        tx.execute("UPDATE raw_journal SET body = ? WHERE id = ?", [deep_body(engine, raw_bad, "raw_journal"), raw_bad])
    return {"good": good, "hub": hub, "too_deep": too_deep, "garbage": garbage,
            "raw_good": raw_good, "raw_bad": raw_bad}


@pytest.fixture
def http(mem, poisoned):
    server = ServerThread(mem.engine)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
    server.stop()


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return response.json()


def test_every_read_answers_with_the_good_records_and_names_the_bad(http, poisoned):
    bad = {poisoned["too_deep"], poisoned["garbage"]}
    good = {poisoned["good"], poisoned["hub"]}

    query = ok(http.post("/v1/recall/query", json={"cue": {"text": "harbour"}, "limit": 10}))
    assert {r["record"]["id"] for r in query["memories"]} == good
    assert set(query["undecodable_ids"]) == bad

    listed = ok(http.post("/v1/recall/list", json={"store": "episodic", "fields": ["text", "metadata"]}))
    assert {r["id"] for r in listed["records"]} == good
    assert set(listed["undecodable_ids"]) == bad

    timeline = ok(http.post("/v1/recall/timeline", json={"range": WIDE, "granularity": "month"}))
    assert {r["record"]["id"] for b in timeline["buckets"] for r in b["memories"]} == good
    assert set(timeline["undecodable_ids"]) == bad

    associated = ok(http.post(f"/v1/recall/associate/{poisoned['hub']}", json={"depth": 1}))
    assert [r["record"]["id"] for r in associated["memories"]] == [poisoned["good"]]
    assert set(associated["undecodable_ids"]) == bad

    graph = ok(http.post("/v1/recall/graph", json={"center_id": poisoned["hub"], "depth": 1}))
    assert {n["id"] for n in graph["nodes"]} == good
    assert set(graph["undecodable_ids"]) == bad

    raw = ok(http.post("/v1/recall/raw", json={"session_id": "s"}))
    assert [r["id"] for r in raw["records"]] == [poisoned["raw_good"]]
    assert raw["undecodable_ids"] == [poisoned["raw_bad"]]

    assert ok(http.get(f"/v1/introspect/record/{poisoned['good']}"))["metadata"] == {"n": 1}
    one = http.get(f"/v1/introspect/record/{poisoned['too_deep']}")
    assert one.status_code == 500
    error = one.json()
    assert error["code"] == "INTERNAL_ERROR" and poisoned["too_deep"] in error["message"]
    assert "cannot be decoded" in error["message"] and "forget" in error["details"]["hint"]

    assert ok(http.get("/v1/introspect/stats"))["undecodable_records"] == 3
    assert "cerememory_undecodable_records_total 3.0" in http.get("/metrics").text


def test_consolidation_and_dreams_go_on_around_the_bad_records(http, poisoned):
    consolidated = ok(http.post("/v1/lifecycle/consolidate", json={"strategy": "full"}))
    assert consolidated["records_processed"] == 2  # the two that decode
    dreamed = ok(http.post("/v1/lifecycle/dream-tick", json={"session_id": "s"}))
    assert dreamed["raw_records_processed"] == 1
    listed = ok(http.post("/v1/recall/list", json={"store": "episodic"}))
    assert set(listed["undecodable_ids"]) == {poisoned["too_deep"], poisoned["garbage"]}  # left as they were


def test_export_leaves_the_bad_records_out_and_the_archive_imports(http, poisoned, tmp_path):
    exported = ok(http.post("/v1/lifecycle/export", json={"include_raw_journal": True}))
    assert exported["record_count"] == 2 and exported["raw_record_count"] == 1
    assert set(exported["undecodable_ids"]) == {poisoned["too_deep"], poisoned["garbage"], poisoned["raw_bad"]}
    with cerememory.open(tmp_path / "restored", semantic="off") as restored:
        imported = restored.dispatch("lifecycle.import", {"archive_data": exported["archive_data"]})
        assert (imported["records_imported"], imported["raw_records_imported"]) == (2, 1)
        listed = restored.dispatch("recall.list", {"store": "episodic"})["records"]
        assert {r["id"] for r in listed} == {poisoned["good"], poisoned["hub"]}


def test_a_bad_record_can_be_forgotten_and_is_then_no_longer_reported(http, poisoned):
    forgot = ok(http.request("DELETE", "/v1/lifecycle/forget", json={
        "record_ids": [poisoned["too_deep"], poisoned["garbage"]], "confirm": True}))
    assert forgot["records_deleted"] == 2
    query = ok(http.post("/v1/recall/query", json={"cue": {"text": "harbour"}}))
    assert len(query["memories"]) == 2 and query["undecodable_ids"] == []
    assert ok(http.post("/v1/recall/list", json={"store": "episodic"}))["undecodable_ids"] == []


def test_cli_export_and_reindex_skip_and_report_the_bad_record(cli, data_dir, tmp_path):
    with cerememory.open(data_dir, semantic="off") as mem:
        good = store(mem, "lighthouse keeper")
        bad = store(mem, "lighthouse poison")
        plant_record_body(mem.engine, bad, deep_body(mem.engine, bad))
    exported = cli("export", str(tmp_path / "backup.cma"))
    assert exported.code == 0, exported.stderr
    assert "exported 1 record and" in exported.stdout and bad in exported.stdout
    assert "Traceback" not in exported.stderr and bad in exported.stderr  # the warning names it
    as_json = cli("export", "--json", str(tmp_path / "backup2.cma")).json()
    assert as_json["undecodable_ids"] == [bad]

    reindexed = cli("reindex", "--json")
    assert reindexed.code == 0, reindexed.stderr
    with cerememory.open(data_dir, semantic="off") as mem:
        assert mem.engine.repaired == []  # the rebuilt index still counts the bad record
        answer = mem.dispatch("recall.query", {"cue": {"text": "lighthouse"}})
        assert [r["record"]["id"] for r in answer["memories"]] == [good]  # its text could not be indexed
        listed = mem.dispatch("recall.list", {"store": "episodic"})
        assert [r["id"] for r in listed["records"]] == [good] and listed["undecodable_ids"] == [bad]


def test_a_tampered_ciphertext_costs_only_its_own_record(tmp_path):
    data = tmp_path / "secret"
    Vault.create(data, "correct horse", KdfParams(time_cost=1, memory_cost_kib=8 * 1024))
    with cerememory.open(data, semantic="off", encryption__passphrase="correct horse") as mem:
        good = store(mem, "vault good")
        bad = store(mem, "vault tampered")
        (sealed,) = mem.engine.core.backend.database.query("SELECT body FROM records WHERE id = ?", [bad])[0]
        plant_record_body(mem.engine, bad, sealed[:-1] + bytes([sealed[-1] ^ 1]))
        answer = mem.dispatch("recall.query", {"cue": {"text": "vault"}})
        assert [r["record"]["id"] for r in answer["memories"]] == [good]
        assert answer["undecodable_ids"] == [bad]
        exported = mem.dispatch("lifecycle.export", {})
        assert exported["record_count"] == 1 and exported["undecodable_ids"] == [bad]
        assert b"vault good" in base64.b64decode(exported["archive_data"])


def test_the_deepest_accepted_metadata_is_answered_everywhere(tmp_path: Path):
    """What the request limits let in (metadata and context each at the depth limit, the context
    kept two levels deeper) is answered over HTTP and gRPC alike."""
    from cerememory.limits import MAX_JSON_DEPTH

    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        rid = store(mem, "the deepest accepted", metadata=deep(MAX_JSON_DEPTH),
                    context={"spatial": deep(MAX_JSON_DEPTH)})
        server = ServerThread(mem.engine)
        grpc_server, port = build_grpc_server(mem.engine)
        grpc_server.start()
        try:
            query = {"cue": {"text": "deepest"}}
            over_http = httpx.post(f"{server.url}/v1/recall/query", json=query, timeout=30).json()
            with GrpcClient(f"127.0.0.1:{port}", timeout=30) as client:
                over_grpc = client.dispatch("recall.query", query)
                listed = client.dispatch("recall.list", {"store": "episodic", "fields": ["metadata"]})
            for answer in (over_http, over_grpc):
                assert [r["record"]["id"] for r in answer["memories"]] == [rid]
                assert answer["memories"][0]["record"]["metadata"]["a"] == deep(MAX_JSON_DEPTH)["a"]
            assert listed["records"][0]["metadata"]["_context"]["spatial"] == deep(MAX_JSON_DEPTH)
        finally:
            grpc_server.stop(None).wait(10)
            server.stop()


NOT_FINITE = {"nan": float("nan"), "inf": float("inf"), "list": [1, float("-inf")], "fine": 1.5}


def test_numbers_json_cannot_carry_stored_before_the_limit_are_answered_as_null(tmp_path: Path):
    """A record whose metadata holds a NaN or an infinity (which encode.store accepted in process
    before requests were held to finite numbers) is answered with null in their place, as strict
    JSON over HTTP and as a null Value over gRPC, whose readers would refuse a NaN number."""
    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in an answer"))

    expected = {"nan": None, "inf": None, "list": [1, None], "fine": 1.5}
    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        rid = store(mem, "lighthouse keeper, numbers beyond json")
        values = codec.unpack(mem.engine.core.backend.database.query(
            "SELECT body FROM records WHERE id = ?", [rid])[0][0])
        plant_record_body(mem.engine, rid, codec.pack({**values, "metadata": NOT_FINITE}))
        server = ServerThread(mem.engine)
        grpc_server, port = build_grpc_server(mem.engine)
        grpc_server.start()
        try:
            query = {"cue": {"text": "lighthouse"}}
            over_http = strict(httpx.post(f"{server.url}/v1/recall/query", json=query, timeout=30).text)
            record = strict(httpx.get(f"{server.url}/v1/introspect/record/{rid}", timeout=30).text)
            with GrpcClient(f"127.0.0.1:{port}", timeout=30) as client:
                over_grpc = client.dispatch("recall.query", query)
                inspected = client.dispatch("introspect.record", {"record_id": rid})
            for answer in (over_http, over_grpc):
                assert answer["memories"][0]["record"]["metadata"] == expected
            assert record["metadata"] == inspected["metadata"] == expected
        finally:
            grpc_server.stop(None).wait(10)
            server.stop()


def test_numbers_json_cannot_carry_are_refused_from_every_caller(mem, tmp_path: Path):
    """In process, over gRPC, where a Struct's number may be a NaN, and over HTTP, where JSON's
    1e400 parses as an infinity, the request is refused naming where the number is; nothing is
    stored."""
    for metadata, where in (({"v": float("nan")}, "at v"), ({"a": [1, {"b": float("-inf")}]}, "at a[1].b")):
        with pytest.raises(cerememory.CMPError) as err:
            mem.store("a number json cannot carry", metadata=metadata)
        assert err.value.code is cerememory.ErrorCode.VALIDATION_ERROR
        assert "not a finite number" in err.value.message and where in err.value.message
        with pytest.raises(cerememory.CMPError) as err:
            mem.dispatch("recall.query", {"cue": {"text": "x", "semantic": {"weights": [float("inf")]}}})
        assert "not a finite number" in err.value.message

    grpc_server, port = build_grpc_server(mem.engine)
    grpc_server.start()
    try:
        metadata = struct_pb2.Struct()
        metadata.update({"ok": 1, "nested": {"v": float("nan")}})
        request = pb.EncodeStoreRequest(content=pb.MemoryContent(blocks=[pb.ContentBlock(text="over grpc")]),
                                        metadata=metadata)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError) as raised:
            pb_grpc.CerememoryServiceStub(channel).EncodeStore(request, timeout=30)
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        envelope = json.loads(dict(raised.value.trailing_metadata())["cmp-error"])
        assert envelope["code"] == "VALIDATION_ERROR" and envelope["details"]["field"] == "metadata"
        assert "nan is not a finite number (at nested.v)" in envelope["message"]
    finally:
        grpc_server.stop(None).wait(10)
    server = ServerThread(mem.engine)  # JSON's own numbers: 1e400 parses as an infinity
    try:
        answer = httpx.post(f"{server.url}/v1/encode", content=b'{"content": {"blocks": [{"text": "x"}]}, '
                            b'"metadata": {"big": 1e400}}', headers={"content-type": "application/json"}, timeout=30)
    finally:
        server.stop()
    assert answer.status_code == 400
    assert "inf is not a finite number (at big)" in answer.json()["message"]
    assert mem.stats().total_records == 0
