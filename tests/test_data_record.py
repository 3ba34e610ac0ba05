"""GameRecord: protobuf round-trip, bindings in sync with proto/game.proto, and validation."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from tengen.data.synthetic import random_game
from tengen.loop.rows import RecordError, decode, validate
from tengen.proto import game_pb2, generate


@pytest.fixture(scope="module")
def game() -> game_pb2.GameRecord:
    return random_game(np.random.default_rng(7), 9, full_search_prob=0.5)


def test_round_trip_keeps_every_field(game: game_pb2.GameRecord) -> None:
    game.initial_white.extend([3])  # exercise the field even though random games leave it empty
    data = game.SerializeToString()
    back = decode(data)
    assert back == game
    assert back.SerializeToString() == data
    assert list(back.ownership) == list(game.ownership) and min(back.ownership) >= -1
    assert back.moves[0].color == game.moves[0].color
    assert back.created.ToNanoseconds() == game.created.ToNanoseconds() > 0
    del game.initial_white[:]


def test_bindings_match_the_proto() -> None:
    """The committed game_pb2*.py are what the project's generator makes of proto/game.proto."""
    stale = [name for name in generate.stale_files() if name.startswith("game_")]
    assert stale == [], f"stale {stale}: run python -m tengen.proto.generate"
    assert "game_pb2.py" in generate.generated_names()


@pytest.mark.parametrize(
    "size, rules, handicap",
    [(7, "tromp-taylor", ()), (9, "katago", ()), ((9, 13), "ko=situational,suicide=yes", ()),
     (13, "ko=simple,suicide=no,scoring=area", (40, 42))],
)
def test_random_games_validate(size: int | tuple[int, int], rules: str, handicap: tuple[int, ...]) -> None:
    x, y = size if isinstance(size, tuple) else (size, size)
    record = random_game(np.random.default_rng(x * y), x, y, rules=rules, initial_black=handicap)
    validate(record)
    assert record.end_reason in (game_pb2.TWO_PASSES, game_pb2.MOVE_CAP)
    assert len(record.ownership) == x * y


def _drop_policy_visit(r: game_pb2.GameRecord) -> None:
    move = next(m for m in r.moves if m.full_search)
    del move.policy_visits[-1]


def _first_full(r: game_pb2.GameRecord) -> game_pb2.Move:
    return next(m for m in r.moves if m.full_search)


def _occupied_replay(r: game_pb2.GameRecord) -> None:
    first_stone = next(m.move for m in r.moves if m.move != r.x_size * r.y_size)
    later = next(i for i, m in enumerate(r.moves) if i > 5 and m.move != r.x_size * r.y_size)
    r.moves[later].move = first_stone if r.moves[later].move != first_stone else r.moves[later].move


def _move_after_end(r: game_pb2.GameRecord) -> None:
    r.moves.add(move=0, color=game_pb2.BLACK, weight=1.0)


def _flip_result(r: game_pb2.GameRecord) -> None:
    r.result = ("W" if r.final_score > 0 else "B") + f"+{abs(r.final_score):g}"


def _wrong_score(r: game_pb2.GameRecord) -> None:
    r.final_score += 2.0
    r.result = "0" if r.final_score == 0 else f"{'B' if r.final_score > 0 else 'W'}+{abs(r.final_score):g}"


def _early_end_too_early(r: game_pb2.GameRecord) -> None:
    del r.moves[10:]
    r.end_reason = game_pb2.PASS_ALIVE


def _policy_on_a_stone(r: game_pb2.GameRecord) -> None:
    """A later full search's policy target on the point of Black's first stone (never captured in
    the fixture game, checked by the breaker's own assertion)."""
    stone = r.moves[0].move
    move = next(m for i, m in enumerate(r.moves) if i > 10 and m.full_search and stone not in m.policy_moves)
    move.policy_moves[0] = stone


def _too_long(r: game_pb2.GameRecord) -> None:
    area = r.x_size * r.y_size
    r.moves.extend([game_pb2.Move(move=area, color=game_pb2.BLACK, weight=1.0)] * (5 * area + 1 - len(r.moves)))


def _surprise(first: float) -> Callable[[game_pb2.GameRecord], None]:
    """Policy surprise 0.1 on every full search but the first, which gets `first`."""
    def breaker(r: game_pb2.GameRecord) -> None:
        for m in r.moves:
            if m.full_search:
                m.policy_surprise = 0.1
        _first_full(r).policy_surprise = first
    return breaker


