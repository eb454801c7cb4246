"""API keys kept in the data dir: the `keys` CLI as a subprocess, a real `serve` accepting them
next to CEREMEMORY_API_KEYS, revocation on a running server, and the audit trail of both."""

from __future__ import annotations

import json
import stat
import sys

import httpx
import pytest

from cerememory.security.audit import AUDIT_FILE, verify
from cerememory.security.keys import KEYS_FILE, KeyStore, ServerKeys

from .conftest import ServeProcess, clean_env, free_port


def test_keys_cli_create_list_revoke(cli, data_dir):
    made = cli("keys", "create", "--name", "ci-runner", "--json")
    assert made.code == 0, made.stderr
    created = made.json()
    key = created["key"]
    assert key.startswith("cmk_") and len(key) > 40 and created["id"].startswith("key-")
    plain = cli("keys", "create")  # text mode: the key alone on stdout
    assert plain.code == 0 and plain.stdout.strip().startswith("cmk_") and "only time" in plain.stderr

    stored = (data_dir / KEYS_FILE).read_text()
    assert key not in stored and plain.stdout.strip() not in stored  # only digests
    assert stat.S_IMODE((data_dir / KEYS_FILE).stat().st_mode) == 0o600
    assert json.loads(stored)["keys"][0]["sha256"]

    listed = cli("keys", "list", "--json").json()["keys"]
    assert [k["name"] for k in listed] == ["ci-runner", None]
    assert all("sha256" not in k and "key" not in k for k in listed)

    duplicate = cli("keys", "create", "--name", "ci-runner", "--json")
    assert duplicate.code == 2 and "already named" in duplicate.json()["error"]["message"]
    bad_name = cli("keys", "create", "--name", "has space", "--json")
    assert bad_name.code == 2 and bad_name.json()["error"]["code"] == "VALIDATION_ERROR"

    revoked = cli("keys", "revoke", "ci-runner", "--json")
    assert revoked.code == 0 and revoked.json()["id"] == created["id"] and revoked.json()["revoked_at"]
    again = cli("keys", "revoke", created["id"], "--json")
    assert again.code == 2 and "keys list" in again.json()["error"]["details"]["hint"]

    log = [json.loads(line) for line in (data_dir / AUDIT_FILE).read_text().splitlines()]
    assert [(e["op"], e["summary"]["key_id"]) for e in log] == [
        ("keys.create", created["id"]), ("keys.create", listed[1]["id"]), ("keys.revoke", created["id"])]
    assert verify(data_dir / AUDIT_FILE).ok


def test_server_keys_identify_and_reload(tmp_path):
    store = KeyStore(tmp_path)
    assert ServerKeys.load(tmp_path, None) is None  # no key anywhere: the server runs open
    entry, secret = store.create("a")
    keys = ServerKeys.load(tmp_path, "env-secret-1")
    assert keys is not None and len(keys) == 2
    assert keys.identify_authorization(f"Bearer {secret}") == entry.id
    assert keys.identify_authorization("Bearer env-secret-1").startswith("env-")
    assert keys.identify_authorization(f"Bearer {secret}x") is None
    assert keys.identify_authorization(secret) is None  # no scheme
    store.revoke(entry.id)
    assert keys.identify_authorization(f"Bearer {secret}") is None  # re-read on change


@pytest.fixture
def keyed_serve(data_dir, tmp_path, cli):
    made = cli("keys", "create", "--name", "agent", "--json").json()
    port = free_port()
    env = clean_env(tmp_path, CEREMEMORY_API_KEYS="container-key-0123456789")
    command = [sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir), "--port", str(port),
               "--log-level", "warning"]
    served = ServeProcess(command, env, tmp_path / "server.log", port)
    yield served, made
    served.stop()


def test_serve_accepts_data_dir_and_env_keys_and_honours_revocation(keyed_serve, cli, data_dir):
    served, made = keyed_serve
    with httpx.Client(base_url=served.url) as h:
        assert h.get("/v1/introspect/stats").status_code == 401
        ok = h.post("/v1/encode", headers={"authorization": f"Bearer {made['key']}", "x-request-id": "rq-1"},
                    json={"content": {"blocks": [{"text": "keyed"}]}})
        assert ok.status_code == 200
        assert h.get("/v1/introspect/stats", headers={"authorization": "Bearer container-key-0123456789"}
                     ).status_code == 200
        assert cli("keys", "revoke", "agent").code == 0  # while the server runs
        refused = h.get("/v1/introspect/stats", headers={"authorization": f"Bearer {made['key']}"})
        assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHORIZED"
        fresh = cli("keys", "create", "--json").json()
        assert h.get("/v1/introspect/stats", headers={"authorization": f"Bearer {fresh['key']}"}).status_code == 200
    entry = next(json.loads(line) for line in (data_dir / AUDIT_FILE).read_text().splitlines()
                 if '"encode.store"' in line)
    assert entry["key_id"] == made["id"] and entry["request_id"] == "rq-1" and entry["transport"] == "http"
    assert cli("audit-verify", "--json").json()["ok"] is True


def test_data_dir_keys_count_as_configured_off_loopback(cli):
    refused = cli("serve", "--host", "0.0.0.0", "--port", str(free_port()), "--json")
    assert refused.code == 2 and "without API keys" in refused.json()["error"]["message"]
    assert "keys create" in refused.json()["error"]["details"]["hint"]
    cli("keys", "create")
    # past the key rule, stopped by the next one (plaintext gRPC off loopback)
    result = cli("serve", "--host", "0.0.0.0", "--port", str(free_port()), "--grpc-port", str(free_port()), "--json")
    assert result.code == 2 and "plaintext gRPC" in result.json()["error"]["message"]
