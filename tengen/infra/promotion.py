"""The whole hot swap of an export, shared by `tengen models promote` and the gating service.

`hot_swap` validates nothing itself: callers first run `validate_export` (the export loads, has
this code's input planes and answers with the four outputs), so a broken file never reaches the
repository. Then tengen.infra.triton.promote writes it atomically as the next version, loads it
beside the serving one, waits until it is ready and checks that Triton answers two fixed
positions like the export does (catching a Triton that reads another repository), and finally
tengen.infra.kafka.announce_model tells the selfplay workers on `tengen.models`.

`promoted_version` finds an export already written as a version, so a promotion interrupted after
the write (a crash before its decision was recorded) is finished instead of repeated.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tengen.infra.kafka import ReliableProducer, announce_model
from tengen.infra.shm import output_shapes
from tengen.infra.triton import ModelRepository, TritonError, TritonEvaluator, promote

log = logging.getLogger(__name__)


class ServedMismatch(TritonError):
    """Triton serves a version that answers otherwise than its export: the same net computes the
    same answers on every try, so retrying does not help (see check_served)."""


class ExportError(ValueError):
    """A file is not an export this code can serve; the message says why."""


def canary_inputs() -> tuple[np.ndarray, np.ndarray]:
    """Two fixed 9x9 positions that a promoted version must answer like its export does."""
    from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, ON_BOARD

    rng = np.random.default_rng(20240)
    spatial = (rng.random((2, NUM_SPATIAL, 9, 9)) < 0.3).astype(np.float32)
    spatial[:, ON_BOARD] = 1.0
    return spatial, rng.random((2, NUM_GLOBAL)).astype(np.float32)


def validate_export(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(sidecar, outputs on canary_inputs()) of the export at `path`, after checking it is an
    export this code can serve: sidecar present and readable, input plane counts equal to
    tengen.go.planes, the TorchScript file loads and answers with the four outputs in the right
    shapes. Raises ExportError otherwise."""
    from tengen.nn.evaluator import TorchEvaluator
    from tengen.nn.export import load_export

    path = Path(path)
    if not path.is_file():
        raise ExportError(f"no export at {path}")
    try:
        module, metadata = load_export(path)
    except (FileNotFoundError, ValueError) as exc:
        raise ExportError(f"{path} is not a tengen export: {exc}") from None
    except RuntimeError as exc:  # torch.jit.load on a file that is not TorchScript
        raise ExportError(f"{path} is not a TorchScript file: {str(exc).strip().splitlines()[0]}") from None
    spatial, glob = canary_inputs()
    try:
        outputs = TorchEvaluator(module, precision="fp32").evaluate(spatial, glob)
    except Exception as exc:  # anything the scripted forward raises
        raise ExportError(f"{path}: the exported module fails on a 9x9 position: {exc}") from None
    n, size = spatial.shape[0], spatial.shape[-1]
    want = output_shapes(n, size, size)
    shapes = {name: tuple(out.shape) for name, out in outputs.items()}
    if shapes != want:
        raise ExportError(f"{path}: outputs have shapes {shapes}, expected {want}")
    return metadata, outputs


def check_served(url: str, model: str, expected: dict[str, np.ndarray]) -> Callable[[int], None]:
    """promote()'s check: the new version answers the canary positions like the export. A Triton
    that reads another repository than the one written to serves some other net under that number."""

    def check(version: int) -> None:
        with TritonEvaluator(url, model, version, retry_deadline_s=30.0) as evaluator:
            got = evaluator.evaluate(*canary_inputs())
        differs = [name for name in expected if not agree(name, got[name], expected[name])]
        if differs:
            raise ServedMismatch(f"Triton's {model} version {version} does not compute what the export does "
                              f"(outputs {', '.join(differs)} differ); does it serve the repository written to?")

    return check


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of logits (policy, value) into probabilities."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def agree(name: str, served: np.ndarray, export_fp32: np.ndarray) -> bool:
    """Whether a served output is the export's (fp32) one up to reduced precision: Triton may
    compute in bf16 (services/inference/model.py), which moves probabilities by about 0.005 and
    scores by about 0.2 points, where another net's answers differ by far more."""
    if name in ("policy", "value"):
        return bool(np.abs(softmax(served) - softmax(export_fp32)).max() <= 0.03)
    if name == "score":
        return _same_points(served, export_fp32)
    if name == "uncertainty":
        # (short-term value error, short-term score error): the second is in points and grows as
        # the net trains (20-45 by 800k samples on 9x9, where bf16 moves it by up to 0.06), so it is
        # held to the score's tolerance; the value error to the absolute one below.
        return (bool(np.abs(served[:, 0] - export_fp32[:, 0]).max() <= 0.05)
                and _same_points(served[:, 1], export_fp32[:, 1]))
    return bool(np.abs(served - export_fp32).max() <= 0.05)  # ownership in [-1, 1]


def _same_points(served: np.ndarray, export_fp32: np.ndarray) -> bool:
    return bool(np.abs(served - export_fp32).max() <= 0.5 + 0.02 * np.abs(export_fp32).max())


def load_checked(repository: ModelRepository, url: str, model: str, export: Path,
                 expected: dict[str, np.ndarray], timeout_s: float = 300.0) -> int:
    """Write `export` as the next version of `model`, load it beside the serving one, wait until
    it is ready and answers like the export (tengen.infra.triton.promote with check_served);
    return the version. On failure the repository is left as it was."""
    return promote(repository, url, model, export, timeout_s=timeout_s, check=check_served(url, model, expected))


def hot_swap(repository: ModelRepository, url: str, model: str, export: Path, expected: dict[str, np.ndarray],
             producer: ReliableProducer | None, timeout_s: float = 300.0) -> int:
    """load_checked, then announce the version on `tengen.models` (when a producer is given);
    returns the version. Raises TritonError before anything is announced, or KafkaAdapterError
    when the version serves but the announcement was not acknowledged."""
    version = load_checked(repository, url, model, export, expected, timeout_s)
    if producer is not None:
        announce_model(producer, model, version, timeout_s=timeout_s)
    return version


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def promoted_version(repository: ModelRepository, model: str, export: Path, newer_than: int = 0) -> int | None:
    """The version of `model` above `newer_than` whose served file is byte for byte `export`, or
    None. (Versions are written complete or not at all, so a match is a finished write.)"""
    want = file_digest(export)
    for version in repository.versions(model):
        served = repository.export_path(model, version)
        if version > newer_than and served.is_file() and file_digest(served) == want:
            return version
    return None
