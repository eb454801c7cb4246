"""Recall ranking: weighted fusion, scores within [0, 1], question words, the time a question
names, and an index built by an earlier analyzer rebuilt on open."""

from __future__ import annotations

import heapq
import random
import uuid
from datetime import UTC, datetime

import pytest

import cerememory
from cerememory.engine.recall import best_first, topic_words
from cerememory.index import fulltext
from cerememory.index.fusion import fuse

from .test_encode_sessions import turn


def test_relevance_score_stays_within_the_unit_interval(mem):
    # the best text hit also gains activation from its linked neighbour: before scores were
    # rescaled this came out at 1.1 and more
    mem.store_batch([turn("penguins penguins penguins", "s", 0), turn("penguins", "s", 1),
                     turn("more penguins", "s", 2)])
    for emotion in (None, {"joy": 1.0}):
        hits = mem.recall("penguins", limit=3, reconsolidate=False, emotion=emotion).memories
        assert hits and all(0.0 <= h.relevance_score <= 1.0 for h in hits)
        assert "activation" in mem.recall("penguins", reconsolidate=False).query_metadata.signals


def test_weights_shift_fusion_and_keep_scores_in_range():
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    text, vector = [(a, 9.0), (b, 1.0)], [(b, 0.9), (a, 0.1)]
    for method in ("rrf", "normalized"):
        even = fuse([text, vector], method, 10)
        assert even[a] == pytest.approx(even[b])
        text_heavy = fuse([text, vector], method, 10, [2.0, 1.0])
        assert text_heavy[a] > text_heavy[b]
        assert all(0.0 <= s <= 1.0 for s in text_heavy.values())
        assert fuse([text, text], method, 10, [2.0, 0.5])[a] == pytest.approx(1.0)


def test_question_words_are_dropped_from_the_text_query(data_dir):
    assert topic_words("When did Ann move to Paris?") == "Ann move to Paris?"
    assert topic_words("How many times?") == "How many times?"  # nothing else left: keep it all
    with cerememory.open(data_dir, semantic="off", recall__question_cleanup=True) as mem:
        mem.store("Ann moved to Paris")
        mem.store("how many kinds of cheese are there, and which ones")
        hits = mem.recall("which kinds of cheese did Ann try in Paris", reconsolidate=False).memories
        assert hits[0].record.content.plain_text() == "Ann moved to Paris"


def test_an_index_built_by_an_earlier_analyzer_is_rebuilt_on_open(data_dir, monkeypatch):
    # a data directory written by a version whose analyzer kept "what" and "did" as terms
    monkeypatch.setattr(fulltext, "DEFAULT_ANALYZER", "english_minimal")
    with cerememory.open(data_dir, semantic="off") as mem:
        mem.store("what did the penguins eat")
        mem.store_raw("what the walrus said", session_id="s")
        assert len(mem.recall("what", reconsolidate=False).memories) == 1
    monkeypatch.undo()
    with cerememory.open(data_dir, semantic="off") as mem:
        assert set(mem.engine.repaired) == {"records", "journal"}
        assert mem.recall("what", reconsolidate=False).memories == []  # a stop word now
        assert len(mem.recall("penguin", reconsolidate=False).memories) == 1
        assert len(mem.raw_recall("walrus").records) == 1
    with cerememory.open(data_dir, semantic="off") as mem:
        assert mem.engine.repaired == []  # rebuilt once, then kept


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("question", "span"), [
    ("Which team did John sign with on 21 May, 2023?", ((2023, 5, 20), (2023, 5, 23))),
    ("What book did Tim finish on 8th December, 2023?", ((2023, 12, 7), (2023, 12, 10))),
    ("Where was John between August 11 and August 15 2023?", ((2023, 8, 10), (2023, 8, 17))),
    ("What did Nate share in November 2022?", ((2022, 11, 1), (2022, 12, 1))),
    ("What did Nate share in Dec 2022?", ((2022, 12, 1), (2023, 1, 1))),
    ("When did John get an ankle injury in 2023?", ((2023, 1, 1), (2024, 1, 1))),
    ("What went wrong last week, as mentioned on November 6, 2023?", ((2023, 11, 5), (2023, 11, 8))),
    ("what happened last week", ((2026, 11, 23), (2026, 12, 2))),
    ("Which country was Tim visiting in the second week of November?", None),
    ("What may John do on 31 February 2023?", ((2023, 2, 1), (2023, 3, 1))),  # no such day: the month
])
def test_the_time_a_question_names(question, span):
    from cerememory.index.when import time_span
    expected = None if span is None else tuple(datetime(*d, tzinfo=UTC) for d in span)
    assert time_span(question, NOW) == expected


def test_a_named_time_favours_memories_from_then(data_dir):
    # rank fusion: the shorter May turn ranks second by BM25, at 1/(k+2) against the first's 1/(k+1)
    with cerememory.open(data_dir, semantic="off", recall__temporal_weight=1.0, recall__fusion="rrf") as mem:
        may = mem.store("John: we signed with the Falcons", created_at=datetime(2023, 5, 21, 15, tzinfo=UTC)).record_id
        mem.store("John: we signed with the Falcons again, what a team", created_at=datetime(2023, 8, 1, tzinfo=UTC))
        res = mem.recall("Which team did John sign with on 21 May, 2023?", reconsolidate=False)
        assert res.memories[0].record.id == may
        assert "when" in res.query_metadata.signals
        assert all(0.0 <= h.relevance_score <= 1.0 for h in res.memories)
        assert "when" not in mem.recall("Which team did John sign with?", reconsolidate=False).query_metadata.signals


def test_the_best_match_scores_1_when_nothing_adds_to_it(mem):
    mem.store("penguins eat fish")
    mem.store("walruses eat clams")
    top = mem.recall("penguins", reconsolidate=False).memories[0]
    assert top.relevance_score == pytest.approx(1.0, abs=1e-3)  # fidelity fades from 1 as time runs


def test_best_first_is_nlargest_by_score_then_newest() -> None:
    """The ranking's last step reads the created times of the few ids that can make the cut
    only; the order is heapq.nlargest's by (score, created), ties included."""
    rng = random.Random(19)
    for _ in range(200):
        ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(rng.randint(0, 40))]
        scores = {i: rng.choice([0.1, 0.2, 0.5, 0.5, 1.0, rng.random()]) for i in ids}
        created = {i: float(rng.randint(0, 3)) for i in ids}
        for n in (0, 1, 3, 10, 50):
            expected = heapq.nlargest(n, scores, key=lambda i: (scores[i], created[i]))
            assert best_first(scores, n, created.__getitem__) == expected
