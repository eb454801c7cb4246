"""One conformance suite, every transport: the same operations give the same answers embedded,
over HTTP with the Python client, and over gRPC with the typed stub."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cerememory import CMPError, ErrorCode

from .conftest import Retargetable, ServerThread

BACKENDS = ["embedded", "http"]
if importlib.util.find_spec("cerememory.transport.grpc_client") is not None:
    BACKENDS.append("grpc")


@dataclass
class Servers:
    """One HTTP and one gRPC server for the module, both serving the running test's engine."""

    handler: Retargetable
    http: str
    grpc: str | None


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    handler = Retargetable()
    http = ServerThread(handler)
    grpc_server = None
    target = None
    if "grpc" in BACKENDS:
        from cerememory.transport.grpc_server import build_grpc_server

        grpc_server, port = build_grpc_server(handler, host="127.0.0.1", port=0)
        grpc_server.start()
        target = f"127.0.0.1:{port}"
    try:
        yield Servers(handler, http.url, target)
    finally:
        http.stop()
        if grpc_server is not None:
            grpc_server.stop(None).wait(10)


@pytest.fixture(params=["duckdb", "postgres"])
def mem(request: pytest.FixtureRequest, data_dir) -> Iterator[Any]:
    """The suite's engine on each storage backend."""
    import cerememory

    settings: dict[str, str] = {}
    if request.param == "postgres":
        settings = {"storage__backend": "postgres", "storage__postgres_url": request.getfixturevalue("postgres_url"),
                    "storage__namespace": request.getfixturevalue("pg_namespace")}
    with cerememory.open(data_dir, semantic="off", **settings) as memory:
        yield memory


@pytest.fixture
def served(mem, servers: Servers) -> Iterator[Servers]:
    """The module's servers over this test's fresh engine."""
    servers.handler.engine = mem.engine
    try:
        yield servers
    finally:
        servers.handler.engine = None


def _client(backend: str, servers: Servers) -> Any:
    if backend == "http":
        from cerememory.transport.client import Client

        return Client(servers.http)
    from cerememory.transport.grpc_client import GrpcClient

    return GrpcClient(servers.grpc)


@pytest.fixture(params=BACKENDS)
def api(request, mem, served):
    if request.param == "embedded":
        yield mem
    else:
        with _client(request.param, served) as client:
            yield client


def ids(response) -> list:
    return [hit.record.id for hit in response.memories]


def test_encode_and_inspect(api):
    a = api.store("alpha memory about rivers", store="semantic", emotion="joy",
                  metadata={"k": [1, "two"]}, meta={"intent": "test", "tags": ["x"]})
    assert (a.store, a.initial_fidelity, a.associations_created) == ("semantic", 1.0, 0)
    record = api.inspect(a.record_id)
    assert record.content.plain_text() == "alpha memory about rivers"
    assert record.emotion.joy == 1.0 and record.metadata == {"k": [1, "two"]}
    assert record.meta.capture_status == "provided" and record.meta.tags == ["x"]
    image = api.store(content={"blocks": [{"modality": "image", "format": "image/png",
                                           "data": list(b"\x89PNG\r\n\x1a\n\x00\xff")}]})
    assert api.inspect(image.record_id).content.blocks[0].data == b"\x89PNG\r\n\x1a\n\x00\xff"


def test_batch_update_and_associations(api):
    batch = api.store_batch([{"content": {"blocks": [{"text": f"step {i} of the deploy"}]}} for i in range(3)],
                            infer_associations=True)
    assert batch.associations_inferred == 4
    first, second, _ = (r.record_id for r in batch.results)
    api.update(first, text="step zero of the deploy", metadata={"edited": True})
    record = api.inspect(first)
    assert (record.version, record.metadata) == (2, {"edited": True})
    associated = api.associate(second, depth=1, min_weight=0.0)
    assert {h.record.id for h in associated.memories} == {first, batch.results[2].record_id}
    graph = api.graph(second, depth=1)
    assert len(graph.nodes) == 3 and len(graph.edges) == 4


