"""The LLM adapters against a local HTTP stub on loopback (the only stand-in for a cloud service),
and the dream's fallback to the extractive summary when the LLM fails."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import cerememory
from cerememory.llm import LLMClient, LLMError, LLMSettings

T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)
CANARY = "ZEBRA-CANARY-5120"

REPLIES: dict[str, Callable[[str], dict]] = {
    "openai": lambda text: {"choices": [{"message": {"role": "assistant", "content": text}}],
                            "usage": {"prompt_tokens": 40, "completion_tokens": 10}},
    "anthropic": lambda text: {"content": [{"type": "text", "text": text}],
                               "usage": {"input_tokens": 40, "output_tokens": 10}},
    "gemini": lambda text: {"candidates": [{"content": {"parts": [{"text": text}]}}],
                            "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 10}},
}


class Stub:
    """A loopback HTTP server answering like one provider; `script` is a list of behaviours
    ("ok", "slow", "malformed", "500") consumed per request (the last one repeats)."""

    def __init__(self, provider: str, script: list[str]) -> None:
        self.provider, self.script, self.requests = provider, list(script), []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                action = stub.script.pop(0) if len(stub.script) > 1 else stub.script[0]
                if action == "slow":
                    time.sleep(1.0)
                if action == "500":
                    self.send_response(503)
                    self.end_headers()
                    return
                reply = {"unexpected": True} if action == "malformed" else REPLIES[stub.provider](
                    "Alice and Bob agreed to ship Falcon on Monday March 10 at 09:00.")
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub(request) -> Iterator[Callable[..., Stub]]:
    made: list[Stub] = []

    def make(provider: str, *script: str) -> Stub:
        made.append(Stub(provider, list(script) or ["ok"]))
        return made[-1]

    yield make
    for s in made:
        s.close()


def journal(mem) -> None:
    mem.store_raw("Alice: shall we ship Falcon on Monday?", session_id="s1", created_at=T0)
    mem.store_raw("Bob: yes, Monday March 10 at 09:00.", session_id="s1", created_at=T0 + timedelta(minutes=1))
    mem.store_raw(f"token {CANARY}", session_id="s1", created_at=T0 + timedelta(minutes=2), secrecy_level="secret")


def open_with(tmp_path: Path, provider: str, url: str, **extra) -> cerememory.Memory:
    return cerememory.open(tmp_path / "data", semantic="off", llm__provider=provider, llm__base_url=url,
                           llm__api_key="test-key", llm__model="stub-model", **extra)


@pytest.mark.parametrize("provider,path,key_header", [
    ("openai", "/chat/completions", "authorization"),
    ("anthropic", "/messages", "x-api-key"),
    ("gemini", "/models/stub-model:generateContent", "x-goog-api-key"),
])
def test_each_provider_summarises_a_dream_group(tmp_path, stub, provider, path, key_header):
    server = stub(provider)
    with open_with(tmp_path, provider, server.url) as mem:
        journal(mem)
        result = mem.dream_tick(secrecy_levels=["public", "sensitive", "secret"])
        group = result.groups[0]
        assert (group.summariser, group.llm_fallback_reason, result.llm_fallbacks) == (
            f"llm:{provider}:stub-model", None, 0)
        text = mem.inspect(group.episodic_summary_id).content.plain_text()
        assert "Alice and Bob agreed to ship Falcon on Monday March 10 at 09:00." in text
        assert "(1 redacted record not quoted: 1 secret.)" in text
    [request] = server.requests
    assert request["path"] == path and key_header in {k.lower() for k in request["headers"]}
    sent = json.dumps(request["body"])
    assert "ship Falcon on Monday" in sent and CANARY not in sent  # redacted records never reach the LLM
    budget = json.loads((tmp_path / "data" / "llm_budget.json").read_text())
    assert (budget["tokens"], budget["calls"]) == (50, 1)


@pytest.mark.parametrize("behaviour,reason", [("slow", "timed out"), ("malformed", "malformed reply"),
                                              ("500", "HTTP 503")])
def test_failures_fall_back_to_the_extractive_summary(tmp_path, stub, behaviour, reason):
    server = stub("openai", behaviour)
    with open_with(tmp_path, "openai", server.url, llm__timeout_secs=0.3, llm__max_retries=0) as mem:
        journal(mem)
        result = mem.dream_tick()
        group = result.groups[0]
        assert group.summariser == "extractive" and reason in group.llm_fallback_reason
        assert result.llm_fallbacks == 1
        assert "Bob: yes, Monday March 10 at 09:00." in mem.inspect(group.episodic_summary_id).content.plain_text()
        assert "test-key" not in group.llm_fallback_reason


def test_retries_with_backoff_then_succeeds(stub):
    server = stub("anthropic", "500", "500", "ok")
    waits: list[float] = []
    client = LLMClient(LLMSettings(provider="anthropic", base_url=server.url, max_retries=2, backoff_secs=0.5),
                       sleep=waits.append)
    text, usage = client.complete("system", "prompt")
    assert text.startswith("Alice and Bob agreed") and usage.total == 50
    assert waits == [0.5, 1.0] and len(server.requests) == 3
    client.close()


def test_gives_up_after_the_retries(stub):
    server = stub("gemini", "500")
    client = LLMClient(LLMSettings(provider="gemini", base_url=server.url, max_retries=1), sleep=lambda s: None)
    with pytest.raises(LLMError) as err:
        client.complete("system", "prompt")
    assert err.value.reason == "HTTP 503 (2 attempts)" and len(server.requests) == 2


def test_daily_budget_is_persisted_and_enforced(tmp_path, stub):
    server = stub("openai")
    settings = LLMSettings(provider="openai", base_url=server.url, daily_token_budget=60)
    budget = tmp_path / "budget.json"
    LLMClient(settings, budget_path=budget).complete("s", "p")  # 50 tokens
    again = LLMClient(settings, budget_path=budget)  # a restart: the spend is remembered
    again.complete("s", "p")  # 100 tokens now, past the budget
    with pytest.raises(LLMError) as err:
        again.complete("s", "p")
    assert "daily token budget spent (100 of 60)" in err.value.reason
    assert len(server.requests) == 2
    costly = LLMSettings(provider="openai", base_url=server.url, daily_token_budget=0,
                         daily_cost_budget_usd=0.0001, usd_per_million_tokens=2.0)
    client = LLMClient(costly, budget_path=tmp_path / "cost.json")
    client.complete("s", "p")  # 50 tokens = $0.0001
    with pytest.raises(LLMError, match="daily cost budget"):
        client.complete("s", "p")


def test_llm_settings_come_from_the_environment(tmp_path, monkeypatch):
    from cerememory.config import load_config

    monkeypatch.setenv("CEREMEMORY_LLM__PROVIDER", "anthropic")
    monkeypatch.setenv("CEREMEMORY_LLM__DAILY_TOKEN_BUDGET", "1234")
    llm = load_config(flags={"data_dir": str(tmp_path)}).engine_options()["llm"]
    assert (llm.provider, llm.daily_token_budget, llm.effective_model) == ("anthropic", 1234, "claude-3-5-haiku-latest")
    monkeypatch.setenv("CEREMEMORY_LLM__PROVIDER", "mystery")
    with pytest.raises(cerememory.CMPError, match="llm.provider"):
        load_config(flags={"data_dir": str(tmp_path)})
