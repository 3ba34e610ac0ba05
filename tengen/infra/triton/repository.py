"""Triton's model repository on a local file system: config.pbtxt from the templates, versions
written atomically, and the names of its files.

Layout (`<repo>/<model>/config.pbtxt`, `<repo>/<model>/<N>/model.pt`): every
version directory holds the TorchScript export as `model.pt` (and its JSON sidecar); for the
Python backend (CPU) it also holds `model.py` from `services/inference/`. The GPU configs serve the
same export: the ONNX Runtime backend (TensorRT fp16, the fast path) from `model.onnx`, converted
from `model.pt` when the version is written, or the PyTorch (libtorch) backend from `model.pt`.
Versions are written atomically: a temporary directory under `<repo>/.staging/` is filled and
fsynced, then renamed into place, so Triton never sees a half-written version. The config uses
`version_policy: latest {num_versions: 2}`: after `load_model` (tengen.infra.triton.client), the
previous version keeps serving while the new one loads and warms up.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import string
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from tengen.config import Config
from tengen.go.planes import MAX_BOARD, MIN_BOARD, NUM_GLOBAL, NUM_SPATIAL
from tengen.infra.files import fsync_dir
from tengen.infra.triton.errors import TritonError, UnknownModelError
from tengen.nn.evaluator import PRECISIONS, RUNTIMES
from tengen.nn.export import export_onnx

log = logging.getLogger(__name__)

# Triton-side files of the inference service (read as data, never imported).
INFERENCE_DIR = Path(__file__).resolve().parents[3] / "services" / "inference"
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


def check_model_name(name: str) -> str:
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
    check_model_name(name)
    if backend not in CONFIG_TEMPLATES:
        raise ValueError(f"unknown backend {backend!r}; choose one of {sorted(CONFIG_TEMPLATES)}")
    if max_batch_size < 1 or instances < 1 or torch_threads < 0 or queue_delay_us < 0:
        raise ValueError("max_batch_size and instances must be >= 1, torch_threads and queue_delay_us >= 0")
    if not MIN_BOARD <= warmup_board <= MAX_BOARD or not 1 <= warmup_batch <= max_batch_size:
        raise ValueError(f"warmup board {warmup_board} or batch {warmup_batch} out of range")
    if not all(1 <= b <= max_batch_size for b in preferred_batch_sizes):
        raise ValueError(f"preferred batch sizes {list(preferred_batch_sizes)} must be within 1..{max_batch_size}")
    preferred = (
        f" preferred_batch_size: [ {', '.join(str(b) for b in sorted(set(preferred_batch_sizes)))} ]"
        if preferred_batch_sizes
        else ""
    )
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    template = string.Template(CONFIG_TEMPLATES[backend].read_text())
    return template.substitute(
        name=name,
        max_batch_size=max_batch_size,
        queue_delay_us=queue_delay_us,
        preferred=preferred,
        instances=instances,
        torch_threads=torch_threads,
        warmup_board=warmup_board,
        warmup_batch=warmup_batch,
        precision=precision,
        runtime=runtime,
        num_spatial=NUM_SPATIAL,
        num_global=NUM_GLOBAL,
        min_board=MIN_BOARD,
        max_board=MAX_BOARD,
    )


# -- atomic file system helpers -------------------------------------------------------------------


def model_config(config: Config, name: str, backend: str = "python") -> str:
    """The model's config.pbtxt as the preset's triton section says (the one place a preset
    reaches Triton's batching, instances and warm-up)."""
    t = config.triton
    instances = t.gpu_instances if backend != "python" and t.gpu_instances else t.instances
    # Warm up on the largest board the run plays, so the first real request finds a warm model.
    return render_config(
        name,
        backend,
        max_batch_size=t.max_batch_size,
        queue_delay_us=t.queue_delay_us,
        preferred_batch_sizes=t.preferred_batch_sizes,
        instances=instances,
        torch_threads=t.threads,
        warmup_board=max(config.game.board_sizes),
        warmup_batch=t.warmup_batch,
    )


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
    return Path(root) / check_model_name(name) / str(version) / EXPORT_FILENAME


class ModelRepository:
    """A Triton model repository on a local file system."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def model_dir(self, name: str) -> Path:
        return self.root / check_model_name(name)

    def models(self) -> list[str]:
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and _NAME_RE.match(p.name) and (p / "config.pbtxt").is_file()
        )

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
            raise TritonError(
                f"model {name} in {self.root} is served by the {self.backend(name)} backend; a config "
                f"for {new_backend.group(1) if new_backend else 'no'} backend would not load its versions"
            )
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
