"""Triton: a local server from the nvidia-pytriton wheel, the model repository, the hot swap, and
the gRPC evaluator.

Model repository layout (`<repo>/<model>/config.pbtxt`, `<repo>/<model>/<N>/model.pt`): every
version directory holds the TorchScript export as `model.pt` (and its JSON sidecar); for the
Python backend (CPU) it also holds `model.py` from `services/inference/`. The GPU configs serve the
same export: the ONNX Runtime backend (TensorRT fp16, the fast path) from `model.onnx`, converted
from `model.pt` when the version is written, or the PyTorch (libtorch) backend from `model.pt`. Versions are written atomically: a temporary directory
under `<repo>/.staging/` is filled and fsynced, then renamed into place, so Triton never sees a
half-written version. The config uses `version_policy: latest {num_versions: 2}`: after
`load_model`, the previous version keeps serving while the new one loads and warms up.

Recipe for the local server (checked with nvidia-pytriton 0.7.0 = Triton 2.51, CPU only): copy the
wheel's `pytriton/tritonserver` tree somewhere writable, copy
`python_backend_stubs/<py>/triton_python_backend_stub` into `backends/python/`, put the wheel's
`nvidia_pytriton.libs` on LD_LIBRARY_PATH and this interpreter's bin directory first on PATH (the
stub embeds Python and finds this environment's site-packages through it; numpy must be < 2 there,
otherwise outputs come back empty), then run `bin/tritonserver --model-control-mode=explicit`.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import logging
import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

import numpy as np

from tengen.go.planes import MAX_BOARD, MIN_BOARD, NUM_GLOBAL, NUM_SPATIAL
from tengen.infra.broker import free_port
from tengen.infra.files import fsync_dir
from tengen.infra.process import dies_with_parent, kill_process, stop_process
from tengen.infra.shm import ShmRegion, remove_orphaned_regions
from tengen.nn.evaluator import PRECISIONS, RUNTIMES, check_batch
from tengen.nn.export import OUTPUT_NAMES, complete_outputs, export_onnx

log = logging.getLogger(__name__)

# Triton-side files of the inference service (read as data, never imported).
INFERENCE_DIR = Path(__file__).resolve().parents[2] / "services" / "inference"
PYTHON_BACKEND_MODEL = INFERENCE_DIR / "model.py"
CONFIG_TEMPLATES = {
    "python": INFERENCE_DIR / "config.python.pbtxt",
    "pytorch": INFERENCE_DIR / "config.pytorch.pbtxt",
    "onnxruntime": INFERENCE_DIR / "config.onnxruntime.pbtxt",
}
BACKENDS = tuple(CONFIG_TEMPLATES)
EXPORT_FILENAME = "model.pt"
ONNX_FILENAME = "model.onnx"  # the ONNX Runtime backend's default model file name
STAGING_DIR = ".staging"
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class TritonError(RuntimeError):
    """Triton could not be started, reached, or asked to do something."""


class UnknownModelError(TritonError, LookupError):
    """The model (or model version) is not in the repository or not loaded."""


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"bad model name {name!r}: use letters, digits, '_', '.', '-' (not starting with '.' or '-')")
    return name


def render_config(
    name: str,
    backend: str = "python",
    *,
    max_batch_size: int = 256,
    queue_delay_us: int = 200,
    preferred_batch_sizes: Sequence[int] = (),
    instances: int = 1,
    torch_threads: int = 1,
    warmup_board: int = 9,
    warmup_batch: int = 1,
    precision: str = "auto",
    runtime: str = "auto",
) -> str:
    """The model's config.pbtxt from the templates in services/inference/. precision and runtime
    (Python backend only): see tengen.nn.evaluator.PRECISIONS and RUNTIMES."""
    _check_name(name)
    if backend not in CONFIG_TEMPLATES:
        raise ValueError(f"unknown backend {backend!r}; choose one of {sorted(CONFIG_TEMPLATES)}")
    if max_batch_size < 1 or instances < 1 or torch_threads < 0 or queue_delay_us < 0:
        raise ValueError("max_batch_size and instances must be >= 1, torch_threads and queue_delay_us >= 0")
    if not MIN_BOARD <= warmup_board <= MAX_BOARD or not 1 <= warmup_batch <= max_batch_size:
        raise ValueError(f"warmup board {warmup_board} or batch {warmup_batch} out of range")
    if not all(1 <= b <= max_batch_size for b in preferred_batch_sizes):
        raise ValueError(f"preferred batch sizes {list(preferred_batch_sizes)} must be within 1..{max_batch_size}")
    preferred = (f" preferred_batch_size: [ {', '.join(str(b) for b in sorted(set(preferred_batch_sizes)))} ]"
                 if preferred_batch_sizes else "")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    template = string.Template(CONFIG_TEMPLATES[backend].read_text())
    return template.substitute(
        name=name, max_batch_size=max_batch_size, queue_delay_us=queue_delay_us, preferred=preferred, instances=instances,
        torch_threads=torch_threads, warmup_board=warmup_board, warmup_batch=warmup_batch, precision=precision, runtime=runtime,
        num_spatial=NUM_SPATIAL, num_global=NUM_GLOBAL, min_board=MIN_BOARD, max_board=MAX_BOARD,
    )


# -- atomic file system helpers -------------------------------------------------------------------
def _copy_file(src: Path, dst: Path) -> None:
    """Copy and fsync one file."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())


