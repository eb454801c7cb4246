"""CMP over HTTP: routes, envelopes, request ids, limits, the Python clients, concurrency."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest

from cerememory import CMPError, ErrorCode
from cerememory.cmp.dispatch import OPERATIONS
from cerememory.transport.client import AsyncClient, Client
from cerememory.transport.http import create_app

from .conftest import ServerThread


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict:
    """The one error shape: {code, message, details, retry_after, request_id}, request id echoed."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"code", "message", "details", "retry_after", "request_id"}
    assert body["code"] == code
    assert body["message"]
    assert body["request_id"] == response.headers["x-request-id"]
    return body


def test_every_operation_is_in_the_api_document(http_server):
    paths = httpx.get(f"{http_server.url}/openapi.json", timeout=60).json()["paths"]
    served = {(method.upper(), path) for path, methods in paths.items() for method in methods}
    assert {(op.http.method, op.http.path) for op in OPERATIONS.values()} <= served


def test_health_readiness_openapi_docs(http_server):
    with httpx.Client(base_url=http_server.url) as h:
        assert h.get("/health").json() == {"status": "ok"}
        assert h.get("/readiness").json() == {"status": "ready", "background": "leader"}
        spec = h.get("/openapi.json", timeout=60).json()
        assert "/v1/recall/query" in spec["paths"]
        assert spec["paths"]["/v1/encode"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert h.get("/docs").status_code == 200


def test_request_id_is_echoed_or_generated(http_server):
    with httpx.Client(base_url=http_server.url) as h:
        given = h.get("/v1/introspect/stats", headers={"x-request-id": "req-123"})
        assert given.headers["x-request-id"] == "req-123"
        generated = h.get("/v1/introspect/stats")
        assert len(generated.headers["x-request-id"]) == 36
        error = h.get("/v1/introspect/record/01890000-0000-7000-8000-000000000000",
                      headers={"x-request-id": "req-404"})
        assert assert_envelope(error, 404, "RECORD_NOT_FOUND")["request_id"] == "req-404"


@pytest.mark.parametrize("method,path,body,status,code", [
    ("POST", "/v1/encode", b"{bad", 400, "VALIDATION_ERROR"),
    ("POST", "/v1/encode", b'{"content": {"blocks": [{"text": "x", "embedding": [NaN]}]}}', 400,
     "VALIDATION_ERROR"),
    ("POST", "/v1/encode", b"\xff\xfe", 400, "VALIDATION_ERROR"),
    ("POST", "/v1/encode", b"[1, 2]", 400, "VALIDATION_ERROR"),
    ("POST", "/v1/encode", b'{"content": {"blocks": [{"text": "x"}]}, "store": "attic"}', 400, "STORE_INVALID"),
    ("POST", "/v1/encode", json.dumps({"content": {"blocks": [{"text": "x" * (1024 * 1024 + 1)}]}}).encode(),
     413, "CONTENT_TOO_LARGE"),
    ("DELETE", "/v1/lifecycle/forget", b'{"store": "episodic"}', 400, "FORGET_UNCONFIRMED"),
    ("POST", "/v1/lifecycle/consolidate", b'{"strategy": "sometimes"}', 400, "VALIDATION_ERROR"),
    ("GET", "/v1/introspect/stats?header=x", b"", 400, "VALIDATION_ERROR"),
    ("POST", "/v1/recall/query", b'{"header": {"protocol": "cmp", "version": "9.0"}}', 400, "VERSION_MISMATCH"),
    ("POST", "/v1/recall/associate/not-a-uuid", b"{}", 400, "VALIDATION_ERROR"),
    ("GET", "/v1/nowhere", b"", 404, "ROUTE_NOT_FOUND"),
    ("GET", "/v1/encode", b"", 405, "METHOD_NOT_ALLOWED"),
    ("PATCH", "/v1/encode/batch", b"{}", 405, "METHOD_NOT_ALLOWED"),
])
def test_errors_map_to_statuses(http_server, method, path, body, status, code):
    with httpx.Client(base_url=http_server.url) as h:
        response = h.request(method, path, content=body, headers={"content-type": "application/json"})
        assert_envelope(response, status, code)
        if status == 405:
            assert response.headers["allow"] in ("POST", "GET")
        assert h.get("/v1/introspect/stats").json()["total_records"] == 0


def test_body_limit(mem):
    server = ServerThread(app=create_app(mem.engine, body_limit=1000))
    try:
        with httpx.Client(base_url=server.url) as h:
            big = {"content": {"blocks": [{"text": "y" * 2000}]}}
            assert_envelope(h.post("/v1/encode", json=big), 413, "CONTENT_TOO_LARGE")
            assert h.post("/v1/encode", json={"content": {"blocks": [{"text": "small"}]}}).status_code == 200
    finally:
        server.stop()


def post_endless_chunks(app, path: str, content_type: bytes) -> tuple[int, bytes, int]:
    """POST an endless chunked body (no Content-Length) to the real app over ASGI: the status,
    the body of the answer, and how many 100-byte chunks the server read before answering."""
    received, sent = [0], []

    async def receive():
        received[0] += 1
        assert received[0] < 10_000, "the server kept reading past the limit"
        return {"type": "http.request", "body": b"x" * 100, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": [(b"host", b"127.0.0.1"), (b"transfer-encoding", b"chunked"),
                                               (b"content-type", content_type)],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8420)}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), received[0]


