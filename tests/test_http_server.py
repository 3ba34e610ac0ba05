"""tengen.infra.http_server: the deadlines and the connection cap that every HTTP port of the loop
has (the ratings service's are tested in tests/test_ratings_service.py)."""
from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus

from prometheus_client import CollectorRegistry, Counter

from tengen.infra import health
from tengen.infra.health import HealthServer
from tengen.infra.http_server import GuardedHandler, GuardedHTTPServer


def _get(port: int, path: str, timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _read_to_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@contextmanager
def _stalled(port: int, n: int) -> Iterator[list[socket.socket]]:
    """n connections that each send half a request line and then nothing."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"GET /heal")
            socks.append(sock)
        time.sleep(0.3)  # let the accept loop take them all
        yield socks
    finally:
        for sock in socks:
            sock.close()


def test_a_service_answers_healthz_past_its_connection_cap() -> None:
    registry = CollectorRegistry()
    Counter("probe_things", "things", registry=registry).inc(3)
    server = HealthServer(0, registry, lambda: (True, "selfplay: 12 games"), name="probe", host="127.0.0.1")
    try:
        assert _get(server.port, "/healthz")[::2] == (200, b"selfplay: 12 games\n")
        with _stalled(server.port, 3 * health.MAX_CONNECTIONS):
            # Every worker is held by a stalled client: /healthz is still answered at once (a client
            # timeout of seconds, inside the stalled clients' 10 s deadline); /metrics is refused with
            # a Retry-After instead of waiting.
            assert _get(server.port, "/healthz")[::2] == (200, b"selfplay: 12 games\n")
            status, headers, body = _get(server.port, "/metrics")
            assert status == 503 and headers["Retry-After"] == "5" and b"too many connections" in body
        # The stalled clients gone, /metrics is served again (their workers freed as they close).
        for _ in range(50):
            status, _, body = _get(server.port, "/metrics")
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200 and b"probe_things_total 3.0" in body
    finally:
        server.close()


class _Echo(GuardedHandler):
    header_timeout = 1.0
    body_timeout = 1.0

    def do_GET(self) -> None:  # noqa: N802
        self._answer(b"get\n")

    def do_POST(self) -> None:  # noqa: N802
        try:
            body = self.read_body(int(self.headers["Content-Length"]))
        except TimeoutError:
            self.close_connection = True
            self._answer(b"timeout\n", HTTPStatus.REQUEST_TIMEOUT)
            return
        self._answer(body)

    def _answer(self, body: bytes, status: HTTPStatus = HTTPStatus.OK) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class _PatientEcho(_Echo):
    header_timeout = 30.0


@contextmanager
def _echo_server(max_connections: int, max_overflow: int, handler: type[_Echo] = _Echo) -> Iterator[int]:
    server = GuardedHTTPServer(("127.0.0.1", 0), handler, max_connections=max_connections, max_overflow=max_overflow)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_deadlines_close_idle_trickling_and_stalled_connections() -> None:
    with _echo_server(8, 8) as port:
        # Keep-alive: two requests on one connection, then the idle connection is closed at the
        # header deadline.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = _read_to_eof(sock)
            assert data.count(b"HTTP/1.1 200") == 2 and data.endswith(b"get\n")
        # A body that trickles a byte every 0.2 s (never silent for the 1 s timeout) gets its 408.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            try:
                for _ in range(100):
                    sock.sendall(b"x")
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert _read_to_eof(sock).startswith(b"HTTP/1.1 408")
        # A complete body within the deadline is echoed.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
            assert _read_to_eof(sock).endswith(b"\r\n\r\nhello")


def test_past_the_cap_and_the_overflow_a_connection_is_closed_at_once() -> None:
    with _echo_server(2, 2, _PatientEcho) as port, _stalled(port, 4):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            # Closed without an answer, well before any deadline (the socket's 30 s timeout would fail it).
            assert _read_to_eof(sock) == b""
        # The workers still held, the overflow free again once its two stalled clients reached their
        # 1 s deadline: /healthz is answered, anything else refused.
        time.sleep(1.5)
        assert _get(port, "/healthz")[::2] == (200, b"get\n")
        status, headers, _ = _get(port, "/")
        assert status == 503 and headers["Retry-After"] == "5"
