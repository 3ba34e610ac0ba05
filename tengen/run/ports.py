"""Port choice for the servers of a local run: the configured port when it is free, else any free
one, so a second run (or a test) on the same machine does not collide with the first."""
from __future__ import annotations

import socket

from tengen.infra.broker import free_port


def port_is_free(port: int, host: str = "0.0.0.0") -> bool:
    """True when nothing listens on `port` (binding on all addresses also catches 127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class PortPicker:
    """Hands out ports for one run: the preferred one when free, else a free one; never the same
    port twice (the children bind them only later)."""

    def __init__(self) -> None:
        self._given: set[int] = set()

    def pick(self, preferred: int | None = None) -> int:
        if preferred and preferred not in self._given and port_is_free(preferred):
            port = preferred
        else:
            port = free_port()
            while port in self._given:
                port = free_port()
        self._given.add(port)
        return port
