"""`cm` against a running `cerememory serve`: by --server-url, and by falling back to the server
that owns the data dir (DATA_DIR_LOCKED names its URL); and `cm serve` over MCP stdio."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ServeProcess
from tests.test_cm_cli import Cm


def test_add_mark_context_through_a_running_server(tmp_path: Path) -> None:
    cm = Cm(tmp_path)
    data_dir = tmp_path / "served"
    server = ServeProcess.serve(data_dir, tmp_path)
    try:
        added = cm.ok("add", "Always check token expiry before other auth debugging", "--server-url", server.url)
        rule = added["bullet"]["id"]
        for _ in range(3):
            marked = cm.ok("mark", rule, "--helpful", "--server-url", server.url)
        assert marked["newState"] == "established" and marked["effectiveScore"] == 3.0
        # no --server-url: the data dir is owned by the server, so cm talks to it
        run = cm("context", "fix the auth token timeout bug", CEREMEMORY_DATA_DIR=str(data_dir))
        assert run.code == 0, run.stdout
        assert run.env["metadata"]["storage"] == "server"
        assert "using http://" in run.stderr
        top = run.env["data"]["relevantBullets"][0]
        assert top["id"] == rule and top["relevanceScore"] == 7 and top["effectiveScore"] == 3.0
    finally:
        server.stop()


def test_cm_serve_over_mcp_stdio(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    cm = Cm(tmp_path)
    rule = cm.ok("add", "Run database migrations inside a transaction when the engine supports it")["bullet"]["id"]

    async def session() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "cerememory.cm.cli", "serve"],
                                       env=cm.environ, cwd=str(cm.repo))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"cm_context", "cm_feedback", "cm_outcome", "memory_search", "memory_reflect"} <= tools
            result = await client.call_tool("cm_context", {"task": "database migrations transaction"})
            assert not result.is_error
            data = json.loads(result.content[0].text)
            assert data["relevantBullets"][0]["id"] == rule
            feedback = await client.call_tool("cm_feedback", {"bulletId": rule, "helpful": True})
            assert json.loads(feedback.content[0].text)["type"] == "helpful"
            bad = await client.call_tool("cm_feedback", {"bulletId": rule})
            assert bad.is_error
            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            assert {"cm://playbook", "cm://stats", "cm://diary", "cm://outcomes"} <= resources
            book = await client.read_resource("cm://playbook")
            assert json.loads(book.contents[0].text)["bullets"][0]["id"] == rule

    asyncio.run(asyncio.wait_for(session(), 120))


def test_cm_serve_over_mcp_http_with_a_token(tmp_path: Path) -> None:
    import httpx
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    cm = Cm(tmp_path)
    rule = cm.ok("add", "Pin the container base image digest before a production release")["bullet"]["id"]
    refused = cm("serve", "--port", "1", "--host", "0.0.0.0")
    assert (refused.code, refused.env["error"]["code"]) == (3, "CONFIG_INVALID")  # no token off loopback

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**cm.environ, "MCP_HTTP_TOKEN": "s3cret-token"}
    server = subprocess.Popen([sys.executable, "-m", "cerememory.cm.cli", "serve", "--port", str(port)], env=env,
                              cwd=cm.repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                unauthorised = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "cm serve did not start"
                time.sleep(0.2)
        assert unauthorised.status_code == 401

        async def session() -> None:
            headers = {"authorization": "Bearer s3cret-token"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), \
                    ClientSession(read, write) as client:
                await client.initialize()
                assert "cm_context" in {t.name for t in (await client.list_tools()).tools}
                # concurrent calls queue for the data dir instead of failing on its lock
                results = await asyncio.gather(*(client.call_tool("cm_context", {"task": "production release base "
                                                                                  "image"}) for _ in range(4)))
                assert all(json.loads(r.content[0].text)["relevantBullets"][0]["id"] == rule for r in results)
                bad = await client.call_tool("cm_feedback", {"bulletId": "b-nothere1", "helpful": True})
                assert bad.is_error and "BULLET_NOT_FOUND: Bullet not found: b-nothere1" in bad.content[0].text

        asyncio.run(asyncio.wait_for(session(), 120))
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_context_reads_history_from_remote_cerememory_servers(tmp_path: Path) -> None:
    import cerememory
    from tests.conftest import free_port

    remote_dir = tmp_path / "buildbox"
    with cerememory.open(remote_dir, semantic="off") as mem:
        mem.store_raw("the flaky checkout test needed the payment sandbox reset first", session_id="bb-7",
                      speaker="assistant", metadata={"agent": "claude_code", "host": "buildbox"})
    server = ServeProcess.serve(remote_dir, tmp_path)
    try:
        cm = Cm(tmp_path)
        cm.home.mkdir(parents=True, exist_ok=True)
        (cm.home / "config.json").write_text(json.dumps({"remoteCass": {"enabled": True, "hosts": [
            {"host": server.url, "label": "buildbox"},
            {"host": "devbox.local"},
            {"host": f"http://127.0.0.1:{free_port()}"},
            {"host": "http://10.1.2.3:8420", "apiKey": "remote-secret"}]}}))  # refused, never contacted
        data = cm.ok("context", "fix the flaky checkout test payment sandbox", "--days", "30")
        (far,) = [h for h in data["historySnippets"] if h["origin"]["kind"] == "remote"]
        assert far["origin"]["host"] == "buildbox" and "payment sandbox" in far["snippet"]
        failed = {d["host"]: d for d in data["degraded"]["remoteCass"]}
        assert "http://devbox.local:8420" in failed["devbox.local"]["suggestedFix"][0]
        assert "in plaintext" in failed["http://10.1.2.3:8420"]["message"]
        assert "--insecure" in failed["http://10.1.2.3:8420"]["suggestedFix"][0]
        assert len(failed) == 3 and all(not d["available"] for d in failed.values())
    finally:
        server.stop()


def test_cm_never_sends_the_key_in_plaintext_to_another_machine_unless_insecure(tmp_path: Path) -> None:
    """As the cerememory CLI: an http:// URL whose host is not loopback gets no key unless
    --insecure is given. 0.0.0.0 is not a loopback name, yet connecting to it reaches this
    machine, where nothing listens on that port: with --insecure the request goes and finds no
    server."""
    from tests.conftest import free_port

    cm = Cm(tmp_path)
    url = f"http://0.0.0.0:{free_port()}"
    refused = cm.fails("INVALID_INPUT", 2, "stats", "--server-url", url, CEREMEMORY_SERVER_API_KEY="s3cret-key")
    assert "plaintext" in refused["error"]["message"] and "--insecure" in refused["error"]["hint"]
    assert "s3cret-key" not in json.dumps(refused)
    cm.fails("SERVER_UNREACHABLE", 5, "--insecure", "stats", "--server-url", url,
             CEREMEMORY_SERVER_API_KEY="s3cret-key")
