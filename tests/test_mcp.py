"""MCP through real interfaces: the SDK's own client over stdio against `cerememory mcp` proxying
to a real `cerememory serve`, and over streamable HTTP against /mcp on a real uvicorn server."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import cerememory
from cerememory.cmp.messages import ConsolidationStrategy, TimelineGranularity
from cerememory.model import (
    EMOTION_CHANNELS,
    AssociationType,
    RawSource,
    RawSpeaker,
    RawVisibility,
    SecrecyLevel,
    StoreType,
)
from cerememory.transport import mcp_server
from cerememory.transport.http import create_app
from cerememory.transport.mcp_server import build_mcp_server, mount_streamable_http

from .conftest import ServeProcess, ServerThread, clean_env, free_port

TOOLS = {"store", "store_raw", "update", "update_raw", "batch_store", "batch_store_raw", "recall", "recall_raw",
         "timeline", "associate", "forget", "consolidate", "dream_tick", "stats", "inspect", "export"}
MISSING_ID = "01960000-0000-7000-8000-000000000000"


def _env(tmp: Path) -> dict[str, str]:
    return clean_env(tmp)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `cerememory serve` process; yields its URL."""
    tmp = tmp_path_factory.mktemp("mcp-serve")
    served = ServeProcess.serve(tmp / "data", tmp)
    try:
        yield served.url
    finally:
        served.stop()


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

        record = await call(session, "inspect", record_id=stored["record_id"])
        assert record["content"]["blocks"][0]["text"] == "The deploy key rotates every Monday"
        assert "data" not in record["content"]["blocks"][0]

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


def test_streamable_http_on_the_main_app(mem: cerememory.Memory) -> None:
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

    try:
        anyio.run(main)
        # the CMP routes still answer beside /mcp, over the same engine
        assert httpx.get(f"{thread.url}/v1/introspect/stats").json()["total_records"] == 1
        assert "/mcp" not in httpx.get(f"{thread.url}/openapi.json").json()["paths"]
        forged = httpx.post(f"{thread.url}/mcp", headers={"host": "evil.example:80"}, json={})
        assert forged.status_code in (400, 421)  # DNS-rebinding protection
    finally:
        thread.stop()
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

    for alias, values in [(mcp_server.StoreName, StoreType), (mcp_server.RawSourceName, RawSource),
                          (mcp_server.SpeakerName, RawSpeaker), (mcp_server.VisibilityName, RawVisibility),
                          (mcp_server.SecrecyName, SecrecyLevel), (mcp_server.AssociationName, AssociationType),
                          (mcp_server.GranularityName, TimelineGranularity),
                          (mcp_server.StrategyName, ConsolidationStrategy),
                          (mcp_server.EmotionLabel, EMOTION_CHANNELS)]:
        assert choices(alias) == [str(v) for v in values]
    assert {t.name for t in anyio.run(build_mcp_server(object()).list_tools)} == TOOLS


def test_a_stopped_server_is_a_tool_error_with_a_hint(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        assert {t.name for t in (await session.list_tools()).tools} == TOOLS
        down = await fail(session, "store", content="nobody is listening")
        assert "INTERNAL_ERROR" in down and "cannot reach the Cerememory server" in down
        assert "cerememory serve" in down

    _stdio(f"http://127.0.0.1:{free_port()}", tmp_path, body)


def test_docs_list_every_tool_and_parameter() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "mcp.md").read_text()
    for tool in anyio.run(build_mcp_server(object()).list_tools):
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{tool.name}` |"))
        assert all(f"`{name}`" in row for name in tool.input_schema.get("properties", {})), tool.name


def test_export_files_are_new_private_and_never_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("precious")
    (tmp_path / "link.cma").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(cerememory.CMPError, match="symbolic link"):
        mcp_server.export_target(str(tmp_path / "link.cma"))
    (tmp_path / "dir.cma").mkdir()
    with pytest.raises(cerememory.CMPError, match="already exists"):
        mcp_server.export_target(str(tmp_path / "dir.cma"))
    with pytest.raises(cerememory.CMPError, match="'..'"):
        mcp_server.export_target(str(tmp_path / "sub" / ".." / "x.cma"))

    target = mcp_server.export_target(str(tmp_path / "memory.cma"))
    mcp_server._write_new(target, b"archive")
    assert target.read_bytes() == b"archive" and target.stat().st_mode & 0o777 == 0o600
    with pytest.raises(cerememory.CMPError, match="already exists"):
        mcp_server._write_new(target, b"again")
    assert target.read_bytes() == b"archive" and (tmp_path / "elsewhere").read_text() == "precious"
