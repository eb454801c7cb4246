"""The evolution engine: watches how memories fade and how recall fares, and tunes the decay
parameters within bounds.

Observations: a fidelity histogram per store (fed by each decay tick) and a rolling recall hit
rate per store (fed by each recall.query with a content cue: of the memories a store returned,
the share found by a direct text or vector match rather than only by activation or recency; a
query that returned nothing counts as a miss for every store it searched).

Rules, checked at most once per interval for the stores that hold at least `MIN_RECORDS`:
1. median fidelity below 0.3: memories fade before they are used, so decay slows
   (exponent x 0.9);
2. hit rate below 0.2 over at least 5 samples: recall rarely finds what it needs, so each
   recall strengthens more (boost x 1.1);
3. more than half the records in the lowest tenth: the prune threshold falls (x 0.9) so fewer
   are forgotten outright.

Every value stays within +-50% of its configured value. Unlike the reference, the adjusted
values are what the decay engine uses, and they persist across restarts; a configured value
that changed since an adjustment resets that adjustment (an explicit setting wins).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import StoreType, from_ts
from .params import DAY, DecayParams

TUNED_STORES = (StoreType.EPISODIC, StoreType.SEMANTIC, StoreType.PROCEDURAL, StoreType.EMOTIONAL)
BUCKETS = 10
HIT_WINDOW = 100
MIN_HIT_SAMPLES = 5
MIN_RECORDS = 20
BOUND = 0.5
DEFAULT_INTERVAL = DAY
LOW_MEDIAN, LOW_HIT_RATE, LOW_BUCKET_SHARE = 0.3, 0.2, 0.5


@dataclass
class Adjustment:
    store: StoreType
    parameter: str
    original_value: float
    current_value: float
    reason: str


class Evolution:
    """Thread-safe: recall threads report hits while the decay tick observes and adapts."""

    def __init__(self, configured: Mapping[StoreType, DecayParams], *, frozen: bool = False,
                 interval: float = DEFAULT_INTERVAL, state: Mapping[str, Any] | None = None) -> None:
        self.configured = dict(configured)
        self.frozen = frozen
        self.interval = interval
        self._lock = threading.Lock()
        self.adjustments: dict[tuple[StoreType, str], Adjustment] = {}
        self.histograms: dict[StoreType, list[int]] = {}
        self.hits: dict[StoreType, deque[float]] = {s: deque(maxlen=HIT_WINDOW) for s in TUNED_STORES}
        self.patterns: list[str] = []
        self.last_adapted_at: float | None = None
        self.dirty = False
        if state:
            self._restore(state)

    # ------------------------------------------------------------ state

    def _restore(self, state: Mapping[str, Any]) -> None:
        for item in state.get("adjustments", []):
            store, name = StoreType(item["store"]), item["parameter"]
            configured = getattr(self.configured[store], name)
            if abs(item["original_value"] - configured) > 1e-12:
                continue  # the setting was changed by hand since: it wins
            self.adjustments[(store, name)] = Adjustment(
                store, name, configured, _clamp(item["current_value"], configured), item["reason"])
        for store, counts in state.get("histograms", {}).items():
            self.histograms[StoreType(store)] = list(counts)
        for store, window in state.get("hits", {}).items():
            if StoreType(store) in self.hits:
                self.hits[StoreType(store)].extend(window)
        self.patterns = list(state.get("patterns", []))
        self.last_adapted_at = state.get("last_adapted_at")

    def to_state(self) -> dict[str, Any]:
        with self._lock:
            self.dirty = False
            return {
                "adjustments": [dict(dataclasses.asdict(a), store=a.store.value) for a in self.adjustments.values()],
                "histograms": {s.value: c for s, c in self.histograms.items()},
                "hits": {s.value: list(w) for s, w in self.hits.items() if w},
                "patterns": self.patterns,
                "last_adapted_at": self.last_adapted_at,
            }

    def params(self) -> dict[StoreType, DecayParams]:
        """The parameters the decay engine uses: configured values with adjustments applied."""
        out = dict(self.configured)
        for (store, name), adj in self.adjustments.items():
            out[store] = dataclasses.replace(out[store], **{name: adj.current_value})
        return out

    # ------------------------------------------------------------ observations

    def observe_recall(self, searched: Iterable[StoreType], returned: Iterable[tuple[StoreType, bool]]) -> None:
        """One recall: the store and direct-match flag of each memory it returned."""
        per_store: dict[StoreType, list[bool]] = {}
        for store, direct in returned:
            per_store.setdefault(store, []).append(direct)
        with self._lock:
            if not per_store:
                for store in searched:
                    if store in self.hits:
                        self.hits[store].append(0.0)
            for store, flags in per_store.items():
                if store in self.hits:
                    self.hits[store].append(sum(flags) / len(flags))
            self.dirty = True

    def observe_fidelity(self, store_codes: np.ndarray, scores: np.ndarray, stores: Sequence[StoreType]) -> None:
        """Per-store histograms of current fidelity (10 buckets over [0, 1])."""
        histograms = {}
        for code, store in enumerate(stores):
            values = scores[store_codes == code]
            if len(values):
                histograms[store] = np.histogram(values, bins=BUCKETS, range=(0.0, 1.0))[0].tolist()
        with self._lock:
            self.histograms = histograms
            self.dirty = True

    # ------------------------------------------------------------ adaptation

    def adapt(self, now: float) -> bool:
        """Apply the rules if an interval has passed since the last time; True if a value changed."""
        with self._lock:
            if self.frozen or (self.last_adapted_at is not None and now - self.last_adapted_at < self.interval):
                return False
            self.last_adapted_at = now
            self.dirty = True
            patterns: list[str] = []
            changed = False
            for store in TUNED_STORES:
                counts = self.histograms.get(store) or []
                total = sum(counts)
                if total >= MIN_RECORDS:
                    median = _median_bucket(counts) / BUCKETS
                    if median < LOW_MEDIAN:
                        patterns.append(f"{store.value}: median fidelity {median:.1f} is below {LOW_MEDIAN}")
                        changed |= self._scale(store, "exponent", 0.9,
                                               f"median fidelity {median:.1f} < {LOW_MEDIAN}: decay slowed")
                    low_share = counts[0] / total
                    if low_share > LOW_BUCKET_SHARE:
                        patterns.append(f"{store.value}: {low_share:.0%} of records have fidelity below 0.1")
                        changed |= self._scale(store, "prune", 0.9, f"{low_share:.0%} of records below "
                                                                    "fidelity 0.1: prune threshold lowered")
                window = self.hits[store]
                if len(window) >= MIN_HIT_SAMPLES:
                    rate = sum(window) / len(window)
                    if rate < LOW_HIT_RATE:
                        patterns.append(f"{store.value}: recall hit rate {rate:.2f} over {len(window)} recalls")
                        changed |= self._scale(store, "boost", 1.1,
                                               f"recall hit rate {rate:.2f} < {LOW_HIT_RATE}: retrieval boost raised")
            self.patterns = patterns
            return changed

    def _scale(self, store: StoreType, name: str, factor: float, reason: str) -> bool:
        configured = getattr(self.configured[store], name)
        known = self.adjustments.get((store, name))
        current = known.current_value if known else configured
        new = _clamp(current * factor, configured)
        if abs(new - current) < 1e-12:
            return False
        self.adjustments[(store, name)] = Adjustment(store, name, configured, new, reason)
        return True

    def metrics(self) -> dict[str, Any]:
        """The fields of `EvolutionMetrics` in introspect.stats."""
        with self._lock:
            return {
                "frozen": self.frozen,
                "fidelity_histograms": [{"store": s, "counts": c} for s, c in self.histograms.items()],
                "recall_hit_rates": {s.value: round(sum(w) / len(w), 4) for s, w in self.hits.items() if w},
                "recall_hit_samples": {s.value: len(w) for s, w in self.hits.items() if w},
                "adjustments": len(self.adjustments),
                "last_adapted_at": None if self.last_adapted_at is None else from_ts(self.last_adapted_at),
            }


def _clamp(value: float, configured: float) -> float:
    return float(min(max(value, configured * (1 - BOUND)), configured * (1 + BOUND)))


def _median_bucket(counts: list[int]) -> int:
    half, seen = sum(counts) / 2, 0
    for bucket, count in enumerate(counts):
        seen += count
        if seen >= half:
            return bucket
    return len(counts) - 1
