"""One log format for the CLI and every service, so a run's logs read alike."""
from __future__ import annotations

import logging


def configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection
