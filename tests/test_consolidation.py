"""lifecycle.consolidate: duplicate merge, promotion with backlinks, strategies, idempotence."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.dynamics import consolidation as planner
from cerememory.dynamics.decay import DAY, HOUR

MOVE = "Alice moved to Berlin in March 2021. She opened a bakery there."


@pytest.fixture
def living(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        yield mem


def _unit(*values: float) -> list[float]:
    v = np.asarray(values, dtype=np.float64)
    return (v / np.linalg.norm(v)).tolist()


# ---------------------------------------------------------------- the planner alone


def test_summaries_keep_the_first_sentence_within_the_cap():
    assert planner.summarise(MOVE, None) == "Alice moved to Berlin in March 2021."
    assert planner.summarise(MOVE, "  given summary ") == "given summary"
    long = "word " * 100
    cut = planner.summarise(long, None, limit=50)
    assert len(cut) <= 51 and cut.endswith("…") and "  " not in cut
    assert planner.summarise("", None) == ""


def test_duplicate_pairs_respect_the_threshold():
    matrix = np.asarray([_unit(1, 0, 0), _unit(1, 0.2, 0), _unit(1, 0.6, 0)], dtype=np.float32)
    pairs = {(a, b) for a, b, _ in planner.duplicate_pairs(matrix, [0, 1, 2])}
    # cos(0,1) = 0.98 > 0.92; cos(0,2) = 0.86 and cos(1,2) = 0.94
    assert (0, 1) in pairs and (1, 0) in pairs and (1, 2) in pairs
    assert (0, 2) not in pairs


def test_each_cluster_keeps_its_best_ranked_record():
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    rank = {a: 3, b: 2, c: 1}
    merges = planner.choose_keepers([(a, b, 0.95), (b, c, 0.95)], rank.__getitem__)
    assert {(g.drop, g.keep) for g in merges} == {(b, a)}  # c's only twin was absorbed first
    merges = planner.choose_keepers([(a, b, 0.95), (a, c, 0.99)], rank.__getitem__)
    assert {(g.drop, g.keep) for g in merges} == {(b, a), (c, a)}


# ---------------------------------------------------------------- through the API


def test_identical_text_merges_into_the_higher_fidelity_record_with_its_associations(living, clock):
    old = living.store(MOVE).record_id
    clock.advance(3 * DAY)
    twin = living.store("alice moved to berlin in march 2021.   She opened a bakery there.").record_id
    other = living.store("Bob plays chess on Sundays.").record_id
    friend = living.store("Carol visited the bakery.", associations=[
        {"target_id": str(old), "association_type": "causal", "weight": 0.8}]).record_id
    living.dispatch("encode.update", {"record_id": str(old), "metadata": {"k": 1}})
    out = living.consolidate("full", dry_run=True)
    assert out.dry_run and out.records_compressed == 1
    assert (out.merges[0].dropped_id, out.merges[0].kept_id) == (old, twin)
    assert living.stats().total_records == 4  # a dry run writes nothing

    done = living.consolidate("full")
    assert done.records_compressed == 1
    with pytest.raises(CMPError) as gone:
        living.inspect(old)
    assert gone.value.code is ErrorCode.RECORD_NOT_FOUND
    inherited = {a.target_id: a for a in living.inspect(friend).associations}
    assert inherited[twin].association_type.value == "causal" and inherited[twin].weight == 0.8
    assert living.inspect(other).id == other


def test_near_duplicates_by_cosine_merge_and_distinct_ones_stay(living):
    kept = living.store("the sky over the harbour was grey", embedding=_unit(1, 0.1, 0)).record_id
    near = living.store("a grey sky above the harbour", embedding=_unit(1, 0.15, 0)).record_id
    apart = living.store("the harbour café serves fish", embedding=_unit(1, 0.8, 0)).record_id
    living.recall("sky harbour grey", limit=1)  # recall strengthens the best match
    out = living.consolidate("full")
    assert out.records_compressed == 1
    assert {out.merges[0].dropped_id, out.merges[0].kept_id} == {kept, near}
    assert 0.92 < out.merges[0].similarity <= 1.0
    assert living.inspect(apart).id == apart


def test_promotion_creates_a_semantic_fact_with_backlinks_both_ways(living):
    source = living.store(MOVE).record_id
    out = living.consolidate()
    assert out.records_migrated == out.semantic_nodes_created == 1
    promotion = out.promotions[0]
    assert promotion.episodic_id == source and promotion.summary == "Alice moved to Berlin in March 2021."
    fact = living.inspect(promotion.semantic_id)
    assert fact.store.value == "semantic"
    assert fact.content.summary == promotion.summary
    assert fact.meta.capture_status.value == "inferred"
    assert fact.meta.evidence[0].record_id == source and fact.meta.source_record_ids == [source]
    assert fact.metadata["consolidated_from"] == str(source)
    assert {a.target_id for a in fact.associations} == {source}
    assert promotion.semantic_id in {a.target_id for a in living.inspect(source).associations}
    hits = living.recall("Berlin bakery", stores=["semantic"]).memories
    assert [h.record.id for h in hits] == [promotion.semantic_id]


def test_a_second_run_changes_nothing_and_the_ledger_survives_reopen(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        mem.store(MOVE)
        mem.store(MOVE)
        mem.store("Bob plays chess on Sundays.")
        first = mem.consolidate("full")
        assert (first.records_compressed, first.semantic_nodes_created) == (1, 2)
        before = mem.stats().total_records
        again = mem.consolidate("full")
        assert (again.records_compressed, again.semantic_nodes_created, again.promotions) == (0, 0, [])
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        for strategy in ("full", "incremental", "selective"):
            out = mem.consolidate(strategy)
            assert out.semantic_nodes_created == 0 and out.records_compressed == 0, strategy
        assert mem.stats().total_records == before


def test_incremental_scope_is_what_changed_since_the_last_run(living, clock):
    living.store("first memory about the garden")
    assert living.consolidate().records_processed == 1
    clock.advance(HOUR)
    living.store("second memory about the kitchen")
    out = living.consolidate()
    assert out.records_processed == 1 and out.semantic_nodes_created == 1
    assert living.consolidate("full").records_processed == 2


def test_promotion_never_makes_a_content_free_fact_or_a_duplicate_one(living):
    living.store("The deploy key rotates every Monday", store="semantic")
    living.store("a")
    living.store("ok thanks!")
    living.store("the deploy key rotates every monday.")  # the fact exists already
    first = living.store("Bob moved the standup to 9:30. Everyone agreed.").record_id
    living.store("Bob moved the standup to 9:30")  # another memory with the same fact
    out = living.consolidate()
    assert [p.episodic_id for p in out.promotions] == [first]
    assert [p.summary for p in out.promotions] == ["Bob moved the standup to 9:30."]
    facts = living.recall("deploy key rotates", stores=["semantic"]).memories
    assert len(facts) == 1


def test_selective_promotes_only_salient_memories(living):
    plain = living.store("an ordinary lunch").record_id
    intense = living.store("the fire alarm went off", emotion="fear").record_id
    recalled = living.store("the recipe for dumplings").record_id
    living.recall("dumplings recipe", limit=1)
    out = living.consolidate("selective")
    assert {p.episodic_id for p in out.promotions} == {intense, recalled}
    assert plain not in {p.episodic_id for p in out.promotions}


def test_age_and_access_thresholds_and_forgotten_records(living, clock):
    young = living.store("stored just now").record_id
    out = living.consolidate(min_age_hours=1, dry_run=True)
    assert out.records_processed == 1 and out.promotions == []
    clock.advance(2 * HOUR)
    assert [p.episodic_id for p in living.consolidate(min_age_hours=1, dry_run=True).promotions] == [young]
    assert living.consolidate(min_access_count=1, dry_run=True).promotions == []
    clock.advance(400 * DAY)  # far below the prune threshold: forgotten memories are not promoted
    assert living.consolidate("full", dry_run=True).promotions == []


def test_validation_and_cli(cli):
    bad = cli("consolidate", "--strategy", "sometimes", "--json")
    assert bad.code != 0 and "sometimes" in bad.stdout
    cli("store", MOVE, "--json")
    cli("store", MOVE, "--json")
    planned = cli("consolidate", "--dry-run", "--json").json()
    assert planned["dry_run"] is True and planned["records_compressed"] == 1
    done = cli("consolidate", "--strategy", "full", "--json").json()
    assert done["records_compressed"] == 1 and done["semantic_nodes_created"] == 1
    table = cli("consolidate", "--strategy", "full", "--dry-run").stdout
    assert "full consolidation would: 1 episodic record in scope" in " ".join(table.split())


texts = st.lists(st.sampled_from(["apples are red", "Apples are  red", "the sea is wide", "rain again",
                                  "rain  AGAIN", "a quiet evening"]), min_size=1, max_size=8)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts, st.sampled_from(["full", "incremental", "selective"]))
def test_consolidating_twice_changes_nothing_the_second_time(tmp_path_factory, items, strategy):
    with cerememory.open(tmp_path_factory.mktemp("c"), semantic="off") as mem:
        for text in items:
            mem.store(text, emotion="joy" if "sea" in text else None)
        mem.consolidate(strategy)
        before = {r.record.id for r in mem.recall(limit=100, include_decayed=True, reconsolidate=False).memories}
        again = mem.consolidate(strategy)
        assert again.records_compressed == 0 and again.semantic_nodes_created == 0
        after = {r.record.id for r in mem.recall(limit=100, include_decayed=True, reconsolidate=False).memories}
        assert before == after


def test_a_concurrent_run_is_refused(living):
    engine = living.engine
    first = threading.Thread(target=living.consolidate)
    with engine.writer.lock:  # the first run starts, then waits here for the write lock
        first.start()
        while not engine.consolidation.running:
            assert first.is_alive()
            time.sleep(0.01)
        with pytest.raises(CMPError) as busy:
            living.consolidate()
    first.join()
    assert busy.value.code is ErrorCode.CONSOLIDATION_IN_PROGRESS and busy.value.retry_after