def _write_file_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def version_export_path(root: str | os.PathLike[str], name: str, version: int) -> Path:
    """Where a repository at `root` keeps the export of a model's version (read-only callers
    use this without opening the repository)."""
    return Path(root) / _check_name(name) / str(version) / EXPORT_FILENAME


class ModelRepository:
    """A Triton model repository on a local file system."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def model_dir(self, name: str) -> Path:
        return self.root / _check_name(name)

    def models(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and _NAME_RE.match(p.name) and (p / "config.pbtxt").is_file())

    def has_model(self, name: str) -> bool:
        return (self.model_dir(name) / "config.pbtxt").is_file()

    def create_model(self, name: str, config_text: str) -> Path:
        """Write `<repo>/<name>/config.pbtxt` (atomically). Refuses to change an existing config:
        Triton would reload every version on the next load_model."""
        model_dir = self.model_dir(name)
        config = model_dir / "config.pbtxt"
        if f'name: "{name}"' not in config_text:
            raise ValueError(f"config text does not name model {name!r}")
        if config.is_file():
            if config.read_text() == config_text:
                return model_dir
            raise TritonError(f"model {name} already exists in {self.root} with a different config")
        model_dir.mkdir(parents=True, exist_ok=True)
        _write_file_atomic(config, config_text.encode())
        fsync_dir(self.root)
        return model_dir

    def update_config(self, name: str, config_text: str) -> bool:
        """Replace an existing model's config (atomically) with one of the same backend; True when
        it changed. Triton applies it at the model's next load. A backend change is refused: the
        versions on disk are laid out for the backend they were written for."""
        config = self.model_dir(name) / "config.pbtxt"
        if f'name: "{name}"' not in config_text:
            raise ValueError(f"config text does not name model {name!r}")
        old = config.read_text() if config.is_file() else None
        if old is None:
            raise UnknownModelError(f"model {name!r} is not in the repository {self.root}")
        if old == config_text:
            return False
        new_backend = re.search(r'^\s*backend:\s*"([^"]+)"', config_text, re.MULTILINE)
        if new_backend is None or new_backend.group(1) != self.backend(name):
            raise TritonError(f"model {name} in {self.root} is served by the {self.backend(name)} backend; a config "
                              f"for {new_backend.group(1) if new_backend else 'no'} backend would not load its versions")
        _write_file_atomic(config, config_text.encode())
        return True

    def backend(self, name: str) -> str:
        config = self.model_dir(name) / "config.pbtxt"
        if not config.is_file():
            raise UnknownModelError(f"model {name!r} is not in the repository {self.root} (models: {self.models()})")
        match = re.search(r'^\s*backend:\s*"([^"]+)"', config.read_text(), re.MULTILINE)
        if match is None:
            raise TritonError(f"{config} names no backend")
        return match.group(1)

    def versions(self, name: str) -> list[int]:
        """The complete versions on disk, ascending."""
        model_dir = self.model_dir(name)
        if not model_dir.is_dir():
            return []
        return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0)

    def latest_version(self, name: str) -> int | None:
        versions = self.versions(name)
        return versions[-1] if versions else None

    def export_path(self, name: str, version: int) -> Path:
        """The TorchScript export of a version (its sidecar is this path + `.json`)."""
        return version_export_path(self.root, name, version)

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        staging = self.root / STAGING_DIR
        staging.mkdir(exist_ok=True)
        with open(staging / f"{name}.lock", "a+b") as lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def write_version(self, name: str, export_path: str | os.PathLike[str]) -> int:
        """Write `export_path` (a TorchScript export) as version N+1 and return N+1.

        The files are written and fsynced in `<repo>/.staging/`, then the directory is renamed into
        `<repo>/<name>/`: a version is either complete or absent, also after a crash.
        """
        export = Path(export_path)
        if not export.exists() or export.is_dir():  # a pipe is fine: the copy streams it
            raise FileNotFoundError(f"no exported model at {export}")
        backend = self.backend(name)
        sidecar = Path(f"{export}.json")
        staging = self.root / STAGING_DIR
        with self._lock(name):
            # Leftovers of a writer that died mid-copy: never visible to Triton, safe to remove.
            for stale in staging.glob(f"{name}.v*"):
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f"{name}.v", dir=staging))
            try:
                _copy_file(export, tmp / EXPORT_FILENAME)
                if sidecar.is_file():
                    _copy_file(sidecar, tmp / f"{EXPORT_FILENAME}.json")
                if backend == "python":
                    _copy_file(PYTHON_BACKEND_MODEL, tmp / "model.py")
                elif backend == "onnxruntime":
                    export_onnx(tmp / EXPORT_FILENAME, tmp / ONNX_FILENAME)
                os.chmod(tmp, 0o755)
                fsync_dir(tmp)
                version = (self.latest_version(name) or 0) + 1
                target = self.model_dir(name) / str(version)
                os.rename(tmp, target)  # atomic within one file system; target never exists here
                fsync_dir(target.parent)
                fsync_dir(staging)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        log.info("model repository: wrote %s version %d from %s", name, version, export)
        return version

    def remove_version(self, name: str, version: int) -> None:
        """Take a version out of the repository atomically (rename away, then delete)."""
        target = self.model_dir(name) / str(version)
        if not target.is_dir():
            raise UnknownModelError(f"{name} has no version {version} in {self.root}")
        with self._lock(name):
            trash = Path(tempfile.mkdtemp(prefix=f"{name}.v-removed-", dir=self.root / STAGING_DIR))
            os.rename(target, trash / "version")
            fsync_dir(target.parent)
            shutil.rmtree(trash, ignore_errors=True)


# -- local server ----------------------------------------------------------------------------------
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
        self.load_models = [_check_name(m) for m in load_models]
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
        return self._proc.pid if self.is_running() else None

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
        self._proc = subprocess.Popen(dies_with_parent(cmd), env=server_env(), stdout=self._log_file, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    code = self._proc.returncode
                    self._proc = None
                    self._close_log()
                    raise TritonError(f"tritonserver exited with code {code} during start; see {self.log_path}:\n"
                                      f"{self.log_tail()}")
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


# -- gRPC client side --------------------------------------------------------------------------
def _grpc_client(url: str):  # -> tritonclient.grpc.InferenceServerClient
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url=url)


def _is_unavailable(exc: Exception) -> bool:
    """Connection-level failures that a server restart explains (worth retrying)."""
    status = str(getattr(exc, "status", lambda: "")() or "")
    text = str(exc)
    return ("UNAVAILABLE" in status or "DEADLINE_EXCEEDED" in status or "failed to connect" in text.lower()
            or "Socket closed" in text or "Connection reset" in text)


def _is_unknown_model(exc: Exception) -> bool:
    text = str(exc)
    return "unknown model" in text or "is not found" in text or "no available versions" in text \
        or "is not at ready state" in text


def model_states(url: str, timeout_s: float | None = None) -> dict[str, dict[int, str]]:
    """Triton's repository index: the state of each version it knows of (READY, LOADING,
    UNAVAILABLE, ...) per model name. Raises the client's exception when Triton does not answer
    within timeout_s (None: no limit)."""
    client = _grpc_client(url)
    try:
        index = client.get_model_repository_index(as_json=True, client_timeout=timeout_s)
    finally:
        client.close()
    states: dict[str, dict[int, str]] = {}
    for entry in index.get("models", []):
        versions = states.setdefault(entry.get("name", ""), {})
        if entry.get("version"):  # models never loaded are listed without a version
            versions[int(entry["version"])] = entry.get("state", "")
    return states


def ready_versions(url: str, model: str) -> list[int]:
    """Versions of `model` that Triton reports READY."""
    return sorted(v for v, state in model_states(url).get(model, {}).items() if state == "READY")


def wait_version_ready(url: str, model: str, version: int, timeout_s: float = 300.0) -> None:
    """Block until `model` version `version` reports ready, or raise TritonError."""
    client = _grpc_client(url)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                if client.is_model_ready(model, str(version)):
                    return
            except Exception as exc:
                if not _is_unavailable(exc):
                    raise TritonError(f"checking readiness of {model} v{version}: {exc}") from exc
            time.sleep(0.2)
    finally:
        client.close()
    raise TritonError(f"{model} version {version} not ready within {timeout_s:.0f} s")


def load_model(url: str, model: str, timeout_s: float = 300.0) -> None:
    """Ask Triton to (re)load `model` from its repository; blocks until the load finished."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=url)
    try:
        client.load_model(model, client_timeout=timeout_s)
    except Exception as exc:
        raise TritonError(f"Triton at {url} failed to load {model}: {exc}") from exc
    finally:
        client.close()


