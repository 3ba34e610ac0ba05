"""gRPC client of the ratings service, for gating, match runners and the `tengen ratings` command.

    with RatingsClient("localhost:50061", token=...) as ratings:
        ratings.report_games([GameReport("g-17", "v3", "v2", "B", source="gating")],
                             players=[PlayerInfo("v3", "model", training_samples=1_200_000)])

Reports are idempotent by game id, so a report whose answer was lost (service restarting, network
hiccup) is simply sent again: the client retries UNAVAILABLE and DEADLINE_EXCEEDED with backoff.
Refusals come back as the store's exceptions (InvalidRequest, Conflict, UnknownPlayer) or
Unauthorized, with the service's message.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc

from tengen.proto import ratings_pb2 as pb
from tengen.proto import ratings_pb2_grpc as pb_grpc
from tengen.ratings import wire
from tengen.ratings.book import History, Leaderboard, PlayerReport
from tengen.ratings.records import (
    Conflict,
    GameReport,
    InvalidRequest,
    PlayerInfo,
    Unauthorized,
    UnknownPlayer,
    validate_batch,
)
from tengen.ratings.store import ReportOutcome

log = logging.getLogger(__name__)
T = TypeVar("T")

_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class ServiceUnavailable(ConnectionError):
    """The service did not answer within the retries."""


def _options(prior_draws: float | None) -> pb.FitOptions:
    options = pb.FitOptions()
    if prior_draws is not None:
        options.prior_draws = prior_draws
    return options


class RatingsClient:
    def __init__(
        self,
        address: str,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.5,
    ) -> None:
        self.address = address
        self._token = token
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.RatingsServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RatingsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, what: str, call: Callable[[], T]) -> T:
        delay = self._backoff
        for attempt in range(self._retries + 1):
            try:
                return call()
            except grpc.RpcError as error:
                code, details = error.code(), error.details() or ""
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    raise InvalidRequest(details) from None
                if code == grpc.StatusCode.ALREADY_EXISTS:
                    raise Conflict(details) from None
                if code == grpc.StatusCode.NOT_FOUND:
                    raise UnknownPlayer(details) from None
                if code == grpc.StatusCode.UNAUTHENTICATED:
                    raise Unauthorized(details) from None
                if code not in _RETRYABLE or attempt == self._retries:
                    raise ServiceUnavailable(
                        f"ratings service at {self.address}: {what} failed: {code.name} {details}"
                    ) from None
                log.warning(
                    "ratings service at %s: %s: %s, retrying in %.1fs (%d/%d)",
                    self.address, what, code.name, delay, attempt + 1, self._retries,
                )
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        raise AssertionError("unreachable")

    def report_games(
        self, games: Sequence[GameReport], players: Sequence[PlayerInfo] = ()
    ) -> ReportOutcome:
        """Store games (and declare players) in one transaction on the service."""
        # Catch local mistakes before the round trip; the service validates again.
        validate_batch(games, players, None)
        request = pb.ReportGamesRequest(
            games=[wire.game_to_pb(g) for g in games],
            players=[wire.player_to_pb(p) for p in players],
        )
        metadata = (("authorization", f"Bearer {self._token}"),) if self._token else ()
        reply = self._call(
            "ReportGames",
            lambda: self._stub.ReportGames(request, timeout=self._timeout, metadata=metadata),
        )
        return ReportOutcome(reply.accepted, reply.duplicates)

    def leaderboard(self, limit: int = 0, prior_draws: float | None = None) -> Leaderboard:
        request = pb.LeaderboardRequest(limit=limit, options=_options(prior_draws))
        reply = self._call("Leaderboard", lambda: self._stub.Leaderboard(request, timeout=self._timeout))
        return wire.leaderboard_from_pb(reply)

    def player(self, name: str, prior_draws: float | None = None) -> PlayerReport:
        request = pb.PlayerRequest(name=name, options=_options(prior_draws))
        reply = self._call("Player", lambda: self._stub.Player(request, timeout=self._timeout))
        return wire.player_report_from_pb(reply)

    def history(self, prior_draws: float | None = None) -> History:
        request = pb.HistoryRequest(options=_options(prior_draws))
        reply = self._call("History", lambda: self._stub.History(request, timeout=self._timeout))
        return wire.history_from_pb(reply)
