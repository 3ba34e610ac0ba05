"""`tengen bench go`: random playouts on the Cython rules engine vs. sgfmill's board.

The procedure (issue 3): from the empty board, each turn pick a uniformly random empty point,
retrying until it is legal and does not fill the mover's own simple eye; pass when no such point
is left; a game ends on two passes or after 3 x area moves; passes count as moves. Rules are
`katago` (positional superko, suicide off), single thread. The engine runs it in C without the
GIL (tengen.go.playout); the baseline runs the same procedure in Python on sgfmill's Board, with
positional superko from a set of seen positions, in the same process.
"""
from __future__ import annotations

import argparse
import random
import time

DESCRIPTION = "random playouts (9x9, 19x19, katago rules): engine vs sgfmill, moves/s and games/s"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


def _sgfmill_playouts(size: int, seconds: float, rng: random.Random) -> tuple[int, int, float]:
    """The same procedure on sgfmill's Board; whole games until `seconds` pass (at least one)."""
    from sgfmill import boards

    start = time.perf_counter()
    games = moves = 0
    while games == 0 or time.perf_counter() - start < seconds:
        moves += _sgfmill_game(boards.Board(size), rng)
        games += 1
    return games, moves, time.perf_counter() - start


def _sgfmill_game(board, rng: random.Random) -> int:
    size = board.side
    seen = {tuple(map(tuple, board.board))}
    colour, other = "b", "w"
    moves = passes = 0
    while moves < 3 * size * size and passes < 2:
        candidates = [(r, c) for (r, c) in board.board_points if board.board[r][c] is None]
        chosen = None
        while candidates:
            i = rng.randrange(len(candidates))
            row, col = candidates[i]
            if not _sgfmill_simple_eye(board, row, col, colour):
                trial = board.copy()
                trial.play(row, col, colour)
                key = tuple(map(tuple, trial.board))
                # Suicide off (sgfmill removes the stone itself); positional superko.
                if trial.board[row][col] is not None and key not in seen:
                    chosen = trial
                    seen.add(key)
                    break
            candidates[i] = candidates[-1]
            candidates.pop()
        if chosen is None:
            passes += 1
        else:
            board = chosen
            passes = 0
        moves += 1
        colour, other = other, colour
    return moves


def _sgfmill_simple_eye(board, row: int, col: int, colour: str) -> bool:
    """Board.is_simple_eye's test: all neighbours own or edge, few opponent diagonals."""
    size = board.side
    against_edge = False
    for r, c in ((row - 1, col), (row + 1, col), (row, col - 1), (row, col + 1)):
        if 0 <= r < size and 0 <= c < size:
            if board.board[r][c] != colour:
                return False
        else:
            against_edge = True
    opponent = "w" if colour == "b" else "b"
    corners = sum(
        1
        for r, c in ((row - 1, col - 1), (row - 1, col + 1), (row + 1, col - 1), (row + 1, col + 1))
        if 0 <= r < size and 0 <= c < size and board.board[r][c] == opponent
    )
    return not (corners >= 2 or (against_edge and corners >= 1))


def run(args: argparse.Namespace) -> dict:
    from tengen.go.playout import run_playouts
    from tengen.go.rules import KATAGO

    share = args.seconds / 4  # engine 9, engine 19, sgfmill 9, sgfmill 19
    rng = random.Random(args.seed)
    figures: dict = {}
    for size in (9, 19):
        games, moves, elapsed = run_playouts(size, size, KATAGO, share, seed=args.seed)
        b_games, b_moves, b_elapsed = _sgfmill_playouts(size, share, rng)
        rate, b_rate = moves / elapsed, b_moves / b_elapsed
        print(
            f"{size}x{size} engine : {rate / 1e6:8.3f} M moves/s {games / elapsed:10.1f} games/s "
            f"{moves / games:6.1f} moves/game ({games} games)"
        )
        print(
            f"{size}x{size} sgfmill: {b_rate / 1e6:8.4f} M moves/s {b_games / b_elapsed:10.2f} games/s "
            f"{b_moves / b_games:6.1f} moves/game ({b_games} games)  ratio {rate / b_rate:.0f}x"
        )
        figures.update(
            {
                f"moves_per_s_{size}": round(rate),
                f"games_per_s_{size}": round(games / elapsed, 2),
                f"avg_game_length_{size}": round(moves / games, 1),
                f"sgfmill_moves_per_s_{size}": round(b_rate),
                f"ratio_vs_sgfmill_{size}": round(rate / b_rate, 1),
            }
        )
    return figures
