"""MCP through real interfaces: the SDK's own client over stdio against `cerememory mcp` proxying
to a real `cerememory serve`, and over streamable HTTP against /mcp on a real uvicorn server."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import typing
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

import cerememory
from cerememory import model
from cerememory.cmp.messages import ConsolidationStrategy, TimelineGranularity
from cerememory.model import StoreType
from cerememory.transport import mcp_server, mcp_tools
from cerememory.transport.http import create_app
from cerememory.transport.mcp_http import mount_streamable_http
from cerememory.transport.mcp_server import build_mcp_server

from .conftest import ServeProcess, ServerThread, clean_env, free_port

pytestmark = pytest.mark.xdist_group("mcp-serve")  # one worker builds its module fixture once

TOOLS = {"store", "store_raw", "update", "update_raw", "batch_store", "batch_store_raw", "recall", "recall_raw",
         "timeline", "associate", "sessions", "forget", "reinforce", "consolidate", "dream_tick", "stats", "inspect",
         "export"}
MISSING_ID = "01960000-0000-7000-8000-000000000000"


def _env(tmp: Path) -> dict[str, str]:
    return clean_env(tmp)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real `cerememory serve` process (GET /mcp streams bounded to half a second); yields its
    URL and data directory."""
    tmp = tmp_path_factory.mktemp("mcp-serve")
    process = ServeProcess.serve(tmp / "data", tmp, CEREMEMORY_MCP__STREAM_MAX_SECONDS="0.5")
    try:
        yield process.url, tmp / "data"
    finally:
        process.stop()


@pytest.fixture(scope="module")
def server(served: tuple[str, Path]) -> str:
    return served[0]


def _stdio(url: str, tmp_path: Path, body: Callable[[ClientSession], Awaitable[None]]) -> str:
    """Run `body` in an MCP session with `python -m cerememory mcp`; returns what it wrote to stderr."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "cerememory", "mcp", "--server-url", url],
                                   env=_env(tmp_path), cwd=str(tmp_path))
    errlog = tmp_path / "mcp-stderr.log"

    async def main() -> None:
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                with anyio.fail_after(60):
                    await body(session)

    anyio.run(main)
    return errlog.read_text()


def _http(url: str, body: Callable[[ClientSession], Awaitable[None]]) -> None:
    """Run `body` in an MCP session with the SDK's streamable HTTP client at `url`/mcp."""

    async def main() -> None:
        async with streamable_http_client(f"{url}/mcp") as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(60):
                await body(session)

    anyio.run(main)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; returns its structured result."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def fail(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail with a tool error (not a protocol error); returns its text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text


