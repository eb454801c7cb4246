"""What every embedding backend promises the engine, and the helpers they share.

The engine stores unit-length float32 vectors and ranks by dot product, so every
backend must hand back finite, L2-normalised rows; `normalise_rows` is the one
place that guarantees it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

import numpy as np

__all__ = [
    "Embedder",
    "EmbeddingUnavailable",
    "as_text_list",
    "is_loopback_url",
    "normalise_rows",
]


class EmbeddingUnavailable(Exception):
    """Raised when a backend cannot embed (package missing, server unreachable, bad response).

    The engine catches this to fall back to lexical search, so ``str(exc)`` is a sentence
    a user can read and ``hint`` says how to fix it.
    """

    def __init__(self, message: str, hint: str | None = None, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.hint = hint
        # the backend gave no answer (down, overloaded, too slow) rather than refusing these
        # texts: embedding them again in smaller parts would only wait longer
        self.unreachable = unreachable


@runtime_checkable
class Embedder(Protocol):
    """A text-to-vector backend; the engine depends only on this shape."""

    name: str
    """Identifies model and backend, e.g. ``local:all-MiniLM-L6-v2``; stored with vectors
    so a database can tell when its vectors came from a different model."""

    offline: bool
    """True when embedding needs no network beyond loopback."""

    @property
    def dimension(self) -> int | None:
        """Vector width, once known (from model config or after the first embed)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return float32 ``(len(texts), d)`` with finite, L2-normalised rows.

        Empty input gives shape ``(0, d)`` (``(0, 0)`` if ``d`` is not yet known).
        """
        ...


_SAFE_SQUARES = (1e-200, 1e200)  # a row's sum of squares computed in float64 without loss


def normalise_rows(matrix: np.ndarray | Sequence[float] | Sequence[Sequence[float]]) -> np.ndarray:
    """Return a float32 copy of ``matrix`` with every row scaled to unit L2 norm.

    Zero rows stay zero (they have no direction). A 1-D input is treated as one vector
    and returned 1-D. Raises ValueError on NaN/inf, because a non-finite vector would
    silently poison every similarity it takes part in.
    """
    arr = np.asarray(matrix, dtype=np.float64)
    if arr.ndim == 1:
        return normalise_rows(arr.reshape(1, -1)).reshape(-1)
    if arr.ndim != 2:
        raise ValueError(f"expected a 1-D or 2-D array, got {arr.ndim} dimensions")
    if arr.size == 0:
        return arr.astype(np.float32)
    # The usual rows in one pass for the squared norms and one for the scaled float32 copy. A
    # NaN, an inf, a square too large or too small for float64, or a zero row puts some row's sum
    # outside the safe range, and only then is the careful path below taken (it names NaN/inf,
    # rescales rows first and leaves zero rows zero).
    squares = np.einsum("ij,ij->i", arr, arr)
    if ((squares >= _SAFE_SQUARES[0]) & (squares <= _SAFE_SQUARES[1])).all():
        return _scaled_float32(arr, np.sqrt(squares))
    if not np.isfinite(arr).all():
        raise ValueError("matrix contains NaN or infinite values")
    # Divide by the largest magnitude first so squaring huge values cannot overflow.
    scale = np.abs(arr).max(axis=1, keepdims=True)
    scale[scale == 0.0] = 1.0
    scaled = arr / scale
    norms = np.linalg.norm(scaled, axis=1)
    norms[norms == 0.0] = 1.0
    return _scaled_float32(scaled, norms)


def _scaled_float32(arr: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """`arr / norms[:, None]` as float32, computed in float64 and written once."""
    out = np.empty(arr.shape, dtype=np.float32)
    np.multiply(arr, (1.0 / norms)[:, None], out=out, casting="same_kind")
    return out


def as_text_list(texts: Sequence[str]) -> list[str]:
    """Copy ``texts`` into a list of str, refusing a bare string.

    A bare ``str`` is a Sequence[str] too, and embedding it would silently embed
    each character; that mistake is worth an immediate TypeError.
    """
    if isinstance(texts, str | bytes):
        raise TypeError("embed() takes a sequence of strings, not a single string")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, expected str")
    return out


def is_loopback_url(url: str | None) -> bool:
    """True when ``url`` points at this machine (127.0.0.0/8, ::1 or localhost).

    Used to decide whether an HTTP backend counts as offline: talking to a server on
    loopback sends no text off the machine.
    """
    if not url:
        return False
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return False
    if not host:
        return False
    host = host.rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
