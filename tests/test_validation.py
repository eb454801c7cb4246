"""Hostile input gets the right CMP error, names the field, and leaves stored data intact."""

from __future__ import annotations

import base64
import math

import pytest

from cerememory import CMPError, ErrorCode
from cerememory.cmp.errors import GRPC_STATUS, HTTP_STATUS
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
    ("blank text", lambda: {"content": {"blocks": [text_block("   ")]}}, ErrorCode.VALIDATION_ERROR,
     "content.blocks[0]"),
    ("nan embedding", lambda: {"content": {"blocks": [text_block("x", embedding=[0.1, math.nan])]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].embedding"),
    ("inf embedding", lambda: {"content": {"blocks": [text_block("x", embedding=[math.inf])]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].embedding"),
    ("empty embedding", lambda: {"content": {"blocks": [text_block("x", embedding=[])]}},
     ErrorCode.VALIDATION_ERROR, "content.blocks[0].embedding"),
    ("unknown store", lambda: {"content": {"blocks": [text_block("x")]}, "store": "attic"},
     ErrorCode.STORE_INVALID, "store"),
    ("unknown modality", lambda: {"content": {"blocks": [{"modality": "smell", "text": "x"}]}},
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
    assert err.value.details["field"] == "records[3].content.blocks[0].embedding"
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
