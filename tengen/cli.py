"""The `tengen` command: one argparse tree, one module per command group.

Each module in COMMAND_MODULES exposes `register(subparsers)`, which adds its sub-parser and sets
`func` (called with the parsed args, returning the exit code). Heavy imports (torch, grpc, kafka)
happen inside the command functions so `tengen --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from tengen.logs import configure_logging

COMMAND_MODULES = [
    "tengen.commands.bench",
    "tengen.commands.sgf",
    "tengen.commands.ratings",
    "tengen.commands.models",
    "tengen.commands.triton",
    "tengen.commands.gtp",
    "tengen.commands.analysis",
    "tengen.commands.match",
    "tengen.commands.eval",
    "tengen.commands.run",
    "tengen.commands.chaos",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tengen",
        description="tengen: distributed KataGo-style self-play training for Go.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (`tengen ratings top --json | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
