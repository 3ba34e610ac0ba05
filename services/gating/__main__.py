"""`python -m services.gating`: the gating service (see tengen.gate.service).

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
import sys
import threading

from tengen.config import Config
from tengen.infra.entrypoint import add_service_arguments, run_service

log = logging.getLogger("services.gating")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.gating",
        description="tengen gating: plays each candidate from tengen.candidates against the current model "
                    "(KataGo Appendix D settings) through Triton, promotes winners with the hot swap, "
                    "reports every game to ratings, records each decision in <data_dir>/gating/decisions.jsonl.",
    )
    add_service_arguments(parser, section="gating")
    return parser


def main(argv: list[str] | None = None) -> int:
    def start(args: argparse.Namespace, config: Config, stop: threading.Event) -> int:
        from tengen.gate.service import GatingService

        return GatingService(config, http_port=args.http_port).run(stop)

    return run_service(build_parser(), argv, log, start)


if __name__ == "__main__":
    sys.exit(main())
