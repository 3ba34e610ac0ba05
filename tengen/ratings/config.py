"""The ratings flags shared by the service and the commands that open a store or reach the
service, the data dir's write token, and the store's URL.

A flag left out takes its value from the configuration (tengen.config: the `ratings` section and
run.data_dir, with their TENGEN_ overrides such as $TENGEN_DATA_DIR, $TENGEN_DATABASE_URL,
$TENGEN_RATINGS_TOKEN, $TENGEN_RATINGS_URL or $TENGEN_RATINGS__PRIOR_DRAWS): fill_from_config.
"""
from __future__ import annotations

import argparse
import math
import os
import secrets
from pathlib import Path

from tengen.config import Config
from tengen.infra.entrypoint import positive_int
from tengen.loop.layout import DataDir


def prior_draws(text: str) -> float:
    """argparse type: a positive, finite number of virtual draws."""
    value = float(text)
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"prior weight must be a positive number of draws, got {text}")
    return value


# flag destination -> (section, key) of its default; "" in the configuration means "not set".
CONFIG_DEFAULTS = {
    "data_dir": ("run", "data_dir"),
    "database_url": ("ratings", "database_url"),
    "prior_draws": ("ratings", "prior_draws"),
    "anchor": ("ratings", "anchor"),
    "max_batch": ("ratings", "max_batch"),
    "token": ("ratings", "token"),
    "url": ("ratings", "url"),  # --url, and `tengen match`'s --ratings
    "host": ("ratings", "host"),
    "grpc_port": ("ratings", "grpc_port"),
    "http_port": ("ratings", "http_port"),
    "connect_attempts": ("ratings", "connect_attempts"),
    "games_dir": ("ratings", "games_dir"),
}
_PATHS = {"data_dir", "games_dir"}


def fill_from_config(args: argparse.Namespace, config: Config) -> None:
    """Give every ratings flag of `args` that was left out (None) its configured value."""
    for dest, (section, key) in CONFIG_DEFAULTS.items():
        if getattr(args, dest, "absent") is None:
            value = getattr(getattr(config, section), key)
            if value == "":
                continue
            setattr(args, dest, Path(value) if dest in _PATHS else value)


def add_store_arguments(parser: argparse.ArgumentParser, writes: bool = True) -> None:
    """Flags that say which store to open and how to fit it (shared by the service and the CLI);
    `writes` False leaves out --max-batch, which only a writer's reports use."""
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="data dir holding the SQLite store and token file (default run.data_dir: "
                             "$TENGEN_DATA_DIR, else ./tengen-data)")
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL of a PostgreSQL database (default ratings.database_url: "
                             "$TENGEN_DATABASE_URL; unset: SQLite in the data dir)")
    parser.add_argument("--prior-draws", type=prior_draws, default=None,
                        help="weight of the Bayesian prior in virtual draws (default ratings.prior_draws: "
                             "$TENGEN_RATINGS__PRIOR_DRAWS, else 2)")
    parser.add_argument("--anchor", default=None,
                        help="player held at Elo 0 (default ratings.anchor: $TENGEN_RATINGS__ANCHOR; unset: "
                             "GNU Go's lowest level that has played, gnugo-l<L>, else the mean rating)")
    if not writes:
        parser.set_defaults(max_batch=None)  # the store's own limit, from the configuration
        return
    parser.add_argument("--max-batch", type=positive_int, default=None,
                        help="most games one report may carry; imports to a service send batches of this size "
                             "(default ratings.max_batch: $TENGEN_RATINGS__MAX_BATCH, else 1000)")


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{DataDir(data_dir).ratings_sqlite.resolve()}"




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


def client_token(configured: str | None = None, data_dir: Path | None = None) -> str | None:
    """Token a client sends: the configured one (--token, ratings.token: $TENGEN_RATINGS_TOKEN),
    else the data dir's token file."""
    if configured:
        return configured
    if data_dir is not None and token_path(data_dir).exists():
        return token_path(data_dir).read_text().strip() or None
    return None
