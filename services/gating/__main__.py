"""`python -m services.gating`: the gating service (see services.gating.service).

Settings come from a preset (`--preset`, default $TENGEN_PRESET or `cpu`) plus TENGEN_ overrides
(tengen.config): TENGEN_DATA_DIR (model repository `<data_dir>/models`, match files and
`gating/decisions.jsonl`), TENGEN_KAFKA_BOOTSTRAP, TENGEN_TRITON_URL, TENGEN_RATINGS_URL and
TENGEN_RATINGS_TOKEN (unset URL: the data dir's ratings store), TENGEN_GATING__GAMES,
TENGEN_GATING__WINS_TO_PASS, TENGEN_GATING__VISITS, TENGEN_GATING__SPRT.
Stops cleanly on SIGTERM or SIGINT: the batches in flight finish, games in progress are dropped
(finished ones are on disk and the match resumes at the next start), nothing undecided is committed.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType

from tengen.logs import configure_logging

log = logging.getLogger("services.gating")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be a number within 0..65535, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.gating",
        description="tengen gating: plays each candidate from tengen.candidates against the current model "
                    "(KataGo Appendix D settings) through Triton, promotes winners with the hot swap, "
                    "reports every game to ratings, records each decision in <data_dir>/gating/decisions.jsonl.",
    )
    parser.add_argument("--preset", default=os.environ.get("TENGEN_PRESET", "cpu"),
                        help="tiny, cpu, paper or a YAML path ($TENGEN_PRESET, default cpu)")
    parser.add_argument("--http-port", type=_port, default=os.environ.get("TENGEN_GATING_HTTP_PORT", "8073"),
                        help="port of /healthz and /metrics ($TENGEN_GATING_HTTP_PORT, default 8073; 0 = any free)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    from services.gating.service import GatingService
    from tengen.config import ConfigError, load_config

    try:
        config = load_config(args.preset)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return GatingService(config, http_port=args.http_port).run(stop)


if __name__ == "__main__":
    sys.exit(main())
