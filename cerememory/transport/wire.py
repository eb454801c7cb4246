"""One HTTP/1.1 keep-alive connection on a socket: what the light client needs of HTTP and no more.

The standard library's `http.client` loads the `email` package to parse headers and `ssl` even
for a plain http:// URL; in a command that lives a quarter of a second that is a sixth of its
start. A CMP exchange needs a request line, a few headers and a JSON body, and an answer framed
by Content-Length or chunks. TLS (and so the `ssl` module) only for https://, verified against the
system's trust store (`SSL_CERT_FILE` and `SSL_CERT_DIR` apply) and the URL's host name.
"""

from __future__ import annotations

import socket
from typing import cast

MAX_HEAD = 64 * 1024  # status line and headers of one answer
_CHUNK = 64 * 1024


class Disconnected(ConnectionError):
    """The server closed the connection before any byte of an answer: a kept-alive connection
    the server dropped while idle, so the request can be sent again on a new one."""


class BadAnswer(OSError):
    """The server's bytes are not an HTTP/1.1 answer (or it closed the connection mid-answer)."""


class Connection:
    """Requests in order over one connection, opened on first use and again after a close."""

    def __init__(self, host: str, port: int | None, *, tls: bool = False, timeout: float | None = None) -> None:
        self.host, self.tls, self.timeout = host, tls, timeout
        self.port = port or (443 if tls else 80)
        name = f"[{host}]" if ":" in host else host
        self.authority = name if port is None else f"{name}:{port}"
        self.sock: socket.socket | None = None
        self._buffer = b""

    def set_timeout(self, seconds: float | None) -> None:
        self.timeout = seconds
        if self.sock is not None:
            self.sock.settimeout(seconds)

    def exchange(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> tuple[int, bytes]:
        """(status, body) of one request; raises OSError (`Disconnected`, `BadAnswer`, a timeout,
        a refused connection, a certificate the system does not trust) and closes the
        connection when the exchange fails."""
        try:
            sock = self.sock or self._connect()
            head = [f"{method} {target} HTTP/1.1", f"host: {self.authority}",
                    *(f"{name}: {value}" for name, value in headers.items())]
            if body is not None:
                head.append(f"content-length: {len(body)}")
            sock.sendall("\r\n".join(head).encode("latin-1") + b"\r\n\r\n" + (body or b""))
            status, data, keep = self._answer(method)
        except BaseException:
            self.close()
            raise
        if not keep:
            self.close()
        return status, data

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self._buffer = None, b""

    def _connect(self) -> socket.socket:
        # An ASCII name goes to the resolver as bytes: as str it is IDNA-encoded first, and the
        # codec's import alone costs a short command more than its connection.
        # (The resolver takes bytes; typeshed names only str.)
        address = cast(str, self.host.encode("ascii")) if self.host.isascii() else self.host
        sock = socket.create_connection((address, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            import ssl

            context = ssl.create_default_context()
            context.set_alpn_protocols(["http/1.1"])
            sock = context.wrap_socket(sock, server_hostname=self.host)
        self.sock = sock
        return sock

    def _answer(self, method: str) -> tuple[int, bytes, bool]:
        """(status, body, whether the connection stays open) of the next answer, skipping 1xx."""
        while True:
            lines = self._read_until(b"\r\n\r\n", MAX_HEAD, first=True).decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise BadAnswer(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            status = int(code)
            if 100 <= status < 200:
                continue
            keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            if method == "HEAD" or status in (204, 304):
                return status, b"", keep
            if "chunked" in headers.get("transfer-encoding", "").lower():
                return status, self._chunked(), keep
            if "content-length" in headers:
                try:
                    length = int(headers["content-length"])
                except ValueError:
                    raise BadAnswer(f"bad content-length: {headers['content-length']!r}") from None
                return status, self._read_exact(length), keep
            return status, self._read_to_close(), False

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_line = self._read_until(b"\r\n", MAX_HEAD).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise BadAnswer(f"bad chunk size: {size_line[:20]!r}") from None
            if size == 0:
                while self._read_until(b"\r\n", MAX_HEAD):  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(self._read_exact(size))
            self._read_exact(2)

    def _recv(self) -> bytes:
        assert self.sock is not None
        return self.sock.recv(_CHUNK)

    def _read_until(self, mark: bytes, limit: int, *, first: bool = False) -> bytes:
        """Bytes up to `mark` (consumed, not returned)."""
        while (end := self._buffer.find(mark)) < 0:
            if len(self._buffer) > limit:
                raise BadAnswer("answer head too long")
            data = self._recv()
            if not data:
                if first and not self._buffer:
                    raise Disconnected("the server closed the connection without answering")
                raise BadAnswer("the server closed the connection mid-answer")
            self._buffer += data
        found, self._buffer = self._buffer[:end], self._buffer[end + len(mark):]
        return found

    def _read_exact(self, size: int) -> bytes:
        parts, have = [self._buffer], len(self._buffer)
        while have < size:
            data = self._recv()
            if not data:
                raise BadAnswer("the server closed the connection mid-answer")
            parts.append(data)
            have += len(data)
        joined = b"".join(parts)
        self._buffer = joined[size:]
        return joined[:size]

    def _read_to_close(self) -> bytes:
        parts = [self._buffer]
        while data := self._recv():
            parts.append(data)
        self._buffer = b""
        return b"".join(parts)
