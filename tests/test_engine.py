"""Every core CMP operation through the embedded API (and its JSON dispatcher)."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.cmp.dispatch import call
from cerememory.dynamics.render import elide
from cerememory.embed import EmbeddingUnavailable


def texts(response) -> list[str]:
    return [hit.record.content.plain_text() for hit in response.memories]


# ---------------------------------------------------------------- encode


def test_store_routes_by_summary_unless_store_is_explicit(mem):
    assert mem.store("met Ana at the station").store == "episodic"
    assert mem.store("Paris is in France", summary="geography").store == "semantic"
    assert mem.store("use tabs", summary="style", store="procedural").store == "procedural"


def test_store_returns_fidelity_and_manual_association_count(mem):
    first = mem.store("the build uses make")
    second = mem.store("make needs gcc", associations=[
        {"target_id": str(first.record_id), "association_type": "causal", "weight": 0.9}])
    assert second.initial_fidelity == 1.0
    assert second.associations_created == 1
    record = mem.inspect(second.record_id)
    assert record.associations[0].target_id == first.record_id
    assert record.associations[0].association_type == "causal"


def test_store_records_context_and_meta_normalisation(mem):
    plain = mem.inspect(mem.store("no meta here").record_id)
    assert plain.meta.capture_status == "unavailable"
    assert plain.meta.trigger == "encode.store"
    given = mem.inspect(mem.store("with meta", meta={"intent": "test", "capture_status": "legacy"}).record_id)
    assert given.meta.capture_status == "provided"
    assert given.meta.captured_at is not None
    response = mem.dispatch("encode.store", {
        "content": {"blocks": [{"text": "ctx"}]}, "context": {"session_id": "s9", "source": "chat"}})
    record = mem.inspect(response["record_id"])
    assert record.metadata["_context"] == {"session_id": "s9", "source": "chat"}


def test_batch_infers_sequential_associations_both_ways(mem):
    response = mem.store_batch([{"content": {"blocks": [{"text": f"step {i}"}]}} for i in range(4)],
                               infer_associations=True)
    assert len(response.results) == 4
    assert response.associations_inferred == 6
    ids = [r.record_id for r in response.results]
    middle = mem.inspect(ids[1])
    targets = {(a.target_id, a.association_type, a.weight) for a in middle.associations}
    assert targets == {(ids[0], "sequential", 0.7), (ids[2], "sequential", 0.7)}


def test_update_replaces_content_and_bumps_version(mem):
    rid = mem.store("the meeting is on Tuesday").record_id
    mem.update(rid, text="the meeting moved to Thursday", emotion="surprise", metadata={"k": 1})
    record = mem.inspect(rid)
    assert record.version == 2
    assert record.content.plain_text() == "the meeting moved to Thursday"
    assert record.emotion.surprise == 1.0
    assert record.metadata == {"k": 1}
    assert texts(mem.recall("Thursday")) == ["the meeting moved to Thursday"]
    assert mem.recall("Tuesday").memories == []


def test_a_record_read_is_the_callers_own_copy(mem):
    rid = mem.store("the deploy key rotates on monday", metadata={"team": {"names": ["ana"]}}).record_id
    for read in (lambda: mem.inspect(rid), lambda: mem.recall("deploy key").memories[0].record):
        record = read()
        record.content.blocks[0].data = b"changed"
        record.content.blocks.append(record.content.blocks[0])
        record.metadata["team"]["names"].append("bob")
        record.meta.tags.append("changed")
        record.emotion.joy = 1.0
        again = read()
        assert again.content.plain_text() == "the deploy key rotates on monday"
        assert again.metadata == {"team": {"names": ["ana"]}}
        assert again.meta.tags == []
        assert again.emotion.joy == 0.0


def test_a_record_read_again_after_an_update_is_the_update(mem):
    rid = mem.store("the meeting is on Tuesday", metadata={"k": 0}).record_id
    assert mem.inspect(rid).metadata == {"k": 0}
    assert texts(mem.recall("meeting")) == ["the meeting is on Tuesday"]
    mem.update(rid, text="the meeting moved to Thursday", metadata={"k": 1})
    record = mem.inspect(rid)
    assert (record.version, record.metadata) == (2, {"k": 1})
    assert texts(mem.recall("meeting")) == ["the meeting moved to Thursday"]


def test_update_meta_makes_it_searchable(mem):
    rid = mem.store("switched the queue to Redis").record_id
    assert mem.recall("latency budget").memories == []
    mem.update(rid, meta={"rationale": "the latency budget was blown by polling"})
    assert [h.record.id for h in mem.recall("latency budget").memories] == [rid]


def test_update_errors(mem):
    with pytest.raises(CMPError) as err:
        mem.update(uuid.uuid4(), text="x")
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND
    rid = mem.store("x").record_id
    with pytest.raises(CMPError) as err:
        mem.dispatch("encode.update", {"record_id": str(rid)})
    assert err.value.code is ErrorCode.VALIDATION_ERROR


def test_update_moves_a_record_to_another_store_with_its_vector(mem):
    rid = mem.store("the staging database is read-only on Fridays", embedding=[1.0, 0.0, 0.0]).record_id
    mem.update(rid, store="procedural")
    record = mem.inspect(rid)
    assert (record.store.value, record.version) == ("procedural", 2)
    assert [h.record.id for h in mem.recall("staging database", stores=["procedural"]).memories] == [rid]
    assert mem.recall("staging database", stores=["episodic"]).memories == []
    by_vector = mem.dispatch("recall.query", {"cue": {"embedding": [1.0, 0.0, 0.0]}, "stores": ["procedural"],
                                              "reconsolidate": False})
    assert [h["record"]["id"] for h in by_vector["memories"]] == [str(rid)]


def test_a_record_cannot_move_to_or_from_working_memory(mem):
    durable = mem.store("durable").record_id
    held = mem.store("held in RAM", store="working").record_id
    for rid, store in ((durable, "working"), (held, "semantic")):
        with pytest.raises(CMPError) as err:
            mem.update(rid, store=store)
        assert err.value.code is ErrorCode.VALIDATION_ERROR and "working memory" in (err.value.hint or "")
    assert (mem.inspect(durable).store.value, mem.inspect(held).store.value) == ("episodic", "working")


def test_reinforce_strengthens_by_name_and_refuses_unknown_ids_whole(mem):
    rid = mem.store("renew the TLS certificate").record_id
    before = mem.inspect(rid).fidelity
    with pytest.raises(CMPError) as err:
        mem.reinforce([rid, uuid.uuid4()])
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND
    assert mem.inspect(rid).fidelity.reinforcement_count == before.reinforcement_count
    assert mem.reinforce([rid, rid]).records_reinforced == 1
    after = mem.inspect(rid).fidelity
    assert after.reinforcement_count == before.reinforcement_count + 1 and after.stability > before.stability
    entry = mem.dispatch("introspect.audit", {"op": "lifecycle.reinforce"})["entries"][0]
    assert entry["record_ids"] == [str(rid)]


# ---------------------------------------------------------------- recall


def test_recall_ranks_by_text_and_reports_signals(mem):
    mem.store("the deploy key rotates every Monday")
    mem.store("Bob likes green tea")
    mem.store("rotate the tyres every winter")
    response = mem.recall("when does the deploy key rotate")
    assert texts(response)[0] == "the deploy key rotates every Monday"
    meta = response.query_metadata
    assert meta.signals[0] == "bm25"
    assert meta.semantic_search is False
    assert "semantic = off" in meta.semantic_off_reason
    top = response.memories[0]
    assert top.score_breakdown.text_rank == 1
    assert 0 < top.relevance_score <= 1


def test_recall_stems_and_ignores_stop_words(mem):
    mem.store("she was running marathons in Berlin")
    assert texts(mem.recall("the runs of a marathon")) == ["she was running marathons in Berlin"]


def test_query_language_is_not_interpreted(mem):
    mem.store("field: value (with parens) AND quotes\"")
    assert len(mem.recall('field:value AND "quotes').memories) == 1
    assert mem.recall("((((").memories == []


def test_empty_cue_lists_recent_memories(mem):
    for i in range(5):
        mem.store(f"memory number {i}")
    response = mem.recall(limit=3)
    assert texts(response) == ["memory number 4", "memory number 3", "memory number 2"]
    assert response.query_metadata.signals == ["recency"]


def test_recall_filters_by_store_and_time(mem):
    old = datetime(2024, 1, 1, tzinfo=UTC)
    mem.store("coffee order: flat white", store="procedural")
    mem.store("coffee with Ana in Lisbon", created_at=old)
    assert texts(mem.recall("coffee", stores=["procedural"])) == ["coffee order: flat white"]
    window = mem.recall("coffee", start=old - timedelta(days=1), end=old + timedelta(days=1))
    assert texts(window) == ["coffee with Ana in Lisbon"]
    listing = mem.recall(start=old - timedelta(days=1), end=old + timedelta(days=1))
    assert texts(listing) == ["coffee with Ana in Lisbon"]
    assert listing.query_metadata.signals == ["temporal"]


def test_recall_by_caller_embedding_fuses_with_text(mem):
    a = mem.store("alpha document", embedding=[1.0, 0.0, 0.0]).record_id
    b = mem.store("beta document", embedding=[0.0, 1.0, 0.0]).record_id
    mem.store("gamma document", embedding=[0.0, 0.0, 1.0, 0.0])  # another dimension: never compared
    by_vector = mem.recall(embedding=[0.9, 0.1, 0.0])
    assert [h.record.id for h in by_vector.memories][:2] == [a, b]
    assert by_vector.query_metadata.signals == ["cosine"]
    both = mem.recall("beta", embedding=[0.0, 1.0, 0.0])
    assert both.memories[0].record.id == b
    assert both.query_metadata.fusion == "normalized"
    assert both.memories[0].score_breakdown.vector_rank == 1


def test_meta_memory_plane_is_searchable_only_when_provided(mem):
    rid = mem.store("moved billing to the new cluster", meta={
        "intent": "cut hosting costs", "rationale": "the old cluster was twice as expensive",
        "alternatives": [{"option": "stay on the old cluster", "reason": "no migration risk"}]}).record_id
    assert [h.record.id for h in mem.recall("why cut hosting costs").memories] == [rid]
    assert [h.record.id for h in mem.recall("migration risk").memories] == [rid]


def test_spreading_activation_brings_associated_memories(mem):
    anchor = mem.store("project phoenix kickoff").record_id
    linked = mem.store("the budget was approved", associations=[
        {"target_id": str(anchor), "association_type": "semantic", "weight": 1.0}]).record_id
    mem.update(anchor, text="project phoenix kickoff")  # no-op content, keeps associations
    mem.dispatch("encode.store", {"content": {"blocks": [{"text": "unrelated"}]}})
    # anchor -> linked edge, so recalling the anchor activates the budget memory
    mem.store("phoenix follow-up", associations=[
        {"target_id": str(linked), "association_type": "causal", "weight": 1.0}])
    response = mem.recall("phoenix follow-up")
    ids = [h.record.id for h in response.memories]
    assert linked in ids
    hit = response.memories[ids.index(linked)]
    assert hit.score_breakdown.activation > 0
    assert hit.activation_path[-1] == linked and len(hit.activation_path) >= 2
    assert "activation" in response.query_metadata.signals
    trace = response.activation_trace
    assert trace.source_id == hit.activation_path[0]
    node = next(a for a in trace.activations if a.record_id == linked)
    assert node.hop == len(hit.activation_path) - 1 and node.activation_level == trace.gains[str(linked)]
    assert node.edge_type is not None


def test_reconsolidation_counts_accesses(mem):
    rid = mem.store("remember the milk").record_id
    mem.recall("milk")
    mem.recall("milk", reconsolidate=False)
    record = mem.inspect(rid)
    assert record.access_count == 1
    assert record.fidelity.reinforcement_count == 1
    assert record.fidelity.stability > 1.0
    assert mem.stats().total_recall_count == 2


def test_human_mode_elides_deterministically_and_perfect_mode_overrides(mem):
    text = " ".join(f"w{i}" for i in range(400))
    assert elide(text, 0.95) == text

    def lost(fidelity, noise=0.0, seed=1):
        return elide(text, fidelity, noise, seed).split().count("...")

    assert elide(text, 0.6, 0.1, seed=7) == elide(text, 0.6, 0.1, seed=7)  # the same memory reads the same
    assert elide(text, 0.6, seed=7) != elide(text, 0.6, seed=8)             # another memory fades elsewhere
    assert 0 < lost(0.85) < lost(0.6) < lost(0.3) <= 0.85 * 400             # fades as fidelity falls
    assert lost(0.6, noise=0.5) > lost(0.6)                                  # and as noise grows
    assert abs(lost(0.6) - 0.4 * 400) < 40
    rid = mem.store("alpha beta gamma delta").record_id
    hit = mem.recall("alpha").memories[0]
    assert hit.rendered_content.plain_text() == "alpha beta gamma delta"
    assert hit.record.id == rid


def test_set_mode_global_and_scoped(mem):
    mem.set_mode("perfect")
    assert mem.stats().recall_mode == "perfect"
    mem.set_mode("human", scope=["semantic"])
    engine = mem.engine
    assert engine.core.effective_perfect(cerememory.model.RecallMode.HUMAN, cerememory.StoreType.EPISODIC)
    assert not engine.core.effective_perfect(cerememory.model.RecallMode.HUMAN, cerememory.StoreType.SEMANTIC)
    mem.set_mode("human")
    assert not engine.core.effective_perfect(cerememory.model.RecallMode.HUMAN, cerememory.StoreType.EPISODIC)


def test_associate_walks_weighted_edges(mem):
    a = mem.store("a").record_id
    b = mem.store("b", associations=[{"target_id": str(a), "association_type": "semantic", "weight": 1.0}])
    c = mem.store("c", associations=[{"target_id": str(b.record_id), "association_type": "causal", "weight": 0.8}])
    response = mem.associate(c.record_id, depth=2, min_weight=0.0)
    levels = {h.record.id: h.relevance_score for h in response.memories}
    assert levels[b.record_id] == pytest.approx(0.4)
    assert levels[a] == pytest.approx(0.2)
    assert response.memories[1].activation_path == [c.record_id, b.record_id, a]
    only_causal = mem.associate(c.record_id, types=["causal"], min_weight=0.0)
    assert [h.record.id for h in only_causal.memories] == [b.record_id]
    with pytest.raises(CMPError) as err:
        mem.associate(uuid.uuid4())
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND
    with pytest.raises(CMPError) as err:
        mem.associate(a, depth=9)
    assert err.value.code is ErrorCode.VALIDATION_ERROR


def test_timeline_buckets(mem):
    day = datetime(2025, 3, 10, 9, 0, tzinfo=UTC)
    for hours in (0, 1, 1.5, 30):
        mem.store(f"event at +{hours}h", created_at=day + timedelta(hours=hours))
    response = mem.timeline(day - timedelta(hours=1), day + timedelta(days=3), granularity="hour")
    assert [b.count for b in response.buckets] == [1, 2, 1]
    assert response.buckets[1].start == day + timedelta(hours=1)
    assert response.buckets[1].end == day + timedelta(hours=2)
    daily = mem.timeline(day - timedelta(days=1), day + timedelta(days=3), granularity="day")
    assert [b.count for b in daily.buckets] == [3, 1]
    monthly = mem.timeline(day - timedelta(days=40), day + timedelta(days=3), granularity="month")
    assert monthly.buckets[0].start == datetime(2025, 3, 1, tzinfo=UTC)
    assert monthly.buckets[0].end == datetime(2025, 4, 1, tzinfo=UTC)


def test_timeline_emotion_filter(mem):
    now = datetime.now(UTC)
    mem.store("won the game", emotion="joy")
    mem.store("lost my keys", emotion="sadness")
    response = mem.timeline(now - timedelta(hours=1), now + timedelta(hours=1), emotion="joy")
    assert [h.record.content.plain_text() for b in response.buckets for h in b.memories] == ["won the game"]


def test_graph_around_a_center_and_overall(mem):
    a = mem.store("a").record_id
    b = mem.store("b", associations=[{"target_id": str(a), "association_type": "semantic", "weight": 0.5}]).record_id
    mem.store("lonely")
    graph = mem.graph(a, depth=1)
    assert {n.id for n in graph.nodes} == {a, b}
    assert [(e.source, e.target, e.edge_type) for e in graph.edges] == [(b, a, "semantic")]
    overall = mem.graph(limit_nodes=5)
    assert {n.id for n in overall.nodes} == {a, b}
    meta_rid = mem.store("decided X", meta={"decision": "X", "context_edges": [
        {"target_id": str(a), "relation": "motivated_by", "rationale": "because a"}]},
        associations=[{"target_id": str(a), "association_type": "causal", "weight": 1.0}]).record_id
    with_meta = mem.graph(meta_rid, include_meta=True)
    assert with_meta.meta_edges[0].relation == "motivated_by"
    assert with_meta.meta_edges[0].source_id == meta_rid


# ---------------------------------------------------------------- raw journal


def test_raw_journal_defaults_hide_private_sealed_and_secret(mem):
    mem.store_raw("hello there", session_id="s1")
    mem.store_raw("thinking privately", session_id="s1", visibility="private_scratch")
    mem.store_raw("sealed note", session_id="s1", visibility="sealed")
    mem.store_raw("the password is hunter2", session_id="s1", secrecy_level="secret")
    mem.store_raw("sensitive but shown", session_id="s2", secrecy_level="sensitive")
    listed = mem.raw_recall()
    assert {r.content.plain_text() for r in listed.records} == {"hello there", "sensitive but shown"}
    everything = mem.raw_recall(include_private_scratch=True, include_sealed=True,
                                secrecy_levels=["public", "sensitive", "secret"], limit=10)
    assert everything.total_candidates == 5
    assert [r.content.plain_text() for r in mem.raw_recall(session_id="s2").records] == ["sensitive but shown"]


def test_raw_journal_text_search_ids_and_order(mem):
    ids = [mem.store_raw(f"turn {i} about kubernetes" if i % 2 else f"turn {i} about lunch",
                         session_id="s", turn_id=str(i), speaker="assistant").record_id for i in range(6)]
    hits = mem.raw_recall("kubernetes")
    assert [r.turn_id for r in hits.records] == ["1", "3", "5"]  # chronological
    assert hits.total_candidates == 3
    by_id = mem.raw_recall(record_ids=[ids[0], ids[5]])
    assert [r.id for r in by_id.records] == [ids[0], ids[5]]
    assert mem.raw_recall("kubernetes", session_id="other").records == []


def test_raw_records_never_appear_in_recall(mem):
    mem.store_raw("zebra crossing story", session_id="s")
    assert mem.recall("zebra").memories == []
    assert mem.stats().raw_journal_records == 1
    assert mem.stats().raw_journal_pending_dream == 1


# ---------------------------------------------------------------- forget


def test_forget_needs_confirmation(mem):
    rid = mem.store("keep me").record_id
    with pytest.raises(CMPError) as err:
        mem.forget([rid])
    assert err.value.code is ErrorCode.FORGET_UNCONFIRMED
    assert mem.inspect(rid)


def test_forget_by_ids_cascade_store_and_time(mem):
    a = mem.store("a").record_id
    b = mem.store("b", associations=[{"target_id": str(a), "association_type": "semantic", "weight": 1}]).record_id
    c = mem.store("c", store="semantic").record_id
    old = mem.store("old", created_at=datetime(2020, 1, 1, tzinfo=UTC)).record_id
    assert mem.forget([b], cascade=True, confirm=True).records_deleted == 2
    for gone in (a, b):
        with pytest.raises(CMPError):
            mem.inspect(gone)
    assert mem.forget(store="semantic", confirm=True).records_deleted == 1
    assert mem.forget(start=datetime(2019, 1, 1, tzinfo=UTC), end=datetime(2021, 1, 1, tzinfo=UTC),
                      confirm=True).records_deleted == 1
    assert mem.stats().total_records == 0
    assert mem.recall("c").memories == []
    del c, old


def test_forget_unknown_id_deletes_nothing(mem):
    rid = mem.store("stay").record_id
    with pytest.raises(CMPError) as err:
        mem.forget([rid, uuid.uuid4()], confirm=True)
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND
    assert mem.inspect(rid)


class BlockingEmbedder:
    """An embedder that embeds only once released, and tells when an embedding has begun."""

    name = "blocking-stub"

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: list[str]) -> np.ndarray:
        self.started.set()
        self.release.wait()
        return np.full((len(texts), 4), 0.5, dtype=np.float32)


def _finishes(work) -> object:
    """Run `work` in a thread; its result, or a failure if it is still waiting after a minute
    (a deadlock guard: any wait on the blocked embedding would never end)."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    thread.join(60)
    assert out, "blocked behind another request's embedding"
    return out[0]


