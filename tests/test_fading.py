"""introspect.fading: what the next days will see forgotten, from the closed-form crossing time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.dynamics.decay import DAY


def test_fading_counts_each_horizon_and_lists_the_soonest_first(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        episodic = [mem.store(f"an event to fade {i}", store="episodic").record_id for i in range(3)]
        mem.store("a fact that lasts", store="semantic")
        crossing = mem.forecast([episodic[0]], datetime.fromtimestamp(clock.now, UTC)).forecasts[0]
        assert crossing.estimated_threshold_date is not None
        days_left = (crossing.estimated_threshold_date.timestamp() - clock.now) / DAY
        answer = mem.dispatch("introspect.fading", {"horizons_days": [int(days_left) + 1, 3650], "limit": 2})
        first, last = answer["horizons"]
        assert first["total"] == 3 and first["by_store"]["episodic"] == 3 and first["by_store"]["semantic"] == 0
        assert last["total"] == 4
        assert len(answer["soonest"]) == 2 and {s["record_id"] for s in answer["soonest"]} <= set(map(str, episodic))
        assert answer["soonest"][0]["forgotten_at"] <= answer["soonest"][1]["forgotten_at"]
        histograms = {h["store"]: h["counts"] for h in answer["fidelity_histograms"]}
        assert histograms["episodic"] == [0] * 9 + [3] and histograms["semantic"] == [0] * 9 + [1]
        # once past the crossing they are forgotten already, no longer "fading"
        clock.advance(days_left * DAY + DAY)
        answer = mem.dispatch("introspect.fading", {})
        assert [h["days"] for h in answer["horizons"]] == [7, 30]
        assert all(s["store"] != "episodic" for s in answer["soonest"])


def test_fading_refuses_a_bad_horizon(mem):
    with pytest.raises(CMPError) as err:
        mem.dispatch("introspect.fading", {"horizons_days": [0]})
    assert err.value.code is ErrorCode.VALIDATION_ERROR


def test_the_head_columns_follow_every_change_of_the_heads(data_dir, clock):
    """stats, fading and the most recent memories read the heads as cached columns: after each
    kind of change they must equal columns built afresh."""
    from cerememory.stores.columns import HeadColumns

    def same_as_fresh(records) -> None:
        cached, fresh = records.columns(), HeadColumns.of(records.items())
        assert cached.ids == fresh.ids
        for name in ("codes", "created_at", "last_accessed_at", "stability", "emotion_intensity", "fidelity_base"):
            assert (getattr(cached, name) == getattr(fresh, name)).all(), name

    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        records = mem.engine.core.records
        ids = []
        for i in range(4):
            ids.append(mem.store(f"note {i} about the release", emotion="joy" if i else None).record_id)
            clock.advance(60)
        same_as_fresh(records)
        before = records.columns()
        clock.advance(3 * DAY)
        mem.recall("note 2 release", limit=1)  # reinforces in place: patched, not rebuilt
        mem.reinforce([ids[0]])
        after = records.columns()
        assert after is not before and after.ids is before.ids
        same_as_fresh(records)
        assert records.columns() is after  # nothing changed since
        mem.update(ids[1], store="semantic")
        same_as_fresh(records)
        mem.forget([ids[3]], confirm=True)
        same_as_fresh(records)
        assert [h.record.id for h in mem.recall(limit=2, stores=["episodic"]).memories] == [ids[2], ids[0]]
        stats = mem.stats()
        assert stats.records_by_store["episodic"] == 2 and stats.records_by_store["semantic"] == 1