def test_recall_variants(api):
    rid = api.store("the deploy key rotates every Monday", embedding=[1.0, 0.0]).record_id
    api.store("lunch was pasta", embedding=[0.0, 1.0], created_at=datetime(2024, 1, 1, tzinfo=UTC))
    text = api.recall("deploy key")
    assert ids(text)[0] == rid
    assert text.query_metadata.signals[0] == "bm25"
    assert text.memories[0].rendered_content.plain_text() == "the deploy key rotates every Monday"
    assert ids(api.recall(embedding=[0.9, 0.1]))[0] == rid
    assert ids(api.recall(limit=1)) == [rid]  # no cue: the most recent
    old = api.recall(start=datetime(2023, 12, 31, tzinfo=UTC), end=datetime(2024, 1, 2, tzinfo=UTC))
    assert [h.record.content.plain_text() for h in old.memories] == ["lunch was pasta"]
    timeline = api.timeline(datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1))
    assert sum(b.count for b in timeline.buckets) == 1


def test_raw_journal(api):
    api.store_raw("user: please rotate the key", session_id="s1", speaker="user", turn_id="1")
    api.store_raw("private thought", session_id="s1", visibility="private_scratch")
    batch = api.store_raw_batch([{"session_id": "s2", "content": {"blocks": [{"text": "tool output"}]},
                                  "source": "tool_io", "speaker": "tool"}])
    assert batch.results[0].session_id == "s2"
    found = api.raw_recall("rotate")
    assert [(r.turn_id, r.speaker) for r in found.records] == [("1", "user")]
    assert api.raw_recall(session_id="s1").total_candidates == 1
    assert api.raw_recall(session_id="s1", include_private_scratch=True).total_candidates == 2


def test_journal_sessions_by_agent_and_workspace(api):
    turn = {"content": {"blocks": [{"text": "a turn"}]}}
    api.store_raw_batch([
        {**turn, "session_id": "s-old", "created_at": "2026-01-01T10:00:00Z",
         "metadata": {"agent": "codex", "workspace": "/src/api"}},
        {**turn, "session_id": "s-old", "created_at": "2026-01-01T10:05:00Z",
         "metadata": {"agent": "codex", "workspace": "/src/api"}},
        {**turn, "session_id": "s-new", "created_at": "2026-02-01T09:00:00Z",
         "metadata": {"agent": "claude-code", "workspace": "/src/web"}},
        {**turn, "session_id": "s-hidden", "visibility": "private_scratch"},
        {**turn, "session_id": "s-bare", "created_at": "2026-01-15T00:00:00Z"}])
    listed = api.sessions()
    assert [(s.session_id, s.agent, s.workspace, s.turns, s.dreamed) for s in listed.sessions] == [
        ("s-new", "claude-code", "/src/web", 1, 0), ("s-bare", None, None, 1, 0), ("s-old", "codex", "/src/api", 2, 0)]
    old = listed.sessions[2]
    first, last = datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 10, 5, tzinfo=UTC)
    assert (old.first_at, old.last_at) == (first, last)
    assert (listed.total_sessions, listed.next_cursor) == (3, None)
    assert [s.session_id for s in api.sessions(agent="codex").sessions] == ["s-old"]
    assert [s.session_id for s in api.sessions(workspace="/src/web").sessions] == ["s-new"]
    first = api.sessions(limit=2)
    assert [s.session_id for s in first.sessions] == ["s-new", "s-bare"] and first.next_cursor
    assert [s.session_id for s in api.sessions(limit=2, cursor=first.next_cursor).sessions] == ["s-old"]
    assert api.sessions(include_private_scratch=True).total_sessions == 4


