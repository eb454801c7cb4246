"""Embeddings from a server: OpenAI-compatible ``/v1/embeddings`` or Ollama ``/api/embed``.

Servers fail in ordinary ways (restarts, rate limits, odd responses). Transient
failures are retried briefly; everything else becomes EmbeddingUnavailable with a
readable message, so the engine can fall back instead of storing garbage vectors.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, Self
from urllib.parse import urlsplit

import httpx
import numpy as np

from .base import EmbeddingUnavailable, as_text_list, is_loopback_url, normalise_rows

__all__ = ["HTTP_KINDS", "HttpEmbedder", "endpoint_url"]

HTTP_KINDS = ("openai", "ollama")

_MAX_ATTEMPTS = 3
_BACKOFF_SECONDS = (0.2, 0.4)  # sleep before attempt 2 and attempt 3
_MAX_RETRY_AFTER = 5.0
_MAX_ERROR_CHARS = 300


def endpoint_url(base_url: str, kind: str) -> str:
    """The full embeddings URL for ``base_url``.

    Accepts a bare base (``http://host:port``), a base already ending in ``/v1``
    (OpenAI) or ``/api`` (Ollama), or the full endpoint, without doubling segments.
    """
    base = base_url.strip().rstrip("/")
    if kind == "openai":
        if base.endswith("/v1/embeddings"):
            return base
        if base.endswith("/v1"):
            return base + "/embeddings"
        return base + "/v1/embeddings"
    if kind == "ollama":
        if base.endswith("/api/embed"):
            return base
        if base.endswith("/api"):
            return base + "/embed"
        return base + "/api/embed"
    raise ValueError(f"unknown http kind {kind!r}; expected one of {', '.join(HTTP_KINDS)}")


def _error_message(response: httpx.Response) -> str:
    """The server's own explanation, from the usual JSON error shapes or the raw text."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        return text[:_MAX_ERROR_CHARS] if text else response.reason_phrase
    message: Any = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail")
        elif isinstance(error, str):
            message = error
        if message is None:
            message = body.get("message") or body.get("detail")
    if message is None:
        message = json.dumps(body)
    return str(message)[:_MAX_ERROR_CHARS]


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP-date; the normal backoff is good enough
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)


def _hint_for_status(status: int, kind: str, model: str) -> str:
    if status in (401, 403):
        return "check http_api_key"
    if status == 404:
        if kind == "ollama":
            return f"check http_url, and pull the model first: ollama pull {model}"
        return f"check http_url and that the server serves the model {model!r}"
    return f"check the model name ({model!r}) and the http settings"


