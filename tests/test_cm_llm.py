"""The LLM path of `cm reflect` and `cm validate` against a loopback HTTP stub speaking the
OpenAI chat format: rules come from the stub's JSON, usage is reported, and a malformed reply or
a timeout falls back to the deterministic path with a warning."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cerememory.embed import local_embedder_available
from tests.test_cm_cli import Cm

NEW_RULE = "Run alembic check before generating a new billing migration"


class Stub:
    """Answers each chat completion per `mode`: ok (the JSON in `reply`), malformed (prose), slow."""

    def __init__(self) -> None:
        self.mode, self.reply, self.requests = "ok", {"deltas": []}, []
        self.audit: dict[str, Any] = {"violations": []}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                stub.requests.append(body)
                if stub.mode == "slow":
                    time.sleep(2.0)
                system = body["messages"][0]["content"]
                answer: Any = stub.reply
                if "audit one" in system:
                    answer = stub.audit
                if "write the diary" in system:
                    answer = {"status": "success", "accomplishments": ["fixed the billing migration"],
                              "decisions": ["kept alembic"], "challenges": ["a missing revision"],
                              "preferences": [], "keyLearnings": ["alembic check catches missing revisions"],
                              "tags": ["alembic"]}
                if "judge whether" in system:
                    answer = {"verdict": "REFINE", "confidence": 0.9, "reason": "one success, one failure",
                              "refinedRule": "Run alembic check before every billing migration"}
                text = "Sure, here are some thoughts." if stub.mode == "malformed" else json.dumps(answer)
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}],
                                   "usage": {"prompt_tokens": 40, "completion_tokens": 10}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (the timeout case)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    yield server
    server.server.shutdown()
    server.server.server_close()


def use_stub(cm: Cm, stub: Stub, **settings: Any) -> None:
    """cm's config.json pointed at the stub as an OpenAI-compatible provider."""
    cm.home.mkdir(parents=True, exist_ok=True)
    (cm.home / "config.json").write_text(json.dumps({
        "provider": "openai", "model": "stub-model", "baseUrl": stub.url, "apiKey": "sk-test-key", **settings}))


def _journal(cm: Cm, session: str, *turns: str) -> None:
    import cerememory

    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        for n, text in enumerate(turns):
            mem.store_raw(text, session_id=session, speaker="user" if n % 2 == 0 else "assistant",
                          metadata={"agent": "claude_code"})


def test_reflect_and_validate_through_the_llm_with_fallbacks(tmp_path: Path, stub: Stub) -> None:
    cm = Cm(tmp_path)
    use_stub(cm, stub, llmTimeoutMs=500, maxReflectorIterations=3)
    env = {"CEREMEMORY_LLM__MAX_RETRIES": "0"}
    rule = cm.ok("add", "Check the migration order before running alembic upgrade", **env)["bullet"]["id"]
    stub.reply = {"deltas": [
        {"type": "add", "bullet": {"content": NEW_RULE, "category": "database"}, "reason": "the check caught a "
         "missing revision"},
        {"type": "helpful", "bulletId": rule, "reason": "ordering mattered"},
        {"type": "add", "bullet": {"content": "too short"}}]}  # dropped: not a rule
    _journal(cm, "s-ok", "please fix the failing alembic migration in the billing service",
             "alembic check successfully caught the missing revision; all tests pass now")

    data = cm.ok("reflect", **env)
    assert data["llm"]["used"] is True and data["llm"]["provider"] == "openai"
    usage = data["usage"]
    assert usage["calls"] == 3 and usage["totalTokens"] == 150  # the diary, then 2 rounds: the 2nd adds nothing
    assert usage["model"] == "stub-model" and usage["budget"]["tokensToday"] == 150
    assert data["sessions"][0]["diary"] == "llm"
    import cerememory

    with cerememory.open(cm.home / "cerememory", semantic="off") as mem:
        (diary,) = [r.metadata["diary"] for r in mem.list_records("episodic", metadata={"cm_kind": "diary"}).records]
    assert diary["keyLearnings"] == ["alembic check catches missing revisions"]
    assert "revisions" in diary["searchAnchors"]
    assert stub.requests[1]["model"] == "stub-model" and "alembic" in stub.requests[1]["messages"][1]["content"]
    log = {(e["phase"], e["action"]): e for e in data["global"]["decisionLog"]}
    assert log[("add", "accepted")]["content"] == NEW_RULE and ("feedback", "accepted") in log
    listed = {b["content"]: b for b in cm.ok("playbook", "list", **env)["bullets"]}
    assert listed[NEW_RULE]["sourceSessions"] == ["s-ok"] and listed[NEW_RULE]["category"] == "database"

    for mode, reason in (("malformed", "malformed reply"), ("slow", "timed out")):
        stub.mode = mode
        _journal(cm, f"s-{mode}", f"please look at the {mode} deploy script again",
                 "the deploy script is fixed and the pipeline passed")
        run = cm("reflect", **env)
        assert run.code == 0, run.stdout + run.stderr
        assert run.env["data"]["llm"]["used"] is False and reason in run.env["data"]["llm"]["reason"]
        assert any("fell back to the deterministic path" in w for w in run.env["warnings"])
        assert run.env["data"]["sessions"][0]["session"] == f"s-{mode}"  # the deterministic path still ran

    stub.mode = "ok"
    _journal(cm, "s-a", "alembic check for billing migration: successfully validated the revisions")
    _journal(cm, "s-b", "alembic check for billing migration failed with error: multiple heads")
    verdict = cm.ok("validate", "Run alembic check before a billing migration", **env)
    assert verdict["verdict"] == "ACCEPT_WITH_CAUTION" and verdict["confidence"] == 0.72
    assert verdict["refinedRule"] == "Run alembic check before every billing migration"
    assert verdict["llm"]["used"] is True and verdict["usage"]["calls"] == 1


