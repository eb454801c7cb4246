"""Agent sessions into the raw journal (`cm ingest`), as a typed operation: the same engine as
`cerememory ingest`, against cm's backend (embedded or server), limited to the agents `cm
privacy` permits."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import privacy
from .app import Ctx, Result
from .backend import map_cmp_error
from .errors import CmError, invalid
from .home import data_dir


def _camel(value: Any) -> Any:
    if isinstance(value, dict):
        return {_camel_key(k): _camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def _camel_key(key: str) -> str:
    head, *rest = key.split("_")
    return key if not rest or key in _AGENT_KEYS else head + "".join(p[:1].upper() + p[1:] for p in rest)


_AGENT_KEYS = {"claude_code"}


def _progress(as_json: bool) -> Callable[[str, int | None], Any]:
    """Progress on stderr: NDJSON `{"event":"progress",...}` lines under --json (as the reference
    does), else one line per agent; stdout stays the envelope alone."""

    @contextmanager
    def bar(label: str, total: int | None) -> Iterator[Callable[[int], None]]:
        done = [0]

        def say(message: str) -> None:
            if as_json:
                line = json.dumps({"event": "progress", "current": done[0], "total": total, "message": message})
            else:
                line = f"cm ingest: {message} ({done[0]}/{total})"
            print(line, file=sys.stderr, flush=True)

        def advance(n: int) -> None:
            done[0] += n
            if total and (done[0] == total or done[0] % 100 == 0):
                say(f"{label}: {done[0]} of {total} files")

        say(f"{label}: {total} files")
        yield advance

    return bar


def _requested(names: list[str] | None, rules: privacy.Policy) -> list[str] | None:
    """Canonical `--agent` names; an unknown or refused agent is a user error, never skipped silently."""
    if not names:
        return None
    from ..ingest.agents import AGENTS

    out = []
    for name in names:
        agent = privacy.canonical(name)
        if agent is None:
            raise invalid(f"unknown agent {name!r}", hint=f"one of: {', '.join(AGENTS)}")
        if not rules.permits(agent):
            raise invalid(f"agent {agent} is not ingested under the privacy settings ({rules.rule()})",
                          recovery=[f"cm privacy allow {agent}", "cm privacy enable", "cm privacy status"])
        out.append(agent)
    return out


def ingest_sessions(ctx: Ctx, *, agents: list[str] | None = None, paths: list[str] | None = None,
                    since: str | None = None, dry_run: bool = False) -> Result:
    """New turns of the permitted agents' sessions (their default locations, or `paths`)
    since `since`; `agents` names some of them (each must be permitted)."""
    from ..cmp.errors import CMPError
    from ..config import load_config
    from ..ingest import AGENTS, IngestSettings, ingest, open_state
    from ..ingest.cli import parse_since, state_dir

    rules = privacy.policy(ctx.backend)
    agents = _requested(agents, rules)
    try:
        config = load_config(None, {"data_dir": str(data_dir())})
        base = IngestSettings.from_config(config)
        allowed = [a for a in AGENTS if rules.permits(a) and base.permits(a)]
        # deny everything else explicitly: an empty allow list would mean "every agent"
        settings = replace(base, allow=(), deny=tuple(a for a in AGENTS if a not in allowed))
        if agents:
            refused = [a for a in agents if a not in allowed]
            if refused:
                raise invalid(f"agent {refused[0]} is excluded by Cerememory's ingest.agents / "
                              "ingest.exclude_agents settings")
        after = parse_since(since)
        states: Path = state_dir(config)
        api = ctx.backend.typed_api
        with open_state(api, states) as state:
            summary = ingest(api, state=state, agents=agents, paths=paths, since=after, dry_run=dry_run,
                             progress=_progress(ctx.as_json), settings=settings)
    except CMPError as exc:
        raise map_cmp_error(exc) from None
    except OSError as exc:
        raise CmError("FILE_WRITE_FAILED", f"ingest state: {exc}") from None
    data = _camel(summary.to_dict())
    data["privacy"] = {"currentAgent": rules.agent, "crossAgent": rules.cross_agent, "rule": rules.rule(),
                       "agentsIngested": allowed}
    result = Result(data)
    total = summary.total
    if total.errors:
        result.warnings.extend(total.errors[:20])
    if summary.denied and paths:
        result.warnings.append(f"not ingested (privacy settings): {', '.join(sorted(set(summary.denied)))}")
    if not total.turns_ingested:
        result.effect, result.reason = False, ("nothing new to ingest" if total.files else
                                               "no session files found for " + ", ".join(allowed or ["no agent"]))
    return result
