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