def test_stdio_proxy_stores_recalls_and_reports_errors(server: str, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        tools = (await session.list_tools()).tools
        assert {t.name for t in tools} == TOOLS
        schema = next(t for t in tools if t.name == "recall").input_schema["properties"]
        assert schema["limit"]["default"] == 10 and schema["limit"]["type"] == "integer"
        assert schema["stores"]["anyOf"][0]["items"]["enum"] == [s.value for s in StoreType]

        stored = await call(session, "store", content="The deploy key rotates every Monday", store="semantic",
                            meta={"intent": "remember the ops calendar", "rationale": "rotations broke CI twice"})
        assert stored["store"] == "semantic"
        await call(session, "store", content="Lunch with Bob about the Q3 roadmap", emotion="joy")

        found = await call(session, "recall", query="when does the deploy key rotate")
        top = found["memories"][0]
        assert top["record_id"] == stored["record_id"]
        assert top["text"] == "The deploy key rotates every Monday"
        assert top["store"] == "semantic" and top["meta"]["intent"] == "remember the ops calendar"
        assert set(top) >= {"relevance_score", "fidelity", "created_at", "emotion"}
        assert "bm25" in found["query_metadata"]["signals"] and found["total_candidates"] >= 1

        recent = await call(session, "recall")  # no query: the most recent memories
        assert [m["text"] for m in recent["memories"][:2]] == ["Lunch with Bob about the Q3 roadmap",
                                                          "The deploy key rotates every Monday"]
        assert recent["memories"][0]["emotion"] == "joy"

        # bad arguments: tool errors naming the CMP code, and the session goes on
        assert (await fail(session, "store", content="x", store="facts")).count("STORE_INVALID") == 1
        unconfirmed = await fail(session, "forget", record_ids=[stored["record_id"]])
        assert "FORGET_UNCONFIRMED" in unconfirmed and "confirm" in unconfirmed
        missing = await fail(session, "inspect", record_id=MISSING_ID)
        assert "RECORD_NOT_FOUND" in missing and MISSING_ID in missing and "hint:" in missing
        assert "VALIDATION_ERROR" in await fail(session, "update", record_id=stored["record_id"])

        assert (await call(session, "reinforce", record_ids=[stored["record_id"]])) == {"records_reinforced": 1}
        await call(session, "update", record_id=stored["record_id"], store="procedural")
        assert "RECORD_NOT_FOUND" in await fail(session, "reinforce", record_ids=[MISSING_ID])
        record = await call(session, "inspect", record_id=stored["record_id"])
        assert record["content"]["blocks"][0]["text"] == "The deploy key rotates every Monday"
        assert "data" not in record["content"]["blocks"][0]
        assert record["store"] == "procedural" and record["fidelity"]["reinforcement_count"] >= 1

        # export checks the path before asking the server
        traversal = await fail(session, "export", output_path="../escape.cma")
        assert "VALIDATION_ERROR" in traversal and "'..'" in traversal
        (tmp_path / "taken.cma").write_text("keep me")
        assert "already exists" in await fail(session, "export", output_path="taken.cma")
        assert "does not exist" in await fail(session, "export", output_path="no/such/dir/out.cma")
        exported = await call(session, "export", output_path="memory.cma")
        assert exported["output_path"] == str(tmp_path / "memory.cma") and exported["record_count"] >= 2
        assert (tmp_path / "memory.cma").read_bytes().startswith(b'{"kind":"header","format":"cma"')
        assert (tmp_path / "taken.cma").read_text() == "keep me"
        planned = await call(session, "consolidate", dry_run=True)
        assert planned["dry_run"] is True and planned["semantic_nodes_created"] == 0
        dreamt = await call(session, "dream_tick", dry_run=True)
        assert dreamt["dry_run"] is True and dreamt["episodic_summaries_created"] == 0

        before = (await call(session, "stats"))["total_records"]
        assert (await call(session, "forget", record_ids=[stored["record_id"]], confirm=True)) == {
            "records_deleted": 1}
        assert (await call(session, "stats"))["total_records"] == before - 1
        assert "RECORD_NOT_FOUND" in await fail(session, "inspect", record_id=stored["record_id"])

    stderr = _stdio(server, tmp_path, body)
    assert "Traceback" not in stderr


def test_stdio_journal_batches_timeline_and_associations(server: str, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        await call(session, "store_raw", content="user: can you rotate the staging key?", session_id="chat-7",
                   turn_id="t1")
        batch = await call(session, "batch_store_raw", session_id="chat-7", records=[
            {"content": "assistant: rotated, the new key is in the vault", "speaker": "assistant"},
            {"content": "scratch: check the CI secrets too", "visibility": "private_scratch"}])
        assert len(batch["results"]) == 2
        journal = await call(session, "recall_raw", session_id="chat-7")
        assert journal["total_candidates"] == 2  # the private scratch note stays hidden
        assert {r["speaker"] for r in journal["records"]} == {"user", "assistant"}
        scratch = await call(session, "recall_raw", session_id="chat-7", include_private_scratch=True)
        assert scratch["total_candidates"] == 3
        await call(session, "update_raw", record_id=batch["results"][0]["record_id"], suppressed=True)
        assert (await call(session, "recall_raw", session_id="chat-7"))["total_candidates"] == 1
        listed = await call(session, "sessions")
        assert ("chat-7", 1) in [(x["session_id"], x["turns"]) for x in listed["sessions"]]
        assert "VALIDATION_ERROR" in await fail(session, "update_raw", record_id=MISSING_ID)
        assert "VALIDATION_ERROR" in await fail(session, "recall_raw", start="2026-01-01T00:00:00Z")

        stored = await call(session, "batch_store", records=[
            {"content": "Step one: build the wheel", "store": "procedural"},
            {"content": "Step two: upload it", "store": "procedural"}])
        first, second = (r["record_id"] for r in stored["results"])
        linked = await call(session, "associate", record_id=first)
        assert second in {m["record_id"] for m in linked["memories"]}
        await call(session, "update", record_id=second, content="Step two: upload it to the index")
        assert (await call(session, "recall", query="upload index", stores="procedural"))["memories"][0][
            "text"] == "Step two: upload it to the index"

        timeline = await call(session, "timeline", granularity="day")
        assert sum(b["count"] for b in timeline["buckets"]) >= 2
        assert "VALIDATION_ERROR" in await fail(session, "timeline", granularity="fortnight")

    _stdio(server, tmp_path, body)


def test_streamable_http_on_the_main_app(tmp_path: Path) -> None:
    mem = cerememory.open(tmp_path / "data", semantic="off", archive__export_dir=str(tmp_path / "shared"))
    app = create_app(mem.engine, extra_routes=lambda a: mount_streamable_http(a, mem.engine))
    thread = ServerThread(app=app)  # lifespan="off", as `cerememory serve` runs it

    async def main() -> None:
        async with streamable_http_client(f"{thread.url}/mcp") as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(30):
                await body(session)

    async def body(session: ClientSession) -> None:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            stored = await call(session, "store", content="The staging DB moved to eu-west-1", store="semantic")
            found = await call(session, "recall", query="where is the staging database")
            assert found["memories"][0]["record_id"] == stored["record_id"]
            assert "RECORD_NOT_FOUND" in await fail(session, "inspect", record_id=MISSING_ID)
            exported = await call(session, "export", output_path="backup.cma")  # into archive.export_dir
            assert exported["output_path"] == str((tmp_path / "shared" / "backup.cma").resolve())

    try:
        anyio.run(main)
        # the CMP routes still answer beside /mcp, over the same engine
        assert httpx.get(f"{thread.url}/v1/introspect/stats").json()["total_records"] == 1
        assert "/mcp" not in httpx.get(f"{thread.url}/openapi.json", timeout=60).json()["paths"]
        forged = httpx.post(f"{thread.url}/mcp", headers={"host": "evil.example:80"}, json={})
        assert forged.status_code in (400, 421)  # DNS-rebinding protection
    finally:
        thread.stop()
        mem.close()
    assert not thread.thread.is_alive()


def test_api_key_is_never_sent_in_plaintext_off_loopback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cerememory", "mcp", "--server-url", "http://10.1.2.3:8420",
                           "--api-key", "k"], capture_output=True, env=_env(tmp_path), timeout=60, input=b"")
    assert proc.returncode != 0
    assert proc.stdout == b""
    assert b"plaintext" in proc.stderr and b"10.1.2.3" in proc.stderr


