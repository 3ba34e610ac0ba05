"""`tengen bench selfplay`: positions/s and games/h of the whole self-play runner, in process.

The runner (tengen.selfplay.runner.SelfplayRunner) plays `--games` 9x9 games at once with the
preset's search settings (default `cpu`: 200/40 visits, p = 0.25, 32 games) against a randomly
initialised net (default b6c96) through the in-process TorchEvaluator: tree work, features, the
two halves' batches in flight, game logic and GameRecords, everything but Kafka.

Baseline, in the same run: the same TorchEvaluator on its own, evaluating batches of the size the
runner actually sent (its mean batch), called as the runner calls it (two worker threads, two
batches in flight). The ratio runner evals/s / bare
evals/s is the share of the evaluator's throughput the runner keeps: 1.0 would mean search costs
nothing on top of inference (everything overlapped), lower means the evaluator waited on tree work.

Positions/s counts every move played (fast and full searches, opening and branch moves). Games/h
is positions/s over the mean length of the games that finished in the run, and recorded
positions/s (full-search turns, the training rows) positions/s times their share in those games.
All games start together, so none finish in a short run: on a small CPU box a 9x9 game with
b6c96 takes minutes, so give it several hundred --seconds (or fewer --games) for those two.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import threading
import time

import numpy as np

DESCRIPTION = "whole self-play runner on 9x9 with b6c96 in process: positions/s, games/h vs bare evaluator evals/s"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="cpu", help="config preset for search and game settings (default cpu)")
    parser.add_argument("--arch", default="b6c96", help="net size, random weights (default b6c96)")
    parser.add_argument("--board", type=int, default=9, help="board size (default 9)")
    parser.add_argument("--games", type=int, default=None,
                        help="games in parallel (default: the preset's selfplay.games_in_parallel)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: this process's torch setting)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


def _bare_evals_per_s(evaluator, batch: int, board: int, seconds: float) -> float:
    """Evaluations/s of the evaluator alone at a fixed batch size, called the way the runner calls
    it: from two worker threads, two batches in flight (inputs: a full board)."""
    from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, ON_BOARD

    rng = np.random.default_rng(0)
    spatial = (rng.random((batch, NUM_SPATIAL, board, board)) < 0.2).astype(np.float32)
    spatial[:, ON_BOARD] = 1.0
    global_inputs = rng.random((batch, NUM_GLOBAL)).astype(np.float32)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        pool.submit(evaluator.evaluate, spatial, global_inputs).result()  # warm-up
        calls = 0
        start = time.perf_counter()
        in_flight = [pool.submit(evaluator.evaluate, spatial, global_inputs) for _ in range(2)]
        while in_flight:
            in_flight.pop(0).result()
            calls += 1
            if calls < 3 or time.perf_counter() - start < seconds:
                in_flight.append(pool.submit(evaluator.evaluate, spatial, global_inputs))
        return calls * batch / (time.perf_counter() - start)


def run(args: argparse.Namespace) -> dict:
    import torch

    from tengen.config import load_config
    from tengen.nn.evaluator import TorchEvaluator
    from tengen.nn.model import build_model
    from tengen.selfplay.game import SelfplaySettings
    from tengen.selfplay.runner import SelfplayRunner

    if not 7 <= args.board <= 19:
        raise SystemExit("--board must be within 7..19")
    config = load_config(args.preset)
    games = args.games if args.games is not None else config.selfplay.games_in_parallel
    if games < 2:
        raise SystemExit("--games must be >= 2 (the runner plays two halves)")
    torch.manual_seed(args.seed)
    evaluator = TorchEvaluator(build_model(args.arch), num_threads=args.threads)
    settings = dataclasses.replace(SelfplaySettings.from_config(config), board_sizes=[args.board],
                                   board_size_weights=[1.0])
    runner = SelfplayRunner(evaluator, settings, config.search, games_in_parallel=games,
                            leaves_per_game=config.selfplay.leaves_per_game, seed=args.seed)
    print(f"{args.arch} (random weights), {args.board}x{args.board}, {games} games in parallel, "
          f"visits {settings.full_visits}/{settings.fast_visits} at p = {settings.full_search_prob}, "
          f"torch threads {torch.get_num_threads()}", flush=True)

    runner_share = args.seconds * 0.7
    stop = threading.Event()
    timer = threading.Timer(runner_share, stop.set)
    lengths: list[int] = []
    full_turns = 0
    timer.start()
    try:
        for record in runner.run(None, stop=stop):
            lengths.append(len(record.moves))
            full_turns += sum(1 for m in record.moves if m.full_search)
            print(f"  game {len(lengths)} finished: {len(record.moves)} moves, {record.result}", flush=True)
    finally:
        timer.cancel()
    stats = runner.stats.as_dict()
    positions_per_s = stats["moves_per_s"]
    evals_per_s = stats["leaves_per_s"]
    mean_batch = stats["mean_batch"]
    print(
        f"runner : {positions_per_s:8.1f} positions/s {evals_per_s:8.1f} evals/s, mean batch {mean_batch:.1f}, "
        f"main thread waited on the evaluator {stats['eval_wait_s'] / stats['elapsed_s']:.0%} "
        f"of {stats['elapsed_s']:.1f} s",
        flush=True,
    )
    games_per_h = recorded_per_s = None
    if lengths:
        mean_length = sum(lengths) / len(lengths)
        games_per_h = positions_per_s * 3600 / mean_length
        recorded_per_s = positions_per_s * full_turns / sum(lengths)
        print(
            f"runner : {games_per_h:8.1f} games/h at {mean_length:.0f} moves per game, "
            f"{recorded_per_s:.2f} recorded positions/s ({len(lengths)} games finished)",
            flush=True,
        )
    else:
        print("runner : no game finished in the time given; run longer for games/h", flush=True)

    batch = max(1, round(mean_batch))
    bare = _bare_evals_per_s(evaluator, batch, args.board, args.seconds * 0.3)
    ratio = evals_per_s / bare
    print(f"bare evaluator at batch {batch}: {bare:8.1f} evals/s; runner keeps {ratio:.2f} of it", flush=True)
    return {
        "arch": args.arch,
        "board": args.board,
        "games_in_parallel": games,
        "positions_per_s": round(positions_per_s, 2),
        "recorded_positions_per_s": round(recorded_per_s, 2) if recorded_per_s is not None else None,
        "games_per_h": round(games_per_h, 1) if games_per_h is not None else None,
        "games_finished": len(lengths),
        "runner_evals_per_s": round(evals_per_s, 1),
        "mean_batch": round(mean_batch, 1),
        "bare_evals_per_s": round(bare, 1),
        "ratio_vs_bare_evaluator": round(ratio, 3),
    }
