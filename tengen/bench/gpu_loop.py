"""`tengen bench gpu-loop`: what one GPU node gives the loop, the figures a cluster is planned with.

On a CUDA machine, in one run that fits a short lease (`--seconds`, default 420, split between
the parts):
- **export**: an export made by another torch (`--reference DIR`, written on the CPU box by
  `tengen bench gpu-loop --make-reference DIR`: a random net's export, fixed inputs and the outputs
  it gave there) is loaded by this machine's torch and run on the CPU and on the GPU; the largest
  differences from the reference outputs are reported (policy probabilities and winrates).
- **self-play**: the self-play runner in process (tengen.selfplay.runner, the paper preset's
  search and games) with a CUDA evaluator, in P processes at once sharing the one GPU
  (`--processes`, default 1 4 8 16), each process its own games; for each net (`--archs`,
  default the paper's b6c96 and b10c128) and board (`--boards`, default 19 9). Figures: the
  node's positions/s and evals/s, summed over the processes; the ratio is to the bare evaluator
  at the runner's mean batch in the same run (the share of the GPU's throughput self-play keeps).
  `--half` chooses the evaluator: fp16 weights and channels_last (the fused fp16 path of `tengen
  bench gpu`) or the fp32 export under autocast; `auto` times both first and keeps the faster.
- **trainer**: the trainer's full step (window sampling to optimizer step) at the paper's batch
  in fp32, and the bare step under bf16 autocast against fp32 (ratio).
Without a CUDA device it stops with a clear message; `--device cpu` runs every part on the CPU,
small, as a check of the script itself (tests/test_bench_gpu_loop.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tengen.infra.entrypoint import positive_int

DESCRIPTION = "one GPU node for the loop: self-play positions/s in 1-16 processes, trainer samples/s, export check"
REFERENCE_INPUTS = "inputs.npz"
REFERENCE_MODEL = "model.pt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda", help="torch device (default cuda; cpu: a small check run)")
    parser.set_defaults(seconds=360.0)  # the whole run within 8 minutes of a lent machine, start-up included
    parser.add_argument("--archs", nargs="+", default=["b6c96", "b10c128"], help="nets (default b6c96 b10c128)")
    parser.add_argument("--boards", type=int, nargs="+", default=[19, 9], help="board sizes (default 19 9)")
    parser.add_argument("--processes", type=positive_int, nargs="+", default=[1, 4, 8, 16],
                        help="self-play processes sharing the GPU (default 1 4 8 16)")
    parser.add_argument("--games", type=positive_int, default=None,
                        help="games per process (default: the paper preset's selfplay.games_in_parallel)")
    parser.add_argument("--half", choices=["auto", "yes", "no"], default="auto",
                        help="fp16 evaluator (yes), fp32 export under autocast (no), or the faster (auto)")
    parser.add_argument("--train-arch", default="b6c96", help="the trainer's net (default the paper's b6c96)")
    parser.add_argument("--train-batch", type=positive_int, default=256, help="trainer batch (default 256)")
    parser.add_argument("--reference", type=Path, default=None,
                        help="a --make-reference dir to load and compare (default: make one here and use it)")
    parser.add_argument("--make-reference", type=Path, default=None, metavar="DIR",
                        help="only write a reference export with its inputs and outputs into DIR, then stop")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


# ------------------------------------------------------------------ the evaluator on the GPU

class DeviceEvaluator:
    """The served net (tengen.nn.model.InferenceNet) on a torch device, inputs from host memory and
    outputs back, as a server has them; fp16 weights and channels_last with `half`."""

    def __init__(self, net: Any, device: str, half: bool) -> None:
        import torch

        from tengen.nn.evaluator import served_module

        self.device = torch.device(device)
        self.half = half
        module = served_module(net, "normal")[0].to(self.device)
        if half:
            # Module.to takes memory_format (torch's docs), which its type stubs leave out.
            module = module.half().to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.module = module.eval()

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        import torch

        from tengen.nn.evaluator import check_batch
        from tengen.nn.export import OUTPUT_NAMES, complete_outputs

        spatial, global_inputs = check_batch(spatial, globals)
        s = torch.from_numpy(spatial).to(self.device, non_blocking=True)
        g = torch.from_numpy(global_inputs).to(self.device, non_blocking=True)
        if self.half:
            s, g = s.half().contiguous(memory_format=torch.channels_last), g.half()
        with torch.inference_mode():
            outputs = self.module(s, g)
        return complete_outputs({name: out.float().cpu().numpy() for name, out in zip(OUTPUT_NAMES, outputs)})


def _random_inputs(batch: int, board: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, ON_BOARD

    rng = np.random.default_rng(seed)
    spatial = (rng.random((batch, NUM_SPATIAL, board, board)) < 0.2).astype(np.float32)
    spatial[:, ON_BOARD] = 1.0
    return spatial, rng.random((batch, NUM_GLOBAL)).astype(np.float32)


def _bare_evals_per_s(evaluator: DeviceEvaluator, batch: int, board: int, seconds: float) -> float:
    spatial, global_inputs = _random_inputs(batch, board, 0)
    evaluator.evaluate(spatial, global_inputs)  # warm-up (kernels chosen, memory allocated)
    calls, start = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - start < seconds:
        evaluator.evaluate(spatial, global_inputs)
        calls += 1
    return calls * batch / (time.perf_counter() - start)


# ------------------------------------------------------------------ the export across torch versions

def make_reference(directory: Path, seed: int) -> dict[str, Any]:
    """A random b6c96 export with 16 fixed 19x19 inputs and the outputs this torch gives them."""
    import torch

    from tengen.nn.evaluator import TorchEvaluator
    from tengen.nn.export import export_model
    from tengen.nn.model import build_model

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    meta = export_model(build_model("b6c96"), directory / REFERENCE_MODEL, samples_seen=0)
    spatial, global_inputs = _random_inputs(16, 19, seed)
    outputs = TorchEvaluator(directory / REFERENCE_MODEL, precision="fp32").evaluate(spatial, global_inputs)
    np.savez(directory / REFERENCE_INPUTS, spatial=spatial, globals=global_inputs,
             policy=outputs["policy"], value=outputs["value"])
    return {"torch": meta["torch_version"], "dir": str(directory)}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def check_reference(directory: Path, device: str) -> dict[str, Any]:
    """Load the reference export with this torch; its largest differences on CPU and `device`."""
    import torch

    from tengen.nn.export import OUTPUT_NAMES, load_export

    data = np.load(directory / REFERENCE_INPUTS)
    figures: dict[str, Any] = {"torch_here": torch.__version__}
    for where in dict.fromkeys(["cpu", device]):
        module, meta = load_export(directory / REFERENCE_MODEL, device=where)
        with torch.inference_mode():
            outputs = module(torch.from_numpy(data["spatial"]).to(where), torch.from_numpy(data["globals"]).to(where))
        named = {name: out.float().cpu().numpy() for name, out in zip(OUTPUT_NAMES, outputs)}
        figures["torch_of_export"] = meta.get("torch_version")
        figures[f"{where}_policy_max_diff"] = float(np.abs(_softmax(named["policy"]) - _softmax(data["policy"])).max())
        figures[f"{where}_winrate_max_diff"] = float(
            np.abs(_softmax(named["value"])[:, 0] - _softmax(data["value"])[:, 0]).max())
    return figures


# ------------------------------------------------------------------ self-play in P processes

def _selfplay_worker(device: str, tasks: Any, results: Any) -> None:
    """A self-play process of the pool: for each task (arch, board, games, half, start_at, seconds,
    seed) it builds the runner, warms the net up, waits for start_at (time.time(), the same for
    every process of a measurement) and plays for `seconds`; None ends it."""
    import torch

    from tengen.config import load_config
    from tengen.nn.model import build_model
    from tengen.selfplay.game import SelfplaySettings
    from tengen.selfplay.runner import SelfplayRunner

    torch.set_num_threads(1)
    config = load_config("paper")
    evaluators: dict[tuple[str, bool], DeviceEvaluator] = {}
    while (task := tasks.get()) is not None:
        arch, board, games, half, start_at, seconds, seed = task
        torch.manual_seed(seed)
        if (arch, half) not in evaluators:
            evaluators[arch, half] = DeviceEvaluator(build_model(arch), device, half)
        evaluator = evaluators[arch, half]
        evaluator.evaluate(*_random_inputs(min(games, 64), board, seed))  # warm-up before the clock
        settings = dataclasses.replace(SelfplaySettings.from_config(config), board_sizes=[board],
                                       board_size_weights=[1.0])
        runner = SelfplayRunner(evaluator, settings, config.search, games_in_parallel=games,
                                leaves_per_game=config.selfplay.leaves_per_game, seed=seed)
        time.sleep(max(0.0, start_at - time.time()))
        stats = runner.play_for(seconds)
        results.put({"positions_per_s": stats["moves_per_s"], "evals_per_s": stats["leaves_per_s"],
                     "mean_batch": stats["mean_batch"]})


class SelfplayPool:
    """Up to `size` self-play processes (spawned once: CUDA cannot be used in a forked child, and
    starting torch in each is seconds) that measure a node together."""

    START_DELAY_S = 5.0  # for every process to build its runner and warm up before the clock

    def __init__(self, size: int, device: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._tasks = [context.Queue() for _ in range(size)]
        self._results = context.Queue()
        self._workers = [context.Process(target=_selfplay_worker, args=(device, q, self._results), daemon=True)
                         for q in self._tasks]
        for w in self._workers:
            w.start()

    def measure(self, arch: str, board: int, processes: int, games: int, half: bool, seconds: float,
                seed: int) -> dict[str, Any]:
        start_at = time.time() + self.START_DELAY_S
        for k in range(processes):
            self._tasks[k].put((arch, board, games, half, start_at, seconds, seed + k))
        stats = [self._results.get(timeout=seconds + 600) for _ in range(processes)]
        return {
            "processes": processes,
            "positions_per_s": round(sum(s["positions_per_s"] for s in stats), 1),
            "evals_per_s": round(sum(s["evals_per_s"] for s in stats), 1),
            "mean_batch": round(float(np.mean([s["mean_batch"] for s in stats])), 1),
        }

    def close(self) -> None:
        for q in self._tasks:
            q.put(None)
        for w in self._workers:
            w.join(timeout=30)
            if w.is_alive():
                w.terminate()


# ------------------------------------------------------------------ the trainer on the GPU

def trainer_figures(device: str, arch: str, batch_size: int, seconds: float, seed: int) -> dict[str, Any]:
    import torch

    from tengen.bench.train import _measure
    from tengen.config import TrainerConfig
    from tengen.data.synthetic import random_game
    from tengen.loop.rows import rows_from_record
    from tengen.nn.loss import compute_loss
    from tengen.train.learner import Learner, batch_tensors
    from tengen.train.window import Window

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rng = np.random.default_rng(seed)
    config = dataclasses.replace(TrainerConfig(), arch=arch, batch_size=batch_size, min_rows_to_train=0,
                                 samples_per_row=1e12)
    with tempfile.TemporaryDirectory(prefix="tengen-bench-") as tmp:
        window = Window(f"{tmp}/window", 19, c=1_000_000)
        while window.n_total < 2 * batch_size:
            record = random_game(rng, 19, full_search_prob=1.0)
            window.append(record.id, rows_from_record(record, 19))
        learner = Learner(config, window, device=dev, seed=seed)
        full, _ = _measure(learner.step, seconds / 3, batch_size, sync)
        spatial, global_inputs, targets = batch_tensors(window.sample(batch_size, rng, crop=True), dev)
        model, optimizer = learner.model, learner.optimizer

        def step(bf16: bool) -> None:
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                loss = compute_loss(model(spatial, global_inputs), targets, model)["total"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        fp32, _ = _measure(lambda: step(False), seconds / 3, batch_size, sync)
        bf16, _ = _measure(lambda: step(True), seconds / 3, batch_size, sync)
    return {"arch": arch, "board": 19, "batch_size": batch_size, "full_step_samples_per_s": round(full, 1),
            "bare_fp32_samples_per_s": round(fp32, 1), "bare_bf16_samples_per_s": round(bf16, 1),
            "bf16_ratio": round(bf16 / fp32, 3), "pipeline_efficiency": round(full / fp32, 3)}


# ------------------------------------------------------------------ the whole run

def _selfplay_cell(pool: SelfplayPool, arch: str, board: int, games: int, args: argparse.Namespace,
                   per_run: float) -> dict[str, Any]:
    """One net and board: the evaluator's precision, then the node at each process count."""
    from tengen.nn.model import build_model

    net = build_model(arch)
    half = args.half == "yes"
    if args.half == "auto":
        fast = {h: _bare_evals_per_s(DeviceEvaluator(net, args.device, h), min(games, 256), board, per_run / 4)
                for h in (True, False)}
        half = fast[True] >= fast[False]
    cell: dict[str, Any] = {"arch": arch, "board": board, "half": half, "nodes": []}
    for p in args.processes:
        node = pool.measure(arch, board, p, games, half, per_run, args.seed)
        cell["nodes"].append(node)
        print(f"  {arch} {board}x{board} {'fp16' if half else 'fp32'}: {p:2d} processes "
              f"{node['positions_per_s']:9.1f} positions/s {node['evals_per_s']:10.1f} evals/s "
              f"(mean batch {node['mean_batch']})", flush=True)
    best = max(cell["nodes"], key=lambda n: n["evals_per_s"])
    bare = _bare_evals_per_s(DeviceEvaluator(net, args.device, half), max(1, round(best["mean_batch"])), board,
                             per_run / 2)
    cell.update(best_processes=best["processes"], bare_evals_per_s=round(bare, 1),
                ratio_vs_bare=round(best["evals_per_s"] / bare, 3))
    print(f"  {arch} {board}x{board}: best {best['processes']} processes keep {cell['ratio_vs_bare']:.2f} "
          f"of the bare evaluator's {bare:.0f} evals/s", flush=True)
    return cell


