"""docs/grafana-dashboard.json charts only metrics the server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"


def test_the_dashboard_charts_only_exported_metrics(http_server, mem):
    mem.store("something to count")
    httpx.get(f"{http_server.url}/v1/introspect/stats").raise_for_status()
    httpx.get(f"{http_server.url}/v1/introspect/record/01890000-0000-7000-8000-000000000000")  # an error
    exported = {line.split("{")[0].split(" ")[0] for line in httpx.get(f"{http_server.url}/metrics").text.splitlines()
                if line and not line.startswith("#")}
    dashboard = json.loads(DASHBOARD.read_text())
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"\bcerememory_[a-z_]+", target["expr"])}
    assert used and used <= exported, used - exported
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
