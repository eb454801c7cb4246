"""Semantic recall with the real local embedder (all-MiniLM-L6-v2, offline)."""

from __future__ import annotations

import pytest

import cerememory
from cerememory.embed import local_embedder_available

pytestmark = pytest.mark.skipif(not local_embedder_available(), reason="needs the 'embed' extra")


def test_semantic_recall_finds_meaning_without_shared_words(data_dir):
    with cerememory.open(data_dir, semantic="on") as mem:
        assert not mem.engine.core.embedder.loaded  # opening never loads the model
        mem.store_batch([{"content": {"blocks": [{"text": t}]}} for t in (
            "The cat slept on the warm windowsill",
            "Quarterly revenue dropped after the product recall",
            "We hiked up the mountain before sunrise",
        )])
        response = mem.recall("a kitten napping in the sun", limit=3)
        assert response.memories[0].record.content.plain_text() == "The cat slept on the warm windowsill"
        meta = response.query_metadata
        assert "cosine" in meta.signals and meta.semantic_search
        assert meta.embedding_ms is not None
        assert mem.stats().embedder == "local:all-MiniLM-L6-v2"
        assert mem.stats().vector_index_records == 3

    with cerememory.open(data_dir, semantic="on") as mem:
        assert mem.stats().vector_index_records == 3
        assert not mem.engine.core.embedder.loaded  # vectors came from disk, nothing was re-embedded
        top = mem.recall("money and sales figures", limit=1).memories[0]
        assert top.record.content.plain_text() == "Quarterly revenue dropped after the product recall"
        assert top.score_breakdown.vector_rank == 1


def test_auto_turns_semantic_search_on_when_the_model_is_installed(data_dir):
    with cerememory.open(data_dir) as mem:
        stats = mem.stats()
        assert stats.semantic_search and stats.semantic_off_reason is None


def test_list_records_with_similarity_to_a_text(data_dir):
    with cerememory.open(data_dir, semantic="on") as mem:
        cat = mem.store("The cat slept on the warm windowsill", store="procedural").record_id
        money = mem.store("Quarterly revenue dropped after the product recall", store="procedural").record_id
        page = mem.list_records("procedural", similar_to="a kitten napping in the sun")
        assert page.semantic_search and page.semantic_off_reason is None
        assert page.similarity[str(cat)] > page.similarity[str(money)] > -1
        assert mem.list_records("procedural").similarity is None  # only when asked
