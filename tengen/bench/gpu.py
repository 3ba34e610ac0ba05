"""`tengen bench gpu`: the served export's evals/s on a CUDA GPU, in process.

The reference the GPU deployment aims at (docs/deployment.md): what one GPU can evaluate with
the paper's nets when nothing but the net runs. For each net (default b10c128 and b20c256) on
19x19 and each batch (default 256 and 1024) it times, in rounds that alternate so a clock change
hits all alike:
- `export_fp32`: the TorchScript export (the file Triton's libtorch backend serves), fp32 inputs
  (cuDNN may use TF32 for its convolutions, as it does by default in a server);
- `export_fp16`, `export_bf16`: the same export under autocast to half or bfloat16;
- `half`: the net with every weight in fp16 and channels_last, fp16 in and out (what a TensorRT
  fp16 engine runs);
- `compiled_half` (with --compile): `half` through torch.compile, which fuses each batch norm, ReLU
  and board mask into one kernel as TensorRT does (minutes of compiling per net and batch);
- `onnx_cuda`: the ONNX copy (what Triton's ONNX Runtime backend serves) on ONNX Runtime's CUDA
  provider, where the installed onnxruntime has one.
Every call takes its inputs from host memory and brings its outputs back, as a server does. A
path's figure is its median round; ratio = path / export_fp32 at the same net and batch. Each path
also reports its largest policy-probability and winrate difference from export_fp32 on the same
inputs, so a fast path that overflows shows it. Random weights; the inputs are random stones on
an empty-bordered 19x19 board.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

DESCRIPTION = "evals/s of the served export on a CUDA GPU (fp32, fp16, bf16, ONNX Runtime) at the paper's nets"
MIN_ROUNDS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", nargs="+", default=["b10c128", "b20c256"],
                        help="nets to time (default b10c128 b20c256)")
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 1024], help="batch sizes (default 256 1024)")
    parser.add_argument("--board", type=int, default=19, help="board size (default 19)")
    parser.add_argument("--device", default="cuda",
                        help="torch device (default cuda; cpu runs the same paths slowly, for a check)")
    parser.add_argument("--compile", action="store_true",
                        help="add compiled_half: the fp16 net through torch.compile (minutes per net and batch)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


Evaluate = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _torch_paths(export_path: Path, net, device, compile_half: bool) -> dict[str, Evaluate]:
    """The export at fp32 and under autocast, and the all-fp16 net; each returns (policy, value)
    as float32 numpy arrays."""
    import torch

    from tengen.nn.export import load_export
    from tengen.nn.model import InferenceNet

    module, _ = load_export(export_path, device=device)
    # Module.to takes memory_format (torch's docs), which its type stubs leave out.
    half_net = InferenceNet(copy.deepcopy(net)).to(device).eval().half().to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    def export(dtype: torch.dtype | None) -> Evaluate:
        def evaluate(spatial: np.ndarray, global_inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            s = torch.from_numpy(spatial).to(device, non_blocking=True)
            g = torch.from_numpy(global_inputs).to(device, non_blocking=True)
            with torch.inference_mode(), torch.autocast(device.type, dtype=dtype or torch.float32,
                                                        enabled=dtype is not None):
                policy, value = module(s, g)[:2]
            return policy.float().cpu().numpy(), value.float().cpu().numpy()
        return evaluate

    def half(forward) -> Evaluate:
        def evaluate(spatial: np.ndarray, global_inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            s = torch.from_numpy(spatial).to(device, non_blocking=True).half()
            g = torch.from_numpy(global_inputs).to(device, non_blocking=True).half()
            with torch.inference_mode():
                policy, value = forward(s.contiguous(memory_format=torch.channels_last), g)[:2]
            return policy.float().cpu().numpy(), value.float().cpu().numpy()
        return evaluate

    paths = {"export_fp32": export(None), "export_fp16": export(torch.float16),
             "export_bf16": export(torch.bfloat16), "half": half(half_net)}
    if compile_half:
        paths["compiled_half"] = half(torch.compile(half_net, dynamic=False))
    return paths


def _onnx_path(export_path: Path, device) -> tuple[Evaluate | None, str]:
    """ONNX Runtime's CUDA provider on the ONNX copy, or None and why not."""
    if device.type != "cuda":
        return None, "ONNX Runtime's CUDA provider needs a CUDA device"
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime is not installed"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return None, f"this onnxruntime ({ort.__version__}) has no CUDA provider (onnxruntime-gpu has)"
    from tengen.nn.export import export_onnx

    onnx_file = export_path.with_suffix(".onnx")
    export_onnx(export_path, onnx_file)
    session = ort.InferenceSession(
        str(onnx_file), providers=[("CUDAExecutionProvider", {"device_id": device.index or 0})]
    )
    outputs = [o.name for o in session.get_outputs()][:2]

    def evaluate(spatial: np.ndarray, global_inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        policy, value = session.run(outputs, {"spatial": spatial, "globals": global_inputs})
        return policy.astype(np.float32), value.astype(np.float32)

    return evaluate, ""


def _round(evaluate: Evaluate, spatial: np.ndarray, global_inputs: np.ndarray, seconds: float) -> float:
    calls, start = 0, time.perf_counter()
    while calls < 2 or time.perf_counter() - start < seconds:
        evaluate(spatial, global_inputs)
        calls += 1
    return calls * len(spatial) / (time.perf_counter() - start)


def run(args: argparse.Namespace) -> dict:
    import torch

    from tengen.bench.nn import random_inputs
    from tengen.gate.promotion import softmax
    from tengen.nn.export import export_model
    from tengen.nn.model import ARCHITECTURES, build_model

    unknown = [a for a in args.arch if a not in ARCHITECTURES]
    if unknown:
        raise SystemExit(f"unknown --arch {', '.join(unknown)}; known: {', '.join(ARCHITECTURES)}")
    if not 7 <= args.board <= 19 or min(args.batch) < 1:
        raise SystemExit("--board must be within 7..19 and every --batch >= 1")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "no CUDA device: torch.cuda.is_available() is False (this torch is "
            f"{torch.__version__}); on a CPU box `tengen bench nn` times the CPU paths"
        )
    torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick each convolution's kernel
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}; {args.board}x{args.board}, random weights", flush=True)
    combos = [(a, b) for a in args.arch for b in args.batch]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="tengen-bench-gpu-") as tmp:
        for arch in args.arch:
            torch.manual_seed(args.seed)
            net = build_model(arch).eval()
            export_path = Path(tmp) / f"{arch}.pt"
            export_model(net, export_path, samples_seen=0)
            paths: dict[str, Evaluate] = _torch_paths(export_path, net, device, args.compile)
            onnx, why = _onnx_path(export_path, device)
            if onnx is None:
                print(f"  {arch}: onnx_cuda skipped: {why}", flush=True)
            else:
                paths["onnx_cuda"] = onnx
            for batch in args.batch:
                spatial, global_inputs = random_inputs(batch, args.board, args.seed)
                reference_policy, reference_value = paths["export_fp32"](spatial, global_inputs)
                reference_policy, reference_value = softmax(reference_policy), softmax(reference_value)
                differences: dict[str, dict[str, float]] = {}
                for path, evaluate in list(paths.items()):
                    try:
                        for _ in range(3):  # warm-up: cuDNN's kernel choice, compiling, ONNX Runtime's arena
                            policy, value = evaluate(spatial, global_inputs)
                    except Exception as e:  # noqa: BLE001 - one path failing must not hide the others
                        print(f"  {arch} batch {batch}: {path} failed: {type(e).__name__}: {e}", flush=True)
                        del paths[path]
                        continue
                    differences[path] = {
                        "policy": float(np.abs(softmax(policy) - reference_policy).max()),
                        "winrate": float(np.abs(softmax(value) - reference_value)[:, 0].max()),
                    }
                rates: dict[str, list[float]] = {path: [] for path in differences}
                round_s = max(0.2, args.seconds / (len(combos) * MIN_ROUNDS * len(rates)))
                for _ in range(MIN_ROUNDS):
                    for path in rates:
                        rates[path].append(_round(paths[path], spatial, global_inputs, round_s))
                medians = {path: statistics.median(values) for path, values in rates.items()}
                key = f"{arch}_b{batch}"
                results[key] = {
                    path: {
                        "evals_per_s": round(medians[path], 1),
                        "ratio": round(medians[path] / medians["export_fp32"], 3),
                        "max_policy_diff": round(differences[path]["policy"], 5),
                        "max_winrate_diff": round(differences[path]["winrate"], 5),
                    }
                    for path in medians
                }
                print(
                    f"  {arch} batch {batch}: "
                    + ", ".join(
                        f"{path} {medians[path]:,.0f}/s ({medians[path] / medians['export_fp32']:.2f}x, "
                        f"max |dp| {differences[path]['policy']:.4f})"
                        for path in medians
                    ),
                    flush=True,
                )
            del paths
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return {"device": name, "board": args.board, "results": results}
