"""Spreading activation over random graphs: bounded, depth-respecting, best path wins."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from cerememory.index.graph import AssociationGraph, Edge

NODES = [uuid.UUID(int=n + 1) for n in range(12)]
edges = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), st.floats(0.0, 1.0),
                           st.sampled_from(["semantic", "causal", "sequential"])), max_size=60)


def _graph(spec) -> AssociationGraph:
    graph = AssociationGraph()
    graph.add(Edge(NODES[a], NODES[b], kind, w, 0.0) for a, b, w, kind in spec if a != b)
    return graph


@settings(max_examples=300)
@given(edges, st.integers(1, 8), st.floats(0.1, 1.0), st.floats(0.0, 0.5), st.floats(0.0, 0.9))
def test_activation_is_bounded_respects_depth_and_follows_real_edges(spec, depth, decay, threshold, min_weight):
    graph = _graph(spec)
    reached = graph.spread(NODES[0], depth=depth, decay=decay, threshold=threshold, min_weight=min_weight)
    weights = {}
    for a, b, w, kind in spec:
        if a != b:
            weights[(NODES[a], NODES[b], kind)] = w
    for node, act in reached.items():
        assert 0.0 < act.level <= 1.0
        assert act.level >= threshold
        assert act.path[0] == NODES[0] and act.path[-1] == node
        assert len(act.path) - 1 <= depth  # hops
        assert len(set(act.path)) == len(act.path)  # no cycles within a path
        level = 1.0
        for hop_from, hop_to in zip(act.path, act.path[1:], strict=False):
            best = max(w for (s, t, _), w in weights.items() if s == hop_from and t == hop_to and w >= min_weight)
            level *= best * decay
        assert act.level <= level + 1e-9


@settings(max_examples=200)
@given(edges, st.integers(1, 7))
def test_deeper_spreading_never_loses_a_node_or_lowers_its_activation(spec, depth):
    graph = _graph(spec)
    shallow = graph.spread(NODES[0], depth=depth)
    deep = graph.spread(NODES[0], depth=depth + 1)
    for node, act in shallow.items():
        assert node in deep and deep[node].level >= act.level - 1e-12


def test_type_filter_only_follows_the_named_types():
    graph = _graph([(0, 1, 1.0, "causal"), (1, 2, 1.0, "semantic"), (0, 3, 1.0, "semantic")])
    reached = graph.spread(NODES[0], depth=4, types=["semantic"])
    assert set(reached) == {NODES[3]}
