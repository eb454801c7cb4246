"""Decay parameters per store: plain data, so that reading the configuration needs no numpy."""

from __future__ import annotations

from dataclasses import dataclass, fields

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True)
class DecayParams:
    exponent: float        # d: how steeply the power law falls
    stability: float       # S0: initial stability in seconds (the curve's time scale)
    prune: float           # fidelity below which a record is forgotten
    boost: float           # b in S ← S·(1 + b·S^(−0.2)) on each recall
    interference: float    # λ: how fast noise gathers as fidelity falls

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


# Chosen so that an untouched neutral episodic memory stays above the prune threshold for about
# six weeks, an intense one (intensity 1) for about five months, a recalled one longer; facts and
# skills fade far slower; working memory within a few hours. docs/decay.md tabulates the curves.
DEFAULT_PARAMS: dict[str, DecayParams] = {
    "episodic": DecayParams(exponent=0.3, stability=18.6 * HOUR, prune=0.3, boost=1.5, interference=0.1),
    "semantic": DecayParams(exponent=0.2, stability=3 * DAY, prune=0.25, boost=2.0, interference=0.05),
    "procedural": DecayParams(exponent=0.15, stability=7 * DAY, prune=0.2, boost=2.5, interference=0.02),
    "emotional": DecayParams(exponent=0.25, stability=2 * DAY, prune=0.3, boost=1.8, interference=0.08),
    "working": DecayParams(exponent=0.5, stability=600.0, prune=0.3, boost=1.0, interference=0.3),
}
