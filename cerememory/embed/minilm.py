"""The bundled all-MiniLM-L6-v2 (a 6-layer BERT, mean pooled) run with numpy alone.

sentence-transformers computes the same vectors, but importing torch and building the model
takes seconds, which every short-lived process (`cm context`, `cerememory recall`, a hook)
would pay before its first query. This forward pass reads the same safetensors weights and the
same fast tokenizer, so it is ready in tens of milliseconds; its vectors agree with
sentence-transformers' to within float32 rounding (tests/embed/test_minilm.py checks).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

MAX_TOKENS_DEFAULT = 256
PAD_GROWTH = 1.5  # a batch's longest text, over its shortest, at most (see _batches)
_NEG = np.float32(-1e9)  # added to the scores of padding positions: softmax weight 0


def is_mean_pooled_bert(path: Path) -> bool:
    """Whether `path` holds a sentence-transformers BERT with mean pooling in safetensors: the
    shape this module computes."""
    try:
        config = json.loads((path / "config.json").read_text())
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return (config.get("model_type") == "bert" and config.get("hidden_act") == "gelu"
            and config.get("position_embedding_type", "absolute") == "absolute"
            and pooling.get("pooling_mode_mean_tokens") is True
            and not any(v for k, v in pooling.items()
                        if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens")
            and (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file())


class MiniLM:
    """`encode(texts)` -> unit float32 rows; thread-safe only under the caller's lock (the fast
    tokenizer must not be used from two threads at once)."""

    def __init__(self, path: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((path / "config.json").read_text())
        try:
            max_tokens = int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
        except (OSError, ValueError, KeyError):
            max_tokens = MAX_TOKENS_DEFAULT
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=min(max_tokens, int(config["max_position_embeddings"])))
        self.tokenizer.no_padding()
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        w = load_file(str(path / "model.safetensors"))
        w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.embed_norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = [_Layer(w, f"encoder.layer.{n}.") for n in range(int(config["num_hidden_layers"]))]
        self.dimension = int(config["hidden_size"])

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))  # similar lengths, less padding
        for chosen in _batches([len(encodings[i].ids) for i in order], batch_size):
            rows = [order[i] for i in chosen]
            out[rows] = self._forward([encodings[i] for i in rows])
        return out

    def _forward(self, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros((len(encodings), width), dtype=np.float32)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n], types[row, :n], mask[row, :n] = enc.ids, enc.type_ids, 1.0
        x = self.word[ids] + self.position[:width] + self.token_type[types]
        x = _layer_norm(x.reshape(-1, self.dimension), *self.embed_norm, self.eps)
        padding = ((1.0 - mask) * _NEG)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, padding, self.heads, self.eps)
        summed = (x.reshape(len(encodings), width, -1) * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def _batches(lengths: list[int], batch_size: int) -> list[range]:
    """Cut ascending token counts into runs of at most `batch_size` whose longest is at most
    PAD_GROWTH times (plus a few tokens) their shortest: every row is padded to its run's longest,
    and one 256-token text would otherwise make a batch of short ones cost eight times as much."""
    runs: list[range] = []
    start = 0
    for i, n in enumerate(lengths):
        if i - start >= batch_size or n > lengths[start] * PAD_GROWTH + 8:
            runs.append(range(start, i))
            start = i
    if lengths:
        runs.append(range(start, len(lengths)))
    return runs


class _Layer:
    """One encoder layer: self-attention, then the feed-forward block, each with a residual
    connection and layer norm (post-norm, as BERT)."""

    def __init__(self, w: dict[str, np.ndarray], prefix: str) -> None:
        def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
            return np.ascontiguousarray(w[f"{prefix}{name}.weight"].T), w[f"{prefix}{name}.bias"]

        # one product for query, key and value
        q, k, v = (linear(f"attention.self.{n}") for n in ("query", "key", "value"))
        self.qkv = (np.concatenate([q[0], k[0], v[0]], axis=1), np.concatenate([q[1], k[1], v[1]]))
        self.attention_out = linear("attention.output.dense")
        self.attention_norm = (w[f"{prefix}attention.output.LayerNorm.weight"],
                               w[f"{prefix}attention.output.LayerNorm.bias"])
        self.intermediate = linear("intermediate.dense")
        self.output = linear("output.dense")
        self.output_norm = (w[f"{prefix}output.LayerNorm.weight"], w[f"{prefix}output.LayerNorm.bias"])

    def __call__(self, x: np.ndarray, padding: np.ndarray, heads: int, eps: float) -> np.ndarray:
        """`x` is (batch·width, hidden): every dense layer is then one matrix product."""
        batch, _, _, width = padding.shape
        hidden = x.shape[1]
        size = hidden // heads
        qkv = x @ self.qkv[0] + self.qkv[1]
        q, k, v = (qkv[:, n * hidden:(n + 1) * hidden].reshape(batch, width, heads, size).transpose(0, 2, 1, 3)
                   for n in range(3))
        scores = q @ k.transpose(0, 1, 3, 2)
        scores *= np.float32(1 / np.sqrt(size))
        scores += padding
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * width, hidden)
        x = _layer_norm(x + context @ self.attention_out[0] + self.attention_out[1], *self.attention_norm, eps)
        inner = _gelu(x @ self.intermediate[0] + self.intermediate[1])
        return _layer_norm(x + inner @ self.output[0] + self.output[1], *self.output_norm, eps)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + eps) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x·Φ(x) = x·(1 + erf(x/√2))/2, with erf from Abramowitz & Stegun 7.1.26
    (error below 1.5e-7, under float32's own rounding): numpy has no erf, and scipy would cost
    more to import than the whole model. In place where it can be: these are the widest arrays
    of the pass."""
    z = np.abs(x)
    z *= np.float32(1 / np.sqrt(2))
    t = z * np.float32(0.3275911)
    t += 1
    np.reciprocal(t, out=t)
    q = t * np.float32(1.061405429)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        q += np.float32(coefficient)
        q *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    q *= z  # q = 1 - erf(|x|/√2)
    out = np.where(x >= 0, 2 - q, q)  # 1 + erf(x/√2)
    out *= x
    out *= np.float32(0.5)
    return out
