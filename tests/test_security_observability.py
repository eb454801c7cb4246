"""Operations: `serve --log-format json` writes one JSON object per line to stderr, and /metrics
counts CMP calls per operation and transport, errors by code and journal backlog."""

from __future__ import annotations

import json
import sys

import httpx

from cerememory.transport.grpc_client import GrpcClient

from .conftest import ServeProcess, clean_env, free_port


def test_json_logs_and_metrics_from_a_real_server(data_dir, tmp_path, cli):
    key = cli("keys", "create", "--name", "ops", "--json").json()
    port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "cerememory", "serve", "--data-dir", str(data_dir), "--port", str(port),
               "--grpc-port", str(grpc_port), "--log-level", "info", "--log-format", "json"]
    served = ServeProcess(command, clean_env(tmp_path), tmp_path / "server.log", port)
    auth = {"authorization": f"Bearer {key['key']}"}
    try:
        with httpx.Client(base_url=served.url) as h:
            stored = h.post("/v1/encode", headers={**auth, "x-request-id": "log-req-1"},
                            json={"content": {"blocks": [{"text": "logged"}]}})
            assert stored.status_code == 200
            assert h.post("/v1/encode/raw", headers=auth,
                          json={"session_id": "s", "content": {"blocks": [{"text": "raw"}]}}).status_code == 200
            assert h.get("/v1/introspect/stats").status_code == 401
            assert h.post("/v1/recall/query", headers=auth, json={"limit": 0}).status_code == 400
            with GrpcClient(f"127.0.0.1:{grpc_port}", api_key=key["key"], timeout=5) as g:
                g.stats()
            metrics = h.get("/metrics", headers=auth).text
    finally:
        assert served.stop() == 0

    assert 'cerememory_cmp_requests_total{code="OK",op="encode.store",transport="http"} 1.0' in metrics
    assert 'cerememory_cmp_requests_total{code="OK",op="introspect.stats",transport="grpc"} 1.0' in metrics
    assert 'cerememory_errors_total{code="UNAUTHORIZED",transport="http"} 1.0' in metrics
    assert 'cerememory_errors_total{code="VALIDATION_ERROR",transport="http"} 1.0' in metrics
    assert 'cerememory_cmp_request_duration_seconds_count{op="encode.store",transport="http"} 1.0' in metrics
    assert "cerememory_raw_journal_pending_dream 1.0" in metrics
    assert 'cerememory_records{store="episodic"} 1.0' in metrics
    assert "cerememory_write_commits_total 1.0" in metrics  # the one store; the journal write has its own path
    assert "cerememory_writes_committed_total 1.0" in metrics

    lines = [line for line in (tmp_path / "server.log").read_text().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert len(records) == len(lines) >= 5
    access = [r for r in records if r["logger"] == "cerememory.access"]
    store = next(r for r in access if r.get("request_id") == "log-req-1")
    assert store["op"] == "encode.store" and store["status"] == 200 and store["transport"] == "http"
    assert store["duration_ms"] > 0 and store["key_id"] == key["id"] and store["client"] == "127.0.0.1"
    assert any(r["status"] == 401 and r["key_id"] is None for r in access)
    assert any(r["transport"] == "grpc" and r["op"] == "introspect.stats" and r["status"] == "OK" for r in access)
    assert key["key"] not in (tmp_path / "server.log").read_text()
    assert "\x1b[" not in (tmp_path / "server.log").read_text()  # no terminal colour codes for log shippers
    assert not any("color_message" in r for r in records)
