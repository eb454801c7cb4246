"""Dream processing through the real interfaces: the embedded API, the CLI as a subprocess and a
real HTTP server. Times are explicit `created_at` values; nothing sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

import cerememory
from cerememory import CMPError, ErrorCode
from cerememory.transport.client import Client

from .conftest import ServeProcess, ServerThread
from .crashpoint import kill_at

T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)
CANARY = "ZEBRA-CANARY-7731"


def raw(mem, text: str, at: datetime, session: str = "s1", **kw):
    return mem.store_raw(text, session_id=session, created_at=at, **kw).record_id


def plan(mem, **kw) -> list:
    return mem.dream_tick(dry_run=True, max_groups=1000, **kw).groups


def sizes(groups) -> list[int]:
    return [g.raw_record_count for g in groups]


# ---------------------------------------------------------------- grouping boundaries


@pytest.mark.parametrize("gap,expected", [(timedelta(minutes=45), [2]),
                                          (timedelta(minutes=45, seconds=1), [1, 1])])
def test_hard_gap_is_more_than_45_minutes(mem, gap, expected):
    raw(mem, "billing migration cutover plan", T0)
    raw(mem, "billing migration cutover plan again", T0 + gap)
    assert sizes(plan(mem)) == expected


@pytest.mark.parametrize("gap,expected", [(timedelta(minutes=10), [2]),
                                          (timedelta(minutes=10, seconds=1), [1, 1])])
def test_soft_gap_is_more_than_10_minutes_with_low_overlap(mem, gap, expected):
    raw(mem, "billing migration cutover", T0)
    raw(mem, "holiday pictures beach", T0 + gap)
    assert sizes(plan(mem)) == expected


def _words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i:02d}" for i in range(n))


@pytest.mark.parametrize("own,expected", [(15, [1, 1]),  # Jaccard 3/(3+20+15) = 0.0789 < 0.08: split
                                          (14, [2])])  # Jaccard 3/(3+20+14) = 0.0811: same topic
def test_jaccard_threshold_after_10_minutes(mem, own, expected):
    shared = "alpha bravo charlie"
    raw(mem, f"{shared} {_words('segword', 20)}", T0)
    raw(mem, f"{shared} {_words('newword', own)}", T0 + timedelta(minutes=11))
    assert sizes(plan(mem)) == expected


def test_overlap_is_measured_against_the_whole_segment_so_far(mem):
    raw(mem, "deploy pipeline", T0)
    raw(mem, "pipeline runners", T0 + timedelta(minutes=5))
    raw(mem, "runners deploy budget", T0 + timedelta(minutes=20))  # overlaps the segment, not only its last record
    assert sizes(plan(mem)) == [3]


def test_explicit_and_inferred_topics_mixed_in_one_session(mem):
    raw(mem, "lunch menu pasta", T0)
    raw(mem, "deploy window friday", T0 + timedelta(minutes=5), topic_id="deploy")
    raw(mem, "lunch menu salad", T0 + timedelta(minutes=10))
    raw(mem, "deploy rollback plan", T0 + timedelta(hours=3), topic_id="deploy")  # same day: same group
    groups = plan(mem)
    assert [(g.topic_hint, g.topic_inferred, g.raw_record_count) for g in groups] == [
        ("lunch+menu+pasta", True, 2), ("deploy", False, 2)]


def test_utc_day_boundary_splits_even_a_continuous_topic(mem):
    raw(mem, "release notes draft", datetime(2025, 3, 4, 23, 55, tzinfo=UTC))
    raw(mem, "release notes draft", datetime(2025, 3, 5, 0, 5, tzinfo=UTC))
    # 01:30 at UTC+2 is 23:30 UTC of the day before
    raw(mem, "release notes draft", datetime.fromisoformat("2025-03-05T01:30:00+02:00"))
    groups = plan(mem)
    assert [(g.range_start.date().isoformat(), g.raw_record_count) for g in groups] == [
        ("2025-03-04", 2), ("2025-03-05", 1)]


def test_explicit_topics_split_by_utc_day_and_session(mem):
    raw(mem, "deploy", datetime(2025, 3, 4, 23, 50, tzinfo=UTC), topic_id="deploy")
    raw(mem, "deploy", datetime(2025, 3, 5, 0, 10, tzinfo=UTC), topic_id="deploy")
    raw(mem, "deploy", datetime(2025, 3, 5, 0, 20, tzinfo=UTC), session="s2", topic_id="deploy")
    assert sizes(plan(mem)) == [1, 1, 1]


def test_empty_token_records_never_split_a_topic_on_their_own(mem):
    raw(mem, "ok", T0)
    raw(mem, "?", T0 + timedelta(minutes=20))
    raw(mem, "hi", T0 + timedelta(minutes=40))
    groups = plan(mem)
    assert sizes(groups) == [3]
    assert groups[0].topic_hint == "auto-20250304-1"  # no tokens: a fallback hint, and no topic signal
    assert groups[0].topic_inferred


def test_an_empty_record_joins_the_segment_and_overlap_still_counts(mem):
    raw(mem, "billing migration", T0)
    raw(mem, "ok", T0 + timedelta(minutes=15))
    raw(mem, "holiday beach", T0 + timedelta(minutes=30))
    assert sizes(plan(mem)) == [2, 1]


def test_groups_oldest_first_and_max_groups(mem):
    for n in range(5):
        raw(mem, f"topic number {n} words", T0 + timedelta(hours=n), session=f"s{4 - n}")
    result = mem.dream_tick(max_groups=2)
    assert [g.session_id for g in result.groups] == ["s4", "s3"]
    assert result.groups_pending == 3
    assert [g.session_id for g in mem.dream_tick(max_groups=10).groups] == ["s2", "s1", "s0"]


def test_inferred_hint_is_the_three_most_frequent_tokens_ties_alphabetical(mem):
    raw(mem, "Alice: zulu yankee xray xray", T0)
    raw(mem, "Bob: yankee xray mike", T0 + timedelta(minutes=1))
    assert plan(mem)[0].topic_hint == "xray+yankee+mike"  # speaker names are not topics


# ---------------------------------------------------------------- summaries, outputs, backlinks


CONVERSATION = [
    "Alice: Morning! How was the weekend?",
    "Bob: ok",
    "Alice: We decided to move the billing migration to Friday March 14.",
    "Bob: Then I will schedule the Postgres cutover at 06:00 UTC, before the billing export.",
    "Alice: lol sure",
    "Bob: The canary stays at 5% for two hours, then billing goes to 100%.",
]


def test_extractive_summary_keeps_the_informative_sentences_with_speakers(mem):
    for i, text in enumerate(CONVERSATION):
        raw(mem, text, T0 + timedelta(minutes=i), speaker="user" if i % 2 == 0 else "assistant")
    result = mem.dream_tick()
    group = result.groups[0]
    assert (group.summariser, group.llm_fallback_reason) == ("extractive", None)
    summary = mem.inspect(group.episodic_summary_id)
    text = summary.content.plain_text()
    assert "Alice: We decided to move the billing migration to Friday March 14." in text
    assert "Bob: Then I will schedule the Postgres cutover at 06:00 UTC" in text
    assert "5%" in text
    assert "lol" not in text and "Bob: ok" not in text  # content-free turns are left out
    assert text.startswith("Session s1 — billing")
    assert summary.content.summary.startswith("billing") and len(summary.content.summary) <= 160
    assert summary.store == "episodic" and summary.created_at == T0 + timedelta(minutes=5)


def test_a_role_written_in_the_text_is_not_repeated_in_the_summary(mem):
    """The README's own example: a journal turn "user: can you rotate the key?" by the user."""
    raw(mem, "user: can you rotate the deploy key before Friday March 14?", T0, speaker="user")
    raw(mem, "assistant: Rotated the deploy key for Berlin at 06:00 UTC.", T0 + timedelta(minutes=1),
        speaker="assistant")
    summary = mem.inspect(mem.dream_tick().groups[0].episodic_summary_id).content.plain_text()
    assert "user: user:" not in summary and "assistant: assistant:" not in summary
    assert "assistant: Rotated the deploy key for Berlin at 06:00 UTC." in summary


