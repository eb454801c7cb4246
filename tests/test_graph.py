"""The association graph's columns agree with a plain dictionary of edges under random writes."""

from __future__ import annotations

import random
import uuid

import pytest

from cerememory.index import graph as graph_module
from cerememory.index.graph import AssociationGraph, Edge
from cerememory.storage.base import EdgeColumns

NODES = [uuid.UUID(int=i + 1) for i in range(30)]
TYPES = ["semantic", "temporal", "causal"]


def _random_edge(rng: random.Random, written: int) -> Edge:
    last = None if rng.random() < 0.3 else float(written)
    return Edge(rng.choice(NODES), rng.choice(NODES), rng.choice(TYPES), round(rng.random(), 3), float(written), last)


def _as_tuple(e: Edge) -> tuple:
    return (e.source, e.target, e.type, e.weight, e.created_at, e.last_co_activation)


@pytest.mark.parametrize("seed", range(8))
def test_columns_and_recent_writes_agree_with_a_dictionary(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_module, "_MIN_MERGE", 5)  # merge often, so every path is taken
    rng = random.Random(seed)
    stored = [_random_edge(rng, i) for i in range(60)]
    expected: dict[tuple, Edge] = {}
    for e in stored:  # the table holds one edge per (source, target, type)
        expected[(e.source, e.target, e.type)] = e
    graph = AssociationGraph()
    present = set(NODES[:25])  # edges to the rest are dropped on load, as edges to missing records are
    rows = [_as_tuple(e) for e in expected.values()]
    graph.load(EdgeColumns.of_rows(rows), present.__contains__)
    expected = {k: e for k, e in expected.items() if e.source in present and e.target in present}
    for step in range(300):
        action = rng.random()
        if action < 0.6:
            batch = [_random_edge(rng, 1000 + step) for _ in range(rng.randint(1, 4))]
            graph.add(batch)
            for e in batch:
                expected[(e.source, e.target, e.type)] = e
        elif action < 0.8:
            gone = rng.sample(NODES, 2)
            graph.remove_nodes(gone)
            expected = {k: e for k, e in expected.items() if e.source not in gone and e.target not in gone}
        else:
            cleared = rng.sample(NODES, 2)
            graph.remove_out_edges(cleared)
            expected = {k: e for k, e in expected.items() if e.source not in cleared}
        assert len(graph) == len(expected)
        node = rng.choice(NODES)
        assert sorted(map(_as_tuple, graph.out_edges(node))) == sorted(
            _as_tuple(e) for e in expected.values() if e.source == node)
        assert sorted(map(_as_tuple, graph.in_edges(node))) == sorted(
            _as_tuple(e) for e in expected.values() if e.target == node)
        assert graph.neighbours(node) == ({e.target for e in expected.values() if e.source == node}
                                          | {e.source for e in expected.values() if e.target == node})
        kinds = {"semantic"}
        assert sorted(map(_as_tuple, graph.out_edges(node, kinds))) == sorted(
            _as_tuple(e) for e in expected.values() if e.source == node and e.type in kinds)
        for wanted in (kinds, {"temporal", "causal"}, {"unknown"}):
            assert graph.targets(node, wanted) == [e.target for e in graph.out_edges(node, wanted)]
    degree = {n: 0 for n in NODES}
    for e in expected.values():
        degree[e.source] += 1
        degree[e.target] += 1
    ranking = graph.degree_ranking()
    assert [degree[n] for n in ranking] == sorted((degree[n] for n in ranking), reverse=True)
    assert {n for n in NODES if degree[n]} <= set(ranking)


def test_an_edge_written_again_replaces_the_one_before() -> None:
    a, b = NODES[0], NODES[1]
    graph = AssociationGraph()
    graph.load(EdgeColumns.of_rows([(a, b, "semantic", 0.5, 1.0, None)]), lambda _: True)
    assert graph.out_edges(a) == [Edge(a, b, "semantic", 0.5, 1.0, 1.0)]
    graph.add([Edge(a, b, "semantic", 0.9, 2.0, 3.0)])
    assert graph.out_edges(a) == [Edge(a, b, "semantic", 0.9, 2.0, 3.0)]
    assert len(graph) == 1


def test_loading_into_a_graph_that_has_edges_is_refused() -> None:
    graph = AssociationGraph()
    graph.add([Edge(NODES[0], NODES[1], "semantic", 0.5, 1.0)])
    with pytest.raises(RuntimeError):
        graph.load(EdgeColumns.of_rows([(NODES[2], NODES[3], "semantic", 0.5, 1.0, None)]), lambda _: True)
