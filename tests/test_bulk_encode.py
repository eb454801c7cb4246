"""encode.batch in bulk: the collector's pause, and batches with caller vectors."""

from __future__ import annotations

import gc
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cerememory
from cerememory import collector
from cerememory.cmp import messages as m
from cerememory.cmp.errors import CMPError
from cerememory.embed.base import normalise_rows
from cerememory.model import StoreType, built, new_id, new_ids, uuid_texts


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_pauses_nest_across_threads_and_the_last_one_resumes(collecting: None) -> None:
    first_in, second_out = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other() -> None:
        with collector.paused():
            first_in.set()
            second_out.wait(5)
            seen.append(gc.isenabled())  # the main thread's pause ended meanwhile

    thread = threading.Thread(target=other)
    with collector.paused():
        thread.start()
        first_in.wait(5)
        assert not gc.isenabled()
    second_out.set()
    thread.join(5)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_the_process_turned_off_stays_off(collecting: None) -> None:
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_a_batch_runs_with_the_collector_paused_and_resumes_it(collecting: None, mem: cerememory.Memory) -> None:
    states: list[bool] = []
    encoding = mem.engine.encoding
    build = encoding.build_records

    def spy(*args: object) -> object:
        states.append(gc.isenabled())
        return build(*args)  # type: ignore[arg-type]

    encoding.build_records = spy  # type: ignore[method-assign]
    mem.store_batch([{"content": {"blocks": [{"text": "one"}]}}])
    with pytest.raises(CMPError):  # a bad batch resumes the collector too
        mem.store_batch([{"content": {"blocks": [{"text": " "}]}}])
    mem.store("a single store leaves the collector alone")
    assert states == [False, True]
    assert gc.isenabled()


def test_ids_made_together_are_unique_and_in_order() -> None:
    ids = [*new_ids(5000), new_id(), *new_ids(3)]  # 5000 in one millisecond run past the 12-bit counter
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 and uuid.UUID(str(i)) == i for i in ids)


def test_ids_made_one_at_a_time_are_unique_and_a_forked_child_never_repeats_its_parents_random_bits() -> None:
    """Ids take their random bits from bytes drawn a few kilobytes at a time; a child process
    draws its own, or it would make the ids its parent is about to make."""
    ids = [new_id() for _ in range(2000)]  # several draws' worth
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's own
        os.write(write, b"".join(i.bytes[8:] for i in new_ids(8)))
        os._exit(0)
    os.waitpid(child, 0)
    theirs = os.read(read, 64)
    os.close(read)
    os.close(write)
    ours = b"".join(i.bytes[8:] for i in new_ids(8))
    assert len(theirs) == len(ours) == 64 and theirs != ours


@given(st.lists(st.uuids(), max_size=80))
def test_ids_as_text_in_bulk_are_each_ids_canonical_text(ids: list[uuid.UUID]) -> None:
    """Either side of the count where the bulk conversion takes over, and for made ids too."""
    assert uuid_texts(ids) == [str(i) for i in ids]
    made = new_ids(len(ids))
    assert uuid_texts(made) == [str(i) for i in made]


@pytest.mark.parametrize("rows", [
    [[3.0, 4.0], [0.0, 0.0]],  # a zero row stays zero
    [[1e300, 1e300], [1.0, 2.0]],  # squares past float64's range
    [[1e-170, 0.0], [2e-320, 0.0], [1.0, 1.0]],  # squares below it, a subnormal among them
    [[-5.0, 12.0]],
])
def test_rows_are_scaled_to_unit_length_whatever_their_magnitude(rows: list[list[float]]) -> None:
    got = normalise_rows(rows)
    exact = [[x / max(abs(v) for v in row) for x in row] if any(row) else row for row in rows]
    expected = [[x / float(np.linalg.norm(row)) for x in row] if any(row) else row for row in exact]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.array(expected, dtype=np.float32), atol=1e-7)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_row_that_is_not_finite_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="NaN or infinite"):
        normalise_rows([[1.0, 2.0], [bad, 1.0]])


def test_a_built_model_is_the_one_pydantic_would_construct() -> None:
    values = {"record_id": new_id(), "store": StoreType.SEMANTIC, "initial_fidelity": 0.75,
              "associations_created": 2}
    made = built(m.EncodeStoreResponse, dict(values))
    assert made == m.EncodeStoreResponse.model_construct(**values) == m.EncodeStoreResponse(**values)
    assert made.model_dump_json() == m.EncodeStoreResponse(**values).model_dump_json()
    with pytest.raises(TypeError, match="every field in order"):
        built(m.EncodeStoreResponse, {"store": StoreType.SEMANTIC, "record_id": new_id(), "initial_fidelity": 1.0,
                                      "associations_created": 0})