def test_tool_calls_and_their_output_never_become_facts(mem):
    raw(mem, "Alice: We decided to move the billing migration to Friday March 14.", T0)
    raw(mem, "Bob: Then Postgres goes over at 06:00 UTC on Friday March 14.", T0 + timedelta(minutes=1),
        speaker="assistant")
    raw(mem, 'Bash {"command": "psql -c \'SELECT 42 FROM Billing\'"}', T0 + timedelta(minutes=2),
        speaker="assistant", source="tool_io")
    raw(mem, "Billing Export 2024-03-14: 42 rows in 0.06 s from Postgres Berlin", T0 + timedelta(minutes=3),
        speaker="tool", source="tool_io")
    semantic = mem.inspect(mem.dream_tick().groups[0].semantic_id).content.plain_text()
    assert "billing migration" in semantic
    assert "psql" not in semantic and "42 rows" not in semantic


def test_tool_noise_stays_out_and_a_summary_without_facts_promotes_nothing(mem):
    """The README's example with the tool call that answered it: the summary keeps the
    conversation only; no sentence states a fact, so nothing becomes one (the dry run says so
    first), and consolidation does not promote the dream's summary behind the dream's back."""
    raw(mem, "user: can you rotate the key?", T0, session="chat-42", speaker="user")
    raw(mem, "assistant: sure, rotating the deploy key now", T0 + timedelta(minutes=1), session="chat-42",
        speaker="assistant")
    raw(mem, '{"tool": "bash", "cmd": "vault write secret/deploy key=abc"}', T0 + timedelta(minutes=2),
        session="chat-42", speaker="tool", source="tool_io")
    raw(mem, "Success! Data written to: secret/deploy", T0 + timedelta(minutes=3), session="chat-42",
        speaker="tool", source="tool_io")
    assert mem.dream_tick(dry_run=True).semantic_nodes_created == 0
    done = mem.dream_tick()
    (group,) = done.groups
    assert (done.episodic_summaries_created, done.semantic_nodes_created, group.semantic_id) == (1, 0, None)
    summary = mem.inspect(group.episodic_summary_id).content
    assert "user: can you rotate the key?" in summary.plain_text()
    assert "user: user:" not in summary.plain_text()
    for noise in ("vault write", "Data written", "tool:"):
        assert noise not in summary.plain_text() and noise not in (summary.summary or "")
    assert mem.consolidate("full").promotions == []
    assert mem.recall("deploy key", stores=["semantic"]).memories == []


