"""Bearer API keys on HTTP and gRPC, and the secure-by-default rules of `cerememory serve`."""

from __future__ import annotations

import httpx
import pytest

from cerememory import CMPError, ErrorCode
from cerememory.cli import EXIT_CODES
from cerememory.security.auth import KeyRing
from cerememory.transport.client import Client
from cerememory.transport.http import create_app

from .conftest import ServerThread, free_port


def test_key_ring():
    ring = KeyRing(["alpha", " beta "])
    assert ring.check("alpha") and ring.check("beta")
    assert not ring.check("alph") and not ring.check("") and not ring.check(None)
    assert ring.check_authorization("Bearer beta") and ring.check_authorization("bearer alpha")
    assert not ring.check_authorization("Basic alpha") and not ring.check_authorization(None)
    assert KeyRing.from_setting(" , ") is None
    assert len(KeyRing.from_setting("a,b,,c")) == 3
    with pytest.raises(ValueError):
        KeyRing([" "])


@pytest.fixture
def keyed_server(mem):
    from cerememory.transport.mcp_http import mount_streamable_http

    app = create_app(mem.engine, keys=KeyRing(["k-one", "k-two"]),
                     extra_routes=lambda a: mount_streamable_http(a, mem.engine))
    server = ServerThread(app=app)
    yield server
    server.stop()


def test_http_requires_a_key_except_for_probes(keyed_server):
    with httpx.Client(base_url=keyed_server.url) as h:
        assert h.get("/health").status_code == 200
        assert h.get("/readiness").status_code == 200
        assert h.get("/openapi.json", timeout=60).status_code == 200
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "k-one"}):
            response = h.get("/v1/introspect/stats", headers=headers)
            assert response.status_code == 401
            assert response.json()["code"] == "UNAUTHORIZED"
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["request_id"] == response.headers["x-request-id"]
        assert h.post("/mcp", json={}).status_code == 401
        for key in ("k-one", "k-two"):
            assert h.get("/v1/introspect/stats", headers={"authorization": f"Bearer {key}"}).status_code == 200


def test_client_sends_its_key(keyed_server):
    with Client(keyed_server.url, api_key="k-two") as client:
        assert client.store("keyed memory").store == "episodic"
    with Client(keyed_server.url) as anonymous, pytest.raises(CMPError) as err:
        anonymous.stats()
    assert err.value.code is ErrorCode.UNAUTHORIZED


def test_cli_remote_mode_with_a_key(keyed_server, cli):
    refused = cli("stats", "--server-url", keyed_server.url, "--json")
    assert refused.code == EXIT_CODES.get(ErrorCode.UNAUTHORIZED, 1)
    assert refused.json()["error"]["code"] == "UNAUTHORIZED"
    ok = cli("stats", "--server-url", keyed_server.url, "--json", env={"CEREMEMORY_SERVER_API_KEY": "k-one"})
    assert ok.code == 0, ok.stdout
    flag = cli("store", "via flag", "--server-url", keyed_server.url, "--api-key", "k-two", "--json")
    assert flag.code == 0, flag.stdout


@pytest.mark.parametrize("args,env,message", [
    (["--host", "0.0.0.0"], {}, "without API keys"),
    (["--host", "0.0.0.0", "--grpc-port", "8421"], {"CEREMEMORY_API_KEYS": "k"}, "plaintext gRPC"),
    (["--tls-cert", "cert.pem"], {}, "both --tls-cert and --tls-key"),
    ([], {"CEREMEMORY_GRPC__PORT": "", "CEREMEMORY_GRPC__TLS_CERT": "c.pem", "CEREMEMORY_GRPC__TLS_KEY": "k.pem"},
     "gRPC is off"),  # docker-compose's empty port with a certificate: said, not silently no gRPC
])
def test_serve_is_secure_by_default(cli, args, env, message):
    result = cli("serve", "--port", str(free_port()), *args, "--json", env=env)
    assert result.code == 2, result.stdout + result.stderr
    assert message in result.json()["error"]["message"]


# ---------------------------------------------------------------- bypass attempts


def test_a_key_anywhere_but_the_authorization_header_is_refused(keyed_server):
    with httpx.Client(base_url=keyed_server.url) as h:
        attempts = [
            ("/v1/introspect/stats?api_key=k-one", {}),
            ("/v1/introspect/stats?access_token=k-one", {}),
            ("/v1/introspect/stats?authorization=Bearer%20k-one", {}),
            ("/v1/introspect/stats", {"x-api-key": "k-one"}),
            ("/v1/introspect/stats", {"authorization": "Bearer"}),
            ("/v1/introspect/stats", {"authorization": "Bearer k-one-and-more"}),
            ("/v1/introspect/stats", {"authorization": "Bearer k-on"}),
            ("/v1/introspect/stats", {"cookie": "authorization=Bearer k-one"}),
            ("/metrics", {}),
            ("/v1/admin/reindex", {}),
        ]
        for path, headers in attempts:
            response = h.request("POST" if "reindex" in path else "GET", path, headers=headers)
            assert response.status_code == 401, (path, headers)
        # path tricks do not reach a public route's exemption
        for path in ("/health/../v1/introspect/stats", "//v1/introspect/stats", "/v1/introspect/stats/"):
            assert h.get(path).status_code in (401, 404), path
        assert h.get("/v1/introspect/stats", headers={"authorization": "BEARER k-one"}).status_code == 200


def test_mcp_over_http_needs_the_bearer_key(keyed_server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=keyed_server.url, timeout=60) as h:  # a loaded machine answers slowly
        assert h.post("/mcp", json=body, headers=headers).status_code == 401
        ok = h.post("/mcp", json=body, headers={**headers, "authorization": "Bearer k-one"})
        assert ok.status_code != 401


def test_grpc_without_metadata_or_with_a_wrong_key_is_unauthenticated(mem):
    import grpc

    from cerememory.transport.grpc_client import GrpcClient
    from cerememory.transport.grpc_server import build_grpc_server
    from cerememory.v1 import cerememory_pb2 as pb
    from cerememory.v1 import cerememory_pb2_grpc as pb_grpc

    server, port = build_grpc_server(mem.engine, keys=KeyRing(["g-key"]))
    server.start()
    target = f"127.0.0.1:{port}"
    try:
        channel = grpc.insecure_channel(target)
        stub = pb_grpc.CerememoryServiceStub(channel)
        for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", "g-key"),),
                         (("x-api-key", "g-key"),)):
            with pytest.raises(grpc.RpcError) as err:
                stub.Stats(pb.StatsRequest(), metadata=metadata, timeout=5)
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED, metadata
        channel.close()
        with GrpcClient(target, api_key="g-key", timeout=5) as good:
            assert good.store("over grpc").record_id
    finally:
        server.stop(None).wait(5)
    last = mem.engine.audit.head
    assert last[0] == 2  # the one authenticated write (its intent and outcome), nothing from the refused calls