def test_a_body_sent_in_chunks_is_refused_once_past_the_limit(mem):
    """Without a Content-Length the body limit still holds, and the server stops reading there."""
    status, body, chunks = post_endless_chunks(create_app(mem.engine, body_limit=1000), "/v1/encode",
                                               b"application/json")
    assert status == 413 and json.loads(body)["code"] == "CONTENT_TOO_LARGE"
    assert chunks <= 12
    assert mem.stats().total_records == 0


def test_a_console_form_sent_in_chunks_is_read_no_further_than_its_limit(mem):
    """The console's forms have a limit of their own (64 KiB): past it a form is empty, so the
    action is refused for its missing CSRF token, and the rest is never read."""
    status, body, chunks = post_endless_chunks(create_app(mem.engine), "/ui/sign-in",
                                               b"application/x-www-form-urlencoded")
    assert status == 403 and b"CSRF" in body
    assert chunks <= 64 * 1024 // 100 + 2


class Throttled:
    """An engine stand-in that answers RATE_LIMITED once, to exercise Retry-After end to end."""

    audit = None

    def __init__(self, engine) -> None:
        self.engine = engine
        self.calls = 0

    def introspect_stats(self, request):
        self.calls += 1
        if self.calls == 1:
            raise CMPError(ErrorCode.RATE_LIMITED, "slow down", retry_after=1)
        return self.engine.introspect_stats(request)


def test_retry_after_header_and_client_retry(mem):
    handler = Throttled(mem.engine)
    server = ServerThread(app=create_app(handler))
    try:
        with httpx.Client(base_url=server.url) as h:
            response = h.get("/v1/introspect/stats")
            assert_envelope(response, 429, "RATE_LIMITED")
            assert response.headers["retry-after"] == "1"
        handler.calls = 0
        with Client(server.url) as client:
            assert client.stats().total_records == 0  # retried after the advertised second
        assert handler.calls == 2
    finally:
        server.stop()


def test_rest_shapes(http_server):
    with httpx.Client(base_url=http_server.url) as h:
        first = h.post("/v1/encode", json={"content": {"blocks": [
            {"modality": "text", "data": list(b"int array bytes")}]}}).json()
        second = h.post("/v1/encode", json={"content": {"blocks": [
            {"modality": "text", "data": base64.b64encode(b"base64 bytes").decode()}]},
            "associations": [{"target_id": first["record_id"], "association_type": "semantic", "weight": 1}]}).json()
        record = h.get(f"/v1/introspect/record/{first['record_id']}?include_history=true").json()
        assert record["content"]["blocks"][0]["text"] == "int array bytes"
        assert h.patch(f"/v1/encode/{first['record_id']}", json={"metadata": {"k": 1}}).status_code == 204
        # the record id travels in the path only
        assoc = h.post(f"/v1/recall/associate/{second['record_id']}", json={"depth": 1}).json()
        assert assoc["memories"][0]["record"]["id"] == first["record_id"]
        assert h.put("/v1/lifecycle/mode", json={"mode": "perfect"}).status_code == 204
        forget = h.request("DELETE", "/v1/lifecycle/forget", json={"record_ids": [second["record_id"]],
                                                                    "confirm": True})
        assert forget.json() == {"records_deleted": 1}


