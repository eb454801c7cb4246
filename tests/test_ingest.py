"""Ingestion end to end: sessions into the raw journal (embedded and through a running server),
incremental reruns, rewritten files, secrets that never reach the journal, the index or recall."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cerememory.cmp.errors import CMPError, ErrorCode
from cerememory.ingest import IngestSettings, ingest, open_state

from .conftest import ServeProcess
from .test_ingest_samples import (
    AWS_KEY,
    JWT,
    OPENAI_KEY,
    SECRETS,
    aider_history,
    claude_lines,
    claude_project,
    codex_rollout,
    cursor_db,
    gemini_session,
    jsonl,
    pi_session,
)

CLAUDE_SESSION = "c0ffee00-0000-4000-8000-000000000001"


def all_agents(home: Path) -> dict[str, Path]:
    return {"claude_code": claude_project(home), "codex": codex_rollout(home), "gemini": gemini_session(home),
            "cursor": cursor_db(home), "aider": aider_history(home / "code" / "proj"), "pi": pi_session(home)}


def run(mem, tmp_path: Path, **options):
    options.setdefault("paths", [tmp_path / "home"])
    with open_state(mem, tmp_path / "ingest") as state:
        return ingest(mem, state=state, **options)


def journal(mem, session_id: str | None = None) -> list:
    return mem.raw_recall(session_id=session_id, limit=1000, include_private_scratch=True,
                          include_sealed=True).records


def texts(records) -> list[str]:
    return [r.content.blocks[0].text for r in records]


def test_every_agent_lands_in_the_journal_with_its_metadata(mem, tmp_path):
    all_agents(tmp_path / "home")
    summary = run(mem, tmp_path)
    counts = {a: s.turns_ingested for a, s in summary.agents.items()}
    assert counts == {"claude_code": 8, "codex": 5, "gemini": 6, "cursor": 6, "aider": 6, "pi": 5}
    assert summary.agents["cursor"].turns_skipped == 1 and summary.total.errors == []
    assert summary.agents["claude_code"].sessions == 1 and summary.agents["aider"].sessions == 1
    records = journal(mem, f"claude_code:{CLAUDE_SESSION}")
    assert len(records) == 8 and len(journal(mem)) == 36
    call = next(r for r in records if r.turn_id.endswith("/1") and r.turn_id.startswith("claude_code:"))
    assert (call.source.value, call.speaker.value) == ("tool_io", "assistant")
    assert call.metadata["agent"] == "claude_code" and call.metadata["workspace"] == "/home/ada/app"
    assert call.metadata["tool"] == "Bash" and call.metadata["redactions"] == 0
    assert call.metadata["source_path"].endswith(f"{CLAUDE_SESSION}.jsonl") and call.metadata["line"] == 4
    assert call.created_at == datetime(2026, 3, 1, 10, 0, 5, tzinfo=UTC)  # the log's time, not now
    gemini = {r.turn_id: r for r in journal(mem, "gemini:gem-session-1")}
    assert gemini["gemini:gem-session-1:m3"].metadata["timestamp_inferred"] is True
    previous = gemini["gemini:gem-session-1:m2/read_file-1/result"]
    assert gemini["gemini:gem-session-1:m3"].created_at == previous.created_at  # the turn before stands in


def test_rerun_ingests_only_new_turns(mem, tmp_path):
    made = all_agents(tmp_path / "home")
    first = run(mem, tmp_path).total.turns_ingested
    again = run(mem, tmp_path)
    assert again.total.turns_ingested == 0 and again.total.files_read == 0 and again.total.files == 6
    jsonl(made["claude_code"], claude_lines(CLAUDE_SESSION, "/home/ada/app", 2, 1))
    gemini = json.loads(made["gemini"].read_text())
    gemini["messages"].append({"id": "m5", "timestamp": "2026-03-03T08:02:00Z", "type": "user", "content": "and now?"})
    made["gemini"].write_text(json.dumps(gemini))  # Gemini rewrites the whole file as it grows
    with made["aider"].open("a") as f:
        f.write("#### one more thing\n\nDone.\n")
    third = run(mem, tmp_path)
    assert {a: s.turns_ingested for a, s in third.agents.items() if s.turns_ingested} == {
        "claude_code": 4, "gemini": 1, "aider": 2}
    assert third.agents["gemini"].turns_duplicate == 6 and third.total.files_read == 3
    assert len(journal(mem)) == first + 7
    assert len({r.turn_id for r in journal(mem)}) == first + 7  # no turn twice


def test_rewritten_file_is_reread_without_duplicates(mem, tmp_path):
    path = claude_project(tmp_path / "home", count=3)
    assert run(mem, tmp_path).total.turns_ingested == 12
    lines = path.read_bytes().splitlines(keepends=True)
    path.unlink()  # rewritten: a new inode, different first bytes, shorter
    path.write_bytes(b"".join(lines[4:]))
    jsonl(path, claude_lines(CLAUDE_SESSION, "/home/ada/app", 3, 1))
    summary = run(mem, tmp_path)
    stats = summary.agents["claude_code"]
    assert (stats.files_rewritten, stats.turns_ingested, stats.turns_duplicate) == (1, 4, 9)
    assert len(journal(mem, f"claude_code:{CLAUDE_SESSION}")) == 16
    path.write_bytes(path.read_bytes()[:200])  # truncated in place, same inode
    truncated = run(mem, tmp_path).agents["claude_code"]
    assert truncated.files_rewritten == 1 and truncated.turns_ingested == 0


def test_planted_secrets_reach_neither_journal_nor_index_nor_recall(mem, tmp_path):
    home = tmp_path / "home"
    path = claude_project(home, count=1)
    jsonl(path, [{"type": "user", "sessionId": CLAUDE_SESSION, "uuid": "secret-1", "timestamp": "2026-03-01T11:00:00Z",
                  "message": {"role": "user", "content": f"deploy with OPENAI_API_KEY={OPENAI_KEY} please"}},
                 {"type": "user", "sessionId": CLAUDE_SESSION, "uuid": "secret-2", "timestamp": "2026-03-01T11:00:01Z",
                  "message": {"role": "user", "content": [{
                      "type": "tool_result", "tool_use_id": "x",
                      "content": f"aws_access_key_id = {AWS_KEY}\nBearer {JWT}"}]}}])
    codex_rollout(home, extra=[{"timestamp": "2026-03-02T09:01:00Z", "type": "response_item", "payload": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": f"token is {JWT}"}]}}])
    summary = run(mem, tmp_path)
    assert summary.total.turns_redacted == 3 and summary.total.secrets_redacted >= 4
    records = journal(mem)
    everything = json.dumps([r.model_dump(mode="json") for r in records])
    for secret in SECRETS:
        assert secret not in everything
        found = mem.raw_recall(secret, limit=50, include_private_scratch=True, include_sealed=True).records
        assert secret not in json.dumps([r.model_dump(mode="json") for r in found])
        assert secret not in json.dumps(mem.recall(secret, limit=50).model_dump(mode="json"))
    for token in ("Q9xT4mLw8RzA2bVc7NdE1fGh5JkY3pUs", AWS_KEY, JWT.split(".")[2]):  # the index has no trace
        assert mem.raw_recall(token, limit=5).records == []
    redacted = next(r for r in records if r.turn_id.endswith(":secret-1"))
    assert "[REDACTED]" in redacted.content.blocks[0].text and redacted.metadata["redactions"] == 1
    assert [r.turn_id for r in mem.raw_recall("deploy", limit=5).records] == [redacted.turn_id]


def test_long_tool_output_is_truncated_with_a_marker(mem, tmp_path):
    path = claude_project(tmp_path / "home", count=0)
    jsonl(path, [{"type": "user", "sessionId": CLAUDE_SESSION, "uuid": "big", "timestamp": "2026-03-01T11:00:00Z",
                  "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                           "content": "x" * 50_000 + "THE ERROR"}]}}])
    summary = run(mem, tmp_path, settings=IngestSettings(max_tool_chars=900))
    assert summary.total.turns_truncated == 1
    text = journal(mem)[0].content.blocks[0].text
    assert len(text) < 1000 and "characters truncated" in text and text.endswith("THE ERROR")


def test_dry_run_since_and_privacy(mem, tmp_path):
    all_agents(tmp_path / "home")
    dry = run(mem, tmp_path, dry_run=True)
    assert dry.total.turns_ingested == 36 and journal(mem) == []
    assert not (tmp_path / "ingest").exists() or not list((tmp_path / "ingest").glob("state-*.json"))
    late = run(mem, tmp_path, since=datetime(2026, 3, 4, tzinfo=UTC), agents=["claude", "pi"])
    assert late.agents["claude_code"].turns_ingested == 0 and late.agents["pi"].turns_ingested == 5
    private = IngestSettings(deny=("codex", "cursor"))
    summary = run(mem, tmp_path, settings=private)
    assert "codex" not in summary.agents and sorted(summary.denied) == ["codex", "cursor"]
    assert not [r for r in journal(mem) if r.session_id.startswith(("codex:", "cursor:"))]
    with pytest.raises(CMPError) as err:
        run(mem, tmp_path, agents=["codex"], settings=private)
    assert err.value.code is ErrorCode.VALIDATION_ERROR and "privacy" in err.value.message
    with pytest.raises(CMPError, match="unknown agent"):
        run(mem, tmp_path, agents=["vim"])


def test_default_locations_and_a_second_run_at_once(mem, tmp_path, monkeypatch):
    home = tmp_path / "home"
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_HOME", "PI_CODING_AGENT_DIR", "CURSOR_USER_DIR",
                 "CASS_AIDER_DATA_ROOT", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    all_agents(home)
    assert run(mem, tmp_path, paths=None).total.turns_ingested == 36
    with open_state(mem, tmp_path / "ingest"), pytest.raises(CMPError) as err:
        with open_state(mem, tmp_path / "ingest"):
            pass
    assert err.value.code is ErrorCode.DATA_DIR_LOCKED


def test_cli_embedded_table_and_json(cli, tmp_path):
    all_agents(tmp_path / "home")
    table = cli("ingest", "--path", str(tmp_path / "home"))
    assert table.code == 0, table.stderr
    assert "ingested 36 turns" in table.stdout and "claude_code" in table.stdout
    again = cli("ingest", "--path", str(tmp_path / "home"), "--json")
    assert again.code == 0 and again.json()["total"]["turns_ingested"] == 0
    assert again.json()["total"]["files"] == 6
    bad = cli("ingest", "--agent", "nope", "--json")
    assert bad.code == 2 and bad.json()["error"]["code"] == "VALIDATION_ERROR"
    denied = cli("ingest", "--agent", "codex", "--json", env={"CEREMEMORY_INGEST__EXCLUDE_AGENTS": "codex"})
    assert denied.code == 2 and "privacy" in denied.json()["error"]["message"]


def test_a_crash_between_journal_and_state_duplicates_nothing(cli, tmp_path):
    all_agents(tmp_path / "home")
    crashed = cli("ingest", "--path", str(tmp_path / "home"), "--json", env={"CEREMEMORY_INGEST_FAULT": "after_store"})
    assert crashed.code == 87  # died right after the first batch reached the journal
    resumed = cli("ingest", "--path", str(tmp_path / "home"), "--json")
    assert resumed.code == 0, resumed.stdout
    first_batch = 36 - resumed.json()["total"]["turns_ingested"]
    assert first_batch > 0  # the batch in flight was found in the journal, the rest read again
    stored = cli("raw-recall", "--limit", "1000", "--json").json()["records"]
    turn_ids = [r["turn_id"] for r in stored]
    assert len(turn_ids) == 36 and len(set(turn_ids)) == 36


def test_cli_against_a_running_server(cli, tmp_path):
    home = tmp_path / "home"
    claude_project(home)
    jsonl(home / ".claude" / "projects" / "-x" / "s2.jsonl", [
        {"type": "user", "sessionId": "s2", "uuid": "k", "message": {"role": "user", "content": f"key {OPENAI_KEY}"}}])
    server = ServeProcess.serve(tmp_path / "served", tmp_path)
    try:
        first = cli("ingest", "--server-url", server.url, "--path", str(home), "--json")
        assert first.code == 0, first.stderr
        assert first.json()["total"]["turns_ingested"] == 9 and first.json()["total"]["turns_redacted"] == 1
        assert cli("ingest", "--server-url", server.url, "--path", str(home), "--json").json()["total"][
            "turns_ingested"] == 0
        found = cli("raw-recall", "flaky", "--server-url", server.url, "--limit", "50", "--json").json()
        assert {r["session_id"] for r in found["records"]} == {f"claude_code:{CLAUDE_SESSION}"}
        leaked = cli("raw-recall", OPENAI_KEY, "--server-url", server.url, "--json").json()
        assert OPENAI_KEY not in json.dumps(leaked)
    finally:
        assert server.stop() == 0
    assert list((tmp_path / "ingest").glob("state-*.json"))  # beside the CLI's data dir


def test_watch_follows_new_turns_and_stops_on_sigterm(tmp_path, data_dir):
    home = tmp_path / "home"
    path = pi_session(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env.update(CEREMEMORY_DATA_DIR=str(data_dir), CEREMEMORY_CONFIG=str(tmp_path / "none.toml"),
               CEREMEMORY_EMBED__SEMANTIC="off")
    proc = subprocess.Popen([sys.executable, "-m", "cerememory", "ingest", "--watch", "--interval", "0.2",
                             "--path", str(home), "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "pass" and first["total"]["turns_ingested"] == 5
        jsonl(path, [{"type": "message", "id": "e9", "timestamp": "2026-03-06T08:00:00Z",
                      "message": {"role": "user", "content": "and the tests?"}}])
        second = json.loads(proc.stdout.readline())
        assert second["total"]["turns_ingested"] == 1 and second["agents"]["pi"]["turns_ingested"] == 1
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    final = json.loads(out)
    assert final["total"]["turns_ingested"] == 6 and final["passes"] >= 2
