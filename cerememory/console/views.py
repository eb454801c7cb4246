"""The console's pages and actions, each a few CMP operations rendered by a template."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..cmp.errors import CMPError, ErrorCode
from ..cmp.operations import OPERATIONS
from ..model import ALL_STORES, StoreType
from . import plots
from .app import PREFIX, Console
from .playbook import playbook_rules, trauma_registry
from .sessions import Session

PAGE_SIZE = 50
SEARCH_LIMITS = (10, 25, 50, 100)
TIME_FILTERS = {"": None, "1": 1, "7": 7, "30": 30, "365": 365}
CURVE_POINTS = 24
DAY = 86400.0
RUN_OPERATIONS = ("lifecycle.dream_tick", "lifecycle.consolidate")
RUN_LIMIT = 20  # runs shown per operation on the evolution page
PLAYBOOK_CAP = 5000  # rules read to sort a playbook (recall.list's page limit)
GRAPH_NODES = 24  # records drawn around a record on its page
SUMMARY_LIMIT = 20  # dream summaries listed beside a page of journal turns
MOVABLE_STORES = tuple(s.value for s in ALL_STORES if s is not StoreType.WORKING)


def _int(value: str | None, default: int, choices: tuple[int, ...]) -> int:
    try:
        number = int(value or default)
    except ValueError:
        return default
    return number if number in choices else default


def _record_id(request: Request) -> str:
    return _uuid(request.path_params["record_id"])


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"{value!r} is not a record id",
                       hint="record ids are UUIDs, as the search and store pages link them") from None


def install(app: Starlette, console: Console) -> None:
    """Register every page and action of `console` on `app`."""
    page, action = console.page, console.action

    async def root(request: Request) -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    async def sign_in_form(request: Request) -> Response:
        session = console.session(request)
        if console.keys is None or (session is not None and session.signed_in):
            return console.redirect(f"{PREFIX}/")
        return console.render(request, session, "sign_in.html")

    async def sign_in(request: Request, session: Session, form: dict[str, str]) -> Response:
        key = form.get("key", "").strip()
        key_id = console.keys.identify_authorization(f"Bearer {key}") if console.keys and key else None
        if console.keys is not None and key_id is None:
            refusal = CMPError(ErrorCode.UNAUTHORIZED, "that API key is not one this server accepts",
                               hint="create one with `cerememory keys create`")
            if console.auth_failures is not None:  # budgeted like wrong bearer keys: too many wait
                client = request.client.host if request.client else None
                budget = console.auth_failures.refuse(console.auth_failures.address(
                    client, request.headers.get("x-forwarded-for")))
                refusal = refusal if budget.code is ErrorCode.UNAUTHORIZED else budget
            return console.render(request, session, "sign_in.html", status=refusal.http_status, error=refusal)
        console.sessions.close(session.id)
        fresh = console.sessions.open(key_id=key_id, signed_in=True)
        response = console.redirect(f"{PREFIX}/")
        console.set_cookie(response, request, fresh)
        return response

    async def sign_out(request: Request, session: Session, form: dict[str, str]) -> Response:
        console.sessions.close(session.id)
        response = console.redirect(f"{PREFIX}/sign-in" if console.keys is not None else f"{PREFIX}/")
        response.delete_cookie("cerememory_console", path=PREFIX)
        return response

    async def overview(request: Request, session: Session | None) -> Response:
        stats = await console.call(session, "introspect.stats", {})
        fading = await console.call(session, "introspect.fading", {"limit": 10})
        histograms = {h.store.value: plots.histogram(h.counts, label=f"fidelity of {h.store.value} records")
                      for h in fading.fidelity_histograms}
        return console.render(request, session, "overview.html", stats=stats, fading=fading,
                              histograms=histograms, stores=[s.value for s in ALL_STORES],
                              notice=request.query_params.get("notice"))

    async def recent(request: Request, session: Session | None) -> Response:
        """The overview's recent memories, a panel of its own (htmx loads it after the page)."""
        found = await console.call(session, "recall.query", {"limit": 10, "reconsolidate": False})
        template = "recent.html" if request.headers.get("hx-request") else "recent_page.html"
        return console.render(request, session, template, recent=found)

    async def search(request: Request, session: Session | None) -> Response:
        q = request.query_params
        text, store, mode = q.get("q", "").strip(), q.get("store", ""), q.get("mode", "human")
        days = TIME_FILTERS.get(q.get("days", ""))
        limit = _int(q.get("limit"), SEARCH_LIMITS[0], SEARCH_LIMITS)
        result = None
        if text or "q" in q:
            request_body: dict[str, Any] = {"cue": {"text": text or None}, "limit": limit, "reconsolidate": False,
                                            "recall_mode": "perfect" if mode == "perfect" else "human"}
            if store:
                request_body["stores"] = [store]
            if days:
                now = datetime.now(UTC)
                request_body["cue"]["temporal"] = {"start": (now - timedelta(days=days)).isoformat(),
                                                   "end": now.isoformat()}
            result = await console.call(session, "recall.query", request_body)
        template = "search_results.html" if request.headers.get("hx-request") else "search.html"
        return console.render(request, session, template, result=result, q=text, store=store, mode=mode,
                              days=q.get("days", ""), limit=limit, limits=SEARCH_LIMITS,
                              stores=[s.value for s in ALL_STORES], more=limit < SEARCH_LIMITS[-1])

    async def store_page(request: Request, session: Session | None) -> Response:
        store = request.path_params["store"]
        cursor = request.query_params.get("cursor") or None
        listed = await console.call(session, "recall.list", {
            "store": store, "cursor": cursor, "limit": PAGE_SIZE, "fields": ["text"]})
        return console.render(request, session, "store.html", store=store, listed=listed)

    async def record(request: Request, session: Session | None) -> Response:
        record_id = _record_id(request)
        rec = await console.call(session, "introspect.record", {"record_id": record_id,
                                                                 "include_associations": True})
        curve, forecast = await _curve(console, session, record_id, rec.last_accessed_at.timestamp())
        graph = None
        around = await console.call(session, "recall.graph", {"center_id": record_id, "depth": 2,
                                                               "limit_nodes": GRAPH_NODES})
        if around.edges:  # links either way, which `associations` (outgoing only) may not show
            graph = plots.neighbourhood(record_id, [(str(n.id), n.summary or str(n.id)) for n in around.nodes],
                                        [(str(e.source), str(e.target), e.edge_type.value) for e in around.edges])
        return console.render(request, session, "record.html", record=rec, curve=curve, forecast=forecast,
                              movable=MOVABLE_STORES, notice=request.query_params.get("notice"),
                              dreamed=_dreamed(rec.metadata), graph=graph)

    async def reinforce(request: Request, session: Session, form: dict[str, str]) -> Response:
        record_id = _record_id(request)
        await console.call(session, "lifecycle.reinforce", {"record_ids": [record_id]})
        return console.redirect(f"{PREFIX}/record/{record_id}?notice=reinforced")

    async def change_store(request: Request, session: Session, form: dict[str, str]) -> Response:
        record_id = _record_id(request)
        store = form.get("store", "")
        if store not in MOVABLE_STORES:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{store!r} is not a store a record can move to",
                           hint="choose one of " + ", ".join(MOVABLE_STORES))
        await console.call(session, "encode.update", {"record_id": record_id, "store": store})
        return console.redirect(f"{PREFIX}/record/{record_id}?notice=moved")

    async def forget_form(request: Request, session: Session | None) -> Response:
        record_id = _record_id(request)
        rec = await console.call(session, "introspect.record", {"record_id": record_id})
        return console.render(request, session, "forget.html", record=rec)

    async def forget(request: Request, session: Session, form: dict[str, str]) -> Response:
        record_id = _record_id(request)
        if form.get("confirm") != "yes":
            raise CMPError(ErrorCode.FORGET_UNCONFIRMED, "forgetting needs a confirmation",
                           hint="tick the box that says you mean it")
        await console.call(session, "lifecycle.forget", {"record_ids": [record_id], "confirm": True})
        return console.redirect(f"{PREFIX}/?notice=forgotten")

    async def journal(request: Request, session: Session | None) -> Response:
        """Sessions grouped by agent and workspace; or one session's turns in order with the dream
        summaries made from them; or the turns matching words, or those a memory was made from."""
        q = request.query_params
        words, session_id, derived = q.get("q", "").strip(), q.get("session", ""), q.get("derived", "")
        if not (words or session_id or derived):
            return await _sessions_page(console, request, session)
        body: dict[str, Any] = {"limit": PAGE_SIZE}
        if session_id:
            body["session_id"] = session_id
        if words:
            body["query"] = words
        if derived:
            body["derived_memory_id"] = _uuid(derived)
        if q.get("before"):
            body["temporal"] = {"start": "1970-01-01T00:00:00Z", "end": q["before"]}
        found = await console.call(session, "recall.raw_query", body)
        earlier = None
        if len(found.records) == PAGE_SIZE and not words:
            earlier = (found.records[0].created_at - timedelta(microseconds=1)).isoformat()
        summaries = await _summaries(console, session, found.records)
        return console.render(request, session, "journal.html", found=found, session_id=session_id,
                              q=words, derived=derived, earlier=earlier, summaries=summaries)

    async def audit(request: Request, session: Session | None) -> Response:
        q = request.query_params
        body: dict[str, Any] = {"limit": PAGE_SIZE, "verify": q.get("verify") == "1"}
        if q.get("op"):
            body["op"] = q["op"]
        if q.get("before", "").isdigit():
            body["before_seq"] = int(q["before"])
        log = await console.call(session, "introspect.audit", body)
        return console.render(request, session, "audit.html", log=log, op=q.get("op", ""),
                              operations=sorted(OPERATIONS), verify=body["verify"])

    async def playbook(request: Request, session: Session | None) -> Response:
        """`cm`'s playbook rules (procedural records with `metadata.cm_kind = "bullet"`, docs/cm.md),
        most mature and best scored first, with their feedback; and the trauma registry."""
        records: list[Any] = []
        cursor: str | None = None
        while len(records) < PLAYBOOK_CAP:
            listed = await console.call(session, "recall.list", {
                "store": "procedural", "metadata": {"cm_kind": "bullet"}, "limit": PLAYBOOK_CAP,
                "cursor": cursor, "fields": ["text", "metadata"]})
            records.extend(listed.records)
            cursor = listed.next_cursor
            if cursor is None:
                break
        rules = playbook_rules(records)
        page_no = _int(request.query_params.get("page"), 1, tuple(range(1, len(rules) // PAGE_SIZE + 2)))
        shown = rules[(page_no - 1) * PAGE_SIZE:page_no * PAGE_SIZE]
        return console.render(request, session, "playbook.html", rules=shown, total=len(rules), page_no=page_no,
                              more=page_no * PAGE_SIZE < len(rules), truncated=cursor is not None,
                              traumas=trauma_registry())

    async def evolution(request: Request, session: Session | None) -> Response:
        """Dreams, consolidation and evolution: what ran (from the audit log, which records every
        run with its counts, the scheduler's too) and the parameters tuned since."""
        evolved = await console.call(session, "introspect.evolution", {})
        stats = await console.call(session, "introspect.stats", {})
        runs = {op: await _runs(console, session, op) for op in RUN_OPERATIONS}
        return console.render(request, session, "evolution.html", evolution=evolved, stats=stats, runs=runs,
                              run_limit=RUN_LIMIT)

    app.add_route("/", root, methods=["GET"], include_in_schema=False)
    app.add_route(PREFIX, root, methods=["GET"], include_in_schema=False)
    routes: list[tuple[str, Any, str]] = [
        ("/", page(overview), "GET"),
        ("/sign-in", sign_in_form, "GET"),
        ("/sign-in", action(sign_in, signed_in=False), "POST"),
        ("/sign-out", action(sign_out), "POST"),
        ("/recent", page(recent), "GET"),
        ("/search", page(search), "GET"),
        ("/store/{store}", page(store_page), "GET"),
        ("/record/{record_id}", page(record), "GET"),
        ("/record/{record_id}/forget", page(forget_form), "GET"),
        ("/record/{record_id}/forget", action(forget), "POST"),
        ("/record/{record_id}/reinforce", action(reinforce), "POST"),
        ("/record/{record_id}/store", action(change_store), "POST"),
        ("/journal", page(journal), "GET"),
        ("/evolution", page(evolution), "GET"),
        ("/audit", page(audit), "GET"),
        ("/playbook", page(playbook), "GET"),
    ]
    for path, endpoint, method in routes:
        app.add_route(PREFIX + path, endpoint, methods=[method], include_in_schema=False)


async def _curve(console: Console, session: Session | None, record_id: str,
                 since: float) -> tuple[Any, Any]:
    """The fidelity curve from the last reinforcement to now, and the forecast ahead to past the
    crossing (at most two years), from `introspect.decay_forecast` at each instant."""
    now = datetime.now(UTC)

    async def at(t: float) -> Any:
        answer = await console.call(session, "introspect.decay_forecast", {
            "record_ids": [record_id], "forecast_at": datetime.fromtimestamp(t, UTC).isoformat()})
        return answer.forecasts[0]

    first = await at(now.timestamp())
    crossing = first.estimated_threshold_date
    horizon = now.timestamp() + 30 * DAY
    if crossing is not None:
        horizon = max(horizon, min(crossing.timestamp() * 1.0 + (crossing.timestamp() - since) * 0.2,
                                   now.timestamp() + 730 * DAY))
    threshold = (await at(crossing.timestamp())).forecasted_fidelity if crossing is not None else 0.0
    start = min(since, now.timestamp())
    past = [(t, (await at(t)).forecasted_fidelity)
            for t in _steps(start, now.timestamp(), CURVE_POINTS // 2)]
    ahead = [(t, (await at(t)).forecasted_fidelity) for t in _steps(now.timestamp(), horizon, CURVE_POINTS)]
    svg = plots.fidelity_curve(past, ahead, now=now.timestamp(), threshold=threshold, forgotten_at=crossing)
    return svg, first


async def _sessions_page(console: Console, request: Request, session: Session | None) -> Response:
    q = request.query_params
    body: dict[str, Any] = {"limit": PAGE_SIZE, "cursor": q.get("cursor") or None}
    for name in ("agent", "workspace"):
        if q.get(name, "").strip():
            body[name] = q[name].strip()
    listed = await console.call(session, "recall.sessions", body)
    groups: dict[tuple[str, str], list[Any]] = {}
    for item in listed.sessions:
        groups.setdefault((item.agent or "", item.workspace or ""), []).append(item)
    return console.render(request, session, "sessions.html", listed=listed, groups=sorted(groups.items()),
                          agent=body.get("agent", ""), workspace=body.get("workspace", ""))


async def _summaries(console: Console, session: Session | None, records: Any) -> list[Any]:
    """The dream summaries and facts made from `records`, each once, in the order first met."""
    ids = list(dict.fromkeys(str(d) for r in records for d in r.derived_memory_ids))[:SUMMARY_LIMIT]
    found = []
    for record_id in ids:
        try:
            found.append(await console.call(session, "introspect.record", {"record_id": record_id}))
        except CMPError as exc:  # forgotten since: the backlink outlived it
            if exc.code is not ErrorCode.RECORD_NOT_FOUND:
                raise
    return found


async def _runs(console: Console, session: Session | None, op: str) -> list[Any]:
    """The latest runs of `op`, finished or failed (not the intent entries written before a change)."""
    log = await console.call(session, "introspect.audit", {"op": op, "limit": RUN_LIMIT * 4})
    return [e for e in log.entries if e.phase != "intent"][:RUN_LIMIT]


def _dreamed(metadata: Any) -> bool:
    """Whether a dream made the record: its metadata names the journal turns (dream/sources.py)."""
    origin = metadata.get("_origin") if isinstance(metadata, dict) else None
    return isinstance(origin, dict) and bool(origin.get("raw_record_ids"))


def _steps(start: float, end: float, n: int) -> list[float]:
    if end <= start:
        return [start]
    return [start + (end - start) * i / n for i in range(n + 1)]