def promote(repository: ModelRepository, url: str, model: str, export_path: str | os.PathLike[str],
            timeout_s: float = 300.0, check: Callable[[int], None] | None = None) -> int:
    """The hot swap's server side: write the export as the next version, load it beside the serving
    one, wait until it is ready, return its number. `check(version)`, when given, runs once the
    version is ready and raises if it does not serve what it should. A version that fails to load
    or the check is removed again, leaving the repository as it was. Announce the version on
    `tengen.models` afterwards (tengen.loop.messages.announce_model)."""
    version = repository.write_version(model, export_path)
    try:
        load_model(url, model, timeout_s)
        if version not in model_states(url, timeout_s).get(model, {}):
            # The load finished without the new version: this server reads another repository
            # (waiting for readiness would only run into the timeout).
            raise TritonError(f"Triton at {url} does not see {model} version {version} after loading it; "
                              f"does it serve the repository {repository.root}?")
        wait_version_ready(url, model, version, timeout_s)
        if check is not None:
            check(version)
    except BaseException:
        log.error("promotion of %s v%d failed; removing the version from the repository", model, version)
        repository.remove_version(model, version)
        with contextlib.suppress(TritonError):
            load_model(url, model, timeout_s)  # settle Triton back on the versions still on disk
        raise
    log.info("promoted %s to version %d (serving, previous version still loaded)", model, version)
    return version


