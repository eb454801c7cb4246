"""Cross-agent privacy: which agents' sessions cm ingests and shows as history.

The state is the reference's `crossAgent` object `{enabled, consentGiven, consentDate?, agents,
auditLog}`. It lives in Cerememory as one procedural record
(`cm_kind: "privacy"`), so every change is an `encode.*` write that the hash-chained audit log
records; config.json's `crossAgent` is kept as a mirror (and read when no record exists yet).

The rule (docs/cm.md, "Privacy and cross-agent enrichment"):
1. enrichment off (the default, or enabled without consent): only the current agent;
2. enabled with consent: the allowlist `agents` (empty = every agent) plus the current agent;
3. an agent in `deniedAgents` (`cm privacy deny <agent> --never`, an extension: the reference's
   deny only shrinks the allowlist, so with an empty allowlist it denies nothing) is never
   ingested and never shown.
The current agent is `CM_AGENT`, else the agent whose own environment marker is set, else
`claude_code`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from .home import append_jsonl, global_dir, repo_dir, write_atomic
from .locks import locked
from .scoring import now_iso

KIND = "privacy"
DEFAULT: dict[str, Any] = {"enabled": False, "consentGiven": False, "agents": [], "auditLog": True}
# what `privacy enable` allow-lists when no agent is named and the journal names none (the reference's list)
DEFAULT_ALLOWLIST = ("claude", "cursor", "codex", "aider", "pi_agent")
# environment variables the agents set for the commands they run
MARKERS = (("CLAUDECODE", "claude_code"), ("CLAUDE_CODE_ENTRYPOINT", "claude_code"), ("GEMINI_CLI", "gemini"),
           ("CODEX_SANDBOX", "codex"), ("CODEX_SANDBOX_NETWORK_DISABLED", "codex"),
           ("CURSOR_AGENT", "cursor"), ("CURSOR_TRACE_ID", "cursor"), ("AIDER_MODEL", "aider"))
FALLBACK_AGENT = "claude_code"
MAX_CHANGES = 100
AUDIT_FILE = "privacy-audit.jsonl"


def canonical(name: str | None) -> str | None:
    """The ingest name of an agent (`claude` → claude_code, `pi_agent` → pi), None if unknown."""
    if not name:
        return None
    from ..ingest.agents import canonical as ingest_canonical

    return ingest_canonical(name)


def current_agent(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(agent, how it was found)."""
    env = os.environ if env is None else env
    named = env.get("CM_AGENT")
    if named:
        agent = canonical(named)
        if agent:
            return agent, "CM_AGENT"
    for variable, agent in MARKERS:
        if env.get(variable):
            return agent, variable
    return FALLBACK_AGENT, "default"


def _names(values: Any) -> set[str]:
    return {canonical(str(v)) or str(v).lower() for v in values or []}


class Policy:
    """The privacy state, resolved into decisions about agents."""

    def __init__(self, state: dict[str, Any], agent: str) -> None:
        self.state = state
        self.agent = agent

    @property
    def cross_agent(self) -> bool:
        return bool(self.state.get("enabled")) and bool(self.state.get("consentGiven"))

    def permits(self, agent: str | None) -> bool:
        name = canonical(agent) or (agent or "").lower()
        if name in _names(self.state.get("deniedAgents")):
            return False
        if name == self.agent:
            return True
        if not self.cross_agent:
            return False
        allowed = _names(self.state.get("agents"))
        return not allowed or name in allowed

    def rule(self) -> str:
        denied = sorted(_names(self.state.get("deniedAgents")))
        tail = f"; never: {', '.join(denied)}" if denied else ""
        if not self.cross_agent:
            return f"cross-agent enrichment is off: only the current agent ({self.agent}){tail}"
        allowed = sorted(_names(self.state.get("agents")) | {self.agent})
        scope = "every agent" if not self.state.get("agents") else ", ".join(allowed)
        return f"cross-agent enrichment is on: {scope}{tail}"


def _config_state() -> dict[str, Any]:
    path = global_dir() / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError):
        config = {}
    return {**DEFAULT, **(config.get("crossAgent") or {})}


def load(backend: Any) -> dict[str, Any]:
    """The stored state: the CMP record, else config.json's `crossAgent`, else the defaults."""
    _, data = backend.cm_record(KIND)
    if data and isinstance(data.get("crossAgent"), dict):
        return {**DEFAULT, **data["crossAgent"]}
    return _config_state()


def policy(backend: Any) -> Policy:
    return Policy(load(backend), current_agent()[0])


