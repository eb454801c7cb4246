"""Drive every method of a `cerememory.Client` written for the reference Python SDK (PyPI
`cerememory` 0.2.2) against a running server: `python refsdk_driver.py URL`.

Whichever `cerememory` is importable is driven — the reference SDK in its own directory, or this
project's package, whose `Client` is a drop-in for it — so one script proves both. It prints one
line per method and exits 1 when any of them failed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import cerememory as cm

FAILED: list[str] = []


def check(name: str, fn: Callable[[], Any]) -> Any:
    try:
        result = fn()
    except Exception:
        FAILED.append(name)
        print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        return None
    print(f"ok   {name}", flush=True)
    return result


def text(value: str) -> Any:
    return cm.MemoryContent(blocks=[cm.ContentBlock(modality=cm.Modality.TEXT, format="text/plain",
                                                    data=value.encode())])


def main(url: str) -> int:
    print(f"cerememory from {os.path.dirname(cm.__file__)}", flush=True)
    with cm.Client(url, timeout=60) as client:
        check("health", lambda: client.health().status)
        check("readiness", lambda: client.readiness().status)

        # convenience methods
        first = check("store", lambda: client.store("Coffee chat with Alice about the staging DB",
                                                    store="episodic", metadata={"topic": "coffee"}))
        assert isinstance(first, UUID), first
        second = client.encode_store(cm.EncodeStoreRequest(
            content=text("Alice moved the staging DB to eu-west-1"), store=cm.StoreType.SEMANTIC,
            associations=[cm.ManualAssociation(target_id=first, association_type=cm.AssociationType.SEMANTIC,
                                               weight=0.9)])).record_id
        hits = check("recall", lambda: client.recall("staging DB Alice", limit=5))
        assert isinstance(hits, list) and hits and all(h.relevance_score >= 0 for h in hits), hits
        record = check("get_record", lambda: client.get_record(second))
        assert record.id == second and record.associations, record
        assert isinstance(record.associations[0].last_co_activation, datetime)
        stats = check("stats", lambda: client.stats())
        assert stats.total_records >= 2, stats
        raw = check("store_raw", lambda: client.store_raw("user: can you rotate the key?", session_id="s1",
                                                          topic_id="keys"))
        assert isinstance(raw, UUID), raw
        client.store_raw("assistant: the deploy key rotates on Mondays", session_id="s1", topic_id="keys",
                         speaker="assistant")
        journal = check("recall_raw", lambda: client.recall_raw(session_id="s1", limit=10))
        assert isinstance(journal, list) and {r.id for r in journal} >= {raw}, journal
        dreamt = check("dream_tick", lambda: client.dream_tick(session_id="s1", dry_run=True))
        assert dreamt.groups_processed >= 0, dreamt

        # encode
        check("encode_store", lambda: client.encode_store(cm.EncodeStoreRequest(
            content=text("The deploy key rotates on Mondays"), store=cm.StoreType.PROCEDURAL,
            emotion=cm.EmotionVector(trust=0.5), context=cm.EncodeContext(session_id="s1"))))
        batch = check("encode_batch", lambda: client.encode_batch(cm.EncodeBatchRequest(records=[
            cm.EncodeStoreRequest(content=text("Bob likes tabs")),
            cm.EncodeStoreRequest(content=text("Carol likes spaces"))], infer_associations=True)))
        assert len(batch.results) == 2, batch
        check("encode_store_raw", lambda: client.encode_store_raw(cm.EncodeStoreRawRequest(
            session_id="s2", source=cm.RawSource.TOOL_IO, speaker=cm.RawSpeaker.TOOL,
            visibility=cm.RawVisibility.NORMAL, secrecy_level=cm.SecrecyLevel.PUBLIC, content=text("ls -> 3 files"))))
        check("encode_batch_store_raw", lambda: client.encode_batch_store_raw(cm.EncodeBatchStoreRawRequest(records=[
            cm.EncodeStoreRawRequest(session_id="s2", source=cm.RawSource.CONVERSATION, speaker=cm.RawSpeaker.USER,
                                     visibility=cm.RawVisibility.NORMAL, secrecy_level=cm.SecrecyLevel.PUBLIC,
                                     content=text("thanks"))])))
        check("encode_update", lambda: client.encode_update(first, cm.EncodeUpdateRequest(
            record_id=first, metadata={"topic": "coffee", "edited": True})))
        assert client.get_record(first).metadata.get("edited") is True

        # recall
        query = check("recall_query", lambda: client.recall_query(cm.RecallQueryRequest(
            cue=cm.RecallCue(text="staging DB"), limit=5, activation_depth=2)))
        assert query.memories, query
        if query.activation_trace is not None:
            assert isinstance(query.activation_trace.source_id, UUID)
        check("recall_raw_query", lambda: client.recall_raw_query(cm.RecallRawQueryRequest(query="rotate")))
        check("recall_associate", lambda: client.recall_associate(second, cm.RecallAssociateRequest(
            record_id=second, depth=2, min_weight=0.1)))
        now = datetime.now(UTC)
        timeline = check("recall_timeline", lambda: client.recall_timeline(cm.RecallTimelineRequest(
            range=cm.TemporalRange(start=now - timedelta(days=1), end=now + timedelta(hours=1)),
            granularity=cm.TimeGranularity.DAY)))
        assert sum(b.count for b in timeline.buckets) >= 2, timeline
        check("recall_graph", lambda: client.recall_graph(cm.RecallGraphRequest(center_id=second, depth=2)))

        # lifecycle
        check("lifecycle_consolidate", lambda: client.lifecycle_consolidate(cm.ConsolidateRequest(dry_run=True)))
        check("lifecycle_decay_tick", lambda: client.lifecycle_decay_tick(cm.DecayTickRequest()))
        check("lifecycle_dream_tick", lambda: client.lifecycle_dream_tick(cm.DreamTickRequest(dry_run=True)))
        check("lifecycle_set_mode", lambda: client.lifecycle_set_mode(cm.SetModeRequest(mode=cm.RecallMode.HUMAN)))
        archive = check("lifecycle_export", lambda: client.lifecycle_export(cm.ExportRequest()))
        assert archive.record_count >= 2 and archive.archive_data, archive
        check("lifecycle_import", lambda: client.lifecycle_import(cm.ImportRequest(
            archive_id=archive.archive_id, archive_data=archive.archive_data,
            conflict_resolution=cm.ConflictResolution.KEEP_EXISTING)))

        # introspect
        check("introspect_stats", lambda: client.introspect_stats())
        check("introspect_record", lambda: client.introspect_record(first))
        check("introspect_decay_forecast", lambda: client.introspect_decay_forecast(cm.DecayForecastRequest(
            record_ids=[first], forecast_at=now + timedelta(days=30))))
        check("introspect_evolution", lambda: client.introspect_evolution())

        # errors are the SDK's exception classes
        def missing() -> None:
            try:
                client.get_record(uuid4())
            except cm.RecordNotFoundError as exc:
                assert isinstance(exc, cm.CerememoryError) and exc.code == "RECORD_NOT_FOUND"
                assert exc.status_code == 404 and exc.message
                return
            raise AssertionError("no RecordNotFoundError")

        check("errors", missing)

        # forget last: every record it names is gone
        deleted = check("forget", lambda: client.forget(first, second, confirm=True))
        assert deleted == 2, deleted
        check("lifecycle_forget", lambda: client.lifecycle_forget(cm.ForgetRequest(
            record_ids=[batch.results[0].record_id], confirm=True)))
    asyncio.run(drive_async(url))
    print("FAILED: " + ", ".join(FAILED) if FAILED else "all methods ok")
    return 1 if FAILED else 0


async def drive_async(url: str) -> None:
    """The async client's convenience methods and a typed one (the rest share the sync paths)."""
    async with cm.AsyncClient(url, timeout=60) as client:
        async def scenario() -> None:
            assert (await client.health()).status and (await client.readiness()).status
            rid = await client.store("async: the VPN config lives in the ops wiki", store="semantic")
            assert isinstance(rid, UUID)
            hits = await client.recall("VPN config ops wiki", limit=3)
            assert isinstance(hits, list) and rid in [h.record.id for h in hits], hits
            assert (await client.get_record(rid)).id == rid
            raw = await client.store_raw("user: where is the VPN config?", session_id="a1")
            assert raw in [r.id for r in await client.recall_raw(session_id="a1")]
            assert (await client.dream_tick(session_id="a1", dry_run=True)).groups_processed >= 0
            assert (await client.stats()).total_records >= 1
            query = await client.recall_query(cm.RecallQueryRequest(cue=cm.RecallCue(text="VPN"), limit=3))
            assert query.memories
            assert await client.forget(rid) == 1

        await asyncio.wait_for(scenario(), 120)
        print("ok   async client", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
