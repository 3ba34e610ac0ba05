"""A local Triton server from the nvidia-pytriton wheel (CPU only: the Python backend).

Recipe (checked with nvidia-pytriton 0.7.0 = Triton 2.51): copy the
wheel's `pytriton/tritonserver` tree somewhere writable, copy
`python_backend_stubs/<py>/triton_python_backend_stub` into `backends/python/`, put the wheel's
`nvidia_pytriton.libs` on LD_LIBRARY_PATH and this interpreter's bin directory first on PATH (the
stub embeds Python and finds this environment's site-packages through it; numpy must be < 2 there,
otherwise outputs come back empty), then run `bin/tritonserver --model-control-mode=explicit`.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import numpy as np

from tengen.infra.broker import free_port
from tengen.infra.process import dies_with_parent, kill_process, stop_process
from tengen.infra.shm import remove_orphaned_regions
from tengen.infra.triton.errors import TritonError
from tengen.infra.triton.repository import check_model_name

log = logging.getLogger(__name__)


def _pytriton_paths() -> tuple[Path, Path]:
    """(the wheel's tritonserver tree, its bundled shared libraries)."""
    try:
        import pytriton
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise TritonError("the nvidia-pytriton package (Triton server binary) is not installed") from exc
    pkg = Path(pytriton.__file__).resolve().parent
    server = pkg / "tritonserver"
    libs = pkg.parent / "nvidia_pytriton.libs"
    if not (server / "bin" / "tritonserver").is_file():
        raise TritonError(f"no tritonserver binary in {server}")
    return server, libs


def prepare_server_tree(dest: str | os.PathLike[str]) -> Path:
    """Copy the wheel's Triton tree to `dest` with this Python's backend stub; return `dest`."""
    dest = Path(dest)
    marker = dest / ".tengen-ready"
    if marker.is_file():
        return dest
    src, _libs = _pytriton_paths()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = src / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonError(f"the nvidia-pytriton wheel has no Python backend stub for Python {version}")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("python_backend_stubs", "__pycache__"))
    shutil.copy2(stub, dest / "backends" / "python" / "triton_python_backend_stub")
    marker.write_text("ok\n")
    return dest


def server_env() -> dict[str, str]:
    """Environment for tritonserver: the wheel's libraries and this interpreter first on PATH."""
    _src, libs = _pytriton_paths()
    env = os.environ.copy()
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    return env


def _remove_orphaned_regions() -> None:
    """What SIGKILLed Tritons, stubs or clients left in /dev/shm (they cannot unlink it themselves)."""
    orphans = remove_orphaned_regions()
    if orphans:
        log.info("removed %d shared-memory regions left in /dev/shm by killed processes", len(orphans))


class LocalTriton:
    """One tritonserver process (explicit model control) on free HTTP/gRPC/metrics ports."""

    def __init__(
        self,
        repository: str | os.PathLike[str],
        workdir: str | os.PathLike[str],
        *,
        load_models: tuple[str, ...] | list[str] = (),
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.repository = Path(repository).resolve()
        self.workdir = Path(workdir).resolve()
        self.load_models = [check_model_name(m) for m in load_models]
        self.host = host
        self.http_port = http_port or free_port(host)
        self.grpc_port = grpc_port or free_port(host)
        self.metrics_port = metrics_port or free_port(host)
        self.log_path = Path(log_path) if log_path is not None else self.workdir / "tritonserver.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        """The tritonserver process id while it runs (its Python backend stubs are its children)."""
        return self._proc.pid if self.is_running() and self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout_s: float = 180.0) -> "LocalTriton":
        """Start tritonserver and return once it reports ready (models in load_models loaded)."""
        if self.is_running():
            return self
        if int(np.__version__.split(".")[0]) >= 2:
            # The Python backend stub runs in this environment; with numpy 2 it returns empty outputs.
            raise TritonError(f"numpy {np.__version__} in {sys.prefix}: the Triton Python backend needs numpy < 2")
        server = prepare_server_tree(self.workdir / "tritonserver")
        _remove_orphaned_regions()
        cmd = [
            str(server / "bin" / "tritonserver"),
            f"--model-repository={self.repository}",
            "--model-control-mode=explicit",
            *[f"--load-model={m}" for m in self.load_models],
            f"--backend-directory={server / 'backends'}",
            f"--cache-directory={server / 'caches'}",
            f"--http-address={self.host}", f"--http-port={self.http_port}",
            f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            "--strict-readiness=true",
            "--exit-timeout-secs=10",
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        log.info("starting Triton (gRPC %s, HTTP %s) on repository %s", self.grpc_url, self.http_url, self.repository)
        self._proc = subprocess.Popen(
            dies_with_parent(cmd),
            env=server_env(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    code = self._proc.returncode
                    self._proc = None
                    self._close_log()
                    raise TritonError(
                        f"tritonserver exited with code {code} during start; see {self.log_path}:\n{self.log_tail()}"
                    )
                if self.is_ready():
                    log.info("Triton ready (pid %d)", self._proc.pid)
                    return self
                time.sleep(0.2)
        except BaseException:
            # Interrupted while loading (Ctrl-C, SIGTERM unwinding a caller): `with LocalTriton()`
            # never reaches __exit__ when __enter__ fails, so the server and its stubs stop here.
            self.stop()
            raise
        self.stop()
        raise TritonError(f"tritonserver not ready within {timeout_s:.0f} s; see {self.log_path}:\n{self.log_tail()}")

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM (Triton unloads models and exits), then SIGKILL after grace_s."""
        proc = self._proc
        if proc is None:
            return
        # group: its Python backend stubs are in the same session
        stop_process(proc, "tritonserver", grace_s, group=True)
        log.info("Triton stopped (exit code %s)", proc.returncode)
        self._proc = None
        self._close_log()
        _remove_orphaned_regions()

    def kill(self) -> None:
        """SIGKILL the server and its backend stubs at once (to test clients against a crash)."""
        proc = self._proc
        if proc is not None:
            kill_process(proc, group=True)
        self._proc = None
        self._close_log()

    def restart(self, timeout_s: float = 180.0) -> "LocalTriton":
        self.stop()
        return self.start(timeout_s)

    def log_tail(self, n_bytes: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-n_bytes:].decode("utf-8", errors="replace")

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "LocalTriton":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
