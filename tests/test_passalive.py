"""Benson pass-alive analysis, KataGo's pass-alive-territory scoring and the early end.

Positions are ASCII diagrams ('X' black, 'O' white, '.' empty, top row first); expected maps are
diagrams of 'B' (Black's pass-alive stone or territory), 'W' (White's) and '.' (neither).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from tengen.go.board import BLACK, WHITE, Board
from tengen.go.passalive import (
    all_pass_alive,
    final_score,
    ownership,
    pass_alive_map,
    result_string,
)
from tengen.go.playout import random_game
from tengen.go.rules import IllegalMoveError

NO_SUICIDE = "ko=positional,suicide=no,scoring=katago"
SUICIDE = "ko=positional,suicide=yes,scoring=katago"
AREA = "ko=positional,suicide=no,scoring=area"


def position(diagram: str, rules: str = NO_SUICIDE, komi: float = 7.5) -> Board:
    return Board.from_diagram(diagram, rules=rules, komi=komi)


def expected_map(diagram: str) -> np.ndarray:
    codes = {".": 0, "B": 1, "W": 2}
    rows = [line.replace(" ", "") for line in diagram.strip().splitlines()]
    return np.array([[codes[ch] for ch in row] for row in rows], dtype=np.int8)


def move(board: Board, x: int, y: int) -> int:
    return y * board.x_size + x


def with_rules(board: Board, rules: str) -> Board:
    """The same stones on a fresh board under other rules."""
    stones = board.stones().ravel()
    other = Board(board.x_size, board.y_size, rules=rules, komi=board.komi)
    other.place_stones(black=np.flatnonzero(stones == BLACK).tolist(),
                       white=np.flatnonzero(stones == WHITE).tolist())
    return other


# Black (top) with an eye, a 3x2 edge box holding a dead white stone whose other points all touch
# Black, and a 2x2 corner with one point not touching Black; White (bottom) with eyes and boxes.
SETTLED = """
. . X . O . X . .
X X X . . . X . .
X X X X X X X X X
O O O O O O O O O
. . O . . . O . .
O O O . . . O . .
O O O O O O O O O
O . O . O . O . O
O O O O O O O O O
"""


def test_two_eyes_are_pass_alive_and_a_false_eye_is_not() -> None:
    two_eyes = position("""
        . X . X X O . . .
        X X X X X O . . .
        O O O O O O . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
    """)
    assert (pass_alive_map(two_eyes) == expected_map("""
        B B B B B . . . .
        B B B B B . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
    """)).all()
    # The white cutting stone at (3, 1) splits Black: the eye at (2, 0) is false (the right-hand
    # chain has no other liberty), so the group has one real eye and nothing is pass-alive.
    false_eye = position("""
        . X . X X O . . .
        X X X O X O . . .
        O O O O O O . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
    """)
    assert not pass_alive_map(false_eye).any()
    assert not all_pass_alive(false_eye)


def test_seki_is_not_pass_alive() -> None:
    # Black's cup (1,0)-(5,1) and White's stone at (3,0) share the liberties (2,0) and (4,0) and
    # have no others: seki. White's outer group has two eyes, Black's lower group too.
    board = position("""
        O X . O . X O . O
        O X X X X X O O O
        O O O O O O O . O
        O O O O O O O O O
        X X X X X X X X X
        X . X . X X X X X
        X X X X X X X X X
        X X X X X X X X X
        X X X X X X X X X
    """)
    want = expected_map("""
        W . . . . . W W W
        W . . . . . W W W
        W W W W W W W W W
        W W W W W W W W W
        B B B B B B B B B
        B B B B B B B B B
        B B B B B B B B B
        B B B B B B B B B
        B B B B B B B B B
    """)
    for rules in (NO_SUICIDE, SUICIDE):
        assert (pass_alive_map(with_rules(board, rules)) == want).all(), rules
    assert not all_pass_alive(board)
    # It really is seki: either side filling a shared liberty puts itself in atari.
    for pla, group in ((BLACK, (1, 0)), (WHITE, (3, 0))):
        fill = board.copy()
        fill.to_move = pla
        fill.play(move(fill, 2, 0))
        assert fill.chain_liberties(move(fill, *group)) == 1


def test_dead_stones_in_pass_alive_territory_count_for_its_owner_only_under_katago() -> None:
    katago = position(SETTLED)
    area = position(SETTLED, rules=AREA)
    assert (pass_alive_map(katago) == expected_map("""
        B B B B B B B B B
        B B B B B B B B B
        B B B B B B B B B
        W W W W W W W W W
        W W W W W W W W W
        W W W W W W W W W
        W W W W W W W W W
        W W W W W W W W W
        W W W W W W W W W
    """)).all()
    # KataGo: Black owns rows 0-2 (27, the dead white stone included), White rows 3-8 (54).
    assert final_score(katago) == 27 - 54 - 7.5
    assert result_string(final_score(katago)) == "W+34.5"
    # Tromp-Taylor: the white stone counts for White and makes the box's 5 empty points neutral.
    assert final_score(area) == area.area_score() == 21 - 55 - 7.5
    own = ownership(area)
    assert own[0, 4] == -1 and own[0, 3] == 0 and own[1, 4] == 0 and own[0, 0] == 1
    own_k = ownership(katago)
    assert (own_k[:3] == 1).all() and (own_k[3:] == -1).all()
    for board in (katago, area):
        assert ownership(board).sum() - board.komi == final_score(board)


def test_suicide_rule_decides_whether_a_region_with_opponent_stones_is_vital() -> None:
    # Without suicide Black's eye at (0,0)-(1,0) and the 3x2 box are vital: filling the box's
    # last empty point would be suicide for White. With multi-stone suicide White can fill the
    # box, suicide, refill everything but (4,0) and keep it as its own liberty, so Black is not
    # pass-alive (the 2x2 corner is no eye either: (8,0) does not touch Black).
    suicide = position(SETTLED, rules=SUICIDE)
    got = pass_alive_map(suicide)
    assert not got[:3].any() and (got[3:] == 2).all()
    assert not all_pass_alive(suicide)
    assert final_score(suicide) == suicide.area_score() == 21 - 55 - 7.5
    # Play White's refutation to show the analysis is right.
    for x, y in [(3, 0), (5, 0), (3, 1), (5, 1), (4, 1),  # the last fill is a suicide
                 (3, 0), (3, 1), (4, 1), (5, 1), (5, 0),  # refill, keeping (4, 0) empty
                 (7, 0), (7, 1), (8, 1), (0, 0), (1, 0)]:  # the corner, then the eye: capture
        suicide.to_move = WHITE
        suicide.play(move(suicide, x, y))
    assert not (suicide.stones()[:3] == BLACK).any()
    # Without suicide the box's last fill is illegal, and Black stays pass-alive.
    safe = position(SETTLED)
    for x, y in [(3, 0), (5, 0), (3, 1), (5, 1)]:
        safe.to_move = WHITE
        safe.play(move(safe, x, y))
    safe.to_move = WHITE
    with pytest.raises(IllegalMoveError) as err:
        safe.play(move(safe, 4, 1))
    assert err.value.reason == "suicide"
    assert (pass_alive_map(safe)[:3] == 1).all()


def test_region_with_two_points_away_from_the_border_is_not_territory() -> None:
    # The 4x2 edge box at (3..6, 0..1) has two points, (4,0) and (5,0), that touch no black stone:
    # not pass-alive territory although every bordering black chain is pass-alive.
    board = position("""
        . . X . . . . X .
        X X X . . . . X X
        X X X X X X X X X
        O O O O O O O O O
        . . O . . . O . .
        O O O . . . O . .
        O O O O O O O O O
        O . O . O . O . O
        O O O O O O O O O
    """)
    got = pass_alive_map(board)
    assert (got[:3] == expected_map("""
        B B B . . . . B B
        B B B . . . . B B
        B B B B B B B B B
    """)).all()
    assert not all_pass_alive(board)
    # Outside pass-alive territory scoring is Tromp-Taylor: the box reaches only Black.
    assert (ownership(board)[:3] == 1).all()
    assert final_score(board) == board.area_score() == 27 - 54 - 7.5


def test_early_end_on_a_settled_board_and_not_before() -> None:
    board = position(SETTLED.replace("X X X X X X X X X", "X X X X X X X X .", 1))
    assert not all_pass_alive(board)
    assert pass_alive_map(board)[2, 8] == 0
    board.to_move = BLACK
    board.play(move(board, 8, 2))
    assert all_pass_alive(board)
    # Under plain area scoring the dead white stone in Black's territory still counts for White,
    # so the game is not over until Black captures it.
    area = with_rules(board, AREA)
    assert not all_pass_alive(area)
    for x, y in [(3, 0), (5, 0), (3, 1), (5, 1), (4, 1)]:
        area.to_move = BLACK
        area.play(move(area, x, y))
    assert all_pass_alive(area)


def test_empty_board_and_lone_stones() -> None:
    board = Board(9, rules=NO_SUICIDE)
    assert not pass_alive_map(board).any()
    assert not all_pass_alive(board)
    assert final_score(board) == -7.5
    board.play(move(board, 4, 4))
    # One black stone: Tromp-Taylor gives Black the whole board; nothing is pass-alive.
    assert not pass_alive_map(board).any()
    assert final_score(board) == 81 - 7.5
    assert (ownership(board) == 1).all()


def test_api_errors_and_result_strings() -> None:
    board = Board(9)
    with pytest.raises(ValueError, match="player"):
        pass_alive_map(board, player=3)
    with pytest.raises(TypeError):
        pass_alive_map(np.zeros((9, 9)))
    assert result_string(3.5) == "B+3.5"
    assert result_string(-0.5) == "W+0.5"
    assert result_string(0.0) == "0"
    assert result_string(-12) == "W+12"
    with pytest.raises(ValueError):
        result_string(float("nan"))


def random_finished_games(count: int, seed: int, rules: str):
    rng = random.Random(seed)
    for i in range(count):
        x_size = rng.randint(7, 19)
        y_size = rng.choice([x_size, rng.randint(7, 19)])
        board = Board(x_size, y_size, rules=rules, komi=rng.choice([0.0, 6.5, 7.5, -3.0]))
        random_game(board, seed * 1000 + i)
        yield board


def test_area_scoring_matches_tromp_taylor_and_katago_differs_only_on_pass_alive_points() -> None:
    for board in random_finished_games(60, seed=1, rules=AREA):
        assert board.game_over or board.num_moves >= 3 * board.x_size * board.y_size
        score = final_score(board)
        assert score == board.area_score()
        assert ownership(board).sum() - board.komi == score
        katago = with_rules(board, NO_SUICIDE)
        alive = pass_alive_map(katago)
        own_k = ownership(katago)
        assert own_k.sum() - katago.komi == final_score(katago)
        marked = alive != 0
        assert (own_k[marked] == np.where(alive[marked] == 1, 1, -1)).all()
        assert (own_k[~marked] == ownership(board)[~marked]).all()
        # Per player maps never overlap, and the suicide rule can only take pass-alive away.
        black, white = pass_alive_map(katago, BLACK), pass_alive_map(katago, WHITE)
        assert not (black.astype(bool) & white.astype(bool)).any()
        assert ((black + white) == alive).all()
        loose = pass_alive_map(with_rules(board, SUICIDE))
        assert ((loose == 0) | (loose == alive)).all()


@pytest.mark.parametrize("rules", ["ko=simple,suicide=no", "ko=simple,suicide=yes"])
def test_opponent_with_unlimited_moves_never_captures_pass_alive_stones(rules: str) -> None:
    """Pass-alive status cannot be lost while the opponent moves and the owner passes, so every
    stone and territory point marked at the start must still be marked after each opponent move.
    The opponent prefers moves next to the marked stones and plays suicides where legal."""
    rng = random.Random(7)
    checked = 0
    positions = []
    for board in random_finished_games(10, seed=2, rules=rules):
        positions += [board, _replayed(board, 2 * board.num_moves // 3)]
    for board in positions:
        for pla in (BLACK, WHITE):
            start = pass_alive_map(board, pla) != 0
            if not start.any():
                continue
            checked += 1
            stones_at_start = start & (board.stones() == pla)
            near_start = _dilate(start).ravel()
            attack = board.copy()
            opp = 3 - pla
            for _ in range(2 * attack.x_size * attack.y_size):
                attack.to_move = opp
                legal = np.flatnonzero(attack.legal_moves()[:-1])
                if legal.size == 0:
                    break
                near = legal[near_start[legal]]
                pool = near if near.size and rng.random() < 0.8 else legal
                attack.play(int(pool[rng.randrange(pool.size)]))
                assert (attack.stones()[stones_at_start] == pla).all()
                assert (pass_alive_map(attack, pla)[start] == pla).all()
    assert checked >= 20


def _replayed(board: Board, num_moves: int) -> Board:
    """The position after the first num_moves moves of board's game (mid-game: groups with one
    eye and outside liberties, unsettled regions)."""
    mid = Board(board.x_size, board.y_size, rules=board.rules, komi=board.komi)
    for _, m in board.history[:num_moves]:
        mid.play(m)
    return mid


def _dilate(mask: np.ndarray) -> np.ndarray:
    """The mask plus its orthogonal neighbours."""
    out = mask.copy()
    out[1:] |= mask[:-1]
    out[:-1] |= mask[1:]
    out[:, 1:] |= mask[:, :-1]
    out[:, :-1] |= mask[:, 1:]
    return out
