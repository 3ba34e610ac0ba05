"""The Evaluator protocol that search uses, and its in-process implementations (PyTorch, OpenVINO).

An evaluator maps a batch of encoded positions to the exported model's four outputs, batch-first:
  policy [B, H*W+1] logits (pass last), value [B, 3] logits (win/loss/no result),
  score [B, 2] (mean, stdev in points), ownership [B, H, W] in [-1, 1], uncertainty [B, 2] (the
  short-term value and score error predictions, -1 for a net without them);
all from the perspective of the player to move. TritonEvaluator (tengen.infra) serves the same
contract over gRPC.
"""
from __future__ import annotations

import contextlib
import copy
import os
import threading
from typing import Any, Iterator, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from tengen.go.planes import MAX_BOARD, MIN_BOARD, NUM_GLOBAL, NUM_SPATIAL
from tengen.nn.export import OUTPUT_NAMES, complete_outputs, load_export, select_policy, use_optimistic_policy
from tengen.nn.model import InferenceNet, KataGoNet

# "auto": bf16 autocast where the CPU computes bf16 natively (AVX512-BF16/AMX: about 1.5x fp32 on
# the presets' nets), fp32 elsewhere, where bf16 is emulated and slower. The Triton Python backend
# (services/inference/model.py) resolves its `precision` parameter the same way.
PRECISIONS = ("auto", "bf16", "fp32")


def resolve_precision(precision: str) -> bool:
    """True when `precision` means bf16 autocast on this machine."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    return precision == "bf16" or (precision == "auto" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))


# Where a net runs on a CPU: "torch" (the TorchScript export as it is), "openvino" (the export
# frozen and compiled by OpenVINO: 1.8x torch's evals/s for the cpu preset's b4c48 on 9x9, whose
# time under torch goes to per-op overhead), "auto" (OpenVINO where it is installed).
RUNTIMES = ("auto", "torch", "openvino")


def openvino_bf16() -> bool:
    """Whether OpenVINO's CPU plugin computes bf16 natively here."""
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


@runtime_checkable
class Evaluator(Protocol):
    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        """spatial float32 [B, 18, H, W], globals float32 [B, 10] -> the OUTPUT_NAMES arrays."""
        ...


