"""`tengen models export`: a version (or an export file) as files for use outside tengen.

- `--onnx FILE`: the net as ONNX (tengen.nn.export.export_onnx, the converter of the Triton
  path's GPU backend), run on real positions by ONNX Runtime (OpenVINO's ONNX reader where ONNX
  Runtime is not installed) and held to the TorchScript export with the Triton path's test
  (tengen.gate.promotion.agree); a copy that fails it is not written.
- `--weights FILE`: the net's weights as a plain PyTorch state_dict of tengen.nn.model.InferenceNet
  (tengen.nn.export.write_weights), checked the same way after loading them into the model class.

Each file gets a `<file>.json` sidecar: the export's (architecture, board sizes, samples seen,
inputs and outputs) with the format, the source and the check's largest differences. How to use
the files without tengen: docs/gtp-and-analysis.md, "Using a net outside tengen".
"""
from __future__ import annotations

import argparse
import os
import random
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tengen.commands import CommandError

Outputs = dict[str, np.ndarray]
Runner = Callable[[np.ndarray, np.ndarray], Outputs]

CHECK_SIZES = (7, 9, 13, 19)  # the export is scripted for every size; a check on each end and between
POSITIONS_PER_SIZE = 8
CHECK_SEED = 20261201


def game_positions(seed: int = CHECK_SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches of encoded positions from random legal games (captures, ko, passes, the history
    planes), one batch per size of CHECK_SIZES taken along one game each, and one batch of 7x7
    and 9x9 positions padded into 9x9 as mixed board sizes share a batch."""
    from tengen.go.board import Board
    from tengen.go.rules import CHINESE, TROMP_TAYLOR
    from tengen.gtp.analysis import encode_batch

    rng = random.Random(seed)
    by_size: dict[int, list[tuple[Board, Board | None, Board | None]]] = {}
    for size in CHECK_SIZES:
        board = Board(size, size, rng.choice((CHINESE, TROMP_TAYLOR)), rng.choice((7.5, 6.0, -3.5)))
        history: list[Board] = []
        moves = int(0.9 * size * size)
        keep = {round(i * moves / POSITIONS_PER_SIZE) for i in range(POSITIONS_PER_SIZE)}
        positions: list[tuple[Board, Board | None, Board | None]] = []
        for move in range(moves):
            if move in keep:
                positions.append((board, history[-1] if history else None, history[-2] if len(history) > 1 else None))
            legal = np.flatnonzero(board.legal_moves()[:-1])
            history.append(board)
            board = board.copy()
            board.play(int(rng.choice(legal)) if len(legal) and rng.random() > 0.03 else board.pass_move)
        by_size[size] = positions
    batches = [encode_batch(by_size[size]) for size in CHECK_SIZES]
    batches.append(encode_batch(by_size[7][::2] + by_size[9][1::2], side=9))
    return batches


def onnx_runner(path: Path) -> tuple[str, Runner]:
    """What runs the ONNX file on the CPU in fp32, named, and its runner: ONNX Runtime where it is
    installed (what most programs load ONNX with), else OpenVINO's ONNX reader (a dependency)."""
    from tengen.nn.export import OUTPUT_NAMES

    try:
        import onnxruntime
    except ImportError:
        import openvino

        from tengen.nn.evaluator import no_openvino_telemetry

        core = openvino.Core()
        with no_openvino_telemetry():
            compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()

        def run_openvino(spatial: np.ndarray, global_inputs: np.ndarray) -> Outputs:
            # By position: OpenVINO may rename an output (ownership comes back as a Squeeze's name).
            found = request.infer({"spatial": spatial, "globals": global_inputs})
            return {name: np.asarray(found[out]) for name, out in zip(OUTPUT_NAMES, compiled.outputs)}

        return f"OpenVINO {openvino.__version__}", run_openvino
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def run_onnxruntime(spatial: np.ndarray, global_inputs: np.ndarray) -> Outputs:
        return dict(zip(names, session.run(names, {"spatial": spatial, "globals": global_inputs})))

    return f"ONNX Runtime {onnxruntime.__version__}", run_onnxruntime


def compare(expected: list[Outputs], copy: Runner,
            batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[dict[str, float], list[str]]:
    """The copy's largest absolute difference from the export per output over the batches, and
    the outputs the Triton path's test (tengen.gate.promotion.agree) finds different anywhere.
    An output the copy lacks counts as different."""
    from tengen.gate.promotion import agree

    largest: dict[str, float] = {}
    differ: set[str] = set()
    for want, (spatial, global_inputs) in zip(expected, batches):
        got = copy(spatial, global_inputs)
        for name, reference in want.items():
            if name not in got or got[name].shape != reference.shape:
                differ.add(name)
                continue
            largest[name] = max(largest.get(name, 0.0), float(np.abs(got[name] - reference).max()))
            if not agree(name, got[name], reference):
                differ.add(name)
    return largest, sorted(differ)


def _check_record(runtime: str, largest: dict[str, float], batches: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    return {"against": "the TorchScript export", "runtime": runtime,
            "positions": sum(len(spatial) for spatial, _ in batches),
            "boards": [*(f"{size}x{size}" for size in CHECK_SIZES), "7x7 and 9x9 in one batch"],
            "max_abs_difference": {name: float(f"{value:.3g}") for name, value in largest.items()}}


def _describe(check: dict) -> str:
    differences = ", ".join(f"{name} {value:.2g}" for name, value in check["max_abs_difference"].items())
    return (f"checked with {check['runtime']} against the TorchScript export on {check['positions']} positions "
            f"of random games ({', '.join(check['boards'])}); largest differences: {differences}")


def _check_passes(what: str, largest: dict[str, float], differ: list[str]) -> None:
    if differ:
        shown = ", ".join(f"{name} {largest[name]:.2g}" if name in largest else f"{name} missing" for name in differ)
        raise CommandError(f"{what} answers otherwise than the TorchScript export on real positions ({shown}); "
                           "nothing written")


def _write_onnx(source: Path, out: Path, metadata: dict[str, Any], expected: list[Outputs],
                batches: list[tuple[np.ndarray, np.ndarray]]) -> None:
    from tengen.nn.export import ONNX_FORMAT, ONNX_OPSET, export_onnx, publish

    unchecked = out.with_name(f".{out.name}.unchecked")
    try:
        export_onnx(source, unchecked)
        runtime, run = onnx_runner(unchecked)
        largest, differ = compare(expected, run, batches)
        _check_passes(f"the ONNX copy of {source}", largest, differ)
        check = _check_record(runtime, largest, batches)
        publish(unchecked, out, {**metadata, "format": ONNX_FORMAT, "onnx_opset": ONNX_OPSET,
                                 "source": str(source), "check": check})
    finally:
        unchecked.unlink(missing_ok=True)
    print(f"wrote {out} (+ {out.name}.json): ONNX opset {ONNX_OPSET}, {_describe(check)}")


def _write_weights(module: Any, source: Path, out: Path, metadata: dict[str, Any], expected: list[Outputs],
                   batches: list[tuple[np.ndarray, np.ndarray]]) -> None:
    import torch

    from tengen.nn.evaluator import TorchEvaluator
    from tengen.nn.export import served_net, write_weights

    net = served_net(module, metadata)
    largest, differ = compare(expected, TorchEvaluator(net, precision="fp32").evaluate, batches)
    _check_passes(f"the weights of {source} in tengen.nn.model.InferenceNet", largest, differ)
    check = _check_record(f"PyTorch {torch.__version__} (InferenceNet loaded with the weights)", largest, batches)
    write_weights(net, out, {**metadata, "source": str(source), "check": check})
    print(f"wrote {out} (+ {out.name}.json): the state_dict of tengen.nn.model.InferenceNet, {_describe(check)}")


def _outputs_to_write(args: argparse.Namespace, source: Path) -> list[Path]:
    from tengen.nn.export import sidecar_path

    outs = [path for path in (args.onnx, args.weights) if path is not None]
    if not outs:
        raise CommandError("nothing to write: give --onnx FILE, --weights FILE or both")
    if len(outs) == 2 and Path(os.path.abspath(outs[0])) == Path(os.path.abspath(outs[1])):
        raise CommandError(f"--onnx and --weights name the same file {outs[0]}")
    for out in outs:
        if out.is_dir():
            raise CommandError(f"{out} is a directory; give the file's name, e.g. {out / 'model.onnx'}")
        if out.exists() and out.resolve() == source.resolve():
            raise CommandError(f"{out} is the export itself; give another file name")
        if (out.exists() or sidecar_path(out).exists()) and not args.force:
            raise CommandError(f"{out} already exists; pass --force to overwrite it")
    return outs


def export(args: argparse.Namespace) -> int:
    from tengen.commands.models import repository_path, resolve_export, settings
    from tengen.nn.evaluator import TorchEvaluator
    from tengen.nn.export import load_export

    source, _ = resolve_export(args.source, repository_path(args), args.model or settings(args).run.model_name)
    outs = _outputs_to_write(args, source)
    try:
        module, metadata = load_export(source)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:  # RuntimeError: not TorchScript
        raise CommandError(f"{source} is not a tengen export: {str(exc).strip().splitlines()[0]}") from None
    arch = metadata.get("architecture", {}).get("name", "?")
    print(f"exporting {source} ({arch}, {metadata.get('samples_seen', 0):,} samples seen)", flush=True)
    batches = game_positions()
    reference = TorchEvaluator(module, precision="fp32")
    expected = [reference.evaluate(spatial, global_inputs) for spatial, global_inputs in batches]
    for out in outs:
        out.parent.mkdir(parents=True, exist_ok=True)
    if args.onnx is not None:
        _write_onnx(source, args.onnx, metadata, expected, batches)
    if args.weights is not None:
        _write_weights(module, source, args.weights, metadata, expected, batches)
    return 0


def register(actions: argparse._SubParsersAction) -> None:
    from tengen.commands.models import VERSION_MODEL_HELP, add_repository_arguments

    parser = actions.add_parser(
        "export", help="a version as ONNX (checked against the export) or as a plain weights file",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", metavar="VERSION|FILE",
                        help="a version number of the model (<data-dir>/models/<model>/<N>/model.pt) or an export "
                        "file (TorchScript with its .json sidecar)")
    parser.add_argument("--onnx", type=Path, default=None, metavar="FILE",
                        help="write the net as ONNX here (inputs spatial, globals; outputs as the export's)")
    parser.add_argument("--weights", type=Path, default=None, metavar="FILE",
                        help="write the net's state_dict here (torch.save; read with torch.load(weights_only=True))")
    parser.add_argument("--model", default=None, help=VERSION_MODEL_HELP)
    add_repository_arguments(parser)
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    parser.set_defaults(func=export, preset=None)
