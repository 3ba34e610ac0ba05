"""The ratings reads (leaderboard, one player, history) computed from a store.

Used in-process by the ratings service and by `tengen ratings` without a service; the gRPC client
returns the same dataclasses, so callers and formatting do not care which one answered. Ratings are
recomputed from all stored games on every read: aggregation happens in SQL (one row per pair and
result), and the fit over a few hundred players takes milliseconds.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tengen.config import RatingsConfig
from tengen.loop.messages import anchor_level
from tengen.ratings import elo
from tengen.ratings.records import InvalidRequest, UnknownPlayer
from tengen.ratings.store import RatingsStore, StoredPlayer


@dataclass(frozen=True)
class RatingRow:
    name: str
    kind: str
    rank: int  # 1 = best; 0 when unrated
    rated: bool
    elo: float
    stddev: float
    elo_low: float
    elo_high: float
    games: int
    wins: int
    losses: int
    draws: int
    training_samples: int | None
    created_at: datetime


@dataclass(frozen=True)
class FitSummary:
    anchor: str  # "" when the mean rating is held at anchor_elo
    anchor_elo: float
    prior_draws: float
    confidence: float
    total_games: int


@dataclass(frozen=True)
class Leaderboard:
    ratings: list[RatingRow]
    summary: FitSummary


@dataclass(frozen=True)
class HeadToHead:
    opponent: str
    wins: int
    losses: int
    draws: int
    opponent_elo: float
    expected_score: float


@dataclass(frozen=True)
class PlayerReport:
    rating: RatingRow
    head_to_head: list[HeadToHead]
    summary: FitSummary


@dataclass(frozen=True)
class History:
    points: list[RatingRow]  # model versions in training order
    summary: FitSummary


def to_json(value: Any) -> Any:
    """A JSON-ready form of the dataclasses above (datetimes as ISO 8601 text, NaN as null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _row(player: StoredPlayer, fit: elo.Fit) -> RatingRow:
    if player.name not in fit:
        nan = float("nan")
        return RatingRow(
            player.name, player.kind, 0, False, nan, nan, nan, nan, 0, 0, 0, 0,
            player.training_samples, player.created_at,
        )
    r = fit[player.name]
    return RatingRow(
        player.name, player.kind, fit.rank(player.name), True, r.elo, r.stddev, r.low, r.high,
        r.games, r.wins, r.losses, r.draws, player.training_samples, player.created_at,
    )


def held_at_zero(configured: str | None, players: Iterable[str]) -> str | None:
    """The player whose rating holds the scale: the configured anchor, else GNU Go's lowest level
    that has played (one scale for the page, the status line and the CLI), else None (the mean is
    held). An anchor that has not played yet cannot hold the scale."""
    names = set(players)
    if configured:
        return configured if configured in names else None
    levels = sorted((level, name) for name in names if (level := anchor_level(name)) is not None)
    return levels[0][1] if levels else None


class RatingsBook:
    """Bayesian Elo over everything in `store`, with the configured prior and anchor."""

    def __init__(
        self,
        store: RatingsStore,
        prior_draws: float = RatingsConfig.prior_draws,
        anchor: str | None = None,
        anchor_elo: float = 0.0,
        confidence: float = 0.95,
    ) -> None:
        self.store = store
        self.prior_draws = prior_draws
        self.anchor = anchor
        self.anchor_elo = anchor_elo
        self.confidence = confidence

    def _fit(self, prior_draws: float | None) -> tuple[elo.Tally, elo.Fit, FitSummary]:
        tally = self.store.tally()
        anchor = held_at_zero(self.anchor, tally.players)
        fit = elo.fit(
            tally,
            prior_draws=self.prior_draws if prior_draws is None else prior_draws,
            anchor=anchor,
            anchor_elo=self.anchor_elo,
            confidence=self.confidence,
        )
        summary = FitSummary(
            anchor or "", fit.anchor_elo, fit.prior_draws, fit.confidence, fit.total_games
        )
        return tally, fit, summary

    def leaderboard(self, limit: int = 0, prior_draws: float | None = None) -> Leaderboard:
        """Rated players best first; `limit` 0 means all."""
        if limit < 0:
            raise InvalidRequest(f"limit must be >= 0, got {limit}")
        _, fit, summary = self._fit(prior_draws)
        players = {p.name: p for p in self.store.players()}
        rows = [_row(players[r.name], fit) for r in fit.ratings]
        return Leaderboard(rows[:limit] if limit else rows, summary)

    def player(self, name: str, prior_draws: float | None = None) -> PlayerReport:
        """One player's rating and its record against each opponent, strongest opponent first."""
        stored = self.store.player(name)
        if stored is None:
            raise UnknownPlayer(f"unknown player {name!r}")
        tally, fit, summary = self._fit(prior_draws)
        head_to_head = [
            HeadToHead(other, *tally.record(name, other), fit[other].elo, fit.expected_score(name, other))
            for other in tally.opponents(name)
        ]
        head_to_head.sort(key=lambda h: (-h.opponent_elo, h.opponent))
        return PlayerReport(_row(stored, fit), head_to_head, summary)

    def history(self, prior_draws: float | None = None) -> History:
        """Rated model versions ordered by training samples (then creation time)."""
        _, fit, summary = self._fit(prior_draws)
        models = [p for p in self.store.players() if p.kind == "model" and p.name in fit]
        models.sort(
            key=lambda p: (p.training_samples is None, p.training_samples or 0, p.created_at, p.name)
        )
        return History([_row(p, fit) for p in models], summary)
