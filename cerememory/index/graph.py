"""The association graph in RAM (networkx), mirrored from the `associations` table."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class Edge:
    source: uuid.UUID
    target: uuid.UUID
    type: str
    weight: float
    created_at: float
    last_co_activation: float | None = None

    def __post_init__(self) -> None:
        # until both ends are recalled together, a link reads as co-activated when it was made
        # (what the wire model says, so a stored edge and its archived copy agree)
        if self.last_co_activation is None:
            object.__setattr__(self, "last_co_activation", self.created_at)


@dataclass(frozen=True)
class Activation:
    record_id: uuid.UUID
    level: float
    path: tuple[uuid.UUID, ...]
    edge_type: str = ""  # the type of the last edge on the path ("" at the source)


class AssociationGraph:
    """Directed, typed, weighted edges; one edge per (source, target, type)."""

    def __init__(self) -> None:
        # networkx loads with the first edge: a short command over a memory without associations
        # does not pay for importing it
        self._g: nx.MultiDiGraph | None = None
        self._lock = threading.Lock()
        self._edges: int | None = None  # counting walks every node: kept until the graph changes

    @property
    def g(self) -> nx.MultiDiGraph:
        if self._g is None:
            import networkx

            self._g = networkx.MultiDiGraph()
        return self._g

    def __len__(self) -> int:
        count = self._edges
        if count is None:
            with self._lock:
                count = self._edges = self._g.number_of_edges() if self._g is not None else 0
        return count

    def add(self, edges: Iterable[Edge]) -> None:
        with self._lock:
            self._edges = None
            for e in edges:
                self.g.add_edge(e.source, e.target, key=e.type, weight=e.weight,
                                created_at=e.created_at, last_co_activation=e.last_co_activation)

    def remove_nodes(self, ids: Iterable[uuid.UUID]) -> None:
        with self._lock:
            self._edges = None
            if self._g is not None:
                self._g.remove_nodes_from(list(ids))

    def remove_out_edges(self, ids: Iterable[uuid.UUID]) -> None:
        """Drop what these records point at, keeping what points at them (an overwrite)."""
        with self._lock:
            self._edges = None
            for node in ids:
                if self._g is not None and node in self._g:
                    self._g.remove_edges_from(list(self._g.out_edges(node, keys=True)))

    def out_edges(self, node: uuid.UUID, types: Collection[str] | None = None) -> list[Edge]:
        with self._lock:
            if self._g is None or node not in self._g:
                return []
            return [
                Edge(node, target, key, d["weight"], d["created_at"], d["last_co_activation"])
                for _, target, key, d in self.g.out_edges(node, keys=True, data=True)
                if types is None or key in types
            ]

    def in_edges(self, node: uuid.UUID) -> list[Edge]:
        with self._lock:
            if self._g is None or node not in self._g:
                return []
            return [
                Edge(source, node, key, d["weight"], d["created_at"], d["last_co_activation"])
                for source, _, key, d in self.g.in_edges(node, keys=True, data=True)
            ]

    def neighbours(self, node: uuid.UUID) -> set[uuid.UUID]:
        """Both directions: what a record points at and what points at it."""
        with self._lock:
            if self._g is None or node not in self._g:
                return set()
            return set(self.g.successors(node)) | set(self.g.predecessors(node))

    def degree_ranking(self) -> list[uuid.UUID]:
        with self._lock:
            if self._g is None:
                return []
            return [n for n, _ in sorted(self._g.degree, key=lambda nd: -nd[1])]

    def spread(
        self,
        source: uuid.UUID,
        *,
        depth: int,
        min_weight: float = 0.0,
        types: Collection[str] | None = None,
        decay: float = 0.5,
        threshold: float = 0.05,
        start: float = 1.0,
    ) -> dict[uuid.UUID, Activation]:
        """Weighted BFS: child = parent x weight x decay; the best path to each node wins."""
        best: dict[uuid.UUID, Activation] = {}
        frontier = [Activation(source, start, (source,))]
        for _ in range(depth):
            nxt: list[Activation] = []
            for act in frontier:
                for edge in self.out_edges(act.record_id, types):
                    if edge.weight < min_weight or edge.target in act.path:
                        continue
                    level = act.level * edge.weight * decay
                    if level < threshold or level <= 0.0:
                        continue
                    known = best.get(edge.target)
                    if known is None or level > known.level:
                        reached = Activation(edge.target, level, act.path + (edge.target,), edge.type)
                        best[edge.target] = reached
                        nxt.append(reached)
            frontier = nxt
            if not frontier:
                break
        return best