def test_a_dream_fact_is_not_promoted_a_second_time_by_consolidation(mem):
    for i, text in enumerate(CONVERSATION):
        raw(mem, text, T0 + timedelta(minutes=i), speaker="user" if i % 2 == 0 else "assistant")
    assert mem.dream_tick().semantic_nodes_created == 1
    assert mem.consolidate("full").promotions == []
    assert len(mem.recall("billing migration Friday", stores=["semantic"]).memories) == 1


def test_summary_is_deterministic_and_capped(tmp_path):
    texts = [f"Speaker{i % 3}: In 2024 Project Falcon{i} shipped {i} features to Berlin on Monday." for i in range(200)]
    outputs = []
    for n in range(2):
        with cerememory.open(tmp_path / f"d{n}", semantic="off", dream__summary_max_chars=600) as mem:
            mem.store_raw_batch([{"session_id": "s", "content": {"blocks": [{"text": t}]},
                                  "created_at": (T0 + timedelta(seconds=i)).isoformat()} for i, t in enumerate(texts)])
            group = mem.dream_tick().groups[0]
            outputs.append(mem.inspect(group.episodic_summary_id).content.plain_text())
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) <= 600


def test_outputs_meta_promotion_and_backlinks_both_ways(mem):
    ids = [raw(mem, text, T0 + timedelta(minutes=i)) for i, text in enumerate(CONVERSATION)]
    result = mem.dream_tick()
    assert (result.groups_processed, result.raw_records_processed, result.episodic_summaries_created,
            result.semantic_nodes_created) == (1, 6, 1, 1)
    group = result.groups[0]
    episodic, semantic = mem.inspect(group.episodic_summary_id), mem.inspect(group.semantic_id)
    # derived -> sources
    assert episodic.meta.capture_status == "inferred" and episodic.meta.confidence == 1.0
    assert [e.raw_record_id for e in episodic.meta.evidence] == ids
    assert episodic.metadata["_origin"]["raw_record_ids"] == [str(i) for i in ids]
    assert episodic.metadata["_dream"]["summary_stats"]["normal_records"] == 6
    assert semantic.store == "semantic" and semantic.meta.capture_status == "inferred"
    assert semantic.meta.source_record_ids == [episodic.id]
    assert semantic.meta.context_edges[0].target_id == episodic.id
    assert "We decided to move the billing migration" in semantic.content.plain_text()
    assert {(a.target_id, a.association_type, a.weight) for a in episodic.associations} == {
        (semantic.id, "semantic", 1.0)}
    assert {a.target_id for a in semantic.associations} == {episodic.id}
    # sources -> derived
    for record in mem.raw_recall(record_ids=ids, limit=100).records if hasattr(mem, "raw_recall") else []:
        assert record.derived_memory_ids == [episodic.id, semantic.id]
        assert record.metadata["_dream"]["last_summary_id"] == str(episodic.id)
    # forensic recall: one hop from either derived record to the verbatim text
    for derived in (episodic.id, semantic.id):
        hop = mem.dispatch("recall.raw_query", {"derived_memory_id": str(derived), "limit": 100})
        assert [r["content"]["blocks"][0]["text"] for r in hop["records"]] == CONVERSATION