def test_url_checks() -> None:
    mcp_server.check_server_url("http://127.0.0.1:8420", "k")
    mcp_server.check_server_url("http://localhost:8420", "k")
    mcp_server.check_server_url("http://[::1]:8420", "k")
    mcp_server.check_server_url("https://memory.example.com", "k")
    mcp_server.check_server_url("http://10.1.2.3:8420", None)
    for url in ("ftp://127.0.0.1", "127.0.0.1:8420"):
        with pytest.raises(cerememory.CMPError, match="not an http"):
            mcp_server.check_server_url(url, None)


def test_schema_choices_match_the_protocol_enums() -> None:
    def choices(alias: Any) -> list[str]:
        (schema,) = (m for m in typing.get_args(alias)[1:] if hasattr(m, "json_schema"))
        return schema.json_schema["enum"]

    for alias, values in [(mcp_tools.StoreName, StoreType), (mcp_tools.RawSourceName, model.RawSource),
                          (mcp_tools.SpeakerName, model.RawSpeaker), (mcp_tools.VisibilityName, model.RawVisibility),
                          (mcp_tools.SecrecyName, model.SecrecyLevel),
                          (mcp_tools.AssociationName, model.AssociationType),
                          (mcp_tools.GranularityName, TimelineGranularity),
                          (mcp_tools.StrategyName, ConsolidationStrategy),
                          (mcp_tools.EmotionLabel, model.EMOTION_CHANNELS)]:
        assert choices(alias) == [str(v) for v in values]
    assert {t.name for t in anyio.run(build_mcp_server(object()).list_tools)} == TOOLS