def run(args: argparse.Namespace) -> dict:
    import torch

    from tengen.config import load_config

    if args.make_reference is not None:
        made = make_reference(args.make_reference, args.seed)
        print(f"reference export (torch {made['torch']}) with its inputs and outputs in {args.make_reference}")
        return {"made_reference": made}
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"tengen bench gpu-loop: no CUDA device found (torch {torch.__version__}, built for CUDA "
                         f"{torch.version.cuda or 'none'}): run it on a GPU machine, or with --device cpu for a check")
    for board in args.boards:
        if not 7 <= board <= 19:
            raise SystemExit(f"--boards: {board} is outside 7..19")
    games = args.games or load_config("paper").selfplay.games_in_parallel
    if games < 2:
        raise SystemExit("--games must be >= 2 (the runner plays two halves)")
    gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    torch.set_num_threads(1)  # as each self-play process: the bare evaluator is measured like them
    cells = len(args.archs) * len(args.boards)
    per_run = args.seconds * 0.7 / (cells * (len(args.processes) + 1))  # +1: the bare evaluator
    print(f"bench gpu-loop on {gpu}: {games} games a process, {per_run:.0f} s a measurement", flush=True)
    figures: dict[str, Any] = {"device": gpu, "torch": torch.__version__, "games_per_process": games}

    with tempfile.TemporaryDirectory(prefix="tengen-bench-") as tmp:
        reference = args.reference or Path(tmp) / "reference"
        if args.reference is None:
            make_reference(reference, args.seed)
        figures["export"] = check_reference(reference, args.device)
        print(f"export of torch {figures['export']['torch_of_export']} under torch {torch.__version__}: "
              + ", ".join(f"{k} {v:.2e}" for k, v in figures["export"].items() if k.endswith("diff")), flush=True)

    selfplay = []
    pool = SelfplayPool(max(args.processes), args.device)
    try:
        for arch in args.archs:
            for board in args.boards:
                selfplay.append(_selfplay_cell(pool, arch, board, games, args, per_run))
    finally:
        pool.close()
    figures["selfplay"] = selfplay
    figures["trainer"] = trainer_figures(args.device, args.train_arch, args.train_batch, args.seconds * 0.2,
                                         args.seed)
    t = figures["trainer"]
    print(f"trainer {t['arch']} 19x19 batch {t['batch_size']}: full step {t['full_step_samples_per_s']} samples/s; "
          f"bare bf16 / fp32 = {t['bf16_ratio']}", flush=True)
    return figures
