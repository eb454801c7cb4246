"""Cerememory: a living memory database for LLM agents.

```python
import cerememory

with cerememory.open("./memory") as mem:
    mem.store("Alice prefers tabs over spaces", store="procedural")
    print(mem.recall("what does Alice prefer").memories[0].rendered_content.plain_text())
```
"""

from .api import Memory as Memory
from .api import MemoryAPI as MemoryAPI
from .api import open as open
from .cmp.errors import CMPError as CMPError
from .cmp.errors import ErrorCode as ErrorCode
from .model import ContentBlock as ContentBlock
from .model import EmotionVector as EmotionVector
from .model import MemoryContent as MemoryContent
from .model import MemoryRecord as MemoryRecord
from .model import MetaMemory as MetaMemory
from .model import RawJournalRecord as RawJournalRecord
from .model import StoreType as StoreType
from .transport.client import AsyncClient as AsyncClient
from .transport.client import Client as Client
from .version import __version__ as __version__
