"""The gRPC transport: a real server on 127.0.0.1 and a real channel, checked against the
embedded API (same results, same errors), plus the proto's own upkeep (generated code fresh,
every model field mirrored)."""

from __future__ import annotations

import importlib.util
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from pydantic import BaseModel

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.cmp import messages as m
from cerememory.cmp.dispatch import OPERATIONS, Dispatcher
from cerememory.security.auth import KeyRing
from cerememory.transport import grpc_convert as convert
from cerememory.transport import grpc_server
from cerememory.transport.grpc_client import GrpcClient
from cerememory.transport.grpc_server import build_grpc_server
from cerememory.v1 import cerememory_pb2 as pb
from cerememory.v1 import cerememory_pb2_grpc as pb_grpc

from .conftest import Clock, Retargetable
from .tls import self_signed

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2025, 3, 10, 9, 0, tzinfo=UTC)


def _open(data_dir: Path) -> cerememory.Memory:
    """An engine on a clock that stands still, so that fidelity (and relevance) cannot move
    between the calls of a comparison; fusing by rank, since a raw BM25 score moves with how the
    background committer split the writes into index segments (see `canonical`)."""
    return cerememory.open(data_dir, semantic="off", clock=Clock(), fusion="rrf")


class Served:
    """A gRPC server over its own engine (for server options: keys, TLS); stopped (and the engine
    closed) on exit."""

    def __init__(self, data_dir: Path, **options: Any) -> None:
        self.mem = _open(data_dir)
        self.server, self.port = build_grpc_server(self.mem.engine, **options)
        self.server.start()
        self.target = f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.stop(None).wait(10)
        self.mem.close()


@dataclass
class Shared:
    """The module's gRPC server, serving this test's own engine."""

    mem: cerememory.Memory
    target: str


@pytest.fixture(scope="module")
def _module_server() -> Iterator[tuple[Retargetable, str]]:
    handler = Retargetable()
    server, port = build_grpc_server(handler)
    server.start()
    yield handler, f"127.0.0.1:{port}"
    server.stop(None).wait(10)


@pytest.fixture
def served(tmp_path: Path, _module_server: tuple[Retargetable, str]) -> Iterator[Shared]:
    handler, target = _module_server
    with _open(tmp_path / "served") as mem:
        handler.engine = mem.engine
        try:
            yield Shared(mem, target)
        finally:
            handler.engine = None


@pytest.fixture
def mem(data_dir: Path) -> Iterator[cerememory.Memory]:
    """The embedded side of a comparison, on a clock that stands still too."""
    with _open(data_dir) as memory:
        yield memory


@pytest.fixture
def client(served: Served) -> Iterator[GrpcClient]:
    with GrpcClient(served.target, timeout=30) as client:
        yield client


@pytest.fixture
def channel(served: Served) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(served.target) as channel:
        yield channel


@pytest.fixture
def stub(channel: grpc.Channel) -> pb_grpc.CerememoryServiceStub:
    return pb_grpc.CerememoryServiceStub(channel)


# ---------------------------------------------------------------- the proto's upkeep


def test_generated_code_matches_the_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    gen_proto = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_proto)
    assert gen_proto.stale_files() == [], "run `python scripts/gen_proto.py`"


def test_proto_mirrors_every_model_field():
    assert convert.schema_problems() == []


def test_schema_check_notices_drift():
    class GraphEdge(m.GraphEdge):
        colour: str = "red"

    class DreamTickRequest(m.DreamTickRequest):
        dry_run: bool = True  # a non-zero default on a plain proto bool would be lost

    schema = convert._Schema()
    schema.model(GraphEdge, pb.GraphEdge.DESCRIPTOR, False)
    schema.model(DreamTickRequest, pb.DreamTickRequest.DESCRIPTOR, True)
    assert schema.problems == ["GraphEdge.colour is missing from the proto",
                               "DreamTickRequest.dry_run has a non-zero default: make it optional"]


def test_one_rpc_per_operation():
    service = pb.DESCRIPTOR.services_by_name["CerememoryService"]
    assert {m.name for m in service.methods} == {op.rpc for op in OPERATIONS.values()}
    for op in OPERATIONS.values():
        method = service.methods_by_name[op.rpc]
        if op.name == "lifecycle.export":
            assert (method.output_type.name, method.server_streaming) == ("ExportChunk", True)
        elif op.name == "lifecycle.import":
            assert (method.input_type.name, method.client_streaming) == ("ImportChunk", True)
        else:
            assert not (method.server_streaming or method.client_streaming), op.name
            assert method.input_type is convert.request_class(op.name).DESCRIPTOR
            assert method.output_type is convert.response_class(op.name).DESCRIPTOR


