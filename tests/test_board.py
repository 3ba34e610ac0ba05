"""Hand-built positions for the rules engine: captures, snapback, suicide, ko and superko
variants, setup stones, scoring, rectangular boards, copies, errors, and the random playouts."""
from __future__ import annotations

import numpy as np
import pytest

from tengen.go.board import BLACK, EMPTY, WHITE, Board
from tengen.go.playout import random_game, run_playouts
from tengen.go.rules import KATAGO, TROMP_TAYLOR, IllegalMoveError, parse_rules

SIMPLE_SUICIDE = parse_rules("ko=simple,suicide=yes")
SIMPLE_NO_SUICIDE = parse_rules("ko=simple,suicide=no")
POSITIONAL = parse_rules("ko=positional,suicide=no")
SITUATIONAL = parse_rules("ko=situational,suicide=no")
POSITIONAL_SUICIDE = parse_rules("ko=positional,suicide=yes")
SITUATIONAL_SUICIDE = parse_rules("ko=situational,suicide=yes")


def mv(board: Board, x: int, y: int) -> int:
    return y * board.x_size + x


def test_empty_board_geometry() -> None:
    board = Board(9)
    assert (board.x_size, board.y_size, board.pass_move) == (9, 9, 81)
    assert board.to_move == BLACK and board.num_moves == 0 and not board.game_over
    assert board.stones().shape == (9, 9) and not board.stones().any()
    assert board.legal_moves().all()
    assert board.area_score() == -7.5


def test_capture_in_corner_and_liberties() -> None:
    board = Board(7)
    board.play(mv(board, 0, 0))  # B
    assert board.chain_liberties(0) == 2
    board.play(mv(board, 1, 0))  # W
    board.play(mv(board, 6, 6))  # B elsewhere
    board.play(mv(board, 0, 1))  # W captures the corner stone
    assert board.stones()[0, 0] == EMPTY
    assert board.chain_liberties(mv(board, 1, 0)) == 3  # (0,0) freed
    assert board.chain_liberties(mv(board, 0, 0)) == 0
    board.validate()


def test_snapback() -> None:
    board = Board.from_diagram(
        """
        . . . . . . .
        . . . . . . .
        . . . . . . .
        . . . . . . .
        X X X X . . .
        O O O X . . .
        . . O X . . .
        """
    )
    throw_in, fill = mv(board, 0, 6), mv(board, 1, 6)
    board.play(throw_in)  # Black throws in: one stone in atari, White's four stones too
    assert board.chain_liberties(throw_in) == 1
    assert board.chain_liberties(mv(board, 0, 5)) == 1
    board.play(fill)  # White takes the stone, but is left with one liberty
    assert board.stones()[6, 0] == EMPTY
    assert board.ko_point is None  # five stones: not a ko
    assert board.chain_liberties(fill) == 1
    board.play(throw_in)  # Black takes five stones back
    stones = board.stones()
    assert stones[6, 0] == BLACK
    assert not (stones == WHITE).any()
    assert board.chain_liberties(throw_in) == 2
    board.validate()


MULTI_SUICIDE = """
    X . O . . . .
    O O O . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    """


@pytest.mark.parametrize("rules", [SIMPLE_NO_SUICIDE, POSITIONAL, SITUATIONAL])
def test_multi_stone_suicide_forbidden(rules) -> None:
    board = Board.from_diagram(MULTI_SUICIDE, rules=rules)
    before = board.stones()
    assert board.illegal_reason(1) == "suicide"
    with pytest.raises(IllegalMoveError) as info:
        board.play(1)
    assert info.value.reason == "suicide" and info.value.move == 1
    assert np.array_equal(board.stones(), before) and board.num_moves == 0
    assert not board.legal_moves()[1]


@pytest.mark.parametrize("rules", [SIMPLE_SUICIDE, POSITIONAL_SUICIDE, SITUATIONAL_SUICIDE])
def test_multi_stone_suicide_allowed(rules) -> None:
    board = Board.from_diagram(MULTI_SUICIDE, rules=rules)
    board.play(1)  # two black stones take themselves off
    stones = board.stones()
    assert stones[0, 0] == EMPTY and stones[0, 1] == EMPTY
    assert (stones == WHITE).sum() == 4
    assert board.to_move == WHITE and board.history == [(BLACK, 1)]
    assert board.chain_liberties(2) == 7  # White's chain gained (0,0) and (1,0)
    board.validate()


