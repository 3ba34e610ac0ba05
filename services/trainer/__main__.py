"""`python -m services.trainer`: the trainer service (see services.trainer.service).

Settings come from a preset (`--preset`, default $TENGEN_PRESET or `cpu`) plus TENGEN_ overrides
(tengen.config), e.g. TENGEN_DATA_DIR, TENGEN_KAFKA_BOOTSTRAP, TENGEN_TRAINER__BATCH_SIZE.
Stops cleanly on SIGTERM or SIGINT: the current step finishes, a checkpoint is written, the
consumer leaves its group without committing anything not yet durable.
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

log = logging.getLogger("services.trainer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.trainer",
        description="tengen trainer: games from Kafka into the training window, SGD, SWA candidates.",
    )
    parser.add_argument("--preset", default=os.environ.get("TENGEN_PRESET", "cpu"),
                        help="tiny, cpu, paper or a YAML path ($TENGEN_PRESET, default cpu)")
    parser.add_argument("--device", default=os.environ.get("TENGEN_TRAINER_DEVICE", "cpu"),
                        help="torch device to train on ($TENGEN_TRAINER_DEVICE, default cpu)")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("TENGEN_TRAINER_HTTP_PORT", "8071")),
                        help="port of /healthz and /metrics ($TENGEN_TRAINER_HTTP_PORT, default 8071; 0 = any free)")
    parser.add_argument("--checkpoint-every", type=float, default=60.0, metavar="SECONDS",
                        help="checkpoint at least this often while training (default 60)")
    parser.add_argument("--log-every", type=float, default=10.0, metavar="SECONDS",
                        help="progress line interval (default 10)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    from services.trainer.service import TrainerService, torch_threads
    from tengen.config import ConfigError, load_config

    try:
        config = load_config(args.preset)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch_threads(config.trainer.threads)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    service = TrainerService(config, device=args.device, http_port=args.http_port,
                             checkpoint_every_s=args.checkpoint_every, log_every_s=args.log_every)
    service.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