# ---------------------------------------------------------------- same results as embedded


def scenario(api: cerememory.MemoryAPI) -> list[Any]:
    """Every implemented operation, through the typed API; the JSON of each result."""
    out: list[Any] = []

    def keep(result: Any) -> Any:
        out.append(None if result is None else result.model_dump(mode="json"))
        return result

    a = keep(api.store("the deploy key rotates every Monday", store="semantic", emotion="trust",
                       metadata={"team": "ops", "n": 3, "ratio": 0.5, "tags": ["a", None], "deep": {"x": []}},
                       meta={"intent": "remember rotations", "confidence": 0.0,
                             "alternatives": [{"option": "never rotate", "reason": "risky"}]}))
    b = keep(api.store("Bob likes green tea", created_at=T0, embedding=[1.0, 0.0, 0.0], summary="tea",
                       associations=[{"target_id": str(a.record_id), "association_type": "semantic",
                                      "weight": 0.8}]))
    keep(api.store("jasmine tea tasting notes", store="procedural", embedding=[0.0, 1.0, 0.0]))
    steps = [{"content": {"blocks": [{"text": f"step {i}"}]}, "created_at": T0 + timedelta(hours=i)} for i in range(3)]
    batch = keep(api.store_batch(steps, infer_associations=True))
    keep(api.update(b.record_id, text="Bob likes green tea and jasmine", metadata={"k": 1},
                    meta={"rationale": "he said so"}))
    raw = keep(api.store_raw("user: rotate the key?", session_id="chat-1", turn_id="1", metadata={"m": True}))
    keep(api.store_raw_batch([
        {"session_id": "chat-1", "turn_id": "2", "speaker": "assistant",
         "content": {"blocks": [{"text": "assistant: done, rotated"}]}},
        {"session_id": "chat-1", "secrecy_level": "secret", "visibility": "private_scratch",
         "content": {"blocks": [{"text": "the password is hunter2"}]}},
    ]))
    keep(api.recall("when does the deploy key rotate"))
    keep(api.recall(embedding=[0.1, 0.9, 0.0], reconsolidate=False))
    keep(api.recall(limit=3, reconsolidate=False))
    keep(api.recall("tea", stores=["semantic", "procedural"], min_fidelity=0.0, activation_depth=0, mode="perfect"))
    keep(api.raw_recall("rotate", session_id="chat-1"))
    keep(api.raw_recall(include_private_scratch=True, include_sealed=True, secrecy_levels=["public", "secret"]))
    keep(api.raw_recall(record_ids=[raw.record_id]))
    keep(api.associate(b.record_id, depth=2, min_weight=0.0))
    keep(api.associate(batch.results[1].record_id, types=["sequential"], min_weight=0.0))
    keep(api.timeline(T0 - timedelta(hours=1), T0 + timedelta(days=1), granularity="hour"))
    keep(api.graph(a.record_id, depth=1, include_meta=True))
    keep(api.graph(limit_nodes=5))
    keep(api.set_mode("perfect", scope=["semantic"]))
    keep(api.inspect(a.record_id))
    keep(api.inspect(b.record_id))
    keep(api.forget([batch.results[2].record_id], confirm=True))
    out.append(api.reindex())
    keep(api.stats())
    out.append(api.dispatch("introspect.record", {"record_id": str(batch.results[0].record_id)}))
    out.append(api.dispatch("recall.query", {"cue": {"text": "rotate"}, "reconsolidate": False}))
    out.append(api.dispatch("introspect.fading", {"horizons_days": [7, 3650], "limit": 3}))
    audit = api.dispatch("introspect.audit", {"op": "lifecycle.forget", "limit": 1, "verify": True})
    out.append([audit["verification"]["ok"], audit["entries"][0]["summary"], audit["entries"][0]["record_ids"]])
    out.append(api.dispatch("lifecycle.reinforce", {"record_ids": [str(a.record_id)]}))
    api.update(a.record_id, store="procedural")
    out.append(api.inspect(a.record_id).store)
    return out


UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
T0_DAY = T0.strftime("%Y-%m-%d")


