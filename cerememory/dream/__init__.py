"""Dream processing: the raw journal becomes episodic summaries and semantic facts, with
backlinks both ways and redaction by visibility and secrecy (see docs/dream.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import exports
from .settings import DreamSettings

# the summariser (and through it, the LLM client) loads on the first dream, not when the engine
# reads its settings
_LAZY = {"Group": ".grouping", "group_records": ".grouping", "sources_of": ".sources",
         "Summariser": ".summarise", "Summary": ".summarise"}
__getattr__ = exports(__name__, _LAZY)
__all__ = ["DreamSettings", *_LAZY]

if TYPE_CHECKING:
    from .grouping import Group as Group
    from .grouping import group_records as group_records
    from .sources import sources_of as sources_of
    from .summarise import Summariser as Summariser
    from .summarise import Summary as Summary
