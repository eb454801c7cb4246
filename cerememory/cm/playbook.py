"""The merged playbook: global rules in Cerememory (through `Backend`) plus the repo's
`.cass/playbook.yaml` file, keyed by id with the repo winning (reference §2.2), and the
blocked list applied in the merged view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .bullets import normalise, public
from .errors import CmError
from .home import global_dir, global_playbook_path, global_playbook_ref, read_jsonl, repo_dir, write_atomic
from .locks import locked
from .scoring import hash_content, is_active, jaccard_sets, now_iso, tokenize

if TYPE_CHECKING:
    from .backend import Backend


def empty_playbook(name: str = "playbook") -> dict[str, Any]:
    return {"schema_version": 2, "name": name, "description": "",
            "metadata": {"createdAt": now_iso(), "totalReflections": 0, "totalSessionsProcessed": 0},
            "deprecatedPatterns": [], "bullets": []}


def parse_playbook_text(text: str, source: str) -> dict[str, Any]:
    """A playbook from YAML or JSON: a playbook object, a raw bullets array, or a cm envelope."""
    import yaml  # only here: most commands never read a playbook file, and yaml is slow to import

    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise CmError("PLAYBOOK_CORRUPT", f"Cannot parse {source}: {exc}") from None
    if isinstance(data, dict) and "data" in data and "success" in data:  # a cm JSON envelope
        data = data["data"]
        if isinstance(data, dict) and isinstance(data.get("playbook"), dict):
            data = data["playbook"]
    if isinstance(data, list):
        data = {"bullets": data}
    if data is None:
        data = {}
    if not isinstance(data, dict) or not isinstance(data.get("bullets", []), list):
        raise CmError("PLAYBOOK_CORRUPT", f"{source}: expected a playbook object or a list of bullets")
    out = empty_playbook(data.get("name") or "playbook")
    out.update({k: v for k, v in data.items() if k != "bullets"})
    bullets = []
    for n, raw in enumerate(data.get("bullets") or []):
        if not isinstance(raw, dict) or not isinstance(raw.get("content"), str) or not raw.get("id"):
            raise CmError("PLAYBOOK_CORRUPT", f"{source}: bullet {n} needs an id and a content string")
        bullets.append(normalise(_jsonable(raw)))
    out["bullets"] = bullets
    return out


def _jsonable(value: Any) -> Any:
    """YAML can load dates as datetime objects; the playbook keeps ISO strings."""
    import datetime as dt

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return now_iso(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def dump_yaml(playbook: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(playbook, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1000)


class Playbook:
    """Global + repo layers; `save()` writes a bullet back to the layer it came from."""

    def __init__(self, backend: Backend, config: dict[str, Any], cwd: Path | None = None) -> None:
        self.backend = backend
        self.config = config
        self.repo_dir = repo_dir(cwd)
        self._repo: dict[str, Any] | None = None
        self._record_of: dict[str, str] = {}
        self._global: list[dict[str, Any]] | None = None

    # ------------------------------------------------------------ layers

    @property
    def repo_path(self) -> Path | None:
        return self.repo_dir / "playbook.yaml" if self.repo_dir else None

    def repo(self) -> dict[str, Any] | None:
        if self._repo is None and self.repo_path and self.repo_path.exists():
            self._repo = parse_playbook_text(self.repo_path.read_text(encoding="utf-8"), str(self.repo_path))
        return self._repo

    def global_bullets(self) -> list[dict[str, Any]]:
        if self._global is None:
            pairs = self.backend.bullets()
            self._record_of = {b["id"]: rid for rid, b in pairs}
            self._global = [b for _, b in pairs]
        return self._global

    def semantic_scores(self, text: str) -> tuple[dict[str, float], bool, str | None]:
        """(cosine to `text` by bullet id, whether storage searched by meaning, why not)."""
        scores, on, reason = self.backend.semantic_scores(text, len(self.global_bullets()))
        bullet_of = {rid: bid for bid, rid in self._record_of.items()}
        return {bullet_of[r]: s for r, s in scores.items() if r in bullet_of}, on, reason

    def path_of(self, bullet_id: str, *, expanded: bool = True) -> str:
        """The playbook file a rule belongs to, as the reference names it: the repo's
        `.cass/playbook.yaml`, or the global one (`home.global_playbook_ref`; `expanded`: with
        `~` resolved, as the reference's `undo` reports it)."""
        if self.layer_of(bullet_id) == "repo" and self.repo_path is not None:
            return str(self.repo_path)
        return str(global_playbook_path(self.config)) if expanded else global_playbook_ref(self.config)

    def layer_of(self, bullet_id: str) -> str:
        repo = self.repo()
        if repo and any(b["id"] == bullet_id for b in repo["bullets"]):
            return "repo"
        return "global"

    def merged(self, apply_blocked: bool = True) -> list[dict[str, Any]]:
        """All bullets, repo winning on id clashes, blocked content deprecated in this view only."""
        by_id = {b["id"]: b for b in self.global_bullets()}
        repo = self.repo()
        for bullet in (repo or {}).get("bullets", []):
            by_id[bullet["id"]] = bullet
        bullets = list(by_id.values())
        if apply_blocked:
            blocked = self.blocked_entries()
            if blocked:
                bullets = [_blocked_view(b, blocked) for b in bullets]
        return bullets

    def active(self) -> list[dict[str, Any]]:
        return [b for b in self.merged() if is_active(b)]

    def find(self, bullet_id: str) -> dict[str, Any] | None:
        for bullet in (self.repo() or {}).get("bullets", []):
            if bullet["id"] == bullet_id:
                return bullet
        for bullet in self.global_bullets():
            if bullet["id"] == bullet_id:
                return bullet
        return None

    def require(self, bullet_id: str) -> dict[str, Any]:
        bullet = self.find(bullet_id)
        if bullet is None:
            ids = [b["id"] for b in self.merged(apply_blocked=False)]
            suggestions = [i for i in ids if bullet_id.lower() in i.lower() or i.startswith(bullet_id)][:5]
            raise CmError("BULLET_NOT_FOUND", f"Bullet not found: {bullet_id}",
                          details={"bulletId": bullet_id, "suggestions": suggestions})
        return bullet

    def deprecated_patterns(self) -> list[dict[str, Any]]:
        _, meta = self.backend.playbook_meta()
        patterns = list((meta or {}).get("deprecatedPatterns") or [])
        seen = {p.get("pattern") for p in patterns}
        for pattern in (self.repo() or {}).get("deprecatedPatterns") or []:
            if pattern.get("pattern") not in seen:
                patterns.append(pattern)
        return patterns

    # ------------------------------------------------------------ writes

    def add(self, bullets: list[dict[str, Any]], target: str = "global") -> None:
        if target == "repo":
            self._write_repo(bullets)
            return
        ids = self.backend.add_bullets(bullets)
        known = self.global_bullets()
        for record_id, bullet in zip(ids, bullets, strict=True):
            self._record_of[bullet["id"]] = record_id
            if not any(b is bullet for b in known):
                known.append(bullet)

    def save(self, bullet: dict[str, Any], content_changed: bool = False) -> None:
        bullet["updatedAt"] = bullet.get("updatedAt") or now_iso()
        if self.layer_of(bullet["id"]) == "repo":
            self._write_repo([bullet])
            return
        self.global_bullets()
        self.backend.update_bullet(self._record_of[bullet["id"]], bullet, content_changed)

    def delete(self, bullet_id: str) -> None:
        if self.layer_of(bullet_id) == "repo":
            self._write_repo([], removed={bullet_id})
            return
        self.global_bullets()
        self.backend.delete_records([self._record_of.pop(bullet_id)])
        self._global = [b for b in self._global or [] if b["id"] != bullet_id]

    def _write_repo(self, upserts: list[dict[str, Any]], removed: frozenset[str] | set[str] = frozenset()) -> None:
        """Under the file's lock, re-read `.cass/playbook.yaml`, put these bullets in (by id) and
        take `removed` out: what another process wrote since this one read the file is kept."""
        if self.repo_path is None:
            raise CmError("FILE_NOT_FOUND", "No repository here: the repo playbook lives in <git root>/.cass",
                          recovery=["Run cm in a git repository, or drop --repo"])
        with locked(self.repo_path):
            path = self.repo_path
            fresh = parse_playbook_text(path.read_text(encoding="utf-8"), str(path)) if path.exists() \
                else empty_playbook("repo-playbook")
            by_id = {b["id"]: b for b in fresh["bullets"] if b["id"] not in removed}
            by_id.update((b["id"], b) for b in upserts)
            fresh["bullets"] = list(by_id.values())
            write_atomic(path, dump_yaml(fresh))
        self._repo = fresh

    # ------------------------------------------------------------ blocked list

    def blocked_paths(self) -> list[Path]:
        paths = [global_dir() / "blocked.log"]
        if self.repo_dir:
            paths.append(self.repo_dir / "blocked.log")
        return paths

    def blocked_entries(self) -> list[dict[str, Any]]:
        return [e for p in self.blocked_paths() for e in read_jsonl(p) if isinstance(e.get("content"), str)]


def export_playbook(playbook: Playbook, include_all: bool) -> dict[str, Any]:
    """The merged playbook as one playbook document (`cm playbook export`, `cm project --format
    yaml`): the global playbook's own fields, the deprecated patterns of both layers, and the
    active rules (every rule with `include_all`) without their provenance lists."""
    _, meta = playbook.backend.playbook_meta()
    book = empty_playbook()
    book.update({k: v for k, v in (meta or {}).items() if k != "bullets"})
    bullets = playbook.merged(apply_blocked=False)
    if not include_all:
        bullets = [b for b in bullets if is_active(b)]
    book["deprecatedPatterns"] = playbook.deprecated_patterns()
    book["metadata"] = {**(book.get("metadata") or {}), "exportedAt": now_iso(),
                        "exportedBulletCount": len(bullets)}
    book["bullets"] = [{k: v for k, v in public(b).items() if k not in ("sourceSessions", "sourceAgents")}
                       for b in bullets]
    return book


def _blocked_view(bullet: dict[str, Any], blocked: list[dict[str, Any]]) -> dict[str, Any]:
    if not is_active(bullet):
        return bullet
    digest = hash_content(bullet["content"])
    tokens = set(tokenize(bullet["content"]))
    for entry in blocked:
        if hash_content(entry["content"]) == digest or jaccard_sets(tokens, set(tokenize(entry["content"]))) > 0.85:
            return {**bullet, "deprecated": True, "state": "retired", "maturity": "deprecated",
                    "deprecationReason": "BLOCKED_CONTENT"}
    return bullet
