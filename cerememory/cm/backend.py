"""cm's only road to storage: CMP through the `MemoryAPI` (embedded, or the HTTP client).

Layout in Cerememory (see docs/cm.md):
- a playbook rule is a procedural record: content = the rule, metadata = `{cm_kind: "bullet",
  bullet_id, …bullet fields}`;
- a diary entry is an episodic record with `{cm_kind: "diary", diary: {...}}`;
- outcomes, context logs and the reflect processed-log are raw-journal records in the sessions
  `cm:outcomes`, `cm:context-log`, `cm:processed` — `private_scratch` visibility, so they stay out
  of dreams and of default raw recall (they are bookkeeping, not conversation).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import CmError
from .home import data_dir

if TYPE_CHECKING:
    import threading

    from ..api import Memory, MemoryAPI
    from ..config import Config
    from ..transport.client import Client
    from ..transport.light import LightClient

BULLET_KIND = "bullet"
META_KIND = "playbook"
DIARY_KIND = "diary"
LOG_SESSIONS = {"outcome": "cm:outcomes", "context": "cm:context-log", "processed": "cm:processed"}
PAGE = 1000
LIST_PAGE = 5000
SIMILAR_CHARS = 4000  # of a task compared by meaning: the model reads its first 256 tokens anyway


def _text_of(record: dict[str, Any]) -> str:
    blocks = (record.get("content") or {}).get("blocks") or []
    return "\n".join(b.get("text", "") for b in blocks if b.get("modality", "text") == "text" and b.get("text"))


def map_cmp_error(exc: Exception) -> CmError:
    """A CMP failure as a cm error with the right exit-code category."""
    code = getattr(getattr(exc, "code", None), "value", None) or str(getattr(exc, "code", "INTERNAL_ERROR"))
    message = getattr(exc, "message", None) or str(exc)
    if code == "DATA_DIR_LOCKED":
        return CmError("LOCK_ACQUISITION_FAILED", message, hint=getattr(exc, "hint", None),
                       details=getattr(exc, "details", None))
    if code == "SERVER_UNREACHABLE":
        return CmError("SERVER_UNREACHABLE", message, retryable=True,
                       hint="start it with `cerememory serve --port <port>`, or point --server-url / "
                            "CEREMEMORY_SERVER_URL at the one that runs")
    if code == "UNAUTHORIZED":
        return CmError("UNAUTHORIZED", f"The Cerememory server refused the request: {message}",
                       hint="the keys a server accepts are its auth.api_keys (CEREMEMORY_API_KEYS where it runs)")
    if code in ("VALIDATION_ERROR", "CONTENT_TOO_LARGE"):
        return CmError("INVALID_INPUT", message, hint=getattr(exc, "hint", None))
    return CmError("INTERNAL_ERROR", f"Cerememory {code}: {message}", hint=getattr(exc, "hint", None))


def server_url_of(given: str | None) -> str | None:
    """A server URL as typed: `localhost:8420` (no scheme) means http://localhost:8420."""
    if not given:
        return None
    given = given.strip()
    return given if "://" in given else f"http://{given}"


@dataclass
class Similarity:
    """Each rule's cosine to `text`, as `recall.list` pages gave it with the listing."""

    text: str
    scores: dict[str, float] = field(default_factory=dict)
    on: bool = False
    reason: str | None = None

    def add(self, page: dict[str, Any]) -> None:
        self.scores.update(page.get("similarity") or {})
        self.on, self.reason = bool(page.get("semantic_search")), page.get("semantic_off_reason")


def shared_server() -> tuple[Path, str] | None:
    """The data directory of the `cerememory` command and the URL of the running server that owns
    it, so cm and cerememory share one server and one memory by default. None when no server
    runs there, or when CEREMEMORY_DATA_DIR points cm at a data directory of its own."""
    if os.environ.get("CEREMEMORY_DATA_DIR"):
        return None
    from ..cmp.errors import CMPError
    from ..config import load_config
    from ..storage.lock import owning_server

    try:
        shared = load_config(None, {}).data_dir
    except CMPError:  # a broken config file: cm keeps to its own data directory
        return None
    url = owning_server(shared)
    return (shared, url) if url else None


