"""Every audited operation leaves exactly one outcome line in the audit log, whatever runs it:
the Python API, HTTP, gRPC, MCP (streamable HTTP), the CLI in this process, and the CLI as a
subprocess with a data directory and no server.

An outcome line is a `done` entry (the engine's `intent` entries, one per committed change, come
on top). One server per transport serves the whole module; the CLI entry points open a fresh
data directory per test, as a user's command would.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

import cerememory
from cerememory import cli as cerememory_cli
from cerememory.cmp.operations import OPERATIONS
from cerememory.security.audit import AUDIT_FILE
from cerememory.transport.client import Client
from cerememory.transport.grpc_client import GrpcClient
from cerememory.transport.grpc_server import build_grpc_server
from cerememory.transport.http import create_app
from cerememory.transport.mcp_http import mount_streamable_http

from .conftest import ServerThread

pytestmark = pytest.mark.xdist_group("audit-world")  # one worker builds its module fixture once

Context = dict[str, Any]


def _text(words: str) -> dict[str, Any]:
    return {"blocks": [{"text": words}]}


def _record(mem: cerememory.Memory) -> Context:
    return {"id": str(mem.store(f"a record to change {uuid.uuid4()}").record_id)}


def _raw(mem: cerememory.Memory) -> Context:
    return {"id": str(mem.store_raw("user: a turn to change", session_id="s-audit").record_id)}


def _nothing(mem: cerememory.Memory) -> Context:
    return {}


@dataclass(frozen=True)
class Case:
    """How each entry point runs one audited operation: the CMP request (API, HTTP, gRPC), the MCP
    tool and its arguments, the CLI arguments; None where the entry point does not offer it."""

    request: Callable[[Context], dict[str, Any]]
    prepare: Callable[[cerememory.Memory], Context] = _nothing
    tool: Callable[[Context], tuple[str, dict[str, Any]]] | None = None
    command: Callable[[Context], list[str]] | None = None


CASES: dict[str, Case] = {
    "encode.store": Case(
        lambda c: {"content": _text("stored for the audit")},
        tool=lambda c: ("store", {"content": "stored for the audit"}),
        command=lambda c: ["store", "stored for the audit"]),
    "encode.batch": Case(
        lambda c: {"records": [{"content": _text("one")}, {"content": _text("two")}]},
        tool=lambda c: ("batch_store", {"records": [{"content": "one"}, {"content": "two"}]}),
        command=lambda c: ["batch", c["batch_file"]]),
    "encode.update": Case(
        lambda c: {"record_id": c["id"], "metadata": {"checked": True}}, _record,
        tool=lambda c: ("update", {"record_id": c["id"], "metadata": {"checked": True}})),
    "encode.store_raw": Case(
        lambda c: {"session_id": "s-audit", "content": _text("user: hello")},
        tool=lambda c: ("store_raw", {"content": "user: hello", "session_id": "s-audit"}),
        command=lambda c: ["raw-store", "user: hello", "--session-id", "s-audit"]),
    "encode.batch_raw": Case(
        lambda c: {"records": [{"session_id": "s-audit", "content": _text("user: one")}]},
        tool=lambda c: ("batch_store_raw", {"records": [{"content": "user: one"}], "session_id": "s-audit"})),
    "encode.update_raw": Case(
        lambda c: {"record_id": c["id"], "suppressed": True}, _raw,
        tool=lambda c: ("update_raw", {"record_id": c["id"], "suppressed": True})),
    "lifecycle.consolidate": Case(
        lambda c: {}, tool=lambda c: ("consolidate", {}), command=lambda c: ["consolidate"]),
    "lifecycle.decay_tick": Case(lambda c: {}, command=lambda c: ["decay-tick"]),
    "lifecycle.dream_tick": Case(
        lambda c: {"dry_run": True}, tool=lambda c: ("dream_tick", {"dry_run": True}),
        command=lambda c: ["dream-tick", "--dry-run"]),
    "lifecycle.set_mode": Case(lambda c: {"mode": "perfect"}, command=lambda c: ["mode", "perfect"]),
    "lifecycle.forget": Case(
        lambda c: {"record_ids": [c["id"]], "confirm": True}, _record,
        tool=lambda c: ("forget", {"record_ids": [c["id"]], "confirm": True}),
        command=lambda c: ["forget", c["id"], "--confirm"]),
    "lifecycle.reinforce": Case(
        lambda c: {"record_ids": [c["id"]]}, _record,
        tool=lambda c: ("reinforce", {"record_ids": [c["id"]]})),
    "lifecycle.export": Case(
        lambda c: {}, tool=lambda c: ("export", {"output_path": f"{uuid.uuid4()}.cma"}),
        command=lambda c: ["export", str(Path(c["tmp"]) / f"{uuid.uuid4()}.cma")]),
    "lifecycle.import": Case(
        lambda c: {"archive_data": c["archive"], "strategy": "merge"},
        command=lambda c: ["import", c["archive_file"]]),
    "lifecycle.reindex": Case(lambda c: {}, command=lambda c: ["reindex"]),
}

ENTRY_POINTS = ("api", "http", "grpc", "mcp", "cli", "subprocess")
TRANSPORT = {"api": "embedded", "http": "http", "grpc": "grpc", "mcp": "mcp", "cli": "cli", "subprocess": "cli"}


def _offers(entry: str, case: Case) -> bool:
    if entry == "mcp":
        return case.tool is not None
    if entry in ("cli", "subprocess"):
        return case.command is not None
    return True


def test_every_audited_operation_is_covered_and_the_table_agrees():
    audited = {name for name, op in OPERATIONS.items() if op.audited}
    assert set(CASES) == audited
    assert audited == {name for name in OPERATIONS if name.startswith(("encode.", "lifecycle."))}
    tools = {name: op.mcp.name for name, op in OPERATIONS.items() if op.mcp is not None and op.audited}
    assert {name for name, case in CASES.items() if case.tool} == set(tools)
    for name, case in CASES.items():
        if case.tool is not None:
            assert case.tool({"id": "x"})[0] == tools[name]


# ---------------------------------------------------------------- the module's servers


@dataclass
class World:
    mem: cerememory.Memory
    http: str
    grpc: str
    archive: bytes
    files: Path

    def outcomes(self) -> int:
        return len(_entries(self.mem.data_dir))


def _entries(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / AUDIT_FILE
    if not path.exists():
        return []
    return [e for e in map(json.loads, path.read_text().splitlines()) if e.get("phase", "done") == "done"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("audit-entry-points")
    with cerememory.open(tmp / "source", semantic="off") as source:
        source.store("an archived memory")
        archive = base64.b64decode(source.dispatch("lifecycle.export", {})["archive_data"])
    (tmp / "archive.cma").write_bytes(archive)
    (tmp / "batch.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    mem = cerememory.open(tmp / "data", semantic="off")
    (mem.data_dir / "exports").mkdir()
    app = create_app(mem.dispatcher, extra_routes=lambda a: mount_streamable_http(a, mem.dispatcher))
    http = ServerThread(app=app)
    grpc_server, port = build_grpc_server(mem.dispatcher)
    grpc_server.start()
    try:
        yield World(mem, http.url, f"127.0.0.1:{port}", archive, tmp)
    finally:
        http.stop()
        grpc_server.stop(None).wait(10)
        mem.close()


# ---------------------------------------------------------------- the entry points


def _mcp(url: str, tool: str, arguments: dict[str, Any]) -> None:
    async def main() -> None:
        async with streamable_http_client(f"{url}/mcp") as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(60):
                result = await session.call_tool(tool, arguments)
            assert not result.is_error, result.content[0].text

    anyio.run(main)


def _served(world: World, entry: str, op: str, case: Case) -> list[dict[str, Any]]:
    """Run `op` through a served entry point; the new outcome lines."""
    context = {**case.prepare(world.mem), "archive": world.archive}
    before = world.outcomes()
    if entry == "api":
        world.mem.dispatch(op, case.request(context))
    elif entry == "http":
        with Client(world.http) as client:
            client.dispatch(op, case.request(context))
    elif entry == "grpc":
        with GrpcClient(world.grpc) as client:
            client.dispatch(op, case.request(context))
    else:
        assert case.tool is not None
        _mcp(world.http, *case.tool(context))
    return _entries(world.mem.data_dir)[before:]


def _command(world: World, data_dir: Path, case: Case, tmp_path: Path) -> list[str]:
    with cerememory.open(data_dir, semantic="off") as mem:
        context = case.prepare(mem)
    context.update(batch_file=str(world.files / "batch.jsonl"), archive_file=str(world.files / "archive.cma"),
                   tmp=str(tmp_path))
    assert case.command is not None
    return [*case.command(context), "--data-dir", str(data_dir), "--json"]


@pytest.mark.parametrize(("entry", "op"), [(entry, op) for entry in ENTRY_POINTS for op, case in CASES.items()
                                           if _offers(entry, case)])
def test_one_outcome_line_per_call(world: World, entry: str, op: str, tmp_path: Path, cli: Any,
                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES[op]
    if entry in ("cli", "subprocess"):
        data_dir = tmp_path / "cli-data"
        argv = _command(world, data_dir, case, tmp_path)
        before = len(_entries(data_dir))
        if entry == "cli":
            monkeypatch.setenv("CEREMEMORY_EMBED__SEMANTIC", "off")
            code = cerememory_cli.main(argv)
            assert code == 0, capsys.readouterr()
        else:
            result = cli(*argv)
            assert result.code == 0, result.stderr
        new = _entries(data_dir)[before:]
    else:
        new = _served(world, entry, op, case)
    assert [(e["op"], e["transport"]) for e in new] == [(op, TRANSPORT[entry])]