def canonical(value: Any, ids: dict[str, str] | None = None) -> Any:
    """Ids become labels in order of appearance (references must still line up); times of
    'now' and the data directory, which legitimately differ, are blanked; floats are rounded
    because fidelity (and so relevance) moves with the instant a record is read. The raw BM25
    score is blanked (its rank stays): it moves with how the background committer happened to
    split the writes into index segments, since a replaced document counts in its segment's
    statistics until a merge."""
    ids = {} if ids is None else ids
    if isinstance(value, dict):
        if "text_rank" in value and value.get("text") is not None:
            value = {**value, "text": "<bm25>"}
        return {k: canonical(v, ids) for k, v in sorted(value.items()) if k != "data_dir"}
    if isinstance(value, list):
        return [canonical(v, ids) for v in value]
    if isinstance(value, str) and UUID.match(value):
        return ids.setdefault(value, f"id{len(ids)}")
    if isinstance(value, str) and TIME.match(value) and not value.startswith(T0_DAY):
        return "<now>"
    if isinstance(value, float):
        return round(float(f"{value:.5g}"), 6)
    return value


def as_text(value: Any) -> str:
    """JSON text, so that 1 and 1.0 or a missing key and null count as different."""
    return json.dumps(value, sort_keys=True)


def test_every_operation_gives_the_embedded_result(client: GrpcClient, mem: cerememory.Memory):
    remote, embedded = scenario(client), scenario(mem)
    assert len(remote) == len(embedded)
    for n, (got, want) in enumerate(zip(remote, embedded, strict=True)):
        assert as_text(canonical(got)) == as_text(canonical(want)), f"result {n} differs"


class Recording(cerememory.Memory):
    """The embedded API, keeping every request and response JSON that passed through it."""

    calls: list[tuple[str, dict[str, Any], BaseModel]]

    def _invoke(self, call: Any) -> Any:
        result = super()._invoke(call)
        self.calls.append((call.op, call.request, result))
        return result


def test_conversion_round_trips_the_dispatch_json(mem: cerememory.Memory):
    recording = Recording(mem.engine)
    recording.calls = []
    scenario(recording)
    assert {op for op, _, _ in recording.calls} >= {
        "encode.store", "encode.batch", "encode.update", "encode.store_raw", "encode.batch_raw",
        "recall.query", "recall.raw_query", "recall.associate", "recall.timeline", "recall.graph",
        "lifecycle.set_mode", "lifecycle.forget", "lifecycle.reindex", "introspect.stats", "introspect.record"}
    for op, request, result in recording.calls:
        model = OPERATIONS[op].request
        wire = convert.from_proto_request(op, convert.to_proto(op, request))
        assert model.model_validate(wire) == model.model_validate(request), op
        response = result.model_dump(mode="json")
        message = convert.to_proto_response(op, response)
        back = convert.from_proto_response(op, message)
        assert as_text(back) == as_text(response), op
        # what the server sends: the model written into the message directly, the same message
        assert convert.to_proto_response(op, result) == message, op
        # what the typed client methods answer: the model read from the message directly, the same model
        assert convert.response_model(op, message, type(result)) == result, op


def test_an_answer_out_of_the_models_range_is_refused_as_validation_would():
    record = cerememory.MemoryRecord(store=cerememory.StoreType.EPISODIC,
                                     content=cerememory.MemoryContent.of_text("x"))
    answer = m.RecallQueryResponse(memories=[m.RecalledMemory(record=record, relevance_score=0.5,
                                                              rendered_content=record.content)])
    message = convert.to_proto_response("recall.query", answer)
    assert convert.response_model("recall.query", message, m.RecallQueryResponse) == answer
    for spoil in (lambda r: r.ClearField("store"), lambda r: r.ClearField("content"),
                  lambda r: setattr(r, "id", "not-a-uuid"), lambda r: r.content.blocks[0].ClearField("modality")):
        broken = pb.RecallQueryResponse()
        broken.CopyFrom(message)
        spoil(broken.memories[0].record)
        with pytest.raises(ValueError) as raised:  # pydantic's ValidationError, naming the field
            convert.response_model("recall.query", broken, m.RecallQueryResponse)
        assert "memories.0.record" in str(raised.value)


def test_numbers_beyond_json_take_the_same_form_on_both_paths():
    record = cerememory.MemoryRecord(store=cerememory.StoreType.EPISODIC,
                                     content=cerememory.MemoryContent.of_text("x"))
    recalled = m.RecalledMemory(record=record, relevance_score=float("inf"), rendered_content=record.content)
    answer = m.RecallQueryResponse(memories=[recalled])
    message = convert.to_proto_response("recall.query", answer)
    assert message == convert.to_proto_response("recall.query", answer.model_dump(mode="json"))
    assert message.memories[0].relevance_score == float("inf")


