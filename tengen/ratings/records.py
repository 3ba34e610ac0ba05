"""What the ratings store accepts, with the validation every entry point shares.

A result is one of `B` (black won), `W` (white won) or `draw`. Player kinds: `model` (a version
produced by training), `anchor` (a fixed reference such as `random` or a GNU Go level) and
`engine` (anything else, e.g. a named human's engine from an outside tournament).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

RESULTS = ("B", "W", "draw")
KINDS = ("model", "anchor", "engine")
MAX_NAME = 200
MAX_SOURCE = 100
DEFAULT_MAX_BATCH = 1000  # most games (and most player declarations) in one report


class RatingsError(ValueError):
    """A request the ratings store refuses; nothing of it was written."""


class InvalidRequest(RatingsError):
    """Malformed input: unknown result, self-play game, missing id, oversized batch, ..."""


class Conflict(RatingsError):
    """A game id or player replayed with content different from what is stored."""


class UnknownPlayer(RatingsError):
    """A read about a player the store has never seen."""


class Unauthorized(RatingsError):
    """A write without the right bearer token."""


@dataclass(frozen=True)
class GameReport:
    game_id: str
    black: str
    white: str
    result: str  # one of RESULTS
    source: str = ""
    played_at: datetime | None = None  # None: the time it is stored

    def black_score(self) -> float:
        return {"B": 1.0, "W": 0.0, "draw": 0.5}[self.result]


@dataclass(frozen=True)
class PlayerInfo:
    name: str
    kind: str = "engine"
    training_samples: int | None = None


def version_player(model: str, version: int) -> str:
    """The ratings name of version N of a served model (gating, `tengen eval`, strength)."""
    return f"{model}-v{version}"


def parse_result(text: str) -> str:
    """`B`, `W` or `draw` (any case); anything else is an InvalidRequest."""
    for code in RESULTS:
        if text.strip().lower() == code.lower():
            return code
    raise InvalidRequest(f"unknown result {text!r}: expected B, W or draw")


def _check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(f"{what} is missing")
    if name != name.strip() or len(name) > MAX_NAME or not name.isprintable():
        raise InvalidRequest(
            f"{what} {name!r} must be printable, without surrounding spaces, "
            f"at most {MAX_NAME} characters"
        )


def validate_game(game: GameReport, where: str = "game") -> None:
    _check_name(f"{where}: game id", game.game_id)
    where = f"game {game.game_id!r}"
    _check_name(f"{where}: black player", game.black)
    _check_name(f"{where}: white player", game.white)
    if game.black == game.white:
        raise InvalidRequest(f"{where}: {game.black!r} cannot play against itself")
    if game.result not in RESULTS:
        raise InvalidRequest(f"{where}: unknown result {game.result!r}: expected B, W or draw")
    if not isinstance(game.source, str) or len(game.source) > MAX_SOURCE:
        raise InvalidRequest(f"{where}: source must be text of at most {MAX_SOURCE} characters")


def validate_player(player: PlayerInfo) -> None:
    _check_name("player name", player.name)
    if player.kind not in KINDS:
        raise InvalidRequest(
            f"player {player.name!r}: unknown kind {player.kind!r}: expected one of {', '.join(KINDS)}"
        )
    samples = player.training_samples
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 0):
        raise InvalidRequest(f"player {player.name!r}: training samples must be a non-negative integer")


def validate_batch(
    games: Sequence[GameReport], players: Sequence[PlayerInfo], max_batch: int | None
) -> None:
    """Check a whole report before anything is written; raises InvalidRequest or Conflict."""
    if not games and not players:
        raise InvalidRequest("empty report: no games and no players")
    if max_batch is not None and len(games) > max_batch:
        raise InvalidRequest(f"batch of {len(games)} games is over the maximum of {max_batch}")
    if max_batch is not None and len(players) > max_batch:
        raise InvalidRequest(f"batch of {len(players)} players is over the maximum of {max_batch}")
    seen: dict[str, GameReport] = {}
    for i, game in enumerate(games):
        validate_game(game, f"game #{i + 1}")
        first = seen.setdefault(game.game_id, game)
        if (first.black, first.white, first.result) != (game.black, game.white, game.result):
            raise Conflict(f"game {game.game_id!r} appears twice in the batch with different content")
    declared: dict[str, PlayerInfo] = {}
    for player in players:
        validate_player(player)
        if declared.setdefault(player.name, player) != player:
            raise Conflict(f"player {player.name!r} is declared twice with different content")
