"""What both front ends (gRPC and HTTP) of the ratings service call: auth, metrics, the book."""
from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy.exc import OperationalError

from tengen.loop.progress import LoopProgress
from tengen.ratings.book import History, Leaderboard, PlayerReport, RatingsBook
from tengen.ratings.curve import PageData, page_data
from tengen.ratings.records import (
    Conflict,
    GameReport,
    InvalidRequest,
    PlayerInfo,
    Unauthorized,
    UnknownPlayer,
)
from tengen.ratings.store import ReportOutcome

T = TypeVar("T")
log = logging.getLogger(__name__)


class DatabaseUnavailable(RuntimeError):
    """The database did not answer (restarting, unreachable); the request may be retried."""


class Metrics:
    """The service's Prometheus metrics, in their own registry (several servers can share a process)."""

    def __init__(self, book: RatingsBook) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "tengen_ratings_requests",
            "Ratings API requests by API and outcome",
            ["api", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tengen_ratings_request_seconds", "Ratings API latency", ["api"], registry=self.registry
        )
        self.reported = Counter(
            "tengen_ratings_games_reported",
            "Games received in reports, by whether they were new or replays",
            ["outcome"],
            registry=self.registry,
        )
        stored = Gauge("tengen_ratings_games", "Rated games in the store", registry=self.registry)
        stored.set_function(lambda: book.store.game_count())


def bearer_matches(header: str | None, token: str) -> bool:
    """True when `header` is exactly `Bearer <token>` (compared in constant time)."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode())


class RatingsApi:
    def __init__(self, book: RatingsBook, token: str,
                 progress: Callable[[], LoopProgress | None] = lambda: None) -> None:
        """`progress`: the run's figures as the services last published them (ProgressFollower)."""
        if not token:
            raise ValueError("the ratings service needs a non-empty write token")
        self.book = book
        self._token = token
        self._progress = progress
        self.metrics = Metrics(book)

    @contextmanager
    def _observe(self, api: str) -> Iterator[None]:
        start = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        except InvalidRequest:
            outcome = "invalid"
            raise
        except Conflict:
            outcome = "conflict"
            raise
        except Unauthorized:
            outcome = "unauthorized"
            raise
        except UnknownPlayer:
            outcome = "not_found"
            raise
        except OperationalError as error:
            outcome = "unavailable"
            reason = str(error.orig or error).strip().splitlines()[0]
            log.warning("ratings database unavailable during %s: %s", api, reason)
            raise DatabaseUnavailable(f"ratings database unavailable, retry later: {reason}") from None
        finally:
            self.metrics.requests.labels(api, outcome).inc()
            self.metrics.latency.labels(api).observe(time.perf_counter() - start)

    def _read(self, api: str, call: Callable[[], T]) -> T:
        with self._observe(api):
            try:
                return call()
            except ValueError as error:
                if isinstance(error, (InvalidRequest, Conflict, UnknownPlayer)):
                    raise
                # Bad read parameters (prior weight, limit) from elo.fit / the book.
                raise InvalidRequest(str(error)) from None

    def report(
        self,
        authorization: str | None,
        parse: Callable[[], tuple[Sequence[GameReport], Sequence[PlayerInfo]]],
    ) -> ReportOutcome:
        """Check the token, then parse the request (raising InvalidRequest), then store it."""
        with self._observe("report_games"):
            if not bearer_matches(authorization, self._token):
                raise Unauthorized("writes need the header 'Authorization: Bearer <token>' with the service's token")
            games, players = parse()
            outcome = self.book.store.report(games, players)
            self.metrics.reported.labels("accepted").inc(outcome.accepted)
            self.metrics.reported.labels("duplicate").inc(outcome.duplicates)
            return outcome

    def leaderboard(self, limit: int = 0, prior_draws: float | None = None) -> Leaderboard:
        return self._read("leaderboard", lambda: self.book.leaderboard(limit, prior_draws))

    def player(self, name: str, prior_draws: float | None = None) -> PlayerReport:
        return self._read("player", lambda: self.book.player(name, prior_draws))

    def history(self, prior_draws: float | None = None) -> History:
        return self._read("history", lambda: self.book.history(prior_draws))

    def page(self, games_dir: Path | None, prior_draws: float | None = None) -> PageData:
        """What the HTML page and /api/curve show (tengen.ratings.curve)."""
        return self._read("page", lambda: page_data(self.book, games_dir, prior_draws, self._progress()))
