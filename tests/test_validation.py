"""Hostile input gets the right CMP error, names the field, and leaves stored data intact."""

from __future__ import annotations

import base64
import json
import math

import pytest

from cerememory import CMPError, ErrorCode
from cerememory.cmp.errors import GRPC_STATUS, HTTP_STATUS
from cerememory.limits import (
    MAX_ID_CHARS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_ITEMS,
    MAX_META_BYTES,
    MAX_META_ITEMS,
)
from cerememory.model import MIB, EmotionVector


def text_block(text: str, **extra) -> dict:
    return {"modality": "text", "text": text, **extra}


def store(mem, block: dict, **extra) -> dict:
    return mem.dispatch("encode.store", {"content": {"blocks": [block]}, **extra})


@pytest.fixture
def seeded(mem):
    rid = mem.store("the original memory").record_id
    mem.store_raw("the original turn", session_id="s")
    return mem, rid


def assert_untouched(mem, rid):
    stats = mem.stats()
    assert stats.total_records == 1
    assert stats.raw_journal_records == 1
    assert mem.inspect(rid).content.plain_text() == "the original memory"
    assert len(mem.recall("original").memories) == 1


BAD_STORES = [
    ("oversized text", lambda: {"content": {"blocks": [text_block("x" * (MIB + 1))]}},
     ErrorCode.CONTENT_TOO_LARGE, "content.blocks[0]"),
    ("oversized image", lambda: {"content": {"blocks": [
        {"modality": "image", "data": base64.b64encode(b"\0" * (10 * MIB + 1)).decode()}]}},
     ErrorCode.CONTENT_TOO_LARGE, "content.blocks[0]"),
    ("invalid utf-8", lambda: {"content": {"blocks": [{"modality": "text", "data": [0xFF, 0xFE, 0x41]}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0]"),
    ("invalid json", lambda: {"content": {"blocks": [{"modality": "structured", "text": "{nope"}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0]"),
    ("no blocks", lambda: {"content": {"blocks": []}}, ErrorCode.VALIDATION_ERROR, "content.blocks"),
    ("text and other data", lambda: {"content": {"blocks": [text_block("hello", data="aGVsbG9v")]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0]"),
    ("text and data not base64", lambda: {"content": {"blocks": [text_block("hello", data="aGVsbG8=é")]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0]"),
    ("blank text", lambda: {"content": {"blocks": [text_block("   ")]}}, ErrorCode.VALIDATION_ERROR,
     "content.blocks[0]"),
    ("nan embedding", lambda: {"content": {"blocks": [text_block("x", embedding=[0.1, math.nan])]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].embedding[1]"),
    ("inf embedding", lambda: {"content": {"blocks": [text_block("x", embedding=[math.inf])]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].embedding[0]"),
    ("empty embedding", lambda: {"content": {"blocks": [text_block("x", embedding=[])]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].embedding"),
    ("unknown store", lambda: {"content": {"blocks": [text_block("x")]}, "store": "attic"},
     ErrorCode.STORE_INVALID, "store"),
    ("unknown modality", lambda: {"content": {"blocks": [{"modality": "smell", "text": "x"}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].modality"),
    ("modality a list", lambda: {"content": {"blocks": [{"modality": ["text"], "text": "x"}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].modality"),
    ("modality an object", lambda: {"content": {"blocks": [{"modality": {"text": 1}, "data": "eA=="}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].modality"),
    ("unknown field", lambda: {"content": {"blocks": [text_block("x")]}, "colour": "red"},
     ErrorCode.VALIDATION_ERROR, "colour"),
    ("emotion out of range", lambda: {"content": {"blocks": [text_block("x")]}, "emotion": {"joy": 1.5}},
     ErrorCode.VALIDATION_ERROR, "emotion.joy"),
    ("valence out of range", lambda: {"content": {"blocks": [text_block("x")]}, "emotion": {"valence": -2}},
     ErrorCode.VALIDATION_ERROR, "emotion.valence"),
    ("weight out of range", lambda: {"content": {"blocks": [text_block("x")]}, "associations": [
        {"target_id": "01890000-0000-7000-8000-000000000000", "weight": 7}]},
     ErrorCode.VALIDATION_ERROR, "associations[0].weight"),
    ("unknown association type", lambda: {"content": {"blocks": [text_block("x")]}, "associations": [
        {"target_id": "01890000-0000-7000-8000-000000000000", "association_type": "magic"}]},
     ErrorCode.VALIDATION_ERROR, "associations[0].association_type"),
    ("bad base64", lambda: {"content": {"blocks": [{"modality": "text", "data": "not base64!"}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].data"),
    ("bad byte array", lambda: {"content": {"blocks": [{"modality": "text", "data": [300]}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].data"),
    ("confidence out of range", lambda: {"content": {"blocks": [text_block("x")]}, "meta": {"confidence": 2}},
     ErrorCode.VALIDATION_ERROR, "meta.confidence"),
    ("nil meta edge target", lambda: {"content": {"blocks": [text_block("x")]}, "meta": {"context_edges": [
        {"target_id": "00000000-0000-0000-0000-000000000000"}]}},
     ErrorCode.VALIDATION_ERROR, "meta.context_edges[0].target_id"),
    ("missing association target", lambda: {"content": {"blocks": [text_block("x")]}, "associations": [
        {"target_id": "01890000-0000-7000-8000-000000000000"}]},
     ErrorCode.RECORD_NOT_FOUND, None),
]


@pytest.mark.parametrize("name,request_body,code,field", BAD_STORES, ids=[b[0] for b in BAD_STORES])
def test_bad_store_requests(seeded, name, request_body, code, field):
    mem, rid = seeded
    with pytest.raises(CMPError) as err:
        mem.dispatch("encode.store", request_body())
    assert err.value.code is code, err.value.message
    if field is not None:
        assert err.value.details["field"] == field
        assert field in err.value.message
    assert_untouched(mem, rid)


@pytest.mark.parametrize("data", ["aGVsbG8=", list(b"hello")], ids=["base64", "integer array"])
def test_text_with_the_same_data_is_one_block(mem, data):
    """An answer read back and sent again carries each text block as text and as data: taken
    when both say the same bytes, in either form data takes."""
    record = mem.inspect(store(mem, text_block("hello", data=data))["record_id"])
    assert record.content.blocks[0].data == b"hello"


@pytest.mark.parametrize("block,expected", [
    ({"text": "plain"}, "text/plain"),
    ({"modality": "text", "format": None, "text": "plain"}, "text/plain"),
    ({"modality": "text", "format": "text/markdown", "text": "# kept"}, "text/markdown"),
    ({"modality": "structured", "text": '{"a": 1}'}, "application/json"),
    ({"modality": "image", "data": "aGVsbG8="}, "application/octet-stream"),
    ({"modality": "audio", "data": list(b"raw")}, "application/octet-stream"),
])
def test_a_block_without_a_format_is_stored_with_its_modalitys(mem, block, expected):
    record = mem.inspect(store(mem, block)["record_id"])
    assert record.content.blocks[0].format == expected


def test_batch_of_1001_is_refused_whole(seeded):
    mem, rid = seeded
    records = [{"content": {"blocks": [text_block(f"r{i}")]}} for i in range(1001)]
    with pytest.raises(CMPError) as err:
        mem.dispatch("encode.batch", {"records": records})
    assert err.value.code is ErrorCode.VALIDATION_ERROR
    assert "records" in err.value.message
    assert_untouched(mem, rid)


def test_batch_with_one_bad_record_stores_nothing(seeded):
    mem, rid = seeded
    records = [{"content": {"blocks": [text_block(f"r{i}")]}} for i in range(5)]
    records[3]["content"]["blocks"][0]["embedding"] = [float("nan")]
    with pytest.raises(CMPError) as err:
        mem.dispatch("encode.batch", {"records": records})
    assert err.value.details["field"] == "records[3].content.blocks[0].embedding[0]"
    assert_untouched(mem, rid)


@pytest.mark.parametrize("body,field", [
    ({"session_id": "  ", "content": {"blocks": [text_block("x")]}}, "session_id"),
    ({"session_id": "s", "content": {"blocks": [text_block("x")]}, "visibility": "public"}, "visibility"),
    ({"session_id": "s", "content": {"blocks": [text_block("x")]}, "secrecy_level": "top"}, "secrecy_level"),
    ({"content": {"blocks": [text_block("x")]}}, "session_id"),
])
def test_bad_raw_requests(seeded, body, field):
    mem, rid = seeded
    with pytest.raises(CMPError) as err:
        mem.dispatch("encode.store_raw", body)
    assert err.value.code is ErrorCode.VALIDATION_ERROR
    assert err.value.details["field"] == field
    assert_untouched(mem, rid)


@pytest.mark.parametrize("op,body,code", [
    ("recall.query", {"limit": 0}, ErrorCode.VALIDATION_ERROR),
    ("recall.query", {"stores": ["attic"]}, ErrorCode.STORE_INVALID),
    ("recall.query", {"cue": {"embedding": [math.nan]}}, ErrorCode.VALIDATION_ERROR),
    ("recall.query", {"cue": {"image": "iVBORw0KGgo="}}, ErrorCode.MODALITY_UNSUPPORTED),
    ("recall.query", {"activation_depth": 9}, ErrorCode.VALIDATION_ERROR),
    ("recall.query", {"recall_mode": "dreamy"}, ErrorCode.VALIDATION_ERROR),
    ("recall.query", {"cue": {"temporal": {"start": "2025-01-02T00:00:00Z", "end": "2025-01-01T00:00:00Z"}}},
     ErrorCode.VALIDATION_ERROR),
    ("recall.associate", {"record_id": "not-a-uuid"}, ErrorCode.VALIDATION_ERROR),
    ("recall.associate", {"record_id": "01890000-0000-7000-8000-000000000000", "limit": 257},
     ErrorCode.VALIDATION_ERROR),
    ("recall.timeline", {"range": {"start": "2025-01-01T00:00:00Z", "end": "2025-01-02T00:00:00Z"},
                         "granularity": "fortnight"}, ErrorCode.VALIDATION_ERROR),
    ("lifecycle.set_mode", {"mode": "perfect", "scope": ["attic"]}, ErrorCode.STORE_INVALID),
    ("lifecycle.forget", {"confirm": True}, ErrorCode.VALIDATION_ERROR),
    ("lifecycle.forget", {"store": "episodic"}, ErrorCode.FORGET_UNCONFIRMED),
    ("introspect.record", {"record_id": "01890000-0000-7000-8000-000000000000"}, ErrorCode.RECORD_NOT_FOUND),
    ("recall.query", "not an object", ErrorCode.VALIDATION_ERROR),
])
def test_bad_requests_of_other_operations(seeded, op, body, code):
    mem, rid = seeded
    with pytest.raises(CMPError) as err:
        mem.dispatch(op, body)
    assert err.value.code is code, err.value.message
    assert err.value.message
    assert_untouched(mem, rid)


def test_emotion_label_parser():
    assert EmotionVector.from_label(" Happy ").joy == 1.0
    angry = EmotionVector.from_label("ANGRY")
    assert (angry.anger, angry.intensity, angry.valence) == (1.0, 1.0, -0.9)
    with pytest.raises(ValueError, match="unknown emotion label"):
        EmotionVector.from_label("meh")


def test_every_error_code_maps_to_http_and_grpc():
    for code in ErrorCode:
        assert code in HTTP_STATUS and code in GRPC_STATUS
    envelope = CMPError(ErrorCode.RATE_LIMITED, "slow down", hint="wait", retry_after=2).envelope()
    assert set(envelope) == {"code", "message", "details", "retry_after", "request_id"}
    again = CMPError.from_envelope(envelope)
    assert (again.code, again.hint, again.retry_after) == (ErrorCode.RATE_LIMITED, "wait", 2)


# ---------------------------------------------------------------- shape limits of JSON-like fields


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def nested_list(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def content(text: str = "x") -> dict:
    return {"blocks": [text_block(text)]}


STORE = "encode.store"
RAW = "encode.store_raw"
OVER_LIMITS = [
    ("metadata too deep", STORE, lambda: {"content": content(), "metadata": nested(MAX_JSON_DEPTH + 1)},
     ErrorCode.VALIDATION_ERROR, "metadata", f"more than {MAX_JSON_DEPTH} levels"),
    ("metadata 100,000 deep", STORE, lambda: {"content": content(), "metadata": nested(100_000)},
     ErrorCode.VALIDATION_ERROR, "metadata", f"more than {MAX_JSON_DEPTH} levels"),
    ("array nesting counts too", STORE, lambda: {"content": content(), "metadata": {"l": nested_list(MAX_JSON_DEPTH)}},
     ErrorCode.VALIDATION_ERROR, "metadata", "levels deep"),
    ("metadata too many items", STORE, lambda: {"content": content(), "metadata": {
        "l": list(range(MAX_JSON_ITEMS))}}, ErrorCode.VALIDATION_ERROR, "metadata", str(MAX_JSON_ITEMS)),
    ("metadata too many keys", STORE, lambda: {"content": content(), "metadata": {
        f"k{i}": i for i in range(MAX_JSON_ITEMS + 1)}}, ErrorCode.VALIDATION_ERROR, "metadata", str(MAX_JSON_ITEMS)),
    ("metadata too large", STORE, lambda: {"content": content(), "metadata": {"big": "x" * MAX_JSON_BYTES}},
     ErrorCode.CONTENT_TOO_LARGE, "metadata", str(MAX_JSON_BYTES)),
    ("metadata integer beyond 64 bits", STORE, lambda: {"content": content(), "metadata": {"n": [2**64]}},
     ErrorCode.VALIDATION_ERROR, "metadata", "n[0]"),
    ("context.spatial too deep", STORE, lambda: {"content": content(), "context": {
        "spatial": nested(MAX_JSON_DEPTH + 1)}}, ErrorCode.VALIDATION_ERROR, "context.spatial", "levels deep"),
    ("context.session_id too long", STORE, lambda: {"content": content(), "context": {
        "session_id": "s" * (MAX_ID_CHARS + 1)}}, ErrorCode.VALIDATION_ERROR, "context.session_id", "256"),
    ("meta list too long", STORE, lambda: {"content": content(), "meta": {"tags": ["t"] * (MAX_META_ITEMS + 1)}},
     ErrorCode.VALIDATION_ERROR, "meta", f"tags has {MAX_META_ITEMS + 1} entries"),
    ("meta edge evidence too long", STORE, lambda: {"content": content(), "meta": {"context_edges": [
        {"target_id": "01890000-0000-7000-8000-000000000000", "evidence": [{"label": "e"}] * (MAX_META_ITEMS + 1)}]}},
     ErrorCode.VALIDATION_ERROR, "meta", "context_edges[0].evidence"),
    ("meta text too large", STORE, lambda: {"content": content(), "meta": {
        "intent": "i" * MAX_META_BYTES, "rationale": "r"}}, ErrorCode.CONTENT_TOO_LARGE, "meta", str(MAX_META_BYTES)),
    ("structured block 100,000 deep", STORE, lambda: {"content": {"blocks": [
        {"modality": "structured", "text": "[" * 100_000 + "]" * 100_000}]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0]", "nested too deeply"),
    ("raw metadata too deep", RAW, lambda: {"session_id": "s", "content": content(),
                                            "metadata": nested(MAX_JSON_DEPTH + 1)},
     ErrorCode.VALIDATION_ERROR, "metadata", "levels deep"),
    ("raw topic_id of 2,000,000 characters", RAW, lambda: {"session_id": "s", "content": content(),
                                                           "topic_id": "t" * 2_000_000},
     ErrorCode.VALIDATION_ERROR, "topic_id", "256"),
    ("raw session_id too long", RAW, lambda: {"session_id": "s" * (MAX_ID_CHARS + 1), "content": content()},
     ErrorCode.VALIDATION_ERROR, "session_id", "256"),
    ("raw turn_id too long", RAW, lambda: {"session_id": "s", "turn_id": "t" * (MAX_ID_CHARS + 1),
                                           "content": content()},
     ErrorCode.VALIDATION_ERROR, "turn_id", "256"),
    ("raw batch names the record", "encode.batch_raw", lambda: {"records": [
        {"session_id": "s", "content": content()},
        {"session_id": "s", "topic_id": "t" * (MAX_ID_CHARS + 1), "content": content()}]},
     ErrorCode.VALIDATION_ERROR, "records[1].topic_id", "256"),
    ("batch names the record", "encode.batch", lambda: {"records": [
        {"content": content()}, {"content": content(), "metadata": nested(MAX_JSON_DEPTH + 1)}]},
     ErrorCode.VALIDATION_ERROR, "records[1].metadata", "levels deep"),
    ("recall.list filter too deep", "recall.list", lambda: {"store": "episodic", "metadata": {
        "k": nested(MAX_JSON_DEPTH)}}, ErrorCode.VALIDATION_ERROR, "metadata", "levels deep"),
    ("cue.semantic too deep", "recall.query", lambda: {"cue": {"semantic": nested(MAX_JSON_DEPTH + 1)}},
     ErrorCode.VALIDATION_ERROR, "cue.semantic", "levels deep"),
    ("dream session_id too long", "lifecycle.dream_tick", lambda: {"session_id": "s" * (MAX_ID_CHARS + 1)},
     ErrorCode.VALIDATION_ERROR, "session_id", "256"),
]


@pytest.mark.parametrize("name,op,body,code,field,words", OVER_LIMITS, ids=[c[0] for c in OVER_LIMITS])
def test_json_fields_and_ids_over_their_limits_are_refused(seeded, name, op, body, code, field, words):
    mem, rid = seeded
    with pytest.raises(CMPError) as err:
        mem.dispatch(op, body())
    assert err.value.code is code, err.value.message
    assert err.value.details["field"] == field
    assert field in err.value.message and words in err.value.message, err.value.message
    assert_untouched(mem, rid)


def test_update_requests_are_held_to_the_same_limits(seeded):
    mem, rid = seeded
    for body, field in (({"metadata": nested(MAX_JSON_DEPTH + 1)}, "metadata"),
                        ({"meta": {"goals": ["g"] * (MAX_META_ITEMS + 1)}}, "meta")):
        with pytest.raises(CMPError) as err:
            mem.dispatch("encode.update", {"record_id": str(rid), **body})
        assert err.value.details["field"] == field
    assert_untouched(mem, rid)


def test_what_is_within_the_limits_is_stored_and_read_back(seeded):
    mem, _ = seeded
    metadata = {"deep": nested(MAX_JSON_DEPTH - 1), "ints": [-(2**63), 2**64 - 1], "text": "é" * 1000}
    rid = mem.dispatch("encode.store", {"content": content("within limits"), "metadata": metadata,
                                        "meta": {"tags": ["t"] * MAX_META_ITEMS}})["record_id"]
    record = mem.dispatch("introspect.record", {"record_id": rid})
    assert record["metadata"] == metadata and len(record["meta"]["tags"]) == MAX_META_ITEMS
    raw = mem.dispatch("encode.store_raw", {"session_id": "s" * MAX_ID_CHARS, "topic_id": "t" * MAX_ID_CHARS,
                                            "turn_id": "u" * MAX_ID_CHARS, "content": content()})
    assert raw["session_id"] == "s" * MAX_ID_CHARS


# ---------------------------------------------------------------- text that is not valid Unicode

SURROGATE = json.loads('"bad \\ud800 text"')  # what json.loads makes of a lone surrogate escape
NOT_UNICODE = [
    (STORE, lambda: {"content": content(), "metadata": {"k": SURROGATE}}, "metadata"),
    (STORE, lambda: {"content": content(), "metadata": {"k": {"deeper": [SURROGATE]}}}, "metadata"),
    (STORE, lambda: {"content": content(), "metadata": {"k": {SURROGATE: 1}}}, "metadata"),
    (STORE, lambda: {"content": content(), "meta": {"intent": SURROGATE}}, "meta.intent"),
    (STORE, lambda: {"content": content(), "meta": {"goals": ["ok", SURROGATE]}}, "meta.goals[1]"),
    (STORE, lambda: {"content": content(SURROGATE)}, "content.blocks[0]"),
    (STORE, lambda: {"content": {"blocks": [text_block("x")], "summary": SURROGATE}}, "content.summary"),
    (STORE, lambda: {"content": content(), "context": {"spatial": {"place": SURROGATE}}}, "context.spatial"),
    (RAW, lambda: {"session_id": SURROGATE, "content": content()}, "session_id"),
    (RAW, lambda: {"session_id": "s", "content": content(), "metadata": {"k": SURROGATE}}, "metadata"),
    ("recall.query", lambda: {"cue": {"text": SURROGATE}}, "cue.text"),
    ("recall.raw_query", lambda: {"query": SURROGATE}, "query"),
    ("recall.list", lambda: {"store": "episodic", "metadata": {"k": SURROGATE}}, "metadata"),
]


@pytest.mark.parametrize("op,body,field", NOT_UNICODE, ids=[f"{c[0]}:{c[2]}:{n}" for n, c in enumerate(NOT_UNICODE)])
def test_text_that_is_not_valid_unicode_is_refused_naming_the_field(seeded, op, body, field):
    mem, rid = seeded
    with pytest.raises(CMPError) as err:
        mem.dispatch(op, body())
    assert err.value.code is ErrorCode.VALIDATION_ERROR, err.value.message
    assert err.value.details["field"] == field
    assert "Unicode" in err.value.message or "unicode" in err.value.message
    err.value.message.encode("utf-8")  # the error itself can be sent
    assert_untouched(mem, rid)


def test_a_lone_surrogate_over_http_is_a_400_naming_the_field(http_server):
    import httpx

    for body, field in (({"content": content(), "metadata": {"k": SURROGATE}}, "metadata"),
                        ({"content": content(), "metadata": {SURROGATE: 1}}, "metadata")):
        response = httpx.post(f"{http_server.url}/v1/encode", content=json.dumps(body),
                              headers={"Content-Type": "application/json"}, timeout=30)
        assert response.status_code == 400, response.text
        assert response.json()["details"]["field"].startswith(field)
    assert httpx.get(f"{http_server.url}/v1/introspect/stats", timeout=30).json()["total_records"] == 0


# ---------------------------------------------------------------- strict flags and counts


@pytest.mark.parametrize("op,body,field", [
    ("lifecycle.forget", {"store": "episodic", "confirm": "yes"}, "confirm"),
    ("lifecycle.forget", {"store": "episodic", "confirm": 1}, "confirm"),
    ("lifecycle.forget", {"store": "episodic", "confirm": True, "cascade": "true"}, "cascade"),
    ("recall.query", {"limit": True}, "limit"),
    ("recall.query", {"limit": 1.0}, "limit"),
    ("recall.query", {"limit": "5"}, "limit"),
    ("recall.query", {"include_decayed": "false"}, "include_decayed"),
    ("recall.list", {"store": "episodic", "limit": False}, "limit"),
    ("encode.batch", {"records": [{"content": {"blocks": [{"text": "x"}]}}], "infer_associations": 1},
     "infer_associations"),
    ("encode.store", {"content": {"blocks": [{"text": "x"}]}, "meta": {"schema_version": "1"}},
     "meta.schema_version"),
    ("encode.store", {"content": {"blocks": [{"text": "x"}]}, "meta": {"alternatives": [
        {"option": "o", "chosen": "yes"}]}}, "meta.alternatives[0].chosen"),
    ("lifecycle.dream_tick", {"dry_run": "no"}, "dry_run"),
    # an instant at the calendar's end was stored, then broke every read of its record
    ("encode.store", {"content": content(), "created_at": "9999-12-31T23:59:59.999999Z"}, "created_at"),
    ("encode.store", {"content": content(), "created_at": "0001-01-01T00:00:00Z"}, "created_at"),
    ("encode.store", {"content": content(), "created_at": 0}, "created_at"),
    ("encode.store_raw", {"session_id": "s", "content": content(), "created_at": "9999-12-31T00:00:00Z"},
     "created_at"),
    ("recall.query", {"header": {"timestamp": True}}, "header.timestamp"),
    ("recall.query", {"min_fidelity": False}, "min_fidelity"),
    ("recall.query", {"cue": {"embedding": [False, 0.5]}}, "cue.embedding[0]"),
    ("recall.timeline", {"range": {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"},
                         "emotion_filter": {"valence": True}}, "emotion_filter.valence"),
])
def test_flags_counts_numbers_and_instants_are_strict(seeded, op, body, field):
    """No "yes" for true, no true for 1 or 1.0, no number for an instant, no instant a record
    could not be read back with."""
    mem, rid = seeded
    with pytest.raises(CMPError) as err:
        mem.dispatch(op, body)
    assert err.value.code is ErrorCode.VALIDATION_ERROR, err.value.message
    assert err.value.details["field"] == field
    assert_untouched(mem, rid)


def test_every_request_flag_and_count_is_strict():
    """Walks every request model, and every model it holds, for a bool or int that would still
    take "yes" or true."""
    import typing

    from pydantic import BaseModel

    from cerememory.cmp.dispatch import OPERATIONS

    def models(tp: object) -> list[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        return [m for arg in typing.get_args(tp) for m in models(arg)]

    seen: set[type[BaseModel]] = set()
    lax: list[str] = []
    todo = [op.request for op in OPERATIONS.values()]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            todo.extend(models(info.annotation))
            kinds = {a for a in typing.get_args(info.annotation) or (info.annotation,)} - {type(None)}
            if kinds & {bool, int} and not any(getattr(meta, "strict", False) for meta in info.metadata):
                lax.append(f"{model.__name__}.{name}")
    assert lax == []