def test_a_stopped_server_is_a_tool_error_with_a_hint(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        assert {t.name for t in (await session.list_tools()).tools} == TOOLS
        down = await fail(session, "store", content="nobody is listening")
        assert "SERVER_UNREACHABLE: cannot reach the Cerememory server" in down
        assert "cerememory serve" in down

    _stdio(f"http://127.0.0.1:{free_port()}", tmp_path, body)


def test_docs_list_every_tool_and_parameter() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "mcp.md").read_text()
    for tool in anyio.run(build_mcp_server(object()).list_tools):
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{tool.name}` |"))
        assert all(f"`{name}`" in row for name in tool.input_schema.get("properties", {})), tool.name


# ---------------------------------------------------------------- hostile input


def test_server_side_export_stays_inside_the_export_directory(served: tuple[str, Path], tmp_path: Path) -> None:
    """Over the server's /mcp the archive is written on the server's disk: only under
    data_dir/exports, never through `..`, an absolute path elsewhere or a symbolic link."""
    url, data = served
    exports = data / "exports"
    outside = tmp_path / "outside"
    outside.mkdir()
    exports.mkdir(exist_ok=True)
    (exports / "link").symlink_to(outside)

    async def body(session: ClientSession) -> None:
        await call(session, "store", content="exported over /mcp", store="semantic")
        refused = {str(outside / "x.cma"): "outside the export directory", "/etc/cron.d/x": "outside the export",
                   "../x.cma": "'..'", "sub/../../x.cma": "'..'", "link/x.cma": "symbolic link",
                   "link": "symbolic link", "missing/x.cma": "does not exist"}
        for path, message in refused.items():
            text = await fail(session, "export", output_path=path)
            assert "VALIDATION_ERROR: output_path" in text and message in text and "field: output_path" in text, text
        named = await call(session, "export", output_path="memory.cma")
        assert named["output_path"] == str((exports / "memory.cma").resolve()) and named["record_count"] >= 1
        (exports / "sub").mkdir()
        absolute = await call(session, "export", output_path=str(exports / "sub" / "inside.cma"))
        assert absolute["output_path"] == str((exports / "sub" / "inside.cma").resolve())
        assert "already exists" in await fail(session, "export", output_path="memory.cma")

    _http(url, body)
    assert list(outside.iterdir()) == []
    assert (exports / "memory.cma").read_bytes().startswith(b'{"kind":"header","format":"cma"')
    assert (exports / "memory.cma").stat().st_mode & 0o777 == 0o600


def test_get_mcp_event_stream_is_ended_by_the_server(server: str) -> None:
    """The stateless endpoint sends nothing on a GET stream; the server ends it after
    mcp.stream_max_seconds (0.5 here) instead of holding it open for ever."""
    with httpx.Client(timeout=30) as client:  # a stream the server never ends fails on the read timeout
        for _ in range(2):
            with client.stream("GET", f"{server}/mcp", headers={"accept": "text/event-stream"}) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                for _chunk in response.iter_bytes():  # returns once the server ends the stream cleanly
                    pass
        assert client.get(f"{server}/v1/introspect/stats").status_code == 200


class _RawStdio:
    """`cerememory mcp` spoken to line by line, for requests the SDK's client would not send."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self._err = (tmp_path / "mcp-stderr.log").open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "cerememory", "mcp", "--server-url", url],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     env=_env(tmp_path), cwd=str(tmp_path))
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._answers.put(json.loads(line))

    def send(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def ask(self, line: str) -> dict[str, Any]:
        """Send one request and wait for its answer (an unanswered request fails the test)."""
        self.send(line)
        while "id" not in (message := self._answers.get(timeout=60)):  # skip notifications
            pass
        return message

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self._reader.join(timeout=60)
        self.proc.stdout.close()
        self._err.close()


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _store_call(request_id: str, metadata: str, *, id_last: bool = False) -> str:
    """A tools/call line of `store` with the JSON text `metadata` (built as text: nothing recurses)."""
    call_ = '"method":"tools/call","params":{"name":"store","arguments":{"content":"deep","metadata":' + metadata + "}}"
    return "{" + (f'{call_},"id":{request_id}' if id_last else f'"id":{request_id},{call_}') + ',"jsonrpc":"2.0"}'


def test_stdio_proxy_answers_calls_nested_too_deep_to_parse(server: str, tmp_path: Path) -> None:
    """The SDK's parser stops at 200 levels and used to drop such a line, leaving the call
    unanswered; now every request with an id gets an answer, and the session goes on."""
    stdio = _RawStdio(server, tmp_path)
    try:
        hello = stdio.ask(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}))
        assert hello["id"] == 1 and "result" in hello
        stdio.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for request_id, depth in ((2, 250), (3, 100_000)):
            answer = stdio.ask(_store_call(str(request_id), _nested(depth)))
            assert answer["id"] == request_id, answer
            assert "VALIDATION_ERROR" in answer["error"]["message"] and "nests deeper" in answer["error"]["message"]
        last = stdio.ask(_store_call('"after the depth"', _nested(300), id_last=True))
        assert last["id"] == "after the depth" and "nests deeper" in last["error"]["message"]
        shallow = stdio.ask(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "store", "arguments": {"content": "shallow enough", "metadata": json.loads(_nested(150))}}}))
        assert shallow["id"] == 4 and "result" in shallow  # parsed: stored, or refused by CMP as a tool error
        assert stdio.ask('{"jsonrpc":"2.0","id":5}')["error"]["message"].startswith("VALIDATION_ERROR")
        stats = stdio.ask(json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                                      "params": {"name": "stats", "arguments": {}}}))
        assert stats["id"] == 6 and not stats["result"].get("isError")
    finally:
        stdio.close()
    assert b"Traceback" not in (tmp_path / "mcp-stderr.log").read_bytes()
