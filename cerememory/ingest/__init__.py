"""Agent session ingestion: Claude Code, Codex, Gemini CLI, Cursor, Aider and Pi sessions become
raw journal records, secrets redacted, incrementally (see docs/ingest.md).

```python
from cerememory.ingest import IngestSettings, ingest, open_state

with open_state(mem, state_dir) as state:
    summary = ingest(mem, state=state, agents=["claude_code"])
```
"""

from __future__ import annotations

from .agents import AGENTS, default_roots, detect
from .engine import AgentSummary, IngestSettings, Summary, ingest, select_agents
from .state import IngestState, open_state
from .turns import Turn
from .watch import stop_on_signals, watch

__all__ = ["AGENTS", "AgentSummary", "IngestSettings", "IngestState", "Summary", "Turn", "default_roots", "detect",
           "ingest", "open_state", "select_agents", "stop_on_signals", "watch"]
