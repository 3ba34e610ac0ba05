"""Export the served outputs of a net as one TorchScript file plus a JSON sidecar.

The exported module's signature is fixed (the inference server is written against it):
  forward(spatial: float32 [B, 18, H, W], globals: float32 [B, 10])
    -> (policy float32 [B, H*W+1]   main policy logits, pass last, off-board = OFF_BOARD_LOGIT,
        value float32 [B, 3]        win / loss / no-result logits for the player to move,
        score float32 [B, 2]        score mean and stdev in points, mover's perspective,
        ownership float32 [B, H, W] tanh ownership, mover's perspective,
        uncertainty float32 [B, 2]  the short-term value and score error heads' predicted squared
                                    errors (tengen.nn.model), -1 each from a net without them)
The module is scripted, not traced, so one file serves every board size from 7x7 to 19x19.
The sidecar `<file>.json` names the architecture, inputs, outputs and training samples seen, and
whether the net has an optimistic policy head: an export serves the ordinary policy as written, the
optimistic one once its `optimistic` attribute is set after loading (`select_policy`), which
test-time search does and self-play never does.
Exports made before the uncertainty output return the first four only; `complete_outputs` gives
them the constant "unknown" uncertainty, so every evaluator serves all of OUTPUT_NAMES.

`export_onnx` converts an export to ONNX (same inputs, outputs and dynamic batch and board axes) for
Triton's ONNX Runtime backend on GPUs, where TensorRT builds fp16 engines from it. `served_net` and
`write_weights` turn an export into a plain weights file (the InferenceNet's state_dict, with a
sidecar naming the architecture), which `load_weights` reads back into the model class.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch

from tengen.go.planes import MAX_BOARD, MIN_BOARD, NUM_GLOBAL, NUM_SPATIAL
from tengen.nn.model import (
    OFF_BOARD_LOGIT,
    SHORT_TERM_PREFIXES,
    Architecture,
    InferenceNet,
    KataGoNet,
    ShortTermHead,
    parameter_count,
)

EXPORT_FORMAT = "tengen-torchscript-1"
WEIGHTS_FORMAT = "tengen-weights-1"  # a plain state_dict of tengen.nn.model.InferenceNet
ONNX_FORMAT = "tengen-onnx-1"  # the sidecar of an ONNX copy written by `tengen models export`
INPUTS = (
    {"name": "spatial", "dtype": "float32", "shape": ["B", NUM_SPATIAL, "H", "W"]},
    {"name": "globals", "dtype": "float32", "shape": ["B", NUM_GLOBAL]},
)
OUTPUTS = (
    {"name": "policy", "dtype": "float32", "shape": ["B", "H*W+1"]},
    {"name": "value", "dtype": "float32", "shape": ["B", 3]},
    {"name": "score", "dtype": "float32", "shape": ["B", 2]},
    {"name": "ownership", "dtype": "float32", "shape": ["B", "H", "W"]},
    {"name": "uncertainty", "dtype": "float32", "shape": ["B", 2]},
)
OUTPUT_NAMES: tuple[str, ...] = tuple(str(o["name"]) for o in OUTPUTS)
# The uncertainty of a net without short-term heads (or an export from before them): unknown.
UNKNOWN_UNCERTAINTY = -1.0
# Which policy output a test-time search reads: "auto" is the optimistic head where the net has one.
POLICIES = ("auto", "normal", "optimistic")
ONNX_OPSET = 18  # read by every ONNX Runtime since 1.14, so by any recent Triton's backend


def complete_outputs(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An evaluation's arrays with the uncertainty output added (UNKNOWN_UNCERTAINTY) where the
    export predates it."""
    if "uncertainty" not in arrays:
        batch = arrays["value"].shape[0]
        arrays = {**arrays, "uncertainty": np.full((batch, 2), UNKNOWN_UNCERTAINTY, np.float32)}
    return arrays


@contextlib.contextmanager
def quiet_torchscript() -> Iterator[None]:
    """TorchScript is what Triton's PyTorch backend and torch.jit.load consume; torch 2.x flags
    torch.jit.script/save/load as deprecated in favour of torch.export, which they do not read."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit\..*deprecated")
        yield


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(path)}.json")


def export_samples(path: str | os.PathLike[str]) -> int | None:
    """samples_seen from an export's sidecar; None when the sidecar is missing or has none."""
    try:
        value = json.loads(sidecar_path(path).read_text()).get("samples_seen")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value >= 0 else None


