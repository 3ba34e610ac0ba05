"""The ratings store on real PostgreSQL and on SQLite: migrations, idempotent and atomic reports."""
from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from ratings_db import (  # noqa: F401 (fixtures)
    PGSERVER_WARNING,
    database_url,
    pgserver_url,
    postgres_server,
    postgres_url,
    start_pgserver,
)
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import OperationalError

from tengen.ratings.book import RatingsBook
from tengen.ratings.records import Conflict, GameReport, InvalidRequest, PlayerInfo
from tengen.ratings.store import VERSION_TABLE, Base, RatingsStore


def games(n: int, prefix: str = "g") -> list[GameReport]:
    rng = random.Random(n)
    names = ["v1", "v2", "v3", "gnugo-10"]
    out = []
    for i in range(n):
        black, white = rng.sample(names, 2)
        out.append(GameReport(f"{prefix}{i}", black, white, rng.choice(["B", "W", "W", "draw"]), "test"))
    return out


def snapshot(store: RatingsStore) -> tuple[list, list]:
    return [(g.game_id, g.black, g.white, g.result) for g in store.games()], store.players()


def test_migrations_from_empty(database_url: str) -> None:
    store = RatingsStore(database_url)
    tables = set(inspect(store.engine).get_table_names())
    assert {"ratings_players", "ratings_games", VERSION_TABLE} <= tables
    with store.engine.connect() as connection:
        assert connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar() == "0001"
        # The migrations build exactly what the models describe.
        from alembic.autogenerate import compare_metadata
        from alembic.migration import MigrationContext

        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        assert compare_metadata(context, Base.metadata) == []
    store.report(games(3))
    store.close()
    # Opening again is a no-op upgrade that keeps the data.
    again = RatingsStore(database_url)
    assert again.game_count() == 3
    again.close()


def test_report_is_idempotent_by_game_id(database_url: str) -> None:
    store = RatingsStore(database_url)
    batch = games(40)
    assert (store.report(batch).accepted, store.report(batch).duplicates) == (40, 40)
    before = snapshot(store)
    outcome = store.report(batch[:10] + games(5, prefix="new"))
    assert (outcome.accepted, outcome.duplicates) == (5, 10)
    assert store.game_count() == 45
    assert snapshot(store)[0][:40] == before[0]
    # The same game twice in one batch is stored once.
    assert store.report([games(1, "twice")[0]] * 2).accepted == 1
    store.close()


def test_conflicting_replay_is_refused_and_writes_nothing(database_url: str) -> None:
    store = RatingsStore(database_url)
    store.report([GameReport("g1", "a", "b", "B")])
    before = snapshot(store)
    with pytest.raises(Conflict, match="g1"):
        store.report([GameReport("fresh", "c", "d", "W"), GameReport("g1", "a", "b", "W")])
    with pytest.raises(Conflict, match="g1"):
        store.report([GameReport("g1", "b", "a", "B")])
    assert snapshot(store) == before  # "fresh", "c" and "d" were rolled back too
    store.close()


