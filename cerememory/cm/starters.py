"""Built-in starter playbooks and custom YAML/JSON starters in `<home>/starters/`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .bullets import normalise
from .errors import invalid
from .home import global_dir
from .scoring import hash_content, now_iso

if TYPE_CHECKING:
    from .playbook import Playbook

BUILTIN: dict[str, dict[str, Any]] = {
    "general": {"description": "Universal practices for any codebase", "bullets": [
        ("workflow", "Read the existing code and tests around a change before editing anything"),
        ("testing", "Run the relevant tests after every change and before claiming a task is done"),
        ("debugging", "Reproduce a bug with a failing test before fixing it"),
        ("git", "Make small, focused commits with messages that explain why the change was made"),
        ("security", "Never commit secrets; read credentials from the environment or a secret store"),
    ]},
    "typescript": {"description": "TypeScript projects", "bullets": [
        ("architecture", "Enable strict mode and avoid `any`; prefer `unknown` with narrowing"),
        ("testing", "Type-check (tsc --noEmit) as part of the test run, not only in the editor"),
        ("architecture", "Model states with discriminated unions instead of optional flags"),
        ("workflow", "Keep runtime validation (zod or similar) at system boundaries where types cannot reach"),
    ]},
    "react": {"description": "React applications", "bullets": [
        ("architecture", "Keep components small and lift shared state only as far as needed"),
        ("performance", "Memoise expensive computations and stable callbacks only after measuring a problem"),
        ("testing", "Test components through what the user sees (Testing Library queries), not internals"),
        ("debugging", "List every value a hook uses in its dependency array; never silence the lint rule"),
    ]},
    "python": {"description": "Python projects", "bullets": [
        ("workflow", "Use a virtual environment per project and pin dependencies"),
        ("testing", "Write pytest tests with fixtures instead of setUp/tearDown boilerplate"),
        ("architecture", "Add type hints to public functions and check them in CI"),
        ("debugging", "Never use a bare except; catch the specific exception you can handle"),
    ]},
    "node": {"description": "Node.js services and tools", "bullets": [
        ("debugging", "Always await promises or handle their rejection; never leave them floating"),
        ("workflow", "Commit the lockfile and install with the lockfile-respecting command in CI"),
        ("security", "Validate and sanitise all request input at the service boundary"),
        ("performance", "Never block the event loop with synchronous file or CPU-heavy work in request paths"),
    ]},
    "rust": {"description": "Rust crates", "bullets": [
        ("debugging", "Propagate errors with ? and typed errors instead of unwrap in library code"),
        ("testing", "Run cargo clippy and cargo test before every commit"),
        ("architecture", "Prefer borrowing over cloning; clone only where ownership really must split"),
        ("performance", "Measure with criterion benchmarks before optimising"),
    ]},
}
PROVEN = {("react", 2)}  # one react rule ships proven, as the reference's does


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-")


def _custom_dirs() -> list[Path]:
    base = global_dir() / "starters"
    return [base, base / "custom"]


def _load_custom() -> dict[str, dict[str, Any]]:
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for folder in _custom_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (yaml.YAMLError, OSError):
                continue
            if isinstance(data, dict) and isinstance(data.get("bullets"), list):
                name = str(data.get("name") or path.stem)
                out[name] = {"description": data.get("description") or "", "bullets": data["bullets"],
                             "source": "custom", "path": str(path)}
    return out


def catalogue() -> list[dict[str, Any]]:
    entries = {name: {"name": name, "description": s["description"], "bulletCount": len(s["bullets"]),
                      "source": "builtin"} for name, s in BUILTIN.items()}
    for name, s in _load_custom().items():
        entries[name] = {"name": name, "description": s["description"], "bulletCount": len(s["bullets"]),
                         "source": "custom", "path": s["path"]}
    return [entries[k] for k in sorted(entries)]


def starter_bullets(name: str) -> list[dict[str, Any]] | None:
    custom = _load_custom()
    now = now_iso()
    if name in custom:
        raw = custom[name]["bullets"]
        items = [(b.get("category", "general"), b.get("content", ""), b) if isinstance(b, dict)
                 else ("general", str(b), {}) for b in raw]
    elif name in BUILTIN:
        items = [(c, t, {}) for c, t in BUILTIN[name]["bullets"]]
    else:
        return None
    out = []
    for n, (category, content, extra) in enumerate(items):
        if not content:
            continue
        slug = _slug(content) or hash_content(content)[:8]
        fields = {"id": extra.get("id") or f"starter-{name}-{slug}", "category": category, "content": content,
                  "source": "community", "state": "active", "kind": extra.get("kind", "stack_pattern"),
                  "maturity": extra.get("maturity") or ("proven" if (name, n) in PROVEN else "established"),
                  "sourceSessions": [f"starter:{name}"], "sourceAgents": ["starter"], "searchPointer": content[:80],
                  "tags": extra.get("tags") or [], "createdAt": now, "updatedAt": now}
        out.append(normalise(fields))
    return out


def apply_starter(playbook: Playbook, name: str, target: str = "global") -> dict[str, Any]:
    """Add starter `name`'s rules to the `target` layer (global or repo), skipping those already
    there by id or by content."""
    bullets = starter_bullets(name)
    if bullets is None:
        raise invalid(f"Unknown starter: {name}", details={"available": [s["name"] for s in catalogue()]},
                      recovery=["List starters with: cm starters"])
    existing = playbook.merged(apply_blocked=False)
    ids = {b["id"] for b in existing}
    hashes = {hash_content(b["content"]) for b in existing}
    fresh = [b for b in bullets if b["id"] not in ids and hash_content(b["content"]) not in hashes]
    if fresh:
        playbook.add(fresh, target)
    return {"added": len(fresh), "skipped": len(bullets) - len(fresh), "name": name}