def test_batch_records_read_back_as_a_single_store_writes_them(mem: cerememory.Memory) -> None:
    """Records of one batch share their fresh fidelity and absent meta; each reads back whole."""
    rows = [{"content": {"blocks": [{"text": f"note {i}"}]}, "metadata": {"i": i}} for i in range(3)]
    rows.append({"content": {"blocks": [{"text": "glad"}], "summary": "a fact"},
                 "emotion": {"joy": 1.0, "intensity": 1.0}, "context": {"session_id": "s1"},
                 "meta": {"intent": "remember"}})
    answer = mem.store_batch(rows)
    single = mem.store("on its own", metadata={"i": 9})
    got = [mem.inspect(r.record_id) for r in answer.results]
    alone = mem.inspect(single.record_id)
    assert [r.metadata.get("i") for r in got] == [0, 1, 2, None]
    assert [r.store for r in got] == [StoreType.EPISODIC] * 3 + [StoreType.SEMANTIC]
    kept = {"decay_rate", "emotional_anchor", "reinforcement_count", "stability"}  # score decays with the clock
    assert got[0].fidelity.model_dump(include=kept) == alone.fidelity.model_dump(include=kept)
    assert got[3].fidelity.emotional_anchor == 1.5 and got[0].fidelity.emotional_anchor == 1.0
    assert got[3].metadata["_context"] == {"session_id": "s1"} and got[3].meta.intent == "remember"
    assert got[0].meta.trigger == "encode.batch" and alone.meta.trigger == "encode.store"
    assert [r.initial_fidelity for r in answer.results] == [1.0] * 4


def _row(text: str, embedding: object = None, **more: object) -> dict:
    block: dict = {"text": text}
    if embedding is not None:
        block["embedding"] = embedding
    return {"content": {"blocks": [block]}, **more}


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("bad", [
    [_row("fine", [0.1, 0.2]), _row("nan", [0.1, float("nan")])],
    [_row("inf", [float("inf"), 0.0])],
    [_row("empty", [])],
    [_row("a bool is no number", [True, 0.5])],
    [_row("text is no number", ["0.5", 0.5])],
    [_row("deep", [0.1, 0.2], metadata=_nested(40))],
    [_row(f"r{i}", [0.1, 0.2]) for i in range(1001)],
], ids=["nan", "inf", "empty", "bool", "string", "deep", "too-many"])
def test_a_bad_vector_batch_is_refused_whole_with_a_validation_error(mem: cerememory.Memory, bad: list) -> None:
    kept = mem.store_batch([_row("kept", [1.0, 0.0])]).results[0].record_id
    with pytest.raises(CMPError) as caught:
        mem.store_batch(bad)
    assert caught.value.code.value == "VALIDATION_ERROR" and caught.value.message
    assert mem.stats().total_records == 1
    assert [hit.record.id for hit in mem.recall(embedding=[1.0, 0.0], limit=5).memories] == [kept]


def test_a_batch_of_vectors_is_searchable_and_survives_a_reopen(data_dir: Path) -> None:
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((300, 16))
    with cerememory.open(data_dir, semantic="off") as mem:
        ids = [r.record_id for r in mem.store_batch(
            [_row(f"note {i}", matrix[i].tolist()) for i in range(300)]).results]
        mem.store_batch([_row("other width", [0.5, 0.5, 0.5])])
        before = [mem.recall(embedding=matrix[i].tolist(), limit=1).memories[0].record.id for i in (0, 150, 299)]
    assert before == [ids[0], ids[150], ids[299]]
    with cerememory.open(data_dir, semantic="off") as mem:
        assert mem.stats().total_records == 301
        assert [mem.recall(embedding=matrix[i].tolist(), limit=1).memories[0].record.id
                for i in (0, 150, 299)] == before
        assert mem.recall("note 150", limit=1).memories[0].record.id == ids[150]


def test_pauses_that_overlap_without_end_still_collect(collecting: None, monkeypatch: pytest.MonkeyPatch) -> None:
    collections: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(1) or 0)
    monkeypatch.setattr(collector, "LONGEST_PAUSE_S", 0.0)
    with collector.paused():
        with collector.paused():
            pass  # another burst still runs: the collector stays off, but collects once now
        assert collections == [1] and not gc.isenabled()
    assert collections == [1] and gc.isenabled()