@pytest.mark.parametrize(
    "batch, players, error, message",
    [
        ([GameReport("x", "a", "b", "B+R")], [], InvalidRequest, "unknown result"),
        ([GameReport("x", "a", "a", "B")], [], InvalidRequest, "against itself"),
        ([GameReport("", "a", "b", "B")], [], InvalidRequest, "game id is missing"),
        ([GameReport("x", "", "b", "B")], [], InvalidRequest, "black player is missing"),
        ([GameReport("x", "a", "b\n", "B")], [], InvalidRequest, r"white player 'b\\n' holds '\\n'"),
        ([GameReport("x\u2028", "a", "b", "B")], [], InvalidRequest, r"game id 'x\\u2028' holds"),
        ([GameReport("x", "a\x00", "b", "B")], [], InvalidRequest, r"black player 'a\\x00' holds"),
        ([GameReport("x", ".a", "b", "B")], [], InvalidRequest, "starting with a letter or digit"),
        ([GameReport("x", "a/b", "b", "B")], [], InvalidRequest, "holds '/'"),
        ([GameReport("x" * 129, "a", "b", "B")], [], InvalidRequest, "129 characters long, over 128"),
        ([GameReport("x", "a", "b", "B")], [PlayerInfo("a b")], InvalidRequest, "player name 'a b' holds ' '"),
        ([GameReport(f"x{i}", "a", "b", "B") for i in range(6)], [], InvalidRequest, "over the maximum of 5"),
        ([GameReport("x", "a", "b", "B")], [PlayerInfo("a", "wizard")], InvalidRequest, "unknown kind"),
        ([GameReport("x", "a", "b", "B")], [PlayerInfo("a", "model", -5)], InvalidRequest, "integer from 0"),
        # Over a BIGINT: SQLite raised OverflowError and Postgres a DataError.
        ([GameReport("x", "a", "b", "B")], [PlayerInfo("a", "model", 2**63)], InvalidRequest, "integer from 0"),
        # Year 10000 in UTC (Python cannot even convert it), and the last year, which a Postgres
        # session east of UTC reads back as year 10000 (every read of the games then failed).
        (
            [GameReport("x", "a", "b", "B", "", datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))))],
            [],
            InvalidRequest,
            "played_at",
        ),
        ([GameReport("x", "a", "b", "B", "", datetime(9999, 6, 1, tzinfo=UTC))], [], InvalidRequest, "played_at"),
        (
            [GameReport("x", "a", "b", "B", "", datetime(1969, 12, 31, 23, 59, tzinfo=UTC))],
            [],
            InvalidRequest,
            "played_at",
        ),
        ([GameReport("x", "a", "b", "B"), GameReport("x", "a", "b", "W")], [], Conflict, "twice"),
        ([], [], InvalidRequest, "empty report"),
    ],
)
def test_malformed_reports_write_nothing(
    database_url: str, batch: list[GameReport], players: list[PlayerInfo], error: type, message: str
) -> None:
    store = RatingsStore(database_url, max_batch=5)
    store.report([GameReport("ok", "a", "b", "B")])
    before = snapshot(store)
    # Each bad batch also carries a good game first: it must not be stored either.
    full = [GameReport("good", "p", "q", "W"), *batch] if batch else []
    with pytest.raises(error, match=message):
        store.report(full, players)
    assert snapshot(store) == before
    store.close()


def test_player_declarations(database_url: str) -> None:
    store = RatingsStore(database_url)
    store.report(
        [GameReport("g1", "v1", "random", "B")], [PlayerInfo("v1", "model", 1000), PlayerInfo("random", "anchor")]
    )
    store.report([], [PlayerInfo("v1", "model", 1000)])  # same declaration again: fine
    store.report([GameReport("g2", "v2", "v1", "B")], [PlayerInfo("v2", "model")])
    store.report([], [PlayerInfo("v2", "model", 2000)])  # training samples filled in later
    kinds = {p.name: (p.kind, p.training_samples) for p in store.players()}
    assert kinds == {"v1": ("model", 1000), "random": ("anchor", None), "v2": ("model", 2000)}
    with pytest.raises(Conflict, match="stored as model"):
        store.report([], [PlayerInfo("v1", "engine")])
    with pytest.raises(Conflict, match="1000 training samples"):
        store.report([GameReport("g3", "v1", "v2", "W")], [PlayerInfo("v1", "model", 999)])
    assert store.game_count() == 2
    # Names nobody declared become engines.
    store.report([GameReport("g4", "someone", "v1", "B")])
    assert store.player("someone").kind == "engine"
    store.close()


def test_concurrent_reports_of_the_same_games(database_url: str) -> None:
    store = RatingsStore(database_url)
    batch = games(30)
    outcomes = []
    errors: list[BaseException] = []

    def report() -> None:
        try:
            outcomes.append(store.report(batch, [PlayerInfo("v1", "model", 5)]))
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=report) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(o.accepted for o in outcomes) == 30
    assert sum(o.duplicates for o in outcomes) == 90
    assert store.game_count() == 30
    store.close()


