"""What a web page, a rebound hostname or a broken handler can do to a server on loopback:
cross-site writes and reads are refused, keep-alive connections outlive a 500, failed keys are
budgeted, and client request ids never reach the logs unchecked."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cerememory.cmp.dispatch import OPERATIONS
from cerememory.cmp.errors import CMPError
from cerememory.security.auth import KeyRing
from cerememory.security.ratelimit import FailedAuthLimit, TokenBucketLimiter
from cerememory.transport.guard import HostPolicy
from cerememory.transport.http import create_app
from cerememory.transport.server import ServeOptions, bind_addresses

from .conftest import Clock, ServeProcess, ServerThread, clean_env, free_port

STORE = {"content": {"blocks": [{"text": "the deploy key rotates every Monday"}]}, "store": "semantic"}
JSON = {"content-type": "application/json"}


def _count(url: str) -> int:
    return httpx.get(f"{url}/v1/introspect/stats").json()["total_records"]


def _assert_refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code
    assert response.json()["details"]["hint"]


# ---------------------------------------------------------------- cross-site requests


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_a_body_that_is_not_declared_json_is_refused_and_nothing_changes(http_server, content_type):
    httpx.post(f"{http_server.url}/v1/encode", json=STORE).raise_for_status()
    headers = {"content-type": content_type} if content_type else {}
    wipe = json.dumps({"archive_path": "/dev/null", "strategy": "replace"})
    for method, path, body in (("POST", "/v1/encode", json.dumps(STORE)),
                               ("POST", "/v1/lifecycle/import", wipe),
                               ("DELETE", "/v1/lifecycle/forget", json.dumps({"store": "semantic", "confirm": True}))):
        response = httpx.request(method, f"{http_server.url}{path}", content=body.encode(), headers=headers)
        _assert_refused(response, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert _count(http_server.url) == 1


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/merge-patch+json"])
def test_json_bodies_are_served(http_server, content_type):
    response = httpx.post(f"{http_server.url}/v1/encode", content=json.dumps(STORE).encode(),
                          headers={"content-type": content_type})
    assert response.status_code == 200, response.text


def test_a_request_without_a_body_needs_no_content_type(http_server):
    assert httpx.post(f"{http_server.url}/v1/lifecycle/decay-tick").status_code == 200


@pytest.mark.parametrize("path", ["/v1/recall/query", "/v1/introspect/stats", "/health", "/mcp", "/openapi.json"])
def test_a_rebound_hostname_is_refused_on_every_route(http_server, path):
    httpx.post(f"{http_server.url}/v1/encode", json=STORE).raise_for_status()
    response = httpx.post(f"{http_server.url}{path}", json={}, headers={"host": f"evil.example:{http_server.port}"})
    _assert_refused(response, 421, "HOST_NOT_ALLOWED")
    assert "deploy" not in response.text


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]"])
def test_loopback_names_are_answered_on_any_port(http_server, host):
    response = httpx.get(f"{http_server.url}/v1/introspect/stats", headers={"host": f"{host}:9999"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://evil.example:8420",
                                    "https://127.0.0.1.evil.example"])
def test_a_foreign_origin_can_neither_write_nor_read(http_server, origin):
    headers = {"origin": origin}
    _assert_refused(httpx.post(f"{http_server.url}/v1/encode", json=STORE, headers=headers), 403, "ORIGIN_NOT_ALLOWED")
    _assert_refused(httpx.get(f"{http_server.url}/v1/introspect/stats", headers=headers), 403, "ORIGIN_NOT_ALLOWED")
    assert _count(http_server.url) == 0


def test_the_servers_own_origin_is_served():
    policy = HostPolicy.for_bind("127.0.0.1", 8420, ["127.0.0.1"])
    assert policy.allows_origin("http://127.0.0.1:8420")
    assert policy.allows_origin("http://localhost:8420/")
    assert not policy.allows_origin("http://localhost:3000")  # another local web app
    assert not policy.allows_origin("http://[::1]:not-a-port")


def test_a_server_bound_to_every_interface_answers_to_its_addresses_only():
    policy = HostPolicy.for_bind("0.0.0.0", 8420, ["0.0.0.0"], allowed_hosts=["memory.example.org"])
    assert policy.allows_host("10.1.2.3:8420") and policy.allows_host("memory.example.org")
    assert policy.allows_host("localhost:8420")  # a published container port, say
    assert not policy.allows_host("evil.example:8420")


def test_allowed_hosts_and_origins_come_from_the_config(data_dir, tmp_path):
    port = free_port()
    env = clean_env(tmp_path, CEREMEMORY_HTTP__ALLOWED_HOSTS="memory.internal",
                    CEREMEMORY_HTTP__ALLOWED_ORIGINS="https://console.example")
    command = [sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir), "--port", str(port),
               "--log-level", "warning"]
    server = ServeProcess(command, env, tmp_path / "server.log", port)
    try:
        stats = f"{server.url}/v1/introspect/stats"
        assert httpx.get(stats, headers={"host": "memory.internal"}).status_code == 200
        assert httpx.get(stats, headers={"origin": "https://console.example"}).status_code == 200
        _assert_refused(httpx.get(stats, headers={"host": "other.internal"}), 421, "HOST_NOT_ALLOWED")
    finally:
        assert server.stop() == 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_with_json_as_the_docs_show(http_server):
    def curl(*args: str) -> dict:
        out = subprocess.run(["curl", "-s", *args], capture_output=True, text=True, timeout=30, check=True).stdout
        return json.loads(out)

    assert curl("--json", json.dumps(STORE), f"{http_server.url}/v1/encode")["store"] == "semantic"
    assert curl("-d", json.dumps(STORE), f"{http_server.url}/v1/encode")["code"] == "UNSUPPORTED_MEDIA_TYPE"


# ---------------------------------------------------------------- what is bound


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::"])
def test_every_interface_without_keys_is_refused(host):
    options = ServeOptions(host=host, port=free_port())
    assert not options.loopback
    with pytest.raises(CMPError) as refused:
        options.check()
    assert refused.value.code.value == "VALIDATION_ERROR" and "without API keys" in refused.value.message


def test_localhost_resolves_to_loopback_only():
    assert ServeOptions(host="localhost").loopback
    assert "0.0.0.0" in bind_addresses("", 8420)


def test_serve_with_an_empty_host_refuses_to_start(cli):
    result = cli("serve", "--host", "", "--port", str(free_port()), "--json")
    assert result.code != 0
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "VALIDATION_ERROR" and "every interface" in error["message"]


# ---------------------------------------------------------------- robustness


class _Broken:
    """A handler whose stats blow up as an engine bug would."""

    audit = None

    def introspect_stats(self, request: object) -> None:
        raise RuntimeError("boom")


def _exchange(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_500_keeps_the_connection_alive():
    server = ServerThread(app=create_app(_Broken()))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            first = _exchange(sock, b"GET /v1/introspect/stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert first.startswith(b"HTTP/1.1 500") and b'"INTERNAL_ERROR"' in first
            assert b"connection: close" not in first.lower()
            second = _exchange(sock, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert second.startswith(b"HTTP/1.1 200")
    finally:
        server.stop()


def test_a_500_of_a_route_outside_cmp_is_an_envelope_and_keeps_the_connection_alive(caplog):
    """A route FastAPI itself serves (the console, MCP, an extra route) fails the same way."""
    def broken_route(app) -> None:
        @app.get("/extra/broken")
        async def broken() -> None:
            raise RuntimeError("boom")

    server = ServerThread(app=create_app(_Broken(), extra_routes=broken_route))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            first = _exchange(sock, b"GET /extra/broken HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: r-500\r\n\r\n")
            assert first.startswith(b"HTTP/1.1 500") and b'"INTERNAL_ERROR"' in first
            assert b'"request_id":"r-500"' in first and b"x-request-id: r-500" in first.lower()
            assert b"connection: close" not in first.lower()
            second = _exchange(sock, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert second.startswith(b"HTTP/1.1 200")
    finally:
        server.stop()
    assert any("unhandled error on GET /extra/broken" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("op", [op for op in OPERATIONS.values() if op.http.method != "GET"], ids=lambda op: op.name)
def test_json_nested_ten_thousand_deep_is_a_validation_error(http_server, op):
    body = b'{"metadata": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    path = op.http.path.replace("{record_id}", "0190a0b0-0000-7000-8000-000000000001")
    response = httpx.request(op.http.method, f"{http_server.url}{path}", content=body, headers=JSON)
    _assert_refused(response, 400, "VALIDATION_ERROR")


# ---------------------------------------------------------------- keys and request ids


def test_failed_keys_are_budgeted_but_a_right_key_still_passes(mem):
    clock = Clock()
    failures = FailedAuthLimit(TokenBucketLimiter(0.1, 3, clock=clock))
    server = ServerThread(app=create_app(mem.engine, keys=KeyRing(["right-key"]), auth_failures=failures))
    try:
        stats = f"{server.url}/v1/introspect/stats"
        wrong = {"authorization": "Bearer wrong"}
        assert [httpx.get(stats, headers=wrong).status_code for _ in range(3)] == [401, 401, 401]
        throttled = httpx.get(stats, headers=wrong)
        _assert_refused(throttled, 429, "RATE_LIMITED")
        assert int(throttled.headers["retry-after"]) >= 1
        assert httpx.get(stats, headers={"authorization": "Bearer right-key"}).status_code == 200
        clock.advance(10)
        assert httpx.get(stats).status_code == 401
    finally:
        server.stop()


@pytest.mark.parametrize("given", [("my-secret-patient-name " * 4).strip(), "x" * 65, "tab\tinside", "ümlaut"])
def test_an_unfit_client_request_id_is_replaced_before_it_is_logged(http_server, data_dir, given):
    response = httpx.post(f"{http_server.url}/v1/encode", json=STORE,
                          headers={"x-request-id": given.encode("utf-8")})
    assert response.status_code == 200
    used = response.headers["x-request-id"]
    assert used != given and len(used) == 36
    audit = (Path(data_dir) / "audit.jsonl").read_text()
    assert used in audit and given not in audit


def test_a_short_token_request_id_is_kept(http_server, data_dir):
    response = httpx.post(f"{http_server.url}/v1/encode", json=STORE, headers={"x-request-id": "agent-7:call.42"})
    assert response.headers["x-request-id"] == "agent-7:call.42"
    assert "agent-7:call.42" in (Path(data_dir) / "audit.jsonl").read_text()


def test_grpc_budgets_failed_keys_and_cleans_request_ids(mem, data_dir):
    from cerememory.transport.grpc_client import GrpcClient
    from cerememory.transport.grpc_server import build_grpc_server

    failures = FailedAuthLimit(TokenBucketLimiter(0.1, 2, clock=Clock()))
    server, port = build_grpc_server(mem.engine, keys=KeyRing(["g-key"]), auth_failures=failures)
    server.start()
    target = f"127.0.0.1:{port}"
    try:
        codes = []
        for _ in range(3):
            with GrpcClient(target, api_key="wrong", timeout=10) as client, pytest.raises(CMPError) as refused:
                client.stats()
            codes.append(refused.value.code.value)
        assert codes == ["UNAUTHORIZED", "UNAUTHORIZED", "RATE_LIMITED"]
        hostile = "patient Jane Doe, born 1970"
        with GrpcClient(target, api_key="g-key", timeout=10) as client:
            for request_id in (hostile, "job-7"):
                client.dispatch("encode.store", {"content": {"blocks": [{"text": "the key rotates on Monday"}]},
                                                 "header": {"request_id": request_id}})
        audit = (data_dir / "audit.jsonl").read_text()
        assert hostile not in audit and '"job-7"' in audit
    finally:
        server.stop(None).wait(5)
