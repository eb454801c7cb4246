"""What every console response carries, and what every console action must show.

Stored memories are untrusted input: the templates escape everything (Jinja2 autoescape), and
the Content-Security-Policy allows scripts only from the console's own files, so a memory that
holds `<script>` is text even if an escape were missed. Actions are POST forms carrying the
session's CSRF token; a browser's `Sec-Fetch-Site` must say the request came from this site.
The transport's guard has already refused foreign Host and Origin headers (transport/guard.py).
"""

from __future__ import annotations

from collections.abc import Mapping

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
# Swagger UI and ReDoc set style attributes and ReDoc runs a worker from a blob.
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'")
SAME_SITE = frozenset({"same-origin", "none"})


def headers(csp: str = CSP) -> dict[str, str]:
    return {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "Cache-Control": "no-store",
    }


def cross_site(request_headers: Mapping[str, str]) -> bool:
    """Whether a browser says the request came from another site (`Sec-Fetch-Site`)."""
    site = request_headers.get("sec-fetch-site")
    return site is not None and site not in SAME_SITE
