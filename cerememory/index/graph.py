"""The association graph in RAM, mirrored from the `associations` table.

Edges live in numpy columns sorted by source (a compressed sparse row layout, with a second
ordering by target for the edges into a node) plus a small dictionary of the edges written
since: about 40 bytes an edge instead of the kilobyte or more a dictionary-of-dictionaries
graph spends, and a memory of a million edges opens in a fraction of a second. When the
dictionary has grown to a quarter of the columns, both are merged into new columns.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter

import numpy as np

from ..storage.base import EdgeColumns

_MIN_MERGE = 4096  # edges written since the last merge before a merge is worth its cost


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


_Key = tuple[int, int]  # (other node, edge type code)
_Attrs = tuple[float, float, float]  # weight, created_at, last_co_activation


def _starts(nodes: np.ndarray, n_nodes: int) -> np.ndarray:
    """Where each node's run begins among `nodes` sorted (and where the last ends): counted, not
    searched for."""
    starts = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(nodes, minlength=n_nodes)[:n_nodes], out=starts[1:])
    return starts


class _Columns:
    """Edges as columns sorted by source, with offsets per source and per target."""

    def __init__(self, n_nodes: int, src: np.ndarray, dst: np.ndarray, kind: np.ndarray, attrs: np.ndarray) -> None:
        order = np.argsort(src, kind="stable")  # each source keeps its edges in the order written
        self.src, self.dst, self.kind, self.attrs = src[order], dst[order], kind[order], attrs[order]
        self.alive = np.ones(len(self.src), dtype=bool)
        self.out_start = _starts(self.src, n_nodes)
        self.by_target = np.argsort(self.dst, kind="stable").astype(np.int64)
        self.in_start = _starts(self.dst, n_nodes)

    @classmethod
    def empty(cls) -> _Columns:
        none = np.zeros(0, dtype=np.int32)
        return cls(0, none, none, np.zeros(0, dtype=np.int16), np.zeros((0, 3)))

    def out_slots(self, node: int) -> np.ndarray:
        if node + 1 >= len(self.out_start):
            return np.zeros(0, dtype=np.int64)
        slots = np.arange(self.out_start[node], self.out_start[node + 1])
        return slots[self.alive[slots]]

    def in_slots(self, node: int) -> np.ndarray:
        if node + 1 >= len(self.in_start):
            return np.zeros(0, dtype=np.int64)
        slots = self.by_target[self.in_start[node]:self.in_start[node + 1]]
        return slots[self.alive[slots]]


class AssociationGraph:
    """Directed, typed, weighted edges; one edge per (source, target, type)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index: dict[int, int] = {}  # a node's number by `uuid.int` (an int hashes in C, a UUID in Python)
        self._nodes: list[uuid.UUID] = []
        self._gone: set[int] = set()  # nodes removed (their index is kept for a later return)
        self._types: list[str] = []
        self._type_codes: dict[str, int] = {}
        self._columns = _Columns.empty()
        self._out: dict[int, dict[_Key, _Attrs]] = {}  # written since the columns were built
        self._in: dict[int, set[_Key]] = {}
        self._written = 0  # edges in `_out`

    # ------------------------------------------------------------ ids

    def _node(self, node: uuid.UUID) -> int:
        index = self._index.get(node.int)
        if index is None:
            index = self._index[node.int] = len(self._nodes)
            self._nodes.append(node)
        else:
            self._gone.discard(index)
        return index

    def _type(self, name: str) -> int:
        code = self._type_codes.get(name)
        if code is None:
            code = self._type_codes[name] = len(self._types)
            self._types.append(name)
        return code

    def __len__(self) -> int:
        with self._lock:
            return int(self._columns.alive.sum()) + self._written

    # ------------------------------------------------------------ writes

    def add(self, edges: Iterable[Edge]) -> None:
        """Add edges, replacing any of the same (source, target, type)."""
        with self._lock:
            for e in edges:
                source, target, code = self._node(e.source), self._node(e.target), self._type(e.type)
                self._drop_column_edge(source, target, code)
                written = self._out.setdefault(source, {})
                if (target, code) not in written:
                    self._written += 1
                last = e.last_co_activation if e.last_co_activation is not None else e.created_at
                written[(target, code)] = (e.weight, e.created_at, last)
                self._in.setdefault(target, set()).add((source, code))
            if self._written >= max(_MIN_MERGE, len(self._columns.src) // 4):
                self._merge()

    def load(self, edges: EdgeColumns, keep: Callable[[uuid.UUID], bool] | None) -> None:
        """Add stored edges in bulk, those whose two ends `keep` accepts (every one when None:
        the caller knows each node is a record it holds), one per (source, target, type), as
        the table holds them."""
        with self._lock:
            if not len(edges.source):
                return
            kept = np.zeros(len(edges.nodes), dtype=bool)  # the ends of an edge that `keep` accepts
            kept[edges.source] = kept[edges.target] = True
            if keep is not None:
                kept[kept] = np.fromiter(map(keep, compress(edges.nodes, kept.tolist())), dtype=bool,
                                         count=int(kept.sum()))
            if not kept.any():
                return
            if len(self._columns.src) or self._written or self._nodes:
                raise RuntimeError("load() fills an empty graph; add() merges into one")
            codes = {name: self._type(name) for name in set(edges.type)}
            kinds = np.fromiter(map(codes.__getitem__, edges.type), dtype=np.int16, count=len(edges.type))
            last = np.where(np.isnan(edges.last_co_activation), edges.created_at, edges.last_co_activation)
            attrs = np.stack([edges.weight, edges.created_at, last], axis=1)
            if kept.all():  # every node an end of a kept edge (the usual case): numbered as given
                self._nodes = list(edges.nodes)
                src, dst = edges.source.astype(np.int32), edges.target.astype(np.int32)
            else:
                self._nodes = [node for node, k in zip(edges.nodes, kept.tolist(), strict=True) if k]
                number = np.full(len(edges.nodes), -1, dtype=np.int32)
                number[kept] = np.arange(len(self._nodes), dtype=np.int32)
                chosen = kept[edges.source] & kept[edges.target]
                src, dst, kinds, attrs = (number[edges.source][chosen], number[edges.target][chosen], kinds[chosen],
                                          attrs[chosen])
            self._index = dict(zip(map(attrgetter("int"), self._nodes), range(len(self._nodes)), strict=True))
            self._columns = _Columns(len(self._nodes), src, dst, kinds, attrs)

    def _drop_column_edge(self, source: int, target: int, code: int) -> None:
        columns = self._columns
        slots = columns.out_slots(source)
        columns.alive[slots[(columns.dst[slots] == target) & (columns.kind[slots] == code)]] = False

    def _merge(self) -> None:
        """New columns from the live ones and the edges written since (which never repeat a
        live column edge: `add` retires the one it replaces)."""
        columns = self._columns
        keep = columns.alive
        written = [(s, t, c, a) for s, out in self._out.items() for (t, c), a in out.items()]
        self._columns = _Columns(
            len(self._nodes),
            np.concatenate([columns.src[keep], np.array([w[0] for w in written], dtype=np.int32)]),
            np.concatenate([columns.dst[keep], np.array([w[1] for w in written], dtype=np.int32)]),
            np.concatenate([columns.kind[keep], np.array([w[2] for w in written], dtype=np.int16)]),
            np.concatenate([columns.attrs[keep], np.array([w[3] for w in written], dtype=np.float64).reshape(-1, 3)]))
        self._out, self._in, self._written = {}, {}, 0

    def remove_nodes(self, ids: Iterable[uuid.UUID]) -> None:
        with self._lock:
            for node in ids:
                index = self._index.get(node.int)
                if index is None or index in self._gone:
                    continue
                self._remove_out(index)
                columns = self._columns
                columns.alive[columns.in_slots(index)] = False
                for source, code in self._in.pop(index, set()):
                    if self._out.get(source, {}).pop((index, code), None) is not None:
                        self._written -= 1
                self._gone.add(index)

    def remove_out_edges(self, ids: Iterable[uuid.UUID]) -> None:
        """Drop what these records point at, keeping what points at them (an overwrite)."""
        with self._lock:
            for node in ids:
                index = self._index.get(node.int)
                if index is not None:
                    self._remove_out(index)

    def _remove_out(self, index: int) -> None:
        columns = self._columns
        columns.alive[columns.out_slots(index)] = False
        for target, code in self._out.pop(index, {}):
            self._written -= 1
            self._in.get(target, set()).discard((index, code))

    # ------------------------------------------------------------ reads

    def _edge(self, source: int, target: int, code: int, attrs: _Attrs | np.ndarray) -> Edge:
        return Edge(self._nodes[source], self._nodes[target], self._types[code],
                    float(attrs[0]), float(attrs[1]), float(attrs[2]))

    def out_edges(self, node: uuid.UUID, types: Collection[str] | None = None) -> list[Edge]:
        with self._lock:
            index = self._index.get(node.int)
            if index is None or index in self._gone:
                return []
            columns = self._columns
            edges = [self._edge(index, int(columns.dst[s]), int(columns.kind[s]), columns.attrs[s])
                     for s in columns.out_slots(index)]
            edges += [self._edge(index, target, code, attrs)
                      for (target, code), attrs in self._out.get(index, {}).items()]
        return edges if types is None else [e for e in edges if e.type in types]

    def targets(self, node: uuid.UUID, types: Collection[str]) -> list[uuid.UUID]:
        """The targets of `out_edges(node, types)`, in its order, without making an `Edge` of
        each: recall asks this of every hit."""
        with self._lock:
            index = self._index.get(node.int)
            if index is None or index in self._gone:
                return []
            codes = {self._type_codes[t] for t in types if t in self._type_codes}
            columns, nodes, written = self._columns, self._nodes, self._out.get(index)
            found = []
            if index + 1 < len(columns.out_start) and columns.out_start[index] < columns.out_start[index + 1]:
                slots = columns.out_slots(index)
                found = [nodes[target] for target, code in zip(columns.dst[slots].tolist(),
                                                               columns.kind[slots].tolist(), strict=True)
                         if code in codes]
            if written:
                found += [nodes[target] for target, code in written if code in codes]
        return found

    def in_edges(self, node: uuid.UUID) -> list[Edge]:
        with self._lock:
            index = self._index.get(node.int)
            if index is None or index in self._gone:
                return []
            columns = self._columns
            edges = [self._edge(int(columns.src[s]), index, int(columns.kind[s]), columns.attrs[s])
                     for s in columns.in_slots(index)]
            edges += [self._edge(source, index, code, self._out[source][(index, code)])
                      for source, code in self._in.get(index, ())]
            return edges

    def neighbours(self, node: uuid.UUID) -> set[uuid.UUID]:
        """Both directions: what a record points at and what points at it."""
        return {e.target for e in self.out_edges(node)} | {e.source for e in self.in_edges(node)}

    def degree_ranking(self) -> list[uuid.UUID]:
        """Every node, most edges (in and out) first; ties in the order the nodes first appeared."""
        with self._lock:
            n = len(self._nodes)
            columns = self._columns
            alive = columns.alive
            degree = (np.bincount(columns.src[alive], minlength=n)
                      + np.bincount(columns.dst[alive], minlength=n)).astype(np.int64)
            for source, out in self._out.items():
                degree[source] += len(out)
            for target, into in self._in.items():
                degree[target] += len(into)
            order = np.argsort(-degree, kind="stable")
            return [self._nodes[i] for i in order if int(i) not in self._gone]

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