def test_order_of_reports_does_not_matter(database_url: str, tmp_path: Path) -> None:
    batch = games(60)
    shuffled = list(batch)
    random.Random(1).shuffle(shuffled)
    first = RatingsStore(database_url)
    for start in range(0, 60, 7):
        first.report(batch[start : start + 7])
    second = RatingsStore(f"sqlite:///{tmp_path / 'other.sqlite'}")
    for start in range(0, 60, 11):
        second.report(shuffled[start : start + 11])
    a, b = RatingsBook(first).leaderboard(), RatingsBook(second).leaderboard()
    assert [(r.name, round(r.elo, 6), r.games) for r in a.ratings] == [
        (r.name, round(r.elo, 6), r.games) for r in b.ratings
    ]
    first.close()
    second.close()


@pytest.mark.filterwarnings(PGSERVER_WARNING)
def test_pgserver_fallback_starts_a_working_postgres(tmp_path: Path) -> None:
    """What the fixture does on a machine without a server on 127.0.0.1:5432."""
    server = start_pgserver(tmp_path / "pg")
    try:
        url = pgserver_url(server)
        store = RatingsStore(url)
        store.report(games(5))
        assert store.game_count() == 5
        assert store.engine.dialect.name == "postgresql"
        store.close()
    finally:
        server.cleanup()
    engine = create_engine(url, connect_args={"connect_timeout": 2})
    with pytest.raises(OperationalError):  # stopped with the fixture's cleanup
        engine.connect().close()
    engine.dispose()


def test_extreme_values_within_bounds_are_stored_and_read_back(database_url: str) -> None:
    store = RatingsStore(database_url)
    east = timezone(timedelta(hours=9))
    store.report(
        [
            GameReport("last", "a", "b", "B", "", datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)),
            GameReport("first", "a", "b", "W", "", datetime(1970, 1, 1, tzinfo=UTC)),
            GameReport("tokyo", "a", "b", "draw", "", datetime(2026, 1, 2, 3, 4, 5, tzinfo=east)),
        ],
        [PlayerInfo("a", "model", 2**63 - 1), PlayerInfo("b", "model", 0)],
    )
    played = {g.game_id: g.played_at for g in store.games()}
    assert played["last"] == datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert played["first"] == datetime(1970, 1, 1, tzinfo=UTC)
    # The same instant on both stores (SQLite kept the wall time and dropped the offset).
    assert played["tokyo"] == datetime(2026, 1, 1, 18, 4, 5, tzinfo=UTC)
    assert store.player("a").training_samples == 2**63 - 1
    store.close()


def test_the_scale_is_held_by_gnu_gos_lowest_level_unless_an_anchor_is_configured(tmp_path: Path) -> None:
    """One scale wherever Elo is shown: with no anchor configured, GNU Go's lowest level that has
    played is held at 0 (gnugo-l10 sorts before gnugo-l5 as text, not as a level)."""
    store = RatingsStore(f"sqlite:///{tmp_path / 'r.sqlite'}")
    store.report([GameReport(f"g{i}", "v1", opponent, result, "test") for i, (opponent, result) in
                  enumerate([("gnugo-l10", "W"), ("gnugo-l5", "B"), ("gnugo-l5", "W"), ("v2", "B"), ("v2", "W")])])
    elo = {r.name: r.elo for r in RatingsBook(store).leaderboard().ratings}
    assert elo["gnugo-l5"] == 0.0 and elo["gnugo-l10"] > 0.0
    assert RatingsBook(store).leaderboard().summary.anchor == "gnugo-l5"
    assert {r.name: r.elo for r in RatingsBook(store, anchor="v2").leaderboard().ratings}["v2"] == 0.0
    store.close()

    plain = RatingsStore(f"sqlite:///{tmp_path / 'plain.sqlite'}")
    plain.report([GameReport("p1", "v1", "v2", "B", "test"), GameReport("p2", "v1", "v2", "W", "test"),
                  GameReport("p3", "v2", "v3", "B", "test")])
    board = RatingsBook(plain).leaderboard()
    assert board.summary.anchor == "" and abs(sum(r.elo for r in board.ratings)) < 1e-6  # the mean held at 0
    plain.close()
