"""What every service's `__main__` shares: flag types, the preset and HTTP-port flags, loading the
preset with a clear error, and SIGTERM/SIGINT as a stop event. A flag left out takes its value from
the preset (tengen.config, with its TENGEN_ overrides)."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Callable

from tengen.config import DEFAULT_PRESET, PRESET_ENV, PRESETS, Config, ConfigError, default_preset, load_config


def port(text: str) -> int:
    """argparse type: a TCP port, 0 meaning any free one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number within 0..65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be a number within 0..65535, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def add_preset_argument(parser: argparse.ArgumentParser, what: str = "the preset") -> None:
    """--preset, its default $TENGEN_PRESET (tengen.config.default_preset)."""
    parser.add_argument("--preset", default=default_preset(),
                        help=f"{what}: {', '.join(PRESETS)} or a YAML path (${PRESET_ENV}, default {DEFAULT_PRESET})")


def add_service_arguments(parser: argparse.ArgumentParser, *, section: str) -> None:
    """--preset, --http-port (/healthz and /metrics; default the preset's `<section>.http_port`) and -v."""
    add_preset_argument(parser)
    parser.add_argument("--http-port", type=port, default=None,
                        help=f"port of /healthz and /metrics (default {section}.http_port of the preset, "
                             f"$TENGEN_{section.upper()}__HTTP_PORT; 0 = any free)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.set_defaults(config_section=section)


def load_service_config(preset: str) -> Config | None:
    """The preset with its TENGEN_ overrides, or None after printing why it is invalid."""
    try:
        return load_config(preset)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def stop_on_signals(log: logging.Logger) -> threading.Event:
    """An event that SIGTERM and SIGINT set (logged), for a service loop to stop on."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def run_service(parser: argparse.ArgumentParser, argv: list[str] | None, log: logging.Logger,
                start: Callable[[argparse.Namespace, Config, threading.Event], int | None]) -> int:
    """Every service's main: parse the flags, set up logging, load the preset (exit 2 naming the
    problem when it is invalid), turn SIGTERM/SIGINT into the stop event, and run
    `start(args, config, stop)` (None counts as exit 0)."""
    from tengen.logs import configure_logging

    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    config = load_service_config(args.preset)
    if config is None:
        return 2
    if args.http_port is None:
        args.http_port = getattr(config, args.config_section).http_port
    code = start(args, config, stop_on_signals(log))
    return 0 if code is None else code

