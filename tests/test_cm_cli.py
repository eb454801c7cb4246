"""`cm` as a subprocess with --json: envelopes, exit codes and each command family, on a
temporary home and git repository, embedded (the data dir opened in-process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cerememory.embed import local_embedder_available


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def env(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    @property
    def data(self) -> Any:
        return self.env["data"]


class Cm:
    def __init__(self, tmp: Path) -> None:
        self.home = tmp / "home"
        self.repo = tmp / "repo"
        self.repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(self.repo)], check=True)
        # no user config, no LLM key and no agent marker (CLAUDECODE, …) leaks in from the caller
        self.environ = {k: v for k, v in os.environ.items()
                        if not k.startswith(("CEREMEMORY_", "CASS_", "MCP_", "CM_", "ANTHROPIC_", "OPENAI_",
                                             "GOOGLE_", "GEMINI_", "CLAUDE", "CODEX_", "CURSOR_", "AIDER_"))}
        self.environ.update(CASS_MEMORY_HOME=str(self.home), CEREMEMORY_CONFIG=str(tmp / "none.toml"),
                            CEREMEMORY_EMBED__SEMANTIC="off", HOME=str(tmp))

    def __call__(self, *args: str, stdin: str | None = None, cwd: Path | None = None, json_: bool = True,
                 **env: str) -> Run:
        environ = {**self.environ, **env}
        proc = subprocess.run([sys.executable, "-m", "cerememory.cm.cli", *args, *(["--json"] if json_ else [])],
                              input=stdin, capture_output=True, text=True, cwd=cwd or self.repo, env=environ,
                              timeout=120)
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def ok(self, *args: str, **kw: Any) -> Any:
        run = self(*args, **kw)
        assert run.code == 0, (run.stdout, run.stderr)
        envelope = run.env
        assert envelope["success"] is True
        assert set(envelope) >= {"success", "command", "timestamp", "data", "metadata"}
        assert envelope["metadata"]["version"] and isinstance(envelope["metadata"]["executionMs"], int)
        return envelope["data"]

    def fails(self, code: str, exit_code: int, *args: str, **kw: Any) -> dict[str, Any]:
        run = self(*args, **kw)
        envelope = run.env
        assert envelope["success"] is False, envelope
        assert envelope["error"]["code"] == code, envelope
        assert envelope["error"]["exitCode"] == exit_code == run.code
        assert isinstance(envelope["error"]["recovery"], list)
        return envelope


@pytest.fixture
def cm(tmp_path: Path) -> Cm:
    return Cm(tmp_path)


def test_init_add_mark_context_worked_examples(cm: Cm) -> None:
    data = cm.ok("init")
    assert data["storage"]["mode"] == "embedded"
    assert data["created"] == ["config.json", "playbook.yaml", "blocked.log", "usage.jsonl"]
    assert (cm.home / "config.json").exists()
    cm.fails("ALREADY_EXISTS", 2, "init")
    (cm.home / "config.json").write_text('{"mine": true}')
    forced = cm.ok("init", "--force", "--yes")
    saved = {b["file"]: b["backup"] for b in forced["backups"]}
    assert forced["overwritten"] == ["config.json", "playbook.yaml"]
    assert Path(saved[str(cm.home / "config.json")]).read_text() == '{"mine": true}'
    added = cm.ok("playbook", "add", "Always check token expiry before other auth debugging", "--category", "security")
    bullet = added["bullet"]
    assert bullet["id"].startswith("b-") and bullet["kind"] == "workflow_rule" and bullet["state"] == "draft"
    assert bullet["sourceSessions"] == ["manual-cli"]
    for _ in range(3):
        marked = cm.ok("mark", bullet["id"], "--helpful")
    assert marked == {"bulletId": bullet["id"], "type": "helpful", "newState": "established", "effectiveScore": 3.0}
    marked = cm.ok("mark", bullet["id"], "--harmful", "--reason", "caused_bug")
    assert marked["newState"] == "established" and marked["effectiveScore"] == -1.0

    ctx = cm.ok("context", "fix the auth token timeout bug")
    assert [b["id"] for b in ctx["relevantBullets"]] == [bullet["id"]]
    top = ctx["relevantBullets"][0]
    assert (top["relevanceScore"], top["effectiveScore"], top["finalScore"]) == (7, -1.0, 0.7)
    assert "embedding" not in top and top["lastHelpful"] == "just now"
    assert ctx["semanticMode"] == "keyword" and ctx["semanticNotice"]
    assert ctx["antiPatterns"] == [] and ctx["historySnippets"] == []
    assert ctx["suggestedCassQueries"][1] == "cass search 'fix fix' --days 60"  # the original's, quirk and all
    assert not any("'fix fix'" in q for q in ctx["suggestedHistoryQueries"])

    got = cm.ok("playbook", "get", bullet["id"])["bullet"]
    assert got["helpfulCount"] == 3 and got["harmfulCount"] == 1 and got["decayedHelpful"] == pytest.approx(3, abs=1e-3)
    assert cm.ok("why", bullet["id"][:8])["currentStatus"]["effectiveness"] == "Negative"


def test_error_envelopes_and_exit_codes(cm: Cm, tmp_path: Path) -> None:
    cm.fails("BULLET_NOT_FOUND", 2, "mark", "b-nothere1", "--helpful")
    cm.fails("MISSING_REQUIRED", 2, "mark", "b-nothere1")
    cm.fails("INVALID_INPUT", 2, "context", "task", "--limit", "0")
    cm.fails("INVALID_INPUT", 2, "context", "task", "--limit", "x")
    cm.fails("INVALID_INPUT", 1, "no-such-command")  # usage errors exit 1, as the reference's
    cm.fails("TRAUMA_NOT_FOUND", 1, "trauma", "heal", "trauma-00000000")
    cm.fails("FILE_NOT_FOUND", 4, "playbook", "import", str(tmp_path / "missing.yaml"))
    cm.fails("MISSING_API_KEY", 7, "audit")
    cm.fails("SERVER_UNREACHABLE", 5, "playbook", "list", "--server-url", "http://127.0.0.1:9")
    (cm.repo / ".cass").mkdir()
    (cm.repo / ".cass" / "config.json").write_text("{not json")
    cm.fails("CONFIG_INVALID", 3, "playbook", "list")
    run = cm("quickstart", json_=False)
    assert run.code == 0 and run.stdout.strip() and not run.stdout.lstrip().startswith("{")


def test_toon_output_and_token_stats(cm: Cm) -> None:
    import toon_format

    rule = cm.ok("add", "Pin the lockfile before upgrading a dependency in CI")["bullet"]["id"]
    run = cm("playbook", "list", "--format", "toon", "--stats", json_=False)
    assert run.code == 0, run.stderr
    envelope = toon_format.decode(run.stdout)
    assert envelope["success"] is True and envelope["data"]["bullets"][0]["id"] == rule
    assert "tokens ≈ JSON" in run.stderr and "TOON" in run.stderr
    by_env = cm("top", json_=False, CM_OUTPUT_FORMAT="toon")
    assert toon_format.decode(by_env.stdout)["command"] == "top"
    assert cm("top", json_=True, TOON_DEFAULT_FORMAT="toon").env["command"] == "top"  # --json beats the env
    failed = cm("mark", "b-nothere1", "--helpful", "--format", "toon", json_=False)
    assert failed.code == 2 and toon_format.decode(failed.stdout)["error"]["code"] == "BULLET_NOT_FOUND"


def test_export_import_round_trip_in_reference_format(cm: Cm, tmp_path: Path) -> None:
    reference = {
        "schema_version": 2, "name": "playbook", "description": "team rules",
        "metadata": {"createdAt": "2026-01-02T03:04:05.000Z", "totalReflections": 0, "totalSessionsProcessed": 0},
        "deprecatedPatterns": [{"pattern": "moment.js", "deprecatedAt": "2026-01-02T00:00:00.000Z",
                                "reason": "unmaintained", "replacement": "date-fns"}],
        "bullets": [
            {"id": "b-mx2cz7du-ptto9j", "scope": "global", "category": "testing",
             "content": "Run the integration tests before merging a migration", "source": "learned",
             "type": "rule", "isNegative": False, "kind": "workflow_rule", "state": "active",
             "maturity": "established", "helpfulCount": 3, "harmfulCount": 0,
             "feedbackEvents": [{"type": "helpful", "timestamp": "2026-01-03T00:00:00.000Z"}] * 3,
             "confidenceDecayHalfLifeDays": 90, "createdAt": "2026-01-02T03:04:05.000Z",
             "updatedAt": "2026-01-03T00:00:00.000Z", "pinned": False, "deprecated": False,
             "sourceSessions": ["/s/a.jsonl"], "sourceAgents": ["claude"], "tags": ["db"]},
            {"id": "b-mx2cz7du-anti01", "category": "git", "content": "AVOID: force pushing to main",
             "kind": "anti_pattern", "type": "anti-pattern", "isNegative": True, "state": "active",
             "createdAt": "2026-01-02T03:04:05.000Z", "updatedAt": "2026-01-02T03:04:05.000Z"},
        ]}
    source = tmp_path / "playbook.yaml"
    source.write_text(yaml.safe_dump(reference, sort_keys=False))
    data = cm.ok("playbook", "import", str(source))
    assert (data["added"], data["skipped"], data["target"]) == (2, 0, "global")
    assert cm.ok("playbook", "import", str(source))["skipped"] == 2

    exported = yaml.safe_load(cm("playbook", "export", "--yaml", json_=False).stdout)
    assert exported["schema_version"] == 2 and exported["metadata"]["exportedBulletCount"] == 2
    by_id = {b["id"]: b for b in exported["bullets"]}
    first = by_id["b-mx2cz7du-ptto9j"]
    original = reference["bullets"][0]
    for key in ("content", "category", "kind", "state", "maturity", "feedbackEvents", "tags", "createdAt"):
        assert first[key] == original[key], key
    assert "sourceSessions" not in first and "sourceAgents" not in first
    assert list(first)[:6] == ["id", "scope", "category", "content", "source", "type"]
    assert exported["deprecatedPatterns"][0]["pattern"] == "moment.js"

    ctx = cm.ok("context", "should I add moment.js for git force pushing", "--no-history")
    assert [b["id"] for b in ctx["antiPatterns"]] == ["b-mx2cz7du-anti01"]
    assert ctx["deprecatedWarnings"] and "date-fns" in ctx["deprecatedWarnings"][0]

    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(exported, sort_keys=False))
    home2 = Cm(tmp_path / "second")
    assert home2.ok("playbook", "import", str(again))["added"] == 2
    assert yaml.safe_load(home2("playbook", "export", "--yaml", json_=False).stdout)["bullets"] == exported["bullets"]


def test_repo_playbook_merges_with_global_and_repo_wins(cm: Cm) -> None:
    cm.ok("init")
    cm.ok("playbook", "add", "Use pnpm workspaces for the monorepo build steps", "--category", "workflow")
    cm.ok("init", "--repo")
    repo_book = yaml.safe_load((cm.repo / ".cass" / "playbook.yaml").read_text())
    assert repo_book["name"] == "repo-playbook"
    repo_book["bullets"] = [{"id": "b-repo0001-aaaaaa", "category": "testing", "state": "active",
                             "content": "Run pnpm test in the repo root before pushing",
                             "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z"}]
    (cm.repo / ".cass" / "playbook.yaml").write_text(yaml.safe_dump(repo_book, sort_keys=False))
    listed = {b["id"] for b in cm.ok("playbook", "list")["bullets"]}
    assert "b-repo0001-aaaaaa" in listed and len(listed) == 2
    cm.ok("mark", "b-repo0001-aaaaaa", "--helpful")
    saved = yaml.safe_load((cm.repo / ".cass" / "playbook.yaml").read_text())
    assert saved["bullets"][0]["helpfulCount"] == 1  # written back to the repo file, not Cerememory
    elsewhere = cm.ok("playbook", "list", cwd=cm.home.parent)
    assert {b["id"] for b in elsewhere["bullets"]} == listed - {"b-repo0001-aaaaaa"}


def test_forget_invert_undo_remove_and_stats(cm: Cm) -> None:
    rule = cm.ok("add", "Always cache auth tokens in local storage for speed")["bullet"]["id"]
    other = cm.ok("add", "Write a failing test before fixing a reported bug")["bullet"]["id"]
    data = cm.ok("forget", rule, "--reason", "tokens leaked", "--invert")
    assert data["inverted"] is True and data["antiPatternId"].startswith("b-")
    blocked = [json.loads(line) for line in (cm.home / "blocked.log").read_text().splitlines()]
    assert blocked[0]["id"] == rule and blocked[0]["reason"] == "tokens leaked"
    anti = cm.ok("playbook", "get", data["antiPatternId"])["bullet"]
    assert anti["content"] == "AVOID: Always cache auth tokens in local storage for speed. tokens leaked"
    assert anti["isNegative"] is True and "inverted" in anti["tags"]
    assert rule not in {b["id"] for b in cm.ok("playbook", "list")["bullets"]}
    undone = cm.ok("undo", rule)
    assert undone["action"] == "un-deprecate" and undone["after"]["state"] == "active"
    assert rule in {b["id"] for b in cm.ok("playbook", "list")["bullets"]}
    cm.fails("MISSING_REQUIRED", 2, "playbook", "remove", other, "--hard")
    assert cm.ok("playbook", "remove", other)["action"] == "deprecated"
    stats = cm.ok("stats")
    assert stats["total"] == 3 and stats["byKind"]["anti_pattern"] == 1
    assert cm.ok("top", "2")["count"] == 2
    assert cm.ok("stale", "--days", "0")["count"] == 2
    similar = cm.ok("similar", "cache auth tokens in local storage", "--threshold", "0.3")
    assert similar["mode"] == "keyword" and similar["results"][0]["id"] == rule


def test_outcome_worked_example_and_apply(cm: Cm) -> None:
    rule = cm.ok("add", "Run the linter before committing changes to shared modules")["bullet"]["id"]
    data = cm.ok("outcome", "success", rule, "--duration", "300", "--text", "thanks, that worked")
    assert data == {"applied": 1, "missing": [], "type": "helpful", "weight": 1.8, "sentiment": "positive"}
    bullet = cm.ok("playbook", "get", rule)["bullet"]
    event = bullet["feedbackEvents"][-1]
    assert event["context"] == "success, fast, sentiment+" and event["decayedValue"] == 1.8
    assert bullet["effectiveScore"] == pytest.approx(0.9, abs=1e-3)
    soft = cm("outcome", "mixed", rule, "--errors", "1")
    assert soft.code == 0 and soft.env["effect"] is False and soft.env["data"]["feedbackRecorded"] is False
    replay = cm.ok("outcome-apply")
    assert replay["applied"] == 0 and replay["totalOutcomes"] == 2  # idempotent per recordedAt
    secret = "sk-ant-api03-" + "A1b2C3d4" * 12
    cm.ok("outcome", "success", rule, "--text", f"worked with key {secret}")
    import cerememory

    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        logged = mem.raw_recall(session_id="cm:outcomes", include_private_scratch=True, limit=10).records
    notes = [r.metadata["entry"].get("notes") or "" for r in logged]
    assert "worked with key [REDACTED]" in notes and not any(secret in r.content.plain_text() for r in logged)


def test_trauma_registry_and_claude_hook(cm: Cm) -> None:
    entry = cm.ok("trauma", "add", r"^rm\s+-rf\s+/", "--message", "wiped a server")["entry"]
    assert entry["id"].startswith("trauma-") and entry["severity"] == "CRITICAL"
    cm.fails("INVALID_INPUT", 1, "trauma", "add", "([unclosed")  # the reference exits 1 here
    assert cm.ok("trauma", "list")["traumas"][0]["id"] == entry["id"]
    ctx = cm.ok("context", "rm -rf /var/cache/app to free space", "--no-history")
    assert ctx["traumaWarning"]["pattern"] == entry["pattern"]

    (cm.repo / ".claude").mkdir()
    cm.fails("FILE_NOT_FOUND", 4, "guard", "--install", cwd=cm.home.parent)
    installed = cm.ok("guard", "--install")
    assert installed["alreadyInstalled"] is False
    settings = json.loads((cm.repo / ".claude" / "settings.json").read_text())
    assert settings["hooks"]["PreToolUse"][0]["matcher"] == "Bash"
    assert cm.ok("guard", "--install")["alreadyInstalled"] is True
    hook = cm.repo / ".claude" / "hooks" / "trauma_guard.py"
    environ = {**cm.environ, "CLAUDE_PROJECT_DIR": str(cm.repo)}

    def feed(payload: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(hook)], input=payload, capture_output=True, text=True,
                              env=environ, cwd=cm.repo, timeout=30)

    denied = feed(json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf /var/lib/db"}}))
    assert denied.returncode == 0
    decision = json.loads(denied.stdout)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny" and "wiped a server" in decision["permissionDecisionReason"]
    for harmless in (json.dumps({"tool_name": "Bash", "tool_input": {"command": "ls -la"}}),
                     json.dumps({"tool_name": "Edit", "tool_input": {"command": "rm -rf /"}}), "not json"):
        allowed = feed(harmless)
        assert allowed.returncode == 0 and allowed.stdout == ""
    healed = cm.ok("trauma", "heal", entry["id"])
    assert healed["updated"] == 1
    assert feed(json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf /var/lib/db"}})).stdout == ""
    assert cm.ok("trauma", "list")["healedCount"] == 1
    cm.fails("MISSING_REQUIRED", 2, "trauma", "remove", entry["id"])
    assert cm.ok("trauma", "remove", entry["id"], "--force")["removed"] == 1


def test_git_precommit_hook_blocks_added_lines(cm: Cm) -> None:
    cm.ok("trauma", "add", r"^rm\s+-rf\s+/", "--scope", "project")
    assert (cm.repo / ".cass" / "traumas.jsonl").exists()
    assert cm.ok("guard", "--git")["alreadyInstalled"] is False
    git = ["git", "-C", str(cm.repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    environ = {**cm.environ}
    (cm.repo / "clean.sh").write_text("echo hello\n")
    subprocess.run([*git, "add", "clean.sh"], check=True, env=environ)
    ok = subprocess.run([*git, "commit", "-qm", "clean"], capture_output=True, text=True, env=environ)
    assert ok.returncode == 0, ok.stderr
    (cm.repo / "danger.sh").write_text("#!/bin/sh\nrm -rf /var/cache/x\n")
    subprocess.run([*git, "add", "danger.sh"], check=True, env=environ)
    blocked = subprocess.run([*git, "commit", "-qm", "danger"], capture_output=True, text=True, env=environ)
    assert blocked.returncode != 0 and "COMMIT BLOCKED" in blocked.stderr
    (cm.repo / "danger.sh").write_text("#!/bin/sh\n")  # a deleted line never blocks
    subprocess.run([*git, "add", "danger.sh"], check=True, env=environ)
    assert subprocess.run([*git, "commit", "-qm", "fine"], capture_output=True, env=environ).returncode == 0


def test_starters_project_onboard_privacy_doctor(cm: Cm) -> None:
    names = [s["name"] for s in cm.ok("starters")["starters"]]
    assert names == sorted(names) and {"general", "typescript", "react", "python", "node", "rust"} <= set(names)
    init = cm.ok("init", "--starter", "python")
    assert init["starter"] == {"added": 4, "skipped": 0, "name": "python"}
    project = cm.ok("project", "--format", "agents.md")
    assert project["content"].startswith("# AGENTS.md") and "## Rules" in project["content"]
    claude = cm.ok("project", "--format", "claude.md")["content"]
    assert claude.startswith("<project_rules>")
    gaps = cm.ok("onboard", "gaps")["gapAnalysis"]
    assert gaps["byCategory"]["testing"]["count"] == 1 and "security" in gaps["gaps"]["critical"]
    assert cm.ok("privacy", "enable", "claude")["crossAgent"]["agents"] == ["claude"]
    assert cm.ok("privacy", "status")["crossAgent"]["enabled"] is True
    doctor = cm.ok("doctor")
    assert doctor["overallStatus"] in ("healthy", "degraded", "unhealthy") and doctor["checks"]
    assert {"summary", "oneCommand", "protocol"} <= set(cm.ok("quickstart"))
    assert cm.ok("usage")["dailyLimit"] == 1.0


def test_onboard_read_template_prompt_and_guided(cm: Cm) -> None:
    import cerememory

    cm.ok("add", "Run the unit tests before pushing a fix for a failing CI job", "--category", "testing")
    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        mem.store_raw("the CI test job fails with a timeout in the mock server", session_id="s-ci", speaker="user",
                      metadata={"agent": "codex", "workspace": "/home/dev/shop"})
        mem.store_raw("fixed the mock fixture; all unit tests pass", session_id="s-ci", speaker="assistant")
    plain = cm.ok("onboard", "read", "s-ci")
    assert plain["step"] == "read" and "mock fixture" in plain["sessionContent"] and plain["extractionPrompt"]
    template = cm.ok("onboard", "read", "s-ci", "--template")
    meta = template["metadata"]
    assert (meta["agent"], meta["workspaceName"], meta["messageCount"]) == ("codex", "shop", 2)
    assert "testing" in meta["topicHints"]
    assert template["context"]["relatedRules"] == [] and "semantic" in template["context"]["relatedRulesNotice"]
    assert "security" in template["context"]["playbookGaps"]["critical"]
    assert template["extractionFormat"]["categories"][0] == "debugging"
    assert len(cm.ok("onboard", "prompt")["examples"]) == 6
    guided = cm.ok("onboard", "guided")
    assert guided["workflow"][0]["command"].startswith("cm onboard status") and guided["status"]["playbookRules"] >= 0
    missing = cm("onboard", "read", "no-such-session", "--template")
    assert (missing.code, missing.env["error"]["code"]) == (2, "SESSION_NOT_FOUND")


def test_reflect_honours_inline_feedback_from_the_raw_journal(cm: Cm) -> None:
    rule = cm.ok("add", "Check the migration order before running alembic upgrade")["bullet"]["id"]
    import cerememory

    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        mem.store_raw("please fix the failing alembic migration in the billing service", session_id="s-1",
                      speaker="user", metadata={"agent": "claude"})
        mem.store_raw(f"Reordered the revisions. # [cass: helpful {rule}] - caught the wrong order\n"
                      "All tests pass now, fixed.", session_id="s-1", speaker="assistant")
    dry = cm.ok("reflect", "--dry-run")
    assert dry["deltas"][0]["bulletId"] == rule
    data = cm.ok("reflect")
    assert data["autoOutcome"]["inlineFeedbackDeltas"] == 1 and data["llm"]["used"] is False
    counters = cm.ok("playbook", "export")["metadata"]
    assert (counters["totalReflections"], counters["totalSessionsProcessed"]) == (1, 1)
    assert cm.ok("playbook", "get", rule)["bullet"]["helpfulCount"] == 1
    again = cm("reflect")
    assert again.env["data"] == {"errors": []}  # processed sessions are not reflected twice
    history = cm.ok("context", "alembic migration billing")["historySnippets"]
    assert any(h["sessionId"] == "s-1" for h in history if h["source"] == "raw_journal")
    assert cm.ok("validate", "Check the alembic migration order")["verdict"] in ("ACCEPT", "ACCEPT_WITH_CAUTION")


def _diaries(cm: Cm) -> dict[str, dict]:
    import cerememory

    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        listed = mem.list_records("episodic", metadata={"cm_kind": "diary"})
    return {r.metadata["diary"]["sessionPath"]: r.metadata["diary"] for r in listed.records}


def test_reflect_enriches_diaries_across_agents_only_with_consent(cm: Cm) -> None:
    import cerememory

    def session(session_id: str, agent: str, words: str) -> None:
        with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
            mem.store_raw(f"please fix the {words} in the billing service", session_id=session_id, speaker="user",
                          metadata={"agent": agent})
            mem.store_raw(f"fixed the {words}; the billing tests pass now", session_id=session_id,
                          speaker="assistant", metadata={"agent": agent})

    session("codex-1", "codex", "alembic migration heads")
    session("claude-1", "claude_code", "alembic migration heads")
    cm.ok("reflect", CM_AGENT="claude_code")
    assert _diaries(cm)["claude-1"]["relatedSessions"] == []  # enrichment is off by default
    audit = cm.repo / ".cass" / "privacy-audit.jsonl"
    assert not audit.exists()

    cm.ok("privacy", "enable", CM_AGENT="claude_code")
    session("claude-2", "claude_code", "alembic migration heads again")
    cm.ok("reflect", CM_AGENT="claude_code")
    related = _diaries(cm)["claude-2"]["relatedSessions"]
    assert [r["agent"] for r in related] == ["codex"] and related[0]["sessionPath"].endswith("codex-1")
    line = json.loads(audit.read_text().splitlines()[-1])
    assert line["action"] == "diary_enrichment" and line["agentsReturned"] == ["codex"]

    cm.ok("privacy", "deny", "codex", CM_AGENT="claude_code")
    session("claude-3", "claude_code", "alembic migration heads once more")
    cm.ok("reflect", CM_AGENT="claude_code")
    assert _diaries(cm)["claude-3"]["relatedSessions"] == []


def test_similar_and_add_check_report_near_duplicates(cm: Cm) -> None:
    first = cm.ok("add", "Run the unit tests before pushing a fix for a failing CI job")["bullet"]["id"]
    similar = cm.ok("similar", "run unit tests before pushing a fix", "--threshold", "0.3")
    assert similar["mode"] == "keyword" and "semantic" in similar["semanticNotice"]
    assert similar["results"][0]["id"] == first and similar["threshold"] == 0.3
    told = cm("similar", "deploy the frontend", json_=False).stdout  # says the threshold it applied
    assert "No similar rules at similarity ≥ 0.70 (keyword similarity)" in told and "--threshold" in told
    check = cm.ok("add", "Run the unit tests before pushing a fix for a failing CI job again", "--check")
    (warning,) = [w for w in check["validation"]["warnings"] if w["type"] == "similarity"]
    assert warning["details"]["similarRuleId"] == first and warning["details"]["similarityScore"] >= 0.8
    assert check["validation"]["similarity"]["mode"] == "keyword"
    strict = cm("add", "Run the unit tests before pushing a fix for a failing CI job now", "--check", "--strict")
    assert (strict.code, strict.env["error"]["code"]) == (2, "VALIDATION_FAILED")


@pytest.mark.skipif(not local_embedder_available(), reason="needs the 'embed' extra")
def test_semantic_mode_when_the_local_embedder_runs_offline(cm: Cm) -> None:
    semantic = {"CEREMEMORY_EMBED__SEMANTIC": "auto"}  # unset: semantic exactly when the local model runs
    rule = cm.ok("add", "Rotate the deploy credentials whenever a laptop goes missing", **semantic)["bullet"]["id"]
    cm.ok("add", "Prefer small pull requests for the billing service", **semantic)
    data = cm.ok("context", "my notebook computer was stolen at the airport", "--min-score", "0", **semantic)
    assert data["semanticMode"] == "semantic" and "semanticNotice" not in data
    assert data["relevantBullets"][0]["id"] == rule
    similar = cm.ok("similar", "stolen notebook computer", "--threshold", "0.2", **semantic)
    assert similar["mode"] == "semantic" and similar["results"][0]["id"] == rule
    (cm.home / "config.json").write_text(json.dumps({"semanticSearchEnabled": False}))
    pinned = cm.ok("context", "my notebook computer was stolen", **semantic)
    assert pinned["semanticMode"] == "keyword" and "false" in pinned["semanticNotice"]


def test_repo_files_are_locked_for_concurrent_writers(cm: Cm, tmp_path: Path) -> None:
    files = []
    for n in range(6):
        path = tmp_path / f"rules-{n}.yaml"
        path.write_text(yaml.safe_dump({"bullets": [{"id": f"b-lock{n}-aaaaaa", "content": f"Rule number {n} "
                                                     "for the locking test", "category": "testing"}]}))
        files.append(path)
    procs = [subprocess.Popen([sys.executable, "-m", "cerememory.cm.cli", "playbook", "import", str(f), "--repo",
                               "--json"], cwd=cm.repo, env=cm.environ, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for f in files]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    book = yaml.safe_load((cm.repo / ".cass" / "playbook.yaml").read_text())
    assert sorted(b["id"] for b in book["bullets"]) == [f"b-lock{n}-aaaaaa" for n in range(6)]  # none lost

    held = cm.repo / ".cass" / "playbook.yaml.lock.d"
    held.mkdir()
    (held / "owner").write_text("another-process")
    cm.fails("LOCK_ACQUISITION_FAILED", 4, "playbook", "import", str(files[0]), "--repo", "--replace")
    old = time.time() - 60
    os.utime(held, (old, old))  # a lock nobody touched for a minute is stale: taken over
    assert cm.ok("playbook", "import", str(files[0]), "--repo", "--replace")["updated"] == 1
    assert not held.exists()


def test_doctor_is_not_degraded_for_want_of_an_llm(cm: Cm) -> None:
    import cerememory

    cm.ok("init")
    cm.ok("init", "--repo")
    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        mem.store_raw("ran the test suite", session_id="s-1", speaker="assistant")
    doctor = cm.ok("doctor")
    (llm,) = [c for c in doctor["checks"] if c["category"] == "LLM Configuration"]
    assert (llm["status"], llm["details"]["configured"]) == ("pass", False) and "optional" in llm["message"]
    # semantic search is off in these tests, and that alone is what is left to warn about
    assert [c["item"] for c in doctor["checks"] if c["status"] != "pass"] == ["semantic search"]
    assert "Configure an LLM (optional)" in [a["label"] for a in doctor["recommendedActions"]]


def test_bootstrap_onboarding_scan_privacy_history_guard_and_doctor(cm: Cm, tmp_path: Path) -> None:
    import cerememory

    assert cm.ok("playbook", "bootstrap", "--starter", "python")["starter"]["added"] == 4
    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        mem.store_raw("please clean the test cache on the build box", session_id="s-1", speaker="user",
                      metadata={"agent": "claude_code"})
        mem.store_raw("ran the pytest fixture cleanup; tests pass", session_id="s-1", speaker="assistant",
                      metadata={"agent": "claude_code"})
    sample = cm.ok("onboard", "sample")
    assert [s["path"] for s in sample["sessions"]] == ["s-1"]
    assert "testing" in sample["sessions"][0]["matchedCategories"]
    assert cm.ok("onboard", "mark-done", "s-1")["skipped"] is True
    assert cm.ok("onboard", "sample")["sessions"] == []  # processed sessions are not offered again
    assert cm.ok("onboard", "reset", "--yes")["message"]
    assert [s["path"] for s in cm.ok("onboard", "sample")["sessions"]] == ["s-1"]

    history = cm.ok("history", "pytest fixture", "--days", "30")["historySnippets"]
    assert history[0]["sessionId"] == "s-1" and "pytest fixture" in history[0]["snippet"]

    danger = tmp_path / "danger.txt"
    danger.write_text("rm -rf / --no-preserve-root\ngit push --force origin main\n")
    described = {c["description"] for c in cm.ok("trauma", "scan", str(danger))["candidates"]}
    assert "recursive deletion of root subdirectories" in described
    imported = tmp_path / "traumas.jsonl"
    imported.write_text(json.dumps({"pattern": "^DROP TABLE", "description": "dropped prod"}) + "\n")
    assert cm.ok("trauma", "import", str(imported))["imported"] == 1

    assert cm.ok("privacy", "allow", "codex")["crossAgent"]["agents"] == ["codex"]
    cm.ok("privacy", "enable")
    assert cm.ok("privacy", "disable")["crossAgent"]["enabled"] is False

    status = cm.ok("guard", "--status")
    assert status["claude"]["installed"] is False and status["traumas"]["active"] == 1
    (cm.home / "blocked.log").unlink(missing_ok=True)
    doctor = cm.ok("doctor", "--fix")
    assert doctor["fixResults"] and (cm.home / "blocked.log").exists()


def test_hostile_input_fails_cleanly_or_degrades(cm: Cm, tmp_path: Path) -> None:
    raw = subprocess.run([sys.executable, "-m", "cerememory.cm.cli", "context", b"fix the \xff\xfe parser", "--json"],
                         capture_output=True, cwd=cm.repo, env=cm.environ, timeout=120)
    assert raw.returncode == 0 and json.loads(raw.stdout)["data"]["task"] == "fix the \ufffd\ufffd parser"
    long_task = cm.ok("context", "refactor the parser " * 3000)  # far past what similarity reads
    assert long_task["task"].startswith("refactor the parser")
    assert cm.ok("add", "z" * 20_000)["bullet"]["content"] == "z" * 20_000  # the reference takes it too
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"content": "y" * 1_100_000}, {"content": "Run the linter before a commit"},
                                 {"content": 42}, "not an object"]))
    batch = cm.ok("playbook", "add", "--file", str(rules))
    assert batch["summary"] == {"total": 4, "succeeded": 1, "skipped": 0, "failed": 3}
    assert "at most 131,072 characters" in batch["failed"][0]["error"]
    rules.write_text("[{not json")
    unparsed = cm.ok("playbook", "add", "--file", str(rules))  # the reference: one failed entry, exit 0
    assert unparsed["failed"][0]["content"] == "[input]" and unparsed["failed"][0]["error"].startswith("Invalid JSON")
    assert [b["content"] for b in cm.ok("playbook", "list")["bullets"]] == ["z" * 20_000,
                                                                          "Run the linter before a commit"]
