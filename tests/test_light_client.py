"""The light client's own HTTP/1.1: against the real server, over TLS, and the framings a server
may choose (chunks, close-delimited bodies, a kept-alive connection dropped while idle)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cerememory.cmp.errors import CMPError, ErrorCode
from cerememory.transport.light import LightClient

from .conftest import clean_env
from .tls import self_signed


def _listen(handle: Callable[[socket.socket], None]) -> tuple[int, socket.socket]:
    """A loopback listener that hands each accepted connection to `handle` on its own thread."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener.getsockname()[1], listener


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    return data


# ---------------------------------------------------------------- the real server, over TLS


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1 (cert file, key file)."""
    cert, key = self_signed()
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    return cert_file, key_file


@pytest.fixture
def tls_front(http_server, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A TLS terminator in front of the real server, as a reverse proxy would be: (https URL, cert)."""
    cert_file, key_file = _certificate(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)

    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            source.close()
            sink.close()

    def handle(raw: socket.socket) -> None:
        try:
            secure = context.wrap_socket(raw, server_side=True)
        except OSError:  # the client did not trust the certificate
            raw.close()
            return
        back = socket.create_connection(("127.0.0.1", http_server.port))
        threading.Thread(target=pump, args=(back, secure), daemon=True).start()
        pump(secure, back)

    port, listener = _listen(handle)
    try:
        yield f"https://localhost:{port}", cert_file
    finally:
        listener.close()


def test_https_is_verified_against_the_trust_store(tls_front, monkeypatch):
    url, cert_file = tls_front
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    with LightClient(url, timeout=10) as client:
        stored = client.dispatch("encode.store", {"content": {"blocks": [{"text": "sealed in transit"}]}})
        found = client.dispatch("recall.query", {"cue": {"text": "sealed in transit"}, "limit": 1})
        assert found["memories"][0]["record"]["id"] == stored["record_id"]
        assert client.health()["status"] == "ok"  # the same connection, kept alive
    monkeypatch.delenv("SSL_CERT_FILE")
    with LightClient(url, timeout=10) as untrusting, pytest.raises(CMPError) as err:
        untrusting.dispatch("introspect.stats")
    assert err.value.code is ErrorCode.SERVER_UNREACHABLE and "CERTIFICATE_VERIFY_FAILED" in err.value.message


def test_a_recall_against_a_server_loads_no_rich_ssl_or_http_client(http_server, tmp_path: Path):
    """The quick path of `cerememory recall`: the standard-library client, plain text out."""
    with LightClient(http_server.url) as client:
        client.dispatch("encode.store", {"content": {"blocks": [{"text": "otters hold hands"}]}})
    script = ("import sys; from cerememory.cli import main; code = main(sys.argv[1:]); "
              "print(sorted(m for m in ('rich', 'ssl', 'http.client', 'email', 'httpx', 'pydantic', "
              "'cerememory.api', 'uuid') if m in sys.modules), file=sys.stderr); sys.exit(code)")
    run = subprocess.run([sys.executable, "-c", script, "recall", "otters", "--server-url", http_server.url],
                         capture_output=True, text=True, env={**clean_env(tmp_path), "COLUMNS": "200"}, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().splitlines()[-1] == "[]"
    assert "1 of 1 memories" in run.stdout and "otters hold hands" in run.stdout
    assert "┃ # ┃ score ┃ store    ┃" in run.stdout and "signals: bm25" in run.stdout


# ---------------------------------------------------------------- framings


def _answering(answers: list[bytes]) -> tuple[str, socket.socket, list[bytes]]:
    """A server that reads each request on a connection and sends the next canned answer; an
    answer of b"" closes the connection after the answer before it. Returns (url, listener,
    requests seen)."""
    seen: list[bytes] = []

    def handle(conn: socket.socket) -> None:
        with conn:
            while answers:
                request = _read_request(conn)
                if not request:
                    return
                seen.append(request)
                answer = answers.pop(0)
                conn.sendall(answer)
                if b"connection: close" in answer:
                    return
                if answers and not answers[0]:
                    answers.pop(0)
                    return

    port, listener = _listen(handle)
    return f"http://127.0.0.1:{port}", listener, seen


def _json(status: str, value: object, *, chunked: bool = False, close: bool = False) -> bytes:
    body = json.dumps(value).encode()
    if chunked:
        head = f"HTTP/1.1 {status}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
        return head + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:3], body[3:])) + b"0\r\n\r\n"
    if close:
        return f"HTTP/1.1 {status}\r\nconnection: close\r\n\r\n".encode() + body
    return f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body


def test_chunked_and_close_delimited_answers_and_a_dropped_keep_alive():
    answers = [b"HTTP/1.1 100 Continue\r\n\r\n" + _json("200 OK", {"status": "ok"}),
               _json("200 OK", {"total_records": 3}, chunked=True),
               b"",  # the server drops the kept-alive connection: the next request goes again on a new one
               _json("200 OK", {"total_records": 4}, close=True),
               _json("404 Not Found", {"code": "RECORD_NOT_FOUND", "message": "no such record"})]
    url, listener, seen = _answering(answers)
    with listener, LightClient(url, api_key="k-1", timeout=10) as client:
        assert client.health() == {"status": "ok"}
        assert client.dispatch("introspect.stats") == {"total_records": 3}
        assert client.dispatch("introspect.stats") == {"total_records": 4}
        with pytest.raises(CMPError) as err:
            client.dispatch("introspect.record", {"record_id": "01890000-0000-7000-8000-000000000000"})
    assert err.value.code is ErrorCode.RECORD_NOT_FOUND
    record = b"/v1/introspect/record/01890000-0000-7000-8000-000000000000"
    assert [r.split(b" ", 2)[:2] for r in seen] == [[b"GET", b"/health"], [b"GET", b"/v1/introspect/stats"],
                                                   [b"GET", b"/v1/introspect/stats"], [b"GET", record]]
    assert all(b"authorization: Bearer k-1\r\n" in r and f"host: {url[7:]}".encode() in r for r in seen)


def test_a_garbled_or_cut_answer_is_unreachable_not_a_crash():
    for answer in (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n{\"to"):
        url, listener, _ = _answering([answer, b""])
        with listener, LightClient(url, timeout=10) as client, pytest.raises(CMPError) as err:
            client.dispatch("introspect.stats")
        assert err.value.code is ErrorCode.SERVER_UNREACHABLE