@dataclass(frozen=True)
class InferenceResult:
    outputs: dict[str, np.ndarray]
    model_version: int


class _SharedMemoryUnsupported(Exception):
    """The server cannot map this client's shared memory (another host or container)."""


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class TritonEvaluator:
    """The Evaluator protocol over Triton's gRPC API.

    `evaluate(spatial, globals)` returns policy/value/score/ownership arrays. Batches larger than
    the model's max_batch_size are split. `version=None` lets Triton pick (its latest ready
    version); `set_version(v)` pins a version (selfplay switches on each `tengen.models`
    announcement). While the server is unreachable (restart) requests are retried with backoff for
    up to `retry_deadline_s`; an unknown model or version fails at once with UnknownModelError.
    Setting `stop` (a service's shutdown event) ends the retrying at once with a TritonError, so a
    worker waiting for a dead server still stops promptly.
    `submit()` runs a request on a small thread pool so several batches can be in flight.
    `shared_memory`: pass inputs and outputs through system shared memory (tengen.infra.shm)
    instead of the gRPC messages; None (default) uses it when the server is on this host's loopback
    and falls back to plain gRPC, with a log line, where the server cannot map the regions.
    """

    def __init__(self, url: str, model: str, version: int | None = None, *, timeout_s: float = 60.0,
                 retry_deadline_s: float = 300.0, max_in_flight: int = 4,
                 stop: threading.Event | None = None, shared_memory: bool | None = None) -> None:
        self.url = url
        self.model = _check_name(model)
        self.timeout_s = timeout_s
        self.retry_deadline_s = retry_deadline_s
        self._stop = stop if stop is not None else threading.Event()
        self._version = version
        self._local = threading.local()
        self._clients: list = []
        self._clients_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_in_flight,
                                                           thread_name_prefix="triton-eval")
        self.max_batch_size, self.outputs = self._call_with_retry(self._fetch_config)
        if shared_memory is None:
            shared_memory = url.rpartition(":")[0] in LOOPBACK_HOSTS
        self.shared_memory = shared_memory
        self._regions: list[ShmRegion] = []

    @property
    def version(self) -> int | None:
        return self._version

    def set_version(self, version: int | None) -> None:
        if version is not None and version < 1:
            raise ValueError(f"model versions start at 1, got {version}")
        if version != self._version:
            log.info("evaluator: %s now requests version %s", self.model, version if version else "latest")
        self._version = version

    def _client(self):  # one gRPC client per thread: tritonclient clients are not thread-safe
        client = getattr(self._local, "client", None)
        if client is None:
            client = _grpc_client(self.url)
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _fetch_config(self) -> tuple[int, tuple[str, ...]]:
        """(max batch size, the outputs to request): a model repository configured before an output
        existed (uncertainty) keeps serving without it, and complete_outputs fills it in."""
        config = self._client().get_model_config(self.model, as_json=True).get("config", {})
        declared = {o.get("name") for o in config.get("output", [])}
        outputs = tuple(n for n in OUTPUT_NAMES if n in declared) if declared else OUTPUT_NAMES
        return int(config.get("max_batch_size", 0)) or 1, outputs

    def _unknown(self, exc: Exception) -> UnknownModelError:
        try:
            ready = {(m.get("name"), m.get("version")) for m in
                     self._client().get_model_repository_index(as_json=True).get("models", [])
                     if m.get("state") == "READY"}
            serving = ", ".join(f"{n} v{v}" for n, v in sorted(ready)) or "none"
        except Exception:
            serving = "unknown (index not available)"
        wanted = f"{self.model}" + (f" version {self._version}" if self._version else "")
        return UnknownModelError(f"Triton at {self.url} does not serve {wanted} (ready: {serving}): {exc}")

    def _call_with_retry(self, fn):
        deadline = time.monotonic() + self.retry_deadline_s
        delay = 0.2
        warned = False
        while True:
            try:
                result = fn()
            except _SharedMemoryUnsupported:
                raise
            except Exception as exc:
                if _is_unknown_model(exc):
                    raise self._unknown(exc) from exc
                if not _is_unavailable(exc) or time.monotonic() >= deadline:
                    raise TritonError(f"inference on {self.model} at {self.url} failed: {exc}") from exc
                if not warned:
                    log.warning("evaluator: Triton at %s unavailable (%s); retrying with backoff for up to %.0f s",
                                self.url, str(exc).strip()[:200], self.retry_deadline_s)
                    warned = True
                if self._stop.wait(delay):  # returns at once when already stopping
                    raise TritonError(f"inference on {self.model} at {self.url} abandoned while stopping: {exc}") from exc
                delay = min(delay * 2, 5.0)
                continue
            if warned:
                log.info("evaluator: Triton at %s reachable again", self.url)
            return result

    def _infer_chunk(self, spatial: np.ndarray, global_inputs: np.ndarray) -> InferenceResult:
        if self.shared_memory:
            try:
                return self._call_with_retry(lambda: self._infer_shared(spatial, global_inputs))
            except _SharedMemoryUnsupported as exc:
                log.warning("evaluator: Triton at %s cannot map this host's shared memory (%s); sending "
                            "tensors in the gRPC messages from now on", self.url, exc)
                self.shared_memory = False
        return self._call_with_retry(lambda: self._infer_grpc(spatial, global_inputs))

    def _request(self, client, inputs, outputs) -> tuple[object, int]:
        version = self._version
        result = client.infer(self.model, inputs, model_version=str(version) if version else "",
                              outputs=outputs, client_timeout=self.timeout_s)
        return result, int(result.get_response().model_version)

    def _infer_grpc(self, spatial: np.ndarray, global_inputs: np.ndarray) -> InferenceResult:
        import tritonclient.grpc as grpcclient

        inputs = [grpcclient.InferInput("spatial", list(spatial.shape), "FP32"),
                  grpcclient.InferInput("globals", list(global_inputs.shape), "FP32")]
        inputs[0].set_data_from_numpy(spatial)
        inputs[1].set_data_from_numpy(global_inputs)
        result, version = self._request(self._client(), inputs, [grpcclient.InferRequestedOutput(n) for n in self.outputs])
        arrays = {name: result.as_numpy(name) for name in self.outputs}
        for name, arr in arrays.items():
            if arr is None or arr.shape[0] != spatial.shape[0]:
                raise TritonError(f"{self.model}: output {name} missing or wrong batch size")
        # as_numpy gives read-only views of the response; the search's Cython backup takes
        # writable memoryviews, like TorchEvaluator's arrays.
        return InferenceResult(complete_outputs({name: np.array(arr) for name, arr in arrays.items()}), version)

    def _infer_shared(self, spatial: np.ndarray, global_inputs: np.ndarray) -> InferenceResult:
        import tritonclient.grpc as grpcclient

        client, region = self._client(), self._region()
        placed_inputs, placed_outputs = region.write_inputs(spatial, global_inputs)
        inputs = []
        for p in placed_inputs:
            inputs.append(grpcclient.InferInput(p.name, list(p.shape), "FP32"))
            inputs[-1].set_shared_memory(region.name, p.nbytes, p.offset)
        outputs = []
        placed_outputs = [p for p in placed_outputs if p.name in self.outputs]
        for p in placed_outputs:
            outputs.append(grpcclient.InferRequestedOutput(p.name))
            outputs[-1].set_shared_memory(region.name, p.nbytes, p.offset)
        if not region.registered:
            self._register(client, region)
        try:
            _, version = self._request(client, inputs, outputs)
        except Exception:
            region.registered = False  # a restarted server has forgotten it: register it again
            raise
        return InferenceResult(complete_outputs(region.read_outputs(placed_outputs)), version)

    def _region(self) -> ShmRegion:
        region = getattr(self._local, "region", None)
        if region is None:
            region = self._local.region = ShmRegion(self.max_batch_size)
            with self._clients_lock:
                self._regions.append(region)
        return region

    def _register(self, client, region: ShmRegion) -> None:
        with contextlib.suppress(Exception):  # a registration the server still holds from before
            client.unregister_system_shared_memory(region.name)
        try:
            client.register_system_shared_memory(region.name, region.key, region.byte_size)
        except Exception as exc:
            if _is_unavailable(exc):
                raise
            raise _SharedMemoryUnsupported(str(exc).strip()[:300]) from exc
        region.registered = True

    def infer(self, spatial: np.ndarray, globals: np.ndarray) -> InferenceResult:  # noqa: A002
        """Outputs plus the version that computed them (the lowest one when a batch was split)."""
        spatial, global_inputs = check_batch(spatial, globals)
        n = spatial.shape[0]
        if n <= self.max_batch_size:
            return self._infer_chunk(spatial, global_inputs)
        parts = [self._infer_chunk(spatial[i:i + self.max_batch_size], global_inputs[i:i + self.max_batch_size])
                 for i in range(0, n, self.max_batch_size)]
        merged = {name: np.concatenate([p.outputs[name] for p in parts]) for name in OUTPUT_NAMES}
        return InferenceResult(merged, min(p.model_version for p in parts))

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        return self.infer(spatial, globals).outputs

    def submit(self, spatial: np.ndarray, globals: np.ndarray) -> concurrent.futures.Future[InferenceResult]:  # noqa: A002
        """Start a request in the background; the future yields an InferenceResult."""
        return self._pool.submit(self.infer, spatial, globals)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._clients_lock:
            clients, self._clients = self._clients, []
            regions, self._regions = self._regions, []
        if regions and clients:
            for region in regions:
                with contextlib.suppress(Exception):  # the server may be gone: nothing to unregister
                    clients[0].unregister_system_shared_memory(region.name, client_timeout=5.0)
        for region in regions:
            region.close()
        for client in clients:
            client.close()
        self._local = threading.local()

    def __enter__(self) -> "TritonEvaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