def test_forget_and_store_do_not_wait_for_another_requests_embedding(mem):
    doomed = mem.store("forget me soon").record_id
    embedder = mem.engine.core.embedder = BlockingEmbedder()
    stored: list = []
    slow = threading.Thread(target=lambda: stored.append(mem.store("a text that takes long to embed")))
    slow.start()
    try:
        assert embedder.started.wait(60)  # the store is now inside its embedding
        assert _finishes(lambda: mem.forget([doomed], confirm=True)).records_deleted == 1
        given = _finishes(lambda: mem.store("brings its own vector", embedding=[1.0, 0.0, 0.0, 0.0]))
        assert _finishes(lambda: mem.update(given.record_id, metadata={"checked": True}))
        assert not stored  # the slow store is still embedding
    finally:
        embedder.release.set()
        slow.join()
    assert mem.inspect(stored[0].record_id).content.plain_text() == "a text that takes long to embed"
    assert mem.stats().vector_index_records == 2


class RecordingEmbedder:
    """Embeds a text as the unit vector its length turns to (`_row`) and records each call; the
    first call waits for `release`. It refuses a call holding "poison", and with `unreachable`
    it fails every call as a backend that gives no answer."""

    name = "recording-stub"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()
        self.unreachable = False

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if len(self.calls) == 1:
            self.release.wait()
        if self.unreachable:
            raise EmbeddingUnavailable("the stub gives no answer", unreachable=True)
        if "poison" in texts:
            raise EmbeddingUnavailable("the stub refuses poison")
        return np.array([_row(t) for t in texts], dtype=np.float32)


