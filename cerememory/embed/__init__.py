"""Embedding backends and the rule for whether semantic search is on.

``make_embedder`` turns settings into an Embedder or a one-sentence reason why
semantic search is off. With ``semantic = auto`` it only picks backends that keep
text on this machine, and it never loads torch or opens a connection: both cost
time, and opening a database must stay fast.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .base import Embedder, EmbeddingUnavailable, is_loopback_url, normalise_rows
from .local import (
    DEFAULT_LOCAL_MODEL,
    LocalEmbedder,
    local_embedder_available,
    local_unavailable_reason,
)

if TYPE_CHECKING:
    from .http import HttpEmbedder

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "EmbedSettings",
    "Embedder",
    "EmbeddingUnavailable",
    "HttpEmbedder",
    "LocalEmbedder",
    "local_embedder_available",
    "make_embedder",
    "normalise_rows",
]

_SEMANTIC_MODES = ("auto", "on", "off")
_BACKENDS = ("local", "http", "none")
_HTTP_KINDS = ("openai", "ollama")


def __getattr__(name: str) -> Any:
    # The http module imports httpx; only pay for it when it is used.
    if name == "HttpEmbedder":
        from .http import HttpEmbedder

        return HttpEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class EmbedSettings:
    """How (and whether) to embed; validated on construction so typos fail early."""

    semantic: str = "auto"  # auto | on | off
    backend: str = "local"  # local | http | none
    model: str = DEFAULT_LOCAL_MODEL  # local model name, or the remote model name for http
    http_url: str | None = None  # e.g. http://127.0.0.1:11434 or https://api.openai.com
    http_kind: str = "openai"  # openai | ollama
    http_api_key: str | None = field(default=None, repr=False)  # kept out of logs
    http_timeout: float = 30.0
    batch_size: int = 64

    def __post_init__(self) -> None:
        if self.semantic not in _SEMANTIC_MODES:
            raise ValueError(
                f"semantic must be one of {', '.join(_SEMANTIC_MODES)}, not {self.semantic!r}"
            )
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(_BACKENDS)}, not {self.backend!r}")
        if self.http_kind not in _HTTP_KINDS:
            raise ValueError(
                f"http_kind must be one of {', '.join(_HTTP_KINDS)}, not {self.http_kind!r}"
            )
        if not self.http_timeout > 0:
            raise ValueError(f"http_timeout must be positive, not {self.http_timeout!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {self.batch_size!r}")


def _off(reason: str) -> tuple[None, str]:
    return None, f"semantic search is off: {reason}"


def make_embedder(settings: EmbedSettings) -> tuple[Embedder | None, str | None]:
    """Return ``(embedder, None)`` when semantic search is on, else ``(None, reason)``.

    semantic=off or backend=none: off. semantic=auto: on exactly when the backend works
    offline (local with its packages installed, or http on a loopback URL), so no text
    leaves the machine unless asked. semantic=on: the backend is required, and
    EmbeddingUnavailable (with a hint) is raised when it cannot work. Never loads a
    model or contacts a server.
    """
    if settings.semantic == "off":
        return None, "semantic search is off (semantic = off)"
    if settings.backend == "none":
        return None, "semantic search is off (backend = none)"
    required = settings.semantic == "on"

    if settings.backend == "local":
        problem = local_unavailable_reason(settings.model)
        if problem is not None:
            reason, hint = problem
            if required:
                raise EmbeddingUnavailable(f"semantic = on, but {reason}", hint=hint)
            return _off(reason)
        return LocalEmbedder(settings.model, batch_size=settings.batch_size), None

    # backend == "http"
    if not settings.http_url:
        if required:
            raise EmbeddingUnavailable(
                "semantic = on with the http backend, but http_url is not set",
                hint="set http_url, e.g. http://127.0.0.1:11434 for Ollama",
            )
        return _off("the http backend needs http_url")
    if importlib.util.find_spec("httpx") is None:
        if required:
            raise EmbeddingUnavailable(
                "the http embedder needs the httpx package", hint="pip install httpx"
            )
        return _off("the http backend needs the httpx package (pip install httpx)")
    if not required and not is_loopback_url(settings.http_url):
        return _off(
            f"semantic = auto only uses backends on this machine, and {settings.http_url} "
            "is not a loopback address (set semantic = on to use it)"
        )

    from .http import HttpEmbedder

    try:
        embedder = HttpEmbedder(
            settings.http_url,
            settings.model,
            kind=settings.http_kind,
            api_key=settings.http_api_key,
            timeout=settings.http_timeout,
            batch_size=settings.batch_size,
        )
    except EmbeddingUnavailable as exc:
        if required:
            raise
        return _off(str(exc))
    return embedder, None
