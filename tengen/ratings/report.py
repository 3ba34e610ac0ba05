"""Where finished games go: a ratings store opened in this process, or the ratings service.

Every player of games (gating, the strength service, `tengen match` and `tengen eval`) reports
through a Reporter: `ratings_reporter` picks the one a service's configuration names.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tengen.config import RatingsConfig
from tengen.ratings.records import GameReport, PlayerInfo


class Reporter(Protocol):
    def report(self, games: Sequence[GameReport], players: Sequence[PlayerInfo]) -> None: ...
    def close(self) -> None: ...


class StoreReporter:
    """Reports into a ratings store opened in this process (SQLite in a data dir, or Postgres)."""

    def __init__(self, url: str) -> None:
        from tengen.ratings.store import RatingsStore

        self.store = RatingsStore(url)

    def report(self, games: Sequence[GameReport], players: Sequence[PlayerInfo]) -> None:
        self.store.report(games, players)

    def close(self) -> None:
        self.store.close()


class ServiceReporter:
    """Reports to a running ratings service over gRPC (retries while it restarts)."""

    def __init__(self, address: str, token: str | None) -> None:
        from tengen.ratings.client import RatingsClient

        self.client = RatingsClient(address, token=token)

    def report(self, games: Sequence[GameReport], players: Sequence[PlayerInfo]) -> None:
        self.client.report_games(games, players)

    def close(self) -> None:
        self.client.close()


def ratings_reporter(ratings: RatingsConfig, data_dir: Path) -> Reporter:
    """Where a service reports its games: the ratings service at `ratings.url` (token from the
    config, else the data dir's token file), else the store in the data dir (or database_url)."""
    from tengen.ratings.config import client_token, store_url

    if ratings.url:
        return ServiceReporter(ratings.url, client_token(ratings.token, data_dir))
    return StoreReporter(store_url(data_dir, ratings.database_url or None))
