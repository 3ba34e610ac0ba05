"""`python -m services.selfplay`: a selfplay worker (see tengen.selfplay.worker).

Settings come from a preset (`--preset`, default $TENGEN_PRESET or `cpu`) plus TENGEN_ overrides
(tengen.config), e.g. TENGEN_DATA_DIR (SGFs go to <data_dir>/sgf), TENGEN_KAFKA_BOOTSTRAP,
TENGEN_TRITON_URL, TENGEN_RUN__MODEL_NAME, TENGEN_SELFPLAY__GAMES_IN_PARALLEL.
Stops cleanly on SIGTERM or SIGINT: the batch in flight finishes, games in progress are dropped
(never published half-done), the producer is flushed and closed.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading

from tengen.config import Config
from tengen.infra.entrypoint import add_service_arguments, positive_float, positive_int, run_service

log = logging.getLogger("services.selfplay")


def _worker_id(text: str) -> str:
    from tengen.selfplay.worker import check_worker_id

    try:
        return check_worker_id(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m services.selfplay",
        description="tengen selfplay worker: MCTS games against the model Triton serves, published to "
                    "Kafka (tengen.games); follows tengen.models to switch model versions live.",
    )
    add_service_arguments(parser, section="selfplay")
    parser.add_argument("--worker-id", type=_worker_id, default=None,
                        help="name of this worker in game ids, so two workers never collide (default "
                             "selfplay.worker_id of the preset, $TENGEN_SELFPLAY__WORKER_ID, else the host name)")
    parser.add_argument("--outbox-dir", default=None, metavar="DIR",
                        help="keep published games the trainer has not committed as files in DIR (one per "
                             "worker) and send them again at the next start: for a broker that loses its log "
                             "when it restarts, as `tengen run`'s does (default: in memory only)")
    parser.add_argument("--games", type=positive_int, default=None, metavar="N",
                        help="stop after N games (default: play until stopped)")
    parser.add_argument("--log-every", type=positive_float, default=30.0, metavar="SECONDS",
                        help="progress line interval: games/s, positions/s (default 30)")
    return parser


def main(argv: list[str] | None = None) -> int:
    def start(args: argparse.Namespace, config: Config, stop: threading.Event) -> int:
        from tengen.selfplay.worker import SelfplayService, check_worker_id, default_worker_id

        try:
            worker_id = args.worker_id or check_worker_id(config.selfplay.worker_id or default_worker_id())
        except ValueError as err:
            log.error("selfplay.worker_id: %s", err)
            return 2
        service = SelfplayService(config, worker_id=worker_id, http_port=args.http_port, games=args.games,
                                  log_every_s=args.log_every, outbox_dir=args.outbox_dir)
        return service.run(stop)

    return run_service(build_parser(), argv, log, start)


if __name__ == "__main__":
    sys.exit(main())