class HttpEmbedder:
    """Embeds by calling an embeddings server; one httpx client per embedder."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        kind: str = "openai",
        api_key: str | None = None,
        timeout: float = 30.0,
        batch_size: int = 64,
    ) -> None:
        """Validates settings only; no request is made until embed()."""
        if kind not in HTTP_KINDS:
            raise ValueError(f"unknown http kind {kind!r}; expected one of {', '.join(HTTP_KINDS)}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if not model:
            raise EmbeddingUnavailable(
                "the http embedder needs a model name", hint="set the embedding model"
            )
        parts = urlsplit((url or "").strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EmbeddingUnavailable(
                f"the embedding server URL {url!r} is not an http(s) URL",
                hint="set http_url to e.g. http://127.0.0.1:11434 or https://api.openai.com",
            )
        self.kind = kind
        self.model = model
        self.url = url.strip()
        self.endpoint = endpoint_url(self.url, kind)
        self.timeout = timeout
        self.batch_size = batch_size
        self.name = f"http:{kind}:{model}"
        self.offline = is_loopback_url(self.url)
        self._api_key = api_key
        self._dimension: int | None = None
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HttpEmbedder(name={self.name!r}, endpoint={self.endpoint!r})"

    @property
    def dimension(self) -> int | None:
        """Known after the first successful embed()."""
        return self._dimension

    def close(self) -> None:
        """Release pooled connections."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                headers = {"Accept": "application/json"}
                if self._api_key:
                    headers["Authorization"] = f"Bearer {self._api_key}"
                self._client = httpx.Client(timeout=self.timeout, headers=headers)
            return self._client

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size``; float32 unit rows."""
        items = as_text_list(texts)
        if not items:
            return np.zeros((0, self._dimension or 0), dtype=np.float32)
        parts = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            parts.append(self._embed_batch(batch))
        return normalise_rows(np.concatenate(parts, axis=0))

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        payload = {"model": self.model, "input": batch}
        body = self._post(payload)
        rows = self._extract_rows(body, len(batch))
        return self._validate(rows, len(batch))

    def _post(self, payload: dict[str, Any]) -> Any:
        """POST with up to 3 attempts on connection errors, 429 and 5xx; return parsed JSON."""
        client = self._http()
        for attempt in range(1, _MAX_ATTEMPTS + 1):
            last = attempt == _MAX_ATTEMPTS
            delay = _BACKOFF_SECONDS[min(attempt - 1, len(_BACKOFF_SECONDS) - 1)]
            try:
                response = client.post(self.endpoint, json=payload)
            except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as exc:
                # A server too slow to answer once will likely be slow again; retrying
                # would only multiply the wait.
                raise EmbeddingUnavailable(
                    f"the embedding server at {self.endpoint} did not answer within "
                    f"{self.timeout:g} s",
                    hint="raise http_timeout or lower batch_size",
                    unreachable=True,
                ) from exc
            except httpx.TransportError as exc:
                if last:
                    raise EmbeddingUnavailable(
                        f"could not reach the embedding server at {self.endpoint} after "
                        f"{_MAX_ATTEMPTS} attempts: {str(exc) or type(exc).__name__}",
                        hint="check that the server is running and http_url is right",
                        unreachable=True,
                    ) from exc
                time.sleep(delay)
                continue

            status = response.status_code
            if 200 <= status < 300:
                try:
                    return response.json()
                except ValueError as exc:
                    raise EmbeddingUnavailable(
                        f"the embedding server at {self.endpoint} answered with invalid JSON",
                        hint="check that http_url and http_kind point at an embeddings API",
                    ) from exc
            if status == 429 or status >= 500:
                if last:
                    raise EmbeddingUnavailable(
                        f"the embedding server at {self.endpoint} answered HTTP {status} "
                        f"after {_MAX_ATTEMPTS} attempts: {_error_message(response)}",
                        hint="the server is overloaded or failing; try again later",
                        unreachable=True,
                    )
                retry_after = _retry_after_seconds(response)
                time.sleep(delay if retry_after is None else retry_after)
                continue
            raise EmbeddingUnavailable(
                f"the embedding server at {self.endpoint} refused the request with HTTP "
                f"{status}: {_error_message(response)}",
                hint=_hint_for_status(status, self.kind, self.model),
            )
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _bad(self, what: str) -> EmbeddingUnavailable:
        return EmbeddingUnavailable(
            f"the embedding server at {self.endpoint} sent an unusable response: {what}",
            hint="check that http_kind matches the server (openai or ollama) and the model name",
        )

    def _extract_rows(self, body: Any, expected: int) -> list[Any]:
        if not isinstance(body, dict):
            raise self._bad("expected a JSON object")
        if self.kind == "ollama":
            rows = body.get("embeddings")
            if not isinstance(rows, list):
                raise self._bad("no 'embeddings' list")
            if len(rows) != expected:
                raise self._bad(f"{len(rows)} embeddings for {expected} texts")
            return rows
        data = body.get("data")
        if not isinstance(data, list):
            raise self._bad("no 'data' list")
        if len(data) != expected:
            raise self._bad(f"{len(data)} embeddings for {expected} texts")
        ordered: list[Any] = [None] * expected
        for position, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise self._bad(f"data[{position}] has no 'embedding'")
            index = item.get("index", position)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
                raise self._bad(f"data[{position}] has an invalid index {index!r}")
            if ordered[index] is not None:
                raise self._bad(f"index {index} appears twice")
            ordered[index] = item["embedding"]
        return ordered

    def _validate(self, rows: list[Any], expected: int) -> np.ndarray:
        if not all(isinstance(row, list) for row in rows):
            raise self._bad("an embedding is not a list of numbers")
        widths = {len(row) for row in rows}
        if len(widths) != 1:
            raise self._bad(f"embeddings of different lengths {sorted(widths)}")
        try:
            matrix = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise self._bad("an embedding contains something other than numbers") from exc
        if matrix.ndim != 2 or matrix.shape[0] != expected or matrix.shape[1] == 0:
            raise self._bad(f"embeddings have shape {matrix.shape}")
        if not np.isfinite(matrix).all():
            raise self._bad("an embedding contains NaN or infinite values")
        width = matrix.shape[1]
        if self._dimension is not None and width != self._dimension:
            raise self._bad(f"dimension changed from {self._dimension} to {width}")
        self._dimension = width
        return matrix
