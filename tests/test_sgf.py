"""SGF through sgfmill: round trips of random games, orientation, rules from RU, and errors that
name the property or the move."""
from __future__ import annotations

import logging
import random

import numpy as np
import pytest
from sgfmill import boards as sgfmill_boards
from sgfmill import sgf as sgfmill_sgf
from sgfmill import sgf_moves

from tengen.go.board import BLACK, EMPTY, WHITE, Board
from tengen.go.rules import CHINESE, KATAGO, TROMP_TAYLOR, Rules, parse_rules
from tengen.go.sgf import (
    SgfError,
    SgfGame,
    SgfMoveError,
    iter_boards,
    move_to_gtp,
    read_game,
    replay,
    rules_from_ru,
    search_comment,
    write_game,
)

SIZES = [(7, 7), (9, 9), (13, 13), (19, 19), (9, 7), (7, 11), (19, 13)]


def random_game(
    rng: random.Random, x_size: int, y_size: int, rules: Rules, num_moves: int, setup: bool
) -> tuple[SgfGame, list[np.ndarray]]:
    """A random legal game played on the engine, and the stones after setup and after each move."""
    game = SgfGame(x_size=x_size, y_size=y_size, rules=rules, komi=rng.choice([0.0, 6.5, 7.5, -3]))
    board = Board(x_size, y_size, rules=rules, komi=game.komi)
    if setup:
        points = rng.sample(range(x_size * y_size), 6)
        game.handicap = 4
        game.black_stones, game.white_stones = sorted(points[:4]), sorted(points[4:5])
        board.place_stones(black=game.black_stones, white=game.white_stones)
        board.to_move = WHITE
    snapshots = [board.stones().copy()]
    for _ in range(num_moves):
        empty = [m for m in range(board.pass_move) if board.stones().flat[m] == EMPTY]
        rng.shuffle(empty)
        move = next((m for m in empty if board.is_legal(m)), board.pass_move)
        if rng.random() < 0.03:
            move = board.pass_move
        game.moves.append((board.to_move, move))
        board.play(move)
        snapshots.append(board.stones().copy())
    game.comments = [
        search_comment(visits=rng.randrange(1000), winrate=rng.random(), score=rng.gauss(0, 5))
        if rng.random() < 0.5
        else None
        for _ in game.moves
    ]
    game.player_black, game.player_white, game.result = "net-12", "net-11 \\ [v2]", "B+R"
    return game, snapshots


@pytest.mark.parametrize("x_size,y_size", SIZES)
def test_random_games_round_trip(x_size: int, y_size: int) -> None:
    rng = random.Random(x_size * 100 + y_size)
    rules_choices = [KATAGO, TROMP_TAYLOR, parse_rules("ko=situational,suicide=yes,scoring=area")]
    for setup in (False, True, True):
        game, snapshots = random_game(rng, x_size, y_size, rng.choice(rules_choices), 60, setup)
        data = write_game(game)
        back = read_game(data)
        assert back == game
        boards = list(iter_boards(back))
        assert len(boards) == len(snapshots)
        for board, stones in zip(boards, snapshots):
            np.testing.assert_array_equal(board.stones(), stones)
        final = replay(back)
        np.testing.assert_array_equal(final.stones(), snapshots[-1])
        assert final.history == game.moves
        assert final.komi == game.komi and final.rules == game.rules


def test_read_from_str_with_unicode_names() -> None:
    game = read_game("(;GM[1]FF[4]SZ[9]KM[6.5]PB[黒]PW[Wé]RE[W+1.5]C[hello];B[ee]C[first];W[])")
    assert (game.player_black, game.player_white, game.result) == ("黒", "Wé", "W+1.5")
    assert game.comment == "hello"
    assert game.moves == [(BLACK, 4 * 9 + 4), (WHITE, 81)]
    assert game.comments == ["first", None]
    assert read_game(write_game(game)) == game


def test_written_file_properties() -> None:
    game = SgfGame(x_size=9, y_size=9, komi=7.5, rules=TROMP_TAYLOR, handicap=2,
                   black_stones=[2 * 9 + 6, 6 * 9 + 2], moves=[(WHITE, 40), (BLACK, 81)],
                   comments=[search_comment(visits=800, winrate=0.53212, score=-1.25), None])
    text = write_game(game).decode().replace("\n", "")  # sgfmill wraps between properties
    for prop in ("SZ[9]", "KM[7.5]", "RU[ko=positional,suicide=yes,scoring=area]", "HA[2]",
                 "AB[cg][gc]", ";C[visits=800 winrate=0.5321 score=-1.25]W[ee];", ";B[tt])"):
        assert prop in text
    assert read_game(text).rules == TROMP_TAYLOR