def test_no_promotion_without_two_normal_records_or_a_topic_signal_or_when_disabled(mem):
    raw(mem, "Single record about the Falcon launch on May 3", T0, session="one")
    raw(mem, "ok", T0, session="signal-less")
    raw(mem, "?", T0 + timedelta(minutes=1), session="signal-less")
    raw(mem, "Alice: we ship Falcon on May 3", T0, session="off")
    raw(mem, "Bob: Falcon ships May 3 then", T0 + timedelta(minutes=1), session="off")
    assert mem.dream_tick(session_id="one").semantic_nodes_created == 0
    assert mem.dream_tick(session_id="signal-less").semantic_nodes_created == 0
    off = mem.dream_tick(session_id="off", promote_semantic=False)
    assert (off.episodic_summaries_created, off.semantic_nodes_created, off.groups[0].semantic_id) == (1, 0, None)


def test_rerun_processes_nothing_twice_and_new_records_form_new_groups(mem):
    for i, text in enumerate(CONVERSATION):
        raw(mem, text, T0 + timedelta(minutes=i))
    first = mem.dream_tick()
    assert first.groups_processed == 1
    again = mem.dream_tick()
    assert (again.groups_processed, again.raw_records_processed) == (0, 0)
    late = raw(mem, "Alice: Falcon review moved to 15:00 on Thursday", T0 + timedelta(minutes=7))
    third = mem.dream_tick()
    assert third.raw_records_processed == 1
    stats = mem.stats()
    assert (stats.dream_episodic_summaries, stats.dream_semantic_nodes, stats.raw_journal_pending_dream) == (2, 1, 0)
    assert stats.last_dream_tick_at is not None
    record = mem.raw_recall(record_ids=[late]).records[0]
    assert record.derived_memory_ids == [third.groups[0].episodic_summary_id]


