"""The forgetting curve: formulas, properties, and living records under an injected clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cerememory
from cerememory import CMPError, ErrorCode, StoreType
from cerememory.dynamics import decay
from cerememory.dynamics.decay import DAY, DEFAULT_PARAMS, HOUR

EPISODIC = DEFAULT_PARAMS[StoreType.EPISODIC]


def test_formulas_against_hand_computed_values():
    # F = F0 (1 + t/S)^-d E: one stability later, 2^-0.3 = 0.812252...
    assert decay.fidelity(1.0, 1000.0, 1000.0, 0.3, 0.0) == pytest.approx(2 ** -0.3)
    assert decay.fidelity(0.5, 3000.0, 1000.0, 0.5, 0.0) == pytest.approx(0.25)
    assert decay.fidelity(0.5, 3000.0, 1000.0, 0.5, 1.0) == pytest.approx(0.375)  # E = 1.5
    assert decay.fidelity(1.0, 0.0, 1000.0, 0.3, 1.0) == 1.0                        # clamped
    # N = N0 + λ sqrt(t/S) (1 - F)
    assert decay.noise(0.0, 4000.0, 1000.0, 0.1, 0.5) == pytest.approx(0.1 * 2 * 0.5)
    assert decay.noise(0.9, 1e9, 1.0, 1.0, 0.0) == 1.0
    # crossing: F0 E (1 + t/S)^-d = p  =>  t = S ((F0 E / p)^(1/d) - 1)
    assert decay.seconds_until(0.25, 0.5, 1000.0, 0.5, 0.0) == pytest.approx(3000.0)
    assert decay.seconds_until(0.9, 0.5, 1000.0, 0.5, 0.0) == 0.0                   # already below
    assert math.isinf(decay.seconds_until(0.1, 1.0, 1000.0, 0.0, 0.0))              # never fades


def test_default_time_constants_keep_memories_for_weeks_and_months():
    neutral = decay.seconds_until(EPISODIC.prune, 1.0, EPISODIC.stability, EPISODIC.exponent, 0.0)
    intense = decay.seconds_until(EPISODIC.prune, 1.0, EPISODIC.stability, EPISODIC.exponent, 1.0)
    assert 3 * 7 * DAY < neutral < 10 * 7 * DAY      # weeks
    assert 90 * DAY < intense < 365 * DAY            # months
    semantic = DEFAULT_PARAMS[StoreType.SEMANTIC]
    assert decay.seconds_until(semantic.prune, 1.0, semantic.stability, semantic.exponent, 0.0) > 365 * DAY
    working = DEFAULT_PARAMS[StoreType.WORKING]
    assert decay.seconds_until(working.prune, 1.0, working.stability, working.exponent, 0.0) < 6 * HOUR


moments = st.floats(0, 10 * 365 * DAY, allow_nan=False)
unit = st.floats(0, 1, allow_nan=False)
stabilities = st.floats(1.0, 1e8, allow_nan=False)
exponents = st.floats(0.01, 2.0, allow_nan=False)


@settings(max_examples=200)
@given(unit, moments, stabilities, st.sampled_from(list(DEFAULT_PARAMS.values())), unit)
def test_scalar_and_vector_forms_agree(base, t, s, params, intensity):
    score, noise = decay.state_now(base, t, s, params, intensity)
    assert score == pytest.approx(float(decay.fidelity(base, t, s, params.exponent, intensity)), abs=1e-12)
    assert noise == pytest.approx(float(decay.noise(0.0, t, s, params.interference, score)), abs=1e-12)


@settings(max_examples=300)
@given(unit, moments, moments, stabilities, exponents, unit)
def test_fidelity_stays_in_range_and_never_rises_without_reinforcement(base, t1, t2, s, d, intensity):
    early, late = sorted((t1, t2))
    f_early = decay.fidelity(base, early, s, d, intensity)
    f_late = decay.fidelity(base, late, s, d, intensity)
    assert 0.0 <= f_late <= f_early <= 1.0


@settings(max_examples=300)
@given(unit, moments, stabilities, exponents, unit, unit)
def test_more_emotional_intensity_never_lowers_retention(base, t, s, d, i1, i2):
    low, high = sorted((i1, i2))
    assert decay.fidelity(base, t, s, d, high) >= decay.fidelity(base, t, s, d, low)


@settings(max_examples=300)
@given(unit, moments, moments, stabilities, st.sampled_from(list(DEFAULT_PARAMS.values())), unit)
def test_reconsolidation_never_lowers_fidelity_or_stability(base, t, later, s, params, intensity):
    before = decay.fidelity(base, t, s, params.exponent, intensity)
    new_base, new_s = decay.reinforce(base, t, s, params)
    assert new_s >= s
    assert decay.fidelity(new_base, 0.0, new_s, params.exponent, intensity) >= before - 1e-12
    # and no future instant is worse off for the recall
    unreinforced = decay.fidelity(base, t + later, s, params.exponent, intensity)
    assert decay.fidelity(new_base, later, new_s, params.exponent, intensity) >= unreinforced - 1e-9


@pytest.fixture
def living(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        yield mem


REVIEW = "the quarterly review moved to Thursday because " + " ".join(f"reason{i}" for i in range(40))


def test_memories_fade_and_are_forgotten_but_kept(living, clock):
    rid = living.store(REVIEW).record_id
    calm = living.inspect(rid).fidelity
    assert calm.score == 1.0 and calm.stability == EPISODIC.stability and calm.decay_rate == EPISODIC.exponent
    clock.advance(DAY)
    day_later = living.inspect(rid).fidelity
    assert day_later.score == pytest.approx(float(decay.fidelity(1.0, DAY, EPISODIC.stability, EPISODIC.exponent, 0)))
    assert 0 < day_later.noise_level < 0.1
    hit = living.recall("quarterly review", reconsolidate=False).memories[0]
    assert hit.record.fidelity.score < 0.9 and "..." in hit.rendered_content.plain_text()
    assert living.recall("quarterly review", reconsolidate=False, mode="perfect").memories[0] \
        .rendered_content.plain_text() == REVIEW
    clock.advance(120 * DAY)
    assert living.recall("quarterly review").memories == []                 # forgotten: hidden
    kept = living.recall("quarterly review", include_decayed=True, reconsolidate=False)
    assert [h.record.id for h in kept.memories] == [rid]                     # but kept
    assert living.inspect(rid).fidelity.score < EPISODIC.prune


def test_intense_memories_outlive_neutral_ones(living, clock):
    neutral = living.store("a neutral note about lunch").record_id
    intense = living.store("the server caught fire during lunch", emotion="fear").record_id
    clock.advance(80 * DAY)
    visible = {h.record.id for h in living.recall("lunch").memories}
    assert intense in visible and neutral not in visible


def test_recall_reinforces(living, clock):
    recalled = living.store("alpha memory to rehearse").record_id
    ignored = living.store("alpha memory to neglect").record_id
    for _ in range(5):
        clock.advance(7 * DAY)
        living.recall("rehearse", limit=1)
    a, b = living.inspect(recalled).fidelity, living.inspect(ignored).fidelity
    assert a.score > b.score and a.stability > b.stability and a.reinforcement_count == 5


def test_decay_tick_materialises_and_agrees_with_the_forecast(living, clock, data_dir):
    ids = [living.store(f"memory number {i}").record_id for i in range(5)]
    later = datetime.fromtimestamp(clock.now, UTC) + timedelta(days=30)
    forecast = living.forecast(ids, later).forecasts
    crossing = forecast[0].estimated_threshold_date
    assert crossing is not None and forecast[0].current_fidelity == 1.0
    clock.advance(30 * DAY)
    tick = living.decay_tick()
    assert tick.records_updated == 5 and tick.records_below_threshold == 0 and tick.records_pruned == 0
    for f in forecast:
        assert living.inspect(f.record_id).fidelity.score == pytest.approx(f.forecasted_fidelity, abs=1e-9)
    clock.now = crossing.timestamp() + 1
    tick = living.decay_tick()
    assert tick.records_below_threshold == 5 and tick.records_forgotten == 5
    assert living.decay_tick().records_forgotten == 0  # counted once
    with pytest.raises(CMPError) as err:
        living.forecast(["01890000-0000-7000-8000-000000000000"], later)
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND


def test_decay_state_survives_reopen(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        rid = mem.store("persisted decay").record_id
        clock.advance(3 * DAY)
        mem.recall("persisted decay")
        before = mem.inspect(rid).fidelity
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        after = mem.inspect(rid).fidelity
    assert after.score == pytest.approx(before.score) and after.stability == pytest.approx(before.stability)


def test_per_store_parameters_are_configurable(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock, decay__episodic__prune=0.9) as mem:
        mem.store("fragile memory")
        clock.advance(DAY)
        assert mem.recall("fragile").memories == []


def test_cli_decay_tick_and_forecast(cli):
    rid = cli("store", "cli decay note", "--json").json()["record_id"]
    tick = cli("decay-tick", "--json")
    assert tick.code == 0 and tick.json()["records_updated"] == 1
    forecast = cli("forecast", rid, "--at", "2099-01-01T00:00:00Z", "--json").json()["forecasts"][0]
    assert forecast["forecasted_fidelity"] < 0.3 < forecast["current_fidelity"]
    assert forecast["estimated_threshold_date"] < "2099"
    assert "below their prune threshold" in cli("decay-tick").stdout
