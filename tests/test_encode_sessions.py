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


def test_a_session_stored_across_batches_and_one_turn_at_a_time_is_one_chain(data_dir):
    with cerememory.open(data_dir, semantic="off") as mem:
        first = mem.store_batch([turn("s1 one", "s1", 0), turn("s1 two", "s1", 1), turn("s2 one", "s2", 2)])
        second = mem.store_batch([turn("s1 three", "s1", 3), turn("s1 four", "s1", 4)])
        assert second.associations_inferred == 2 * 2  # three to two (the earlier batch), four to three
        alone = mem.encode_store({**turn("s1 five", "s1", 5)})
        other = mem.encode_store({**turn("s2 two", "s2", 6)})
        one, two, s2_one = (r.record_id for r in first.results)
        three, four = (r.record_id for r in second.results)
        assert linked(mem, two) == {one, three}
        assert linked(mem, three) == {two, four}
        assert linked(mem, four) == {three, alone.record_id}
        assert linked(mem, other.record_id) == {s2_one}
        # the session date given is the event time, wherever the turn was stored from
        assert mem.inspect(alone.record_id).created_at == T0 + timedelta(seconds=5)
        assert mem.inspect(three).created_at == T0 + timedelta(seconds=3)
    # the session's newest turn is remembered in the database: a reopened memory continues the chain
    with cerememory.open(data_dir, semantic="off") as mem:
        six = mem.store_batch([turn("s1 six", "s1", 7)]).results[0].record_id
        assert linked(mem, six) == {alone.record_id}


def test_a_late_turn_or_a_forgotten_tail_links_to_nothing_earlier(mem):
    kept = mem.store_batch([turn("s1 one", "s1", 10), turn("s1 two", "s1", 20)]).results[1].record_id
    late = mem.store_batch([turn("s1 early", "s1", 5)])
    assert late.associations_inferred == 0 and linked(mem, late.results[0].record_id) == set()
    assert mem.forget(kept, confirm=True) == 1
    after = mem.store_batch([turn("s1 three", "s1", 30), turn("s1 four", "s1", 40)])
    three, four = (r.record_id for r in after.results)
    assert after.associations_inferred == 2 and linked(mem, three) == {four}
    # the chain goes on from the newest turn
    assert linked(mem, mem.store_batch([turn("s1 five", "s1", 50)]).results[0].record_id) == {four}


def test_infer_associations_and_the_session_chain_make_each_edge_once(mem):
    mem.store_batch([turn("a", "s1", 0)])
    res = mem.store_batch([turn("b", "s1", 1), turn("c", "s1", 2)], infer_associations=True)
    b, c = (r.record_id for r in res.results)
    assert res.associations_inferred == 2 + 2  # b-c asked for, and b to the session's earlier turn
    assert len(mem.inspect(b).associations) == 2 and linked(mem, c) == {b}


def test_hits_from_one_session_are_evidence_for_each_other(mem):
    options = mem.engine.core.options
    options.activation_weight = 0.0  # session evidence alone
    lone = mem.store_batch([turn("Ann: tomatoes tomatoes tomatoes garden", "s-lone", 0)]).results[0].record_id
    many = mem.store_batch([turn("Bob: tomatoes in the garden", "s-many", 10),
                            turn("Cleo: the garden again", "s-many", 11),
                            turn("Dan: tomatoes, yes", "s-many", 12)])
    options.session_weight = 0.0
    alone = mem.recall("garden tomatoes", limit=4, reconsolidate=False).memories
    assert alone[0].record.id == lone
    options.session_weight = 0.3
    together = mem.recall("garden tomatoes", limit=4, reconsolidate=False)
    hits = together.memories
    assert hits[0].record.id == many.results[0].record_id and lone in {h.record.id for h in hits}
    assert all(0.0 <= h.relevance_score <= 1.0 for h in hits) and together.total_candidates == 4
    assert hits[0].relevance_score >= hits[1].relevance_score


def test_text_feedback_finds_what_the_best_hits_share(mem):
    mem.store_batch([turn("tomatoes garden basil", None, 0), turn("tomatoes garden basil pesto", None, 1),
                     turn("basil pesto recipe", None, 2)])
    options = mem.engine.core.options
    options.feedback = "off"
    assert {h.record.content.plain_text() for h in mem.recall("tomatoes garden", reconsolidate=False).memories} \
        == {"tomatoes garden basil pesto", "tomatoes garden basil"}
    options.feedback = "text"
    res = mem.recall("tomatoes garden", reconsolidate=False)
    assert "basil pesto recipe" in {h.record.content.plain_text() for h in res.memories}
    assert "feedback" in res.query_metadata.signals


def vec_turn(text: str, session: str | None, second: int, vector: list[float]) -> dict:
    record = turn(text, session, second)
    record["content"]["blocks"][0]["embedding"] = vector
    return record


def test_a_turn_is_found_through_the_turns_around_it_and_through_vector_feedback(mem):
    options = mem.engine.core.options
    options.activation_weight, options.session_weight = 0.0, 0.0
    res = mem.store_batch([vec_turn("how were the kids at the museum", "s1", 0, [1.0, 0.0, 0.0, 0.0]),
                           vec_turn("they loved the dinosaurs", "s1", 1, [0.0, 1.0, 0.0, 0.0]),
                           vec_turn("unrelated", "s2", 2, [0.0, 0.0, 0.0, 1.0])])
    asked, answer, other = (r.record_id for r in res.results)
    cue = {"cue": {"embedding": [1.0, 0.0, 0.0, 0.0]}, "limit": 3, "reconsolidate": False}
    options.context_weight, options.feedback = 0.0, "off"
    before = mem.recall_query(cue)
    assert [h.record.id for h in before.memories][0] == asked
    options.context_weight = 1.0
    after = mem.recall_query(cue)
    assert "context" in after.query_metadata.signals
    ranked = [h.record.id for h in after.memories]
    assert ranked.index(answer) < ranked.index(other)
    assert all(0.0 <= h.relevance_score <= 1.0 for h in after.memories)
    options.context_weight, options.feedback = 0.0, "vector"
    assert "feedback" in mem.recall_query(cue).query_metadata.signals


def test_text_in_context_finds_a_turn_through_the_words_of_the_turn_before_it(mem):
    options = mem.engine.core.options
    options.activation_weight, options.session_weight = 0.0, 0.0
    mem.store_batch([turn("how were the kids at the museum", "s1", 0), turn("they loved the dinosaurs", "s1", 1),
                     turn("museum tickets are cheaper on sunday", None, 2)])
    options.text_context_weight = 0.0
    before = mem.recall("kids museum", reconsolidate=False)
    assert "they loved the dinosaurs" not in {h.record.content.plain_text() for h in before.memories}
    options.text_context_weight = 1.0
    after = mem.recall("kids museum", reconsolidate=False)
    assert "text context" in after.query_metadata.signals
    assert "they loved the dinosaurs" in {h.record.content.plain_text() for h in after.memories}
    assert all(0.0 <= h.relevance_score <= 1.0 for h in after.memories)