def test_dry_run_reports_and_writes_nothing(mem):
    for i, text in enumerate(CONVERSATION):
        raw(mem, text, T0 + timedelta(minutes=i))
    dry = mem.dream_tick(dry_run=True)
    assert (dry.dry_run, dry.groups_processed, dry.episodic_summaries_created, dry.semantic_nodes_created) == (
        True, 1, 1, 1)
    assert dry.groups[0].episodic_summary_id is None and dry.groups[0].summariser is None
    stats = mem.stats()
    assert (stats.total_records, stats.raw_journal_pending_dream, stats.dream_episodic_summaries) == (0, 6, 0)


def test_stats_report_pending_and_last_dream(mem):
    raw(mem, "one thing", T0)
    raw(mem, "another", T0, session="s2")
    assert mem.stats().raw_journal_pending_dream == 2 and mem.stats().last_dream_tick_at is None
    mem.dream_tick(session_id="s2")
    stats = mem.stats()
    assert (stats.raw_journal_pending_dream, stats.dream_episodic_summaries) == (1, 1)
    assert stats.last_dream_tick_at is not None and not stats.background_dream_enabled


# ---------------------------------------------------------------- redaction


def _all_text(value) -> str:
    return json.dumps(value.model_dump(mode="json") if hasattr(value, "model_dump") else value, default=str)


def test_canary_in_redacted_records_never_leaks(mem):
    raw(mem, "Alice: the rollout of Falcon starts Monday at 09:00", T0)
    raw(mem, f"Bob: the vault password is {CANARY}", T0 + timedelta(minutes=1), secrecy_level="secret")
    raw(mem, f"thinking: maybe {CANARY} again", T0 + timedelta(minutes=2), visibility="private_scratch")
    raw(mem, f"sealed note {CANARY}", T0 + timedelta(minutes=3), visibility="sealed", secrecy_level="sensitive")
    raw(mem, f"{CANARY} secret scratch", T0 + timedelta(minutes=4), visibility="private_scratch",
        secrecy_level="secret")
    raw(mem, "Bob: Falcon rollout confirmed for Monday 09:00", T0 + timedelta(minutes=5))
    result = mem.dream_tick(include_private_scratch=True, include_sealed=True,
                            secrecy_levels=["public", "sensitive", "secret"])
    group = result.groups[0]
    assert (group.raw_record_count, group.normal_records, group.secret_redacted, group.sealed_redacted,
            group.private_scratch_redacted, group.redacted_total) == (6, 2, 2, 1, 1, 4)
    assert CANARY.lower() not in group.topic_hint and "zebra" not in group.topic_hint
    assert CANARY not in _all_text(result)
    derived = [mem.inspect(group.episodic_summary_id), mem.inspect(group.semantic_id)]
    for record in derived:
        assert CANARY not in _all_text(record)
        assert "zebra" not in _all_text(record).lower()
    assert "4 redacted records not quoted" in derived[0].content.plain_text()
    assert derived[0].metadata["_dream"]["summary_stats"]["redacted_total"] == 4
    # the full-text index and recall results
    for query in (CANARY, "ZEBRA", "vault password", "sealed note"):
        assert mem.recall(query, limit=50).memories == [] or all(
            CANARY not in _all_text(hit) for hit in mem.recall(query, limit=50).memories)
    hits = mem.recall("vault password ZEBRA CANARY", limit=50)
    assert all(h.record.id not in {r.id for r in derived} for h in hits.memories)
    assert mem.engine.core.text.search(CANARY.lower(), 50, None) == []
    assert mem.engine.core.text.search("zebra", 50, None) == []
    everything = mem.recall(limit=100)
    assert CANARY not in _all_text(everything)
    # the raw journal keeps the verbatim secret, visible only when asked for
    assert mem.raw_recall(CANARY).records == []
    assert len(mem.raw_recall(CANARY, secrecy_levels=["secret"]).records) == 1


