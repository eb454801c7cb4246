"""The turns of a conversation session, linked in order however they are stored.

A record's session is its `context.session_id` (kept in its metadata as `_context`). Turns of
one session that are written together are linked each to the next in `created_at` order (ties in
the order they were given). The newest stored turn of every session is kept in the database's
state, so the first turn of a later batch, or a turn stored on its own, is linked to the turn
before it. The state is read and written inside the write's own transaction, under the writer
lock: concurrent writers, and servers sharing one database, extend one chain.

A turn older than its session's newest stored turn arrives out of order: it is linked within
its own write only.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..index.graph import Edge
from ..model import AssociationType, MemoryRecord, StoreType, to_ts
from ..storage.base import StateRows

SEQUENTIAL_WEIGHT = 0.7
TAIL_PREFIX = "session_tail:"
SEQUENTIAL = AssociationType.SEQUENTIAL.value


def session_of(record: MemoryRecord) -> str | None:
    """The session a record was stored in, if any."""
    return session_in(record.metadata)


def session_in(metadata: Any) -> str | None:
    """The session named by a record's metadata (`_context.session_id`), if any."""
    context = metadata.get("_context") if isinstance(metadata, dict) else None
    session = context.get("session_id") if isinstance(context, dict) else None
    return session if isinstance(session, str) and session else None


def tail_key(session: str) -> str:
    """The state key of a session's newest turn: a digest, so its length is bounded."""
    return TAIL_PREFIX + hashlib.sha256(session.encode()).hexdigest()[:32]


def both_ways(a: uuid.UUID, b: uuid.UUID, now_ts: float) -> list[Edge]:
    return [Edge(a, b, SEQUENTIAL, SEQUENTIAL_WEIGHT, now_ts), Edge(b, a, SEQUENTIAL, SEQUENTIAL_WEIGHT, now_ts)]


def link_turns(writes: Sequence[Sequence[MemoryRecord]], state: StateRows, exists: Callable[[uuid.UUID], bool],
               now_ts: float, taken: set[tuple[uuid.UUID, uuid.UUID, str]]) -> tuple[list[Edge], list[int]]:
    """Sequential edges (both ways) between the turns of each session in `writes` and the turn
    before each, and the session tails moved on to the newest durable turns. Returns the edges
    not already in `taken` (edges the writes name themselves) and how many belong to each write
    (an edge belongs to the write of its later turn)."""
    owner: dict[uuid.UUID, int] = {}
    sessions: dict[str, list[MemoryRecord]] = {}
    for i, records in enumerate(writes):
        for record in records:
            session = session_of(record)
            if session is not None:
                owner[record.id] = i
                sessions.setdefault(session, []).append(record)
    edges: list[Edge] = []
    counts = [0] * len(writes)

    def link(before: uuid.UUID, turn: uuid.UUID) -> None:
        for edge in both_ways(before, turn, now_ts):
            key = (edge.source, edge.target, edge.type)
            if key not in taken:
                taken.add(key)
                edges.append(edge)
                counts[owner[turn]] += 1

    for session, turns in sessions.items():
        turns.sort(key=lambda r: r.created_at)  # stable: ties keep the order given
        for a, b in zip(turns, turns[1:], strict=False):
            link(a.id, b.id)
        durable = [r for r in turns if r.store is not StoreType.WORKING]
        if not durable:
            continue
        key = tail_key(session)
        first, last = to_ts(durable[0].created_at), to_ts(durable[-1].created_at)
        tail = parse_tail(state.get(key))
        if tail is not None and tail[0] <= first and exists(tail[1]):
            link(tail[1], durable[0].id)
        if tail is None or last >= tail[0]:
            state.set(key, f"{last!r} {durable[-1].id}")
    return edges, counts


def parse_tail(value: str | None) -> tuple[float, uuid.UUID] | None:
    """A stored tail, `<created_at epoch seconds> <record id>`; None when absent or unreadable."""
    if not value:
        return None
    try:
        at, record_id = value.split(" ", 1)
        return float(at), uuid.UUID(record_id)
    except ValueError:
        return None