def _row(text: str) -> list[float]:
    return [float(np.cos(len(text))), float(np.sin(len(text))), 0.0, 0.0]


def _embedding_at_once(mem, *requests: list[str], unreachable: bool = False) -> tuple[RecordingEmbedder, list]:
    """Each of `requests` embedded from its own thread while a first request is inside the
    embedder: what each thread got (rows, or the error), in order."""
    core = mem.engine.core
    embedder = core.embedder = RecordingEmbedder()
    embedder.unreachable = unreachable
    outcomes: list = [None] * (len(requests) + 1)

    def embed(i: int, texts: list[str]) -> None:
        try:
            outcomes[i] = core.embed(texts)
        except CMPError as exc:
            outcomes[i] = exc

    first = threading.Thread(target=embed, args=(len(requests), ["first"]))
    first.start()
    _until(lambda: bool(embedder.calls))
    threads = [threading.Thread(target=embed, args=(i, texts)) for i, texts in enumerate(requests)]
    for thread in threads:
        thread.start()
    _until(lambda: core.embeds_waiting() == len(requests))
    embedder.release.set()
    for thread in [first, *threads]:
        thread.join()
    return embedder, outcomes[:-1]


def _until(condition) -> None:
    event = threading.Event()
    while not condition():
        event.wait(0.005)


