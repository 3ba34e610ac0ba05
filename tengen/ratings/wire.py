"""Conversions between the ratings dataclasses and their `ratings.proto` messages."""
from __future__ import annotations

from datetime import UTC, datetime

from tengen.proto import ratings_pb2 as pb
from tengen.ratings.book import FitSummary, HeadToHead, History, Leaderboard, PlayerReport, RatingRow
from tengen.ratings.records import GameReport, InvalidRequest, PlayerInfo

_RESULT_TO_PB = {"B": pb.BLACK_WINS, "W": pb.WHITE_WINS, "draw": pb.DRAW}
_RESULT_FROM_PB = {v: k for k, v in _RESULT_TO_PB.items()}
_KIND_TO_PB = {"model": pb.MODEL, "anchor": pb.ANCHOR, "engine": pb.ENGINE}
_KIND_FROM_PB = {v: k for k, v in _KIND_TO_PB.items()}


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def game_to_pb(game: GameReport) -> pb.Game:
    return pb.Game(
        game_id=game.game_id,
        black=game.black,
        white=game.white,
        result=_RESULT_TO_PB[game.result],
        source=game.source,
        played_at_unix_ms=_ms(game.played_at) if game.played_at else 0,
    )


def game_from_pb(message: pb.Game) -> GameReport:
    """Raises InvalidRequest for an unset or unknown result code."""
    result = _RESULT_FROM_PB.get(message.result)
    if result is None:
        raise InvalidRequest(
            f"game {message.game_id!r}: unknown result code {message.result}: "
            "expected BLACK_WINS, WHITE_WINS or DRAW"
        )
    try:
        if message.played_at_unix_ms < 0:
            raise ValueError("negative")
        played_at = _when(message.played_at_unix_ms) if message.played_at_unix_ms else None
    except (ValueError, OverflowError, OSError):
        raise InvalidRequest(
            f"game {message.game_id!r}: played_at_unix_ms {message.played_at_unix_ms} is not a valid time"
        ) from None
    return GameReport(message.game_id, message.black, message.white, result, message.source, played_at)


def player_to_pb(player: PlayerInfo) -> pb.PlayerInfo:
    message = pb.PlayerInfo(name=player.name, kind=_KIND_TO_PB[player.kind])
    if player.training_samples is not None:
        message.training_samples = player.training_samples
    return message


def player_from_pb(message: pb.PlayerInfo) -> PlayerInfo:
    kind = _KIND_FROM_PB.get(message.kind)
    if kind is None:
        raise InvalidRequest(
            f"player {message.name!r}: unknown kind code {message.kind}: expected MODEL, ANCHOR or ENGINE"
        )
    samples = message.training_samples if message.HasField("training_samples") else None
    return PlayerInfo(message.name, kind, samples)


def rating_to_pb(row: RatingRow) -> pb.Rating:
    message = pb.Rating(
        name=row.name,
        kind=_KIND_TO_PB[row.kind],
        rank=row.rank,
        rated=row.rated,
        elo=row.elo,
        stddev=row.stddev,
        elo_low=row.elo_low,
        elo_high=row.elo_high,
        games=row.games,
        wins=row.wins,
        losses=row.losses,
        draws=row.draws,
        created_unix_ms=_ms(row.created_at),
    )
    if row.training_samples is not None:
        message.training_samples = row.training_samples
    return message


def rating_from_pb(m: pb.Rating) -> RatingRow:
    return RatingRow(
        m.name, _KIND_FROM_PB.get(m.kind, "engine"), m.rank, m.rated, m.elo, m.stddev, m.elo_low,
        m.elo_high, m.games, m.wins, m.losses, m.draws,
        m.training_samples if m.HasField("training_samples") else None, _when(m.created_unix_ms),
    )


def summary_to_pb(s: FitSummary) -> pb.FitSummary:
    return pb.FitSummary(
        anchor=s.anchor, anchor_elo=s.anchor_elo, prior_draws=s.prior_draws,
        confidence=s.confidence, total_games=s.total_games,
    )


def summary_from_pb(m: pb.FitSummary) -> FitSummary:
    return FitSummary(m.anchor, m.anchor_elo, m.prior_draws, m.confidence, m.total_games)


def leaderboard_to_pb(board: Leaderboard) -> pb.LeaderboardResponse:
    return pb.LeaderboardResponse(
        ratings=[rating_to_pb(r) for r in board.ratings], summary=summary_to_pb(board.summary)
    )


def leaderboard_from_pb(m: pb.LeaderboardResponse) -> Leaderboard:
    return Leaderboard([rating_from_pb(r) for r in m.ratings], summary_from_pb(m.summary))


def player_report_to_pb(report: PlayerReport) -> pb.PlayerResponse:
    return pb.PlayerResponse(
        rating=rating_to_pb(report.rating),
        head_to_head=[
            pb.HeadToHead(
                opponent=h.opponent, wins=h.wins, losses=h.losses, draws=h.draws,
                opponent_elo=h.opponent_elo, expected_score=h.expected_score,
            )
            for h in report.head_to_head
        ],
        summary=summary_to_pb(report.summary),
    )


def player_report_from_pb(m: pb.PlayerResponse) -> PlayerReport:
    return PlayerReport(
        rating_from_pb(m.rating),
        [
            HeadToHead(h.opponent, h.wins, h.losses, h.draws, h.opponent_elo, h.expected_score)
            for h in m.head_to_head
        ],
        summary_from_pb(m.summary),
    )


def history_to_pb(history: History) -> pb.HistoryResponse:
    return pb.HistoryResponse(
        points=[rating_to_pb(r) for r in history.points], summary=summary_to_pb(history.summary)
    )


def history_from_pb(m: pb.HistoryResponse) -> History:
    return History([rating_from_pb(r) for r in m.points], summary_from_pb(m.summary))
