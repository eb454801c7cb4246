"""Agent session ingestion: Claude Code, Codex, Gemini CLI, Cursor, Aider and Pi sessions become
raw journal records, secrets redacted, incrementally (see docs/ingest.md).

```python
from cerememory.ingest import IngestSettings, ingest, open_state

with open_state(mem, state_dir) as state:
    summary = ingest(mem, state=state, agents=["claude_code"])
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import exports

# Imported on first use (PEP 562): the configuration checks agent names through `.names`
# without loading the readers and the engine glue.
_LAZY = {
    "AGENTS": ".names", "default_roots": ".agents", "detect": ".agents",
    "AgentSummary": ".engine", "IngestSettings": ".engine", "Summary": ".engine", "ingest": ".engine",
    "select_agents": ".engine", "IngestState": ".state", "open_state": ".state", "Turn": ".turns",
    "stop_on_signals": ".watch", "watch": ".watch",
}
__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from .agents import default_roots as default_roots
    from .agents import detect as detect
    from .engine import AgentSummary as AgentSummary
    from .engine import IngestSettings as IngestSettings
    from .engine import Summary as Summary
    from .engine import ingest as ingest
    from .engine import select_agents as select_agents
    from .names import AGENTS as AGENTS
    from .state import IngestState as IngestState
    from .state import open_state as open_state
    from .turns import Turn as Turn
    from .watch import stop_on_signals as stop_on_signals
    from .watch import watch as watch


__getattr__ = exports(__name__, _LAZY)
