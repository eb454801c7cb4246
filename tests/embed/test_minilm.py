"""The numpy forward pass of the bundled model against sentence-transformers: the same vectors,
so records embedded one way are found by queries embedded the other."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from cerememory.embed.local import FAST_BATCH, LocalEmbedder, _bundled_model_path, local_embedder_available
from cerememory.embed.minilm import MiniLM, is_mean_pooled_bert

pytestmark = pytest.mark.skipif(not local_embedder_available(), reason="needs the 'embed' extra")

TEXTS = ["The cat slept on the warm windowsill", "Quarterly revenue dropped after the product recall",
         "fix the auth token timeout bug in the session refresh handler", "a", "",
         "word " * 400,  # past the 256-token limit: truncated the same way
         "Ünïcödé façade — naïve café, 日本語のテキスト, emoji 🔥", "-3 ≤ x and x ≥ 0.5e-3"]


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None, reason="needs sentence-transformers")
def test_numpy_pass_matches_sentence_transformers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    path = Path(_bundled_model_path())
    assert is_mean_pooled_bert(path)
    ours = MiniLM(path).encode(TEXTS, batch_size=3)  # several batches, padded differently
    theirs = SentenceTransformer(str(path), device="cpu").encode(TEXTS, normalize_embeddings=True)
    assert ours.dtype == np.float32 and ours.shape == (len(TEXTS), 384)
    assert np.abs(ours - theirs).max() < 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_local_embedder_answers_a_query_without_torch() -> None:
    embedder = LocalEmbedder()
    vectors = embedder.embed(["a kitten napping in the sun", "The cat slept on the warm windowsill",
                              "Quarterly revenue dropped"])
    assert embedder.loaded and embedder.dimension == 384 and embedder._entry is None  # torch never loaded
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert len(TEXTS) <= FAST_BATCH