def _vector_of(mem: cerememory.Memory, vector: np.ndarray, limit: int = 10) -> list[tuple[str, float]]:
    """The texts recall by `vector` finds, with their cosines, best first."""
    answer = mem.recall(embedding=vector.tolist(), limit=limit, reconsolidate=False)
    return [(hit.record.content.blocks[0].text or "", hit.score_breakdown.vector or 0.0) for hit in answer.memories]


def test_a_mixed_batch_keeps_each_records_vector_store_and_links(data_dir: Path) -> None:
    """One batch of compact and float vectors of two widths, records without a vector, a
    working-memory record with one, session turns and a named association: each record comes
    back with its own vector (or none), its store and its links, and again after a reopen."""
    rng = np.random.default_rng(16)
    wide, narrow = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((1, 3)).astype(np.float32)

    def row(text: str, vector: dict | None = None, **more: object) -> dict:
        return {"content": {"blocks": [{"text": text, **(vector or {})}]}, **more}

    with cerememory.open(data_dir, semantic="off") as mem:
        earlier = mem.store_batch([row("earlier", {"embedding_f32": wide[3]})]).results[0].record_id
        answer = mem.store_batch([
            row("compact turn", {"embedding_f32": wide[0]}, context={"session_id": "s1"}),
            row("floats turn", {"embedding": wide[1].tolist()}, context={"session_id": "s1"}),
            row("plain turn", context={"session_id": "s1"}),
            row("narrow", {"embedding_f32": narrow[0]}),
            row("working", {"embedding_f32": wide[2]}, store="working"),
            row("linked", associations=[{"target_id": str(earlier), "association_type": "semantic", "weight": 0.5}]),
        ])
        ids = {text: r.record_id for text, r in zip(
            ["compact turn", "floats turn", "plain turn", "narrow", "working", "linked"], answer.results, strict=True)}
        assert [r.store for r in answer.results] == [StoreType.EPISODIC] * 4 + [StoreType.WORKING, StoreType.EPISODIC]
        for k, text in enumerate(["compact turn", "floats turn", "working", "earlier"]):
            best, cosine = _vector_of(mem, wide[k])[0]
            assert best == text and cosine == pytest.approx(1.0, abs=1e-5)
        assert _vector_of(mem, narrow[0]) == [("narrow", pytest.approx(1.0, abs=1e-5))]
        assert mem.stats().vector_index_records == 5  # the plain turn and the linked record have none
        turns = {a.target_id for a in mem.inspect(ids["floats turn"]).associations}
        assert turns == {ids["compact turn"], ids["plain turn"]}
        assert [(a.target_id, a.weight) for a in mem.inspect(ids["linked"]).associations] == [(earlier, 0.5)]

    with cerememory.open(data_dir, semantic="off") as mem:
        assert mem.stats().total_records == 6  # working memory lives in RAM only
        assert mem.stats().vector_index_records == 4
        for k, text in enumerate(["compact turn", "floats turn"]):
            assert _vector_of(mem, wide[k])[0] == (text, pytest.approx(1.0, abs=1e-5))
        assert "working" not in [text for text, _ in _vector_of(mem, wide[2])]
        assert _vector_of(mem, narrow[0]) == [("narrow", pytest.approx(1.0, abs=1e-5))]
        assert {a.target_id for a in mem.inspect(ids["floats turn"]).associations} == \
            {ids["compact turn"], ids["plain turn"]}
        assert mem.recall("plain turn", limit=1).memories[0].record.id == ids["plain turn"]


def test_a_batch_with_one_bad_compact_vector_is_refused_whole(mem: cerememory.Memory) -> None:
    """Nothing of a batch is stored when one record's compact vector is refused: not its rows,
    its vectors, its text, nor its session's chain."""
    good = np.ones(4, dtype=np.float32)
    kept = mem.store_batch([{"content": {"blocks": [{"text": "kept", "embedding_f32": good}]},
                             "context": {"session_id": "s"}}]).results[0].record_id
    batch = [{"content": {"blocks": [{"text": f"fine {i}", "embedding_f32": good}]}, "context": {"session_id": "s"}}
             for i in range(5)]
    batch.append({"content": {"blocks": [{"text": "bad", "embedding_f32": np.array([1.0, np.nan, 0.0, 0.0])}]}})
    with pytest.raises(CMPError) as caught:
        mem.store_batch(batch)
    assert caught.value.code.value == "VALIDATION_ERROR"
    assert mem.stats().total_records == 1 and mem.stats().vector_index_records == 1
    assert [hit.record.id for hit in mem.recall("fine", limit=5).memories] == []
    after = mem.store_batch([{"content": {"blocks": [{"text": "next"}]}, "context": {"session_id": "s"}}])
    assert {a.target_id for a in mem.inspect(after.results[0].record_id).associations} == {kept}