@pytest.mark.parametrize("rules", [SIMPLE_SUICIDE, TROMP_TAYLOR, KATAGO, SITUATIONAL_SUICIDE])
def test_single_stone_suicide_never_legal(rules) -> None:
    board = Board.from_diagram(
        """
        . X . . . . .
        X . . . . . .
        . . . . . . .
        . . . . . . .
        . . . . . . .
        . . . . . . .
        . . . . . . .
        """,
        rules=rules,
        to_move=WHITE,
    )
    assert board.illegal_reason(0) == "suicide"


KO = """
    . X O . . . .
    X O . O . . .
    . X O . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    """


@pytest.mark.parametrize("rules", [SIMPLE_SUICIDE, POSITIONAL, SITUATIONAL])
def test_simple_ko(rules) -> None:
    board = Board.from_diagram(KO, rules=rules)
    take, retake = mv(board, 2, 1), mv(board, 1, 1)
    board.play(take)
    assert board.stones()[1, 1] == EMPTY
    assert board.ko_point == retake
    assert board.illegal_reason(retake) == "ko"
    with pytest.raises(IllegalMoveError, match="ko"):
        board.play(retake)
    board.play(mv(board, 6, 6))  # White's ko threat, Black answers
    board.play(mv(board, 5, 6))
    assert board.ko_point is None
    board.play(retake)  # the position differs from any before (two new stones)
    assert board.stones()[1, 2] == EMPTY and board.ko_point == take
    board.validate()


@pytest.mark.parametrize(
    "rules, reason", [(SIMPLE_SUICIDE, None), (POSITIONAL, "superko"), (SITUATIONAL, "superko")]
)
def test_ko_retake_after_two_passes(rules, reason) -> None:
    # Passes lift the simple-ko ban, but retaking recreates the position before the capture.
    board = Board.from_diagram(KO, rules=rules)
    board.play(mv(board, 2, 1))
    board.play(board.pass_move)
    board.play(board.pass_move)
    assert board.game_over and board.consecutive_passes == 2
    assert board.illegal_reason(mv(board, 1, 1)) == reason


# Three kos on one board: 1 and 3 held by White (White stone inside), 2 held by Black.
TRIPLE_KO = """
    . X O . . . X O .
    X O . O . X . X O
    . X O . . . X O .
    . . . . . . . . .
    . . . . . . . . .
    . X O . . . . . .
    X O . O . . . . .
    . X O . . . . . .
    . . . . . . . . .
    """


@pytest.mark.parametrize(
    "rules, reason", [(SIMPLE_SUICIDE, None), (POSITIONAL, "superko"), (SITUATIONAL, "superko")]
)
def test_triple_ko_cycle(rules, reason) -> None:
    board = Board.from_diagram(TRIPLE_KO, rules=rules)
    start = board.hash
    cycle = [
        mv(board, 2, 1),  # B takes ko 1
        mv(board, 6, 1),  # W takes ko 2
        mv(board, 2, 6),  # B takes ko 3
        mv(board, 1, 1),  # W retakes ko 1
        mv(board, 7, 1),  # B retakes ko 2
    ]
    for move in cycle:
        assert board.illegal_reason(move) is None
        board.play(move)
    last = mv(board, 1, 6)  # W retakes ko 3: back to the start, Black to move
    assert board.illegal_reason(last) == reason
    if reason is None:
        board.play(last)
        assert board.hash == start and board.to_move == BLACK
        assert board.illegal_reason(cycle[0]) is None  # the cycle could go on forever


# Sending two, returning one: Black throws in at (1,0) making two stones in atari, White takes
# both at (3,0), Black takes one back at (2,0): the start position again, but White to move.
SENDING_TWO = """
    O . X . X . .
    O O O X X . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    """


@pytest.mark.parametrize(
    "rules, reason", [(SIMPLE_NO_SUICIDE, None), (POSITIONAL, "superko"), (SITUATIONAL, None)]
)
def test_sending_two_returning_one(rules, reason) -> None:
    board = Board.from_diagram(SENDING_TWO, rules=rules)
    start = board.stones()
    board.play(mv(board, 1, 0))
    board.play(mv(board, 3, 0))
    assert board.stones()[0, 1] == EMPTY and board.stones()[0, 2] == EMPTY
    assert board.ko_point is None  # two stones were taken
    returning = mv(board, 2, 0)
    assert board.illegal_reason(returning) == reason
    if reason is None:
        board.play(returning)
        assert np.array_equal(board.stones(), start) and board.to_move == WHITE


def test_setting_to_move_after_setup_forgets_the_other_player() -> None:
    # The same cycle with colours swapped and White to move from the start: the start position
    # never stood with Black to move, so White's returning capture is legal (situational).
    swapped = SENDING_TWO.replace("X", "x").replace("O", "X").replace("x", "O")
    board = Board.from_diagram(swapped, rules=SITUATIONAL, to_move=WHITE)
    board.play(mv(board, 1, 0))
    board.play(mv(board, 3, 0))
    assert board.illegal_reason(mv(board, 2, 0)) is None
    board.play(mv(board, 2, 0))
    assert board.to_move == BLACK


