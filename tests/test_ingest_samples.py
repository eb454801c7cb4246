"""Session files in each agent's own format, written by the tests (shared by test_ingest*.py).

Each writer produces what the agent itself writes: several record types, multi-part content,
tool calls and their results, lines without timestamps, bytes that are not UTF-8 and a corrupt
line, so that the readers meet the real shapes and their edge cases.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

OPENAI_KEY = "sk-proj-Q9xT4mLw8RzA2bVc7NdE1fGh5JkY3pUs"
AWS_KEY = "AKIAZ7Q3MXR5TPLW2KJD"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwibmFtZSI6IkFkYSJ9."
       "T7yq0m3VJ2cWz8s1bXk5nR9pLd4fGh6aEi0uOw2yZc8")
SECRETS = (OPENAI_KEY, AWS_KEY, JWT)


def jsonl(path: Path, lines: list[Any], *, raw: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        for line in lines:
            f.write((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n")
        f.write(raw)
    return path


# ---------------------------------------------------------------- Claude Code


def claude_lines(session: str, cwd: str, start: int = 0, count: int = 2) -> list[dict]:
    """`count` exchanges: a user prompt, an assistant reply with text + tool_use, a tool_result."""
    lines: list[dict] = []
    for n in range(start, start + count):
        common = {"sessionId": session, "cwd": cwd, "gitBranch": "main", "version": "2.0.14",
                  "isSidechain": False, "userType": "external"}
        lines.append({**common, "type": "user", "uuid": f"u-{session}-{n}", "parentUuid": None,
                      "timestamp": f"2026-03-01T10:{n % 60:02d}:00.000Z",
                      "message": {"role": "user", "content": f"please fix the flaky test number {n}"}})
        lines.append({**common, "type": "assistant", "uuid": f"a-{session}-{n}", "timestamp":
                      f"2026-03-01T10:{n % 60:02d}:05.000Z",
                      "message": {"id": f"msg_{n}", "role": "assistant", "model": "claude-sonnet-4-5", "content": [
                          {"type": "thinking", "thinking": "private chain of thought", "signature": "x"},
                          {"type": "text", "text": f"Looking at test {n}."},
                          {"type": "text", "text": "Running it first."},
                          {"type": "tool_use", "id": f"toolu_{session}_{n}", "name": "Bash",
                           "input": {"command": f"pytest tests/test_{n}.py", "description": "run it"}}]}})
        lines.append({**common, "type": "user", "uuid": f"r-{session}-{n}", "timestamp":
                      f"2026-03-01T10:{n % 60:02d}:09.000Z",
                      "message": {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": f"toolu_{session}_{n}",
                           "content": [{"type": "text", "text": f"1 passed in 0.{n}s"}], "is_error": False}]}})
    return lines


def claude_project(home: Path, cwd: str = "/home/ada/app", session: str = "c0ffee00-0000-4000-8000-000000000001",
                   count: int = 2) -> Path:
    folder = home / ".claude" / "projects" / cwd.replace("/", "-")
    path = folder / f"{session}.jsonl"
    head = [{"type": "summary", "summary": "Fixing flaky tests", "leafUuid": "x"},
            {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}}]
    return jsonl(path, head + claude_lines(session, cwd, 0, count))


# ---------------------------------------------------------------- Codex


def codex_rollout(home: Path, session: str = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", cwd: str = "/home/ada/api",
                  extra: list[dict] | None = None) -> Path:
    path = home / ".codex" / "sessions" / "2026" / "03" / "02" / f"rollout-2026-03-02T09-00-00-{session}.jsonl"
    ts = "2026-03-02T09:00:0{}.000Z"
    lines = [
        {"timestamp": ts.format(0), "type": "session_meta",
         "payload": {"id": session, "timestamp": ts.format(0), "cwd": cwd, "originator": "codex_cli_rs",
                     "cli_version": "0.46.0", "instructions": None}},
        {"timestamp": ts.format(1), "type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text",
             "text": "<environment_context>\n  <cwd>/home/ada/api</cwd>\n</environment_context>"}]}},
        {"timestamp": ts.format(1), "type": "turn_context", "payload": {"cwd": cwd, "model": "gpt-5-codex"}},
        {"timestamp": ts.format(2), "type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "add a health endpoint"}]}},
        {"timestamp": ts.format(2), "type": "event_msg",
         "payload": {"type": "user_message", "message": "add a health endpoint", "images": []}},
        {"timestamp": ts.format(3), "type": "response_item", "payload": {
            "type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}], "encrypted_content": "x"}},
        {"timestamp": ts.format(4), "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "call_id": "call_1",
            "arguments": json.dumps({"command": ["bash", "-lc", "rg health"], "workdir": cwd})}},
        {"timestamp": ts.format(5), "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "call_1",
            "output": json.dumps({"output": "src/app.py:12: # TODO health", "metadata": {"exit_code": 0}})}},
        {"timestamp": ts.format(6), "type": "event_msg", "payload": {"type": "token_count", "info": None}},
        {"timestamp": ts.format(7), "type": "event_msg", "payload": {"type": "agent_message",
                                                                      "message": "Added GET /health."}},
        {"timestamp": ts.format(7), "type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                                          "content": [{"type": "output_text",
                                                                                       "text": "Added GET /health."}]}},
    ]
    return jsonl(path, lines + (extra or []))


# ---------------------------------------------------------------- Gemini CLI


def gemini_session(home: Path, project_hash: str = "9f8e7d6c5b4a", session: str = "gem-session-1",
                   messages: list[dict] | None = None) -> Path:
    chats = home / ".gemini" / "tmp" / project_hash / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    messages = messages if messages is not None else [
        {"id": "m1", "timestamp": "2026-03-03T08:00:00.000Z", "type": "user",
         "content": "Working directory: /home/ada/site\nwhy is the build slow?"},
        {"id": "m2", "timestamp": "2026-03-03T08:00:04.000Z", "type": "gemini", "model": "gemini-2.5-pro",
         "content": "Let me look at the config.", "thoughts": [{"subject": "x", "description": "y"}],
         "toolCalls": [{"id": "read_file-1", "name": "read_file", "args": {"absolute_path": "/home/ada/site/vite.cfg"},
                        "status": "success", "timestamp": "2026-03-03T08:00:05.000Z",
                        "result": [{"functionResponse": {
                            "id": "read_file-1", "name": "read_file",
                            "response": {"output": "export default { minify: true }"}}}]}]},
        {"id": "m3", "type": "gemini", "content": [{"text": "Minification "}, {"text": "is the slow part."}]},
        {"id": "m4", "timestamp": "2026-03-03T08:01:00.000Z", "type": "info", "content": "Request cancelled."},
    ]
    path = chats / f"session-2026-03-03T08-00-{session[-4:]}.json"
    path.write_text(json.dumps({"sessionId": session, "projectHash": project_hash,
                                "startTime": "2026-03-03T08:00:00.000Z", "lastUpdated": "2026-03-03T08:01:00.000Z",
                                "messages": messages}))
    return path


def gemini_checkpoint(home: Path, project_hash: str = "9f8e7d6c5b4a") -> Path:
    path = home / ".gemini" / "tmp" / project_hash / "checkpoint-refactor.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([
        {"role": "user", "parts": [{"text": "rename the helper"}]},
        {"role": "model", "parts": [{"text": "Renaming."},
                                    {"functionCall": {"name": "replace", "args": {"old": "a"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "replace", "response": {"output": "ok"}}}]},
    ]))
    return path


# ---------------------------------------------------------------- Cursor


def cursor_db(home: Path, *, composer: str = "comp-1", bubbles: list[dict] | None = None, legacy: bool = True) -> Path:
    user_dir = home / ".config" / "Cursor" / "User"
    path = user_dir / "globalStorage" / "state.vscdb"
    path.parent.mkdir(parents=True, exist_ok=True)
    bubbles = bubbles if bubbles is not None else [
        {"bubbleId": "b1", "type": 1, "text": "explain the retry logic", "createdAt": "2026-03-04T12:00:00.000Z"},
        {"bubbleId": "b2", "type": 2, "text": "It retries three times with backoff.", "modelType": "gpt-4.1",
         "createdAt": "2026-03-04T12:00:03.000Z",
         "toolFormerData": {"name": "read_file", "rawArgs": '{"path": "retry.py"}', "result": "def retry(): ...",
                            "status": "completed"}},
        {"bubbleId": "b3", "type": 2, "text": "", "createdAt": "2026-03-04T12:00:04.000Z"},
    ]
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE IF NOT EXISTS ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
        con.execute("CREATE TABLE IF NOT EXISTS cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
        headers = [{"bubbleId": b["bubbleId"], "type": b["type"]} for b in bubbles]
        headers.append({"bubbleId": "pending", "type": 2})  # announced, body not written yet
        con.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", [f"composerData:{composer}", json.dumps({
            "composerId": composer, "createdAt": 1772625600000, "lastUpdatedAt": 1772625604000,
            "workspaceProjectDir": "/home/ada/svc", "fullConversationHeadersOnly": headers})])
        for b in bubbles:
            con.execute("INSERT INTO cursorDiskKV VALUES (?, ?)",
                        [f"bubbleId:{composer}:{b['bubbleId']}", json.dumps(b).encode()])
        con.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", ["composerData:broken", b"{not json"])
        if legacy:
            con.execute("INSERT INTO ItemTable VALUES (?, ?)", [
                "workbench.panel.aichat.view.aichat.chatdata", json.dumps({"tabs": [{
                    "tabId": "tab-1", "chatTitle": "old chat", "lastSendTime": 1700000000000,
                    "bubbles": [{"type": "user", "id": "o1", "text": "legacy question"},
                                {"type": "ai", "id": "o2", "rawText": "legacy answer"}]}]})])
    return path


# ---------------------------------------------------------------- Aider


def aider_history(project: Path, sessions: int = 1) -> Path:
    path = project / ".aider.chat.history.md"
    project.mkdir(parents=True, exist_ok=True)
    text = ""
    for n in range(sessions):
        text += (f"\n# aider chat started at 2026-03-05 1{n}:00:00\n\n"
                 "> /usr/bin/aider --model sonnet  \n> Aider v0.86.1  \n> Git repo: .git with 12 files  \n\n"
                 f"#### add type hints to utils.py  \n#### and keep it short (session {n})\n\n"
                 "I'll add the hints.\n\nutils.py\n```python\ndef f(x: int) -> int:\n    return x\n```\n\n"
                 "> Applied edit to utils.py  \n> Commit 1a2b3c4 feat: type hints  \n")
    path.write_bytes(text.encode() + b"\n#### caf\xe9 au lait?\n\nNot a coffee machine.\n")
    return path


# ---------------------------------------------------------------- Pi


def pi_session(home: Path, cwd: str = "/home/ada/cli", session: str = "7d1c2b3a-1111-4222-8333-944455556666") -> Path:
    folder = home / ".pi" / "agent" / "sessions" / ("--" + cwd.strip("/").replace("/", "-") + "--")
    path = folder / f"2026-03-06T07-00-00-000Z_{session}.jsonl"
    return jsonl(path, [
        {"type": "session", "id": session, "timestamp": "2026-03-06T07:00:00.000Z", "cwd": cwd,
         "provider": "anthropic", "modelId": "claude-sonnet-4-5", "thinkingLevel": "off"},
        {"type": "message", "id": "e1", "timestamp": "2026-03-06T07:00:01.000Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "list the todo items"}],
                     "timestamp": 1772780401000}},
        {"type": "message", "id": "e2", "timestamp": "2026-03-06T07:00:02.000Z",
         "message": {"role": "assistant", "content": [
             {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Searching."},
             {"type": "toolCall", "id": "tc1", "name": "bash", "arguments": {"command": "grep -rn TODO"}}],
             "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "toolUse"}},
        {"type": "message", "id": "e3", "message": {"role": "toolResult", "toolCallId": "tc1", "toolName": "bash",
                                                     "content": [{"type": "text", "text": "main.go:3: TODO"}],
                                                     "isError": False, "timestamp": 1772780403000}},
        {"type": "thinking_level_change", "timestamp": "2026-03-06T07:00:04.000Z", "thinkingLevel": "high"},
        {"type": "model_change", "timestamp": "2026-03-06T07:00:05.000Z", "provider": "openai", "modelId": "gpt-5"},
        {"type": "message", "id": "e4", "timestamp": "2026-03-06T07:00:06.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "One TODO in main.go."}]}},
    ])
