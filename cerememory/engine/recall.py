"""recall.*: hybrid query, association, timeline, graph and the raw journal.

Kept apart because ranking is the part most often tuned: the signals (BM25, cosine, recency),
their fusion, fidelity weighting and spreading activation live here.
"""

from __future__ import annotations

import heapq
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from ..cmp import context
from ..cmp import messages as m
from ..cmp.errors import CMPError, ErrorCode, not_found
from ..dream.sources import sources_of
from ..dynamics import decay
from ..dynamics.render import render
from ..index.fusion import Fusion
from ..index.graph import Activation, AssociationGraph
from ..index.when import time_span
from ..index.words import QUESTION_WORDS, STOP_WORDS
from ..model import (
    ALL_STORES,
    EMOTION_CHANNELS,
    STORE_CODE,
    AssociationType,
    EmotionVector,
    MetaEdge,
    RecallMode,
    SecrecyLevel,
    StoreType,
    built,
    from_ts,
    to_ts,
)
from ..storage.base import RawFilters
from ..stores.heads import Head
from ..stores.journal import DEFAULT_SECRECY, allowed_visibility
from ..stores.records import Reinforcement
from ..stores.undecodable import reporting
from .core import EngineCore

Paths = dict[uuid.UUID, list[uuid.UUID]]  # how activation reached each record, seed first
ACTIVATION_DECAY = 0.5
ACTIVATION_MIN_WEIGHT = 0.05
CONTEXT_EDGES = (AssociationType.SEQUENTIAL.value,)  # the links between the turns of a session
CONTEXT_SHARE = 0.3  # how much each neighbouring turn counts in a turn's context vector
FEEDBACK_DOCS = 3  # the best first-pass hits pseudo-relevance feedback learns from
FEEDBACK_WORDS = 10  # words feedback adds to the cue at most
_WORDS = re.compile(r"[^\W_]+")
SESSION_EVIDENCE_MIN = 20  # hits re-ranked by session evidence at least
REACHED_SHARE = 0.5  # a memory only activation reached counts half its gain
EMOTION_BONUS = 0.5  # a perfect affect match adds half again

RAW_SEARCH_CAP = 20_000  # journal text hits considered at most, however strict the filters


class _Turns:
    """The session neighbours (sequential links, both ways) of records, each looked up once per
    query: neighbour context, BM25 in context and session evidence ask about the same hits."""

    def __init__(self, graph: AssociationGraph) -> None:
        self.graph = graph
        self.seen: dict[uuid.UUID, list[uuid.UUID]] = {}

    def __call__(self, record_id: uuid.UUID) -> list[uuid.UUID]:
        found = self.seen.get(record_id)
        if found is None:
            found = self.seen[record_id] = self.graph.targets(record_id, CONTEXT_EDGES)
        return found


