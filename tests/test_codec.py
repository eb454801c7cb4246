"""Property tests: any valid record survives the msgpack codec and the JSON wire form unchanged."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

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
from cerememory.stores.journal import BODY_FIELDS as RAW_BODY
from cerememory.stores.records import BODY_FIELDS

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


@settings(max_examples=150, deadline=None)
@given(records)
def test_record_body_round_trips_through_the_codec(record: MemoryRecord):
    blob = codec.pack_model(record, include=BODY_FIELDS)
    rest = record.model_dump(exclude=BODY_FIELDS)
    assert codec.unpack_model(MemoryRecord, blob, **rest) == record


@settings(max_examples=150, deadline=None)
@given(records)
def test_record_round_trips_through_json(record: MemoryRecord):
    wire = json.loads(json.dumps(record.model_dump(mode="json")))
    assert MemoryRecord.model_validate(wire) == record


@settings(max_examples=80, deadline=None)
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
