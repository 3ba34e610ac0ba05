"""`tengen bench nn`: tengen's CPU inference paths against Leela Zero at equal net on the same cores.

Leela Zero 0.17 (Debian's `leela-zero` package) plays only 19x19, so the comparison is on 19x19
with tengen's 6-block, 96-channel net (b6c96) against a Leela Zero net of the same size: the bench
writes random weights in Leela Zero's text format (6 blocks x 96 channels) to a temporary file.
Leela Zero runs as `leelaz --cpu-only -t THREADS --noponder -v VISITS --gtp`; each of its rounds is
a fresh process (its NN cache survives `clear_board`, so a second search of the same position is
mostly cache hits) playing one `genmove` from the empty board, and its figure is the n/s it
prints at the end of the search.

tengen's paths, each timed in rounds that alternate with Leela Zero's so load from other work on
the machine hits all alike:
- `torch_fp32`, `torch_bf16`, `openvino_fp32`, `openvino_bf16`: the bare in-process evaluators
  (tengen.nn.evaluator; random weights) at the batch self-play sends, one call after another;
- `runner`: the self-play runner (tengen.selfplay.runner) with the default evaluator
  (make_evaluator: OpenVINO, bf16 where the CPU has it), at the preset's games in parallel: the
  runner's batch is half of them times the leaves each game adds, the batch `make run`'s
  self-play sends.
A path's figure is its median round; ratio = path / Leela Zero.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

DESCRIPTION = "evals/s of tengen's CPU inference paths (torch, OpenVINO; fp32, bf16; self-play runner) vs Leela Zero"
DEBIAN_LEELAZ = "/usr/games/leelaz"
LEELAZ_HINT = ("Leela Zero is not installed: on Debian/Ubuntu `apt-get install leela-zero` (it installs "
               "/usr/games/leelaz), or pass --leelaz PATH. Reporting tengen alone.")
LZ_RATE = re.compile(r"(\d+) visits, \d+ nodes, \d+ playouts, (\d+) n/s")
MIN_ROUNDS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", default="b6c96", help="tengen net (default b6c96, Leela Zero's 6x96)")
    parser.add_argument("--board", type=int, default=19, help="board size (default 19: Leela Zero's only size)")
    parser.add_argument("--preset", default="cpu",
                        help="preset whose games in parallel and search set the runner (default cpu)")
    parser.add_argument("--threads", type=int, default=2, help="threads of both engines (default 2)")
    parser.add_argument("--leelaz", default=None, help="the leelaz binary (default: on PATH or /usr/games/leelaz)")
    parser.add_argument("--visits", type=int, default=1600, help="Leela Zero visits per round (default 1600)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


def find_leelaz(explicit: str | None) -> str | None:
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return shutil.which("leelaz") or (DEBIAN_LEELAZ if Path(DEBIAN_LEELAZ).is_file() else None)


def write_leelaz_weights(path: Path, blocks: int, channels: int, seed: int) -> None:
    """Random weights in Leela Zero's version-1 text format: a "1" line, then per layer one line
    per tensor (conv: weights, biases, batch-norm means, batch-norm variances; fully connected:
    weights, biases): the input conv, 2 convs per residual block, the policy head (1x1 conv to 2
    planes, fc to 362) and the value head (1x1 conv to 1 plane, fc to 256, fc to 1)."""
    rng = np.random.default_rng(seed)
    lines = ["1"]

    def floats(values: np.ndarray) -> str:
        return " ".join(f"{v:.4g}" for v in values)

    def conv(cin: int, cout: int, k: int) -> None:
        lines.append(floats(rng.normal(0.0, (2.0 / (cin * k * k)) ** 0.5, cin * cout * k * k)))
        lines.append(floats(np.zeros(cout)))
        lines.append(floats(rng.normal(0.0, 0.1, cout)))
        lines.append(floats(rng.uniform(0.5, 1.5, cout)))

    def fc(n_in: int, n_out: int) -> None:
        lines.append(floats(rng.normal(0.0, (1.0 / n_in) ** 0.5, n_in * n_out)))
        lines.append(floats(np.zeros(n_out)))

    conv(18, channels, 3)
    for _ in range(2 * blocks):
        conv(channels, channels, 3)
    conv(channels, 2, 1)
    fc(2 * 361, 362)
    conv(channels, 1, 1)
    fc(361, 256)
    fc(256, 1)
    path.write_text("\n".join(lines) + "\n")


class LeelaZero:
    """One leelaz GTP process; `round()` plays a genmove from the empty board and returns its n/s."""

    def __init__(self, binary: str, weights: Path, threads: int, visits: int) -> None:
        self.proc = subprocess.Popen(
            [binary, "--cpu-only", "-t", str(threads), "--noponder", "-v", str(visits), "--gtp", "-w", str(weights)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._rates: list[float] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self._busy = False  # a command sent and its answer not yet read
        try:
            self._command("boardsize 19")
        except BaseException:
            # Interrupted (or failed) before the caller holds this object to close it.
            self.close()
            raise

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            match = LZ_RATE.search(line)
            if match:
                with self._seen:
                    self._rates.append(float(match.group(2)))
                    self._seen.notify_all()

    def _command(self, text: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._busy = True
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        lines: list[str] = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"leelaz exited ({self.proc.poll()}) after {text!r}")
            if line.strip() == "" and lines:
                break
            if line.strip():
                lines.append(line.strip())
        self._busy = False
        if not lines[0].startswith("="):
            raise RuntimeError(f"leelaz answered {text!r} with {lines[0]!r}")
        return lines[0]

    def round(self) -> float:
        count = len(self._rates)
        self._command("clear_board")
        self._command("genmove b")
        with self._seen:
            if not self._seen.wait_for(lambda: len(self._rates) > count, timeout=30):
                raise RuntimeError("leelaz printed no n/s line after its search")
            return self._rates[-1]

    def close(self) -> None:
        """`quit`, or a kill at once when a command was cut short (a signal in the middle of a
        genmove): leelaz reads no command until its search ends, half a minute at many visits."""
        if self._busy:
            self.proc.kill()
        else:
            try:
                self._command("quit")
            except (RuntimeError, OSError):
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def random_inputs(batch: int, board: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A batch of random positions on an all-on-board `board`x`board`: stones on a fifth of the
    points of every plane, random global inputs."""
    from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, ON_BOARD

    rng = np.random.default_rng(seed)
    spatial = (rng.random((batch, NUM_SPATIAL, board, board)) < 0.2).astype(np.float32)
    spatial[:, ON_BOARD] = 1.0
    return spatial, rng.random((batch, NUM_GLOBAL)).astype(np.float32)