def test_requests_embedding_at_once_are_embedded_in_one_call_each_given_its_own_rows(mem):
    embedder, (one, two) = _embedding_at_once(mem, ["bb"], ["ccc", "dddd"])
    assert embedder.calls == [["first"], ["bb", "ccc", "dddd"]]
    assert np.allclose(one, [_row("bb")])
    assert np.allclose(two, [_row("ccc"), _row("dddd")])


def test_a_text_the_embedder_refuses_fails_only_its_own_request(mem):
    embedder, (fine, refused) = _embedding_at_once(mem, ["bb"], ["poison"])
    assert embedder.calls == [["first"], ["bb", "poison"], ["bb"], ["poison"]]
    assert np.allclose(fine, [_row("bb")])
    assert isinstance(refused, CMPError) and "refuses poison" in refused.message


def test_a_backend_that_gives_no_answer_is_not_asked_again_request_by_request(mem):
    embedder, outcomes = _embedding_at_once(mem, ["bb"], ["ccc"], unreachable=True)
    assert embedder.calls == [["first"], ["bb", "ccc"]]
    assert all(isinstance(o, CMPError) and "no answer" in o.message for o in outcomes)


def test_stores_from_threads_at_once_each_keep_the_vector_of_their_own_text(mem):
    texts = ["a note of some length", "short", "a rather longer note than the others here"]
    embedder = mem.engine.core.embedder = RecordingEmbedder()
    first = threading.Thread(target=mem.store, args=("the first store",))
    first.start()
    _until(lambda: bool(embedder.calls))
    stored: dict[str, uuid.UUID] = {}
    threads = [threading.Thread(target=lambda t=text: stored.update({t: mem.store(t).record_id}))
               for text in texts]
    for thread in threads:
        thread.start()
    _until(lambda: mem.engine.core.embeds_waiting() == len(texts))
    embedder.release.set()
    for thread in [first, *threads]:
        thread.join()
    assert sorted(embedder.calls[1]) == sorted(texts)  # one call for all three
    for text in texts:
        found = mem.recall(embedding=_row(text), limit=1)
        assert found[0].record.id == stored[text]