class Recall:
    def __init__(self, core: EngineCore) -> None:
        self.core = core

    def _recalled(self, ids: Sequence[uuid.UUID], scores: dict[uuid.UUID, float], mode: RecallMode,
                  breakdown: dict[uuid.UUID, m.ScoreBreakdown] | None = None,
                  paths: dict[uuid.UUID, list[uuid.UUID]] | None = None) -> list[m.RecalledMemory]:
        records = self.core.fetch(ids)
        out = []
        for i in ids:
            record = records.get(i)
            if record is None:
                continue
            perfect = self.core.effective_perfect(mode, record.store)
            out.append(built(m.RecalledMemory, {  # every value made here, of its field's type
                "record": record,
                "relevance_score": round(float(min(max(scores.get(i, 0.0), 0.0), 1.0)), 6),
                "activation_path": list((paths or {}).get(i, [i])),
                "rendered_content": render(record.content, record.fidelity.score, record.fidelity.noise_level,
                                           seed=record.id.int, perfect=perfect),
                "score_breakdown": (breakdown or {}).get(i),
            }))
        return out

    def _reconsolidate(self, ids: Sequence[uuid.UUID]) -> None:
        """Recall strengthens: a little fidelity back, more stability, the decay clock restarts.
        The change is audit-logged, as every change to stored memory is."""
        if ids and self.core.audit is not None:
            caller = context.current()
            self.core.audit.append("recall.reconsolidate", record_ids=[str(i) for i in ids],
                              key_id=caller.key_id, request_id=caller.request_id, transport=caller.transport)
        self._strengthen(ids)

    def reinforce(self, req: m.ReinforceRequest) -> m.ReinforceResponse:
        """`lifecycle.reinforce`: what a recall does to what it returns, asked for by name (the
        operation's own audit entry names the records). All or nothing: an unknown id changes nothing."""
        ids = list(dict.fromkeys(req.record_ids))
        missing = [i for i in ids if not self.core.exists(i)]
        if missing:
            raise not_found(missing[0])
        self._strengthen(ids)
        return m.ReinforceResponse(records_reinforced=len(ids))

    def _strengthen(self, ids: Sequence[uuid.UUID]) -> None:
        now = self.core.clock()
        for i in ids:
            head = self.core.records.heads.get(i)
            if head is not None:
                params = self.core.params[head.store]
                before = (head.fidelity_base, head.stability, head.last_accessed_at)
                head.fidelity_base, head.stability = decay.reinforce(
                    head.fidelity_base, now - head.last_accessed_at, head.stability, params)
                head.access_count += 1
                head.last_accessed_at = max(head.last_accessed_at, now)
                head.reinforcement_count += 1
                self.core.records.reinforced(Reinforcement(i, now, params.exponent, params.boost,
                                                           decay.RECALL_FIDELITY_BOOST, before,
                                                           (head.fidelity_base, head.stability)))
            else:
                self.core.working.touch(i)

    @reporting
    def query(self, req: m.RecallQueryRequest) -> m.RecallQueryResponse:
        cue = req.cue
        if cue.image is not None or cue.audio is not None:
            raise CMPError(
                ErrorCode.MODALITY_UNSUPPORTED,
                "recall by image or audio needs a multimodal embedding backend, and none is configured",
                hint="recall with cue.text, or pass cue.embedding computed by your own model",
            )
        stores = list(dict.fromkeys(req.stores or ALL_STORES))
        meta = m.QueryMetadata(stores_searched=stores, semantic_off_reason=self.core.semantic_off_reason)
        text = (cue.text or "").strip()
        pool = max(req.limit * 5, 50)
        rankings: list[list[tuple[uuid.UUID, float]]] = []
        text_hits: list[tuple[uuid.UUID, float]] = []
        vector_hits: list[tuple[uuid.UUID, float]] = []

        options = self.core.options
        groups = None
        if text:
            groups = None if len(stores) == len(ALL_STORES) else [s.value for s in stores]  # a filter costs ~0.7 ms
            words = topic_words(text) if options.question_cleanup else text
            text_hits = self.core.text.search_ids(words, pool, groups)
            rankings.append(text_hits)
            meta.signals.append("bm25")
        query_vec = None
        codes = None
        if cue.embedding is not None:
            query_vec = np.asarray(cue.embedding, dtype=np.float32)
        elif text and self.core.embedder is not None and not len(self.core.vectors):
            meta.semantic_off_reason = "no record has a vector yet, so the query was not embedded"
        elif text and self.core.embedder is not None:
            started = time.perf_counter()
            query_vec = self.core.embed([text])[0]
            meta.embedding_ms = round((time.perf_counter() - started) * 1000, 3)
        if query_vec is not None:
            codes = None if len(stores) == len(ALL_STORES) else [STORE_CODE[s] for s in stores]
            vector_hits = self.core.vectors.search(query_vec, pool, codes)
            rankings.append(vector_hits)
            meta.signals.append("cosine")
            meta.semantic_search = True
            meta.semantic_off_reason = None

        start = to_ts(cue.temporal.start) if cue.temporal else None
        end = to_ts(cue.temporal.end) if cue.temporal else None
        in_window = self._in_window(start, end)
        near = _Turns(self.core.graph)
        if rankings:
            fusion = Fusion(options.fusion, options.rrf_k)
            for ranking in rankings:
                fusion.add(ranking, options.text_weight if ranking is text_hits else 1.0)
            if query_vec is not None and options.context_weight > 0:
                around = self._in_context(fusion.sums.keys(), query_vec, pool, near)
                if around:
                    rankings.append(around)
                    fusion.add(around, options.context_weight)
                    meta.signals.append("context")
            if text_hits and options.text_context_weight > 0:
                around = self._text_in_context(text_hits, near)
                if around:
                    rankings.append(around)
                    fusion.add(around, options.text_context_weight)
                    meta.signals.append("text context")
            if options.feedback != "off":
                scores = fusion.scores()
                feedback = (self._feedback(scores, query_vec, pool, codes) if options.feedback == "vector"
                            else self._text_feedback(scores, text, pool, groups))
                if feedback:
                    rankings.append(feedback)
                    fusion.add(feedback, 1.0)
                    meta.signals.append("feedback")
            scores = fusion.scores()
            if len(rankings) > 1:
                meta.fusion = options.fusion
            if text and options.temporal_weight > 0 and self._favour_named_time(scores, text, options.temporal_weight):
                meta.signals.append("when")
        else:
            # no content cue: the most recent memories (inside the temporal range, if any), or
            # with an emotion cue the memories whose affect matches it best
            if (feeling := cue.emotion) is not None:
                ids = [i for i in self.core.candidate_ids(stores) if in_window(i)]
                meta.signals.append("emotion")
                ranked = heapq.nlargest(max(pool, req.limit * 2), ids,
                                        key=lambda i: (self._affect_match(i, feeling), self.core.created(i)))
                scores = {i: self._affect_match(i, feeling) for i in ranked}
            else:
                meta.signals.append("temporal" if cue.temporal else "recency")
                newest = self._newest(stores, max(pool, req.limit * 2), start, end)
                scores = {i: 1.0 / (1 + rank) ** 0.5 for rank, i in enumerate(newest)}
        meta.total_records_scanned = len(scores)
        wanted = set(stores)
        now = self.core.clock()
        known: dict[uuid.UUID, float] = {}
        visible = self._visibility(req.include_decayed, req.min_fidelity, now, known)
        kept, hidden = self._kept(scores, wanted, start, end, now, req.include_decayed, req.min_fidelity, known)
        meta.fidelity_filtered += hidden
        fused = dict(kept)

        gains: dict[uuid.UUID, float] = {}
        reached: dict[uuid.UUID, Activation] = {}
        weight = options.activation_weight
        if req.activation_depth > 0 and kept and rankings and weight > 0:
            gains, reached = self._spread(kept, req.activation_depth, wanted, visible)
            if gains:  # scaled by 1 + weight so that a score stays within [0, 1]
                for i in kept.keys() - gains.keys():
                    kept[i] /= 1 + weight
                for i, gain in gains.items():
                    kept[i] = (kept[i] + weight * gain if i in kept else REACHED_SHARE * gain) / (1 + weight)
                meta.signals.append("activation")
        fidelity, final = self._weighed(kept, known, now)
        affect: dict[uuid.UUID, float] = {}
        if cue.emotion is not None and rankings:
            # an emotion cue beside a content cue: memories felt the same way rank higher
            affect = {i: self._affect_match(i, cue.emotion) for i in final}
            final = {i: s * (1.0 + EMOTION_BONUS * affect[i]) / (1.0 + EMOTION_BONUS) for i, s in final.items()}
            meta.signals.append("emotion")
        candidates = len(final)
        if options.session_weight > 0 and rankings:
            ranked = best_first(final, max(2 * req.limit, SESSION_EVIDENCE_MIN), self.core.created)
            evidenced = self._session_evidence(final, ranked, options.session_weight, near)
            # unchanged, the best `limit` are the first of those ranked (nlargest keeps its order)
            top = ranked[:req.limit] if evidenced is final else best_first(evidenced, req.limit, self.core.created)
            final = evidenced
        else:
            top = best_first(final, req.limit, self.core.created)
        text_rank, vector_rank = _ranks(text_hits), _ranks(vector_hits)
        breakdown = {}
        for i in top:
            t_rank, t_score = text_rank.get(i.int, (None, None))
            v_rank, v_score = vector_rank.get(i.int, (None, None))
            breakdown[i] = _breakdown(t_rank, t_score, v_rank, v_score, fused.get(i, 0.0), gains.get(i, 0.0),
                                      fidelity[i], affect.get(i))
        paths = {i: list(act.path) for i, act in reached.items()}
        memories = self._recalled(top, final, req.recall_mode, breakdown, paths)
        if rankings:
            self.core.evolution.observe_recall(stores, [
                (store, breakdown[i].text is not None or breakdown[i].vector is not None)
                for i in top if (store := self.core.store_of(i)) is not None])
        if req.reconsolidate:
            self._reconsolidate(top)
        self.core.count_recall()
        return m.RecallQueryResponse(memories=memories, total_candidates=candidates,
                                     query_metadata=meta,
                                     activation_trace=_trace(top, gains, reached))

    def _kept(self, scores: dict[uuid.UUID, float], wanted: set[StoreType], start: float | None,
              end: float | None, now: float, include_decayed: bool, min_fidelity: float | None,
              known: dict[uuid.UUID, float]) -> tuple[dict[uuid.UUID, float], int]:
        """The scored records of the wanted stores, inside [start, end] when given, that are
        visible (as `_visibility` says), and how many were hidden for their fidelity: each head
        is looked up once. Fidelities computed on the way are left in `known`."""
        kept: dict[uuid.UUID, float] = {}
        hidden = 0
        for (i, s), head in zip(scores.items(), self.core.heads_of(list(scores)), strict=True):
            if head is None or head.store not in wanted:
                continue
            if not _inside(start, end, head.created_at):
                continue
            if not include_decayed:
                fidelity = known[i] = self.core.state(head, now)[0]
                if not self._shown(head, fidelity, min_fidelity):
                    hidden += 1
                    continue
            kept[i] = s
        return kept, hidden

    def _weighed(self, kept: dict[uuid.UUID, float], known: dict[uuid.UUID, float],
                 now: float) -> tuple[dict[uuid.UUID, float], dict[uuid.UUID, float]]:
        """Each kept record's fidelity (from `known` when `_kept` computed it) and its score
        weighed by it, in one pass: a faded memory counts half at worst."""
        fidelity: dict[uuid.UUID, float] = {}
        final: dict[uuid.UUID, float] = {}
        for i, s in kept.items():
            f = known.get(i)
            if f is None:
                f = self.core.fidelity(i, now)
            fidelity[i] = f
            final[i] = s * (0.5 + 0.5 * f)
        return fidelity, final

    def _session_evidence(self, final: dict[uuid.UUID, float], ranked: list[uuid.UUID],
                          weight: float, near: _Turns) -> dict[uuid.UUID, float]:
        """The best hits (`ranked`, best first) re-ranked with their sessions as evidence: each
        counts its rank's share (1 / (rrf_k + rank)) plus `weight` times the shares
        of the other hits from the same conversation session, so a turn from a session that
        many hits come from rises above a lone hit of another. Scores stay within [0, 1]
        (1: the first hit with every other one from its session); the rest are left out.
        `final` itself when no two hits share a session."""
        # only a turn linked in its session can share it with another hit: the others' bodies stay unread
        sessions = self.core.sessions_of([i for i in ranked if near(i)])
        if len(set(sessions.values())) == len(sessions):  # no two hits share a session
            return final
        k = self.core.options.rrf_k
        share = {i: 1.0 / (k + rank + 1) for rank, i in enumerate(ranked)}
        mass: dict[str, float] = {}
        for i, session in sessions.items():
            mass[session] = mass.get(session, 0.0) + share[i]
        best = share[ranked[0]] + weight * (sum(share.values()) - share[ranked[0]])
        return {i: (share[i] + weight * (mass[sessions[i]] - share[i] if i in sessions else 0.0)) / best
                for i in ranked}

    def _in_context(self, hits: Iterable[uuid.UUID], query_vec: np.ndarray,
                    pool: int, near: _Turns) -> list[tuple[uuid.UUID, float]]:
        """The first-pass hits and their session neighbours ranked by the cue's cosine to each
        one's vector in context (its own plus `CONTEXT_SHARE` times each neighbouring turn's):
        a turn that answers a question it never names ("they loved the dinosaurs") is found
        through the turns around it. Empty when no hit has a neighbour."""
        around = {i: near(i) for i in hits}
        if not any(around.values()):
            return []
        for i in {j for turns in list(around.values()) for j in turns} - around.keys():
            around[i] = near(i)
        wanted = list({*around, *(j for turns in around.values() for j in turns)})
        found = self.core.vectors.rows(wanted).get(query_vec.shape[0])
        if found is None:
            return []
        row = {i: n for n, i in enumerate(found[0])}
        matrix = found[1]
        ids = [i for i in around if i in row]
        context = matrix[[row[i] for i in ids]].copy()
        for n, i in enumerate(ids):
            for j in around[i]:
                if j in row:
                    context[n] += CONTEXT_SHARE * matrix[row[j]]
        context /= np.maximum(np.linalg.norm(context, axis=1, keepdims=True), 1e-12)
        cosine = context @ (query_vec / (np.linalg.norm(query_vec) or 1.0))
        order = np.argsort(-cosine, kind="stable")[:pool]
        return [(ids[n], float(cosine[n])) for n in order]

    def _text_in_context(self, hits: list[tuple[uuid.UUID, float]],
                         near: _Turns) -> list[tuple[uuid.UUID, float]]:
        """The BM25 hits and their session neighbours ranked by BM25 in context: a turn's own
        score plus `CONTEXT_SHARE` times each neighbouring turn's, as if every turn were indexed
        with the turns around it. A turn that shares no word with the cue is found when the turn
        before or after it does. Empty when no hit has a neighbour."""
        context = dict(hits)
        linked = False
        for i, score in hits:
            for j in near(i):  # the links run both ways
                context[j] = context.get(j, 0.0) + CONTEXT_SHARE * score
                linked = True
        if not linked:
            return []
        return sorted(context.items(), key=lambda item: -item[1])

    def _text_feedback(self, scores: dict[uuid.UUID, float], text: str, pool: int,
                       groups: list[str] | None) -> list[tuple[uuid.UUID, float]]:
        """Pseudo-relevance feedback on words: the cue plus the words that at least two of the
        best first-pass hits share (stop words and the cue's own words aside), searched again."""
        if not text:
            return []
        best = heapq.nlargest(FEEDBACK_DOCS, scores, key=scores.__getitem__)
        asked = {w.lower() for w in _WORDS.findall(text)}
        seen: dict[str, int] = {}
        for record in self.core.fetch(best).values():
            for word in {w.lower() for w in _WORDS.findall(record.content.plain_text())}:
                if len(word) > 2 and not word.isdigit() and word not in STOP_WORDS and word not in asked:
                    seen[word] = seen.get(word, 0) + 1
        extra = [w for w, n in sorted(seen.items(), key=lambda wn: -wn[1]) if n >= 2][:FEEDBACK_WORDS]
        if not extra:
            return []
        return self.core.text.search_ids(f"{text} {' '.join(extra)}", pool, groups)

    def _feedback(self, scores: dict[uuid.UUID, float], query_vec: np.ndarray | None, pool: int,
                  codes: list[int] | None) -> list[tuple[uuid.UUID, float]]:
        """Pseudo-relevance feedback: the cue's vector moved towards the mean of the best
        first-pass hits' vectors (Rocchio), searched again; finds memories that share the
        answer's vocabulary rather than the question's."""
        if query_vec is None:
            return []
        best = heapq.nlargest(FEEDBACK_DOCS, scores, key=scores.__getitem__)
        found = self.core.vectors.rows(best).get(query_vec.shape[0])
        if found is None:
            return []
        moved = query_vec / (np.linalg.norm(query_vec) or 1.0) + found[1].mean(axis=0)
        return self.core.vectors.search(moved, pool, codes)

    def _favour_named_time(self, scores: dict[uuid.UUID, float], text: str, weight: float) -> bool:
        """Memories whose event time lies in the span the cue names ("in May 2023") score up
        to 1 + weight times the others (scaled back into [0, 1]); False when it names none."""
        span = time_span(text, from_ts(self.core.clock()))
        if span is None:
            return False
        start, end = to_ts(span[0]), to_ts(span[1])
        for i, s in scores.items():
            inside = start <= self.core.created(i) < end
            scores[i] = s * (1.0 + weight * inside) / (1.0 + weight)
        return True

    def _newest(self, stores: Sequence[StoreType], k: int, start: float | None,
                end: float | None) -> list[uuid.UUID]:
        """The `k` most recently created records of `stores` (inside [start, end] when given):
        the durable ones from the heads' columns, working memory's beside them."""
        window = (start, end) if start is not None and end is not None else (None, None)
        found = self.core.records.columns().newest(stores, k, *window)
        if StoreType.WORKING in stores:
            in_window = self._in_window(*window)
            found += [r.id for r in self.core.working.records() if in_window(r.id)]
        return heapq.nlargest(k, found, key=self.core.created)

    def _in_window(self, start: float | None, end: float | None) -> Callable[[uuid.UUID], bool]:
        """Whether a record was created inside [start, end] (always, without a window)."""
        if start is None or end is None:
            return lambda i: True
        return lambda i: _inside(start, end, self.core.created(i))

    def _affect_match(self, record_id: uuid.UUID, cue: EmotionVector) -> float:
        """How well a memory's affect matches an emotion cue, 0..1: its intensity, scaled by
        how close its valence is to the cue's (the cue's channels set its valence)."""
        head = self.core.head(record_id)
        if head is None:
            return 0.0
        return head.emotion_intensity * (1.0 - abs(head.emotion_valence - cue.valence) / 2.0)

    def _visibility(self, include_decayed: bool, min_fidelity: float | None, now: float,
                    memo: dict[uuid.UUID, float] | None = None) -> Callable[[uuid.UUID], bool]:
        """Forgotten records (below their store's prune threshold) and those under `min_fidelity`
        are hidden, unless decayed records are asked for. Fidelities computed on the way are
        left in `memo` for the ranking that follows."""
        if include_decayed:
            return lambda i: True
        memo = {} if memo is None else memo

        def visible(i: uuid.UUID) -> bool:
            head = self.core.head(i)
            if head is None:
                return False
            score = memo[i] = self.core.state(head, now)[0]
            return self._shown(head, score, min_fidelity)

        return visible

    def _shown(self, head: Head, fidelity: float, min_fidelity: float | None) -> bool:
        """Whether a record of this `fidelity` is still shown: at or above its store's prune
        threshold (below it, it is forgotten) and `min_fidelity` when asked."""
        return fidelity >= self.core.params[head.store].prune and (min_fidelity is None or fidelity >= min_fidelity)

    def _spread(self, kept: dict[uuid.UUID, float], depth: int, wanted: set[StoreType],
                visible: Callable[[uuid.UUID], bool]) -> tuple[dict[uuid.UUID, float], dict[uuid.UUID, Activation]]:
        """Spreading activation from the top seeds: the best gain to each reached record and the
        activation (path from its seed, last edge) that brought it."""
        seeds = heapq.nlargest(self.core.options.activation_seeds, kept, key=kept.__getitem__)
        gains: dict[uuid.UUID, float] = {}
        best: dict[uuid.UUID, Activation] = {}
        for seed in seeds:
            reached = self.core.graph.spread(seed, depth=depth, min_weight=ACTIVATION_MIN_WEIGHT,
                                        decay=ACTIVATION_DECAY)
            for i, act in reached.items():
                if self.core.store_of(i) not in wanted or not visible(i):
                    continue
                gain = act.level * kept[seed]
                if gain > gains.get(i, 0.0):
                    gains[i] = gain
                    best[i] = act
        return gains, best

    @reporting
    def associate(self, req: m.RecallAssociateRequest) -> m.RecallAssociateResponse:
        if not self.core.exists(req.record_id):
            raise not_found(req.record_id)
        types = {t.value for t in req.association_types} if req.association_types else None
        reached = self.core.graph.spread(req.record_id, depth=req.depth or 2, min_weight=req.min_weight,
                                    types=types, decay=ACTIVATION_DECAY)
        visible = self._visibility(False, None, self.core.clock())
        reached = {i: a for i, a in reached.items() if visible(i)}
        top = heapq.nlargest(req.limit, reached, key=lambda i: reached[i].level)
        scores = {i: reached[i].level for i in top}
        paths = {i: list(reached[i].path) for i in top}
        return m.RecallAssociateResponse(
            memories=self._recalled(top, scores, RecallMode.HUMAN, paths=paths),
            total_candidates=len(reached),
        )

    @reporting
    def timeline(self, req: m.RecallTimelineRequest) -> m.RecallTimelineResponse:
        start, end = to_ts(req.range.start), to_ts(req.range.end)
        stores = req.stores or ALL_STORES
        now = self.core.clock()
        visible = self._visibility(False, req.min_fidelity, now)
        ids = [i for i in self.core.candidate_ids(stores) if start <= self.core.created(i) <= end and visible(i)]
        ids.sort(key=self.core.created)
        if req.emotion_filter is not None:
            ids = self._emotion_matches(ids, req.emotion_filter)
        buckets: dict[datetime, list[uuid.UUID]] = {}
        for i in ids:
            buckets.setdefault(bucket_start(from_ts(self.core.created(i)), req.granularity), []).append(i)
        out = []
        for bstart, members in sorted(buckets.items()):
            shown = members[: req.limit_per_bucket]
            out.append(m.TimelineBucket(
                start=bstart, end=bucket_end(bstart, req.granularity), count=len(members),
                memories=self._recalled(shown, {i: self.core.fidelity(i, now) for i in shown}, RecallMode.HUMAN),
            ))
        return m.RecallTimelineResponse(buckets=out)

    def _emotion_matches(self, ids: list[uuid.UUID], wanted: EmotionVector) -> list[uuid.UUID]:
        """Records whose emotion shares a channel with the filter and is at least as intense."""
        channels = [c for c, v in zip(EMOTION_CHANNELS, wanted.channels(), strict=True) if v > 0]
        records = self.core.fetch(ids)
        keep = []
        for i in ids:
            emotion = records[i].emotion if i in records else None
            if emotion is None or emotion.intensity < wanted.intensity:
                continue
            if channels and not any(getattr(emotion, c) > 0 for c in channels):
                continue
            keep.append(i)
        return keep

    @reporting
    def graph(self, req: m.RecallGraphRequest) -> m.RecallGraphResponse:
        types = {t.value for t in req.edge_types} if req.edge_types else None
        if req.center_id is not None:
            if not self.core.exists(req.center_id):
                raise not_found(req.center_id)
            nodes = [req.center_id]
            seen = {req.center_id}
            frontier = [req.center_id]
            for _ in range(req.depth):
                nxt = []
                for node in frontier:
                    for other in sorted(self.core.graph.neighbours(node), key=str):
                        if other not in seen and self.core.exists(other) and len(nodes) < req.limit_nodes:
                            seen.add(other)
                            nodes.append(other)
                            nxt.append(other)
                frontier = nxt
        else:
            nodes = [i for i in self.core.graph.degree_ranking() if self.core.exists(i)][: req.limit_nodes]
        records = self.core.fetch(nodes)
        chosen = set(nodes)
        edges = [
            m.GraphEdge(source=e.source, target=e.target, edge_type=AssociationType(e.type), weight=e.weight)
            for n in nodes for e in self.core.graph.out_edges(n, types) if e.target in chosen
        ][: 10 * req.limit_nodes]
        graph_nodes: list[m.GraphNode] = []
        meta_edges: list[MetaEdge] = []
        for n in nodes:
            record = records.get(n)
            if record is None:
                continue
            graph_nodes.append(m.GraphNode(
                id=n, store=record.store, fidelity=record.fidelity.score,
                summary=record.content.summary or record.content.plain_text()[:160] or None,
                meta=record.meta if req.include_meta else None,
            ))
            if req.include_meta:
                meta_edges.extend(e.model_copy(update={"source_id": e.source_id or n})
                                  for e in record.meta.context_edges)
        return m.RecallGraphResponse(nodes=graph_nodes, edges=edges, total_nodes=len(graph_nodes),
                                     meta_edges=meta_edges)

    def _raw_hits(self, query: str, req: m.RecallRawQueryRequest, filters: RawFilters) -> list[uuid.UUID]:
        """Journal ids matching `query` that pass the filters, best first. The search widens
        (x4 each round, up to RAW_SEARCH_CAP hits) only while too few hits pass the filters."""
        groups = [req.session_id] if req.session_id else None
        wanted_ids = set(req.record_ids or ())
        want = max(req.limit * 4, 100)
        while True:
            hits = self.core.raw_text.search(query, want, groups)
            rank = {uuid.UUID(i): n for n, (i, _) in enumerate(hits)}
            if wanted_ids:
                rank = {i: n for i, n in rank.items() if i in wanted_ids}
            passing = sorted(self.core.journal.passing(filters, list(rank)), key=rank.__getitem__)
            if len(passing) >= req.limit or len(hits) < want or want >= RAW_SEARCH_CAP:
                return passing
            want *= 4

    @reporting
    def raw_query(self, req: m.RecallRawQueryRequest) -> m.RecallRawQueryResponse:
        start = to_ts(req.temporal.start) if req.temporal else None
        end = to_ts(req.temporal.end) if req.temporal else None
        filters = _raw_filters(req.include_private_scratch, req.include_sealed, req.secrecy_levels,
                               session_id=req.session_id, start=start, end=end)
        if req.derived_memory_id is not None:  # forensic recall: one hop from a dream's output
            sources = sources_of(self.core.get(req.derived_memory_id))
            if req.record_ids:
                sources = [i for i in sources if i in set(req.record_ids)]
            if not sources:
                return m.RecallRawQueryResponse(records=[], total_candidates=0)
            req = req.model_copy(update={"record_ids": sources})
        query = (req.query or "").strip()
        if query:
            passing = self._raw_hits(query, req, filters)
            total = len(passing)
            records, _ = self.core.journal.query(filters, ids=passing[: req.limit], count=False)
        else:
            records, total = self.core.journal.query(filters, ids=req.record_ids or None, limit=req.limit)
        records.sort(key=lambda r: (r.created_at, r.id))
        return m.RecallRawQueryResponse(records=records, total_candidates=total)


    def raw_query_plain(self, req: m.RecallRawQueryRequest) -> dict[str, Any] | None:
        """The answer of an empty journal to any query (nothing), in JSON without the response
        models; None (the model path answers) while the journal holds a record."""
        if req.derived_memory_id is not None or self.core.journal.counts()[0]:
            return None
        return {"records": [], "total_candidates": 0, "undecodable_ids": []}

    def sessions(self, req: m.RecallSessionsRequest) -> m.RecallSessionsResponse:
        """The journal's sessions from one aggregate query; agent and workspace are read from
        each listed session's first turn, so a page reads as many bodies as it lists (more
        only when it filters by agent or workspace)."""
        rows = self.core.journal.sessions(_raw_filters(req.include_private_scratch, req.include_sealed,
                                                       req.secrecy_levels))
        position = _cursor(req.cursor)
        found: list[m.JournalSession] = []
        while position < len(rows) and len(found) < req.limit:
            chunk = rows[position:position + (req.limit - len(found) if not (req.agent or req.workspace) else 500)]
            firsts = {r.id: r.metadata for r in self.core.journal.get([row[5] for row in chunk])}
            for n, row in enumerate(chunk):
                meta = firsts.get(row[5], {})
                agent, workspace = _text_or_none(meta.get("agent")), _text_or_none(meta.get("workspace"))
                if (req.agent and agent != req.agent) or (req.workspace and workspace != req.workspace):
                    continue
                found.append(m.JournalSession(session_id=row[0], agent=agent, workspace=workspace, turns=row[1],
                                              dreamed=row[4], first_at=from_ts(row[2]), last_at=from_ts(row[3])))
                if len(found) == req.limit:
                    chunk = chunk[:n + 1]
                    break
            position += len(chunk)
        return m.RecallSessionsResponse(sessions=found, total_sessions=len(rows),
                                        next_cursor=str(position) if position < len(rows) else None)


