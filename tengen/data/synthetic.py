"""Random-play GameRecords: valid, replayable games without a net, for tests and benchmarks.

Each turn the mover plays a uniformly random legal point that does not fill its own simple eye,
and passes when none is left; the game ends after two passes or at a move cap. A random subset of
turns is marked as full searches with a made-up sparse policy target (that always includes the
move played) and search values. Score, result and ownership are what tengen.go.passalive makes of
the final position under the game's rules.
"""
from __future__ import annotations

import time
import uuid

import numpy as np

from tengen.go import passalive
from tengen.go.board import BLACK, WHITE, Board
from tengen.go.rules import parse_rules
from tengen.proto import game_pb2


def random_game(
    rng: np.random.Generator,
    x_size: int = 9,
    y_size: int | None = None,
    rules: str = "tromp-taylor",
    komi: float = 7.5,
    full_search_prob: float = 0.25,
    max_moves_factor: float = 3.0,
    initial_black: tuple[int, ...] = (),
    game_id: str | None = None,
) -> game_pb2.GameRecord:
    """Play one random game and return it as a GameRecord."""
    y_size = x_size if y_size is None else y_size
    board = Board(x_size, y_size, parse_rules(rules), komi)
    board.place_stones(black=list(initial_black))
    first = WHITE if initial_black else BLACK
    board.to_move = first
    record = game_pb2.GameRecord(
        id=game_id or uuid.uuid4().hex,
        x_size=x_size,
        y_size=y_size,
        rules=parse_rules(rules).to_string(),
        komi=komi,
        handicap=len(initial_black),
        initial_black=list(initial_black),
        first_to_move=first,
        model_version=0,
        model_name="random",
    )
    record.created.FromNanoseconds(time.time_ns())
    area = x_size * y_size
    max_moves = int(max_moves_factor * area)
    while not board.game_over and len(record.moves) < max_moves:
        legal = board.legal_moves()
        stones = board.stones()
        candidates = [m for m in np.flatnonzero(legal[:area]) if not _own_eye(stones, m, board.to_move)]
        move = int(rng.choice(candidates)) if candidates else area
        entry = record.moves.add(move=move, color=board.to_move, weight=float(rng.uniform(0.5, 1.0)))
        if rng.random() < full_search_prob:
            entry.full_search = True
            others = rng.choice(np.flatnonzero(legal), size=min(4, int(legal.sum())), replace=False)
            targets = sorted({move, *map(int, others)})
            entry.policy_moves.extend(targets)
            entry.policy_visits.extend(int(v) for v in rng.integers(1, 50, size=len(targets)))
            win = float(rng.random())
            entry.value_win, entry.value_loss = win, 1.0 - win
            entry.score_mean = float(rng.normal(0.0, 5.0))
        board.play(move)
    record.end_reason = game_pb2.TWO_PASSES if board.game_over else game_pb2.MOVE_CAP
    record.ownership.extend(int(o) for o in passalive.ownership(board).ravel())
    record.final_score = passalive.final_score(board)
    record.result = passalive.result_string(record.final_score)
    return record


def _own_eye(stones: np.ndarray, move: int, color: int) -> bool:
    """Whether empty point `move` has only `color` stones (or the edge) as neighbours."""
    height, width = stones.shape
    y, x = divmod(int(move), width)
    for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
        if 0 <= ny < height and 0 <= nx < width and stones[ny, nx] != color:
            return False
    return True