BREAKERS: dict[str, tuple[Callable[[game_pb2.GameRecord], None], str]] = {
    "empty id": (lambda r: setattr(r, "id", ""), "game id is missing"),
    "id with a newline": (lambda r: setattr(r, "id", "g1\nINFO forged log line"), r"holds '\n'"),
    "id with U+2028": (lambda r: setattr(r, "id", "g1\u2028x"), r"holds '\u2028'"),
    "id with NUL": (lambda r: setattr(r, "id", "g1\x00"), r"holds '\x00'"),
    "id with a path": (lambda r: setattr(r, "id", "../../etc/passwd"), "holds '/'"),
    "id too long": (lambda r: setattr(r, "id", "g" * 129), "129 characters long, over 128"),
    "board too small": (lambda r: setattr(r, "x_size", 6), "x_size 6 is outside"),
    "board too large": (lambda r: setattr(r, "y_size", 20), "y_size 20 is outside"),
    "bad rules": (lambda r: setattr(r, "rules", "japanese"), "bad rules"),
    "quarter komi": (lambda r: setattr(r, "komi", 7.25), "komi must be"),
    "nan komi": (lambda r: setattr(r, "komi", float("nan")), "komi must be"),
    "no first player": (lambda r: setattr(r, "first_to_move", game_pb2.COLOR_UNSPECIFIED), "first_to_move"),
    "policy arrays differ": (_drop_policy_visit, "policy_visits"),
    "zero visits": (lambda r: _first_full(r).policy_visits.__setitem__(0, 0), "visits must be > 0"),
    "policy move off board": (lambda r: _first_full(r).policy_moves.__setitem__(0, 500), "outside"),
    "negative weight": (lambda r: setattr(r.moves[0], "weight", -1.0), "weight must be"),
    "nan weight": (lambda r: setattr(r.moves[0], "weight", float("nan")), "weight must be"),
    "inf weight": (lambda r: setattr(r.moves[0], "weight", float("inf")), "weight must be"),
    "huge weight": (lambda r: setattr(r.moves[0], "weight", 3e38), "weight must be within 0..1"),
    "policy target on a stone": (_policy_on_a_stone, "is illegal there: occupied"),
    "too many moves": (_too_long, "406 moves: a 9x9 game has at most 405"),
    "value sum": (
        lambda r: setattr(_first_full(r), "value_win", 0.0) or setattr(_first_full(r), "value_loss", 0.2),
        "sum to",
    ),
    "full search without target": (
        lambda r: _first_full(r).ClearField("policy_moves") or _first_full(r).ClearField("policy_visits"),
        "needs a policy target",
    ),
    "move off board": (lambda r: setattr(r.moves[3], "move", 82), "outside 0..81"),
    "no color": (lambda r: setattr(r.moves[2], "color", game_pb2.COLOR_UNSPECIFIED), "color must be"),
    "occupied point": (_occupied_replay, "illegal: occupied"),
    "move after the end": (_move_after_end, "after two consecutive passes"),
    "result disagrees": (_flip_result, "disagrees with final_score"),
    "score disagrees with board": (_wrong_score, "final position scores"),
    "ownership length": (lambda r: r.ownership.append(0), "ownership has 82"),
    "ownership value": (lambda r: r.ownership.__setitem__(0, 2), "ownership values"),
    "ownership disagrees": (
        lambda r: r.ownership.__setitem__(40, 1 if r.ownership[40] != 1 else -1),
        "ownership disagrees with the final position at 1 points",
    ),
    "not all pass-alive": (_early_end_too_early, "not all pass-alive"),
    "no end reason": (lambda r: setattr(r, "end_reason", game_pb2.END_REASON_UNSPECIFIED), "end_reason"),
    "setup overlap": (lambda r: r.initial_black.extend([5]) or r.initial_white.extend([5]), "initial stones"),
    "negative surprise": (_surprise(-0.1), "policy_surprise must be within 0..30"),
    "nan surprise": (_surprise(float("nan")), "policy_surprise must be within 0..30"),
    "huge surprise": (_surprise(31.0), "policy_surprise must be within 0..30"),
    "surprise on a fast move": (
        lambda r: setattr(next(m for m in r.moves if not m.full_search), "policy_surprise", 0.1),
        "policy_surprise on a move that is not a full search",
    ),
    "surprise on some full searches": (
        lambda r: setattr(_first_full(r), "policy_surprise", 0.1),
        "policy_surprise is set on 1 of",
    ),
}


@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_validate_names_the_problem(game: game_pb2.GameRecord, name: str) -> None:
    assert game.end_reason == game_pb2.TWO_PASSES  # the breakers below assume a finished 9x9 game
    broken = game_pb2.GameRecord()
    broken.CopyFrom(game)
    breaker, reason = BREAKERS[name]
    breaker(broken)
    with pytest.raises(RecordError) as err:
        validate(broken)
    assert reason in err.value.reason


def test_garbage_bytes_are_a_record_error() -> None:
    with pytest.raises(RecordError, match="malformed"):
        decode(b"\xff\xff\xff\xff not a protobuf")
