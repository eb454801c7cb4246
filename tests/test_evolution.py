"""The evolution engine: observations, bounded adjustments that the decay engine really uses,
persistence across restarts, and the freeze switch."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import cerememory
from cerememory import StoreType
from cerememory.dynamics.decay import DAY, DEFAULT_PARAMS
from cerememory.dynamics.evolution import BOUND, Evolution

ALL = list(StoreType)
EPISODIC = DEFAULT_PARAMS[StoreType.EPISODIC]


def _faded(evo: Evolution, n: int = 40, score: float = 0.05) -> None:
    codes = np.full(n, ALL.index(StoreType.EPISODIC))
    evo.observe_fidelity(codes, np.full(n, score), ALL)


def test_low_fidelity_slows_decay_and_lowers_the_prune_threshold():
    evo = Evolution(DEFAULT_PARAMS, interval=DAY)
    _faded(evo)
    assert evo.adapt(now=0.0)
    params = evo.params()[StoreType.EPISODIC]
    assert params.exponent == pytest.approx(EPISODIC.exponent * 0.9)
    assert params.prune == pytest.approx(EPISODIC.prune * 0.9)
    assert params.stability == EPISODIC.stability
    reasons = {(a.store, a.parameter): a.reason for a in evo.adjustments.values()}
    assert "median fidelity" in reasons[(StoreType.EPISODIC, "exponent")]
    assert evo.params()[StoreType.SEMANTIC] == DEFAULT_PARAMS[StoreType.SEMANTIC]  # no data, no change


def test_rules_wait_for_the_interval_and_stay_within_bounds():
    evo = Evolution(DEFAULT_PARAMS, interval=DAY)
    _faded(evo)
    assert evo.adapt(now=0.0)
    assert not evo.adapt(now=DAY / 2)  # too soon
    for n in range(1, 60):
        evo.adapt(now=n * DAY)
    exponent = evo.params()[StoreType.EPISODIC].exponent
    assert exponent == pytest.approx(EPISODIC.exponent * (1 - BOUND))
    assert not evo.adapt(now=100 * DAY)  # at the bound nothing changes any more


def test_a_low_recall_hit_rate_raises_the_retrieval_boost():
    evo = Evolution(DEFAULT_PARAMS)
    for _ in range(4):
        evo.observe_recall([StoreType.PROCEDURAL], [])
    evo.adapt(now=0.0)
    assert evo.params()[StoreType.PROCEDURAL].boost == DEFAULT_PARAMS[StoreType.PROCEDURAL].boost  # 4 < 5 samples
    evo = Evolution(DEFAULT_PARAMS)
    for _ in range(5):
        evo.observe_recall([StoreType.PROCEDURAL], [])
    evo.observe_recall(ALL, [(StoreType.EPISODIC, True), (StoreType.EPISODIC, False)])
    assert evo.adapt(now=0.0)
    assert evo.params()[StoreType.PROCEDURAL].boost == pytest.approx(DEFAULT_PARAMS[StoreType.PROCEDURAL].boost * 1.1)
    assert evo.metrics()["recall_hit_rates"]["episodic"] == 0.5


def test_frozen_observes_but_changes_nothing():
    evo = Evolution(DEFAULT_PARAMS, frozen=True)
    _faded(evo)
    assert not evo.adapt(now=0.0)
    assert evo.params() == DEFAULT_PARAMS and evo.metrics()["fidelity_histograms"][0]["counts"][0] == 40


def test_state_round_trips_and_a_changed_setting_wins():
    evo = Evolution(DEFAULT_PARAMS)
    _faded(evo)
    evo.adapt(now=0.0)
    state = evo.to_state()
    assert Evolution(DEFAULT_PARAMS, state=state).params() == evo.params()
    configured = dict(DEFAULT_PARAMS)
    configured[StoreType.EPISODIC] = dataclasses.replace(EPISODIC, exponent=0.4)
    restored = Evolution(configured, state=state).params()[StoreType.EPISODIC]
    assert restored.exponent == 0.4 and restored.prune == pytest.approx(EPISODIC.prune * 0.9)


def test_adjustments_reach_the_decay_engine_and_survive_restart(data_dir, clock):
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        ids = [mem.store(f"an ordinary day number {n}").record_id for n in range(30)]
        clock.advance(400 * DAY)
        before = mem.forecast(ids[:1], at=_at(clock)).forecasts[0].current_fidelity
        tick = mem.decay_tick()
        assert tick.records_below_threshold == 30
        report = mem.evolution()
        changed = {(a.store.value, a.parameter): a for a in report.parameter_adjustments}
        assert ("episodic", "exponent") in changed and report.detected_patterns
        after = mem.forecast(ids[:1], at=_at(clock)).forecasts[0].current_fidelity
        assert after > before  # slower decay: the same memory is clearer now
        assert mem.stats().evolution_metrics.adjustments == len(changed)
    with cerememory.open(data_dir, semantic="off", clock=clock) as mem:
        assert mem.evolution() == report
        assert mem.forecast(ids[:1], at=_at(clock)).forecasts[0].current_fidelity == pytest.approx(after)


def test_the_freeze_switch_and_the_cli(cli, clock):
    lines = "\n".join(json.dumps({"text": f"note {n}"}) for n in range(25))
    assert cli("batch", "-", "--json", input=lines).code == 0
    frozen = {"CEREMEMORY_EVOLUTION__FROZEN": "true"}
    cli("decay-tick", "--json", env=frozen)
    report = cli("evolution", "--json", env=frozen).json()
    assert report["parameter_adjustments"] == []
    assert cli("stats", "--json", env=frozen).json()["evolution_metrics"]["frozen"] is True
    assert "no decay parameter" in cli("evolution").stdout


def _at(clock):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(clock.now, UTC)
