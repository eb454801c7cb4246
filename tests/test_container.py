"""The container's entry point, run directly (no Docker engine needed), and the compose file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from .conftest import ServeProcess, clean_env, free_port

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"


def container_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = clean_env(tmp_path, CEREMEMORY_DATA_DIR=str(tmp_path / "data"), **extra)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_entrypoint_refuses_to_start_without_keys(tmp_path):
    result = subprocess.run([str(ENTRYPOINT)], env=container_env(tmp_path), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "CEREMEMORY_API_KEYS" in result.stderr


def test_entrypoint_serves_all_interfaces_with_keys(tmp_path):
    port = free_port()
    served = ServeProcess([str(ENTRYPOINT), "--log-level", "warning"],
                          container_env(tmp_path, CEREMEMORY_API_KEYS="key-a,key-b", CEREMEMORY_HTTP__PORT=str(port)),
                          tmp_path / "server.log", port)
    try:
        url = served.url
        assert httpx.get(f"{url}/v1/introspect/stats").status_code == 401
        stats = httpx.get(f"{url}/v1/introspect/stats", headers={"authorization": "Bearer key-b"})
        assert stats.status_code == 200
        assert stats.json()["data_dir"] == str(tmp_path / "data")
        metrics = httpx.get(f"{url}/metrics", headers={"authorization": "Bearer key-a"})
        assert "cerememory_records" in metrics.text
    finally:
        served.proc.send_signal(signal.SIGTERM)
        assert served.stop() == 0


def test_compose_file():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    server = compose["services"]["cerememory"]
    assert any("8420:8420" in p for p in server["ports"]) and any("8421:8421" in p for p in server["ports"])
    assert "cerememory-data:/data" in server["volumes"]
    assert "/readiness" in " ".join(server["healthcheck"]["test"])
    assert "CEREMEMORY_API_KEYS" in server["environment"]
    assert compose["services"]["prometheus"]["profiles"] == ["metrics"]
    cluster = {name for name, service in compose["services"].items() if service.get("profiles") == ["cluster"]}
    assert cluster == {"postgres", "cerememory-a", "cerememory-b", "proxy"}
    assert compose["services"]["postgres"]["image"].startswith("pgvector/pgvector")
    for name in ("cerememory-a", "cerememory-b"):
        env = compose["services"][name]["environment"]
        assert env["CEREMEMORY_STORAGE__BACKEND"] == "postgres"
        assert "@postgres:5432/" in env["CEREMEMORY_STORAGE__POSTGRES_URL"]
        assert "/readiness" in " ".join(compose["services"][name]["healthcheck"]["test"])
    assert compose["services"]["cerememory-a"]["volumes"] != compose["services"]["cerememory-b"]["volumes"]
    proxy = (ROOT / "docker" / "nginx-cluster.conf").read_text()
    assert "cerememory-a:8420" in proxy and "cerememory-b:8420" in proxy and "listen 8430" in proxy
    scrape = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    assert scrape["scrape_configs"][0]["metrics_path"] == "/metrics"
    # the scrape key is a secret whose file must exist (a bind mount of a missing file would make a
    # directory there), and that file is never committed
    assert compose["services"]["prometheus"]["secrets"] == ["metrics-key"]
    assert compose["secrets"]["metrics-key"]["file"] == "./docker/metrics-key"
    assert scrape["scrape_configs"][0]["authorization"]["credentials_file"] == "/run/secrets/metrics-key"
    assert "docker/metrics-key" in (ROOT / ".gitignore").read_text().splitlines()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "docker/entrypoint.sh" in dockerfile and "/readiness" in dockerfile


@pytest.mark.skipif(shutil.which("docker") is None or subprocess.run(
    ["docker", "compose", "version"], capture_output=True).returncode != 0, reason="no docker compose client")
def test_compose_config_validates():
    env = {**os.environ, "CEREMEMORY_API_KEYS": "k"}
    result = subprocess.run(["docker", "compose", "config", "--quiet"], cwd=ROOT, env=env, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