def change(backend: Any, action: str, agents: list[str], discovered: list[str] | None = None,
           never: bool = False) -> dict[str, Any]:
    """Apply one `cm privacy` action the reference's way, write it through CMP (audited) and
    mirror it to config.json. `enable` allow-lists the agents named, else those `discovered`
    in the journal, else DEFAULT_ALLOWLIST; `allow` adds one agent and `deny` removes one from
    the allowlist (both sorted). `never` (deny only) also puts the agent in `deniedAgents`;
    naming an agent to `enable` or `allow` takes it out again."""
    state = load(backend)
    allowed = [_normal(a) for a in state.get("agents") or []]
    named = [_normal(a) for a in agents if _normal(a)]
    denied = [d for d in state.get("deniedAgents") or [] if _names([d]).isdisjoint(_names(named))]
    if action == "deny" and never:
        denied += named[:1]
    if action == "enable":
        state.update(enabled=True, consentGiven=True, consentDate=state.get("consentDate") or now_iso())
        if named:
            allowed = sorted(set(named))
        elif discovered:
            allowed = sorted(set(discovered))
        else:
            allowed = list(DEFAULT_ALLOWLIST)
    elif action == "disable":
        state["enabled"] = False
    elif action == "allow":
        allowed = sorted({*allowed, named[0]})
    elif action == "deny":
        allowed = sorted(a for a in allowed if a != named[0])
    state["agents"] = allowed
    if denied:
        state["deniedAgents"] = denied
    else:
        state.pop("deniedAgents", None)
    _, previous = backend.cm_record(KIND)
    changes = list((previous or {}).get("changes") or [])[-(MAX_CHANGES - 1):]
    changes.append({"at": now_iso(), "action": action, "agents": agents, "by": current_agent()[0]})
    text = f"cm privacy: {Policy(state, current_agent()[0]).rule()}"
    backend.save_cm_record(KIND, {"crossAgent": state, "changes": changes}, text)
    _mirror(state)
    return state


def _normal(agent: str) -> str:
    """An agent name as the reference stores it in the allowlist: trimmed, lower case."""
    return agent.strip().lower()


def _mirror(state: dict[str, Any]) -> None:
    path = global_dir() / "config.json"
    with locked(path):
        try:
            config = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        except (OSError, ValueError):
            return  # a broken config.json is doctor's business; the record is the source of truth
        config["crossAgent"] = state
        write_atomic(path, json.dumps(config, indent=2) + "\n")


def changes(backend: Any, limit: int = 10) -> list[dict[str, Any]]:
    _, data = backend.cm_record(KIND)
    return list((data or {}).get("changes") or [])[-limit:]


def related_sessions(backend: Any, diary: dict[str, Any], rules: Policy,
                     config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Cross-agent enrichment of a diary: sessions of *other* agents that match its top five
    search anchors (within `relatedSessionsDays`, at most `maxRelatedSessions`; the reference
    ignored both), only when enrichment is enabled with consent, the allowlist applied, and an
    audit line written (`.cass/privacy-audit.jsonl` in a repo, else the global one)."""
    if not rules.cross_agent or not diary.get("searchAnchors"):
        return []
    days = _positive(config.get("relatedSessionsDays"), 30)
    most = _positive(config.get("maxRelatedSessions"), 5)
    own = canonical(diary.get("agent")) or rules.agent
    query = " ".join(diary["searchAnchors"][:5])
    hits = backend.history(query, days, most * 4, permits=rules.permits)
    related: list[dict[str, Any]] = []
    seen = {diary.get("sessionPath")}
    for rank, hit in enumerate(hits):
        agent = canonical(hit.get("agent")) or hit.get("agent")
        session = hit.get("sessionId") or hit["sessionPath"]  # a journal turn, or a diary of that session
        if agent in (own, "unknown", None) or session in seen:
            continue
        seen.add(session)
        related.append({"sessionPath": hit["sessionPath"], "agent": agent,
                        "relevanceScore": hit.get("score", round(1.0 / (1 + rank), 4)), "snippet": hit["snippet"]})
        if len(related) == most:
            break
    if rules.state.get("auditLog", True):
        folder = repo_dir() or global_dir()
        append_jsonl(folder / AUDIT_FILE, {
            "timestamp": now_iso(), "action": "diary_enrichment", "diaryId": diary.get("id"),
            "sessionPath": diary.get("sessionPath"), "query": query, "rule": rules.rule(),
            "agentsReturned": sorted({r["agent"] for r in related}), "sessionsReturned": len(related),
            "hiddenByPrivacy": backend.history_hidden})
    return related


def _positive(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1 else default
