"""`tengen bench mcts`: playouts/s of the search alone (constant evaluator), Cython tree vs Python.

What one playout does, in both searches: descend from the root by PUCT (c = 1.1, FPU reduction
0.2) playing each chosen move on a copy of the root board, then at the leaf either score a
finished game (two passes, or every point pass-alive: rules-engine scoring) or write the leaf's
input features (tengen.go.features, all 18 planes and 10 globals) and take its evaluation, make
the leaf's legal moves its children, and back the value up to the root.

- Engine: `tengen.search.mcts.Tree` (C arenas, lazy child ordering, leaves gathered 8 at a time
  with virtual loss, as the self-play runner does). The NN cache is off, so every leaf costs its
  features: the figure is the tree's own cost, not the cache's.
- Baseline (the headline ratio), in the same run on the same positions: a straightforward
  pure-Python PUCT search (a node object per position, children in a list scanned in full at
  every step, one leaf at a time) whose board (captures, ko, superko, legality) and leaf features
  (the same planes, ladders and pass-alive areas included) are Python too: bench/pygo.py.
- Second baseline: the same Python search playing on the compiled `tengen.go.board.Board` and
  encoding with the compiled encoder. That ratio measures the search code alone: both sides pay
  the same rules engine and feature costs.

The evaluator is a constant: uniform policy, even value, score 0 (no net time is measured).
Searches start from positions a few random moves into games (0 to half the board's area moves),
`--visits` visits each, cycling through them. The three searches take turns in 3 rounds each, so
load from other jobs on the machine hits all of them alike. The pure-Python search is too slow to
finish many searches in its share, so it gives each start position an equal slice of the share
(its searches stop at the visits or at the slice's end): every position weighs in its rate.
"""
from __future__ import annotations

import argparse
import importlib
import math
import random
import time

import numpy as np

DESCRIPTION = ("search alone (constant evaluator), 9x9 and 19x19: Cython MCTS vs pure-Python PUCT "
               "(Python board and features; and on the compiled ones), playouts/s")

CPUCT = 1.1
FPU_REDUCTION = 0.2
SCORE_UTILITY_WEIGHT = 0.5
LEAVES_PER_BATCH = 8
ROUNDS = 3  # measurement rounds per search, alternated so outside load hits all three alike


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="random seed for the positions (default 1)")
    parser.add_argument("--visits", type=int, default=400, help="visits per search (default 400)")
    parser.add_argument("--positions", type=int, default=8, help="start positions per board size (default 8)")
    parser.add_argument("--sizes", default="9,19", help="board sizes, comma separated (default 9,19)")