@pytest.mark.parametrize(
    "rules, reason", [(POSITIONAL_SUICIDE, "superko"), (SITUATIONAL_SUICIDE, None)]
)
def test_suicide_back_to_an_earlier_position_with_the_other_player_to_move(rules, reason) -> None:
    # Black adds a stone, White passes, Black's two-stone suicide recreates the stones as they
    # were before the first stone, but now with White to move.
    board = Board.from_diagram(MULTI_SUICIDE.replace("X .", ". .", 1), rules=rules)
    board.play(0)
    board.play(board.pass_move)
    assert board.illegal_reason(1) == reason


def test_superko_on_a_move_that_captures_nothing() -> None:
    # Stone, pass, two-stone suicide, pass: the same stone again would repeat the position after
    # the first one (same player to move), though it removes nothing.
    board = Board.from_diagram(MULTI_SUICIDE.replace("X .", ". .", 1), rules=SITUATIONAL_SUICIDE)
    board.play(0)
    board.play(board.pass_move)
    board.play(1)  # suicide
    board.play(board.pass_move)
    assert board.illegal_reason(0) == "superko"
    assert board.illegal_reason(1) is None  # a single stone there is a new position


def test_setup_stones_handicap_and_to_move() -> None:
    board = Board(19)
    board.place_stones(black=[mv(board, 3, 3), mv(board, 15, 15)])
    board.to_move = WHITE
    assert (board.stones() == BLACK).sum() == 2 and board.num_moves == 0
    assert board.history == []
    board.play(mv(board, 16, 3))
    assert board.history == [(WHITE, mv(board, 16, 3))] and board.to_move == BLACK
    board.validate()


def test_setup_errors_leave_the_board_unchanged() -> None:
    board = Board(7)
    board.place_stones(black=[0])
    with pytest.raises(ValueError, match="occupied"):
        board.place_stones(white=[5, 0])
    with pytest.raises(ValueError, match="twice"):
        board.place_stones(white=[5, 5])
    with pytest.raises(ValueError, match="without a liberty"):
        board.place_stones(white=[1, 7])  # surrounds the black corner stone
    with pytest.raises(ValueError, match="not a point"):
        board.place_stones(black=[49])
    stones = board.stones()
    assert stones[0, 0] == BLACK and (stones != EMPTY).sum() == 1
    board.validate()


def test_setup_restarts_superko_history() -> None:
    board = Board.from_diagram(KO, rules=POSITIONAL)
    board.play(mv(board, 2, 1))  # take the ko
    board.play(board.pass_move)
    board.play(board.pass_move)
    assert board.illegal_reason(mv(board, 1, 1)) == "superko"
    board.place_stones()  # setup (even of nothing) starts the superko history afresh
    assert board.illegal_reason(mv(board, 1, 1)) is None
    assert board.num_moves == 3  # the moves themselves stay in the history


def test_area_score_tromp_taylor() -> None:
    board = Board.from_diagram(
        """
        . X O . . . .
        . X O . . . .
        . X O . . . .
        . X O . . . .
        X X O . . . .
        . X O O . . .
        . X O . O . .
        """,
        komi=0.5,
    )
    # Black: 8 stones + 6 empty points left of its wall; White: 9 stones, the 25-point right
    # side and the point at (3, 6).
    assert board.area_score() == (8 + 6) - (9 + 25 + 1) - 0.5
    # A Black stone inside: the 24 points left touch both colours and count for nobody.
    board.play(mv(board, 5, 0))
    assert board.area_score() == (9 + 6) - (9 + 1) - 0.5


def test_komi_must_be_a_half_point() -> None:
    assert Board(9, komi=-3.5).komi == -3.5
    with pytest.raises(ValueError, match="komi"):
        Board(9, komi=7.3)


def test_passes_end_the_game_and_a_move_resets_them() -> None:
    board = Board(9)
    board.play(board.pass_move)
    assert board.consecutive_passes == 1 and not board.game_over
    board.play(40)
    assert board.consecutive_passes == 0
    board.play(board.pass_move)
    board.play(board.pass_move)
    assert board.game_over and board.num_moves == 4
    assert board.last_moves(3) == [(WHITE, 81), (BLACK, 81), (WHITE, 40)]
    assert board.last_moves(10) == board.history[::-1]


