"""A conversation stored turn by turn: the turns of one session come out linked in time order
(no association named by the caller), and their session dates are their event times."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import cerememory

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def turn(text: str, session: str | None, second: int) -> dict:
    record = {"content": {"blocks": [{"modality": "text", "text": text}]},
              "created_at": T0 + timedelta(seconds=second)}
    if session is not None:
        record["context"] = {"session_id": session}
    return record


def linked(mem: cerememory.Memory, record_id: uuid.UUID) -> set[uuid.UUID]:
    return {a.target_id for a in mem.inspect(record_id).associations}


def test_turns_of_a_session_are_linked_in_time_order(mem):
    # two sessions interleaved and out of order in the batch, and one turn of no session
    batch = [turn("s1 second", "s1", 2), turn("s2 first", "s2", 0), turn("s1 first", "s1", 1),
             turn("no session", None, 3), turn("s1 third", "s1", 5), turn("s2 second", "s2", 4)]
    res = mem.store_batch(batch)
    ids = {b["content"]["blocks"][0]["text"]: r.record_id for b, r in zip(batch, res.results, strict=True)}
    assert res.associations_inferred == 2 * (2 + 1)
    assert linked(mem, ids["s1 first"]) == {ids["s1 second"]}
    assert linked(mem, ids["s1 second"]) == {ids["s1 first"], ids["s1 third"]}
    assert linked(mem, ids["s1 third"]) == {ids["s1 second"]}
    assert linked(mem, ids["s2 first"]) == {ids["s2 second"]}
    assert linked(mem, ids["no session"]) == set()
    assert all(a.association_type == "sequential" for a in mem.inspect(ids["s1 second"]).associations)
    # the session date is the record's event time, and the session is kept with the record
    record = mem.inspect(ids["s2 second"])
    assert record.created_at == T0 + timedelta(seconds=4)
    assert record.metadata["_context"]["session_id"] == "s2"


def test_infer_associations_still_links_the_whole_batch_in_order(mem):
    res = mem.store_batch([turn("a", "s1", 0), turn("b", "s2", 1), turn("c", None, 2)], infer_associations=True)
    a, b, c = (r.record_id for r in res.results)
    assert res.associations_inferred == 4
    assert linked(mem, b) == {a, c}


def test_a_neighbouring_turn_is_found_through_its_session(mem):
    res = mem.store_batch([turn("Ann: guess where I moved last spring", "s1", 0),
                           turn("Cleo: to Lisbon, by the sea?", "s1", 1),
                           turn("Bob: my cat likes the sea too", "s2", 2)])
    hits = mem.recall("where did Ann move", limit=3, reconsolidate=False).memories
    assert [h.record.id for h in hits] == [r.record_id for r in res.results[:2]]
    # the answer shares no word with the question: only its session link brought it
    assert hits[1].score_breakdown.text is None
    assert hits[1].activation_path == [res.results[0].record_id, res.results[1].record_id]
