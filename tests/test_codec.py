"""Property tests: any valid record survives the msgpack codec and the JSON wire form unchanged."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cerememory.cmp import messages as m
from cerememory.limits import ANSWER_MAX_DEPTH
from cerememory.model import (
    EMOTION_CHANNELS,
    Association,
    AssociationType,
    ContentBlock,
    EmotionVector,
    MemoryContent,
    MemoryRecord,
    MetaAlternative,
    MetaEdge,
    MetaEvidenceRef,
    MetaMemory,
    Modality,
    RawJournalRecord,
    StoreType,
)
from cerememory.storage import codec
from cerememory.stores.bodies import BODY_FIELDS, NOT_IN_BODY, record_bodies
from cerememory.stores.journal import BODY_FIELDS as RAW_BODY
from cerememory.transport import grpc_convert

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
moments = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
words = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40).filter(str.strip)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
vectors = st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=8)


@st.composite
def blocks(draw) -> ContentBlock:
    modality = draw(st.sampled_from(list(Modality)))
    if modality is Modality.TEXT:
        data = draw(words).encode("utf-8")
    elif modality in (Modality.STRUCTURED, Modality.SPATIAL, Modality.TEMPORAL, Modality.INTEROCEPTIVE):
        data = json.dumps(draw(json_values)).encode()
    else:
        data = draw(st.binary(min_size=1, max_size=64))
    return ContentBlock(modality=modality, data=data, embedding=draw(st.none() | vectors))


emotions = st.builds(EmotionVector, **{c: unit for c in EMOTION_CHANNELS}, intensity=unit,
                     valence=st.floats(-1.0, 1.0, allow_nan=False))
evidence = st.builds(MetaEvidenceRef, record_id=st.none() | st.uuids(), label=st.none() | words,
                     excerpt=st.none() | words, confidence=st.none() | unit)
metas = st.builds(
    MetaMemory,
    capture_status=st.sampled_from(["provided", "inferred", "legacy", "unavailable"]),
    intent=st.none() | words, rationale=st.none() | words, goals=st.lists(words, max_size=2),
    evidence=st.lists(evidence, max_size=2),
    alternatives=st.lists(st.builds(MetaAlternative, option=words, reason=st.none() | words,
                                    chosen=st.booleans()), max_size=2),
    confidence=st.none() | unit,
    context_edges=st.lists(st.builds(MetaEdge, target_id=st.uuids(version=4),
                                     relation=st.sampled_from(["supports", "contradicts", "context_of"]),
                                     rationale=st.none() | words), max_size=2),
    tags=st.lists(words, max_size=3), captured_at=st.none() | moments,
)
contents = st.builds(MemoryContent, blocks=st.lists(blocks(), min_size=1, max_size=3),
                     summary=st.none() | words)
records = st.builds(
    MemoryRecord,
    id=st.uuids(), store=st.sampled_from(list(StoreType)), created_at=moments, content=contents,
    emotion=emotions, meta=metas,
    metadata=st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    associations=st.lists(st.builds(Association, target_id=st.uuids(),
                                    association_type=st.sampled_from(list(AssociationType)),
                                    weight=unit, created_at=moments), max_size=2),
)


@settings(max_examples=150)
@given(records)
def test_record_body_round_trips_through_the_codec(record: MemoryRecord):
    blob = codec.pack_model(record, include=BODY_FIELDS)
    rest = record.model_dump(exclude=BODY_FIELDS)
    assert codec.unpack_model(MemoryRecord, blob, **rest) == record


@settings(max_examples=40)
@given(st.lists(records, min_size=1, max_size=3), emotions, metas)
def test_record_bodies_are_the_codec_dump_byte_for_byte(batch: list[MemoryRecord], emotion: EmotionVector,
                                                        meta: MetaMemory):
    batch += [record.model_copy(update={"emotion": emotion, "meta": meta}) for record in batch]  # shared parts
    assert record_bodies(batch) == [codec.pack_model(r, include=BODY_FIELDS, exclude=NOT_IN_BODY) for r in batch]


@settings(max_examples=150)
@given(records)
def test_record_round_trips_through_json(record: MemoryRecord):
    wire = json.loads(json.dumps(record.model_dump(mode="json")))
    assert MemoryRecord.model_validate(wire) == record


@settings(max_examples=80)
@given(st.builds(RawJournalRecord, session_id=words, content=contents, meta=metas, created_at=moments,
                 derived_memory_ids=st.lists(st.uuids(), max_size=2),
                 metadata=st.dictionaries(st.text(max_size=8), json_values, max_size=3)))
def test_raw_record_round_trips_through_the_codec(record: RawJournalRecord):
    blob = codec.pack_model(record, include=RAW_BODY)
    rest = record.model_dump(exclude=RAW_BODY)
    assert codec.unpack_model(RawJournalRecord, blob, **rest) == record


@given(st.uuids(), moments)
def test_codec_keeps_uuids_and_times_exact(value: uuid.UUID, moment: datetime):
    assert codec.unpack(codec.pack({"id": value, "at": moment})) == {"id": value, "at": moment}


@settings(max_examples=80)
@given(metadata=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
       spatial=st.none() | json_values)
def test_what_a_request_may_carry_is_stored_and_answered(metadata: dict, spatial: object):
    """Anything the request limits accept packs, unpacks and goes out as JSON and protobuf."""
    req = m.EncodeStoreRequest.model_validate({"content": {"blocks": [{"text": "x"}]}, "metadata": metadata,
                                             "context": {"spatial": spatial}})
    stored = {**(req.metadata or {}), "_context": req.context.model_dump(mode="json", exclude_none=True)}
    record = MemoryRecord(store=StoreType.EPISODIC, content=req.content, metadata=stored)
    back = codec.unpack_model(MemoryRecord, codec.pack_model(record, include=BODY_FIELDS),
                              **record.model_dump(exclude=BODY_FIELDS))
    assert back == record
    message = grpc_convert.to_proto_response("introspect.record", back.model_dump(mode="json"))
    assert type(message).FromString(message.SerializeToString()) == message
    assert grpc_convert.to_proto_response("introspect.record", back) == message  # the server's direct path


def deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_stored_json_up_to_the_answer_depth_fits_every_transport():
    """ANSWER_MAX_DEPTH is what a protobuf parser (100 nested messages) still reads back inside
    the deepest answer; one level more is refused when a stored record is decoded."""
    record = MemoryRecord(store=StoreType.EPISODIC, content=MemoryContent.of_text("x"),
                          metadata=deep(ANSWER_MAX_DEPTH))
    recalled = m.RecalledMemory(record=record, relevance_score=1.0, rendered_content=record.content)
    answer = m.RecallTimelineResponse(buckets=[m.TimelineBucket(
        start=record.created_at, end=record.created_at, memories=[recalled], count=1)])
    message = grpc_convert.to_proto_response("recall.timeline", answer.model_dump(mode="json"))
    assert type(message).FromString(message.SerializeToString()) == message
    assert grpc_convert.to_proto_response("recall.timeline", answer) == message
    with pytest.raises(ValidationError, match="nested more than"):
        MemoryRecord.model_validate({**record.model_dump(), "metadata": deep(ANSWER_MAX_DEPTH + 1)})


def test_a_value_that_cannot_be_packed_leaves_nothing_behind_for_the_next():
    """Each thread packs with its own packer, kept between calls: one that raised starts empty."""
    with pytest.raises(TypeError, match="cannot encode"):
        codec.pack({"fine": [1, 2], "then": object()})
    assert codec.unpack(codec.pack({"next": 1})) == {"next": 1}


def test_threads_packing_at_once_each_get_their_own_bytes():
    values = [{"n": n, "text": "x" * n} for n in range(400)]
    with ThreadPoolExecutor(4) as pool:
        packed = list(pool.map(codec.pack, values))
    assert [codec.unpack(blob) for blob in packed] == values


def test_bytes_that_are_not_a_stored_body_raise_one_codec_error():
    for data in (b"\xc1 not msgpack", b"\x92\x01", b"\xd7\x01\x00\x00\x00\x00\x00\x00\x00\x00"):
        with pytest.raises(codec.CodecError, match="not a stored body"):
            codec.unpack(data)


def test_instants_are_written_in_utc_whatever_their_zone():
    """Equal instants are one text (the serialiser keeps texts by instant), always in UTC with `Z`."""
    from datetime import timedelta, timezone

    from cerememory.model import iso_utc

    paris = datetime(2026, 3, 1, 13, 0, 0, 500, tzinfo=timezone(timedelta(hours=1)))
    utc = datetime(2026, 3, 1, 12, 0, 0, 500, tzinfo=UTC)
    assert iso_utc(paris) == iso_utc(utc) == "2026-03-01T12:00:00.000500Z"
    assert iso_utc(utc.replace(microsecond=0)) == "2026-03-01T12:00:00Z"
    record = MemoryRecord(store=StoreType.EPISODIC, content=MemoryContent.of_text("x"), created_at=paris,
                          updated_at=utc + timedelta(days=1))
    wire = json.loads(record.model_dump_json())
    assert (wire["created_at"], wire["updated_at"]) == ("2026-03-01T12:00:00.000500Z", "2026-03-02T12:00:00.000500Z")
