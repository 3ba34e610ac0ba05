"""Database fixtures of the ratings tests: a real PostgreSQL and a SQLite file.

PostgreSQL: the server at 127.0.0.1:5432 (trust auth, database `test`; override with
$TENGEN_TEST_POSTGRES_URL) when it answers, else a throwaway server started from the `pgserver`
package. Each test gets its own schema (through the connection's search_path), dropped afterwards,
so runs never see each other's tables.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

LOCAL_POSTGRES = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


def postgres_answers(url: str) -> bool:
    engine = create_engine(url, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return True
    except OperationalError:
        return False
    finally:
        engine.dispose()


def start_pgserver(directory: Path):  # -> pgserver.PostgresServer
    import pgserver

    return pgserver.get_server(directory, cleanup_mode="stop")


def pgserver_url(server) -> str:  # noqa: ANN001 (pgserver has no type hints)
    return server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)


# platformdirs (under pgserver) warns that XDG_RUNTIME_DIR is unset, as it is in CI; harmless.
PGSERVER_WARNING = "ignore:XDG_RUNTIME_DIR"


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a running PostgreSQL server (the local one, or a throwaway pgserver)."""
    url = os.environ.get("TENGEN_TEST_POSTGRES_URL", LOCAL_POSTGRES)
    if postgres_answers(url):
        yield url
        return
    server = start_pgserver(tmp_path_factory.mktemp("pgserver"))
    try:
        yield pgserver_url(server)
    finally:
        server.cleanup()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """URL whose connections work in a fresh, empty schema of their own."""
    schema = f"ratings_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(postgres_server).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using this runs once on a SQLite file and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ratings.sqlite'}"
    return request.getfixturevalue("postgres_url")
