"""cm's LLM paths — the reflector (`cm reflect`) and the validator (`cm validate`) — over
`cerememory.llm` (same adapters, retries and daily budget as the dream summariser).

Configuration (docs/cm.md, "LLM"): cm's own config.json keys and environment variables, as
the reference reads them, mapped onto `LLMSettings`; without a key for cm's provider,
Cerememory's `llm.*` settings are used as they are; `CASS_MEMORY_LLM=none` turns the LLM off.
Every failure is an `LLMError`; callers fall back to the deterministic path and say so.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

PROVIDERS = {"anthropic": "anthropic", "openai": "openai", "google": "gemini", "gemini": "gemini",
             "ollama": "openai"}
KEY_ENV = {"anthropic": ("ANTHROPIC_API_KEY",), "openai": ("OPENAI_API_KEY",),
           "google": ("GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY"), "gemini": ("GEMINI_API_KEY",)}
URL_ENV = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL", "google": "GOOGLE_BASE_URL",
           "gemini": "GOOGLE_BASE_URL"}
DEFAULT_MODEL = "claude-sonnet-5"  # the reference's default, meaningful for anthropic only
MIN_REPLY_TOKENS = 1500  # a list of rules in JSON needs more room than a dream summary
MAX_TRANSCRIPT = 12_000
MAX_AUDIT_RULES = 100  # rules shown to the auditor per session, best first
MAX_DELTAS = 50


@dataclass
class Usage:
    """What the LLM cost in this command, for the envelope's `usage`."""

    provider: str
    model: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self, budget: dict[str, Any] | None) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "calls": self.calls,
                "inputTokens": self.input_tokens, "outputTokens": self.output_tokens,
                "totalTokens": self.input_tokens + self.output_tokens, "budget": budget}


