"""What an LLM client needs to know: provider, endpoint, limits. Filled from the `llm.*` settings."""

from __future__ import annotations

from dataclasses import dataclass

PROVIDERS = ("none", "openai", "anthropic", "gemini")

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
}

DEFAULT_MODELS = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-latest",
    "gemini": "gemini-1.5-flash",
}


@dataclass(frozen=True)
class LLMSettings:
    provider: str = "none"
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    timeout_secs: float = 30.0
    max_retries: int = 2
    backoff_secs: float = 0.5
    max_tokens: int = 300
    daily_token_budget: int = 200_000  # 0: no token limit
    daily_cost_budget_usd: float = 0.0  # 0: no cost limit
    usd_per_million_tokens: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.provider != "none"

    @property
    def effective_model(self) -> str:
        return self.model or DEFAULT_MODELS.get(self.provider, "")

    @property
    def effective_base_url(self) -> str:
        return (self.base_url or DEFAULT_BASE_URLS.get(self.provider, "")).rstrip("/")
