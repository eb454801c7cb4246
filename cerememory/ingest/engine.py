"""Agent sessions into the raw journal: find the session files, read what is new in each, redact
secrets, write the turns with `encode.batch_raw`, remember how far each file was read.

Only the `MemoryAPI` is used, so the same code ingests into an embedded engine or a running
server. Turns are written before the state that says they were: a run that dies between the two
re-reads those turns next time, and the turn-id digests written with every batch keep them from
being journaled twice.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..cmp.errors import CMPError, ErrorCode
from ..cmp.messages import MAX_BATCH
from ..security.sanitize import Sanitizer
from .agents import AGENTS, READERS, canonical, default_roots, files
from .files import admit
from .record import journal_record, shown
from .state import IngestState, Signature, digest
from .turns import HARD_CAP, TOOL_IO, Chunk, Turn, scrub, truncate

# progress(label, total) -> a context manager yielding advance(n): the CLI's `Output.progress`
Progress = Callable[[str, int | None], AbstractContextManager[Callable[[int], None]]]
GLOBAL_IDS = {"claude_code"}  # their log ids are unique across sessions (a resumed session repeats them)
SANITIZE_CAP = 1_000_000
FAULT_ENV = "CEREMEMORY_INGEST_FAULT"
FAULT_EXIT_CODE = 87


@dataclass(frozen=True)
class IngestSettings:
    """The `ingest.*` and `sanitize.*` settings that shape a run."""

    allow: tuple[str, ...] = ()  # empty: every agent
    deny: tuple[str, ...] = ()
    max_tool_chars: int = 16_000
    extra_patterns: tuple[str, ...] = ()
    batch_size: int = MAX_BATCH

    @classmethod
    def from_config(cls, config: Any) -> IngestSettings:
        return cls(allow=tuple(config["ingest.agents"]), deny=tuple(config["ingest.exclude_agents"]),
                   max_tool_chars=config["ingest.max_tool_chars"],
                   extra_patterns=tuple(config["sanitize.extra_patterns"]))

    def permits(self, agent: str) -> bool:
        return (not self.allow or agent in self.allow) and agent not in self.deny


@dataclass
class AgentSummary:
    files: int = 0
    files_read: int = 0
    sessions: int = 0
    turns_ingested: int = 0
    turns_duplicate: int = 0
    turns_skipped: int = 0
    turns_older: int = 0
    turns_redacted: int = 0
    secrets_redacted: int = 0
    turns_truncated: int = 0
    files_rewritten: int = 0
    errors: list[str] = field(default_factory=list)
    skipped_lines: list[dict[str, Any]] = field(default_factory=list)  # {"file", "count"} per file with any


@dataclass
class Summary:
    """What one run found and did, per agent (`turns_skipped`: lines or entries that were
    unreadable or not understood, `skipped_lines` says in which files; `turns_duplicate`: already
    in the journal; `turns_older`: before `since`; `errors`: files not read at all, and why)."""

    agents: dict[str, AgentSummary]
    dry_run: bool
    state_path: str
    denied: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> AgentSummary:
        total = AgentSummary()
        for part in self.agents.values():
            for name, value in asdict(part).items():
                setattr(total, name, getattr(total, name) + value)
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "state_path": self.state_path, "denied_agents": self.denied,
                "seconds": round(self.seconds, 3), "agents": {k: asdict(v) for k, v in self.agents.items()},
                "total": asdict(self.total)}


def select_agents(requested: Sequence[str] | None, settings: IngestSettings) -> tuple[list[str], list[str]]:
    """(agents to read, agents the privacy settings keep out). Naming an unknown agent is an
    error; naming a denied one too, so the setting is never silently overridden."""
    names = []
    for name in requested or AGENTS:
        agent = canonical(name)
        if agent is None:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"unknown agent {name!r}",
                           hint=f"one of: {', '.join(AGENTS)}")
        names.append(agent)
    allowed = [a for a in dict.fromkeys(names) if settings.permits(a)]
    denied = [a for a in dict.fromkeys(names) if not settings.permits(a)]
    if requested and denied:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"agent {denied[0]} is excluded by the privacy settings",
                       hint="allow it with the ingest.agents / ingest.exclude_agents settings")
    return allowed, denied


class _Writer:
    """Batches journal records and, after each batch is stored, records their turn digests."""

    def __init__(self, api: Any, state: IngestState, size: int, dry_run: bool) -> None:
        self.api, self.state, self.size, self.dry_run = api, state, size, dry_run
        self.records: list[dict[str, Any]] = []
        self.owners: list[tuple[Path, str, str]] = []  # (file, agent, digest) per record

    def add(self, record: dict[str, Any], path: Path, agent: str, key: str) -> None:
        self.records.append(record)
        self.owners.append((path, agent, key))
        if len(self.records) >= self.size:
            self.flush()

    def flush(self) -> None:
        if not self.records:
            return
        if not self.dry_run:
            owners = [(str(path), agent, key) for path, agent, key in self.owners]
            sessions: dict[str, list[str]] = {}
            for record in self.records:
                span = sessions.setdefault(record["session_id"], [record["created_at"], record["created_at"]])
                span[0], span[1] = min(span[0], record["created_at"]), max(span[1], record["created_at"])
            self.state.begin_batch(owners, sessions)
            self.api.store_raw_batch(self.records)
            if os.environ.get(FAULT_ENV) == "after_store":
                os._exit(FAULT_EXIT_CODE)  # crash-safety tests: die between the journal and the state
            self.state.end_batch(owners)
        self.records, self.owners = [], []


class _Run:
    def __init__(self, api: Any, state: IngestState, settings: IngestSettings, since: datetime | None,
                 dry_run: bool) -> None:
        self.state, self.settings, self.since, self.dry_run = state, settings, since, dry_run
        self.sanitizer = Sanitizer(settings.extra_patterns)
        self.writer = _Writer(api, state, max(1, min(settings.batch_size, MAX_BATCH)), dry_run)
        self.host = socket.gethostname()
        self.pending: list[tuple[Path, str, Signature, int, dict]] = []
        self.sessions: dict[str, set[str]] = {}
        self.queued: set[str] = set()

    def text(self, turn: Turn, stats: AgentSummary) -> tuple[str, int, bool]:
        text = turn.text
        if len(text) > SANITIZE_CAP:
            text, _ = truncate(text, SANITIZE_CAP)
        text, redactions = self.sanitizer.sanitize(text)
        cap = min(self.settings.max_tool_chars or HARD_CAP, HARD_CAP) if turn.source == TOOL_IO else HARD_CAP
        text, cut = truncate(text, cap)
        cut = cut or len(turn.text) > SANITIZE_CAP
        stats.turns_redacted += 1 if redactions else 0
        stats.secrets_redacted += redactions
        stats.turns_truncated += 1 if cut else 0
        return text, redactions, cut

    def record(self, turn: Turn, path: Path, fallback: datetime, stats: AgentSummary, key: str) -> dict[str, Any]:
        text, redactions, cut = self.text(turn, stats)
        return journal_record(turn, text, turn.timestamp or fallback, {
            "ingest_key": key, "source_path": shown(path), "host": self.host, "redactions": redactions,
            "truncated": cut or None, "timestamp_inferred": True if turn.timestamp is None else None})

    def file(self, agent: str, path: Path, root: Path, stats: AgentSummary) -> None:
        """Read what is new in one file, in as many bounded rounds as it takes. A file that cannot
        be read is reported under `errors` and the run goes on with the others."""
        reader = READERS[agent]
        try:
            signature = Signature.of(path, admit(path, root))
        except OSError as exc:
            stats.errors.append(scrub(f"{path}: {exc.strerror or exc}"))
            return
        stats.files += 1
        if self.state.unchanged(path, signature):
            return
        mtime = datetime.fromtimestamp(signature.mtime_ns / 1e9, UTC)
        if self.since is not None and mtime < self.since:
            return
        try:
            offset, context, rewritten = self.state.resume(path, signature, reader.incremental(path))
        except OSError as exc:
            stats.errors.append(scrub(f"{path}: {exc.strerror or exc}"))
            return
        chunk = self.read(reader, path, offset, context, stats)
        if chunk is None:
            return
        stats.files_read += 1
        stats.files_rewritten += 1 if rewritten else 0
        fallback, skipped = mtime, 0
        while chunk is not None:
            offset, context = chunk.offset, chunk.context
            skipped += chunk.skipped
            fallback = self.turns(agent, path, chunk.turns, fallback, stats)
            chunk = self.read(reader, path, offset, context, stats) if chunk.more else None
        stats.turns_skipped += skipped
        if skipped:
            stats.skipped_lines.append({"file": shown(path), "count": skipped})
        self.pending.append((path, agent, signature, offset, context))

    @staticmethod
    def read(reader: Any, path: Path, offset: int, context: dict, stats: AgentSummary) -> Chunk | None:
        """One bounded read of `path`, or None when it failed (reported under `errors`): whatever
        one file holds, the other files are still read."""
        try:
            return reader.read(path, offset, context)
        except Exception as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            stats.errors.append(scrub(f"{path}: {reason}"))
            return None

    def turns(self, agent: str, path: Path, turns: list[Turn], fallback: datetime, stats: AgentSummary) -> datetime:
        """Queue the turns not yet in the journal (nor before `since`). A turn without a time takes
        the one before it (`fallback` to begin with); returns the time for the next turns."""
        seen = self.state.seen()
        for turn in turns:
            fallback = turn.timestamp or fallback
            if self.since is not None and turn.timestamp is not None and turn.timestamp < self.since:
                stats.turns_older += 1
                continue
            key = digest(f"{agent}:{turn.log_id}" if agent in GLOBAL_IDS and turn.log_id else turn.turn_id)
            if key in seen or key in self.queued:  # queued: in this run, its batch not stored yet
                stats.turns_duplicate += 1
                continue
            self.queued.add(key)
            self.sessions.setdefault(agent, set()).add(turn.session_id)
            stats.turns_ingested += 1
            self.writer.add(self.record(turn, path, fallback, stats, key), path, agent, key)
        return fallback

    def commit_files(self) -> None:
        """After every turn of these files is stored: move their offsets on."""
        self.writer.flush()
        if not self.dry_run:
            for path, agent, signature, offset, context in self.pending:
                self.state.advance(path, agent, signature, offset, context)
            self.state.save()
        self.pending = []


def ingest(api: Any, *, state: IngestState, agents: Sequence[str] | None = None,
           paths: Iterable[str | Path] | None = None, since: datetime | None = None, dry_run: bool = False,
           progress: Progress | None = None, settings: IngestSettings | None = None) -> Summary:
    """Ingest new turns of the agents' sessions (default locations, or `paths`) into `api`'s
    raw journal. `state` must be locked by the caller (`with state:`) for the whole run."""
    import time

    started = time.perf_counter()
    settings = settings or IngestSettings()
    chosen, denied = select_agents(agents, settings)
    explicit = [Path(p).expanduser() for p in paths or ()]
    if not dry_run:
        state.recover_batch(api)
    run = _Run(api, state, settings, since, dry_run)
    summary = Summary({}, dry_run, str(state.path), denied)
    plan: dict[str, dict[Path, Path]] = {a: {} for a in chosen}  # agent: {file: the root it was found under}
    if explicit:
        for found in files(chosen[0] if agents and len(chosen) == 1 else None, explicit):
            if found.agent in plan:
                plan[found.agent].setdefault(found.path, found.root)
            elif found.agent not in summary.denied and not settings.permits(found.agent):
                summary.denied.append(found.agent)
    else:
        for agent in chosen:
            for found in files(agent, default_roots(agent)):
                plan[agent].setdefault(found.path, found.root)
    for agent, found_ in plan.items():
        stats = summary.agents.setdefault(agent, AgentSummary())
        bar = progress(agent, len(found_)) if progress and found_ else nullcontext(lambda n: None)
        with bar as advance:
            for n, path in enumerate(sorted(found_), 1):
                run.file(agent, path, found_[path], stats)
                advance(1)
                if n % 200 == 0:
                    run.commit_files()
            run.commit_files()
        stats.sessions = len(run.sessions.get(agent, ()))
    summary.seconds = time.perf_counter() - started
    return summary
