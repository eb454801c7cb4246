"""Per-invocation state (config, lazy CMP backend, merged playbook) and the JSON envelopes."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import CM_VERSION
from .errors import CmError

if TYPE_CHECKING:
    from .backend import Backend
    from .playbook import Playbook


@dataclass
class Result:
    """A command's data plus the envelope extras (warnings, soft success)."""

    data: Any
    warnings: list[str] = field(default_factory=list)
    effect: bool | None = None
    reason: str | None = None
    human: str | None = None
    exit_code: int = 0


class Ctx:
    """One invocation's settings and its lazily opened storage. `verbose` and `no_emoji` are the
    program-level `--verbose` / `--no-emoji` (or CASS_MEMORY_VERBOSE / CASS_MEMORY_NO_EMOJI);
    `insecure` is `--insecure`: the server's API key may go over plain http:// to another machine."""

    def __init__(self, *, as_json: bool, server_url: str | None, cwd: Path | None = None, verbose: bool = False,
                 no_emoji: bool = False, insecure: bool = False) -> None:
        self.as_json = as_json
        self.server_url = server_url
        self.insecure = insecure
        self.cwd = cwd or Path.cwd()
        self.verbose = verbose
        self.no_emoji = no_emoji
        self.started = time.perf_counter()
        self._config: dict[str, Any] | None = None
        self._backend: Backend | None = None
        self._playbook: Playbook | None = None

    @property
    def config(self) -> dict[str, Any]:
        if self._config is None:
            from .home import load_config

            self._config = load_config(self.cwd)
        return self._config

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            from .backend import Backend

            semantic = self.config.get("semanticSearchEnabled")
            rules = self.config.get("sanitization") or {}
            redact = tuple(rules.get("extraPatterns") or ()) if rules.get("enabled", True) is not False else None
            self._backend = Backend(self.server_url, semantic if isinstance(semantic, bool) else None, redact,
                                    insecure=self.insecure)
        return self._backend

    @property
    def playbook(self) -> Playbook:
        if self._playbook is None:
            from .playbook import Playbook

            self._playbook = Playbook(self.backend, self.config, self.cwd)
        return self._playbook

    @property
    def storage_notice(self) -> str | None:
        """What storage had to say about how it was opened, if this invocation opened it."""
        return self._backend.notice if self._backend is not None else None

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"executionMs": int((time.perf_counter() - self.started) * 1000),
                                "version": CM_VERSION}
        if self._backend is not None and self._backend.mode:
            meta["storage"] = self._backend.mode
        return meta

    def diag(self, message: str) -> None:
        print(message, file=sys.stderr)


def success_envelope(ctx: Ctx, command: str, result: Result) -> dict[str, Any]:
    from .scoring import now_iso

    out: dict[str, Any] = {"success": True, "command": command, "timestamp": now_iso(), "data": result.data,
                           "metadata": ctx.metadata()}
    if result.warnings:
        out["warnings"] = result.warnings
    if result.effect is not None:
        out["effect"] = result.effect
        out["reason"] = result.reason
    return out


def error_envelope(ctx: Ctx | None, command: str, error: CmError) -> dict[str, Any]:
    from .scoring import now_iso

    meta = ctx.metadata() if ctx else {"executionMs": 0, "version": CM_VERSION}
    return {"success": False, "command": command, "timestamp": now_iso(), "error": error.to_dict(),
            "metadata": meta}


def write_stdout(text: str) -> None:
    """Write everything, even to a slow pipe (the reference lost JSON past 64 KB, #50)."""
    data = (text + "\n").encode("utf-8")
    out = sys.stdout.buffer
    out.write(data)
    out.flush()


def emit(payload: dict[str, Any], output: str = "json", stats: bool = False) -> None:
    """The envelope as JSON, or as TOON (the `toon-format` encoder, in process: unlike the
    reference, no external `tru` binary is needed, so TOON never silently degrades to JSON)."""
    text = json.dumps(payload, ensure_ascii=False, indent=2)
    if output == "toon":
        import toon_format

        encoded = toon_format.encode(payload)
        if stats:
            before, after = estimate_tokens(text), estimate_tokens(encoded)
            saved = 100 * (before - after) / before if before else 0.0
            print(f"cm: tokens ≈ JSON {before} → TOON {after} ({saved:.0f}% fewer)", file=sys.stderr)
        text = encoded
    write_stdout(text)


def estimate_tokens(text: str) -> int:
    """The reference's estimate: max(characters / 4, words)."""
    return max(len(text) // 4, len(text.split()))


def render_human(command: str, result: Result) -> str:
    """What a person sees: the command's own text, or its layout in human.py."""
    if result.human is not None:
        return result.human
    from .human import render

    return render(command, result.data)