def resolve(config: Mapping[str, Any], env: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """(LLMSettings or None, where they came from / why there are none)."""
    from ..config import load_config
    from ..llm.settings import LLMSettings
    from .home import data_dir

    env = os.environ if env is None else env
    if (env.get("CASS_MEMORY_LLM") or "").lower() == "none":
        return None, "CASS_MEMORY_LLM=none"
    base_config = load_config(None, {"data_dir": str(data_dir())})
    base = LLMSettings(**{name: base_config[f"llm.{name}"] for name in (
        "provider", "model", "base_url", "api_key", "timeout_secs", "max_retries", "max_tokens",
        "daily_token_budget", "daily_cost_budget_usd", "usd_per_million_tokens")})
    name = str(config.get("provider") or "anthropic").lower()
    provider = PROVIDERS.get(name)
    key = config.get("apiKey") or next((env[k] for k in KEY_ENV.get(name, ()) if env.get(k)), None)
    if provider is not None and (key or name == "ollama"):
        url = config.get("baseUrl") or env.get(URL_ENV.get(name, "")) or None
        if name == "ollama":
            host = config.get("ollamaBaseUrl") or env.get("OLLAMA_BASE_URL") or env.get("OLLAMA_HOST") \
                or "http://localhost:11434"
            url = url or f"{str(host).rstrip('/')}/v1"
        model = config.get("model")
        if not model or (model == DEFAULT_MODEL and provider != "anthropic"):
            model = base.model if base.provider == provider else None
        timeout_ms = config.get("llmTimeoutMs") or env.get("CM_LLM_TIMEOUT_MS")
        budget = config.get("budget") or {}
        settings = replace(base, provider=provider, model=model, base_url=url, api_key=key,
                           timeout_secs=float(timeout_ms) / 1000 if timeout_ms else base.timeout_secs,
                           daily_cost_budget_usd=float(budget.get("dailyLimit") or 0)
                           if base.usd_per_million_tokens else base.daily_cost_budget_usd)
        return _roomy(settings), f"cm config (provider {name})"
    if base.enabled:
        return _roomy(base), f"Cerememory llm.* settings (provider {base.provider})"
    if provider is None:
        return None, f"provider {name!r} is not supported by cm; use anthropic, openai, google or ollama"
    names = " or ".join(KEY_ENV.get(name, ("apiKey",)))
    return None, f"no API key for provider {name} (set {names}, or apiKey in config.json) and llm.provider is none"


def _roomy(settings: Any) -> Any:
    return replace(settings, max_tokens=max(settings.max_tokens, MIN_REPLY_TOKENS))


class Session:
    """One LLM client for one cm command: calls, usage, and the budget it draws on."""

    def __init__(self, settings: Any, source: str) -> None:
        from ..llm import make_client
        from .home import data_dir

        client = make_client(settings, data_dir())
        if client is None:  # resolve() returns only enabled settings
            raise ValueError(f"llm.provider {settings.provider!r} has no client")
        self.source = source
        self.client = client
        self.usage = Usage(settings.provider, settings.effective_model)

    def complete_json(self, system: str, prompt: str) -> Any:
        """The reply parsed as JSON (fences and prose around it tolerated); `LLMError` otherwise."""
        from ..llm import LLMError

        try:
            text, used = self.client.complete(system, prompt)
        except LLMError as exc:
            self.usage.errors.append(exc.reason)
            raise
        self.usage.calls += 1
        self.usage.input_tokens += used.input_tokens
        self.usage.output_tokens += used.output_tokens
        try:
            return _parse_json(text)
        except ValueError as exc:
            self.usage.errors.append(f"malformed reply: {exc}")
            raise LLMError(f"malformed reply: {exc}") from None

    def report(self) -> dict[str, Any]:
        budget = self.client.budget
        state = budget.used()
        return self.usage.to_dict({"day": state.get("day"), "tokensToday": state.get("tokens"),
                                   "costTodayUsd": round(float(state.get("cost_usd") or 0), 6),
                                   "dailyTokenLimit": budget.max_tokens or None,
                                   "dailyCostLimitUsd": budget.max_cost_usd or None})

    def close(self) -> None:
        self.client.close()


def open_session(config: Mapping[str, Any]) -> tuple[Session | None, str]:
    settings, source = resolve(config)
    if settings is None:
        return None, source
    try:
        return Session(settings, source), source
    except ValueError as exc:
        return None, str(exc)


def _parse_json(text: str) -> Any:
    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith(("{", "[")):
        start = min((i for i in (body.find("{"), body.find("[")) if i >= 0), default=-1)
        if start < 0:
            raise ValueError("no JSON in the reply")
        body = body[start:]
    try:
        return json.loads(body)
    except ValueError:
        end = max(body.rfind("}"), body.rfind("]"))
        return json.loads(body[:end + 1])


# ---------------------------------------------------------------- the reflector

REFLECT_SYSTEM = (
    "You review one coding-agent session transcript and extract reusable procedural rules for future "
    "sessions: concrete, actionable, one sentence each, specific to the project's conventions, tools or "
    "pitfalls. Also say which existing rules the session shows to be helpful or harmful. Reply with JSON "
    'only: {"deltas": [{"type": "add", "bullet": {"content": "<rule>", "category": "<one word>"}, '
    '"reason": "<why, from the session>"}, {"type": "helpful" | "harmful", "bulletId": "<id>", '
    '"reason": "<evidence>"}]}. Return {"deltas": []} when the session teaches nothing new.')


def _clip(transcript: str) -> str:
    """The transcript within MAX_TRANSCRIPT: its first third and last two thirds."""
    if len(transcript) <= MAX_TRANSCRIPT:
        return transcript
    return transcript[:MAX_TRANSCRIPT // 3] + "\n[…]\n" + transcript[-(MAX_TRANSCRIPT * 2 // 3):]


def reflect_prompt(transcript: str, rules: list[dict[str, Any]], proposed: list[dict[str, Any]]) -> str:
    text = _clip(transcript)
    existing = "\n".join(f"- {r['id']}: {r['content']}" for r in rules[:40]) or "(none)"
    already = "\n".join(f"- {d['bullet']['content']}" for d in proposed if d["type"] == "add") or "(none)"
    return (f"Existing rules:\n{existing}\n\nAlready proposed in this reflection (do not repeat):\n{already}\n\n"
            f"Session transcript:\n{text}")


def parse_deltas(reply: Any) -> list[dict[str, Any]]:
    """The reflector's deltas, validated; a reply without a `deltas` list is malformed."""
    from ..llm import LLMError

    items = reply.get("deltas") if isinstance(reply, dict) else reply if isinstance(reply, list) else None
    if not isinstance(items, list):
        raise LLMError("malformed reply: no deltas list")
    out = []
    for item in items[:MAX_DELTAS]:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        reason = str(item.get("reason") or "")[:500]
        if kind == "add":
            nested = item.get("bullet")
            bullet = nested if isinstance(nested, dict) else item
            content = " ".join(str(bullet.get("content") or "").split())
            if 10 <= len(content) <= 1000:
                category = str(bullet.get("category") or "general").strip().lower()[:40] or "general"
                out.append({"type": "add", "bullet": {"content": content, "category": category}, "reason": reason})
        elif kind in ("helpful", "harmful") and isinstance(item.get("bulletId"), str):
            out.append({"type": kind, "bulletId": item["bulletId"], "reason": reason})
    return out


# ---------------------------------------------------------------- the diary

DIARY_SYSTEM = (
    "You write the diary of one coding-agent session transcript: what was done, decided, hard, "
    "preferred and learned. Be concrete and short (one sentence per item, at most five per list). "
    'Reply with JSON only: {"status": "success" | "failure" | "mixed", "accomplishments": [], '
    '"decisions": [], "challenges": [], "preferences": [], "keyLearnings": [], "tags": []}.')
DIARY_LISTS = ("accomplishments", "decisions", "challenges", "preferences", "keyLearnings", "tags")


def diary_prompt(transcript: str) -> str:
    return "Session transcript:\n" + _clip(transcript)


def parse_diary(reply: Any) -> dict[str, Any]:
    """The diary fields the LLM filled; a reply without a valid status is malformed."""
    from ..llm import LLMError

    if not isinstance(reply, dict) or reply.get("status") not in ("success", "failure", "mixed"):
        raise LLMError("malformed reply: no diary status")
    out: dict[str, Any] = {"status": reply["status"]}
    for name in DIARY_LISTS:
        items = reply.get(name)
        if isinstance(items, list):
            out[name] = [" ".join(str(i).split())[:300] for i in items if isinstance(i, str | int | float)][:5]
    return out


# ---------------------------------------------------------------- the validator

VALIDATE_SYSTEM = (
    "You judge whether a proposed rule for coding agents is supported by evidence from past sessions. "
    'Reply with JSON only: {"verdict": "ACCEPT" | "REJECT" | "REFINE", "confidence": <0..1>, '
    '"reason": "<one sentence>", "refinedRule": "<better wording, only for REFINE>"}.')


def validate_prompt(rule: str, evidence: list[dict[str, Any]]) -> str:
    lines = "\n".join(f"- [{e['outcome']}] {e['snippet']}" for e in evidence[:10]) or "(no sessions)"
    return f"Proposed rule: {rule}\n\nEvidence from past sessions:\n{lines}"


def parse_verdict(reply: Any) -> dict[str, Any]:
    """`{verdict, confidence, reason, refinedRule?}` in the reference's terms (REFINE →
    ACCEPT_WITH_CAUTION with confidence × 0.8)."""
    from ..llm import LLMError

    if not isinstance(reply, dict) or reply.get("verdict") not in ("ACCEPT", "REJECT", "REFINE"):
        raise LLMError("malformed reply: no verdict")
    try:
        confidence = min(1.0, max(0.0, float(reply.get("confidence", 0.7))))
    except (TypeError, ValueError):
        confidence = 0.7
    out: dict[str, Any] = {"verdict": reply["verdict"], "confidence": confidence,
                           "reason": str(reply.get("reason") or "LLM validator")[:500]}
    if reply["verdict"] == "REFINE":
        out.update(verdict="ACCEPT_WITH_CAUTION", confidence=round(confidence * 0.8, 4))
        if isinstance(reply.get("refinedRule"), str) and reply["refinedRule"].strip():
            out["refinedRule"] = reply["refinedRule"].strip()
    return out


# ---------------------------------------------------------------- the auditor

AUDIT_SYSTEM = (
    "You audit one coding-agent session transcript against the project's playbook rules and report "
    "every place where the agent acted against a rule. Only report violations the transcript shows; "
    'quote the evidence. Reply with JSON only: {"violations": [{"bulletId": "<rule id>", '
    '"evidence": "<quote from the transcript>", "proven": <true when the transcript leaves no doubt>}]}. '
    'Return {"violations": []} when the session follows the rules.')


def audit_prompt(transcript: str, rules: list[dict[str, Any]]) -> str:
    text = _clip(transcript)
    listed = "\n".join(f"- {r['id']}: {r['content']}" for r in rules[:MAX_AUDIT_RULES])
    return f"Playbook rules:\n{listed}\n\nSession transcript:\n{text}"


def parse_violations(reply: Any, known: set[str]) -> list[dict[str, Any]]:
    """The auditor's violations of rules that exist; a reply without a `violations` list is malformed."""
    from ..llm import LLMError

    items = reply.get("violations") if isinstance(reply, dict) else reply if isinstance(reply, list) else None
    if not isinstance(items, list):
        raise LLMError("malformed reply: no violations list")
    out = []
    for item in items:
        if isinstance(item, dict) and item.get("bulletId") in known:
            out.append({"bulletId": item["bulletId"], "evidence": str(item.get("evidence") or "")[:500],
                        "proven": item.get("proven") is True})
    return out
