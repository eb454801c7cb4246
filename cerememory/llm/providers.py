"""The three wire formats: how to ask each provider for one completion and read its answer.

Each provider is a pair of pure functions, so the HTTP client (retries, timeouts, budget) is
shared and the formats can be tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .settings import LLMSettings


class LLMError(RuntimeError):
    """A completion failed; `reason` is a short, loggable explanation (never the API key)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MalformedReply(ValueError):
    """The provider answered 2xx with a body we cannot read a completion from."""


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class HttpCall:
    url: str
    headers: dict[str, str]
    body: dict[str, Any]


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MalformedReply("the reply has no text")
    return value.strip()


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


# ---------------------------------------------------------------- OpenAI-compatible chat completions


def openai_request(s: LLMSettings, system: str, prompt: str) -> HttpCall:
    headers = {"content-type": "application/json"}
    if s.api_key:
        headers["authorization"] = f"Bearer {s.api_key}"
    return HttpCall(f"{s.effective_base_url}/chat/completions", headers, {
        "model": s.effective_model, "max_tokens": s.max_tokens, "temperature": 0,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
    })


def openai_reply(body: Any) -> tuple[str, Usage]:
    try:
        text = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise MalformedReply(f"no choices[0].message.content ({type(exc).__name__})") from None
    usage = body.get("usage") or {}
    return _text(text), Usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")))


# ---------------------------------------------------------------- Anthropic messages


def anthropic_request(s: LLMSettings, system: str, prompt: str) -> HttpCall:
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    if s.api_key:
        headers["x-api-key"] = s.api_key
    return HttpCall(f"{s.effective_base_url}/messages", headers, {
        "model": s.effective_model, "max_tokens": s.max_tokens, "temperature": 0, "system": system,
        "messages": [{"role": "user", "content": prompt}],
    })


def anthropic_reply(body: Any) -> tuple[str, Usage]:
    try:
        parts = [b["text"] for b in body["content"] if b.get("type") == "text"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise MalformedReply(f"no content[].text ({type(exc).__name__})") from None
    usage = body.get("usage") or {}
    return _text("".join(parts)), Usage(_int(usage.get("input_tokens")), _int(usage.get("output_tokens")))


# ---------------------------------------------------------------- Gemini generateContent


def gemini_request(s: LLMSettings, system: str, prompt: str) -> HttpCall:
    headers = {"content-type": "application/json"}
    if s.api_key:
        headers["x-goog-api-key"] = s.api_key
    return HttpCall(f"{s.effective_base_url}/models/{s.effective_model}:generateContent", headers, {
        "systemInstruction": {"parts": [{"text": system}]},
        "contents": [{"role": "user", "parts": [{"text": prompt}]}],
        "generationConfig": {"maxOutputTokens": s.max_tokens, "temperature": 0},
    })


def gemini_reply(body: Any) -> tuple[str, Usage]:
    try:
        parts = body["candidates"][0]["content"]["parts"]
        text = "".join(p.get("text", "") for p in parts)
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise MalformedReply(f"no candidates[0].content.parts ({type(exc).__name__})") from None
    usage = body.get("usageMetadata") or {}
    return _text(text), Usage(_int(usage.get("promptTokenCount")), _int(usage.get("candidatesTokenCount")))


FORMATS = {
    "openai": (openai_request, openai_reply),
    "anthropic": (anthropic_request, anthropic_reply),
    "gemini": (gemini_request, gemini_reply),
}