def test_client_typed_methods_and_errors(client):
    stored = client.store("the staging database moved to eu-west-1", store="semantic", emotion="surprise")
    assert stored.store == "semantic"
    hits = client.recall("where is the staging database")
    assert hits.memories[0].record.id == stored.record_id
    client.update(stored.record_id, metadata={"verified": True})
    assert client.inspect(stored.record_id).metadata == {"verified": True}
    client.store_raw("user: where is staging?", session_id="s1")
    assert client.raw_recall("staging").records[0].session_id == "s1"
    assert client.stats().total_records == 1
    with pytest.raises(CMPError) as err:
        client.forget([stored.record_id])
    assert err.value.code is ErrorCode.FORGET_UNCONFIRMED
    assert err.value.request_id
    assert client.forget([stored.record_id], confirm=True).records_deleted == 1


def test_client_reports_an_unreachable_server():
    from .conftest import free_port

    with Client(f"http://127.0.0.1:{free_port()}", timeout=2) as client:
        with pytest.raises(CMPError) as err:
            client.stats()
    assert err.value.code is ErrorCode.SERVER_UNREACHABLE
    assert "cannot reach" in err.value.message
    assert "cerememory serve" in err.value.hint


def test_client_goes_through_a_proxy_the_environment_names(http_server, monkeypatch):
    """The client's own socket serves only a server no proxy stands before; with one named, the
    calls go through it (here: nothing listens there), as httpx's do."""
    from .conftest import free_port

    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    with Client(http_server.url, retries=0, timeout=2) as client, pytest.raises(CMPError) as err:
        client.stats()
    assert err.value.code is ErrorCode.SERVER_UNREACHABLE
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with Client(http_server.url) as client:
        assert client.health().status == "ok"
        assert client.stats().total_records >= 0


def test_threads_sharing_a_client_each_get_their_own_answers(http_server):
    """One Client, several threads calling at once: each thread's exchanges stay its own."""
    from concurrent.futures import ThreadPoolExecutor

    def calls(n: int) -> list[bool]:
        texts = [f"thread {n} note {i}" for i in range(8)]
        ids = [client.store(text) for text in texts]
        return [client.inspect(rid).content.blocks[0].text == text for rid, text in zip(ids, texts, strict=True)]

    with Client(http_server.url) as client, ThreadPoolExecutor(4) as pool:
        assert all(ok for answers in pool.map(calls, range(4)) for ok in answers)


def test_light_client_speaks_dicts_over_the_standard_library(http_server):
    from cerememory.transport.light import LightClient

    from .conftest import free_port

    with LightClient(http_server.url) as client:
        stored = client.dispatch("encode.store", {"content": {"blocks": [{"text": "light and quick"}]},
                                                  "store": "procedural", "metadata": {"kind": "rule"}})
        listed = client.dispatch("recall.list", {"store": "procedural", "metadata": {"kind": "rule"}})
        assert [r["id"] for r in listed["records"]] == [stored["record_id"]]
        assert client.dispatch("introspect.record", {"record_id": stored["record_id"]})["id"] == stored["record_id"]
        assert client.dispatch("encode.update", {"record_id": stored["record_id"], "metadata": {"k": 1}}) == {}
        with pytest.raises(CMPError) as err:
            client.dispatch("lifecycle.forget", {"record_ids": [stored["record_id"]]})
        assert err.value.code is ErrorCode.FORGET_UNCONFIRMED and err.value.request_id
        with pytest.raises(CMPError) as err:
            client.dispatch("recall.everything", {})
        assert err.value.code is ErrorCode.VALIDATION_ERROR and "recall.list" in err.value.hint
    with LightClient(f"http://127.0.0.1:{free_port()}", timeout=2) as gone, pytest.raises(CMPError) as err:
        gone.dispatch("introspect.stats")
    assert err.value.code is ErrorCode.SERVER_UNREACHABLE and "cannot reach" in err.value.message


def test_async_client(http_server):
    async def scenario():
        async with AsyncClient(http_server.url) as client:
            stored = await client.store("async hello world")
            hits = await client.recall("hello")
            with pytest.raises(CMPError):
                await client.inspect("01890000-0000-7000-8000-000000000000")
            await client.store_raw("user: hello", session_id="s1")
            return stored, hits, await client.reindex(), await client.stats()

    stored, hits, counts, stats = asyncio.run(scenario())
    assert hits.memories[0].record.id == stored.record_id
    assert counts == {"records": 1, "journal": 1}
    assert stats.total_records == 1


