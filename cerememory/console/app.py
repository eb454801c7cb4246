"""The console's routes: sign-in, the pages (views.py), the actions, and the static files.

Every page runs CMP operations through the serving process's `Dispatcher`, bound to the call
context of the signed-in key (transport `console`), so the audit log names who forgot what.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..cmp.context import bound, current
from ..cmp.errors import CMPError, ErrorCode
from ..transport.bodies import read_within
from . import plots, security
from .sessions import COOKIE, Session, Sessions

PREFIX = "/ui"
FORM_LIMIT = 64 * 1024

Handler = Callable[[Request], Awaitable[Response]]


class Dispatch(Protocol):
    def call(self, name: str, request: dict[str, Any] | BaseModel | None = None) -> BaseModel: ...


class Keys(Protocol):
    def identify_authorization(self, header: str | None) -> str | None: ...
    def active_ids(self) -> set[str]: ...


class Refusals(Protocol):
    def address(self, peer: str | None, forwarded_for: str | None) -> str: ...
    def refuse(self, address: str) -> CMPError: ...


def environment() -> Environment:
    env = Environment(loader=PackageLoader("cerememory.console", "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.globals["trace"] = plots.activation_path
    return env


class Console:
    """The console over one dispatcher; `keys` None: the server is open, nobody signs in."""

    def __init__(self, dispatcher: Dispatch, keys: Keys | None, *, auth_failures: Refusals | None = None,
                 sessions: Sessions | None = None) -> None:
        self.dispatcher = dispatcher
        self.keys = keys
        self.auth_failures = auth_failures
        self.sessions = sessions or Sessions()
        self.templates = environment()

    # ------------------------------------------------------------ sessions

    def session(self, request: Request) -> Session | None:
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is not None and session.signed_in and self.keys is not None \
                and session.key_id not in self.keys.active_ids():
            self.sessions.close(session.id)  # its key was revoked: signed out at once
            return None
        return session

    def signed_in(self, session: Session | None) -> bool:
        return self.keys is None or (session is not None and session.signed_in)

    @staticmethod
    def set_cookie(response: Response, request: Request, session: Session) -> None:
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", path=PREFIX,
                            secure=request.url.scheme == "https", max_age=int(12 * 3600))

    # ------------------------------------------------------------ CMP

    async def call(self, session: Session | None, name: str, request: dict[str, Any]) -> Any:
        key_id = session.key_id if session is not None else None
        with bound(transport="console", key_id=key_id, request_id=current().request_id):
            return await run_in_threadpool(self.dispatcher.call, name, request)

    # ------------------------------------------------------------ rendering

    def render(self, request: Request, session: Session | None, template: str, status: int = 200,
               **context: Any) -> HTMLResponse:
        fresh = session is None
        if session is None:
            session = self.sessions.open(key_id=None, signed_in=False)
        page = self.templates.get_template(template).render(
            csrf=session.csrf, keyed=self.keys is not None, signed_in=self.signed_in(session),
            path=request.url.path, **context)
        response = HTMLResponse(page, status_code=status, headers=security.headers())
        if fresh:
            self.set_cookie(response, request, session)
        return response

    def error(self, request: Request, session: Session | None, exc: CMPError) -> HTMLResponse:
        return self.render(request, session, "error.html", status=exc.http_status, error=exc)

    @staticmethod
    def redirect(to: str) -> RedirectResponse:
        return RedirectResponse(to, status_code=303, headers=security.headers())

    # ------------------------------------------------------------ guards

    def page(self, handler: Callable[[Request, Session | None], Awaitable[Response]]) -> Handler:
        """A page: signed in (or an open server), CMP errors rendered as an error page."""

        async def endpoint(request: Request) -> Response:
            session = self.session(request)
            if not self.signed_in(session):
                return self.redirect(f"{PREFIX}/sign-in")
            try:
                return await handler(request, session)
            except CMPError as exc:
                return self.error(request, session, exc)

        return endpoint

    def action(self, handler: Callable[[Request, Session, dict[str, str]], Awaitable[Response]], *,
               signed_in: bool = True) -> Handler:
        """A POST form: from this site, with the session's CSRF token; signed in unless the
        action is signing in."""

        async def endpoint(request: Request) -> Response:
            session = self.session(request)
            form = await read_form(request)
            if security.cross_site(request.headers) or session is None \
                    or not session.csrf_matches(form.get("csrf")):
                refused = CMPError(ErrorCode.ORIGIN_NOT_ALLOWED,
                                   "this action is missing its CSRF token or came from another site",
                                   hint="reload the console page and submit the form again")
                return self.error(request, session, refused)
            if signed_in and not self.signed_in(session):
                return self.redirect(f"{PREFIX}/sign-in")
            try:
                return await handler(request, session, form)
            except CMPError as exc:
                return self.error(request, session, exc)

        return endpoint


async def read_form(request: Request) -> dict[str, str]:
    """A url-encoded form body (the console's forms post nothing else); the last of repeated fields."""
    raw = await read_within(request, FORM_LIMIT)
    if raw is None:
        return {}
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        return {}
    parsed = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[-1] for key, values in parsed.items()}
