"""What the ratings store accepts, with the validation every entry point shares.

A result is one of `B` (black won), `W` (white won) or `draw`. Player kinds: `model` (a version
produced by training), `anchor` (a fixed reference such as `random` or a GNU Go level) and
`engine` (anything else, e.g. a named human's engine from an outside tournament).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from tengen.loop.ids import id_problem

RESULTS = ("B", "W", "draw")
KINDS = ("model", "anchor", "engine")
MAX_NAME = 200  # the database's column width (names and ids are at most tengen.loop.ids.MAX_ID_LENGTH)
MAX_SOURCE = 100
DEFAULT_MAX_BATCH = 1000  # most games (and most player declarations) in one report
MAX_TRAINING_SAMPLES = 2**63 - 1  # a BIGINT column in both stores
# When a game can have been played: from the Unix epoch (gRPC carries Unix milliseconds) to the
# start of year 9999, short of Python's last year so that a Postgres session in any time zone
# reads it back as a datetime (a year-10000 value there made every read of the games fail).
EARLIEST_PLAYED_AT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_PLAYED_AT = datetime(9999, 1, 1, tzinfo=UTC)


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


def parse_result(text: str) -> str:
    """`B`, `W` or `draw` (any case); anything else is an InvalidRequest."""
    for code in RESULTS:
        if text.strip().lower() == code.lower():
            return code
    raise InvalidRequest(f"unknown result {text!r}: expected B, W or draw")


def _check_name(what: str, name: object) -> None:
    if problem := id_problem(name):
        raise InvalidRequest(f"{what} {problem}")


def played_at_utc(when: datetime, where: str = "game") -> datetime:
    """`when` in UTC (a naive time is taken as UTC); InvalidRequest outside EARLIEST_PLAYED_AT
    (inclusive) to LATEST_PLAYED_AT (exclusive)."""
    if not isinstance(when, datetime):
        raise InvalidRequest(f"{where}: played_at must be a date and time")
    try:
        utc = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:00-05:00, past datetime's last year in UTC
        utc = None
    if utc is None or not EARLIEST_PLAYED_AT <= utc < LATEST_PLAYED_AT:
        raise InvalidRequest(
            f"{where}: played_at {when.isoformat()} is outside {EARLIEST_PLAYED_AT.isoformat()} "
            f"to {LATEST_PLAYED_AT.isoformat()}"
        )
    return utc


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
    if game.played_at is not None:
        played_at_utc(game.played_at, where)


def validate_player(player: PlayerInfo) -> None:
    _check_name("player name", player.name)
    if player.kind not in KINDS:
        raise InvalidRequest(
            f"player {player.name!r}: unknown kind {player.kind!r}: expected one of {', '.join(KINDS)}"
        )
    samples = player.training_samples
    if samples is not None and (
        isinstance(samples, bool) or not isinstance(samples, int) or not 0 <= samples <= MAX_TRAINING_SAMPLES
    ):
        raise InvalidRequest(
            f"player {player.name!r}: training samples must be an integer from 0 to {MAX_TRAINING_SAMPLES}"
        )


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