def test_a_credential_pasted_into_an_ordinary_turn_is_not_copied_into_derived_records(mem):
    key = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY"
    raw(mem, f"Alice: the billing deploy on Friday uses key {key} for the payments API", T0)
    raw(mem, "Bob: agreed, the billing deploy ships Friday after the payments review", T0 + timedelta(minutes=1))
    done = mem.dream_tick(max_groups=10)
    derived = [mem.inspect(i) for g in done.groups for i in (g.episodic_summary_id, g.semantic_id) if i]
    assert derived
    text = _all_text([d.model_dump(mode="json") for d in derived])
    assert key not in text and "[REDACTED]" in text
    assert key not in _all_text(mem.recall("billing deploy payments", limit=50))


def test_default_selection_leaves_redacted_records_pending(mem):
    raw(mem, "public words here", T0)
    raw(mem, f"secret {CANARY}", T0 + timedelta(minutes=1), secrecy_level="secret")
    raw(mem, "scratch thoughts", T0 + timedelta(minutes=2), visibility="private_scratch")
    result = mem.dream_tick()
    assert result.raw_records_processed == 1
    assert mem.stats().raw_journal_pending_dream == 2


def test_suppressed_records_are_never_dreamed(mem, tmp_path):
    keep = raw(mem, "Alice: Falcon ships Monday", T0)
    gone = raw(mem, f"Bob: oops I pasted {CANARY}", T0 + timedelta(minutes=1))
    mem.update_raw(gone, suppressed=True)
    assert mem.raw_recall(CANARY).records == []
    result = mem.dream_tick()
    assert result.raw_records_processed == 1
    assert CANARY not in mem.inspect(result.groups[0].episodic_summary_id).content.plain_text()
    assert mem.stats().raw_journal_pending_dream == 0
    mem.update_raw(keep, secrecy_level="secret", visibility="sealed")
    assert mem.raw_recall(session_id="s1").records == []
    with pytest.raises(CMPError) as err:
        mem.update_raw(keep)
    assert err.value.code is ErrorCode.VALIDATION_ERROR and "nothing to update" in err.value.message
    with pytest.raises(CMPError) as err:
        mem.update_raw("01890000-0000-7000-8000-000000000000", suppressed=True)
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND


def test_raw_query_from_a_record_no_dream_made(mem):
    plain = mem.store("a memory stored by hand").record_id
    assert mem.dispatch("recall.raw_query", {"derived_memory_id": str(plain)})["records"] == []
    with pytest.raises(CMPError) as err:
        mem.dispatch("recall.raw_query", {"derived_memory_id": "01890000-0000-7000-8000-000000000000"})
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND


def test_bad_requests_get_clear_errors(mem):
    for body, field in (({"max_groups": 0}, "max_groups"), ({"secrecy_levels": ["top"]}, "secrecy_levels"),
                        ({"dry_run": "maybe"}, "dry_run")):
        with pytest.raises(CMPError) as err:
            mem.dispatch("lifecycle.dream_tick", body)
        assert err.value.code is ErrorCode.VALIDATION_ERROR and field in err.value.message


# ---------------------------------------------------------------- crash safety


CRASH_SCRIPT = textwrap.dedent("""
    import sys
    from datetime import UTC, datetime, timedelta
    import cerememory
    with cerememory.open(sys.argv[1], semantic="off") as mem:
        if sys.argv[2] == "fill":
            t0 = datetime(2025, 3, 4, tzinfo=UTC)
            for g in range(4):
                for i in range(3):
                    mem.store_raw(f"Alice: topic {g} falcon launch step {i} on Monday",
                                  session_id=f"s{g}", created_at=t0 + timedelta(minutes=i))
        else:
            print(mem.dream_tick(max_groups=10).model_dump_json())
""")


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env["CEREMEMORY_CONFIG"] = str(data.parent / "none.toml")
    return env