def _raw_filters(include_private_scratch: bool, include_sealed: bool, secrecy: Sequence[SecrecyLevel] | None, *,
                 session_id: str | None = None, start: float | None = None, end: float | None = None) -> RawFilters:
    return RawFilters(visibility=allowed_visibility(include_private_scratch, include_sealed),
                      secrecy=[s.value for s in (secrecy or DEFAULT_SECRECY)],
                      session_id=session_id, start=start, end=end)


def _cursor(value: str | None) -> int:
    if not value:
        return 0
    if not value.isdigit():
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"{value[:40]!r} is not a cursor of recall.sessions",
                       hint="pass the next_cursor of the previous answer, or none for the first page")
    return int(value)


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _trace(top: Sequence[uuid.UUID], gains: dict[uuid.UUID, float],
           reached: dict[uuid.UUID, Activation]) -> m.ActivationTrace | None:
    """How activation reached the returned memories it touched; None when it reached none."""
    touched = [i for i in top if i in reached]
    if not touched:
        return None
    strongest = max(touched, key=gains.__getitem__)
    return m.ActivationTrace(
        source_id=reached[strongest].path[0],
        activations=[m.ActivationNode(record_id=i, activation_level=round(gains[i], 6), hop=len(reached[i].path) - 1,
                                      edge_type=AssociationType(reached[i].edge_type))
                     for i in touched],
        gains={str(i): round(gains[i], 6) for i in touched},
    )


