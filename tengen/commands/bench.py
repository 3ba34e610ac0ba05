"""`tengen bench NAME`: run one benchmark from bench/ and print its figures.

A benchmark module `tengen/bench/NAME.py` (a `-` in NAME is a `_` in the file name) defines
`DESCRIPTION`, optionally `add_arguments(parser)`, and
`run(args) -> dict`. It prints human-readable progress itself; this command prints the returned
figures as the last line, one JSON object with a "bench" key.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from tengen.infra.entrypoint import positive_float
from tengen.infra.process import Interrupted, exit_on_signals

BENCHMARKS: list[str] = [
    "go",
    "features",
    "ratings",
    "train",
    "inference",
    "nn",
    "gpu",
    "mcts",
    "selfplay",
    "loop",
    "ab",
    "fit",
    "slow-clients",
    "gpu-loop",
]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="run a benchmark (prints figures, ratio to a baseline, and a final JSON line)",
        description="Benchmarks of the hot paths. Each ends with one line of JSON.",
    )
    benches = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name in BENCHMARKS:
        module = importlib.import_module(f"tengen.bench.{name.replace('-', '_')}")
        sub = benches.add_parser(name, help=module.DESCRIPTION, description=module.DESCRIPTION)
        sub.add_argument("--seconds", type=positive_float, default=10.0, help="time budget (default 10)")
        if hasattr(module, "add_arguments"):
            module.add_arguments(sub)
        sub.set_defaults(func=_runner(name, module))


def _runner(name, module):
    def run(args: argparse.Namespace) -> int:
        # SIGTERM and SIGINT unwind the benchmark, so its finally blocks stop the servers it
        # started and remove its temporary directories.
        exit_on_signals()
        try:
            figures = {"bench": name, **module.run(args)}
        except Interrupted as stop:
            # run() has unwound: its servers are stopped and its temporary directories removed.
            print(f"bench {name}: interrupted by {stop.signal_name}", file=sys.stderr)
            return int(stop.code)
        print(json.dumps(figures), flush=True)
        return 0

    return run