def test_rectangular_board() -> None:
    board = Board(13, 7)
    assert (board.x_size, board.y_size, board.pass_move) == (13, 7, 91)
    corner = mv(board, 12, 6)  # bottom right
    board.play(corner)
    board.play(mv(board, 11, 6))
    board.play(mv(board, 0, 0))
    board.play(mv(board, 12, 5))  # captures the corner
    stones = board.stones()
    assert stones.shape == (7, 13) and stones[6, 12] == EMPTY and stones[0, 0] == BLACK
    assert stones[5, 12] == WHITE and stones[6, 11] == WHITE
    assert board.illegal_reason(91) is None and board.illegal_reason(92) == "off-board"
    for seed in range(5):
        tall = Board(7, 19, TROMP_TAYLOR)
        random_game(tall, seed)
        tall.validate()
        wide = Board(19, 8, SITUATIONAL)
        random_game(wide, seed)
        wide.validate()


def test_copy_is_independent() -> None:
    board = Board.from_diagram(KO, rules=POSITIONAL)
    board.play(mv(board, 2, 1))
    copy = board.copy()
    assert copy.hash == board.hash and copy.history == board.history
    assert copy.ko_point == board.ko_point and copy.rules == board.rules
    # On the copy: both pass and White may not retake (superko); the original never passed.
    copy.play(copy.pass_move)
    copy.play(copy.pass_move)
    assert copy.illegal_reason(mv(copy, 1, 1)) == "superko"
    copy.play(mv(copy, 6, 6))
    assert board.stones()[6, 6] == EMPTY and board.num_moves == 1
    assert board.illegal_reason(mv(board, 1, 1)) == "ko"
    board.play(mv(board, 5, 5))
    assert copy.stones()[5, 5] == EMPTY
    board.validate()
    copy.validate()


def test_copy_carries_long_history() -> None:
    board = Board(19, rules=SITUATIONAL)
    random_game(board, 3)  # hundreds of moves: history and superko set have grown
    copy = board.copy()
    assert copy.history == board.history and copy.hash == board.hash
    assert np.array_equal(copy.legal_moves(), board.legal_moves())
    copy.validate()


def test_same_position_same_hash_whatever_the_order() -> None:
    a, b = Board(9), Board(9)
    for move in (10, 20, 30, 40):
        a.play(move)
    for move in (30, 40, 10, 20):
        b.play(move)
    assert a.hash == b.hash
    b.play(b.pass_move)
    assert a.hash == b.hash  # positional: stones only
    b.play(50)
    assert a.hash != b.hash


def test_bad_moves() -> None:
    board = Board(9)
    board.play(0)
    assert board.illegal_reason(0) == "occupied"
    for move in (-1, 82, 10**9):
        assert board.illegal_reason(move) == "off-board"
        with pytest.raises(IllegalMoveError) as info:
            board.play(move)
        assert info.value.reason == "off-board"
    with pytest.raises(IllegalMoveError, match="occupied"):
        board.play(0)
    assert isinstance(IllegalMoveError("ko", 1), ValueError)
    with pytest.raises(TypeError):
        board.play("D4")
    with pytest.raises(TypeError):
        board.play(True)
    assert board.num_moves == 1 and board.history == [(BLACK, 0)]
    with pytest.raises(ValueError, match="out of range"):
        Board(6)
    with pytest.raises(ValueError, match="out of range"):
        Board(9, 20)
    with pytest.raises(ValueError, match="unknown rules"):
        Board(9, rules="japanese")
    with pytest.raises(ValueError, match="to_move"):
        board.to_move = 3
    with pytest.raises(ValueError, match="equal length"):
        Board.from_diagram("X..\nX.")


def test_board_accepts_rule_names() -> None:
    assert Board(9, rules="tromp-taylor").rules == TROMP_TAYLOR
    assert Board(9).rules == KATAGO


def test_random_game_is_reproducible_and_ends() -> None:
    a, b = Board(9), Board(9)
    moves = random_game(a, 42)
    random_game(b, 42)
    assert a.history == b.history and moves == a.num_moves
    assert a.game_over or a.num_moves == 3 * 81
    a.validate()


def test_run_playouts_counts() -> None:
    games, moves, elapsed = run_playouts(9, 9, KATAGO, 0.0, seed=5, max_games=20)
    assert games == 20 and 20 * 40 < moves <= 20 * 3 * 81 and elapsed > 0
    with pytest.raises(ValueError):
        run_playouts(9, 9, KATAGO, 0.0)


def test_bench_go_prints_figures_and_json() -> None:
    import json
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "go", "--seconds", "0.4"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["bench"] == "go"
    for key in ("moves_per_s_9", "moves_per_s_19", "ratio_vs_sgfmill_19", "games_per_s_19"):
        assert figures[key] > 0
    assert any(line.startswith("19x19 sgfmill") for line in lines)
