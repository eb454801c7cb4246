"""The forgetting curve, in closed form.

    F(t) = min(1, F0 · (1 + t/S)^(−d) · E),   E = 1 + 0.5 · intensity
    N(t) = min(1, N0 + λ · √(t/S) · (1 − F(t)))

t is the time since the memory was last reinforced (stored or recalled), S its stability and F0
its strength at that moment. Because F depends only on t, fidelity is right at any instant
without a tick, and ticks never compound. A record whose fidelity falls below its store's prune
threshold is *forgotten*: hidden from recall, kept for forensics.

Every function takes numpy arrays or plain floats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from ..model import StoreType
from .params import DAY as DAY  # re-exported: the curve's time units
from .params import DEFAULT_PARAMS as _DEFAULTS
from .params import HOUR as HOUR
from .params import DecayParams

DEFAULT_PARAMS: dict[StoreType, DecayParams] = {StoreType(store): p for store, p in _DEFAULTS.items()}

RECALL_FIDELITY_BOOST = 0.1  # a recall restores this share of what was lost


def emotion_factor(intensity: Any) -> Any:
    if isinstance(intensity, float | int):  # one record (encode): plain arithmetic beats numpy
        return 1.0 + 0.5 * min(max(float(intensity), 0.0), 1.0)
    return 1.0 + 0.5 * np.clip(intensity, 0.0, 1.0)


def strength(base: Any, elapsed: Any, stability: Any, exponent: Any) -> Any:
    """F0 · (1 + t/S)^(−d): the raw strength, before emotion."""
    t = np.maximum(elapsed, 0.0)
    return base * (1.0 + t / stability) ** (-exponent)


def fidelity(base: Any, elapsed: Any, stability: Any, exponent: Any, intensity: Any) -> Any:
    return np.minimum(1.0, strength(base, elapsed, stability, exponent) * emotion_factor(intensity))


def noise(noise0: Any, elapsed: Any, stability: Any, interference: Any, current_fidelity: Any) -> Any:
    t = np.maximum(elapsed, 0.0)
    return np.minimum(1.0, noise0 + interference * np.sqrt(t / stability) * (1.0 - current_fidelity))


def state_now(base: float, elapsed: float, stability: float, params: DecayParams,
              intensity: float) -> tuple[float, float]:
    """(fidelity, noise) of one record: the scalar twin of `fidelity` and `noise`, without
    numpy's per-call overhead, for the per-candidate path of recall."""
    t = elapsed if elapsed > 0.0 else 0.0
    emotion = 1.0 + 0.5 * min(max(intensity, 0.0), 1.0)
    score = min(1.0, base * (1.0 + t / stability) ** -params.exponent * emotion)
    return score, min(1.0, params.interference * math.sqrt(t / stability) * (1.0 - score))


def seconds_until(threshold: Any, base: Any, stability: Any, exponent: Any, intensity: Any) -> Any:
    """Time after the last reinforcement at which fidelity reaches `threshold` (inf: never)."""
    start = np.asarray(base * emotion_factor(intensity), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = stability * ((start / threshold) ** (1.0 / np.asarray(exponent, dtype=np.float64)) - 1.0)
    t = np.where(exponent <= 0, np.inf, t)
    return np.maximum(t, 0.0)


def reinforce(base: float, elapsed: float, stability: float, params: DecayParams) -> tuple[float, float]:
    """A recall: the decayed strength regains a little and stability grows. Returns (base, S).

    The clock restarts at the recall. Continuing from the current strength with stability
    S + t would retrace the old curve exactly, so that is the starting point; the boost
    S ← S·(1 + b·S^−0.2) is applied on top of it. A recall therefore never makes any future
    fidelity lower than it would have been without it.
    """
    elapsed = max(elapsed, 0.0)
    now = float(strength(base, elapsed, stability, params.exponent))
    continued = stability + elapsed
    new_base = min(1.0, now + RECALL_FIDELITY_BOOST * (1.0 - now))
    return max(new_base, now), continued * (1.0 + params.boost * continued ** -0.2)


@dataclass
class Evaluation:
    """The curve evaluated for many records at once: arrays aligned with the input records."""

    store_codes: np.ndarray
    score: np.ndarray
    noise: np.ndarray
    prune: np.ndarray
    intensity: np.ndarray


def evaluate(heads: Sequence[Any], now: float, params: Mapping[StoreType, DecayParams]) -> Evaluation:
    """Fidelity and noise of every record head at `now`, vectorised (no Python loop per record
    beyond reading the fields)."""
    n = len(heads)
    code_of = {s: i for i, s in enumerate(StoreType)}

    def column(name: str) -> np.ndarray:
        return np.fromiter(map(attrgetter(name), heads), dtype=np.float64, count=n)

    codes = np.fromiter((code_of[h.store] for h in heads), dtype=np.int64, count=n)
    return evaluate_columns(codes, column("last_accessed_at"), column("stability"), column("emotion_intensity"),
                            column("fidelity_base"), now, params)


def evaluate_columns(codes: np.ndarray, last_accessed_at: np.ndarray, stability: np.ndarray,
                     intensity: np.ndarray, base: np.ndarray, now: float,
                     params: Mapping[StoreType, DecayParams]) -> Evaluation:
    """`evaluate` over heads already read into columns (codes are positions in StoreType)."""
    stores = list(StoreType)

    def per_store(name: str) -> np.ndarray:
        return np.array([getattr(params[s], name) for s in stores])[codes]

    elapsed = now - last_accessed_at
    score = fidelity(base, elapsed, stability, per_store("exponent"), intensity)
    return Evaluation(codes, score, noise(0.0, elapsed, stability, per_store("interference"), score),
                      per_store("prune"), intensity)
