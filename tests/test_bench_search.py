"""`tengen bench mcts` and `tengen bench selfplay` run their measurements and end with JSON figures;
the Python baseline search of bench/mcts.py is a proper PUCT search."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from bench.mcts import _positions, _PythonSearch
from tengen.go.board import Board


def _bench(*args: str) -> tuple[list[str], dict]:
    result = subprocess.run([sys.executable, "-m", "tengen.cli", "bench", *args],
                            capture_output=True, text=True, check=True, timeout=300)
    lines = result.stdout.strip().splitlines()
    return lines, json.loads(lines[-1])


def test_bench_mcts_prints_figures() -> None:
    lines, figures = _bench("mcts", "--seconds", "0.4", "--sizes", "9", "--visits", "30", "--positions", "2")
    assert figures["bench"] == "mcts" and figures["visits"] == 30
    assert figures["playouts_per_s_9"] > 0 and figures["python_playouts_per_s_9"] > 0
    assert figures["ratio_vs_python_9"] > 0
    assert any(line.startswith("9x9 Python") and "ratio" in line for line in lines)


def test_python_baseline_visits_add_up_over_the_legal_moves() -> None:
    board = _positions(9, 3, seed=2)[1]
    root = _PythonSearch(9).search(board, 200)
    assert root.visits == 200
    assert sum(child.visits for child in root.children) == 199
    assert sorted(child.move for child in root.children) == list(np.flatnonzero(board.legal_moves()))
    assert abs(sum(child.prior for child in root.children) - 1.0) < 1e-6
    # PUCT with equal values spreads visits over equal priors: no child gets most of them.
    assert max(child.visits for child in root.children) < 100


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