def test_audit_finds_rule_violations_through_the_llm(tmp_path: Path, stub: Stub) -> None:
    cm = Cm(tmp_path)
    no_llm = cm("audit", CASS_MEMORY_LLM="none")
    assert (no_llm.code, no_llm.env["error"]["code"]) == (7, "MISSING_API_KEY")
    assert any("--trauma" in step for step in no_llm.env["error"]["recovery"])
    use_stub(cm, stub, llmTimeoutMs=500)
    env = {"CEREMEMORY_LLM__MAX_RETRIES": "0"}
    rule = cm.ok("add", "Never force-push to the main branch of the billing repo", **env)["bullet"]["id"]
    _journal(cm, "s-push", "the branch diverged, so I ran git push --force origin main", "pushed")
    stub.audit = {"violations": [{"bulletId": rule, "evidence": "git push --force origin main", "proven": True},
                                 {"bulletId": "b-unknown", "evidence": "made up"}]}
    data = cm.ok("audit", "--days", "3", **env)
    (found,) = data["violations"]
    assert (found["bulletId"], found["sessionPath"], found["severity"]) == (rule, "s-push", "high")
    assert found["evidence"] == "git push --force origin main" and found["bulletContent"].startswith("Never")
    assert data["stats"] == {"sessionsScanned": 1, "rulesChecked": 1, "violationsFound": 1,
                             "bySeverity": {"high": 1, "medium": 0, "low": 0}}
    assert data["usage"]["calls"] == 1 and data["llm"]["used"] is True
    assert rule in stub.requests[-1]["messages"][1]["content"]

    stub.mode = "malformed"
    run = cm("audit", **env)
    assert run.code == 0 and run.env["data"]["violations"] == []
    assert "malformed reply" in run.env["data"]["errors"][0]["error"]
    assert any("not audited" in w for w in run.env["warnings"])


@pytest.mark.skipif(not local_embedder_available(), reason="needs the 'embed' extra")
def test_reflect_reinforces_a_paraphrased_rule_instead_of_adding_it(tmp_path: Path, stub: Stub) -> None:
    cm = Cm(tmp_path)
    use_stub(cm, stub, llmTimeoutMs=5000, maxReflectorIterations=1)
    env = {"CEREMEMORY_LLM__MAX_RETRIES": "0", "CEREMEMORY_EMBED__SEMANTIC": "auto"}
    rule = cm.ok("add", "Rotate the deploy credentials whenever a laptop goes missing", **env)["bullet"]["id"]
    paraphrase = "Always rotate deploy credentials if a laptop is lost"  # token Jaccard far below 0.85
    stub.reply = {"deltas": [{"type": "add", "bullet": {"content": paraphrase, "category": "security"},
                              "reason": "the lost laptop incident"}]}
    _journal(cm, "s-laptop", "a laptop with deploy access was lost at the airport yesterday",
             "rotated the deploy credentials and revoked the old ones; all good now")
    data = cm.ok("reflect", **env)
    (entry,) = [e for e in data["global"]["decisionLog"] if e["phase"] == "dedup"]
    assert entry["action"] == "modified" and entry["bulletId"] == rule and "semantically" in entry["reason"]
    bullets = cm.ok("playbook", "list", **env)["bullets"]
    assert [b["id"] for b in bullets] == [rule] and bullets[0]["helpfulCount"] == 1
