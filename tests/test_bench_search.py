"""`tengen bench mcts` and `tengen bench selfplay` run their measurements and end with JSON figures;
the Python baseline searches of tengen/bench/mcts.py are proper PUCT searches, and the pure-Python one
plays real Go (tengen/bench/pygo.py's board and features agree with the compiled engine's)."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np

from tengen.bench.mcts import _positions, _PythonSearch
from tengen.bench.pygo import PyBoard
from tengen.bench.pygo import encode as py_encode
from tengen.go import planes
from tengen.go.board import Board
from tengen.go.features import encode


def _bench(*args: str) -> tuple[list[str], dict]:
    result = subprocess.run([sys.executable, "-m", "tengen.cli", "bench", *args],
                            capture_output=True, text=True, check=True, timeout=300)
    lines = result.stdout.strip().splitlines()
    return lines, json.loads(lines[-1])


def test_bench_mcts_prints_figures() -> None:
    lines, figures = _bench("mcts", "--seconds", "0.4", "--sizes", "9", "--visits", "30", "--positions", "2")
    assert figures["bench"] == "mcts" and figures["visits"] == 30
    assert figures["playouts_per_s_9"] > 0 and figures["python_playouts_per_s_9"] > 0
    assert figures["pure_python_playouts_per_s_9"] > 0
    assert figures["ratio_vs_python_9"] > 0 and figures["ratio_vs_pure_python_9"] > 0
    assert any(line.startswith("9x9 Python") and "ratio" in line for line in lines)
    assert any(line.startswith("9x9 pure Python") and "ratio" in line for line in lines)


def _random_games(size: int, games: int, seed: int):
    """(compiled Board, PyBoard) pairs after every move of random games, ended by two passes
    or after 2 x area moves; contact moves are favoured so captures and kos come often."""
    rng = random.Random(seed)
    for _ in range(games):
        board, py = Board(size), PyBoard(size)
        for _ in range(2 * size * size):
            legal = np.flatnonzero(board.legal_moves()[:-1])
            last = board.history[-1][1] if board.num_moves else None
            near = [m for m in legal if last is not None and last < board.pass_move
                    and abs(m % size - last % size) + abs(m // size - last // size) == 1]
            pool = near if near and rng.random() < 0.6 else list(legal)
            move = int(rng.choice(pool)) if pool and rng.random() > 0.02 else board.pass_move
            board.play(move)
            py.play(move)
            yield board, py
            if board.game_over:
                break


def test_pure_python_board_plays_the_same_go_as_the_engine() -> None:
    captures = kos = superko = 0
    for size, games in ((9, 4), (19, 1)):
        stones = 0  # on the board before the move
        for board, py in _random_games(size, games, seed=size):
            assert np.array_equal(py.stones_array(), board.stones()), "captures differ"
            assert np.array_equal(py.legal_moves(), board.legal_moves()), "legality differs"
            assert py.ko_point == board.ko_point and py.to_move == board.to_move
            before = 0 if board.num_moves == 1 else stones
            stones = int(np.count_nonzero(board.stones()))
            captures += 0 < stones <= before
            kos += board.ko_point is not None
            superko += any(board.illegal_reason(m) == "superko" for m in range(board.pass_move))
    assert captures > 20 and kos > 0 and superko > 0


def test_pure_python_features_equal_the_compiled_encoder() -> None:
    spatial = np.zeros((planes.NUM_SPATIAL, 9, 9), np.float32)
    glob = np.zeros(planes.NUM_GLOBAL, np.float32)
    py_spatial, py_glob = spatial.copy(), glob.copy()
    laddered = 0
    for board, py in list(_random_games(9, 2, seed=3))[::2]:
        encode(board, spatial, glob)
        py_encode(py, py_spatial, py_glob)
        for p in range(planes.NUM_SPATIAL):
            assert np.array_equal(py_spatial[p], spatial[p]), f"plane {p} differs at move {board.num_moves}"
        assert np.allclose(py_glob, glob)
        laddered += bool(spatial[planes.LADDERED_0].any())
    assert laddered > 10


def test_python_baseline_visits_add_up_over_the_legal_moves() -> None:
    board = _positions(9, 3, seed=2)[1]
    root = _PythonSearch(9).search(board, 200)
    assert root.visits == 200
    assert sum(child.visits for child in root.children) == 199
    assert sorted(child.move for child in root.children) == list(np.flatnonzero(board.legal_moves()))
    assert abs(sum(child.prior for child in root.children) - 1.0) < 1e-6
    # PUCT with equal values spreads visits over equal priors: no child gets most of them.
    assert max(child.visits for child in root.children) < 100


def test_pure_python_baseline_is_the_same_search() -> None:
    board = _positions(9, 3, seed=2)[1]
    root = _PythonSearch(9, pure=True).search(PyBoard.from_board(board), 60)
    assert root.visits == 60 and sum(child.visits for child in root.children) == 59
    assert sorted(child.move for child in root.children) == list(np.flatnonzero(board.legal_moves()))


def test_python_baseline_scores_finished_games() -> None:
    board = Board(9)
    board.play(board.pass_move)  # the root's pass child ends the game: an exact, terminal value
    root = _PythonSearch(9).search(board, 400)
    passed = next(child for child in root.children if child.move == board.pass_move)
    # Two passes on an empty board: White wins by komi; utilities are from Black's view.
    assert passed.visits >= 1 and passed.terminal is not None and passed.terminal < -1.0


def test_bench_selfplay_prints_figures() -> None:
    lines, figures = _bench("selfplay", "--seconds", "3", "--preset", "tiny", "--arch", "b1c16", "--games", "4")
    assert figures["bench"] == "selfplay" and figures["arch"] == "b1c16" and figures["board"] == 9
    assert figures["runner_evals_per_s"] > 0 and figures["bare_evals_per_s"] > 0
    assert figures["positions_per_s"] > 0 and figures["ratio_vs_bare_evaluator"] > 0
    assert figures["mean_batch"] <= 2  # two halves of two games, one leaf each
    assert any(line.startswith("bare evaluator at batch") for line in lines)