def _breakdown(t_rank: int | None, t_score: float | None, v_rank: int | None, v_score: float | None,
               fused: float, activation: float, fidelity: float, emotion: float | None) -> m.ScoreBreakdown:
    """A memory's score breakdown, rounded, built from the numbers ranking made (no validation:
    a recall makes one per memory it returns)."""
    return built(m.ScoreBreakdown, {
        "text": None if t_score is None else round(float(t_score), 4), "text_rank": t_rank,
        "vector": None if v_score is None else round(float(v_score), 4), "vector_rank": v_rank,
        "fused": round(float(fused), 6), "activation": round(float(activation), 6),
        "fidelity": round(float(fidelity), 6), "recency": None,
        "emotion": None if emotion is None else round(float(emotion), 6)})


def _inside(start: float | None, end: float | None, moment: float) -> bool:
    """Whether a record created at `moment` is inside the window [start, end]: always, unless
    both ends are given."""
    return start is None or end is None or start <= moment <= end


def _ranks(hits: Sequence[tuple[uuid.UUID, float]]) -> dict[int, tuple[int, float]]:
    """Each hit's (rank from 1, score) by its id's int: ints hash in C, UUIDs in Python."""
    return dict(zip(map(attrgetter("int"), map(itemgetter(0), hits)),
                    zip(range(1, len(hits) + 1), map(itemgetter(1), hits), strict=True), strict=True))