def test_orientation_matches_sgfmill_board() -> None:
    """tengen's y = 0 is the top line; sgfmill's row 0 the bottom. Replay one game both ways."""
    rng = random.Random(7)
    game, _ = random_game(rng, 13, 13, KATAGO, 120, setup=True)
    data = write_game(game)
    ours = replay(read_game(data))

    sgf_game = sgfmill_sgf.Sgf_game.from_bytes(data)
    board, plays = sgf_moves.get_setup_and_moves(sgf_game, sgfmill_boards.Board(13))
    for colour, point in plays:
        if point is not None:
            board.play(point[0], point[1], colour)
    theirs = np.zeros((13, 13), dtype=np.int8)
    for row in range(13):
        for col in range(13):
            colour = board.get(row, col)
            if colour is not None:
                theirs[12 - row, col] = BLACK if colour == "b" else WHITE
    np.testing.assert_array_equal(ours.stones(), theirs)
    assert len(game.black_stones) == 4 and np.count_nonzero(theirs) > 40


def test_coordinates_by_hand() -> None:
    game = read_game(b"(;SZ[19];B[dp];W[pd];B[aa];W[sa])")
    assert [move for _, move in game.moves] == [15 * 19 + 3, 3 * 19 + 15, 0, 18]
    vertices = [move_to_gtp(move, 19, 19) for _, move in game.moves]
    assert vertices == ["D4", "Q16", "A19", "T19"]
    assert move_to_gtp(19 * 19, 19, 19) == "pass"
    stones = replay(game).stones()
    assert stones[15, 3] == BLACK and stones[3, 15] == WHITE


def test_rectangular_board() -> None:
    game = read_game(b"(;SZ[9:7];B[ia];W[ag];B[])")
    assert (game.x_size, game.y_size) == (9, 7)
    assert game.moves == [(BLACK, 8), (WHITE, 6 * 9), (BLACK, 63)]
    assert move_to_gtp(8, 9, 7) == "J7" and move_to_gtp(54, 9, 7) == "A1"
    assert b"SZ[9:7]" in write_game(game)
    assert read_game(write_game(game)) == game
    with pytest.raises(SgfError, match=r"move 1: bad B point: off the 9x7 board"):
        read_game(b"(;SZ[9:7];B[ah])")


