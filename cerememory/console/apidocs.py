"""`/docs` (Swagger UI) and `/redoc` (ReDoc) from files shipped in the package, so the
interactive API docs work with no internet. Their scripts are files, not inline code, so even
these pages run under a Content-Security-Policy."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from . import security
from .app import environment


def install(app: Starlette) -> None:
    templates = environment()

    def page(template: str) -> HTMLResponse:
        return HTMLResponse(templates.get_template(template).render(),
                            headers=security.headers(security.DOCS_CSP))

    async def swagger(request: Request) -> Response:
        return page("swagger.html")

    async def redoc(request: Request) -> Response:
        return page("redoc.html")

    app.add_route("/docs", swagger, methods=["GET"], include_in_schema=False)
    app.add_route("/redoc", redoc, methods=["GET"], include_in_schema=False)
