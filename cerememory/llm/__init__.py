"""Optional LLM completions over httpx (OpenAI-compatible chat, Anthropic messages, Gemini).

Generic on purpose: `LLMClient.complete(system, prompt) -> (text, usage)`. Callers (the dream
summariser, reflection) own their prompts and their deterministic fallbacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..lazy import exports
from .settings import PROVIDERS, LLMSettings

BUDGET_FILE = "llm_budget.json"

# httpx and the providers load when a client is made, not when settings are read
_LAZY = {"BudgetExhausted": ".budget", "DailyBudget": ".budget", "LLMClient": ".client", "LLMError": ".providers",
         "MalformedReply": ".providers", "Usage": ".providers"}
__getattr__ = exports(__name__, _LAZY)
__all__ = ["PROVIDERS", "BUDGET_FILE", "LLMSettings", "make_client", *_LAZY]

if TYPE_CHECKING:
    from .budget import BudgetExhausted as BudgetExhausted
    from .budget import DailyBudget as DailyBudget
    from .client import LLMClient as LLMClient
    from .providers import LLMError as LLMError
    from .providers import MalformedReply as MalformedReply
    from .providers import Usage as Usage


def make_client(settings: LLMSettings, data_dir: Path | None = None) -> LLMClient | None:
    """A client for the configured provider, or None when `llm.provider` is `none`."""
    if not settings.enabled:
        return None
    from .client import LLMClient

    return LLMClient(settings, budget_path=data_dir / BUDGET_FILE if data_dir else None)