def check_batch(spatial: np.ndarray, global_inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validated float32, C-contiguous copies-if-needed of an evaluator's inputs."""
    spatial = np.asarray(spatial)
    global_inputs = np.asarray(global_inputs)
    if spatial.ndim != 4 or spatial.shape[1] != NUM_SPATIAL:
        raise ValueError(f"spatial must be [B, {NUM_SPATIAL}, H, W], got {list(spatial.shape)}")
    height, width = spatial.shape[2], spatial.shape[3]
    if not (MIN_BOARD <= height <= MAX_BOARD and MIN_BOARD <= width <= MAX_BOARD):
        raise ValueError(f"board {height}x{width} outside {MIN_BOARD}..{MAX_BOARD}")
    if global_inputs.ndim != 2 or global_inputs.shape[1] != NUM_GLOBAL:
        raise ValueError(f"globals must be [B, {NUM_GLOBAL}], got {list(global_inputs.shape)}")
    if spatial.shape[0] != global_inputs.shape[0]:
        raise ValueError(f"batch sizes differ: spatial {spatial.shape[0]}, globals {global_inputs.shape[0]}")
    if spatial.shape[0] == 0:
        raise ValueError("empty batch")
    return (
        np.ascontiguousarray(spatial, dtype=np.float32),
        np.ascontiguousarray(global_inputs, dtype=np.float32),
    )


def served_module(source: str | os.PathLike[str] | nn.Module,
                  policy: str) -> tuple[nn.Module, dict[str, Any], bool]:
    """What an evaluator computes for `source`: an InferenceNet of a snapshot of a KataGoNet (eval
    mode), any other module as it is, or the loaded export; its metadata ({} for a module); whether
    it serves the optimistic policy (`policy`, one of tengen.nn.export.POLICIES; a module other
    than a KataGoNet serves what it computes)."""
    if isinstance(source, KataGoNet):
        optimistic = use_optimistic_policy(policy, source.optimistic_policy, "the net")
        return InferenceNet(copy.deepcopy(source).cpu().eval(), optimistic), {}, optimistic
    if isinstance(source, nn.Module):
        return source, {}, False
    module, metadata = load_export(source)
    return module, metadata, select_policy(module, metadata, policy, os.fspath(source))


class TorchEvaluator:
    """Runs a net in this process on the CPU, without gradients.

    source: an export path (see tengen.nn.export), a KataGoNet (a snapshot of its weights is
    taken, so training the live net later does not change this evaluator), or a module with
    the export signature. num_threads, when given, sets torch's intra-op thread count;
    otherwise the process's setting (torch.set_num_threads) is used as it is. precision: one of
    PRECISIONS; outputs are float32 either way. policy: which policy head a net or export serves
    (tengen.nn.export.POLICIES; self-play keeps "normal").
    """

    def __init__(self, source: str | os.PathLike[str] | nn.Module, num_threads: int | None = None,
                 precision: str = "auto", policy: str = "normal") -> None:
        self.bf16 = resolve_precision(precision)
        self.module, self.metadata, self.optimistic = served_module(source, policy)
        self.module.eval()
        if num_threads is not None:
            if num_threads < 1:
                raise ValueError(f"num_threads must be >= 1, got {num_threads}")
            torch.set_num_threads(num_threads)

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        spatial, global_inputs = check_batch(spatial, globals)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            outputs = self.module(torch.from_numpy(spatial), torch.from_numpy(global_inputs))
        return complete_outputs({name: out.float().numpy() for name, out in zip(OUTPUT_NAMES, outputs)})



@contextlib.contextmanager
def no_openvino_telemetry() -> Iterator[None]:
    """convert_model's telemetry is on unless a consent file says no, and it forks a process to send
    it; a fork of a threaded process deadlocked, held the parent's stdout open and hung `tengen gtp`
    at exit (and GNU Go matches with it). The telemetry stays off in CI, which `CI=true` declares."""
    before = os.environ.get("CI")
    os.environ["CI"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CI", None)
        else:
            os.environ["CI"] = before

class OpenVINOEvaluator:
    """Runs a net in this process with OpenVINO on the CPU, for any batch and board size.

    source: an export path or a KataGoNet (a snapshot of its weights is taken). num_threads: the
    CPU threads of the compiled model (None: OpenVINO's default). precision: one of PRECISIONS
    ("auto": bf16 where OpenVINO computes it natively); outputs are float32 either way. policy: as
    TorchEvaluator's.
    """

    def __init__(self, source: str | os.PathLike[str] | KataGoNet, num_threads: int | None = None,
                 precision: str = "auto", policy: str = "normal") -> None:
        import openvino as ov

        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.bf16 = precision == "bf16" or (precision == "auto" and openvino_bf16())
        module, self.metadata, self.optimistic = served_module(source, policy)
        scripted = module if isinstance(module, torch.jit.ScriptModule) else torch.jit.script(module)
        # Freezing folds the scripted module's eval-mode branches, which OpenVINO cannot convert.
        with no_openvino_telemetry():
            model = ov.convert_model(
                torch.jit.freeze(scripted.eval()),
                example_input=(torch.zeros(1, NUM_SPATIAL, 9, 9), torch.zeros(1, NUM_GLOBAL)),
                input=[ov.PartialShape([-1, NUM_SPATIAL, -1, -1]), ov.PartialShape([-1, NUM_GLOBAL])])
        properties: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "bf16" if self.bf16 else "f32",
                                      "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        if num_threads is not None:
            properties["INFERENCE_NUM_THREADS"] = num_threads
        self._compiled = ov.Core().compile_model(model, "CPU", properties)
        self._local = threading.local()  # an infer request serves one call at a time: one per thread

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        spatial, global_inputs = check_batch(spatial, globals)
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._compiled.create_infer_request()
        outputs = request.infer({0: spatial, 1: global_inputs})
        return complete_outputs({name: np.array(outputs[i], dtype=np.float32)
                                 for i, name in zip(range(len(outputs)), OUTPUT_NAMES)})


def make_evaluator(source: str | os.PathLike[str] | KataGoNet, num_threads: int | None = None, *,
                   precision: str = "auto", runtime: str = "auto",
                   policy: str = "normal") -> TorchEvaluator | OpenVINOEvaluator:
    """The in-process evaluator of `runtime` (one of RUNTIMES) for an export path or a KataGoNet,
    serving `policy`'s head (tengen.nn.export.POLICIES)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    if runtime == "auto":
        try:
            import openvino  # noqa: F401
            runtime = "openvino"
        except ImportError:
            runtime = "torch"
    if runtime == "openvino":
        return OpenVINOEvaluator(source, num_threads, precision, policy)
    return TorchEvaluator(source, num_threads, precision, policy)
