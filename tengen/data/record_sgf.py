"""GameRecord -> SGF, so people can look at self-play games in any Go program.

The SGF carries the game's exact rules (RU in tengen's explicit form), komi, the handicap (Black's
free moves are ordinary consecutive B moves, as they were played), the players (model name and
version), the result, and on each move its search summary from Black's point of view
(`winrate=0.5321 score=+1.25`, `full` on the recorded full-search turns), as `tengen.go.sgf`
writes it. Reading the file back with `tengen.go.sgf.read_game` gives the same moves.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from tengen.go.board import BLACK, WHITE
from tengen.go.rules import parse_rules
from tengen.go.sgf import SgfGame, search_comment, write_game
from tengen.proto import game_pb2

_END_REASONS = {game_pb2.TWO_PASSES: "two passes", game_pb2.PASS_ALIVE: "all pass-alive",
                game_pb2.MOVE_CAP: "move cap"}


def _move_comment(move: game_pb2.Move) -> str:
    """The search summary of one turn, Black's view (the record stores the mover's)."""
    black = move.color == game_pb2.BLACK
    win = move.value_win + 0.5 * move.value_no_result
    loss = move.value_loss + 0.5 * move.value_no_result
    extra: dict[str, Any] = {}  # search_comment's extra key=value pairs
    if move.full_search:
        extra["full"] = sum(move.policy_visits)
    if move.weight != 1.0:
        extra["weight"] = float(move.weight)
    if move.value_win + move.value_loss + move.value_no_result <= 0:  # a move played without a search
        return search_comment(**extra)
    return search_comment(winrate=win if black else loss,
                          score=move.score_mean if black else -move.score_mean, **extra)


def record_to_sgf(record: game_pb2.GameRecord) -> SgfGame:
    """The game of `record` as an SgfGame (main line only). Raises ValueError on bad rules."""
    player = f"{record.model_name or 'tengen'} v{record.model_version}"
    moves = [(BLACK if m.color == game_pb2.BLACK else WHITE, int(m.move)) for m in record.moves]
    return SgfGame(
        x_size=record.x_size,
        y_size=record.y_size,
        komi=record.komi,
        rules=parse_rules(record.rules),
        handicap=record.handicap,
        black_stones=list(record.initial_black),
        white_stones=list(record.initial_white),
        moves=moves,
        comments=[_move_comment(m) for m in record.moves] if record.moves else [],
        player_black=player,
        player_white=player,
        result=record.result or None,
        comment=f"self-play game {record.id}; ended by {_END_REASONS.get(record.end_reason, 'unknown')}",
        first_player=BLACK if record.first_to_move == game_pb2.BLACK else WHITE,
    )


def write_record_sgf(record: game_pb2.GameRecord, directory: str | os.PathLike[str]) -> Path:
    """Write `<directory>/<game id>.sgf` atomically (a viewer never sees half a file)."""
    if not record.id or "/" in record.id or record.id.startswith("."):
        raise ValueError(f"game id {record.id!r} cannot name a file")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{record.id}.sgf"
    data = write_game(record_to_sgf(record))
    fd, tmp = tempfile.mkstemp(prefix=f".{record.id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
