"""`tengen bench features`: input-feature encoding speed on 19x19 mid-game positions.

The engine's `tengen.go.features.encode` writes all 18 planes and 10 globals (ladder reads for the
position now and 1 and 2 turns ago included) into a reused float32 buffer. The baseline, in the
same run and on the same positions, is a plain numpy/Python encoding of only the on-board, stone
and liberty planes (flood fill per chain) from `Board.stones()`: the simplest thing one would
write without the compiled encoder. Positions are random legal games of `--moves` moves.
"""
from __future__ import annotations

import argparse
import random
import time

import numpy as np

from tengen.infra.entrypoint import positive_int

DESCRIPTION = "feature encoding of 19x19 mid-game positions: encode() vs numpy stones+liberties"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--positions", type=positive_int, default=64, help="positions to cycle through (default 64)")
    parser.add_argument("--moves", type=positive_int, default=150, help="moves into each game (default 150)")


def _positions(count: int, moves: int, seed: int) -> list[tuple]:
    """(board, board 1 turn ago, board 2 turns ago) after `moves` random legal moves."""
    from tengen.go.board import Board

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        history = [Board(19)]
        for _ in range(moves):
            board = history[-1].copy()
            legal = np.flatnonzero(board.legal_moves()[:-1])
            board.play(int(rng.choice(legal)) if len(legal) else board.pass_move)
            history = history[-2:] + [board]
        out.append((history[-1], history[-2], history[-3]))
    return out


def numpy_stone_planes(stones: np.ndarray, to_move: int, out: np.ndarray) -> None:
    """Baseline: on-board, own/opponent stones and 1/2/3-liberty planes in numpy and Python."""
    h, w = stones.shape
    out[:] = 0
    out[0, :h, :w] = 1
    out[1, :h, :w] = stones == to_move
    out[2, :h, :w] = stones == 3 - to_move
    seen = np.zeros((h, w), bool)
    for y0, x0 in zip(*np.nonzero(stones)):
        if seen[y0, x0]:
            continue
        color = stones[y0, x0]
        chain, libs, todo = [], set(), [(y0, x0)]
        seen[y0, x0] = True
        while todo:
            y, x = todo.pop()
            chain.append((y, x))
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < h and 0 <= nx < w:
                    if stones[ny, nx] == 0:
                        libs.add((ny, nx))
                    elif stones[ny, nx] == color and not seen[ny, nx]:
                        seen[ny, nx] = True
                        todo.append((ny, nx))
        if len(libs) <= 3:
            ys, xs = zip(*chain)
            out[2 + len(libs), list(ys), list(xs)] = 1


def _rate(fn, positions: list, seconds: float) -> tuple[int, float]:
    """Calls of fn over the positions (cycling) until `seconds` pass; (calls, elapsed)."""
    calls = 0
    start = time.perf_counter()
    while calls == 0 or time.perf_counter() - start < seconds:
        for item in positions:
            fn(item)
        calls += len(positions)
    return calls, time.perf_counter() - start


def run(args: argparse.Namespace) -> dict:
    from tengen.go import planes
    from tengen.go.features import encode

    positions = _positions(args.positions, args.moves, args.seed)
    spatial = np.zeros((planes.NUM_SPATIAL, 19, 19), np.float32)
    global_ = np.zeros(planes.NUM_GLOBAL, np.float32)
    baseline_out = np.zeros((6, 19, 19), np.float32)
    stones_now = sum(int(np.count_nonzero(b.stones())) for b, _, _ in positions) / len(positions)
    print(f"{len(positions)} positions, {args.moves} random moves in, "
          f"{stones_now:.0f} stones on average", flush=True)

    budget = args.seconds / 3
    calls, elapsed = _rate(lambda p: encode(p[0], spatial, global_, p[1], p[2]), positions, budget)
    full_rate = calls / elapsed
    print(f"encode (all planes, ladders now/-1/-2): {full_rate:,.0f} calls/s "
          f"({1e6 / full_rate:.1f} us/call)", flush=True)
    calls, elapsed = _rate(lambda p: encode(p[0], spatial, global_), positions, budget)
    no_history_rate = calls / elapsed
    print(f"encode (no previous boards given): {no_history_rate:,.0f} calls/s "
          f"({1e6 / no_history_rate:.1f} us/call)", flush=True)
    calls, elapsed = _rate(
        lambda p: numpy_stone_planes(p[0].stones(), p[0].to_move, baseline_out), positions, budget
    )
    baseline_rate = calls / elapsed
    print(f"baseline numpy/Python stones + liberties only: {baseline_rate:,.0f} calls/s "
          f"({1e6 / baseline_rate:.1f} us/call)", flush=True)
    ratio = full_rate / baseline_rate
    print(f"ratio encode / baseline: {ratio:.1f}x", flush=True)
    return {
        "encode_per_s_19": round(full_rate, 1),
        "encode_no_history_per_s_19": round(no_history_rate, 1),
        "baseline_per_s_19": round(baseline_rate, 1),
        "ratio_vs_numpy_19": round(ratio, 2),
    }
