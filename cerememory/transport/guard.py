"""What a browser could forge: the Host, Origin and Content-Type checks every HTTP request passes.

A web page the user visits can send requests to a server on loopback. It cannot read the answers
of a cross-origin request, but it can *send* a `text/plain` POST (no CORS preflight), so a write
or a wipe would succeed; and a page on a hostname that its owner re-points at 127.0.0.1 (DNS
rebinding) becomes same-origin and can read everything. Three checks close both:

- **Host** must name this server: a loopback name when it binds loopback, the bound address, or
  a name in `http.allowed_hosts`. A rebound page sends its own hostname and is refused (421).
- **Origin**, when a browser sends one, must be this server's own origin or be listed in
  `http.allowed_origins` (403). Clients that are not browsers send no Origin.
- A request that carries a body must say `Content-Type: application/json` (415), so no form or
  `text/plain` POST is ever parsed; only the web console's routes take url-encoded forms, and
  each of them checks a CSRF token (cerememory/console/security.py).

Nothing here depends on a key: a keyed server is checked the same way.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..cmp.errors import CMPError, ErrorCode

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
BODYLESS_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ANY = "*"


def _host_name(authority: str) -> str:
    """`Host` header value -> the lower-cased name without port or IPv6 brackets."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].split("]", 1)[0]
    if authority.count(":") == 1:
        return authority.rsplit(":", 1)[0]
    return authority  # a bare name, or an unbracketed IPv6 address


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def refuse_plaintext_key(url: str, api_key: str | None, *, insecure: bool = False) -> None:
    """Never send an API key in plaintext to another machine: an http:// URL whose host is not
    loopback is refused when a key would travel, unless the caller says `insecure` explicitly
    (a network it trusts)."""
    parts = urlsplit(url)
    if api_key and not insecure and parts.scheme == "http" and parts.hostname and not is_loopback(parts.hostname):
        raise CMPError(ErrorCode.VALIDATION_ERROR,
                       f"refusing to send the API key in plaintext to {parts.hostname}",
                       hint="use an https:// URL (gRPC: TLS), reach the server over loopback (e.g. an SSH "
                            "tunnel), or pass --insecure (insecure=True in Python) on a network you trust")


def is_loopback(host: str) -> bool:
    """Whether a host *name as written* (a URL's host, say) is loopback; no DNS is asked."""
    return host == "localhost" or is_loopback_address(host)


def is_loopback_address(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def is_wildcard(address: str) -> bool:
    return address in ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class HostPolicy:
    """The names this server answers to and the browser origins it accepts."""

    names: frozenset[str]
    port: int | None  # None: not known (an app not started by `serve`), any port of an allowed host
    any_address: bool = False  # bound to every interface: any IP literal names this machine
    any_host: bool = False  # `http.allowed_hosts = "*"`: the check is off
    origins: frozenset[str] = frozenset()
    any_origin: bool = False

    @classmethod
    def for_bind(cls, host: str, port: int | None, addresses: Iterable[str] = (), *,
                 allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()) -> HostPolicy:
        """The policy of a server bound to `host` (which resolved to `addresses`)."""
        extra_hosts = {h.strip().lower() for h in allowed_hosts if h.strip()}
        extra_origins = {o.strip().lower().rstrip("/") for o in allowed_origins if o.strip()}
        names = {_host_name(host)} | {a.lower() for a in addresses} | extra_hosts
        names.discard("")
        if not addresses or any(is_loopback_address(a) or is_wildcard(a) for a in addresses):
            names |= LOOPBACK_NAMES  # a listener on every interface is reached over loopback too
        return cls(names=frozenset(names - {ANY}), port=port,
                   any_address=is_wildcard(host) or any(is_wildcard(a) for a in addresses),
                   any_host=ANY in extra_hosts, origins=frozenset(extra_origins - {ANY}),
                   any_origin=ANY in extra_origins)

    def allows_host(self, authority: str | None) -> bool:
        if self.any_host or not authority:  # HTTP/1.0 clients may send no Host; browsers always do
            return True
        name = _host_name(authority)
        return name in self.names or (self.any_address and _is_ip(name))

    def allows_origin(self, origin: str | None) -> bool:
        if origin is None or self.any_origin:
            return True
        origin = origin.strip().lower().rstrip("/")
        if origin in self.origins:
            return True
        parts = urlsplit(origin)
        try:
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            return False
        return (parts.scheme in ("http", "https") and self.port in (None, port) and bool(parts.hostname)
                and self.allows_host(f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname))

    def check(self, method: str, headers: dict[bytes, bytes], *, forms: bool = False) -> CMPError | None:
        """The error to answer instead of serving the request, or None when it may go ahead;
        `forms`: the route takes url-encoded forms too (the console's)."""
        host = headers.get(b"host", b"").decode("latin-1") or None
        if not self.allows_host(host):
            return CMPError(ErrorCode.HOST_NOT_ALLOWED, f"this server does not answer to the host {host!r}",
                            hint="reach it by the address it binds (e.g. 127.0.0.1 or localhost), "
                                 "or add the name to http.allowed_hosts",
                            details={"host": host})
        origin = headers.get(b"origin", b"").decode("latin-1") or None
        if not self.allows_origin(origin):
            return CMPError(ErrorCode.ORIGIN_NOT_ALLOWED, f"requests from the web origin {origin!r} are refused",
                            hint="a web page may call this server only from its own origin; "
                                 "list trusted origins in http.allowed_origins",
                            details={"origin": origin})
        if method not in BODYLESS_METHODS and _has_body(headers) and not _is_json(headers) \
                and not (forms and _is_form(headers)):
            given = headers.get(b"content-type", b"").decode("latin-1") or None
            return CMPError(ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                            f"request bodies must be JSON, not {given or 'untyped'}",
                            hint="send the header `Content-Type: application/json` (curl: --json)",
                            details={"content_type": given})
        return None


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length", b"").strip()
    return b"content-type" in headers or b"transfer-encoding" in headers or (bool(length) and length != b"0")


def _media(headers: dict[bytes, bytes]) -> bytes:
    return headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()


def _is_json(headers: dict[bytes, bytes]) -> bool:
    media = _media(headers)
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _is_form(headers: dict[bytes, bytes]) -> bool:
    return _media(headers) == b"application/x-www-form-urlencoded"


LOOPBACK = HostPolicy.for_bind("127.0.0.1", None, ["127.0.0.1"])