def test_reindex_is_an_operation_with_its_admin_route(http_server, client):
    client.store("indexed again")
    with httpx.Client(base_url=http_server.url) as h:
        assert h.post("/v1/admin/reindex").json() == {"records": 1, "journal": 0}
        only = h.post("/v1/admin/reindex", json={"target": "journal"}).json()
        assert only == {"records": None, "journal": 0}
        assert_envelope(h.post("/v1/admin/reindex", json={"target": "everything"}), 400, "VALIDATION_ERROR")
    assert client.reindex() == {"records": 1, "journal": 0}
    assert client.reindex(target="records") == {"records": 1}


def test_a_route_is_answered_past_the_router_as_through_it(http_server):
    """A CMP route's request is answered by the middleware itself (transport/http.py
    DirectRoutes); a method the route does not take still goes FastAPI's router and its 405.
    Both carry the request id, and the metrics name each by the route's template (as served, with its convertor)."""
    with httpx.Client(base_url=http_server.url) as h:
        stored = h.post("/v1/encode", json={"content": {"blocks": [{"text": "past the router"}]}})
        record_id = stored.json()["record_id"]
        direct = h.get(f"/v1/introspect/record/{record_id}", headers={"x-request-id": "direct-1"})
        assert direct.status_code == 200 and direct.json()["id"] == record_id
        assert direct.headers["content-type"] == "application/json"
        assert int(direct.headers["content-length"]) == len(direct.content)
        assert direct.headers["x-request-id"] == "direct-1"
        routed = h.put(f"/v1/introspect/record/{record_id}", headers={"x-request-id": "routed-1"})
        assert_envelope(routed, 405, "METHOD_NOT_ALLOWED")
        assert routed.headers["x-request-id"] == "routed-1"
        assert h.patch(f"/v1/encode/{record_id}", json={"metadata": {"k": 1}}).status_code == 204
        missing = h.get("/v1/introspect/record/00000000-0000-0000-0000-000000000000")
        assert_envelope(missing, 404, "RECORD_NOT_FOUND")
        metrics = h.get("/metrics").text
    template = 'route="/v1/introspect/record/{record_id:param}"'
    assert f'cerememory_http_requests_total{{method="GET",{template},status="200"}}' in metrics
    assert f'cerememory_http_requests_total{{method="GET",{template},status="404"}}' in metrics
    assert 'cerememory_http_requests_total{method="PATCH",route="/v1/encode/{record_id:param}",status="204"}' in metrics


def test_concurrent_stores_are_each_answered_and_audited_as_their_own(mem, http_server):
    """Stores arriving together are handed to the engine together (transport/offload.Gathering):
    each still gets its own answer or error, under its own request id, in the audit log too."""
    from concurrent.futures import ThreadPoolExecutor

    def store(i: int) -> tuple[str, httpx.Response]:
        request_id = f"req-{i}"
        body = {"content": {"blocks": [{"text": f"note number {i} about the deploy"}]}} if i % 7 else {"content": 7}
        with httpx.Client(base_url=http_server.url, timeout=60) as h:
            return request_id, h.post("/v1/encode", json=body, headers={"x-request-id": request_id})

    with ThreadPoolExecutor(16) as pool:
        answers = dict(pool.map(store, range(64)))

    stored = {}
    for request_id, response in answers.items():
        assert response.headers["x-request-id"] == request_id
        if int(request_id.split("-")[1]) % 7:
            assert response.status_code == 200, response.text
            stored[response.json()["record_id"]] = request_id
        else:
            assert assert_envelope(response, 400, "VALIDATION_ERROR")["request_id"] == request_id
    assert len(stored) == 64 - 10
    found = mem.recall("deploy", limit=100, reconsolidate=False).memories
    assert {str(m.record.id) for m in found} == set(stored)
    entries = [json.loads(line) for line in (mem.engine.data_dir / "audit.jsonl").read_text().splitlines()]
    done = {e["record_ids"][0]: e["request_id"] for e in entries if e["op"] == "encode.store" and e["phase"] == "done"}
    intents = {e["record_ids"][0]: e["request_id"] for e in entries
               if e["op"] == "encode.store" and e["phase"] == "intent"}
    assert done == stored and intents == stored
