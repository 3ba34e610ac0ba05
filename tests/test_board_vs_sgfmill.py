"""Differential tests: the Cython engine against sgfmill's board and a slow Python rules oracle.

Games come from the engine's own random playouts (tengen.go.playout, the benchmark procedure)
under several rule sets, then are replayed move by move through the Python API and on sgfmill's
Board; stones must agree after every move and Tromp-Taylor area scores at the end. A second test
checks every legality answer against an oracle built on sgfmill (captures, self-capture) plus
Python sets of seen positions (superko).
"""
from __future__ import annotations

import random

import numpy as np
import pytest
from sgfmill import boards

from tengen.go.board import BLACK, WHITE, Board
from tengen.go.playout import random_game
from tengen.go.rules import KATAGO, TROMP_TAYLOR, Rules, parse_rules

RULE_SETS = [
    KATAGO,
    TROMP_TAYLOR,
    parse_rules("ko=simple,suicide=yes"),
    parse_rules("ko=situational,suicide=no"),
    parse_rules("ko=situational,suicide=yes"),
]
COLOUR = {BLACK: "b", WHITE: "w"}
CODE = {None: 0, "b": BLACK, "w": WHITE}


def sgfmill_stones(board: boards.Board) -> np.ndarray:
    """sgfmill's position in the engine's layout: row 0 at the top (sgfmill's row 0 is bottom)."""
    side = board.side
    return np.array(
        [[CODE[board.board[side - 1 - y][x]] for x in range(side)] for y in range(side)], np.int8
    )


def replay_against_sgfmill(size: int, rules: Rules, seed: int, validate: bool) -> int:
    """Generate one random game, replay it on a fresh engine board and on sgfmill, compare."""
    source = Board(size, size, rules)
    random_game(source, seed)
    board = Board(size, size, rules)
    reference = boards.Board(size)
    for number, (colour, move) in enumerate(source.history, 1):
        assert board.to_move == colour
        board.play(move)
        if move != board.pass_move:
            y, x = divmod(move, size)
            reference.play(size - 1 - y, x, COLOUR[colour])
        stones = board.stones()
        expected = sgfmill_stones(reference)
        if not np.array_equal(stones, expected):
            raise AssertionError(
                f"{size}x{size} {rules.to_string()} seed {seed}: stones differ after move "
                f"{number} ({colour}, {move})\nengine:\n{stones}\nsgfmill:\n{expected}"
            )
        if validate:
            board.validate()
    assert board.hash == source.hash
    assert board.area_score() + board.komi == reference.area_score()
    return source.num_moves


def run_games(count: int, seed: int, validate_every: int) -> int:
    rng = random.Random(seed)
    total = 0
    for i in range(count):
        size = rng.randint(7, 19)
        rules = RULE_SETS[i % len(RULE_SETS)]
        total += replay_against_sgfmill(size, rules, rng.getrandbits(48), i % validate_every == 0)
    return total


def test_random_games_agree_with_sgfmill_quick() -> None:
    moves = run_games(40, seed=11, validate_every=2)
    assert moves > 40 * 50  # real games, not early passes


@pytest.mark.slow
def test_random_games_agree_with_sgfmill_2000() -> None:
    moves = run_games(2000, seed=2024, validate_every=50)
    assert moves > 2000 * 50


class Oracle:
    """Legality by brute force: try the move on a copy of sgfmill's board, look at what it
    removed, and compare the result with every position seen so far."""

    def __init__(self, size: int, rules: Rules) -> None:
        self.size = size
        self.rules = rules
        self.board = boards.Board(size)
        self.ko_point: tuple[int, int] | None = None
        self.seen: set = {self.key(self.board, BLACK)}

    def key(self, board: boards.Board, to_move: int) -> tuple:
        rows = tuple(tuple(r) for r in board.board)
        return (rows, to_move) if self.rules.ko == "situational" else rows

    def reason(self, move: int, colour: int) -> str | None:
        if move == self.size * self.size:
            return None
        y, x = divmod(move, self.size)
        point = (self.size - 1 - y, x)
        if self.board.get(*point) is not None:
            return "occupied"
        if point == self.ko_point:
            return "ko"
        trial = self.board.copy()
        trial.play(*point, COLOUR[colour])
        if trial.get(*point) is None:  # it took itself off the board
            own_before = sum(row.count(COLOUR[colour]) for row in self.board.board)
            own_after = sum(row.count(COLOUR[colour]) for row in trial.board)
            if own_before == own_after or not self.rules.suicide:  # single stone, or forbidden
                return "suicide"
        if self.rules.ko != "simple" and self.key(trial, 3 - colour) in self.seen:
            return "superko"
        return None

    def play(self, move: int, colour: int) -> None:
        if move == self.size * self.size:
            self.ko_point = None
        else:
            y, x = divmod(move, self.size)
            self.ko_point = self.board.play(self.size - 1 - y, x, COLOUR[colour])
        self.seen.add(self.key(self.board, 3 - colour))


def captures(board: Board, move: int) -> bool:
    """Whether `move` takes an opponent chain in atari next to it."""
    y, x = divmod(move, board.x_size)
    opponent = 3 - board.to_move
    stones = board.stones()
    for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
        if 0 <= ny < board.y_size and 0 <= nx < board.x_size and stones[ny, nx] == opponent:
            if board.chain_liberties(ny * board.x_size + nx) == 1:
                return True
    return False


def random_game_with_passes(board: Board, rng: random.Random, length: int) -> list[int]:
    """Random legal moves that favour captures, with frequent passes (most often right after a
    ko capture), playing on after two passes: games full of kos, ko bans lifted by passes and
    suicides, where superko answers come up."""
    moves: list[int] = []
    ko_taken = False  # a ko was taken one or two moves ago
    for _ in range(length):
        legal = [int(m) for m in np.flatnonzero(board.legal_moves()[:-1])]
        capturing = [m for m in legal if captures(board, m)]
        if not legal or rng.random() < (0.7 if ko_taken else 0.2):
            move = board.pass_move
        elif capturing and rng.random() < 0.7:
            move = rng.choice(capturing)
        else:
            move = rng.choice(legal)
        ko_taken = board.ko_point is not None or (ko_taken and move == board.pass_move)
        board.play(move)
        ko_taken = ko_taken or board.ko_point is not None
        moves.append(move)
    return moves


@pytest.mark.parametrize("rules", RULE_SETS, ids=lambda r: r.to_string())
def test_every_legality_answer_matches_oracle(rules: Rules) -> None:
    rng = random.Random(7)
    counts: dict[str | None, int] = {}
    for game in range(8):
        size = 7
        moves = random_game_with_passes(Board(size, size, rules), rng, 120)
        board = Board(size, size, rules)
        oracle = Oracle(size, rules)
        for move in moves:
            colour = board.to_move
            for candidate in range(board.pass_move + 1):
                expected = oracle.reason(candidate, colour)
                got = board.illegal_reason(candidate)
                assert got == expected, (
                    f"{rules.to_string()} game {game} move {board.num_moves + 1}: "
                    f"{candidate} is {got!r}, oracle says {expected!r}\n{board}"
                )
                counts[got] = counts.get(got, 0) + 1
            board.play(move)
            oracle.play(move, colour)
    # The games must have exercised the interesting answers, not only "legal" and "occupied".
    assert counts.get("suicide", 0) > 0 and counts.get("ko", 0) > 0, counts
    if rules.ko != "simple":
        assert counts.get("superko", 0) > 0, counts
