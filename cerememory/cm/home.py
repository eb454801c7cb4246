"""Where cm keeps things: the global home, the repo `.cass/` dir, and the merged config.

Global home = `$CASS_MEMORY_HOME`, else `$XDG_DATA_HOME/cass-memory`, else `~/.cass-memory`
(reference §2.1). The Cerememory data dir cm opens in-process is `$CEREMEMORY_DATA_DIR`, else
`<home>/cerememory`.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from ..storage.files import write_atomic as write_atomic  # the cm modules import it from here
from .errors import CmError

DEFAULT_CONFIG: dict[str, Any] = {
    "schema_version": 1,
    "provider": "anthropic",
    "model": "claude-sonnet-5",
    "cassPath": "cass",
    "remoteCass": {"enabled": False, "hosts": []},
    "scoring": {"decayHalfLifeDays": 90, "harmfulMultiplier": 4, "minFeedbackForActive": 3,
                "minHelpfulForProven": 10, "maxHarmfulRatioForProven": 0.1},
    "maxReflectorIterations": 3,
    "autoReflect": False,
    "sessionExcludePatterns": ["prompt_suggestion", "prompt-suggestion", "auto_complete", "auto-complete",
                               "inline_completion", "inline-completion", "/subagents/agent-a",
                               "/subagents/workflows/"],
    "sessionIncludeAll": False,
    "dedupSimilarityThreshold": 0.85,
    "pruneHarmfulThreshold": 3,
    "defaultDecayHalfLife": 90,
    "maxBulletsInContext": 50,
    "maxHistoryInContext": 10,
    "sessionLookbackDays": 7,
    "validationLookbackDays": 90,
    "relatedSessionsDays": 30,
    "minRelevanceScore": 0.1,
    "maxRelatedSessions": 5,
    "validationEnabled": True,
    "crossAgent": {"enabled": False, "consentGiven": False, "agents": [], "auditLog": True},
    "semanticWeight": 0.6,
    "embeddingBackend": "xenova",
    "embeddingModel": "Xenova/all-MiniLM-L6-v2",
    "verbose": False,
    "jsonOutput": False,
    "disableStructuredOutputs": False,
    "sanitization": {"enabled": True, "extraPatterns": [], "auditLog": False, "auditLevel": "info"},
    "budget": {"dailyLimit": 1.0, "monthlyLimit": 20.0, "warningThreshold": 80, "currency": "USD"},
    "serve": {"maxConcurrentCassCalls": 2, "maxQueuedCassCalls": 32, "cassQueueTimeoutMs": 20000},
}
MERGED_KEYS = ("scoring", "crossAgent", "sanitization", "budget", "serve")
REPO_FORBIDDEN = ("cassPath", "playbookPath", "diaryDir", "crossAgent", "remoteCass", "apiKey", "baseUrl",
                  "ollamaBaseUrl", "cliCommand", "budget", "sanitization", "serve")


def global_dir() -> Path:
    if os.environ.get("CASS_MEMORY_HOME"):
        return Path(os.environ["CASS_MEMORY_HOME"]).expanduser()
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]).expanduser() / "cass-memory"
    return Path("~/.cass-memory").expanduser()


def global_playbook_ref(config: dict[str, Any] | None = None) -> str:
    """The global playbook file as the reference names it (`playbookPath`, by default
    `~/.cass-memory/playbook.yaml`, unexpanded): the path cm reports for global rules, which
    `cm playbook export` writes in that file's format."""
    named = (config or {}).get("playbookPath")
    if isinstance(named, str) and named:
        return named
    home = global_dir()
    default = home == Path("~/.cass-memory").expanduser()
    return "~/.cass-memory/playbook.yaml" if default else str(home / "playbook.yaml")


def global_playbook_path(config: dict[str, Any] | None = None) -> Path:
    return Path(global_playbook_ref(config)).expanduser()


def data_dir() -> Path:
    """The Cerememory data dir cm opens when no server is named."""
    if os.environ.get("CEREMEMORY_DATA_DIR"):
        return Path(os.environ["CEREMEMORY_DATA_DIR"]).expanduser()
    return global_dir() / "cerememory"


def git_root(cwd: Path | None = None) -> Path | None:
    """The repository root, found by walking up for `.git` (no subprocess: it is on every call)."""
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def repo_dir(cwd: Path | None = None) -> Path | None:
    root = git_root(cwd)
    return root / ".cass" if root else None


def git_available() -> bool:
    import subprocess  # a rare question: most commands never start a process

    try:
        return subprocess.run(["git", "--version"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _snake_to_camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest) if rest and key != "schema_version" else key


def _read_config_file(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text) if text.strip() else {}
    except (ValueError, OSError) as exc:
        raise CmError("CONFIG_INVALID", f"Configuration validation failed: {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CmError("CONFIG_INVALID", f"Configuration validation failed: {path}: expected an object")
    return {_snake_to_camel(k): v for k, v in data.items()}


def _merge(base: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in layer.items():
        if key in MERGED_KEYS and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def load_config(cwd: Path | None = None) -> dict[str, Any]:
    """defaults < global config.json < repo .cass/config.json (restricted keys dropped)."""
    config = copy.deepcopy(DEFAULT_CONFIG)
    config = _merge(config, _read_config_file(global_dir() / "config.json") or {})
    rdir = repo_dir(cwd)
    if rdir is not None:
        for name in ("config.json", "config.yaml", "config.yml"):
            layer = _read_config_file(rdir / name)
            if layer is not None:
                extra = ((layer.get("sanitization") or {}).get("extraPatterns")) or []
                for key in REPO_FORBIDDEN:
                    layer.pop(key, None)
                config = _merge(config, layer)
                if extra:
                    patterns = config["sanitization"].setdefault("extraPatterns", [])
                    patterns.extend(p for p in extra if p not in patterns)
                break
    return config


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Valid JSON-object lines of a JSONL file; malformed lines are skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def append_jsonl(path: Path, entry: dict[str, Any]) -> None:
    from .locks import locked

    with locked(path), path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