class Backend:
    """Opens Cerememory lazily (many commands never touch storage) and caches the rule listing."""

    def __init__(self, server_url: str | None = None, semantic: bool | None = None,
                 redact: tuple[str, ...] | None = (), *, insecure: bool = False) -> None:
        self.server_url = server_url_of(server_url or os.environ.get("CEREMEMORY_SERVER_URL") or None)
        self.insecure = insecure  # the key may go over plain http:// to another machine (--insecure)
        self.semantic = semantic
        self.redact = redact  # extra secret patterns for the logs; None: sanitization is off
        self.mode: str | None = None
        self.notice: str | None = None
        self._api: Memory | LightClient | None = None  # the embedded engine, or a server's plain-dict client
        self._url: str | None = None  # the server's URL when `_api` is its client
        self._typed: Client | None = None  # that server's typed client, opened for ingest
        self._key: str | None = None  # the server's API key, read from the config once
        self._bullets: list[tuple[str, dict[str, Any]]] | None = None
        self._procedural: list[dict[str, Any]] | None = None
        self._similarity: Similarity | None = None  # cosines asked for with the procedural listing
        # searches started ahead: (the thread, or None when answered at once; its answer)
        self._prefetched: dict[tuple[str, int, int], tuple[threading.Thread | None, dict[str, Any]]] = {}
        self.history_hidden = 0

    # ------------------------------------------------------------ connection

    @property
    def api(self) -> Memory | LightClient:
        """The CMP connection, opened on first use: the embedded `Memory`, or a server's client."""
        if self._api is None:
            self._api = self._open()
        return self._api

    def _client(self, url: str) -> LightClient:
        from ..cmp.errors import CMPError
        from ..transport.guard import refuse_plaintext_key
        from ..transport.light import LightClient

        key = self._server_key()
        try:
            refuse_plaintext_key(url, key, insecure=self.insecure)
        except CMPError as exc:
            raise map_cmp_error(exc) from None
        self.mode = "server"
        self._url = url
        return LightClient(url, api_key=key, retries=1)

    def _server_key(self) -> str | None:
        if self._key is None:
            from ..config import load_config

            self._key = load_config(None, {"data_dir": str(data_dir())})["server_api_key"] or ""
        return self._key or None

    @property
    def typed_api(self) -> MemoryAPI:
        """The typed `MemoryAPI` (for code such as ingest that calls its methods, not `dispatch`)."""
        from ..api import Memory

        api = self.api
        if isinstance(api, Memory):
            return api
        if self._typed is None:
            from ..transport.client import Client

            self._typed = Client(api.url, api_key=self._server_key(), retries=1, insecure=self.insecure)
        return self._typed

    def _open(self) -> Memory | LightClient:
        from ..cmp.errors import CMPError

        if self.server_url:
            return self._client(self.server_url)
        shared = shared_server()
        if shared is not None:
            self.notice = f"a cerememory server owns {shared[0]}; using {shared[1]}"
            return self._client(shared[1])
        from ..ahead import close_ahead
        from ..config import load_config

        flags: dict[str, Any] = {"data_dir": str(data_dir())}
        if self.semantic is False:
            flags["embed.semantic"] = "off"
        try:
            mem = _open_embedded(load_config(None, flags))
        except CMPError as exc:
            close_ahead()
            url = (exc.details or {}).get("server_url") if exc.code.value == "DATA_DIR_LOCKED" else None
            if url:  # a server owns the data dir: talk to it
                self.notice = f"data dir owned by a running server; using {url}"
                return self._client(url)
            raise map_cmp_error(exc) from None
        self.mode = "embedded"
        return mem

    def call(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        from ..cmp.errors import CMPError

        try:
            return self.api.dispatch(op, request)
        except CMPError as exc:
            raise map_cmp_error(exc) from None

    def close(self) -> None:
        for thread, _ in self._prefetched.values():  # a search nobody waited for: let it finish first
            if thread is not None:
                thread.join(timeout=10)
        self._prefetched.clear()
        for api in (self._typed, self._api):
            if api is not None:
                api.close()
        self._api = self._typed = None
        self._url = None

    # ------------------------------------------------------------ bullets

    def _list_records(self, store: str, kind: str | None,
                      similarity: Similarity | None = None) -> list[dict[str, Any]]:
        """Every record of `store` with a `metadata.cm_kind` (== kind when given), oldest first:
        `recall.list` pages through the store without ranking or reconsolidating anything.
        With `similarity`, the pages' cosines to its text are gathered into it."""
        out: list[dict[str, Any]] = []
        request: dict[str, Any] = {"store": store, "limit": LIST_PAGE}
        if kind is not None:
            request["metadata"] = {"cm_kind": kind}
        if similarity is not None:
            request["similar_to"] = similarity.text
        while True:
            page = self.call("recall.list", request)
            out.extend(r for r in page["records"] if (r.get("metadata") or {}).get("cm_kind"))
            if similarity is not None:
                similarity.add(page)
            if not page.get("next_cursor"):
                return out
            request["cursor"] = page["next_cursor"]

    def bullets(self) -> list[tuple[str, dict[str, Any]]]:
        """(record id, bullet) for every global rule — one listing per process, cached."""
        if self._bullets is None:
            self._bullets = [(r["id"], record_to_bullet(r)) for r in self._procedural_records()
                             if r["metadata"]["cm_kind"] == BULLET_KIND]
        return self._bullets

    def _procedural_records(self) -> list[dict[str, Any]]:
        if self._procedural is None:
            self._procedural = self._list_records("procedural", None, self._similarity)
        return self._procedural

    def want_similarity(self, text: str) -> None:
        """Ask for every rule's cosine to `text` with the rule listing itself (one call instead of
        a recall query that ships every rule back); `semantic_scores(text)` then answers from it."""
        if self._procedural is None:
            self._similarity = Similarity(text[:SIMILAR_CHARS])

    def playbook_meta(self) -> tuple[str | None, dict[str, Any] | None]:
        """(record id, data) of the global playbook's own fields (name, metadata, deprecatedPatterns)."""
        for record in self._procedural_records():
            if record["metadata"]["cm_kind"] == META_KIND:
                return record["id"], dict(record["metadata"].get("playbook") or {})
        return None, None

    def save_playbook_meta(self, data: dict[str, Any]) -> None:
        record_id, _ = self.playbook_meta()
        metadata = {"cm_kind": META_KIND, "playbook": data}
        if record_id:
            self.call("encode.update", {"record_id": record_id, "metadata": metadata})
            for record in self._procedural or []:
                if record["id"] == record_id:
                    record["metadata"] = metadata
            return
        text = f"cm global playbook: {data.get('name', 'playbook')}"
        response = self.call("encode.store", {"content": {"blocks": [{"modality": "text", "text": text}]},
                                              "store": "procedural", "metadata": metadata})
        if self._procedural is not None:
            self._procedural.append({"id": response["record_id"], "metadata": metadata})

    def cm_record(self, kind: str) -> tuple[str | None, dict[str, Any] | None]:
        """(record id, `metadata.state`) of cm's one procedural record of `kind` (e.g. privacy)."""
        for record in self._procedural_records():
            if record["metadata"]["cm_kind"] == kind:
                return record["id"], dict(record["metadata"].get("state") or {})
        return None, None

    def save_cm_record(self, kind: str, data: dict[str, Any], text: str) -> str:
        """Create or update that record: one `encode.*` write, so the audit log has it."""
        record_id, _ = self.cm_record(kind)
        metadata = {"cm_kind": kind, "state": data}
        content = {"blocks": [{"modality": "text", "text": text}]}
        if record_id:
            self.call("encode.update", {"record_id": record_id, "metadata": metadata, "content": content})
            for record in self._procedural or []:
                if record["id"] == record_id:
                    record["metadata"] = metadata
            return record_id
        response = self.call("encode.store", {"content": content, "store": "procedural", "metadata": metadata})
        if self._procedural is not None:
            self._procedural.append({"id": response["record_id"], "metadata": metadata})
        return response["record_id"]

    def add_bullets(self, bullets: list[dict[str, Any]]) -> list[str]:
        ids: list[str] = []
        for start in range(0, len(bullets), PAGE):
            chunk = bullets[start:start + PAGE]
            response = self.call("encode.batch", {"records": [bullet_request(b) for b in chunk]})
            ids.extend(r["record_id"] for r in response["results"])
        if self._bullets is not None:
            self._bullets.extend(zip(ids, bullets, strict=True))
        return ids

    def update_bullet(self, record_id: str, bullet: dict[str, Any], content_changed: bool = False) -> None:
        request: dict[str, Any] = {"record_id": record_id, "metadata": bullet_metadata(bullet)}
        if content_changed:
            request["content"] = {"blocks": [{"modality": "text", "text": bullet["content"]}]}
        self.call("encode.update", request)

    def delete_records(self, record_ids: list[str]) -> int:
        if not record_ids:
            return 0
        response = self.call("lifecycle.forget", {"record_ids": record_ids, "confirm": True})
        if self._bullets is not None:
            gone = set(record_ids)
            self._bullets = [(i, b) for i, b in self._bullets if i not in gone]
        return int(response.get("records_deleted", 0))

    def semantic_scores(self, text: str, limit: int) -> tuple[dict[str, float], bool, str | None]:
        """Cosine of each procedural record to `text`, through recall's score breakdown. A one-hit
        probe first asks whether the store searches by meaning at all, so keyword-only storage
        never ships every rule back just to say no."""
        if self._procedural is not None and self._similarity is not None \
                and self._similarity.text == text[:SIMILAR_CHARS]:
            found = self._similarity
            return dict(found.scores), found.on, found.reason
        request = {"cue": {"text": text[:SIMILAR_CHARS]}, "stores": ["procedural"], "limit": 1,
                   "include_decayed": True, "reconsolidate": False, "activation_depth": 0, "recall_mode": "perfect"}
        page = self.call("recall.query", request)
        meta = page.get("query_metadata") or {}
        if not meta.get("semantic_search"):
            return {}, False, meta.get("semantic_off_reason")
        if limit > 1:
            page = self.call("recall.query", {**request, "limit": max(1, min(PAGE, limit))})
        scores = {}
        for hit in page.get("memories", []):
            vector = (hit.get("score_breakdown") or {}).get("vector")
            if vector is not None:
                scores[hit["record"]["id"]] = float(vector)
        return scores, True, None

    # ------------------------------------------------------------ diary, logs, history

    def add_diary(self, entry: dict[str, Any], text: str) -> str:
        response = self.call("encode.store", {
            "content": {"blocks": [{"modality": "text", "text": text}]}, "store": "episodic",
            "metadata": {"cm_kind": DIARY_KIND, "diary_id": entry["id"], "diary": entry},
            "created_at": entry.get("timestamp")})
        return response["record_id"]

    def diaries(self) -> list[dict[str, Any]]:
        return [r["metadata"]["diary"] for r in self._list_records("episodic", DIARY_KIND)
                if isinstance(r["metadata"].get("diary"), dict)]

    def log(self, kind: str, entry: dict[str, Any]) -> None:
        """Append to one cm log; free text in it (an outcome's notes, a context log's task) is
        sanitised first, as the reference does."""
        if self.redact is not None:
            from ..security.sanitize import sanitize

            entry = {k: sanitize(v, self.redact)[0] if isinstance(v, str) else v for k, v in entry.items()}
        self.call("encode.store_raw", {
            "session_id": LOG_SESSIONS[kind], "source": "tool_io", "speaker": "tool",
            "visibility": "private_scratch",
            "content": {"blocks": [{"modality": "text", "text": json.dumps(entry, ensure_ascii=False)}]},
            "metadata": {"cm_kind": kind, "entry": entry}})

    def read_log(self, kind: str, limit: int = 1000) -> list[dict[str, Any]]:
        """Entries of one cm log, oldest first."""
        response = self.call("recall.raw_query", {"session_id": LOG_SESSIONS[kind], "limit": limit,
                                                  "include_private_scratch": True})
        return [r["metadata"]["entry"] for r in response.get("records", [])
                if isinstance((r.get("metadata") or {}).get("entry"), dict)]

    def prefetch_history(self, query: str, days: int, limit: int) -> None:
        """Start the journal search a filtered `history(query, days, limit, …)` will make, in a
        thread on its own connection: it runs while this process lists and scores the playbook."""
        import threading

        api = self.api  # opened here, never by two threads at once
        request = raw_history_request(query, days, _fetch_size(limit, filtered=True))
        box: dict[str, Any] = {}
        if self.mode == "embedded" and self.journal_empty():  # nothing to search: no thread, no search
            box["response"] = {"records": []}
            self._prefetched[(query, days, request["limit"])] = (None, box)
            return
        worker = self._client(self._url) if self._url is not None else api

        def run() -> None:
            try:
                box["response"] = worker.dispatch("recall.raw_query", request)
            except Exception as exc:  # handed to the caller of history()
                box["error"] = exc
            finally:
                if worker is not api:
                    worker.close()

        thread = threading.Thread(target=run, name="cm-history", daemon=True)
        thread.start()
        self._prefetched[(query, days, request["limit"])] = (thread, box)

    def _raw_history(self, query: str, days: int, fetch: int) -> dict[str, Any]:
        pending = self._prefetched.pop((query, days, fetch), None)
        if pending is None:
            return self.call("recall.raw_query", raw_history_request(query, days, fetch))
        thread, box = pending
        if thread is not None:
            thread.join()
        if "error" in box:
            error = box["error"]
            raise map_cmp_error(error) if not isinstance(error, CmError) else error
        return box["response"]

    def history(self, query: str, days: int, limit: int, *, workspace: str | None = None,
                permits: Callable[[str | None], bool] | None = None) -> list[dict[str, Any]]:
        """Past-session snippets: the raw journal (ingested agent turns, best match first), then
        episodic memories. `workspace` keeps only hits from that directory; `permits(agent)` is
        the privacy filter (hits from agents it refuses are counted in `history_hidden`)."""
        wanted = _realpath(workspace)
        fetch = _fetch_size(limit, filtered=wanted is not None or permits is not None)
        self.history_hidden = 0

        def keep(agent: str | None, where: str | None) -> bool:
            if wanted is not None and _realpath(where) != wanted:
                return False
            if permits is not None and agent and not permits(agent):
                self.history_hidden += 1
                return False
            return True

        raw = self._raw_history(query, days, fetch)
        records = sorted(raw.get("records", []), key=lambda r: r.get("created_at") or "", reverse=True)
        hits = [raw_snippet(r) for r in records]
        hits = [h for h in hits if keep(h["agent"] if h["agent"] != "unknown" else None, h.get("workspace"))][:limit]
        if len(hits) < limit and not self._store_empty("episodic"):
            temporal = _recent(days)
            episodic = self.call("recall.query", {"cue": {"text": query, "temporal": temporal},
                                                  "stores": ["episodic"], "limit": fetch,
                                                  "reconsolidate": False, "recall_mode": "perfect"})
            more = [_episodic_snippet(h) for h in episodic.get("memories", [])]
            hits += [h for h in more if keep(h["agent"] if h["agent"] != "unknown" else None,
                                             h.get("workspace"))][:limit - len(hits)]
        return hits[:limit]

    def _store_empty(self, store: str) -> bool:
        """Whether `store` holds no record, asked only of embedded storage: there a one-record
        listing costs far less than the first recall query of a process (cm diaries are the
        only episodic records, and a playbook-only home has none). A server answers the query
        at once, so it is simply asked."""
        if self.mode != "embedded":
            return False
        return not self.call("recall.list", {"store": store, "limit": 1, "fields": ["metadata"]})["records"]

    def sessions(self, days: int, limit: int = PAGE) -> dict[str, list[dict[str, Any]]]:
        """Recent raw-journal records grouped by session (for reflect), oldest turn first."""
        now = datetime.now(UTC)
        response = self.call("recall.raw_query", {
            "limit": limit, "temporal": {"start": (now - timedelta(days=days)).isoformat(),
                                         "end": now.isoformat()}})
        groups: dict[str, list[dict[str, Any]]] = {}
        for record in response.get("records", []):
            if not record["session_id"].startswith("cm:"):
                groups.setdefault(record["session_id"], []).append(record)
        return groups

    def journal_records(self) -> int:
        """How many records the raw journal holds (0: no history to search)."""
        try:
            return int(self.call("introspect.stats", {}).get("raw_journal_records", 0))
        except CmError:
            return 0

    def journal_empty(self) -> bool:
        """Whether the raw journal holds no record at all (of any visibility or secrecy): one
        counted page of one record, cheaper than the whole of `introspect.stats`."""
        try:
            page = self.call("recall.raw_query", {"limit": 1, "include_private_scratch": True, "include_sealed": True,
                                                  "secrecy_levels": ["public", "sensitive", "secret"]})
        except CmError:
            return True
        return not (page.get("records") or page.get("total_candidates"))

    def session(self, session_id: str) -> list[dict[str, Any]]:
        return self.call("recall.raw_query", {"session_id": session_id, "limit": PAGE}).get("records", [])


def _open_embedded(config: Config) -> Memory:
    """The embedded engine over `config`'s data directory, for one command. Its lock and database
    open on a thread while the engine's modules import (`open_ahead`), and the cyclic garbage
    collector waits meanwhile: importing creates objects that live as long as the process (the
    engine freezes them once open), and a hundred passes over them would find nothing to free."""
    import gc

    from ..ahead import open_ahead

    collecting = gc.isenabled()
    gc.disable()
    try:
        open_ahead(config)
        from ..api import open_config

        return open_config(config, warm_cache=False)  # one command: no background cache warming
    finally:
        if collecting:
            gc.enable()


def _fetch_size(limit: int, *, filtered: bool) -> int:
    """Hits to ask for: more when a workspace or privacy filter will drop some."""
    return min(max(limit * 5, 50), 500) if filtered else limit


def _recent(days: int) -> dict[str, str]:
    now = datetime.now(UTC)
    return {"start": (now - timedelta(days=days)).isoformat(), "end": now.isoformat()}


def raw_history_request(query: str, days: int, fetch: int) -> dict[str, Any]:
    return {"query": query, "limit": fetch, "temporal": _recent(days)}


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat[:300] + "..." if len(flat) > 300 else flat


def _realpath(path: str | None) -> str | None:
    return os.path.realpath(os.path.expanduser(path)) if path else None


def _origin(meta: dict[str, Any]) -> dict[str, Any]:
    """`local`, or `remote` with the host, by the host the ingesting machine recorded."""
    host = meta.get("host")
    if isinstance(host, str) and host and host != _hostname():
        return {"kind": "remote", "host": host}
    return {"kind": "local"}


def _hostname() -> str:
    import socket

    return socket.gethostname()


def raw_snippet(record: dict[str, Any]) -> dict[str, Any]:
    meta = record.get("metadata") or {}
    path = meta.get("source_path") or meta.get("path") or f"cerememory:journal/{record['session_id']}"
    turn = record.get("turn_id")
    line = meta.get("line") or meta.get("line_number") or (int(turn) if isinstance(turn, str) and turn.isdigit()
                                                            else 1)
    out = {"source_path": path, "line_number": line, "agent": meta.get("agent") or "unknown",
           "workspace": meta.get("workspace"), "snippet": _snippet(_text_of(record)),
           "created_at": record.get("created_at"), "origin": _origin(meta),
           "sessionPath": path, "timestamp": record.get("created_at"),
           "sessionId": record["session_id"], "recordId": record["id"], "source": "raw_journal",
           "speaker": record.get("speaker")}
    if meta.get("tool"):
        out["tool"] = meta["tool"]
    return out


def _episodic_snippet(hit: dict[str, Any]) -> dict[str, Any]:
    record = hit["record"]
    meta = record.get("metadata") or {}
    found = meta.get("diary")
    diary = found if isinstance(found, dict) else {}
    path = diary.get("sessionPath") or meta.get("source_path") or f"cerememory:episodic/{record['id']}"
    return {"source_path": path, "line_number": 1, "agent": diary.get("agent") or meta.get("agent") or "unknown",
            "workspace": diary.get("workspace") or meta.get("workspace"),
            "snippet": _snippet(_text_of(record)), "score": round(float(hit.get("relevance_score", 0)), 4),
            "created_at": record.get("created_at"), "origin": _origin(meta), "sessionPath": path,
            "timestamp": record.get("created_at"), "recordId": record["id"], "source": "episodic"}


def bullet_metadata(bullet: dict[str, Any]) -> dict[str, Any]:
    """The bullet's fields as stored: defaults and empty lists left out (`normalise` restores
    them on the way back), so listing a large playbook ships a third less."""
    from .bullets import DEFAULTS, LIST_FIELDS

    fields = {k: v for k, v in bullet.items() if k not in ("id", "content", "embedding")
              and not (k in LIST_FIELDS and v == [])
              and not (k in DEFAULTS and k not in _COUNTS and v == DEFAULTS[k] and type(v) is type(DEFAULTS[k]))}
    return {"cm_kind": BULLET_KIND, "bullet_id": bullet["id"], **fields}


_COUNTS = ("helpfulCount", "harmfulCount")  # kept even at 0: normalise would recount them from events


def bullet_request(bullet: dict[str, Any]) -> dict[str, Any]:
    """The encode.store request that keeps a playbook rule as a procedural record."""
    return {"content": {"blocks": [{"modality": "text", "text": bullet["content"]}]}, "store": "procedural",
            "metadata": bullet_metadata(bullet)}


def record_to_bullet(record: dict[str, Any]) -> dict[str, Any]:
    from .bullets import from_record

    return from_record(record)
