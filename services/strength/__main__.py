"""`python -m services.strength`: the loop's strength against GNU Go (see tengen.strength.service).

Settings come from a preset (`--preset`, default $TENGEN_PRESET or `cpu`) plus TENGEN_ overrides
(tengen.config): the `strength` section (TENGEN_STRENGTH__GNUGO_LEVELS=0,1, __GAMES, __VISITS,
__BOARD_SIZE, __KOMI, __INTERVAL_S, __THREADS, __GNUGO), TENGEN_DATA_DIR (the model repository
`<data_dir>/models` it reads, `strength/results.jsonl` and `strength/sgf/` it writes),
TENGEN_RATINGS_URL and TENGEN_RATINGS_TOKEN (unset URL: the data dir's ratings store).
Stops cleanly on SIGTERM or SIGINT: the game in progress finishes, no new one starts.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading

from tengen.config import Config
from tengen.infra.entrypoint import add_service_arguments, run_service

log = logging.getLogger("services.strength")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.strength",
        description="tengen strength: plays the newest model version against GNU Go at fixed levels "
                    "(at most once per strength.interval_s), reports the games to ratings with GNU Go as "
                    "the anchor gnugo-l<level>, and records each result in <data_dir>/strength/results.jsonl. "
                    "Without gnugo installed it says so once and idles.",
    )
    add_service_arguments(parser, section="strength")
    return parser


def main(argv: list[str] | None = None) -> int:
    def start(args: argparse.Namespace, config: Config, stop: threading.Event) -> int:
        from tengen.strength.service import StrengthService

        return StrengthService(config, http_port=args.http_port).run(stop)

    return run_service(build_parser(), argv, log, start)


if __name__ == "__main__":
    sys.exit(main())
