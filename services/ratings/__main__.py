"""`python -m services.ratings`: the ratings service (gRPC + HTTP) over a SQL store.

A flag left out takes its value from the preset's `ratings` section and run.data_dir
(tengen.config, with their TENGEN_ overrides; see `--help`). Without a token (flag or
$TENGEN_RATINGS_TOKEN) the service uses the data dir's token file, creating it on first start, so
clients sharing the data dir can write and nobody else can. Stops cleanly on SIGTERM or SIGINT:
in-flight requests finish, then the servers and the database pool close.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from tengen.config import placeholder_secret
from tengen.infra.entrypoint import add_preset_argument, load_service_config, port, positive_int, stop_on_signals
from tengen.logs import configure_logging
from tengen.ratings.config import (
    add_store_arguments,
    fill_from_config,
    load_or_create_token,
    store_url,
)

log = logging.getLogger("services.ratings")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.ratings",
        description="tengen ratings service: Bayesian Elo of players from rated games, "
        "over gRPC (RatingsService) and HTTP (JSON, HTML page, each version's games at /games, /healthz, /metrics).",
    )
    add_preset_argument(parser)
    add_store_arguments(parser)
    parser.add_argument("--host", default=None,
                        help="listen address (default ratings.host: $TENGEN_RATINGS__HOST, else 0.0.0.0)")
    parser.add_argument("--grpc-port", type=port, default=None,
                        help="gRPC port (default ratings.grpc_port: $TENGEN_RATINGS__GRPC_PORT, else 50061; "
                             "0 picks a free one)")
    parser.add_argument("--http-port", type=port, default=None,
                        help="HTTP port (default ratings.http_port: $TENGEN_RATINGS__HTTP_PORT, else 8061; "
                             "0 picks a free one)")
    parser.add_argument("--token", default=None,
                        help="bearer token that writes must carry (default ratings.token: $TENGEN_RATINGS_TOKEN; "
                             "unset: the data dir's token file)")
    parser.add_argument("--connect-attempts", type=positive_int, default=None,
                        help="tries to reach the database at start, with backoff (default "
                             "ratings.connect_attempts: $TENGEN_RATINGS__CONNECT_ATTEMPTS, else 10)")
    parser.add_argument("--games-dir", type=Path, default=None,
                        help="data dir whose games the /games pages show: self-play's sgf/v<N>/*.sgf and gating's "
                             "gating/matches/ (default ratings.games_dir: $TENGEN_RATINGS__GAMES_DIR; unset: "
                             "--data-dir)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def games_dir(args: argparse.Namespace) -> Path:
    """The games dir, checked: one given explicitly must be a readable directory; the default (the
    data dir) may not exist yet (its pages say that no games are there)."""
    path = Path(args.games_dir if args.games_dir is not None else args.data_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"the games dir {path} is not a directory")
    if args.games_dir is not None:
        if not path.is_dir():
            raise ValueError(f"the games dir {path} (--games-dir / $TENGEN_RATINGS__GAMES_DIR) does not exist")
        if not os.access(path, os.R_OK | os.X_OK):
            raise ValueError(f"the games dir {path} is not readable")
    return path


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    config = load_service_config(args.preset)
    if config is None:
        return 2
    fill_from_config(args, config)
    try:
        games = games_dir(args)
    except ValueError as error:
        log.error("refusing to start: %s", error)
        return 2
    from sqlalchemy.exc import OperationalError

    from tengen.loop.messages import PROGRESS_TOPIC
    from tengen.loop.progress import ProgressFollower
    from tengen.ratings.api import RatingsApi
    from tengen.ratings.book import RatingsBook
    from tengen.ratings.server import RatingsServer
    from tengen.ratings.store import RatingsStore

    stop = stop_on_signals(log)

    placeholder = placeholder_secret(args.token, args.database_url)
    if placeholder:
        log.error("refusing to start: %s; set a real secret (python3 -c 'import secrets; "
                  "print(secrets.token_urlsafe(32))')", placeholder)
        return 2
    token = args.token or load_or_create_token(args.data_dir)
    try:
        store = RatingsStore(
            store_url(args.data_dir, args.database_url),
            max_batch=args.max_batch,
            connect_attempts=args.connect_attempts,
        )
    except OperationalError as error:
        log.error("cannot open the ratings database: %s", str(error).splitlines()[0])
        return 1
    log.info("ratings store: %s", store.engine.url.render_as_string(hide_password=True))
    book = RatingsBook(store, prior_draws=args.prior_draws, anchor=args.anchor)
    # The run's progress for the page, as the services publish it on the broker.
    follower = ProgressFollower(config.kafka.bootstrap)
    log.info("run progress: from %s on %s", PROGRESS_TOPIC, config.kafka.bootstrap)
    server = RatingsServer(RatingsApi(book, token, follower.current), args.host, args.grpc_port, args.http_port,
                           games_dir=games)
    log.info("games to watch: self-play SGFs and gating matches under %s (/games)", games.resolve())
    server.start()
    print(f"ratings service ready: grpc={server.grpc_port} http={server.http_port}", flush=True)
    stop.wait()
    server.stop()
    follower.close()
    store.close()
    log.info("ratings service stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