def _positions(size: int, count: int, seed: int) -> list:
    """Boards after 0 .. area/2 random legal moves (evenly spread), never a finished game."""
    from tengen.go.board import Board

    rng = random.Random(seed * 1000 + size)
    out = []
    for i in range(count):
        board = Board(size)
        for _ in range(i * size * size // (2 * max(count - 1, 1))):
            legal = np.flatnonzero(board.legal_moves()[:-1])
            board.play(int(rng.choice(legal)) if len(legal) else board.pass_move)
        out.append(board)
    return out


# ------------------------------------------------------------------------------ engine


class _EngineRunner:
    """Tree searches over the start positions in turn; each `run` goes on where the last stopped
    and adds its playouts and time to the totals."""

    def __init__(self, positions: list, visits: int) -> None:
        from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
        from tengen.search.mcts import Tree
        from tengen.search.nn_cache import NNCache

        size = positions[0].x_size
        self.positions, self.visits, self.next = positions, visits, 0
        self.spatial = np.zeros((LEAVES_PER_BATCH, NUM_SPATIAL, size, size), np.float32)
        self.global_inputs = np.zeros((LEAVES_PER_BATCH, NUM_GLOBAL), np.float32)
        self.policy = np.zeros((LEAVES_PER_BATCH, size * size + 1), np.float32)
        self.value = np.zeros((LEAVES_PER_BATCH, 3), np.float32)
        self.score = np.zeros((LEAVES_PER_BATCH, 2), np.float32)
        self.tree = Tree(NNCache(0, size * size), cpuct=CPUCT, fpu_reduction=FPU_REDUCTION,
                         score_utility_weight=SCORE_UTILITY_WEIGHT)
        self.playouts, self.elapsed = 0, 0.0

    def run(self, seconds: float) -> None:
        """Whole searches until `seconds` pass (at least one)."""
        tree, done = self.tree, 0
        start = time.perf_counter()
        while done == 0 or time.perf_counter() - start < seconds:
            tree.set_position(self.positions[self.next])
            self.next = (self.next + 1) % len(self.positions)
            tree.start_search(self.visits)
            while not tree.done:
                n = tree.select_leaves(LEAVES_PER_BATCH, self.spatial, self.global_inputs)
                if n:
                    tree.backup(self.policy[:n], self.value[:n], self.score[:n])
            done += tree.visits
        self.playouts += done
        self.elapsed += time.perf_counter() - start


# ------------------------------------------------------------------------------ baseline


class _Node:
    """One position of the Python search; values are sums from Black's point of view."""

    __slots__ = ("parent", "move", "prior", "to_move", "children", "visits", "utility_sum", "terminal")

    def __init__(self, parent: "_Node | None", move: int, prior: float, to_move: int) -> None:
        self.parent = parent
        self.move = move
        self.prior = prior
        self.to_move = to_move
        self.children: list[_Node] = []
        self.visits = 0
        self.utility_sum = 0.0
        self.terminal: float | None = None  # exact utility of a finished game


class _PythonSearch:
    """Plain PUCT over Python node objects, on the compiled Board and feature encoder, or with
    `pure` on bench/pygo.py's Python board and encoder (boards given to `search` are then
    PyBoards)."""

    def __init__(self, size: int, pure: bool = False) -> None:
        from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, PASS_ALIVE_OPP, PASS_ALIVE_OWN

        # The pure-Python rules and features of the baseline, or the compiled ones.
        rules = importlib.import_module("tengen.bench.pygo" if pure else "tengen.go.passalive")
        self.encode = importlib.import_module("tengen.bench.pygo" if pure else "tengen.go.features").encode
        self.final_score = rules.final_score
        self.alive_planes = [PASS_ALIVE_OWN, PASS_ALIVE_OPP]
        self.spatial = np.zeros((1, NUM_SPATIAL, size, size), np.float32)
        self.global_inputs = np.zeros((1, NUM_GLOBAL), np.float32)
        self.board_len = float(size)
        self.policy_logits = np.zeros(size * size + 1, np.float32)  # the constant evaluator
        self.value_logits = np.zeros(3, np.float32)
        self.score_mean = 0.0
        self.x0 = 0.0

    def search(self, board, visits: int, stop_at: float = math.inf) -> _Node:
        """Playouts from `board` until the root has `visits` visits or time.perf_counter()
        passes stop_at."""
        root = _Node(None, -1, 1.0, board.to_move)
        while root.visits < visits and time.perf_counter() < stop_at:
            self._playout(board, root)
        return root

    def _playout(self, root_board, root: _Node) -> None:
        board = root_board.copy()
        node = root
        while node.children and node.terminal is None:
            node = self._select(node)
            board.play(node.move)
        if node.terminal is not None:
            self._backup(node, node.terminal)
            return
        if node is not root and board.game_over:
            node.terminal = self._terminal_utility(self.final_score(board))
            self._backup(node, node.terminal)
            return
        self.encode(board, self.spatial[0], self.global_inputs[0])
        alive = self.spatial[0, self.alive_planes].any(axis=0)
        if node is not root and alive.all():
            node.terminal = self._terminal_utility(self.final_score(board))
            self._backup(node, node.terminal)
            return
        policy, win, loss, score_mean = self._evaluate()
        legal = np.flatnonzero(board.legal_moves())
        priors = np.exp(policy[legal] - policy[legal].max())
        priors /= priors.sum()
        other = 3 - node.to_move
        node.children = [_Node(node, int(m), float(p), other) for m, p in zip(legal, priors)]
        sign = 1.0 if node.to_move == 1 else -1.0
        if node is root:
            self.x0 = sign * score_mean
        utility = sign * (win - loss) + SCORE_UTILITY_WEIGHT * (2 / math.pi) * math.atan(
            (sign * score_mean - self.x0) / self.board_len)
        self._backup(node, utility)

    def _evaluate(self) -> tuple[np.ndarray, float, float, float]:
        """The constant evaluator's outputs for the leaf: policy logits, P(win), P(loss), score."""
        v = np.exp(self.value_logits - self.value_logits.max())
        v /= v.sum()
        return self.policy_logits, float(v[0]), float(v[1]), self.score_mean

    def _terminal_utility(self, black_score: float) -> float:
        win = 1.0 if black_score > 0 else (0.5 if black_score == 0 else 0.0)
        return (2 * win - 1) + SCORE_UTILITY_WEIGHT * (2 / math.pi) * math.atan(
            (black_score - self.x0) / self.board_len)

    @staticmethod
    def _select(node: _Node) -> _Node:
        sign = 1.0 if node.to_move == 1 else -1.0
        sqrt_total = math.sqrt(max(node.visits - 1, 0))
        visited_prior = sum(c.prior for c in node.children if c.visits)
        fpu = sign * node.utility_sum / node.visits - FPU_REDUCTION * math.sqrt(visited_prior)
        best, best_value = None, -math.inf
        for child in node.children:
            q = sign * child.utility_sum / child.visits if child.visits else fpu
            value = q + CPUCT * child.prior * sqrt_total / (1 + child.visits)
            if value > best_value:
                best, best_value = child, value
        if best is None:
            raise ValueError("no child to select: the node has none, or only NaN values")
        return best

    @staticmethod
    def _backup(node: _Node | None, utility: float) -> None:
        while node is not None:
            node.visits += 1
            node.utility_sum += utility
            node = node.parent


class _PythonRunner:
    """_EngineRunner's counterpart for the Python search: on the compiled board and encoder, or
    with `pure` on bench/pygo.py's. A search stops at its visits or after `slice_seconds`."""

    def __init__(self, positions: list, visits: int, pure: bool, slice_seconds: float = math.inf) -> None:
        from tengen.bench.pygo import PyBoard

        self.boards = [PyBoard.from_board(board) for board in positions] if pure else positions
        self.search = _PythonSearch(positions[0].x_size, pure=pure)
        self.visits, self.slice_seconds, self.next = visits, slice_seconds, 0
        self.playouts, self.elapsed = 0, 0.0

    def run(self, seconds: float) -> None:
        """Searches until `seconds` pass (at least one)."""
        done = 0
        start = time.perf_counter()
        while done == 0 or time.perf_counter() - start < seconds:
            board = self.boards[self.next]
            self.next = (self.next + 1) % len(self.boards)
            done += self.search.search(board, self.visits, time.perf_counter() + self.slice_seconds).visits
        self.playouts += done
        self.elapsed += time.perf_counter() - start


# ------------------------------------------------------------------------------ run


def run(args: argparse.Namespace) -> dict:
    if args.visits < 1 or args.positions < 1:
        raise SystemExit("--visits and --positions must be >= 1")
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise SystemExit(f"--sizes must be comma-separated integers, got {args.sizes!r}") from None
    if any(not 7 <= s <= 19 for s in sizes):
        raise SystemExit("board sizes must be within 7..19")
    share = args.seconds / (3 * len(sizes))
    figures: dict = {"visits": args.visits}
    for size in sizes:
        positions = _positions(size, args.positions, args.seed)
        print(f"{size}x{size}: {len(positions)} start positions, {args.visits} visits per search, "
              f"{share:.1f} s for each of 3 searches in {ROUNDS} alternating rounds", flush=True)
        engine = _EngineRunner(positions, args.visits)
        pure = _PythonRunner(positions, args.visits, pure=True, slice_seconds=share / len(positions))
        python = _PythonRunner(positions, args.visits, pure=False)
        for _ in range(ROUNDS):
            for runner in (engine, pure, python):
                runner.run(share / ROUNDS)
        rate = engine.playouts / engine.elapsed
        p_rate = pure.playouts / pure.elapsed
        b_rate = python.playouts / python.elapsed
        print(f"{size}x{size} engine  : {rate:10,.0f} playouts/s {1e6 / rate:8.1f} us/playout", flush=True)
        print(f"{size}x{size} pure Python (Python board and features): {p_rate:10,.1f} playouts/s "
              f"{1e6 / p_rate:8.1f} us/playout  ratio {rate / p_rate:.1f}x", flush=True)
        print(f"{size}x{size} Python (compiled board and features): {b_rate:10,.0f} playouts/s "
              f"{1e6 / b_rate:8.1f} us/playout  ratio {rate / b_rate:.1f}x", flush=True)
        figures.update({
            f"playouts_per_s_{size}": round(rate),
            f"us_per_playout_{size}": round(1e6 / rate, 2),
            f"pure_python_playouts_per_s_{size}": round(p_rate, 1),
            f"ratio_vs_pure_python_{size}": round(rate / p_rate, 1),
            f"python_playouts_per_s_{size}": round(b_rate),
            f"ratio_vs_python_{size}": round(rate / b_rate, 1),
        })
    return figures