def test_an_embedding_runs_blas_on_one_thread_per_call_as_a_search_does(tmp_path):
    """The BLAS policy of the process is set by its first embedding too, not only by its first
    search: a server that stores before anyone searches pays no more CPU per store for it."""
    import os
    import subprocess
    import sys

    code = ("import numpy as np, cerememory\nfrom threadpoolctl import threadpool_info\n"
            "class Stub:\n    name = 'stub'\n"
            "    def embed(self, texts): return np.full((len(texts), 4), 0.5, dtype=np.float32)\n"
            f"with cerememory.open({str(tmp_path / 'd')!r}, semantic='off') as mem:\n"
            "    mem.engine.core.embedder = Stub()\n    mem.store('embedded before any search')\n"
            "    print(sorted({p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'}))")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                             "MKL_NUM_THREADS", "BLIS_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[1]", out.stdout + out.stderr


# ---------------------------------------------------------------- working memory


def test_working_memory_is_a_small_lru(data_dir):
    with cerememory.open(data_dir, semantic="off", working_capacity=3) as mem:
        ids = [mem.store(f"scratch {i}", store="working").record_id for i in range(4)]
        stats = mem.stats()
        assert stats.records_by_store["working"] == 3
        assert stats.working_capacity == 3
        with pytest.raises(CMPError) as err:
            mem.inspect(ids[0])
        assert err.value.code is ErrorCode.RECORD_NOT_FOUND
        assert texts(mem.recall("scratch", stores=["working"], limit=5)) != []
        assert ids[0] not in [h.record.id for h in mem.recall("scratch").memories]
        with pytest.raises(CMPError) as err:
            mem.store_batch([{"content": {"blocks": [{"text": "w"}]}, "store": "working"}] * 4)
        assert err.value.code is ErrorCode.WORKING_MEMORY_FULL
    with cerememory.open(data_dir, semantic="off") as mem:
        assert mem.stats().records_by_store["working"] == 0  # volatile by design
        assert mem.recall("scratch").memories == []