def _run(script: Path, data: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), str(data), mode], capture_output=True, env=_env(data),
                          timeout=120, text=True)


@pytest.mark.parametrize("point,committed", [("dream.group_writing:2", 1), ("dream.group_committed:2", 2)])
def test_a_crash_mid_dream_leaves_no_half_group_and_a_rerun_finishes(tmp_path, point, committed):
    script = tmp_path / "dream_child.py"
    script.write_text(CRASH_SCRIPT)
    data = tmp_path / "data"
    assert _run(script, data, "fill").returncode == 0
    kill_at(point, [sys.executable, str(script), str(data), "dream"], _env(data))
    with cerememory.open(data, semantic="off") as mem:
        stats = mem.stats()
        assert stats.records_by_store["episodic"] == committed == stats.dream_episodic_summaries
        assert stats.records_by_store["semantic"] == committed
        assert stats.raw_journal_pending_dream == 12 - 3 * committed
        done = [r for r in mem.raw_recall(limit=100).records if r.derived_memory_ids]
        assert len(done) == 3 * committed  # whole groups only
        assert mem.recall("falcon", limit=50).memories  # the text index follows the database
    rerun = _run(script, data, "dream")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["groups_processed"] == 4 - committed
    with cerememory.open(data, semantic="off") as mem:
        stats = mem.stats()
        assert (stats.dream_episodic_summaries, stats.raw_journal_pending_dream) == (4, 0)
        assert stats.records_by_store["episodic"] == 4
        assert all(len(r.derived_memory_ids) == 2 for r in mem.raw_recall(limit=100).records)


# ---------------------------------------------------------------- a group that fails


def _write_older_data(data_dir: Path, sql: str, params: list) -> None:
    """Change rows as an older Cerememory could have written them (no process owns the dir)."""
    import duckdb

    with duckdb.connect(str(data_dir / "cerememory.duckdb")) as db:
        db.execute(sql, params)


