"""`cm ingest` and `cm privacy`: a Claude Code project ingested through cm (embedded and against a
running server) shows up in `cm context` history; a denied agent is not ingested; privacy
changes land in the hash-chained audit log."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ServeProcess
from tests.test_cm_cli import Cm
from tests.test_ingest_samples import claude_project, codex_rollout

TASK = "fix the flaky test"


def _audit_ops(data_dir: Path) -> list[str]:
    """The operations audited as done (each change's intent entry before it is left out)."""
    entries = [json.loads(line) for line in (data_dir / "audit.jsonl").read_text().splitlines()]
    return [e["op"] for e in entries if e.get("phase") != "intent"]


def test_ingest_follows_privacy_and_feeds_context_history(tmp_path: Path) -> None:
    cm = Cm(tmp_path)  # HOME = tmp_path: the agents' default session stores live under it
    claude_project(tmp_path, cwd=str(cm.repo))
    codex_rollout(tmp_path)

    # default: cross-agent enrichment off → only the current agent (claude_code by default)
    data = cm.ok("ingest")
    assert data["privacy"]["agentsIngested"] == ["claude_code"] and data["privacy"]["crossAgent"] is False
    assert data["agents"]["claude_code"]["turnsIngested"] == 8 and "codex" not in data["agents"]
    again = cm("ingest")
    assert again.env["effect"] is False and again.env["data"]["total"]["turnsIngested"] == 0

    history = cm.ok("context", TASK, "--days", "3650", "--workspace", str(cm.repo))["historySnippets"]
    assert history and all(h["agent"] == "claude_code" and h["workspace"] == str(cm.repo) for h in history)
    assert history[0]["origin"] == {"kind": "local"} and "flaky test" in " ".join(h["snippet"] for h in history)
    assert history[0]["sessionPath"].endswith(".jsonl") and history[0]["line_number"] > 1

    # consent (the allowlist: the agents the journal holds), then never codex: codex stays out,
    # and naming it is an error
    data_dir = cm.home / "cerememory"
    before = len(_audit_ops(data_dir))
    enabled = cm.ok("privacy", "enable")["crossAgent"]
    assert enabled["enabled"] is True and enabled["agents"] == ["claude_code"]
    assert cm.ok("privacy", "deny", "codex", "--never")["crossAgent"]["deniedAgents"] == ["codex"]
    assert _audit_ops(data_dir)[before:] == ["encode.store", "encode.update"]  # one audited write per change
    refused = cm.fails("INVALID_INPUT", 2, "ingest", "--agent", "codex")
    assert "cm privacy allow codex" in refused["error"]["recovery"]
    data = cm.ok("ingest", "--path", str(tmp_path / ".codex"), "--path", str(tmp_path / ".claude"))
    assert data["total"]["turnsIngested"] == 0 and "codex" in data["deniedAgents"]
    status = cm.ok("privacy", "status")
    assert status["ingested"]["codex"] is False and status["ingested"]["claude_code"] is True
    assert status["cass"]["sessionCountsByAgent"]["claude_code"] >= 1
    assert [c["action"] for c in status["changes"]] == ["enable", "deny"]
    assert json.loads((cm.home / "config.json").read_text())["crossAgent"]["deniedAgents"] == ["codex"]


def test_ingest_against_a_running_server(tmp_path: Path) -> None:
    cm = Cm(tmp_path)
    claude_project(tmp_path, cwd=str(cm.repo))
    server = ServeProcess.serve(tmp_path / "served", tmp_path)
    try:
        run = cm("ingest", "--server-url", server.url)
        assert run.code == 0, run.stdout + run.stderr
        assert run.env["metadata"]["storage"] == "server"
        assert run.env["data"]["total"]["turnsIngested"] == 8
        assert '"event": "progress"' in run.stderr  # progress goes to stderr, stdout is the envelope
        history = cm.ok("context", TASK, "--days", "3650", "--server-url", server.url)["historySnippets"]
        assert any(h["source"] == "raw_journal" and h["agent"] == "claude_code" for h in history)
    finally:
        server.stop()