def test_rules_from_ru(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tengen.go.sgf")
    assert read_game(b"(;SZ[9]RU[Chinese])").rules == CHINESE
    assert read_game(b"(;SZ[9]RU[Tromp-Taylor])").rules == TROMP_TAYLOR
    assert read_game(b"(;SZ[9]RU[katago])").rules == KATAGO
    assert read_game(b"(;SZ[9])").rules == KATAGO
    explicit = "ko=situational,suicide=yes,scoring=area"
    assert read_game(f"(;SZ[9]RU[{explicit}])").rules == parse_rules(explicit)
    assert not caplog.records

    assert rules_from_ru("koSITUATIONALscoreAREAtaxNONEsui1button0") == Rules("situational", True)
    assert not caplog.records
    assert rules_from_ru("AGA") == Rules("situational", False, "katago")
    assert "pass stones" in caplog.text
    caplog.clear()
    assert rules_from_ru("Japanese") == Rules("simple", False, "katago")
    assert "territory scoring" in caplog.text
    caplog.clear()
    assert rules_from_ru("koSIMPLEscoreTERRITORYtaxSEKIsui0") == Rules("simple", False)
    assert "tax SEKI ignored" in caplog.text

    with pytest.raises(SgfError, match=r"bad RU value 'Martian'"):
        read_game(b"(;SZ[9]RU[Martian])")
    # An explicit rules choice wins over RU, which is then not interpreted.
    assert read_game(b"(;SZ[9]RU[Martian])", rules=TROMP_TAYLOR).rules == TROMP_TAYLOR


@pytest.mark.parametrize(
    "data,message",
    [
        (b"(;SZ[abc];B[aa])", "bad SZ value 'abc'"),
        (b"(;SZ[5];B[aa])", "bad SZ value '5': board sides must be 7..19"),
        (b"(;SZ[21])", "bad SZ value '21'"),
        (b"(;SZ[9:3:4])", "bad SZ value '9:3:4'"),
        (b"(;SZ[9]KM[abc])", "bad KM value 'abc'"),
        (b"(;SZ[9]KM[inf])", "bad KM value 'inf'"),
        (b"(;SZ[9]KM[6.75])", "bad KM value '6.75': komi must be a multiple of 0.5 within +-81"),
        (b"(;SZ[9]KM[375])", "bad KM value '375'"),
        (b"(;SZ[9]HA[two])", "bad HA value 'two'"),
        (b"(;GM[2]SZ[9])", "bad GM value '2'"),
        (b"(;SZ[9]CA[klingon])", "bad CA value 'klingon'"),
        (b"(;SZ[9]PL[x])", "bad PL value 'x'"),
        (b"this is not sgf", "not a readable SGF game"),
        (b"(;SZ[9];B[aa];W[bb", "not a readable SGF game"),
        (b"(;SZ[9];B[aa];W[zz])", "move 2: bad W value 'zz'"),
        (b"(;SZ[9];B[aa];W[a])", "move 2: bad W value 'a'"),
        (b"(;SZ[9];B[aa]W[bb])", "move 1: node has both B and W"),
        (b"(;SZ[9]AB[aa]AW[aa])", "bad AB/AW values: both place a stone on A9"),
        (b"(;SZ[9]AB[zz])", "bad AB value 'zz'"),
        (b"(;SZ[9];B[aa];AB[bb])", "node 2: setup stones (AB/AW/AE) after move 1"),
    ],
)
def test_malformed_files_name_the_property(data: bytes, message: str) -> None:
    with pytest.raises(SgfError) as info:
        read_game(data)
    assert message in str(info.value)
    assert not isinstance(info.value, SgfMoveError)


def test_setup_nodes_before_the_first_move() -> None:
    game = read_game(b"(;SZ[9]AB[aa:cc];AE[bb]AW[bb][ii];B[ee])")
    assert game.black_stones == [0, 1, 2, 9, 11, 18, 19, 20]
    assert game.white_stones == [10, 80]
    assert game.starting_player() == BLACK


# Illegal moves; each file's first illegal move, and why. 7x7: GTP row = 7 - y.
ILLEGAL = [
    (b"(;SZ[7];B[aa];W[aa])", "move 2 (W A7): illegal (occupied)"),
    # W A7 with no liberty: single-stone suicide is illegal under every rule set.
    (b"(;SZ[7];B[ab];W[gg];B[ba];W[aa])", "move 4 (W A7): illegal (suicide)"),
    # Multi-stone suicide of W A7-A6 (legal under tromp-taylor, see below).
    (b"(;SZ[7]RU[katago];B[ba];W[aa];B[bb];W[gg];B[ac];W[ab])", "move 6 (W A6): illegal (suicide)"),
    # W takes the ko at B6, Black retakes at C6 at once.
    (b"(;SZ[7]RU[ko=simple,suicide=no]AB[ba][ab][bc][cb]AW[ca][db][cc];W[bb];B[cb])",
     "move 2 (B C6): illegal (ko)"),
    # The same ko retaken after two passes repeats the starting position: positional superko.
    (b"(;SZ[7]RU[katago]AB[ba][ab][bc][cb]AW[ca][db][cc];W[bb];B[];W[];B[cb])",
     "move 4 (B C6): illegal (superko)"),
]


@pytest.mark.parametrize("data,message", ILLEGAL)
def test_illegal_moves_name_the_move_and_reason(data: bytes, message: str) -> None:
    game = read_game(data)
    with pytest.raises(SgfMoveError) as info:
        replay(game)
    assert str(info.value) == message
    assert info.value.number == int(message.split()[1])
    # iter_boards yields every position before the illegal move, then raises the same error.
    boards = []
    with pytest.raises(SgfMoveError, match=message.replace("(", r"\(").replace(")", r"\)")):
        for board in iter_boards(game):
            boards.append(board)
    assert len(boards) == info.value.number


def test_ko_retaken_after_passes_is_legal_under_simple_ko() -> None:
    data = b"(;SZ[7]AB[ba][ab][bc][cb]AW[ca][db][cc];W[bb];B[];W[];B[cb])"
    board = replay(read_game(data, rules=parse_rules("ko=simple,suicide=no")))
    assert board.stones()[1, 2] == BLACK and board.stones()[1, 1] == EMPTY


def test_setup_without_liberties_is_an_error() -> None:
    game = read_game(b"(;SZ[7]AB[ba][ab]AW[aa];B[cc])")
    with pytest.raises(SgfError, match="bad AB/AW values: setup leaves the chain") as info:
        replay(game)
    assert not isinstance(info.value, SgfMoveError)


def test_multi_stone_suicide_legal_under_tromp_taylor() -> None:
    board = replay(read_game(b"(;SZ[7]RU[tromp-taylor];B[ba];W[aa];B[bb];W[gg];B[ac];W[ab])"))
    assert board.stones()[0, 0] == EMPTY and board.stones()[1, 0] == EMPTY


def test_write_rejects_inconsistent_games() -> None:
    with pytest.raises(ValueError, match="2 comments for 1 moves"):
        write_game(SgfGame(x_size=9, y_size=9, moves=[(BLACK, 0)], comments=["a", "b"]))
    with pytest.raises(ValueError, match="move 1: move index 82 off the 9x9 board"):
        write_game(SgfGame(x_size=9, y_size=9, moves=[(BLACK, 82)]))
    with pytest.raises(ValueError, match="outside 7..19"):
        write_game(SgfGame(x_size=21, y_size=21))