def _bare_round(evaluator, spatial: np.ndarray, global_inputs: np.ndarray, seconds: float) -> float:
    calls, start = 0, time.perf_counter()
    while calls < 2 or time.perf_counter() - start < seconds:
        evaluator.evaluate(spatial, global_inputs)
        calls += 1
    return calls * len(spatial) / (time.perf_counter() - start)


def run(args: argparse.Namespace) -> dict:
    import torch

    from tengen.config import load_config
    from tengen.nn.evaluator import Evaluator, OpenVINOEvaluator, TorchEvaluator, make_evaluator
    from tengen.nn.model import ARCHITECTURES, build_model
    from tengen.selfplay.game import SelfplaySettings
    from tengen.selfplay.runner import SelfplayRunner

    if not 7 <= args.board <= 19 or args.threads < 1 or args.visits < 1:
        raise SystemExit("--board must be within 7..19, --threads and --visits >= 1")
    config = load_config(args.preset)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    net = build_model(args.arch)
    games = config.selfplay.games_in_parallel
    settings = dataclasses.replace(SelfplaySettings.from_config(config), board_sizes=[args.board],
                                   board_size_weights=[1.0])
    default = make_evaluator(net, args.threads)
    runner = SelfplayRunner(default, settings, config.search, games_in_parallel=games,
                            leaves_per_game=config.selfplay.leaves_per_game, seed=args.seed)
    batch = (games // 2) * runner.leaves_per_game
    spatial, global_inputs = random_inputs(batch, args.board, args.seed)
    bare: dict[str, Evaluator] = {f"torch_{p}": TorchEvaluator(net, args.threads, precision=p)
                                  for p in ("fp32", "bf16")}
    bare.update({f"openvino_{p}": OpenVINOEvaluator(net, args.threads, precision=p) for p in ("fp32", "bf16")})
    print(f"{args.arch} (random weights), {args.board}x{args.board}, {args.threads} threads; batch {batch} "
          f"({games} games in parallel at preset {args.preset}); the runner's evaluator: {type(default).__name__} "
          f"{'bf16' if default.bf16 else 'fp32'}", flush=True)

    binary = find_leelaz(args.leelaz)
    arch = ARCHITECTURES[args.arch]
    weights: Path | None = None
    tmp = tempfile.TemporaryDirectory(prefix="tengen-bench-nn-")
    try:
        if binary is None:
            print(LEELAZ_HINT, flush=True)
        elif args.board != 19:
            print("Leela Zero plays only 19x19: reporting tengen alone at this board size", flush=True)
        else:
            weights = Path(tmp.name) / f"random-{arch.blocks}x{arch.channels}.txt"
            write_leelaz_weights(weights, arch.blocks, arch.channels, args.seed)
            print(f"Leela Zero: {binary} --cpu-only -t {args.threads} -v {args.visits}, random "
                  f"{arch.blocks}x{arch.channels} weights", flush=True)
        paths = [*bare, "runner"]
        rates: dict[str, list[float]] = {name: [] for name in paths + (["leelaz"] if weights else [])}
        batches: list[float] = []
        round_s = max(0.5, args.seconds / (MIN_ROUNDS * (len(paths) + (2 if weights else 0))))
        start = time.monotonic()
        rounds = 0
        while rounds < MIN_ROUNDS or time.monotonic() - start < args.seconds:
            rounds += 1
            for name, evaluator in bare.items():
                rates[name].append(_bare_round(evaluator, spatial, global_inputs, round_s))
            stats = runner.play_for(round_s)
            rates["runner"].append(stats["leaves_per_s"])
            batches.append(stats["mean_batch"])
            if binary is not None and weights is not None:
                leela = LeelaZero(binary, weights, args.threads, args.visits)
                try:
                    rates["leelaz"].append(leela.round())
                finally:
                    leela.close()
            print(f"  round {rounds}: " + ", ".join(f"{name} {values[-1]:.0f}" for name, values in rates.items()),
                  flush=True)
    finally:
        tmp.cleanup()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    figures: dict = {"arch": args.arch, "board": args.board, "threads": args.threads, "batch": batch,
                     "runner_mean_batch": round(statistics.median(batches), 1), "rounds": rounds}
    for name, value in medians.items():
        figures[f"{name}_evals_per_s"] = round(value, 1)
    print(" | ".join(f"{name} {value:.0f} evals/s" for name, value in medians.items()), flush=True)
    if "leelaz" in medians:
        for name in paths:
            figures[f"ratio_{name}_vs_leelaz"] = round(medians[name] / medians["leelaz"], 3)
        print("vs Leela Zero: " + ", ".join(f"{name} {figures[f'ratio_{name}_vs_leelaz']:.2f}x" for name in paths),
              flush=True)
    figures["ratio_best_vs_torch_fp32"] = round(max(medians[name] for name in bare) / medians["torch_fp32"], 3)
    return figures