@pytest.mark.parametrize("metadata", [{}, {"k": 0, "nested": {"a": [1, "b"]}}])
def test_the_direct_path_writes_zeros_signs_and_empty_structs_as_the_json_path(metadata: dict):
    """The server's writers skip what the wire leaves out (zero ints, absent fields) and keep what
    it carries: -0.0's sign, an empty metadata Struct's presence."""
    record = cerememory.MemoryRecord(store=cerememory.StoreType.EPISODIC, access_count=0, metadata=metadata,
                                     content=cerememory.MemoryContent.of_text("x"),
                                     emotion=cerememory.EmotionVector(valence=-0.0, joy=0.5))
    recalled = m.RecalledMemory(record=record, relevance_score=-0.0, rendered_content=record.content,
                                activation_path=[record.id, uuid.uuid4()])
    answer = m.RecallQueryResponse(memories=[recalled, recalled], undecodable_ids=[uuid.uuid4()])
    message = convert.to_proto_response("recall.query", answer)
    json_path = convert.to_proto_response("recall.query", answer.model_dump(mode="json"))
    assert message.SerializeToString(deterministic=True) == json_path.SerializeToString(deterministic=True)
    assert message.memories[0].record.HasField("metadata")
    assert str(message.memories[1].relevance_score) == "-0.0"
    assert message.memories[0].activation_path == [str(record.id), str(recalled.activation_path[1])]


def test_request_defaults_and_explicit_zeros_survive():
    assert convert.from_proto_request("recall.query", convert.to_proto("recall.query", {})) == {}
    explicit = {"limit": 1, "reconsolidate": False, "activation_depth": 0, "min_fidelity": 0.0,
                "recall_mode": "human", "cue": {"text": ""}}
    wire = convert.from_proto_request("recall.query", convert.to_proto("recall.query", explicit))
    assert wire == explicit
    parsed = m.RecallQueryRequest.model_validate(wire)
    assert (parsed.reconsolidate, parsed.activation_depth, parsed.limit) == (False, 0, 1)


def test_conversion_errors_name_the_field():
    with pytest.raises(CMPError) as err:
        convert.to_proto("encode.store", {"content": {"blocks": [{"text": "x"}]}, "stroe": "semantic"})
    assert (err.value.code, err.value.details["field"]) == (ErrorCode.VALIDATION_ERROR, "stroe")
    with pytest.raises(CMPError) as err:
        convert.to_proto("recall.query", {"stores": ["episodic", "attic"]})
    assert (err.value.code, err.value.details["field"]) == (ErrorCode.STORE_INVALID, "stores[1]")
    with pytest.raises(CMPError) as err:
        convert.to_proto("recall.query", {"limit": "ten"})
    assert err.value.code is ErrorCode.VALIDATION_ERROR and "limit" in err.value.message


# ---------------------------------------------------------------- errors


ERROR_CASES = [
    ("Forget", pb.ForgetRequest(record_ids=[str(uuid.uuid4())]), "FAILED_PRECONDITION", "FORGET_UNCONFIRMED"),
    ("IntrospectRecord", pb.IntrospectRecordRequest(record_id=str(uuid.uuid4())), "NOT_FOUND", "RECORD_NOT_FOUND"),
    ("IntrospectRecord", pb.IntrospectRecordRequest(record_id="not-a-uuid"), "INVALID_ARGUMENT", "VALIDATION_ERROR"),
    ("RecallAssociate", pb.RecallAssociateRequest(record_id=str(uuid.uuid4()), depth=9), "INVALID_ARGUMENT",
     "VALIDATION_ERROR"),
    ("Consolidate", pb.ConsolidateRequest(min_age_hours=-1), "INVALID_ARGUMENT", "VALIDATION_ERROR"),
    ("Stats", pb.StatsRequest(header=pb.CMPHeader(version="2.0")), "FAILED_PRECONDITION", "VERSION_MISMATCH"),
]


@pytest.mark.parametrize(("rpc", "request_message", "status", "code"), ERROR_CASES,
                         ids=[case[3] + "-" + case[0] for case in ERROR_CASES])
def test_errors_carry_status_envelope_and_request_id(stub, rpc, request_message, status, code):
    with pytest.raises(grpc.RpcError) as err:
        getattr(stub, rpc)(request_message, metadata=(("x-request-id", "req-42"),), timeout=30)
    assert err.value.code() == grpc.StatusCode[status]
    trailing = dict(err.value.trailing_metadata())
    envelope = json.loads(trailing["cmp-error"])
    assert envelope["code"] == code
    assert envelope["request_id"] == "req-42"
    assert envelope["message"] == err.value.details()
    assert envelope["details"].get("hint") or envelope["details"].get("field")
    assert trailing["x-request-id"] == "req-42"


