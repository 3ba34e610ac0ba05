"""`tengen chaos`: a fault drill on a local run (see tengen.run.chaos)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tengen.infra.entrypoint import positive_float, positive_int


def _targets(text: str) -> tuple[str, ...]:
    from tengen.run.chaos import TARGETS

    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in TARGETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown target(s) {', '.join(unknown) or '(none)'}; "
                                         f"choose among {', '.join(TARGETS)}")
    return names


def _chaos(args: argparse.Namespace) -> int:
    from tengen.commands.run import preset_and_data_dir
    from tengen.infra.process import Interrupted, exit_on_signals
    from tengen.run.chaos import Drill, DrillError

    found = preset_and_data_dir("tengen chaos", args.preset, args.data_dir)
    if found is None:
        return 2
    config, preset, data_dir = found
    print(f"tengen chaos: preset {config.preset}, data dir {data_dir}, {args.rounds} round(s) of "
          f"{', '.join(args.targets)}", flush=True)
    drill = Drill(preset, config, data_dir, args.rounds, targets=args.targets, recovery_s=args.recovery)

    exit_on_signals()  # SIGTERM and Ctrl-C unwind the drill, which stops the run it started
    try:
        result = drill.run()
    except DrillError as exc:
        print(f"tengen chaos: FAILED: {exc}", file=sys.stderr)
        return 1
    except Interrupted as stop:
        print(f"tengen chaos: interrupted by {stop.signal_name}; the run it started is stopped", file=sys.stderr)
        return int(stop.code)
    summary = result.summary()
    print(f"tengen chaos: {len(result.recoveries)} kills, slowest recovery {summary['max_recovery_s']:.1f} s; "
          f"{result.acknowledged} acknowledged games: {result.lost} lost, {result.duplicated} duplicated")
    print(json.dumps(summary, sort_keys=True))
    return 0 if result.lost == 0 and result.duplicated == 0 else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "chaos",
        help="fault drill: SIGKILL a local run's parts in rounds, measure recovery and lost games",
        description="A fault drill on a local run. Starts `tengen run --preset P --data-dir D` and, in each "
        "round, SIGKILLs the trainer, the broker, Triton, ratings and `tengen run` itself (starting it again), "
        "waiting after each until self-play moves again. Prints each recovery time, then the acknowledged "
        "games that never reached the window (lost) and those it holds twice (duplicated), and a JSON line "
        "with the figures. Exit code 0 when nothing was lost or duplicated, 1 otherwise or when a part did "
        "not come back within --recovery.",
    )
    parser.add_argument("--preset", default="tiny", help="preset of the run (default tiny)")
    parser.add_argument("--data-dir", type=Path, required=True, help="the run's data dir (continued if it exists)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="rounds of kills (default 3)")
    parser.add_argument(
        "--targets",
        type=_targets,
        default=("trainer", "broker", "triton", "ratings", "supervisor"),
        help="comma-separated parts to kill each round, in order (default trainer,broker,triton,ratings,supervisor)",
    )
    parser.add_argument(
        "--recovery",
        type=positive_float,
        default=240.0,
        metavar="SECONDS",
        help="bound on each recovery; longer fails the drill (default 240)",
    )
    parser.set_defaults(func=_chaos)
