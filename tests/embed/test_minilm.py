"""The numpy forward pass of the bundled model against sentence-transformers: the same vectors,
so records embedded one way are found by queries embedded the other. The comparison with
PyTorch uses reference vectors it computed once (fixtures/minilm_reference.json), so it runs
where PyTorch is not installed, as by default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cerememory.embed.local import FAST_BATCH, LocalEmbedder, _bundled_model_path
from cerememory.embed.minilm import MiniLM, is_mean_pooled_bert

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "minilm_reference.json").read_text(encoding="utf-8"))
REFERENCE_VECTORS = np.asarray(REFERENCE["vectors"], dtype=np.float32)

TEXTS = ["The cat slept on the warm windowsill", "Quarterly revenue dropped after the product recall",
         "fix the auth token timeout bug in the session refresh handler", "a", "",
         "word " * 400,  # past the 256-token limit: truncated the same way
         "Ünïcödé façade — naïve café, 日本語のテキスト, emoji 🔥", "-3 ≤ x and x ≥ 0.5e-3"]


def test_local_embedder_answers_a_query_without_torch() -> None:
    embedder = LocalEmbedder()
    vectors = embedder.embed(["a kitten napping in the sun", "The cat slept on the warm windowsill",
                              "Quarterly revenue dropped"])
    assert embedder.loaded and embedder.dimension == 384 and embedder._entry is None  # torch never loaded
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert len(TEXTS) <= FAST_BATCH


def _assert_matches_reference(vectors: np.ndarray) -> None:
    assert vectors.dtype == np.float32 and vectors.shape == REFERENCE_VECTORS.shape
    cosines = np.sum(vectors * REFERENCE_VECTORS, axis=1) / (
        np.linalg.norm(vectors, axis=1) * np.linalg.norm(REFERENCE_VECTORS, axis=1))
    assert cosines.min() >= 0.999, cosines
    assert np.abs(vectors - REFERENCE_VECTORS).max() < 1e-4


@pytest.mark.parametrize("batch_size", [1, 64])
def test_numpy_pass_matches_pytorch_reference_at_every_batch_size(batch_size: int) -> None:
    assert len(REFERENCE["texts"]) > FAST_BATCH  # one call past the size where torch would take over
    assert is_mean_pooled_bert(Path(_bundled_model_path()))
    _assert_matches_reference(MiniLM(Path(_bundled_model_path())).encode(REFERENCE["texts"], batch_size=batch_size))


def test_local_embedder_matches_pytorch_reference() -> None:
    _assert_matches_reference(LocalEmbedder().embed(REFERENCE["texts"]))


_WITHOUT_TORCH = """
import importlib.abc, json, sys
import numpy as np

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sentence_transformers", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoTorch())
from cerememory.embed import EmbedSettings, make_embedder
embedder, reason = make_embedder(EmbedSettings(semantic="on"))
vectors = embedder.embed(json.load(sys.stdin))
heavy = [m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules]
print(json.dumps({"vectors": vectors.tolist(), "heavy": heavy}))
"""


def test_semantic_search_needs_no_pytorch() -> None:
    """With torch and sentence-transformers unimportable, semantic = on still embeds a batch larger
    than FAST_BATCH, and gets PyTorch's vectors."""
    run = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH], input=json.dumps(REFERENCE["texts"]),
                         capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["heavy"] == []
    _assert_matches_reference(np.asarray(out["vectors"], dtype=np.float32))


def test_batches_group_similar_lengths() -> None:
    from cerememory.embed.minilm import _batches

    assert _batches([], 4) == []
    assert _batches([3, 3, 4, 5, 5], 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert _batches([4, 5, 9, 256], 64) == [range(0, 3), range(3, 4)]  # the long text runs alone
