"""Rated games and players in SQL: SQLAlchemy 2 models, Alembic migrations, idempotent reports.

PostgreSQL (psycopg2) when a database URL is given, else a SQLite file in the data dir. The schema
is created and upgraded by the Alembic migrations in `migrations/` when the store opens, so an
empty database works. Tables carry a `ratings_` prefix (and Alembic its own version table) so the
ratings can share a database with other components.

A report is one transaction: it is validated first, and any error (malformed game, conflicting
replay) rolls everything back. Replaying a stored game id with the same players and result is a
no-op; with different content it is a Conflict.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Integer,
    String,
    create_engine,
    func,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from tengen.ratings.elo import Tally
from tengen.ratings.records import (
    DEFAULT_MAX_BATCH,
    MAX_NAME,
    MAX_SOURCE,
    Conflict,
    GameReport,
    PlayerInfo,
    played_at_utc,
    validate_batch,
)

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "ratings_alembic_version"
# Arbitrary constant naming the Postgres advisory lock that serialises concurrent migrations.
_MIGRATION_LOCK = 0x7465_6E67
_IN_CHUNK = 500  # ids per IN (...) query, well under SQLite's bound-parameter limit


class Base(DeclarativeBase):
    pass


class Player(Base):
    __tablename__ = "ratings_players"
    __table_args__ = (CheckConstraint("kind IN ('model', 'anchor', 'engine')", name="kind_known"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    training_samples: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Game(Base):
    __tablename__ = "ratings_games"
    __table_args__ = (
        CheckConstraint("result IN ('B', 'W', 'draw')", name="result_known"),
        CheckConstraint("black_id <> white_id", name="two_players"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    game_id: Mapped[str] = mapped_column(String(MAX_NAME), unique=True)
    black_id: Mapped[int] = mapped_column(ForeignKey("ratings_players.id"), index=True)
    white_id: Mapped[int] = mapped_column(ForeignKey("ratings_players.id"), index=True)
    result: Mapped[str] = mapped_column(String(8))
    source: Mapped[str] = mapped_column(String(MAX_SOURCE))
    played_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


@dataclass(frozen=True)
class StoredPlayer:
    name: str
    kind: str
    training_samples: int | None
    created_at: datetime


@dataclass(frozen=True)
class PairResults:
    """Games of one source between two players (colours as played) with one result."""

    black: str
    white: str
    result: str
    count: int
    first: datetime  # when the first and the last of them were played
    last: datetime


@dataclass(frozen=True)
class ReportOutcome:
    accepted: int
    duplicates: int


def _utc(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything stored is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


T = TypeVar("T")


def _chunks(items: Sequence[T], size: int = _IN_CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@contextmanager
def _quiet_alembic() -> Iterator[None]:
    # Alembic logs its plug-ins and context at INFO on every open; keep only our line about
    # real upgrades.
    alembic_log = logging.getLogger("alembic")
    level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        alembic_log.setLevel(level)


def migrate(connection: Connection) -> None:
    """Upgrade the schema behind `connection` to the newest migration (from empty if need be)."""
    with _quiet_alembic():
        from alembic import command
        from alembic.config import Config
        from alembic.migration import MigrationContext

        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        opts = {"version_table": VERSION_TABLE}
        before = MigrationContext.configure(connection, opts=opts).get_current_revision()
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        after = MigrationContext.configure(connection, opts=opts).get_current_revision()
    if after != before:
        log.info("ratings schema upgraded from %s to %s", before or "empty", after)


class RatingsStore:
    """Players and rated games behind one SQLAlchemy engine; safe to share between threads."""

    def __init__(
        self,
        url: str,
        max_batch: int = DEFAULT_MAX_BATCH,
        connect_attempts: int = 1,
        retry_delay: float = 1.0,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max batch must be at least 1, got {max_batch}")
        self.max_batch = max_batch
        self.engine = self._create_engine(url)
        self._open(connect_attempts, retry_delay)

    @staticmethod
    def _create_engine(url: str) -> Engine:
        if url.startswith("sqlite"):
            path = url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            # Writers wait for each other instead of failing at once with "database is locked".
            return create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        # pre_ping: a restarted Postgres leaves dead pooled connections; replace them silently.
        return create_engine(url, pool_pre_ping=True)

    def _open(self, attempts: int, delay: float) -> None:
        for attempt in range(1, attempts + 1):
            try:
                with self.engine.begin() as connection:
                    migrate(connection)
                return
            except OperationalError as error:
                if attempt == attempts:
                    raise
                log.warning(
                    "ratings database %s not reachable (attempt %d/%d, retrying in %.1fs): %s",
                    self.engine.url.render_as_string(hide_password=True),
                    attempt,
                    attempts,
                    delay,
                    str(error).splitlines()[0],
                )
                time.sleep(delay)
                delay = min(delay * 2, 30.0)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    # -- writes ---------------------------------------------------------------------------------

    def report(
        self,
        games: Sequence[GameReport],
        players: Sequence[PlayerInfo] = (),
        max_batch: int | None = -1,
    ) -> ReportOutcome:
        """Store new games (and player declarations) in one transaction.

        `max_batch` -1 means the store's configured maximum; None means no limit (local imports).
        Raises InvalidRequest or Conflict, having written nothing.
        """
        validate_batch(games, players, self.max_batch if max_batch == -1 else max_batch)
        for attempt in range(3):
            try:
                with Session(self.engine) as session, session.begin():
                    return self._report(session, games, players)
            except IntegrityError:
                # A concurrent report inserted the same game id or player first: redo the whole
                # transaction, which now sees those rows and treats them as replays.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _report(
        self, session: Session, games: Sequence[GameReport], players: Sequence[PlayerInfo]
    ) -> ReportOutcome:
        now = datetime.now(UTC)
        names = sorted({p.name for p in players} | {g.black for g in games} | {g.white for g in games})
        rows: dict[str, Player] = {}
        for chunk in _chunks(names):
            rows.update((p.name, p) for p in session.scalars(select(Player).where(Player.name.in_(chunk))))
        for info in players:
            row = rows.get(info.name)
            if row is None:
                rows[info.name] = row = Player(
                    name=info.name, kind=info.kind, training_samples=info.training_samples, created_at=now
                )
                session.add(row)
                continue
            if row.kind != info.kind:
                raise Conflict(f"player {info.name!r} is stored as {row.kind}, declared as {info.kind}")
            if info.training_samples is not None:
                if row.training_samples is None:
                    row.training_samples = info.training_samples
                elif row.training_samples != info.training_samples:
                    raise Conflict(
                        f"player {info.name!r} is stored with {row.training_samples} training samples, "
                        f"declared with {info.training_samples}"
                    )
        for name in names:
            if name not in rows:
                rows[name] = Player(name=name, kind="engine", training_samples=None, created_at=now)
                session.add(rows[name])
        session.flush()

        ids = sorted({g.game_id for g in games})
        stored: dict[str, tuple[int, int, str]] = {}
        for chunk in _chunks(ids):
            query = select(Game.game_id, Game.black_id, Game.white_id, Game.result).where(
                Game.game_id.in_(chunk)
            )
            stored.update((gid, (b, w, r)) for gid, b, w, r in session.execute(query))
        accepted = duplicates = 0
        for game in games:
            content = (rows[game.black].id, rows[game.white].id, game.result)
            previous = stored.get(game.game_id)
            if previous is not None:
                if previous != content:
                    raise Conflict(
                        f"game {game.game_id!r} is already stored with different players or result"
                    )
                duplicates += 1
                continue
            stored[game.game_id] = content
            session.add(
                Game(
                    game_id=game.game_id,
                    black_id=content[0],
                    white_id=content[1],
                    result=game.result,
                    source=game.source,
                    # In UTC: SQLite keeps a datetime's wall time and drops its offset.
                    played_at=played_at_utc(game.played_at) if game.played_at else now,
                    reported_at=now,
                )
            )
            accepted += 1
        return ReportOutcome(accepted, duplicates)

    # -- reads ----------------------------------------------------------------------------------

    def players(self) -> list[StoredPlayer]:
        with Session(self.engine) as session:
            rows = session.scalars(select(Player).order_by(Player.id))
            return [_stored(p) for p in rows]

    def player(self, name: str) -> StoredPlayer | None:
        with Session(self.engine) as session:
            row = session.scalars(select(Player).where(Player.name == name)).first()
            return None if row is None else _stored(row)

    def tally(self) -> Tally:
        """Every stored game, aggregated per pair and result."""
        query = select(Game.black_id, Game.white_id, Game.result, func.count()).group_by(
            Game.black_id, Game.white_id, Game.result
        )
        with Session(self.engine) as session:
            names = _names(session)
            counts = list(session.execute(query).tuples())
        tally = Tally()
        scores = {"B": 1.0, "W": 0.0, "draw": 0.5}
        for black, white, result, count in counts:
            tally.add(names[black], names[white], scores[result], count)
        return tally

    def results_of(self, source: str) -> list[PairResults]:
        """The games reported with `source`, aggregated per pair and result in SQL (the ratings
        page's curve against GNU Go, without reading every game)."""
        query = (
            select(Game.black_id, Game.white_id, Game.result, func.count(), func.min(Game.played_at),
                   func.max(Game.played_at))
            .where(Game.source == source)
            .group_by(Game.black_id, Game.white_id, Game.result)
        )
        with Session(self.engine) as session:
            names = _names(session)
            rows = list(session.execute(query).tuples())
        return [PairResults(names[b], names[w], r, n, _utc(first), _utc(last)) for b, w, r, n, first, last in rows]

    def first_played_at(self) -> datetime | None:
        """When the earliest stored game was played (the ratings page's time origin)."""
        with Session(self.engine) as session:
            first = session.scalar(select(func.min(Game.played_at)))
        return None if first is None else _utc(first)

    def game_count(self) -> int:
        with Session(self.engine) as session:
            return int(session.scalar(select(func.count()).select_from(Game)) or 0)

    def games(self) -> Iterable[GameReport]:
        """Every stored game in storage order (for exports and tests)."""
        with Session(self.engine) as session:
            names = _names(session)
            query = select(Game).order_by(Game.id)
            return [
                GameReport(
                    g.game_id, names[g.black_id], names[g.white_id], g.result, g.source, _utc(g.played_at)
                )
                for g in session.scalars(query)
            ]


def _names(session: Session) -> dict[int, str]:
    return {pid: name for pid, name in session.execute(select(Player.id, Player.name))}


def _stored(row: Player) -> StoredPlayer:
    return StoredPlayer(row.name, row.kind, row.training_samples, _utc(row.created_at))