# ---------------------------------------------------------------- introspection and protocol


def test_stats_fields_are_real(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        empty = mem.stats()
        assert empty.total_records == 0 and empty.oldest_record is None
        mem.store("one", created_at=datetime(2024, 5, 1, tzinfo=UTC))
        mem.store("two", store="semantic", embedding=[0.1, 0.2])
        mem.recall("one")
        stats = mem.stats()
    assert stats.total_records == 2
    assert stats.records_by_store == {"episodic": 1, "semantic": 1, "procedural": 0, "emotional": 0, "working": 0}
    assert stats.avg_fidelity_by_store["episodic"] == 1.0
    assert stats.oldest_record == datetime(2024, 5, 1, tzinfo=UTC)
    assert stats.newest_record > stats.oldest_record
    assert stats.total_recall_count == 1
    assert stats.vector_index_records == 1
    assert stats.vector_search_backend == "numpy_exact_cosine"


def test_an_operation_the_handler_lacks_answers_not_implemented():
    with pytest.raises(CMPError) as err:
        call(object(), "lifecycle.consolidate", {})
    assert err.value.code is ErrorCode.NOT_IMPLEMENTED
    assert "lifecycle.consolidate" in err.value.message
    assert err.value.http_status == 501


def test_unknown_operation(mem):
    with pytest.raises(CMPError) as err:
        mem.dispatch("recall.everything", {})
    assert err.value.code is ErrorCode.VALIDATION_ERROR


def test_header_version_is_checked(mem):
    ok = mem.dispatch("introspect.stats", {"header": {"protocol": "cmp", "version": "1.3"}})
    assert ok["total_records"] == 0
    with pytest.raises(CMPError) as err:
        mem.dispatch("introspect.stats", {"header": {"protocol": "cmp", "version": "2.0"}})
    assert err.value.code is ErrorCode.VERSION_MISMATCH
    assert err.value.hint


def test_dispatch_speaks_json(mem):
    stored = mem.dispatch("encode.store", {"content": {"blocks": [
        {"modality": "text", "data": list(b"bytes as integers")}]}})
    record = mem.dispatch("introspect.record", {"record_id": stored["record_id"]})
    block = record["content"]["blocks"][0]
    assert block["text"] == "bytes as integers"
    assert block["data"] == "Ynl0ZXMgYXMgaW50ZWdlcnM="  # emitted as base64
    assert record["created_at"].endswith("Z")


def test_emotion_cue_is_honoured(mem):
    calm = mem.store("the team met about the launch").record_id
    happy = mem.store("the launch party was wonderful", emotion="joy").record_id
    sad = mem.store("the launch slipped again", emotion="sadness").record_id
    only_affect = mem.recall(emotion="happy", limit=3)
    assert [h.record.id for h in only_affect.memories][0] == happy
    assert only_affect.query_metadata.signals == ["emotion"]
    with_text = mem.recall("launch", emotion="sad", limit=3)
    assert with_text.memories[0].record.id == sad
    assert "emotion" in with_text.query_metadata.signals
    assert with_text.memories[0].score_breakdown.emotion > 0
    assert calm in {h.record.id for h in with_text.memories}
