"""Ladder search on hand-built positions: working ladders, breakers, escapes by capture."""
from __future__ import annotations

import go_diagram as gd
import pytest

from tengen.go import ladder
from tengen.go.board import BLACK, WHITE, Board
from tengen.go.rules import parse_rules

# Black's stone at (3, 3) with two liberties, White to move: the classic ladder shape. An atari
# from below (move 39) chases it up and to the right, one from the right (move 31) down and to
# the left; on an empty 9x9 both reach the edge.
SHAPE = """
. . . . . . . . .
. . . . . . . . .
. . . O . . . . .
. . O X . . . . .
. . . . O . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
"""
STONE = gd.move(3, 3, 9)
FROM_BELOW = gd.move(3, 4, 9)
FROM_RIGHT = gd.move(4, 3, 9)


def with_stones(diagram: str, to_move: int, black=(), white=()) -> Board:
    board = gd.board(diagram, to_move=to_move)
    board.place_stones(black=list(black), white=list(white))
    board.to_move = to_move
    return board


def test_working_ladder_in_both_directions() -> None:
    board = gd.board(SHAPE, to_move=WHITE)
    assert ladder.working_moves(board, STONE) == sorted([FROM_BELOW, FROM_RIGHT])
    assert ladder.is_laddered(board, STONE)
    assert ladder.ladder_moves(board) == sorted([FROM_BELOW, FROM_RIGHT])
    # After the atari the stone has one liberty and cannot escape.
    board.play(FROM_BELOW)
    assert board.chain_liberties(STONE) == 1
    assert ladder.is_laddered(board, STONE)


def test_breaker_stops_one_direction_then_both() -> None:
    up_right_breaker = gd.move(6, 1, 9)
    down_left_breaker = gd.move(1, 6, 9)
    board = with_stones(SHAPE, WHITE, black=[up_right_breaker])
    assert ladder.working_moves(board, STONE) == [FROM_RIGHT]
    board = with_stones(SHAPE, WHITE, black=[up_right_breaker, down_left_breaker])
    assert ladder.working_moves(board, STONE) == []
    assert not ladder.is_laddered(board, STONE)
    assert ladder.ladder_moves(board) == []
    # After the atari anyway, the stone runs out to the breaker: no inescapable atari.
    board.play(FROM_BELOW)
    assert not ladder.is_laddered(board, STONE)


def test_attacker_stones_on_the_path_do_not_break() -> None:
    board = with_stones(SHAPE, WHITE, white=[gd.move(6, 1, 9), gd.move(1, 6, 9)])
    assert ladder.working_moves(board, STONE) == sorted([FROM_BELOW, FROM_RIGHT])


def test_long_ladder_across_a_19x19_board() -> None:
    board = Board(19)
    stone = gd.move(9, 9, 19)
    board.place_stones(
        black=[stone], white=[gd.move(9, 8, 19), gd.move(8, 9, 19), gd.move(10, 10, 19)]
    )
    board.to_move = WHITE
    below, right = gd.move(9, 10, 19), gd.move(10, 9, 19)
    assert ladder.working_moves(board, stone) == sorted([below, right])
    # A black stone far up the diagonal breaks the ladder that runs that way, a white one not.
    far = gd.move(16, 2, 19)
    broken = board.copy()
    broken.place_stones(black=[far])
    broken.to_move = WHITE
    assert ladder.working_moves(broken, stone) == [right]
    kept = board.copy()
    kept.place_stones(white=[far])
    kept.to_move = WHITE
    assert ladder.working_moves(kept, stone) == sorted([below, right])


def test_escape_by_capturing_an_attacking_stone_in_atari() -> None:
    # Black (3,3) is in atari; extending at (4,3) is hopeless, but the white stone at (2,3) has
    # one liberty at (1,3): capturing it gives Black a way out.
    escapes = """
    . . . . . . . . .
    . . . . . . . . .
    . . X O . . . . .
    . . O X . O . . .
    . . X O O . . . .
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . . . .
    """
    board = gd.board(escapes, to_move=BLACK)
    assert board.chain_liberties(STONE) == 1
    assert not ladder.is_laddered(board, STONE)
    # Without the black stone at (2,4) the white stone has two liberties: no escape.
    board = gd.board(escapes.replace(". . X O O", ". . . O O"), to_move=BLACK)
    assert ladder.is_laddered(board, STONE)


def test_escape_by_capture_in_the_middle_of_the_ladder() -> None:
    # A black stone at (2,2) leaves both white shape stones with two liberties; the chased
    # chain takes one of them on the way, putting it in atari, and captures it.
    board = with_stones(SHAPE, WHITE, black=[gd.move(2, 2, 9)])
    assert ladder.working_moves(board, STONE) == []
    assert not ladder.is_laddered(board, STONE)


def test_chains_in_atari_of_either_color_and_of_the_player_to_move() -> None:
    # The same reading whoever is to move: the defender always gets the first move.
    for to_move in (BLACK, WHITE):
        board = gd.board(SHAPE, to_move=WHITE)
        board.play(FROM_BELOW)
        board.to_move = to_move
        assert ladder.is_laddered(board, STONE)
    # Colors swapped: a white chain laddered by Black.
    swapped = SHAPE.replace("X", "x").replace("O", "X").replace("x", "O")
    board = gd.board(swapped, to_move=BLACK)
    assert ladder.working_moves(board, STONE) == sorted([FROM_BELOW, FROM_RIGHT])
    assert ladder.ladder_moves(board) == sorted([FROM_BELOW, FROM_RIGHT])


def test_ladder_moves_only_attack_the_opponent() -> None:
    # Black to move: the laddered chain is Black's own, so Black has no working ladder move,
    # but the chain still counts as one move from inescapable atari.
    board = gd.board(SHAPE, to_move=BLACK)
    assert ladder.ladder_moves(board) == []
    assert ladder.is_laddered(board, STONE)


def test_working_move_must_be_legal_on_the_board() -> None:
    # White's ko capture at (6,4) leaves the big white chain with liberties (6,0) and (6,3).
    # Black retaking the ko at (6,3) would ladder it, but simple ko forbids that right now.
    diagram = """
    X X X O O O .
    X X X X X O O
    X X O O O O O
    X . X O O O X
    . X X X O X .
    O X O X X . X
    O O O X . X .
    """
    board = gd.board(diagram, to_move=WHITE, rules=parse_rules("ko=simple,suicide=no"))
    board.play(gd.move(6, 4, 7))
    retake = gd.move(6, 3, 7)
    assert board.ko_point == retake
    white_chain = gd.move(3, 0, 7)
    assert board.chain_liberties(white_chain) == 2
    assert ladder.working_moves(board, white_chain) == []
    assert ladder.ladder_moves(board) == []
    # Once the ko ban is lifted (the turn passes round), retaking works.
    board.to_move = WHITE
    board.to_move = BLACK
    assert ladder.working_moves(board, white_chain) == [retake]


def test_chain_with_many_liberties_is_not_laddered() -> None:
    board = Board(9)
    board.play(40)
    assert not ladder.is_laddered(board, 40)
    assert ladder.working_moves(board, 40) == []


def test_bad_points_raise() -> None:
    board = Board(9)
    with pytest.raises(ValueError, match="no stone"):
        ladder.is_laddered(board, 0)
    with pytest.raises(ValueError, match="not a point"):
        ladder.working_moves(board, 81)