def test_request_id_comes_back_on_success_too(stub):
    _, call = stub.Stats.with_call(pb.StatsRequest(), metadata=(("x-request-id", "req-7"),), timeout=30)
    assert dict(call.initial_metadata())["x-request-id"] == "req-7"


def test_client_raises_the_embedded_errors(client: GrpcClient, mem: cerememory.Memory):
    missing = uuid.uuid4()
    calls: list[Callable[[cerememory.MemoryAPI], Any]] = [
        lambda api: api.forget([missing]),
        lambda api: api.forget([missing], confirm=True),
        lambda api: api.inspect(missing),
        lambda api: api.associate(missing, depth=9),
        lambda api: api.recall(limit=0),
        lambda api: api.store(content={"blocks": []}),
        lambda api: api.dispatch("encode.update", {"record_id": str(missing)}),
        lambda api: api.dispatch("lifecycle.consolidate", {"min_age_hours": -1}),
        lambda api: api.dispatch("lifecycle.export", {"encrypt": True}),
        lambda api: api.dispatch("lifecycle.import", {"archive_data": "Q01B"}),
        lambda api: api.dispatch("no.such_op", {}),
    ]
    for n, call in enumerate(calls):
        with pytest.raises(CMPError) as remote:
            call(client)
        with pytest.raises(CMPError) as embedded:
            call(mem)
        assert remote.value.envelope() == embedded.value.envelope(), f"call {n}"


def test_header_request_id_reaches_the_envelope(client: GrpcClient):
    with pytest.raises(CMPError) as err:
        client.dispatch("introspect.record", {"record_id": str(uuid.uuid4()), "header": {"request_id": "h-1"}})
    assert err.value.request_id == "h-1"


def test_import_streams_chunks_and_caps_the_archive(stub, monkeypatch):
    metadata = (("x-request-id", "imp-1"),)
    archive = bytes(range(256)) * 1024  # 256 KiB: four chunks
    chunks = [pb.ImportChunk(request=pb.ImportRequest(archive_id="a1"), data=archive[:65536])]
    chunks += [pb.ImportChunk(data=archive[i:i + 65536]) for i in range(65536, len(archive), 65536)]
    with pytest.raises(grpc.RpcError) as err:
        stub.Import(iter(chunks), metadata=metadata, timeout=30)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS  # reassembled, then refused as no archive
    assert json.loads(dict(err.value.trailing_metadata())["cmp-error"])["code"] == "IMPORT_CONFLICT"

    monkeypatch.setattr(grpc_server, "MAX_IMPORT_BYTES", 100_000)
    with pytest.raises(grpc.RpcError) as err:
        stub.Import(iter(chunks), metadata=metadata, timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    envelope = json.loads(dict(err.value.trailing_metadata())["cmp-error"])
    assert (envelope["code"], envelope["request_id"]) == ("CONTENT_TOO_LARGE", "imp-1")


# ---------------------------------------------------------------- malformed protobuf

SERVICE = pb.DESCRIPTOR.services_by_name["CerememoryService"]
GARBAGE = [
    b"\xff" * 11,  # a tag whose varint never ends
    b"\x0a\x7f",  # a length-delimited field 127 bytes long, with no bytes
    b"\x00",  # field number 0
    b"\x0f",  # wire type 7
]


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field on the wire."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested_value(levels: int) -> bytes:
    """A google.protobuf.Value holding `levels` Structs, each inside the one before
    (built on the wire: protobuf itself refuses to build what it cannot parse)."""
    value = _field(3, b"x")  # string_value
    for _ in range(levels):
        value = _field(5, _field(1, _field(1, b"a") + _field(2, value)))  # struct_value {fields {a: value}}
    return value


def _json_field_paths(message: Any, depth: int = 3) -> list[tuple[list[int], str]]:
    """The field-number paths from `message` to every Struct or Value field, within `depth`."""
    paths: list[tuple[list[int], str]] = []
    for f in message.fields:
        kind = f.message_type.full_name if f.message_type else None
        if kind in ("google.protobuf.Struct", "google.protobuf.Value"):
            paths.append(([f.number], kind))
        elif kind and kind.startswith("cerememory.") and depth > 1:
            paths += [([f.number, *path], k) for path, k in _json_field_paths(f.message_type, depth - 1)]
    return paths


def _call_raw(channel: grpc.Channel, method: Any, data: bytes, metadata: tuple = ()) -> Any:
    """Send `data` as the request bytes of `method`, unchanged, and return the answer."""
    path = f"/{SERVICE.full_name}/{method.name}"
    if method.client_streaming:
        return channel.stream_unary(path)(iter([data]), metadata=metadata, timeout=30)
    if method.server_streaming:
        return list(channel.unary_stream(path)(data, metadata=metadata, timeout=30))
    return channel.unary_unary(path)(data, metadata=metadata, timeout=30)


def _refusal(channel: grpc.Channel, method: Any, data: bytes) -> dict[str, Any]:
    """The CMP envelope of the INVALID_ARGUMENT that `data` gets from `method`."""
    with pytest.raises(grpc.RpcError) as err:
        _call_raw(channel, method, data, (("x-request-id", "bad-bytes"),))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method.name, data, err.value.details())
    envelope = json.loads(dict(err.value.trailing_metadata())["cmp-error"])
    assert (envelope["code"], envelope["request_id"]) == ("VALIDATION_ERROR", "bad-bytes")
    assert envelope["message"] == err.value.details()
    return envelope