def test_a_failing_group_is_recorded_and_skipped_and_every_other_group_is_dreamed(data_dir, tmp_path, cli):
    with cerememory.open(data_dir, semantic="off") as mem:
        raw(mem, "Alice: the heron survey starts at dawn on Monday", T0, session="early")
        poison = [raw(mem, f"Bob: falcon launch step {i} is ready", T0 + timedelta(minutes=10 + i),
                      session="poison", topic_id="launch") for i in range(2)]
        raw(mem, "Carol: the owl count is on Friday evening", T0 + timedelta(minutes=30), session="late")
    # ids are bounded at encode time now; a topic id of two million characters is older data
    _write_older_data(data_dir, "UPDATE raw_journal SET topic_id = ? WHERE session_id = 'poison'",
                      ["t" * 2_000_000])

    first = cli("dream-tick", "--json")  # a group at a time, embedded
    assert first.code == 0, first.stderr
    body = first.json()
    assert [g["session_id"] for g in body["groups"]] == ["early", "late"]  # the group after it too
    [failed] = body["groups_failed"]
    assert (failed["session_id"], failed["raw_record_count"], failed["code"]) == ("poison", 2, "CONTENT_TOO_LARGE")
    assert "limit" in failed["reason"] and failed["first_raw_record_id"] == str(poison[0])
    assert len(failed["topic_hint"]) == 200

    def tick(url: str) -> dict:
        response = httpx.post(f"{url}/v1/lifecycle/dream-tick", json={"max_groups": 10}, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()

    server = ServeProcess.serve(data_dir, tmp_path)  # the failure was persisted
    try:
        again = tick(server.url)  # not retried: its raw records did not change
        assert (again["groups_processed"], again["groups_failed"], again["groups_skipped"]) == (0, [], 1)
        shown = cli("dream-tick", "--server-url", server.url, env={"COLUMNS": "200"})
        assert "1 group skipped: they failed before" in shown.stdout
        with Client(server.url) as client:
            client.update_raw(poison[1], suppressed=True)  # the group changed: it is tried again
            retried = tick(server.url)
            assert retried["groups_skipped"] == 0
            assert [(f["raw_record_count"], f["code"]) for f in retried["groups_failed"]] == [(1, "CONTENT_TOO_LARGE")]
            assert client.stats().raw_journal_pending_dream == 1  # a failed group's records stay pending
    finally:
        assert server.stop() == 0


# ---------------------------------------------------------------- CLI and server


def test_cli_dream_tick_embedded(cli, data_dir):
    with cerememory.open(data_dir, semantic="off") as mem:
        for i, text in enumerate(CONVERSATION):
            raw(mem, text, T0 + timedelta(minutes=i))
        raw(mem, "other session talk about Falcon on Monday", T0, session="s2")
    dry = cli("dream-tick", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert dry.json()["dry_run"] is True and dry.json()["groups_processed"] == 2
    table = cli("dream-tick", "--session", "s1", "--no-promote", env={"COLUMNS": "200"})
    assert table.code == 0, table.stderr
    assert "dreamed 1 topic group (6 raw records)" in table.stdout and "extractive" in table.stdout
    assert "0 semantic facts created" in table.stdout
    rest = cli("dream-tick", "--max-groups", "5", "--json")
    assert rest.json()["groups_processed"] == 1 and rest.json()["groups"][0]["session_id"] == "s2"
    bad = cli("dream-tick", "--max-groups", "0", "--json")
    assert bad.code == 2 and bad.json()["error"]["code"] == "VALIDATION_ERROR"
    stats = cli("stats", "--json").json()
    assert (stats["dream_episodic_summaries"], stats["dream_semantic_nodes"]) == (2, 0)  # --no-promote; 1 record


def test_cli_and_http_client_against_a_real_server(cli, mem):
    ids = [raw(mem, text, T0 + timedelta(minutes=i)) for i, text in enumerate(CONVERSATION)]
    server = ServerThread(mem.engine)
    try:
        with Client(server.url) as client:
            client.update_raw(ids[1], suppressed=True)
            assert client.dream_tick(dry_run=True).groups[0].raw_record_count == 5
        result = cli("dream-tick", "--server-url", server.url, "--json")
        assert result.code == 0, result.stderr
        body = result.json()
        assert (body["groups_processed"], body["raw_records_processed"]) == (1, 5)
        hop = cli("raw-recall", "--server-url", server.url, "--ids", str(ids[0]), "--json").json()
        assert hop["records"][0]["derived_memory_ids"] == [body["groups"][0]["episodic_summary_id"],
                                                           body["groups"][0]["semantic_id"]]
    finally:
        server.stop()


def test_background_dream_runs_in_the_scheduler(tmp_path):
    from cerememory.dynamics.scheduler import Scheduler

    with cerememory.open(tmp_path / "d", semantic="off", dream__background_interval_secs=0.05) as mem:
        raw_id = raw(mem, "Alice: Falcon ships Monday", T0)
        scheduler = Scheduler(mem.engine, decay_interval=0)
        scheduler.start()
        try:
            assert mem.stats().background_dream_enabled
            import time

            deadline = time.monotonic() + 20
            while mem.stats().raw_journal_pending_dream and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            scheduler.stop()
        assert mem.stats().raw_journal_pending_dream == 0
        assert not mem.stats().background_dream_enabled
    audit = [json.loads(line) for line in (tmp_path / "d" / "audit.jsonl").read_text().splitlines()]
    background = [e for e in audit if e["op"] == "lifecycle.dream_tick" and e["transport"] == "scheduler"]
    assert [e["phase"] for e in background][:2] == ["intent", "done"]  # background work is audited too
    assert str(raw_id) in background[0]["record_ids"]
    with cerememory.open(tmp_path / "e", semantic="off", dream__background_enabled=False) as mem:
        scheduler = Scheduler(mem.engine, decay_interval=0)
        scheduler.start()
        assert not mem.stats().background_dream_enabled
        scheduler.stop()
