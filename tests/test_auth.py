"""Bearer API keys on HTTP and gRPC, and the secure-by-default rules of `cerememory serve`."""

from __future__ import annotations

import httpx
import pytest

from cerememory import CMPError, ErrorCode
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
    from cerememory.transport.mcp_server import mount_streamable_http

    app = create_app(mem.engine, keys=KeyRing(["k-one", "k-two"]),
                     extra_routes=lambda a: mount_streamable_http(a, mem.engine))
    server = ServerThread(app=app)
    yield server
    server.stop()


def test_http_requires_a_key_except_for_probes(keyed_server):
    with httpx.Client(base_url=keyed_server.url) as h:
        assert h.get("/health").status_code == 200
        assert h.get("/readiness").status_code == 200
        assert h.get("/openapi.json").status_code == 200
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
    assert refused.code == 1 and refused.json()["error"]["code"] == "UNAUTHORIZED"
    ok = cli("stats", "--server-url", keyed_server.url, "--json", env={"CEREMEMORY_SERVER_API_KEY": "k-one"})
    assert ok.code == 0, ok.stdout
    flag = cli("store", "via flag", "--server-url", keyed_server.url, "--api-key", "k-two", "--json")
    assert flag.code == 0, flag.stdout


@pytest.mark.parametrize("args,env,message", [
    (["--host", "0.0.0.0"], {}, "without API keys"),
    (["--host", "0.0.0.0", "--grpc-port", "8421"], {"CEREMEMORY_API_KEYS": "k"}, "plaintext gRPC"),
    (["--tls-cert", "cert.pem"], {}, "both --tls-cert and --tls-key"),
])
def test_serve_is_secure_by_default(cli, args, env, message):
    result = cli("serve", "--port", str(free_port()), *args, "--json", env=env)
    assert result.code == 2, result.stdout + result.stderr
    assert message in result.json()["error"]["message"]
