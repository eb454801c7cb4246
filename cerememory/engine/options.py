"""How an engine is opened: the settings every part reads, and the progress callback type."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..dream.settings import DreamSettings
from ..dynamics import decay, evolution
from ..embed import EmbedSettings
from ..llm.settings import LLMSettings
from ..model import StoreType
from ..storage.archive_settings import ArchiveSettings
from ..storage.backends import StorageSettings


@dataclass
class EngineOptions:
    storage: StorageSettings = field(default_factory=StorageSettings)  # the system of record
    working_capacity: int = 7
    # recall defaults chosen by leave-one-conversation-out cross-validation (bench/locomo.py --cv)
    fusion: str = "normalized"
    rrf_k: int = 5
    activation_seeds: int = 3
    text_weight: float = 1.5  # BM25's vote in fusion; cosine's is 1
    activation_weight: float = 1.5
    question_cleanup: bool = False
    temporal_weight: float = 1.0  # how much a time the cue names favours memories from then
    session_weight: float = 0.1  # how much the other hits from a hit's session add to it
    context_weight: float = 0.5  # the vote of the cue's cosine to each hit in its session context
    text_context_weight: float = 1.0  # the vote of BM25 over each hit and its session neighbours
    feedback: str = "off"  # pseudo-relevance feedback: "vector", "text" or "off"
    embed: EmbedSettings = field(default_factory=EmbedSettings)
    decay: dict[StoreType, decay.DecayParams] = field(default_factory=lambda: dict(decay.DEFAULT_PARAMS))
    clock: Callable[[], float] = time.time  # seconds since the epoch; injectable for tests
    evolution_frozen: bool = False
    evolution_interval: float = evolution.DEFAULT_INTERVAL
    server_url: str | None = None
    flush_interval: float = 2.0
    # fill the record-body cache in the background after opening: worth it for a process that
    # serves many queries, wasted (and a thread contending for the interpreter) for one command
    warm_cache: bool = True
    passphrase: str | None = None  # unlocks an encrypted data directory (storage/crypto.py)
    sanitize_patterns: tuple[str, ...] = ()  # extra secret patterns for what a dream derives
    audit: bool = True  # the hash-chained audit log of mutating operations (security/audit.py)
    allow_broken_audit: bool = False
    audit_fsync_interval: float = 1.0
    dream: DreamSettings = field(default_factory=DreamSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    archive: ArchiveSettings = field(default_factory=ArchiveSettings)  # import cost, export directory
