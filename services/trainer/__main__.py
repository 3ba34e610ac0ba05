"""`python -m services.trainer`: the trainer service (see tengen.train.service).

Settings come from a preset (`--preset`, default $TENGEN_PRESET or `cpu`) plus TENGEN_ overrides
(tengen.config), e.g. TENGEN_DATA_DIR, TENGEN_KAFKA_BOOTSTRAP, TENGEN_TRAINER__BATCH_SIZE.
Stops cleanly on SIGTERM or SIGINT: the current step finishes, a checkpoint is written, the
consumer leaves its group without committing anything not yet durable.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading

from tengen.config import Config
from tengen.infra.entrypoint import add_service_arguments, positive_float, run_service

log = logging.getLogger("services.trainer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.trainer",
        description="tengen trainer: games from Kafka into the training window, SGD, SWA candidates.",
    )
    add_service_arguments(parser, section="trainer")
    parser.add_argument("--device", default=None,
                        help="torch device to train on (default trainer.device of the preset, "
                             "$TENGEN_TRAINER__DEVICE: cpu)")
    parser.add_argument("--checkpoint-every", type=positive_float, default=60.0, metavar="SECONDS",
                        help="checkpoint at least this often while training (default 60)")
    parser.add_argument("--log-every", type=positive_float, default=10.0, metavar="SECONDS",
                        help="progress line interval (default 10)")
    return parser


def main(argv: list[str] | None = None) -> int:
    def start(args: argparse.Namespace, config: Config, stop: threading.Event) -> None:
        from tengen.train.service import TrainerService, torch_threads

        torch_threads(config.trainer.threads)
        TrainerService(config, device=args.device or config.trainer.device, http_port=args.http_port,
                       checkpoint_every_s=args.checkpoint_every, log_every_s=args.log_every).run(stop)

    return run_service(build_parser(), argv, log, start)


if __name__ == "__main__":
    sys.exit(main())
