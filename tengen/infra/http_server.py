"""The loop's HTTP servers (the ratings page and API, every service's /healthz and /metrics): the
standard library's threading server with the limits a port reachable by every pod needs, so that
slow or hostile clients cannot stop it.

- Deadlines, not idle timeouts: a request's line and headers must have arrived `header_timeout`
  seconds after the server starts waiting for them (between keep-alive requests too), a body
  `body_timeout` seconds after the handler starts reading it (`read_body`). A client that trickles
  a byte at a time is cut off like a silent one; a stalled body is answered 408.
- At most `max_connections` connections are served at once, each on its own thread. A connection
  past the cap gets no worker: within `OVERFLOW_TIMEOUT` its request line and headers are read,
  a GET or HEAD of one of the handler's `always_answered` paths (its /healthz) is answered as
  usual, anything else gets 503 with Retry-After, and the connection closes. At most
  `max_overflow` such connections are open at once (a thread each for at most that second;
  1,024 by default, so that 500 stalled clients leave room for the probes); past that a new one
  is closed at once.
"""
from __future__ import annotations

import io
import logging
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10.0  # request line and headers, and the idle time between keep-alive requests
BODY_TIMEOUT_S = 30.0  # a request body, from the first read
OVERFLOW_TIMEOUT_S = 1.0  # a connection past the cap: its request line and headers
RETRY_AFTER_S = 5  # what a 503 past the cap tells the client
OVERFLOW_DRAIN_BYTES = 65536  # a body past the cap up to this size is read (and dropped) before the 503


class _DeadlineReader(io.RawIOBase):
    """A socket's reading side that fails with TimeoutError once `deadline` (time.monotonic) has
    passed, however the bytes trickle in: each recv waits at most the time that is left."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline = time.monotonic() + HEADER_TIMEOUT_S

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class GuardedHandler(BaseHTTPRequestHandler):
    """Base of the loop's request handlers: HTTP/1.1 with the deadlines above. Subclasses read a
    body with `read_body(n)` and name the paths answered even past the connection cap."""

    protocol_version = "HTTP/1.1"
    header_timeout: ClassVar[float] = HEADER_TIMEOUT_S
    body_timeout: ClassVar[float] = BODY_TIMEOUT_S
    always_answered: ClassVar[frozenset[str]] = frozenset({"/healthz"})
    overflow: ClassVar[bool] = False  # set on the class that serves connections past the cap

    def setup(self) -> None:
        super().setup()
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.deadline = time.monotonic() + (OVERFLOW_TIMEOUT_S if self.overflow else self.header_timeout)
        super().handle_one_request()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        # Answers are written with the body's timeout whatever the last read left on the socket.
        self.connection.settimeout(self.body_timeout)
        if self.overflow:
            self.close_connection = True
            if self.command not in ("GET", "HEAD") or urlsplit(self.path).path not in self.always_answered:
                self._drain_small_body()
                body = b"busy: too many connections, retry later\n"
                self.send_response(HTTPStatus.SERVICE_UNAVAILABLE)
                self.send_header("Retry-After", str(RETRY_AFTER_S))
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                return False
        return True

    def _drain_small_body(self) -> None:
        """Read a small body before answering without it, so that closing the connection with it
        unread does not reset the answer away (within the overflow deadline, as the headers)."""
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) <= OVERFLOW_DRAIN_BYTES:
            try:
                self.rfile.read(int(length))
            except OSError:  # TimeoutError included: the answer goes out anyway
                pass

    def read_body(self, length: int) -> bytes:
        """`length` bytes of the body, within body_timeout (TimeoutError past it)."""
        self._reader.deadline = time.monotonic() + self.body_timeout
        return self.rfile.read(length)


class GuardedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer serving at most `max_connections` connections at once with a
    GuardedHandler, and connections past that as the module docstring says."""

    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: bursts wait here for the accept loop

    def __init__(self, address: tuple[str, int], handler: type[GuardedHandler], *,
                 max_connections: int = 64, max_overflow: int = 1024) -> None:
        if max_connections < 1 or max_overflow < 1:
            raise ValueError(f"max_connections and max_overflow must be >= 1, got {max_connections}, {max_overflow}")
        self._slots = threading.BoundedSemaphore(max_connections)
        self._overflow_slots = threading.BoundedSemaphore(max_overflow)
        self._handler = handler
        self._overflow_handler = type(f"Overflow{handler.__name__}", (handler,), {"overflow": True})
        self.max_connections = max_connections
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._slots.acquire(blocking=False):
            self._start(request, client_address, self._handler, self._slots)
        elif self._overflow_slots.acquire(blocking=False):
            self._start(request, client_address, self._overflow_handler, self._overflow_slots)
        else:
            log.warning("HTTP port %d: over %d connections and as many waiting for an answer; closing %s",
                        self.server_address[1], self.max_connections, client_address)
            self.shutdown_request(request)

    def _start(self, request: Any, client_address: Any, handler: type[BaseHTTPRequestHandler],
               slots: threading.BoundedSemaphore) -> None:
        thread = threading.Thread(target=self._serve, args=(request, client_address, handler, slots), daemon=True)
        try:
            thread.start()
        except BaseException:
            slots.release()
            self.shutdown_request(request)
            raise

    def _serve(self, request: Any, client_address: Any, handler: type[BaseHTTPRequestHandler],
               slots: threading.BoundedSemaphore) -> None:
        try:
            handler(request, client_address, self)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            slots.release()
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("HTTP client %s: connection failed", client_address, exc_info=True)