def test_malformed_protobuf_is_a_validation_error_on_every_method(served: Shared, channel, stub):
    kept = stub.EncodeStore(pb.EncodeStoreRequest(content=pb.MemoryContent(blocks=[pb.ContentBlock(
        text="kept through the garbage")])), timeout=30).record_id
    before = served.mem.engine.audit.head
    for method in SERVICE.methods:
        for data in GARBAGE:
            envelope = _refusal(channel, method, data)
            assert "the wire format is corrupt" in envelope["message"]
            assert envelope["details"]["message_type"] == method.input_type.full_name
            assert envelope["details"]["hint"]
    good_first_chunk = pb.ImportChunk(request=pb.ImportRequest(archive_id="a1"), data=b"CMA").SerializeToString()
    with pytest.raises(grpc.RpcError) as err:  # a bad chunk after a good one
        channel.stream_unary(f"/{SERVICE.full_name}/Import")(iter([good_first_chunk, GARBAGE[1]]), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert served.mem.engine.audit.head == before
    assert served.mem.stats().total_records == 1
    assert served.mem.inspect(uuid.UUID(kept)).content.blocks[0].text == "kept through the garbage"


def test_too_deeply_nested_json_fields_are_a_validation_error(served: Shared, channel):
    paths = {method: _json_field_paths(method.input_type) for method in SERVICE.methods}
    assert sum(map(len, paths.values())) >= 8  # metadata, spatial, temporal, semantic, ...
    for method, fields in paths.items():
        for numbers, kind in fields:
            payload = _nested_value(200)
            if kind == "google.protobuf.Struct":
                payload = _field(1, _field(1, b"a") + _field(2, payload))  # fields {a: value}
            for number in reversed(numbers):
                payload = _field(number, payload)
            envelope = _refusal(channel, method, payload)
            assert "nests deeper than protobuf parses" in envelope["message"], (method.name, numbers)
    shallow = pb.EncodeStoreRequest(content=pb.MemoryContent(blocks=[pb.ContentBlock(text="shallow")]))
    shallow_bytes = shallow.SerializeToString() + _field(
        pb.EncodeStoreRequest.DESCRIPTOR.fields_by_name["metadata"].number,
        _field(1, _field(1, b"a") + _field(2, _nested_value(5))))
    record_id = _call_raw(channel, SERVICE.methods_by_name["EncodeStore"], shallow_bytes)
    stored = served.mem.inspect(uuid.UUID(pb.EncodeStoreResponse.FromString(record_id).record_id))
    assert stored.metadata == {"a": {"a": {"a": {"a": {"a": {"a": "x"}}}}}}
    assert served.mem.stats().total_records == 1


class Archiver:
    """A handler that implements only export and import, to drive the streaming RPCs."""

    audit = None
    archive = bytes(range(256)) * 700 + b"end"  # 175 KiB: three chunks

    def __init__(self) -> None:
        self.imported: m.ImportRequest | None = None

    def lifecycle_export(self, request: m.ExportRequest) -> m.ExportResponse:
        return m.ExportResponse(archive_id="cma-1", size_bytes=len(self.archive), record_count=3,
                                checksum="sha256:abc", archive_data=self.archive)

    def lifecycle_import(self, request: m.ImportRequest) -> m.ImportResponse:
        self.imported = request
        return m.ImportResponse(records_imported=len(request.archive_data))


def test_export_and_import_stream_in_chunks():
    archiver = Archiver()
    server, port = build_grpc_server(archiver)
    server.start()
    try:
        with GrpcClient(f"127.0.0.1:{port}") as client, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert client.dispatch("lifecycle.export", {}) == Dispatcher(archiver).dispatch("lifecycle.export", {})
            chunks = list(pb_grpc.CerememoryServiceStub(channel).Export(pb.ExportRequest(), timeout=30))
            assert [len(c.data) for c in chunks] == [65536, 65536, len(Archiver.archive) - 131072]
            assert [c.is_last for c in chunks] == [False, False, True]
            assert [c.HasField("metadata") for c in chunks] == [True, False, False]
            assert not chunks[0].metadata.HasField("archive_data")

            response = client.dispatch("lifecycle.import", {"archive_data": Archiver.archive, "strategy": "replace"})
            assert response["records_imported"] == len(Archiver.archive)
            assert archiver.imported.archive_data == Archiver.archive
            assert archiver.imported.strategy == "replace"
    finally:
        server.stop(None).wait(10)


def test_an_import_whose_client_goes_away_imports_nothing(tmp_path: Path):
    with _open(tmp_path / "source") as source:
        for n in range(50):
            source.store(f"note {n} for the archive")
        archive = source.dispatcher.call("lifecycle.export", {}).archive_data
    served = Served(tmp_path / "target")
    try:
        with grpc.insecure_channel(served.target) as channel:
            stub = pb_grpc.CerememoryServiceStub(channel)
            sent, hold = threading.Event(), threading.Event()

            def chunks() -> Iterator[pb.ImportChunk]:
                yield pb.ImportChunk(request=pb.ImportRequest(archive_id="a1"), data=archive[:len(archive) // 2])
                sent.set()
                hold.wait(30)  # the rest of the archive never comes

            call = stub.Import.future(chunks(), timeout=30)
            assert sent.wait(30)
            call.cancel()
            hold.set()
            with pytest.raises(grpc.FutureCancelledError):
                call.result()
        # the stream may have ended as if it were whole: the half archive is then refused
        with GrpcClient(served.target) as client:
            assert client.stats().total_records == 0
    finally:
        served.close()


def test_export_errors_keep_their_envelope(stub):
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Export(pb.ExportRequest(encrypt=True), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert json.loads(dict(err.value.trailing_metadata())["cmp-error"])["code"] == "VALIDATION_ERROR"


def test_api_key_is_required_when_set(tmp_path: Path):
    served = Served(tmp_path / "keyed", keys=KeyRing(["s3cret", "other"]))
    try:
        with GrpcClient(served.target) as anonymous, pytest.raises(CMPError) as err:
            anonymous.stats()
        assert err.value.code is ErrorCode.UNAUTHORIZED
        with GrpcClient(served.target, api_key="wrong") as wrong, pytest.raises(CMPError) as err:
            wrong.stats()
        assert err.value.code is ErrorCode.UNAUTHORIZED
        with GrpcClient(served.target, api_key="s3cret") as keyed:
            assert keyed.stats().total_records == 0
        with grpc.insecure_channel(served.target) as channel:  # probes need no key
            check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
            assert check.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        served.close()


def test_unreachable_server_is_a_cmp_error(tmp_path: Path):
    served = Served(tmp_path / "gone")
    target = served.target
    served.close()
    with GrpcClient(target, timeout=5) as client, pytest.raises(CMPError) as err:
        client.stats()
    assert err.value.code is ErrorCode.SERVER_UNREACHABLE
    assert err.value.details["grpc_status"] == "UNAVAILABLE" and "cannot reach" in err.value.message


# ---------------------------------------------------------------- health and reflection


def test_health_is_serving(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "cerememory.v1.CerememoryService"):
        response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
        assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(channel):
    database = ProtoReflectionDescriptorDatabase(channel)
    assert "cerememory.v1.CerememoryService" in database.get_services()
    service = DescriptorPool(database).FindServiceByName("cerememory.v1.CerememoryService")
    assert {method.name for method in service.methods} == {op.rpc for op in OPERATIONS.values()}
    assert service.methods_by_name["RecallQuery"].input_type.fields_by_name["cue"].message_type.name == "RecallCue"


# ---------------------------------------------------------------- bytes


def test_binary_blocks_round_trip_exactly(client: GrpcClient, stub, mem: cerememory.Memory):
    payload = bytes(range(256)) * 4 + b"\x00\xff\x80" + bytes(reversed(range(256)))
    content = {"blocks": [{"modality": "image", "format": "image/png", "data": payload},
                          {"text": "a picture of nothing"}]}
    record_id = client.store(content=content).record_id
    record = client.inspect(record_id)
    assert record.content.blocks[0].data == payload
    assert record.content.blocks[0].format == "image/png"
    wire = stub.IntrospectRecord(pb.IntrospectRecordRequest(record_id=str(record_id)), timeout=30)
    assert wire.content.blocks[0].data == payload  # raw bytes on the wire, not base64
    assert wire.content.blocks[0].modality == pb.MODALITY_IMAGE
    # text travels once, as readable text (grpcurl shows it), not as bytes
    assert wire.content.blocks[1].text == "a picture of nothing" and wire.content.blocks[1].data == b""
    embedded = mem.inspect(mem.store(content=content).record_id)
    assert as_text(canonical(record.model_dump(mode="json"))) == as_text(canonical(embedded.model_dump(mode="json")))


def test_blocks_beyond_the_default_message_size(client: GrpcClient):
    payload = bytes(range(256)) * (6 * 4096)  # 6 MiB: over gRPC's default 4 MiB message limit
    record_id = client.store(content={"blocks": [{"modality": "image", "data": payload}]}).record_id
    assert client.inspect(record_id).content.blocks[0].data == payload


# ---------------------------------------------------------------- TLS


def test_tls(tmp_path: Path):
    cert, key = self_signed()
    served = Served(tmp_path / "tls", tls=(cert, key))
    try:
        with GrpcClient(served.target, tls_root_cert=cert) as client:
            assert client.store("over TLS").store == "episodic"
        with GrpcClient(served.target, timeout=5) as plaintext, pytest.raises(CMPError):
            plaintext.stats()
    finally:
        served.close()


class Noted:
    """An engine answering recall.query and encode.store with fixed answers, noting the thread
    that ran each call and how many stores each set held. Its first set of stores waits for
    `release`, so that the stores sent meanwhile queue up behind it."""

    audit = None
    background_decay = background_dream = False
    leads = True

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.threads: dict[str, list[str]] = {"recall": [], "store": []}
        self.sets: list[int] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def gathers(self, op: str) -> bool:
        return op == "encode.store"

    def recall_query(self, request: m.RecallQueryRequest) -> m.RecallQueryResponse:
        self.threads["recall"].append(threading.current_thread().name)
        return m.RecallQueryResponse(memories=[], total_candidates=0)

    def encode_store_each(self, calls: list[Any]) -> list[m.EncodeStoreResponse]:
        self.threads["store"].append(threading.current_thread().name)
        self.sets.append(len(calls))
        self.entered.set()
        self.release.wait(60)
        return [m.EncodeStoreResponse(record_id=uuid.uuid4(), store="episodic") for _ in calls]

    def close(self) -> None:
        pass


def test_quick_reads_run_on_the_servers_loop_and_writes_on_a_worker(tmp_path: Path):
    noted = Noted(tmp_path)
    noted.release.set()
    server, port = build_grpc_server(noted)
    server.start()
    try:
        with GrpcClient(f"127.0.0.1:{port}") as client:
            for _ in range(50):
                client.recall("anything")
            client.store("a note")
    finally:
        server.stop(None).wait(10)
    # the first read goes to a worker (how quick it is, the server learns from it; a first call
    # takes longest), and once the read is known to be quick it runs on the server's loop
    recalls = noted.threads["recall"]
    assert recalls[0].startswith("cerememory-call") and "cerememory-grpc" in recalls
    assert [name.startswith("cerememory-call") for name in noted.threads["store"]] == [True]


def test_stores_that_arrive_together_are_taken_as_one_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    arrived = threading.Semaphore(0)
    parse = convert.from_proto_request

    def counted(op: str, message: Any) -> dict[str, Any]:
        if op == "encode.store":
            arrived.release()
        return parse(op, message)

    monkeypatch.setattr(convert, "from_proto_request", counted)
    noted = Noted(tmp_path)
    server, port = build_grpc_server(noted)
    server.start()
    try:
        with GrpcClient(f"127.0.0.1:{port}") as client, ThreadPoolExecutor(8) as pool:
            first = pool.submit(client.store, "the first")
            assert noted.entered.wait(30)
            rest = [pool.submit(client.store, f"store {n}") for n in range(7)]
            for _ in range(8):  # all eight have reached the server: the first set still runs
                assert arrived.acquire(timeout=30)
            noted.release.set()
            ids = {first.result(30).record_id} | {future.result(30).record_id for future in rest}
    finally:
        server.stop(None).wait(10)
    assert noted.sets == [1, 7]
    assert len(ids) == 8
    # the worker that committed the first set took the next itself, not waiting for the loop
    assert len(set(noted.threads["store"])) == 1
