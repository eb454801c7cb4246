"""Optional LLM completions over httpx (OpenAI-compatible chat, Anthropic messages, Gemini).

Generic on purpose: `LLMClient.complete(system, prompt) -> (text, usage)`. Callers (the dream
summariser, reflection) own their prompts and their deterministic fallbacks.
"""

from __future__ import annotations

from pathlib import Path

from .budget import BudgetExhausted, DailyBudget
from .client import LLMClient, LLMError
from .providers import MalformedReply, Usage
from .settings import PROVIDERS, LLMSettings

BUDGET_FILE = "llm_budget.json"

__all__ = ["PROVIDERS", "BUDGET_FILE", "BudgetExhausted", "DailyBudget", "LLMClient", "LLMError",
           "LLMSettings", "MalformedReply", "Usage", "make_client"]


def make_client(settings: LLMSettings, data_dir: Path | None = None) -> LLMClient | None:
    """A client for the configured provider, or None when `llm.provider` is `none`."""
    if not settings.enabled:
        return None
    return LLMClient(settings, budget_path=data_dir / BUDGET_FILE if data_dir else None)
