"""Hostile session files beside a good 50-turn session: each bad line is skipped and counted,
each bad file reported under `errors`, the good turns all reach the journal, nothing hangs or
runs out of memory, the exit is clean and a rerun changes nothing."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from cerememory.ingest import ingest, lines, open_state
from cerememory.ingest.agents import READERS
from cerememory.ingest.files import MAX_DOCUMENT_BYTES

from .test_ingest_samples import aider_history, cursor_db, gemini_session, jsonl

GOOD = "900d0000-0000-4000-8000-000000000050"
PROJECT = Path(".claude") / "projects" / "-home-ada-app"
DEEP = b"[" * 100_000 + b"]" * 100_000
LONG_TEXT = "x" * (lines.MAX_LINE_BYTES + 1)


def turn_lines(session: str, start: int, count: int, text: str = "turn {n} of {session}") -> list[dict]:
    """Claude Code events, one plain turn each, prompts and replies in turn."""
    return [{"type": role, "sessionId": session, "uuid": f"{session}-{n}", "cwd": "/home/ada/app",
             "timestamp": f"2026-03-01T10:{n // 60:02d}:{n % 60:02d}Z",
             "message": {"role": role, "content": text.format(n=n, session=session)}}
            for n in range(start, start + count) for role in ["user" if n % 2 == 0 else "assistant"]]


def good_session(home: Path) -> Path:
    return jsonl(home / PROJECT / f"{GOOD}.jsonl", turn_lines(GOOD, 0, 50))


def journal(cli) -> list[dict]:
    found = cli("raw-recall", "--limit", "1000", "--include-private-scratch", "--include-sealed", "--json")
    assert found.code == 0, found.stderr
    return found.json()["records"]


def ingest_json(cli, *args: str) -> dict:
    run = cli("ingest", *args, "--json")  # the fixture's timeout turns a hang into a failure
    assert run.code == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    return run.json()


def test_hostile_jsonl_files_beside_a_good_session(cli, tmp_path):
    home = tmp_path / "home"
    project = home / PROJECT
    good_session(home)
    jsonl(project / "surrogate.jsonl", [*turn_lines("sur", 0, 2), json.dumps(
        {"type": "user", "sessionId": "sur", "uuid": "sur-lone", "message": {"role": "user", "content": "lone "}}
    ).replace("lone ", "lone \\ud800 surrogate").encode()])
    deep = jsonl(project / "deep.jsonl", [*turn_lines("deep", 0, 2), DEEP, *turn_lines("deep", 2, 1)])
    long = jsonl(project / "long.jsonl", [*turn_lines("long", 0, 1), *turn_lines("long", 1, 1, LONG_TEXT),
                                          *turn_lines("long", 2, 1)])
    os.mkfifo(project / "fifo.jsonl")
    (project / "zero.jsonl").symlink_to("/dev/zero")
    secret = jsonl(tmp_path / "elsewhere" / "secret.jsonl", turn_lines("secret", 0, 1, "TOP-SECRET-5e7a"))
    (project / "leak.jsonl").symlink_to(secret)
    kept = jsonl(project / "notes" / "kept.txt", turn_lines("linked", 0, 1))  # read only through the link
    (project / "linked.jsonl").symlink_to(kept)
    jsonl(Path(os.fsdecode(os.fsencode(project) + b"/caf\xe9.jsonl")), turn_lines("latin1", 0, 1))
    odd = jsonl(home / ".pi" / "agent" / "sessions" / "--w--" / "odd.jsonl", [
        {"type": "message", "id": "p1", "message": {"role": "user", "content": "a fine pi turn"}},
        {"type": "message", "id": "p2", "message": {"role": ["user"], "content": "a role that is a list"}}])

    first = ingest_json(cli, "--path", str(home))
    claude, pi = first["agents"]["claude_code"], first["agents"]["pi"]
    assert claude["turns_ingested"] == 50 + 3 + 3 + 2 + 1 + 1 and pi["turns_ingested"] == 1
    assert sorted(claude["errors"]) == sorted([
        f"{project / 'fifo.jsonl'}: a FIFO, not a regular file",
        f"{project / 'leak.jsonl'}: a symbolic link leading out of {home}",
        f"{project / 'zero.jsonl'}: a symbolic link leading out of {home}"])
    assert claude["skipped_lines"] == [{"file": str(deep), "count": 1}, {"file": str(long), "count": 1}]
    assert pi["skipped_lines"] == [{"file": str(odd), "count": 1}] and pi["errors"] == []
    assert first["total"]["turns_skipped"] == 3

    records = journal(cli)
    by_session: dict[str, list[dict]] = {}
    for record in records:
        by_session.setdefault(record["session_id"], []).append(record)
    assert sorted(r["content"]["blocks"][0]["text"] for r in by_session[f"claude_code:{GOOD}"]) == sorted(
        f"turn {n} of {GOOD}" for n in range(50))
    assert "lone \ufffd surrogate" in [r["content"]["blocks"][0]["text"] for r in by_session["claude_code:sur"]]
    assert len(by_session["claude_code:deep"]) == 3 and len(by_session["claude_code:long"]) == 2
    assert len(by_session["claude_code:linked"]) == 1  # a link that stays inside the root is followed
    assert by_session["claude_code:latin1"][0]["metadata"]["source_path"].endswith("caf\ufffd.jsonl")
    assert "TOP-SECRET" not in json.dumps(records) and "claude_code:secret" not in by_session

    again = ingest_json(cli, "--path", str(home))
    assert again["total"]["turns_ingested"] == 0 and again["total"]["skipped_lines"] == []
    assert sorted(again["agents"]["claude_code"]["errors"]) == sorted(claude["errors"])
    assert len(journal(cli)) == len(records)

    named = ingest_json(cli, "--agent", "claude_code", "--path", str(project / "zero.jsonl"))
    assert named["total"]["errors"] == [f"{project / 'zero.jsonl'}: a character device, not a regular file"]


def test_hostile_whole_document_sqlite_and_markdown_files(cli, tmp_path):
    home = tmp_path / "home"
    good_session(home)
    gemini = home / ".gemini" / "tmp"
    gemini_session(home, project_hash="good")
    os.mkfifo(gemini / "good" / ".project_root")  # read beside the session: must not block either
    deep_doc = gemini / "deep" / "chats" / "session-deep.json"
    deep_doc.parent.mkdir(parents=True)
    deep_doc.write_bytes(b'{"sessionId": "deep", "messages": [' + DEEP + b"]}")
    (gemini / "fifo" / "chats").mkdir(parents=True)
    os.mkfifo(gemini / "fifo" / "chats" / "session-fifo.json")
    huge = gemini / "huge" / "chats" / "session-huge.json"
    huge.parent.mkdir(parents=True)
    with huge.open("wb") as f:  # sparse: large without costing the disk anything
        f.truncate(MAX_DOCUMENT_BYTES + 1)

    db = cursor_db(home)
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO cursorDiskKV VALUES (?, ?)",
                    ["composerData:deep", b'{"composerId": "deep", "conversation": ' + DEEP + b"}"])
    workspace_db = home / ".config" / "Cursor" / "User" / "workspaceStorage" / "w1" / "state.vscdb"
    workspace_db.parent.mkdir(parents=True)
    workspace_db.write_bytes(db.read_bytes())
    os.mkfifo(f"{workspace_db}-wal")  # SQLite would open it, blocking, on its own

    (home / "code" / "a").mkdir(parents=True)
    os.mkfifo(home / "code" / "a" / ".aider.chat.history.md")
    history = aider_history(home / "code" / "b")
    with history.open("a") as f:
        f.write(f"{LONG_TEXT}\n#### and after the long line?\n")

    first = ingest_json(cli, "--path", str(home))
    agents = first["agents"]
    assert {a: s["turns_ingested"] for a, s in agents.items() if s["turns_ingested"]} == {
        "claude_code": 50, "gemini": 6, "cursor": 6, "aider": 7}
    assert agents["gemini"]["errors"] == [
        f"{gemini / 'fifo' / 'chats' / 'session-fifo.json'}: a FIFO, not a regular file",
        f"{huge}: larger than {MAX_DOCUMENT_BYTES:,} bytes, the most read as one document"]
    assert agents["cursor"]["errors"] == [f"{workspace_db}: a FIFO, not a regular file"]
    aider_fifo = home / "code" / "a" / ".aider.chat.history.md"
    assert agents["aider"]["errors"] == [f"{aider_fifo}: a FIFO, not a regular file"]
    assert agents["gemini"]["skipped_lines"] == [{"file": str(deep_doc), "count": 1}]
    assert agents["cursor"]["skipped_lines"] == [{"file": str(db), "count": 2}]  # the broken composer and the deep one
    assert agents["aider"]["skipped_lines"] == [{"file": str(history), "count": 1}]
    assert agents["claude_code"]["errors"] == [] and agents["claude_code"]["skipped_lines"] == []

    records = journal(cli)
    gemini_turns = [r for r in records if r["session_id"] == "gemini:gem-session-1"]
    assert {r["metadata"]["workspace"] for r in gemini_turns} == {"/home/ada/site"}  # from the text instead
    aider_texts = [r["content"]["blocks"][0]["text"] for r in records if r["session_id"].startswith("aider:")]
    assert "and after the long line?" in aider_texts and not any("xxxx" in t for t in aider_texts)

    again = ingest_json(cli, "--path", str(home))
    assert again["total"]["turns_ingested"] == 0 and again["total"]["skipped_lines"] == []
    assert again["total"]["errors"] == first["total"]["errors"]
    assert len(journal(cli)) == len(records)


def test_a_file_larger_than_one_read_is_read_whole_in_rounds(mem, tmp_path, monkeypatch):
    monkeypatch.setattr(lines, "BLOCK_BYTES", 256)
    monkeypatch.setattr(lines, "READ_BYTES", 1024)  # a round stops after 1 KiB; the session is far larger
    reader = READERS["claude_code"]
    rounds = []
    monkeypatch.setattr(reader, "read", lambda *a, read=reader.read: rounds.append(read(*a)) or rounds[-1])
    path = good_session(tmp_path / "home")
    assert path.stat().st_size > 10 * lines.READ_BYTES
    with open_state(mem, tmp_path / "ingest") as state:
        first = ingest(mem, state=state, paths=[tmp_path / "home"])
        assert first.total.turns_ingested == 50 and first.total.turns_skipped == 0
        assert len(rounds) > 10 and all(r.more for r in rounds[:-1]) and not rounds[-1].more
        assert state.files[str(path)]["offset"] == path.stat().st_size
        jsonl(path, turn_lines(GOOD, 50, 1))
        assert ingest(mem, state=state, paths=[tmp_path / "home"]).total.turns_ingested == 1


def test_an_overlong_line_still_being_written_waits_then_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 1000)
    unfinished = b'{"type": "user", "content": "' + b"y" * 5000
    path = jsonl(tmp_path / PROJECT / "s.jsonl", turn_lines("s", 0, 2), raw=unfinished)
    first = READERS["claude_code"].read(path, 0, {})
    assert len(first.turns) == 2 and first.skipped == 0  # the long line has no end yet: left for later
    with path.open("ab") as f:
        f.write(b'"}\n' + json.dumps(turn_lines("s", 2, 1)[0]).encode() + b"\n")
    second = READERS["claude_code"].read(path, first.offset, first.context)
    assert second.skipped == 1 and [t.text for t in second.turns] == ["turn 2 of s"]
    assert second.offset == path.stat().st_size and second.turns[0].line == 4


def test_ids_and_metadata_the_journal_would_refuse_are_bounded(mem, tmp_path):
    from cerememory.limits import MAX_ID_CHARS

    long_session = "s" * 2_000
    path = jsonl(tmp_path / "home" / PROJECT / "ids.jsonl", [
        {"type": "user", "sessionId": long_session, "uuid": "u" * 2_000 + "1", "cwd": "/w" * 50_000,
         "timestamp": "9999-12-31T23:59:59.999999Z",
         "message": {"role": "user", "content": "first", "model": {"nested": [[[["deep"]]]]}}},
        {"type": "assistant", "sessionId": long_session, "uuid": "u" * 2_000 + "2",
         "message": {"role": "assistant", "content": "second"}}])
    with open_state(mem, tmp_path / "ingest") as state:
        assert ingest(mem, state=state, paths=[path]).total.turns_ingested == 2
        assert ingest(mem, state=state, paths=[path]).total.turns_ingested == 0
    records = mem.raw_recall(limit=10, include_private_scratch=True, include_sealed=True).records
    assert len({r.turn_id for r in records}) == 2 and len({r.session_id for r in records}) == 1
    assert all(len(r.session_id) <= MAX_ID_CHARS and len(r.turn_id) <= MAX_ID_CHARS for r in records)
    first = next(r for r in records if r.content.blocks[0].text == "first")
    assert len(first.metadata["workspace"]) < 5_000 and first.metadata["model"] == '{"nested":[[[["deep"]]]]}'
    assert first.metadata["timestamp_inferred"] is True  # a moment the journal could not give back


def test_cm_ingest_reports_the_bad_file_and_the_skipped_line(tmp_path):
    from .test_cm_cli import Cm

    cm = Cm(tmp_path)  # HOME = tmp_path: the default Claude Code location is under it
    good_session(tmp_path)
    os.mkfifo(tmp_path / PROJECT / "fifo.jsonl")
    deep = jsonl(tmp_path / PROJECT / "deep.jsonl", [*turn_lines("deep", 0, 1), DEEP])
    run = cm("ingest")
    assert run.code == 0, run.stdout + run.stderr
    assert run.data["total"]["turnsIngested"] == 51
    fifo_error = f"{tmp_path / PROJECT / 'fifo.jsonl'}: a FIFO, not a regular file"
    assert run.data["total"]["errors"] == [fifo_error] and run.env["warnings"] == [fifo_error]
    assert run.data["total"]["skippedLines"] == [{"file": str(deep), "count": 1}]
    assert cm.ok("ingest")["total"]["turnsIngested"] == 0