def test_list_records_pages_filters_and_projects(api):
    stored = [api.store(f"rule {i}", store="procedural", metadata={"kind": "rule" if i % 2 else "note", "n": i},
                        emotion="joy").record_id for i in range(7)]
    api.store("an episode", metadata={"kind": "rule"})
    first = api.list_records("procedural", metadata={"kind": "rule"}, limit=2)
    assert [r.text for r in first.records] == ["rule 1", "rule 3"]
    assert first.records[0].metadata == {"kind": "rule", "n": 1} and first.records[0].content is None
    rest = api.list_records("procedural", metadata={"kind": "rule"}, cursor=first.next_cursor)
    assert [r.id for r in rest.records] == [stored[5]] and rest.next_cursor is None
    full = api.list_records("procedural", metadata={"n": 0}, fields=["content", "emotion", "fidelity", "meta"])
    (only,) = full.records
    assert only.content.plain_text() == "rule 0" and only.text is None and only.metadata is None
    assert (only.emotion.joy, only.fidelity) == (1.0, 1.0)
    assert not api.list_records("procedural", metadata={"n": True}).records  # true is not 1
    assert api.inspect(stored[0]).access_count == 0  # an inventory, not a recall
    off = api.dispatch("recall.list", {"store": "procedural", "similar_to": "rules", "limit": 1})
    assert off["semantic_search"] is False and off["semantic_off_reason"] and off["similarity"] is None
    with pytest.raises(CMPError) as err:
        api.list_records("procedural", cursor="not-a-cursor")
    assert err.value.code is ErrorCode.VALIDATION_ERROR and "next_cursor" in err.value.hint


def test_mode_forget_and_stats(api):
    keep = api.store("keep").record_id
    gone = api.store("gone").record_id
    api.set_mode("perfect")
    assert api.stats().recall_mode == "perfect"
    assert api.forget([gone], confirm=True).records_deleted == 1
    stats = api.stats()
    assert stats.total_records == 1 and stats.records_by_store["episodic"] == 1
    assert api.inspect(keep).id == keep


@pytest.mark.parametrize("call,code", [
    (lambda api: api.inspect("01890000-0000-7000-8000-000000000000"), ErrorCode.RECORD_NOT_FOUND),
    (lambda api: api.store("x", store="attic"), ErrorCode.STORE_INVALID),
    (lambda api: api.store("x" * (1024 * 1024 + 1)), ErrorCode.CONTENT_TOO_LARGE),
    (lambda api: api.store("x", embedding=[float("nan")]), ErrorCode.VALIDATION_ERROR),
    (lambda api: api.forget(store="episodic"), ErrorCode.FORGET_UNCONFIRMED),
    (lambda api: api.recall(limit=0), ErrorCode.VALIDATION_ERROR),
    (lambda api: api.dispatch("lifecycle.consolidate", {"strategy": "sometimes"}), ErrorCode.VALIDATION_ERROR),
    (lambda api: api.dispatch("introspect.stats", {"header": {"version": "2.0"}}), ErrorCode.VERSION_MISMATCH),
    (lambda api: api.dispatch("recall.query", {"cue": {"image": "iVBORw0KGgo="}}), ErrorCode.MODALITY_UNSUPPORTED),
])
def test_error_codes(api, call, code):
    with pytest.raises(CMPError) as err:
        call(api)
    assert err.value.code is code
    assert err.value.message
    assert api.stats().total_records == 0


@pytest.fixture(params=[b for b in BACKENDS if b != "embedded"])
def connect(request, served):
    """A callable making a new client of a real server (one per thread)."""
    return lambda: _client(request.param, served)


def test_32_concurrent_clients_lose_nothing(connect):
    errors: list[BaseException] = []
    acknowledged: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        try:
            with connect() as client:
                for i in range(3):
                    rid = client.store(f"worker {n} note {i} about concurrency").record_id
                    with lock:
                        acknowledged.append(str(rid))
                    client.recall("concurrency", limit=5)
                    client.raw_recall(session_id=f"w{n}")
                client.store_batch([{"content": {"blocks": [{"text": f"w{n} batch {j}"}]}} for j in range(5)])
                client.stats()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with connect() as client:
        assert client.stats().total_records == 32 * 3 + 32 * 5
        for rid in acknowledged[::17]:
            assert client.inspect(rid)
