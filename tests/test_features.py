"""Input features: every plane and global on hand-built positions, buffers, symmetry."""
from __future__ import annotations

import random

import go_diagram as gd
import numpy as np
import pytest

from tengen.go import planes as P
from tengen.go import symmetry
from tengen.go.board import BLACK, WHITE, Board
from tengen.go.features import encode
from tengen.go.rules import CHINESE, TROMP_TAYLOR, parse_rules


def features(board: Board, prev1: Board | None = None, prev2: Board | None = None,
             size: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    h, w = size or (board.y_size, board.x_size)
    spatial = np.zeros((P.NUM_SPATIAL, h, w), np.float32)
    global_ = np.zeros(P.NUM_GLOBAL, np.float32)
    encode(board, spatial, global_, prev1, prev2)
    return spatial, global_


def test_on_board_stones_and_liberties() -> None:
    position = """
    X O . . . . .
    X . . . . . .
    . . . . . . .
    . . . O O . .
    . . . O X . .
    . . . . O . .
    . . . . . . .
    """
    liberties = """
    2 2 . . . . .
    2 . . . . . .
    . . . . . . .
    . . . + + . .
    . . . + 1 . .
    . . . . 3 . .
    . . . . . . .
    """
    expected = gd.marks(liberties)
    marks = gd.marks(position.replace("X", "x").replace("O", "o"))
    for to_move, own, opp in ((BLACK, "x", "o"), (WHITE, "o", "x")):
        spatial, _ = features(gd.board(position, to_move=to_move))
        assert spatial[P.ON_BOARD].all()
        assert gd.points(spatial[P.OWN_STONE]) == marks[own]
        assert gd.points(spatial[P.OPP_STONE]) == marks[opp]
        for k in range(3):
            assert gd.points(spatial[P.LIBERTIES_1 + k]) == expected[str(k + 1)]
        # Binary planes only.
        assert set(np.unique(spatial)) <= {0.0, 1.0}


KO = """
. . . . . . .
. X O . . . .
X . X O . . .
. X O . . . .
. . . . . . .
. . . . . . .
. . . . . . .
"""
KO_TAKE = gd.move(1, 2, 7)  # White captures the black stone at (2, 2)
KO_POINT = gd.move(2, 2, 7)


@pytest.mark.parametrize("rules", [parse_rules("ko=simple,suicide=no"), CHINESE])
def test_simple_ko_point_is_ko_illegal(rules) -> None:
    board = gd.board(KO, to_move=WHITE, rules=rules)
    board.play(KO_TAKE)
    assert board.ko_point == KO_POINT
    spatial, _ = features(board)
    assert gd.points(spatial[P.KO_ILLEGAL]) == {KO_POINT}


def test_superko_illegal_point_after_passes() -> None:
    # White takes the ko, both pass: simple ko allows the retake now, but it would recreate the
    # position before White's capture, which superko forbids.
    for rules, expected in (
        (parse_rules("ko=simple,suicide=no"), set()),
        (parse_rules("ko=positional,suicide=no"), {KO_POINT}),
        (parse_rules("ko=situational,suicide=yes"), {KO_POINT}),
    ):
        board = gd.board(KO, to_move=WHITE, rules=rules)
        board.play(KO_TAKE)
        board.play(board.pass_move)
        board.play(board.pass_move)
        assert board.illegal_reason(KO_POINT) == ("superko" if expected else None)
        spatial, global_ = features(board)
        assert gd.points(spatial[P.KO_ILLEGAL]) == expected, rules
        # History: White passed, Black passed, White took the ko.
        np.testing.assert_array_equal(global_[P.PREV_PASS_1:P.PREV_PASS_1 + 5], [1, 1, 0, 0, 0])
        assert gd.points(spatial[P.PREV_MOVE_1 + 2]) == {KO_TAKE}
        assert not spatial[P.PREV_MOVE_1:P.PREV_MOVE_1 + 2].any()


def test_suicide_points_are_not_ko_illegal() -> None:
    board = gd.board("""
    . X . . . . .
    X . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    """, to_move=WHITE, rules=CHINESE)
    assert board.illegal_reason(0) == "suicide"
    spatial, _ = features(board)
    assert not spatial[P.KO_ILLEGAL].any()


def test_last_five_moves_and_passes() -> None:
    board = Board(9)
    moves = [10, 20, 30, board.pass_move, 40, 50, 60]
    for m in moves:
        board.play(m)
    spatial, global_ = features(board)  # White to move; last move 60 by Black
    recent = list(reversed(moves))[:5]  # 60, 50, 40, pass, 30
    for i, m in enumerate(recent):
        plane = spatial[P.PREV_MOVE_1 + i]
        if m == board.pass_move:
            assert not plane.any() and global_[P.PREV_PASS_1 + i] == 1.0
        else:
            assert gd.points(plane) == {m} and global_[P.PREV_PASS_1 + i] == 0.0
    # A move out of turn (to_move changed by hand) ends the history the features show.
    board.to_move = BLACK
    spatial, global_ = features(board)
    assert not spatial[P.PREV_MOVE_1:P.PREV_MOVE_1 + 5].any()
    assert not global_[P.PREV_PASS_1:P.PREV_PASS_1 + 5].any()


def test_fewer_than_five_moves() -> None:
    board = Board(7)
    board.play(3)
    board.play(board.pass_move)
    spatial, global_ = features(board)
    np.testing.assert_array_equal(global_[P.PREV_PASS_1:P.PREV_PASS_1 + 5], [1, 0, 0, 0, 0])
    assert gd.points(spatial[P.PREV_MOVE_1 + 1]) == {3}
    assert spatial[P.PREV_MOVE_1:P.PREV_MOVE_1 + 5].sum() == 1


LADDER_START = """
. . . . . . . . .
. . . . . . . . .
. . . O . . . . .
. . O X . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
"""
STONE = gd.move(3, 3, 9)


def test_ladder_planes_now_and_one_and_two_turns_ago() -> None:
    b0 = gd.board(LADDER_START, to_move=WHITE)  # two liberties, no working atari yet
    b1 = b0.copy()
    b1.play(gd.move(4, 4, 9))  # the diagonal stone makes the ladder work
    b2 = b1.copy()
    b2.play(gd.move(6, 6, 9))  # Black plays elsewhere
    b3 = b2.copy()
    b3.play(gd.move(3, 4, 9))  # White's atari: the stone is in inescapable atari

    spatial, _ = features(b2, b1, b0)  # White to move
    assert gd.points(spatial[P.LADDERED_0]) == {STONE}
    assert gd.points(spatial[P.LADDERED_1]) == {STONE}
    assert not spatial[P.LADDERED_2].any()
    assert gd.points(spatial[P.LADDER_WORKING_MOVE]) == {gd.move(3, 4, 9), gd.move(4, 3, 9)}

    spatial, _ = features(b3, b2, b1)  # Black to move: its own stone is laddered
    for plane in (P.LADDERED_0, P.LADDERED_1, P.LADDERED_2):
        assert gd.points(spatial[plane]) == {STONE}
    assert not spatial[P.LADDER_WORKING_MOVE].any()

    # Missing history: the oldest known position stands in.
    only_now, _ = features(b2)
    np.testing.assert_array_equal(only_now[P.LADDERED_1], only_now[P.LADDERED_0])
    np.testing.assert_array_equal(only_now[P.LADDERED_2], only_now[P.LADDERED_0])
    one_back, _ = features(b2, b0)
    assert not one_back[P.LADDERED_1].any() and not one_back[P.LADDERED_2].any()


def test_ladder_planes_with_a_breaker() -> None:
    board = gd.board(LADDER_START, to_move=WHITE)
    board.place_stones(black=[gd.move(6, 1, 9), gd.move(1, 6, 9)], white=[gd.move(4, 4, 9)])
    board.to_move = WHITE
    spatial, _ = features(board)
    assert not spatial[P.LADDERED_0].any()
    assert not spatial[P.LADDER_WORKING_MOVE].any()


def test_globals_komi_and_rules() -> None:
    for rules, simple, kind, suicide in (
        (parse_rules("ko=simple,suicide=no"), 1.0, 0.0, 0.0),
        (CHINESE, 0.0, 0.5, 0.0),
        (TROMP_TAYLOR, 0.0, 0.5, 1.0),
        (parse_rules("ko=situational,suicide=yes"), 0.0, -0.5, 1.0),
    ):
        board = Board(9, rules=rules, komi=7.5)
        _, global_ = features(board)
        assert global_[P.KO_RULE_SIMPLE] == simple
        assert global_[P.KO_RULE_KIND] == kind
        assert global_[P.SUICIDE_ALLOWED] == suicide
    board = Board(9, komi=6.0)
    _, global_ = features(board)
    assert global_[P.KOMI] == pytest.approx(-6.0 / 15)
    board.play(0)
    _, global_ = features(board)
    assert global_[P.KOMI] == pytest.approx(6.0 / 15)


@pytest.mark.parametrize("x_size, y_size, komi, to_move, expected", [
    # 9x9 (odd area): odd integer komi can draw.
    (9, 9, 7.0, WHITE, 0.0),
    (9, 9, 7.5, WHITE, 0.5),   # ties at +7 go to White
    (9, 9, 7.5, BLACK, -0.5),
    (9, 9, 6.5, WHITE, -0.5),  # ties at +7 go to Black
    (9, 9, 8.0, WHITE, 0.0),   # an integer komi that cannot draw: halfway between
    (9, 9, 0.5, BLACK, 0.5),   # ties at Black +1 go to Black
    (9, 9, -7.5, WHITE, -0.5),
    # 8x8 (even area): even integer komi can draw.
    (8, 8, 7.5, WHITE, -0.5),
    (8, 8, 8.5, WHITE, 0.5),
    (8, 8, 8.0, BLACK, 0.0),
    (19, 19, 7.5, WHITE, 0.5),
    (7, 8, 0.5, WHITE, 0.5),
    (7, 8, -0.5, WHITE, -0.5),
])
def test_komi_parity(x_size, y_size, komi, to_move, expected) -> None:
    board = Board(x_size, y_size, komi=komi)
    board.to_move = to_move
    _, global_ = features(board)
    assert global_[P.KOMI_PARITY] == pytest.approx(expected)


def random_game(size: int, moves: int, seed: int) -> list[int]:
    """Move list of a random legal game (passes avoided while a legal point exists)."""
    rng = random.Random(seed)
    board = Board(size)
    played = []
    for _ in range(moves):
        legal = np.flatnonzero(board.legal_moves()[:-1])
        move = int(rng.choice(legal)) if len(legal) else board.pass_move
        board.play(move)
        played.append(move)
    return played


def replay(size: int, moves: list[int]) -> list[Board]:
    """The boards after each move (the start position first)."""
    boards = [Board(size)]
    for m in moves:
        nxt = boards[-1].copy()
        nxt.play(m)
        boards.append(nxt)
    return boards


def test_small_board_in_a_large_buffer_is_the_same_in_the_corner() -> None:
    boards = replay(9, random_game(9, 60, seed=3))
    board, prev1, prev2 = boards[-1], boards[-2], boards[-3]
    exact, g_exact = features(board, prev1, prev2)
    spatial = np.full((P.NUM_SPATIAL, 19, 19), 7.0, np.float32)  # stale data gets overwritten
    global_ = np.full(P.NUM_GLOBAL, 7.0, np.float32)
    encode(board, spatial, global_, prev1, prev2)
    np.testing.assert_array_equal(spatial[:, :9, :9], exact)
    assert not spatial[:, 9:, :].any() and not spatial[:, :, 9:].any()
    np.testing.assert_array_equal(global_, g_exact)
    assert spatial[P.ON_BOARD].sum() == 81


def test_symmetric_position_gives_symmetric_features() -> None:
    size = 9
    moves = random_game(size, 70, seed=14)  # a position with a ko, ladders and a working move
    boards = replay(size, moves)
    spatial, global_ = features(boards[-1], boards[-2], boards[-3])
    for plane in (P.LIBERTIES_1, P.KO_ILLEGAL, P.PREV_MOVE_1 + 4, P.LADDERED_0, P.LADDERED_2,
                  P.LADDER_WORKING_MOVE):
        assert spatial[plane].any(), plane
    for s in range(1, 8):
        moved = [symmetry.apply_move(m, s, size, size) for m in moves]
        sym_boards = replay(size, moved)
        sym_spatial, sym_global = features(sym_boards[-1], sym_boards[-2], sym_boards[-3])
        np.testing.assert_array_equal(sym_spatial, symmetry.apply_planes(spatial, s))
        np.testing.assert_array_equal(sym_global, global_)


def test_many_random_positions_agree_with_the_board() -> None:
    # Cross-check the simple planes against the board's Python API over whole games.
    for seed, size in ((1, 7), (2, 13)):
        moves = random_game(size, 120, seed)
        boards = replay(size, moves)
        for k in range(3, len(boards), 7):
            board = boards[k]
            spatial, _ = features(board, boards[k - 1], boards[k - 2])
            stones = board.stones().ravel()
            own = {m for m in range(size * size) if stones[m] == board.to_move}
            opp = {m for m in range(size * size) if stones[m] == 3 - board.to_move}
            assert gd.points(spatial[P.OWN_STONE]) == own
            assert gd.points(spatial[P.OPP_STONE]) == opp
            for m in own | opp:
                libs = board.chain_liberties(m)
                for j in range(3):
                    assert spatial[P.LIBERTIES_1 + j].flat[m] == (libs == j + 1)
            ko = {m for m in range(size * size) if board.illegal_reason(m) in ("ko", "superko")}
            assert gd.points(spatial[P.KO_ILLEGAL]) == ko
            assert gd.points(spatial[P.PREV_MOVE_1]) == ({moves[k - 1]} - {board.pass_move})


def test_bad_buffers_and_boards() -> None:
    board = Board(9)
    global_ = np.zeros(P.NUM_GLOBAL, np.float32)
    with pytest.raises(ValueError, match="cannot hold"):
        encode(board, np.zeros((P.NUM_SPATIAL, 8, 9), np.float32), global_)
    with pytest.raises(ValueError, match="cannot hold"):
        encode(board, np.zeros((P.NUM_SPATIAL - 1, 9, 9), np.float32), global_)
    with pytest.raises(ValueError, match="global buffer"):
        encode(board, np.zeros((P.NUM_SPATIAL, 9, 9), np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="dtype"):
        encode(board, np.zeros((P.NUM_SPATIAL, 9, 9), np.float64), global_)
    with pytest.raises(ValueError, match="prev1 is 13x13"):
        encode(board, np.zeros((P.NUM_SPATIAL, 9, 9), np.float32), global_, Board(13))
    with pytest.raises(ValueError, match="prev2 given without prev1"):
        encode(board, np.zeros((P.NUM_SPATIAL, 9, 9), np.float32), global_, None, Board(9))


def test_pass_alive_stones_and_territory() -> None:
    # Black's two-eyed group (top left) and White's two-eyed group (bottom right) with a dead
    # black stone inside its territory are pass-alive; White's wall at the top is not.
    position = """
    * b * b O . . . .
    b b b b O . . . .
    O O O O O . . . .
    . . . . . . . . .
    . . . . . . . . .
    . . . . . w w w w
    . . . . . w # x #
    . . . . . w w w w
    . . . . . w # w #
    """
    expected = gd.marks(position)
    black_alive = expected["*"] | expected["b"]
    white_alive = expected["w"] | expected["#"] | expected["x"]
    plain = position.replace("b", "X").replace("w", "O").replace("*", ".").replace("#", ".")
    for to_move, own, opp in ((BLACK, black_alive, white_alive), (WHITE, white_alive, black_alive)):
        spatial, _ = features(gd.board(plain, to_move=to_move))
        assert gd.points(spatial[P.PASS_ALIVE_OWN]) == own
        assert gd.points(spatial[P.PASS_ALIVE_OPP]) == opp


def test_rectangular_board_in_a_square_buffer() -> None:
    board = Board(9, 7)  # 9 columns, 7 rows
    board.play(gd.move(8, 6, 9))  # bottom-right corner
    spatial, _ = features(board, size=(19, 19))
    assert gd.points(spatial[P.ON_BOARD][:7, :9]) == set(range(63))
    assert spatial[P.ON_BOARD].sum() == 63
    assert spatial[P.OPP_STONE, 6, 8] == 1.0 and spatial[P.PREV_MOVE_1, 6, 8] == 1.0
    assert spatial[P.LIBERTIES_2, 6, 8] == 1.0


def test_random_positions_of_every_size_keep_plane_invariants() -> None:
    from tengen.go import ladder

    for size in range(7, 20, 2):
        moves = random_game(size, size * size // 2, seed=size)
        boards = replay(size, moves)
        for k in range(2, len(boards), max(1, len(boards) // 6)):
            board = boards[k]
            spatial, _ = features(board, boards[k - 1], boards[k - 2], size=(19, 19))
            stones = gd.points(spatial[P.OWN_STONE]) | gd.points(spatial[P.OPP_STONE])
            legal = set(np.flatnonzero(board.legal_moves()[:-1]))
            mapped = {m // 19 * size + m % 19 for m in gd.points(spatial[P.LADDER_WORKING_MOVE])}
            assert mapped == set(ladder.ladder_moves(board))
            assert mapped <= legal
            assert gd.points(spatial[P.LADDERED_0]) <= stones
            assert not gd.points(spatial[P.KO_ILLEGAL]) & stones
            assert set(np.unique(spatial)) <= {0.0, 1.0}
