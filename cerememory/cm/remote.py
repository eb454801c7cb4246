"""History from other machines (`remoteCass` in config): each host's Cerememory server, asked
over CMP, all hosts in parallel.

The reference fanned out over SSH to run `cass` on each host. Here a host is the URL of that
machine's `cerememory serve` (`{"host": "http://buildbox:8420", "label": "buildbox", "apiKey":
"…"}`): its raw journal is searched with the same query, at most five hits a host, fifteen
seconds at most. A host given as a bare name (an SSH target) is not contacted; it is reported in
`degraded.remoteCass` with what to write instead, as is every host that fails, and every host
whose key would travel over plain http:// to another machine (unless `--insecure`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAX_HITS = 5
TIMEOUT_SECONDS = 15.0


def hosts(config: dict[str, Any]) -> list[dict[str, Any]]:
    remote = config.get("remoteCass") or {}
    if not isinstance(remote, dict) or not remote.get("enabled"):
        return []
    return [h for h in remote.get("hosts") or [] if isinstance(h, dict) and isinstance(h.get("host"), str)]


def search(targets: list[dict[str, Any]], query: str, days: int, limit: int,
           permits: Callable[[str | None], bool] | None = None, *,
           insecure: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(snippets from every host that answered, one `degraded` entry per host that did not)."""
    if not targets:
        return [], []
    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        answers = list(pool.map(lambda h: _search_host(h, query, days, min(limit, MAX_HITS), insecure), targets))
    snippets: list[dict[str, Any]] = []
    degraded: list[dict[str, Any]] = []
    for hits, failure in answers:
        snippets += [h for h in hits if permits is None or h["agent"] == "unknown" or permits(h["agent"])]
        if failure is not None:
            degraded.append(failure)
    return snippets, degraded


def _search_host(target: dict[str, Any], query: str, days: int, limit: int,
                 insecure: bool) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    from ..cmp.errors import CMPError
    from ..transport.guard import refuse_plaintext_key
    from ..transport.light import LightClient
    from .backend import raw_history_request, raw_snippet

    host, label = target["host"], target.get("label") or target["host"]
    if not host.startswith(("http://", "https://")):
        return [], _failure(host, "OTHER", f"{host} is not a Cerememory server URL; remote history is read over "
                            "CMP, not SSH", [f"set remoteCass.hosts[].host to http://{host}:8420 (that machine's "
                                             "`cerememory serve`)"])
    try:
        refuse_plaintext_key(host, target.get("apiKey"), insecure=insecure)
    except CMPError as exc:
        return [], _failure(host, "OTHER", exc.message, [exc.hint or "use an https:// URL"])
    try:
        with LightClient(host, api_key=target.get("apiKey"), timeout=TIMEOUT_SECONDS, retries=0) as client:
            response = client.dispatch("recall.raw_query", raw_history_request(query, days, limit))
    except CMPError as exc:
        reason = "TIMEOUT" if "timed out" in exc.message else "OTHER"
        return [], _failure(host, reason, exc.message, [f"check that {host} is up: curl {host}/readiness"])
    hits = []
    for record in response.get("records", [])[:limit]:
        snippet = raw_snippet(record)
        snippet["origin"] = {"kind": "remote", "host": label}
        hits.append(snippet)
    return hits, None


def _failure(host: str, reason: str, message: str, fixes: list[str]) -> dict[str, Any]:
    return {"host": host, "available": False, "reason": reason, "message": message, "suggestedFix": fixes}
