"""Settings of the ratings service and of local ratings commands, with `TENGEN_` env overrides.

Environment variables (each overrides the built-in default; a command-line flag overrides both):
    TENGEN_DATA_DIR              data dir (default ./tengen-data); SQLite file and token live there
    TENGEN_DATABASE_URL          SQLAlchemy URL (postgresql+psycopg2://...); unset: SQLite file
    TENGEN_RATINGS_HOST          listen address of the service (default 0.0.0.0)
    TENGEN_RATINGS_GRPC_PORT     gRPC port (default 50061)
    TENGEN_RATINGS_HTTP_PORT     HTTP port (default 8061)
    TENGEN_RATINGS_TOKEN         bearer token for writes (default: the data dir's token file)
    TENGEN_RATINGS_PRIOR_DRAWS   prior weight in virtual draws (default 2, BayesElo's default)
    TENGEN_RATINGS_ANCHOR        player held at Elo 0 (default: none, the mean is held at 0)
    TENGEN_RATINGS_MAX_BATCH     most games in one report (default 1000)
    TENGEN_RATINGS_GAMES_DIR     data dir whose self-play and gating games the service shows (default: the data dir)
    TENGEN_RATINGS_URL           gRPC address of a running service, for clients (host:port)
"""
from __future__ import annotations

import argparse
import math
import os
import secrets
from pathlib import Path

from tengen.infra.entrypoint import env_default, positive_int
from tengen.loop.layout import DataDir
from tengen.ratings.records import DEFAULT_MAX_BATCH

DEFAULT_GRPC_PORT = 50061
DEFAULT_HTTP_PORT = 8061
DEFAULT_PRIOR_DRAWS = 2.0


def prior_draws(text: str) -> float:
    """argparse type: a positive, finite number of virtual draws."""
    value = float(text)
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"prior weight must be a positive number of draws, got {text}")
    return value


def default_data_dir() -> Path:
    return Path(env_default("TENGEN_DATA_DIR", "tengen-data"))


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags that say which store to open and how to fit it (shared by the service and the CLI)."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        help="data dir holding the SQLite store and token file ($TENGEN_DATA_DIR, default ./tengen-data)",
    )
    parser.add_argument(
        "--database-url",
        default=env_default("TENGEN_DATABASE_URL", None),
        help="SQLAlchemy URL of a PostgreSQL database ($TENGEN_DATABASE_URL; default: SQLite in the data dir)",
    )
    parser.add_argument(
        "--prior-draws",
        type=prior_draws,
        default=env_default("TENGEN_RATINGS_PRIOR_DRAWS", DEFAULT_PRIOR_DRAWS, prior_draws),
        help="weight of the Bayesian prior in virtual draws ($TENGEN_RATINGS_PRIOR_DRAWS, default 2)",
    )
    parser.add_argument(
        "--anchor",
        default=env_default("TENGEN_RATINGS_ANCHOR", None),
        help="player held at Elo 0 ($TENGEN_RATINGS_ANCHOR; default: the mean rating is 0)",
    )
    parser.add_argument(
        "--max-batch",
        type=positive_int,
        default=env_default("TENGEN_RATINGS_MAX_BATCH", DEFAULT_MAX_BATCH, positive_int),
        help="most games one report may carry; imports to a service send batches of this size "
        "($TENGEN_RATINGS_MAX_BATCH, default 1000)",
    )


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{DataDir(data_dir).ratings_sqlite.resolve()}"


# The placeholder secrets the deployment files ship (.env.example, k8s/base/kustomization.yaml):
# a deployment that still has one is refused at start instead of running with a public secret.
PLACEHOLDER_PREFIXES = ("replace-me", "replace-with")


def placeholder_secret(token: str | None, database_url: str | None) -> str | None:
    """What is still a placeholder (a sentence for the error), or None."""
    if token and token.strip().lower().startswith(PLACEHOLDER_PREFIXES):
        return "the ratings token (TENGEN_RATINGS_TOKEN) is the deployment files' placeholder"
    if database_url:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            password = make_url(database_url).password
        except ArgumentError:
            return None  # not a URL at all: the store says so when it opens it
        if password and str(password).lower().startswith(PLACEHOLDER_PREFIXES):
            return "the ratings database password (in TENGEN_DATABASE_URL) is the deployment files' placeholder"
    return None


def store_url(data_dir: Path, database_url: str | None) -> str:
    return database_url or sqlite_url(data_dir)


def token_path(data_dir: Path) -> Path:
    return DataDir(data_dir).ratings_token


def load_or_create_token(data_dir: Path) -> str:
    """The data dir's write token, created (owner-readable only) on first use.

    Lets a service started without a configured token accept writes from clients that share its
    data dir (the single-machine `tengen run`), and from nobody else.
    """
    path = token_path(data_dir)
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def client_token(explicit: str | None = None, data_dir: Path | None = None) -> str | None:
    """Token a client sends: explicit, else $TENGEN_RATINGS_TOKEN, else the data dir's token file."""
    if explicit:
        return explicit
    from_env = os.environ.get("TENGEN_RATINGS_TOKEN")
    if from_env:
        return from_env
    if data_dir is not None and token_path(data_dir).exists():
        return token_path(data_dir).read_text().strip() or None
    return None