def net_samples(metadata: Mapping[str, Any]) -> int | None:
    """The samples a net has trained on in all: its run's (samples_seen) plus, for a run warm-started
    from another's net (`tengen run --init-model`), that net's (init_from). What the board-size
    curriculum is keyed on (GameConfig.boards_at); None when the sidecar does not say."""
    seen, prior = metadata.get("samples_seen"), metadata.get("init_from", {})
    before = prior.get("samples_seen", 0) if isinstance(prior, dict) else 0
    if not isinstance(seen, int) or isinstance(seen, bool) or seen < 0:
        return None
    return seen + (before if isinstance(before, int) and not isinstance(before, bool) and before > 0 else 0)


def export_net_samples(path: str | os.PathLike[str]) -> int | None:
    """net_samples of an export's sidecar; None when the sidecar is missing or unreadable."""
    try:
        metadata = json.loads(sidecar_path(path).read_text())
    except (OSError, ValueError):
        return None
    return net_samples(metadata) if isinstance(metadata, dict) else None


def export_model(
    model: KataGoNet, path: str | os.PathLike[str], samples_seen: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Writes the TorchScript file at `path` and its sidecar; returns the sidecar's contents.

    The live model is left untouched (a copy is put in eval mode and scripted). Both files are
    written to temporary names and renamed, so a reader never sees a half-written file.
    """
    if not isinstance(model, KataGoNet):
        raise TypeError(f"export_model needs a KataGoNet, got {type(model).__name__}")
    if samples_seen < 0:
        raise ValueError(f"samples_seen must be >= 0, got {samples_seen}")
    net = copy.deepcopy(model).cpu().eval()
    with quiet_torchscript():
        scripted = torch.jit.script(InferenceNet(net))
    metadata: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "architecture": dataclasses.asdict(net.architecture),
        "parameters": parameter_count(InferenceNet(net)),  # what is served: no training-only heads
        "inputs": list(INPUTS),
        "outputs": list(OUTPUTS),
        "num_spatial": NUM_SPATIAL,
        "num_global": NUM_GLOBAL,
        "board_sizes": [MIN_BOARD, MAX_BOARD],
        "off_board_logit": OFF_BOARD_LOGIT,
        "samples_seen": int(samples_seen),
        "optimistic_policy": net.optimistic_policy,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        **(extra or {}),
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_model = target.with_name(f".{target.name}.tmp")
    with quiet_torchscript():
        torch.jit.save(scripted, str(tmp_model))
    publish(tmp_model, target, metadata)
    return metadata


def publish(written: Path, target: Path, metadata: dict[str, Any]) -> None:
    """Move the file `written` (complete, in target's directory) to `target` with `metadata` as
    its sidecar: both are fsynced and renamed into place, so a reader never sees half a file."""
    side = sidecar_path(target)
    tmp_side = side.with_name(f".{side.name}.tmp")
    tmp_side.write_text(json.dumps(metadata, indent=2) + "\n")
    for tmp in (written, tmp_side):
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    os.replace(written, target)
    os.replace(tmp_side, side)


def load_export(
    path: str | os.PathLike[str], device: torch.device | str = "cpu"
) -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
    """The exported module (eval mode) and its sidecar metadata."""
    target = Path(path)
    metadata = read_sidecar(target, EXPORT_FORMAT)
    with quiet_torchscript():
        module = torch.jit.load(str(target), map_location=device)
    module.eval()
    return module, metadata


def read_sidecar(path: Path, file_format: str) -> dict[str, Any]:
    """The sidecar of the `file_format` file at `path`, after checking both exist and that its
    input planes are this code's. Raises FileNotFoundError or ValueError."""
    side = sidecar_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no exported model at {path}")
    if not side.is_file():
        raise FileNotFoundError(f"exported model {path} has no sidecar {side}")
    try:
        metadata = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"sidecar {side} is not valid JSON: {e}") from None
    if not isinstance(metadata, dict) or metadata.get("format") != file_format:
        raise ValueError(f"sidecar {side} is not a {file_format} export description")
    if metadata.get("num_spatial") != NUM_SPATIAL or metadata.get("num_global") != NUM_GLOBAL:
        raise ValueError(
            f"{path} expects {metadata.get('num_spatial')} spatial / {metadata.get('num_global')} global "
            f"input planes, this code produces {NUM_SPATIAL} / {NUM_GLOBAL}"
        )
    return metadata


def use_optimistic_policy(policy: str, has_head: bool, what: str) -> bool:
    """Whether a search should read `what`'s optimistic policy head for `policy` (one of POLICIES);
    raises ValueError when asked for a head the net does not have."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if policy == "optimistic" and not has_head:
        raise ValueError(f"{what} has no optimistic policy head (trained with trainer.optimistic_policy_weight > 0)")
    return policy != "normal" and has_head


def select_policy(module: torch.jit.ScriptModule, metadata: dict[str, Any], policy: str, what: str) -> bool:
    """Switches a loaded export to the optimistic policy where `policy` asks for it (see
    use_optimistic_policy); returns whether it did."""
    optimistic = use_optimistic_policy(policy, bool(metadata.get("optimistic_policy", False)), what)
    if optimistic:
        module.optimistic = True
    return optimistic


def export_onnx(export_path: str | os.PathLike[str], onnx_path: str | os.PathLike[str]) -> None:
    """Convert the TorchScript export at `export_path` to ONNX at `onnx_path` (written to a temporary
    name, fsynced, then renamed). Batch, board height and width stay dynamic."""
    module, metadata = load_export(export_path)
    names = [o["name"] for o in metadata["outputs"]]  # an older export has fewer
    target = Path(onnx_path)
    tmp = target.with_name(f".{target.name}.tmp")
    example = (torch.zeros(1, NUM_SPATIAL, MIN_BOARD, MIN_BOARD), torch.zeros(1, NUM_GLOBAL))
    axes = {"spatial": {0: "B", 2: "H", 3: "W"}, "globals": {0: "B"}, "policy": {0: "B", 1: "moves"},
            "value": {0: "B"}, "score": {0: "B"}, "ownership": {0: "B", 1: "H", 2: "W"}, "uncertainty": {0: "B"}}
    try:
        with warnings.catch_warnings():
            # The TorchScript-based exporter is the one that takes a scripted module as it is.
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=UserWarning)
            torch.onnx.export(module, example, str(tmp), input_names=[str(i["name"]) for i in INPUTS],
                              output_names=names, dynamic_axes={k: axes[k] for k in ("spatial", "globals", *names)},
                              opset_version=ONNX_OPSET,
                              dynamo=False)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -- the plain weights file -------------------------------------------------------------------------
def served_net(module: torch.jit.ScriptModule, metadata: dict[str, Any]) -> InferenceNet:
    """The net of a loaded export as tengen's model class: an InferenceNet (eval mode) of the
    sidecar's architecture holding the export's weights."""
    state = module.state_dict()
    short_term = f"{SHORT_TERM_PREFIXES[0]}out.weight" in state  # a net without the heads has no weights there
    net = InferenceNet(KataGoNet(Architecture(**metadata["architecture"]), short_term,
                                 bool(metadata.get("optimistic_policy", False))))
    wanted = net.state_dict()
    # Scripting keeps the constant of a net without short-term heads, which the eager module
    # does not save; every other key must match (load_state_dict is strict about missing ones).
    net.load_state_dict({key: value for key, value in state.items() if key in wanted})
    return net.eval()


def write_weights(net: InferenceNet, path: str | os.PathLike[str], metadata: dict[str, Any]) -> dict[str, Any]:
    """Write `net`'s state_dict at `path` (torch.save: tensors only, torch.load(weights_only=True)
    reads it) with a sidecar: `metadata` (an export's) as WEIGHTS_FORMAT, saying whether the net
    has short-term heads. Returns the sidecar's contents."""
    target = Path(path)
    sidecar = {**metadata, "format": WEIGHTS_FORMAT, "model_class": "tengen.nn.model.InferenceNet",
               "short_term_heads": isinstance(net.short_term_head, ShortTermHead)}
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        torch.save(net.state_dict(), tmp)
        publish(tmp, target, sidecar)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return sidecar


def load_weights(path: str | os.PathLike[str]) -> tuple[InferenceNet, dict[str, Any]]:
    """The net of a weights file (eval mode, on the CPU) and its sidecar."""
    target = Path(path)
    metadata = read_sidecar(target, WEIGHTS_FORMAT)
    net = InferenceNet(KataGoNet(Architecture(**metadata["architecture"]), bool(metadata["short_term_heads"]),
                                 bool(metadata.get("optimistic_policy", False))))
    net.load_state_dict(torch.load(target, map_location="cpu", weights_only=True))
    return net.eval(), metadata
