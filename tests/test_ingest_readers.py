"""Each agent's reader against session files written in that agent's format."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from cerememory.ingest import detect
from cerememory.ingest.agents import READERS, files
from cerememory.ingest.turns import parse_time, truncate

from .test_ingest_samples import (
    aider_history,
    claude_lines,
    claude_project,
    codex_rollout,
    cursor_db,
    gemini_checkpoint,
    gemini_session,
    jsonl,
    pi_session,
)


def read(agent: str, path: Path, offset: int = 0, context: dict | None = None):
    return READERS[agent].read(path, offset, context or {})


def shape(turns) -> list[tuple[str, str, str | None]]:
    return [(t.speaker, t.source, t.tool) for t in turns]


def test_claude_code_blocks_tools_and_ignored_events(tmp_path):
    path = claude_project(tmp_path, count=1)
    chunk = read("claude_code", path)
    assert chunk.skipped == 0 and chunk.offset == path.stat().st_size
    assert shape(chunk.turns) == [("user", "conversation", None), ("assistant", "conversation", None),
                                  ("assistant", "tool_io", "Bash"), ("tool", "tool_io", "Bash")]
    user, reply, call, result = chunk.turns
    assert reply.text == "Looking at test 0.\nRunning it first."  # text blocks joined, thinking left out
    assert "private chain of thought" not in " ".join(t.text for t in chunk.turns)
    assert '"command":"pytest tests/test_0.py"' in call.text and result.text == "1 passed in 0.0s"
    assert {t.workspace for t in chunk.turns} == {"/home/ada/app"}
    assert user.session_id == "claude_code:c0ffee00-0000-4000-8000-000000000001"
    assert call.turn_id.endswith(":a-c0ffee00-0000-4000-8000-000000000001-0/1")
    assert reply.timestamp == datetime(2026, 3, 1, 10, 0, 5, tzinfo=UTC) and reply.extra["model"] == "claude-sonnet-4-5"


def test_claude_code_corrupt_lines_bad_bytes_partial_line_and_resume(tmp_path):
    path = claude_project(tmp_path, count=1)
    session = "c0ffee00-0000-4000-8000-000000000001"
    jsonl(path, [b"{not json", b'"a string"', {"no": "type"},
                 {"type": "user", "sessionId": session, "uuid": "bad-bytes",
                  "message": {"role": "user", "content": "placeholder"}}])
    raw = path.read_bytes().replace(b"placeholder", b"caf\xe9 \xff ok")
    path.write_bytes(raw + b'{"type": "user", "uuid": "half-writ')  # the agent is still writing this line
    first = read("claude_code", path)
    assert first.skipped == 3
    assert first.turns[-1].text == "caf\ufffd \ufffd ok" and first.turns[-1].timestamp is None
    assert first.offset == len(raw)  # the unfinished line is left for the next run
    with path.open("ab") as f:
        f.write(b'ing", "sessionId": "%s", "message": {"role": "user", "content": "finished"}}\n' % session.encode())
    jsonl(path, claude_lines(session, "/home/ada/app", 1, 1))
    second = read("claude_code", path, first.offset, first.context)
    assert [t.text for t in second.turns][:2] == ["finished", "please fix the flaky test number 1"]
    assert second.turns[0].index == first.turns[-1].index + 1
    assert second.turns[-1].tool == "Bash"  # the result finds its tool's name through the carried context


def test_claude_code_empty_session(tmp_path):
    path = tmp_path / ".claude" / "projects" / "-p" / "empty.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    chunk = read("claude_code", path)
    assert chunk.turns == [] and chunk.skipped == 0 and chunk.offset == 0


def test_claude_code_json_variant_and_desktop_sidecars(tmp_path):
    home = tmp_path / "home"
    variant = home / ".claude" / "projects" / "-home-ada-app" / "exported.json"
    variant.parent.mkdir(parents=True)
    variant.write_text(json.dumps({"title": "Fix the flaky test", "cwd": "/home/ada/app", "messages": [
        {"role": "user", "content": "the checkout test is flaky", "timestamp": "2026-03-01T10:00:00Z"},
        {"type": "assistant", "content": [{"type": "text", "text": "I pinned the seed."}], "time": 1772359205},
        {"role": "tool", "content": "ignored"}, "not a message"]}))
    chunk = read("claude_code", variant)
    assert [(t.speaker, t.text) for t in chunk.turns] == [("user", "the checkout test is flaky"),
                                                          ("assistant", "I pinned the seed.")]
    assert chunk.skipped == 2 and chunk.turns[0].workspace == "/home/ada/app"
    assert chunk.turns[0].extra["title"] == "Fix the flaky test" and chunk.turns[1].timestamp.year == 2026
    assert not READERS["claude_code"].incremental(variant) and detect(variant) == "claude_code"
    broken = variant.with_name("broken.json")
    broken.write_text("{not json")
    assert read("claude_code", broken).skipped == 1

    sidecar = home / "Library" / "Application Support" / "Claude" / "claude-code-sessions" / "s1.jsonl"
    sidecar.parent.mkdir(parents=True)
    sidecar.write_text(json.dumps({"type": "user", "sessionId": "s1", "cwd": "/w",
                                   "message": {"role": "user", "content": "hello from the desktop app"}}) + "\n")
    assert detect(sidecar) == "claude_code"
    roots = READERS["claude_code"].roots({}, home)
    found = {f.path for f in files("claude_code", roots)}
    assert {variant, sidecar} <= found
    assert read("claude_code", sidecar).turns[0].text == "hello from the desktop app"


def test_codex_rollout_dedupes_event_messages_and_names_tool_outputs(tmp_path):
    path = codex_rollout(tmp_path, extra=[b"\x00\x01garbage", {"timestamp": "2026-03-02T09:00:09Z",
                                                                "type": "event_msg", "payload": {
                                                                    "type": "user_message", "message": "thanks"}}])
    chunk = read("codex", path)
    assert chunk.skipped == 1
    assert [(t.speaker, t.text) for t in chunk.turns if t.source == "conversation"] == [
        ("system", "<environment_context>\n  <cwd>/home/ada/api</cwd>\n</environment_context>"),
        ("user", "add a health endpoint"), ("assistant", "Added GET /health."), ("user", "thanks")]
    call, output = [t for t in chunk.turns if t.source == "tool_io"]
    assert (call.speaker, call.tool, output.speaker, output.tool) == ("assistant", "shell", "tool", "shell")
    assert output.text == "src/app.py:12: # TODO health"  # the JSON envelope of the output is unwrapped
    assert {t.workspace for t in chunk.turns} == {"/home/ada/api"}
    assert chunk.turns[0].turn_id == "codex:0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b:0"


def test_codex_legacy_json(tmp_path):
    path = tmp_path / ".codex" / "sessions" / "rollout-2025-05-01-abc.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"session": {"id": "legacy-1", "cwd": "/srv"}, "items": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}, 7]}))
    chunk = read("codex", path)
    assert [(t.speaker, t.text, t.workspace) for t in chunk.turns] == [("user", "hi", "/srv"),
                                                                       ("assistant", "hello", "/srv")]
    assert chunk.skipped == 1


def test_gemini_session_tool_calls_parts_and_missing_timestamps(tmp_path):
    chunk = read("gemini", gemini_session(tmp_path))
    assert shape(chunk.turns) == [("user", "conversation", None), ("assistant", "conversation", None),
                                  ("assistant", "tool_io", "read_file"), ("tool", "tool_io", "read_file"),
                                  ("assistant", "conversation", None), ("system", "conversation", None)]
    assert chunk.turns[3].text == "export default { minify: true }"
    assert chunk.turns[4].text == "Minification is the slow part." and chunk.turns[4].timestamp is None
    assert {t.workspace for t in chunk.turns} == {"/home/ada/site"}  # from "Working directory: ..."
    assert chunk.turns[2].turn_id == "gemini:gem-session-1:m2/read_file-1/call"


def test_gemini_checkpoint_project_root_and_corrupt_file(tmp_path):
    path = gemini_checkpoint(tmp_path)
    (path.parent / ".project_root").write_text("/home/ada/lib\n")
    chunk = read("gemini", path)
    assert [(t.speaker, t.text) for t in chunk.turns] == [
        ("user", "rename the helper"), ("assistant", "Renaming."), ("assistant", 'replace {"old":"a"}'),
        ("tool", "ok")]
    assert {t.workspace for t in chunk.turns} == {"/home/ada/lib"}
    broken = path.with_name("session-broken.json")
    broken.write_bytes(b'{"sessionId": "x", "messages": [')
    assert read("gemini", broken).skipped == 1
    empty = gemini_session(tmp_path, session="gem-empty", messages=[])
    assert read("gemini", empty).turns == []


def test_cursor_composers_bubbles_tools_and_legacy_tabs(tmp_path):
    path = cursor_db(tmp_path)
    before = path.read_bytes()
    chunk = read("cursor", path)
    assert path.read_bytes() == before  # opened read-only
    assert chunk.skipped == 1  # the composer whose JSON is broken
    composer = [t for t in chunk.turns if t.session == "comp-1"]
    assert shape(composer) == [("user", "conversation", None), ("assistant", "conversation", None),
                               ("assistant", "tool_io", "read_file"), ("tool", "tool_io", "read_file")]
    assert {t.workspace for t in composer} == {"/home/ada/svc"} and composer[1].extra["model"] == "gpt-4.1"
    assert composer[2].turn_id == "cursor:comp-1:b2/call"
    legacy = [(t.speaker, t.text) for t in chunk.turns if t.session == "tab-1"]
    assert legacy == [("user", "legacy question"), ("assistant", "legacy answer")]


def test_cursor_workspace_storage_names_its_folder(tmp_path):
    ws = tmp_path / "User" / "workspaceStorage" / "abc123"
    ws.mkdir(parents=True)
    (ws / "workspace.json").write_text(json.dumps({"folder": "file:///home/ada/my%20proj"}))
    src = cursor_db(tmp_path, legacy=False)
    (ws / "state.vscdb").write_bytes(src.read_bytes())
    found = sorted(f.path for f in files("cursor", [tmp_path / "User"]))
    assert found == [ws / "state.vscdb"]
    assert read("cursor", ws / "state.vscdb").turns[0].workspace == "/home/ada/svc"  # the composer's own wins
    bare = tmp_path / "User" / "workspaceStorage" / "abc123" / "state.vscdb"
    import sqlite3
    with sqlite3.connect(bare) as con:
        con.execute("UPDATE cursorDiskKV SET value = json_remove(value, '$.workspaceProjectDir') "
                    "WHERE key = 'composerData:comp-1'")
    assert read("cursor", bare).turns[0].workspace == "/home/ada/my proj"


def test_aider_sessions_user_assistant_tool_output_and_bad_bytes(tmp_path):
    path = aider_history(tmp_path / "proj", sessions=2)
    chunk = read("aider", path)
    first = [t for t in chunk.turns if t.session.endswith("T100000")]
    assert shape(first) == [("tool", "tool_io", "aider"), ("user", "conversation", None),
                            ("assistant", "conversation", None), ("tool", "tool_io", "aider")]
    assert first[1].text == "add type hints to utils.py\nand keep it short (session 0)"
    assert "```python" in first[2].text and first[2].workspace == str(tmp_path / "proj")
    assert first[0].timestamp == datetime.fromisoformat("2026-03-05 10:00:00").astimezone().astimezone(UTC)
    assert chunk.turns[-2].text == "caf\ufffd au lait?" and chunk.turns[-1].text == "Not a coffee machine."
    with path.open("a") as f:
        f.write("#### one more\n\nSure.\n")
    more = read("aider", path, chunk.offset, chunk.context)
    assert [(t.speaker, t.text, t.index) for t in more.turns] == [("user", "one more", 6), ("assistant", "Sure.", 7)]
    assert more.turns[0].session == chunk.turns[-1].session


def test_aider_older_quote_convention(tmp_path):
    path = tmp_path / "old" / ".aider.chat.history.md"
    path.parent.mkdir()
    path.write_text("Model: gpt-4\n\n> how do I sort a dict?\n\nUse sorted(d.items()).\n")
    chunk = read("aider", path)
    assert [(t.speaker, t.text) for t in chunk.turns] == [("system", "Model: gpt-4"), ("user", "how do I sort a dict?"),
                                                          ("assistant", "Use sorted(d.items()).")]


def test_pi_session_blocks_tool_results_and_model_changes(tmp_path):
    chunk = read("pi", pi_session(tmp_path))
    assert shape(chunk.turns) == [("user", "conversation", None), ("assistant", "conversation", None),
                                  ("assistant", "tool_io", "bash"), ("tool", "tool_io", "bash"),
                                  ("assistant", "conversation", None)]
    assert chunk.turns[3].timestamp == datetime(2026, 3, 6, 7, 0, 3, tzinfo=UTC)  # ms in the message
    assert chunk.turns[-1].extra["model"] == "gpt-5"  # after model_change
    assert {t.workspace for t in chunk.turns} == {"/home/ada/cli"}
    assert chunk.turns[0].session_id == "pi:7d1c2b3a-1111-4222-8333-944455556666"


def test_detect_and_discover_every_agent(tmp_path):
    made = {"claude_code": claude_project(tmp_path), "codex": codex_rollout(tmp_path),
            "gemini": gemini_session(tmp_path), "cursor": cursor_db(tmp_path),
            "aider": aider_history(tmp_path / "code" / "proj"), "pi": pi_session(tmp_path)}
    for agent, path in made.items():
        assert detect(path) == agent
        root = READERS[agent].roots({}, tmp_path)[0]
        assert path in list(READERS[agent].discover(root)), agent
    found = {(f.agent, f.path) for f in files(None, [tmp_path])}
    assert {(a, p) for a, p in made.items()} <= found


def test_timestamps_and_truncation():
    assert parse_time(1772780403) == parse_time(1772780403000) == parse_time("1772780403000")
    assert parse_time("2026-03-06T07:00:03Z") == datetime(2026, 3, 6, 7, 0, 3, tzinfo=UTC)
    assert parse_time("yesterday") is None and parse_time(None) is None and parse_time(True) is None
    text, cut = truncate("a" * 50 + "b" * 50, 30)
    assert cut and text.startswith("a" * 20) and text.endswith("b" * 10) and "70 characters truncated" in text
    assert truncate("short", 30) == ("short", False)