def best_first(scores: dict[uuid.UUID, float], n: int,
               created: Callable[[uuid.UUID], float]) -> list[uuid.UUID]:
    """The `n` best of `scores`, best first, the newer first among equal scores: what
    heapq.nlargest by (score, created) gives, with the created times read only for the ids at
    or above the n-th best score (the others cannot be among the n)."""
    if n <= 0:
        return []
    if len(scores) > n:
        floor = heapq.nlargest(n, scores.values())[-1]
        scores = {i: s for i, s in scores.items() if s >= floor}
    return heapq.nlargest(n, scores, key=lambda i: (scores[i], created(i)))


def topic_words(text: str) -> str:
    """A question without its question words ("when did Ann move" -> "Ann move"): they say
    that something is asked, not what about. The whole text if nothing else is left."""
    words = [w for w in text.split() if w.strip("?!.,;:'\"()").lower() not in QUESTION_WORDS]
    return " ".join(words) or text


def bucket_start(moment: datetime, granularity: m.TimelineGranularity) -> datetime:
    g = m.TimelineGranularity
    moment = moment.astimezone(UTC)
    if granularity is g.MINUTE:
        return moment.replace(second=0, microsecond=0)
    if granularity is g.HOUR:
        return moment.replace(minute=0, second=0, microsecond=0)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if granularity is g.DAY:
        return day
    if granularity is g.WEEK:
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def bucket_end(start: datetime, granularity: m.TimelineGranularity) -> datetime:
    g = m.TimelineGranularity
    if granularity is g.MONTH:
        return (start.replace(year=start.year + 1, month=1) if start.month == 12
                else start.replace(month=start.month + 1))
    step = {g.MINUTE: timedelta(minutes=1), g.HOUR: timedelta(hours=1), g.DAY: timedelta(days=1),
            g.WEEK: timedelta(weeks=1)}[granularity]
    return start + step
