"""A service's HTTP side: `/healthz` and Prometheus `/metrics` on one port, in a daemon thread,
with tengen.infra.http_server's deadlines and connection cap (/healthz answered past it)."""
from __future__ import annotations

import logging
import threading
from http import HTTPStatus
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from tengen.infra.http_server import GuardedHandler, GuardedHTTPServer

log = logging.getLogger(__name__)

# health() -> (healthy, one line saying what the service is doing)
HealthCheck = Callable[[], tuple[bool, str]]

MAX_CONNECTIONS = 16  # Prometheus, probes and a person with curl; the rest wait for a deadline or get 503


class HealthServer:
    """Serves `/healthz` (200 with the health line, 503 when unhealthy) and `/metrics` (the
    registry in Prometheus' text format). `port=0` takes any free port; `.port` says which."""

    def __init__(self, port: int, registry: CollectorRegistry, health: HealthCheck, *,
                 name: str = "service", host: str = "0.0.0.0") -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"HTTP port must be within 0..65535, got {port}")
        self.name = name
        server = self

        class Handler(GuardedHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path == "/healthz":
                    ok, line = health()
                    self._send(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE,
                               f"{line}\n".encode(), "text/plain; charset=utf-8")
                elif self.path == "/metrics":
                    self._send(HTTPStatus.OK, generate_latest(registry), CONTENT_TYPE_LATEST)
                else:
                    self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

            def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                log.debug("%s http: " + format, server.name, *args)

        self._http = GuardedHTTPServer((host, port), Handler, max_connections=MAX_CONNECTIONS)
        self.port: int = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, name=f"{name}-http", daemon=True)
        self._thread.start()
        log.info("%s: /healthz and /metrics on port %d", name, self.port)

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5.0)
