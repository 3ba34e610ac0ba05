"""`tengen run`: the whole training loop on this machine (what `make run` starts).

Starts, as child processes: a Kafka-protocol broker (Tansu, in memory), Triton on the data dir's
model repository, the ratings service (SQLite in the data dir, the page at http://127.0.0.1:8061/),
one trainer, one gating service, the strength service (each new version against GNU Go at the
preset's levels: the live curve) and the preset's number of selfplay workers (--workers overrides
it). A new data dir first gets model
version 1, a random net of the preset's architecture. Settings reach the services through the
environment (TENGEN_DATA_DIR, TENGEN_KAFKA_BOOTSTRAP, TENGEN_TRITON_URL, TENGEN_RATINGS_URL,
TENGEN_RATINGS_TOKEN) and --preset; other TENGEN_<SECTION>__<KEY> overrides in your environment
reach them too. Servers take their configured ports when free, else free ones.

While it runs: a status view (games, window, samples trained, candidates, last gating decision,
model version, top of the leaderboard) redrawn every few seconds on a terminal, or one status
line every --status-every seconds when the output is not a terminal. A service that dies is
restarted with backoff (see <data-dir>/logs/<service>.log); one that keeps dying at start stops
the run with exit code 1.

Ctrl-C, SIGTERM or the end of --duration stops everything cleanly: selfplay and gating first,
then the trainer (it checkpoints), ratings, Triton, the broker; then it prints where the SGFs,
TensorBoard logs, models and ratings are. Everything lives in the data dir, so running again with
the same --data-dir continues the run (window, checkpoints, model versions, ratings).
A preset with a board-size curriculum (game.first_board_size, e.g. 7) plays that smaller board
until the served net has trained game.first_board_samples, then the preset's boards: the services
follow it themselves, as they do under docker compose and Kubernetes.
--init-model starts a new data dir from an existing net instead of a random one (a warm start);
--arch moves a run to another (bigger) net: the new net trains on the run's window before it
plays for promotion against the served one. While it
runs, <data-dir>/run.json lists the services' addresses (`tengen status` reads it), e.g. for
`TENGEN_TRITON_URL=... TENGEN_KAFKA_BOOTSTRAP=... tengen models promote model.pt` (a hand hot swap
that self-play follows: without the broker nothing is announced and self-play keeps its version) or
`TENGEN_RATINGS_URL=... tengen ratings top`.

Two hours of the cpu preset on a 2-core box (7x7 for about half an hour, then 9x9) take a random
net to beating GNU Go level 10 in most games (docs/results.md).
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from tengen.infra.entrypoint import add_preset_argument, positive_float, positive_int

if TYPE_CHECKING:
    from tengen.config import Config

DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in '90s', '30m', '2h', '1h30m', '1d' (argparse type; a bare number is refused so
    '30' cannot silently mean seconds when minutes were meant)."""
    compact = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    for match in DURATION_RE.finditer(compact):
        if match.start() != pos:
            break
        total += float(match.group(1)) * UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not compact or pos != len(compact):
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: use e.g. 90s, 30m, 2h, 1h30m")
    if total <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return total


def _log_to_file(path: Path, interactive: bool) -> logging.Handler:
    """This process's log also goes to <data-dir>/logs/run.log; on a terminal only warnings still
    reach stderr, so the status view is not scrolled away. Returns the file handler."""
    root = logging.getLogger()
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if interactive:
        for existing in root.handlers:
            if isinstance(existing, logging.StreamHandler):
                existing.setLevel(logging.WARNING)
    root.addHandler(handler)
    return handler


def preset_and_data_dir(prog: str, preset: str, data_dir: Path | None) -> tuple[Config, str, Path] | None:
    """The preset's config, the preset as the services will be given it, and the resolved data dir
    (the preset's when None); None after printing one error line."""
    from tengen.config import PRESETS, ConfigError, load_config

    try:
        config = load_config(preset)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    # The services load the preset themselves: a YAML path must still resolve in their directory.
    given = preset if preset in PRESETS else str(Path(preset).resolve())
    resolved = (data_dir or Path(config.run.data_dir)).resolve()
    if resolved.exists() and not resolved.is_dir():
        print(f"{prog}: data dir {resolved} exists and is not a directory", file=sys.stderr)
        return None
    config.run.data_dir = str(resolved)
    return config, given, resolved


def _run(args: argparse.Namespace) -> int:
    from tengen.loop.layout import DataDir
    from tengen.run.bootstrap import held_run
    from tengen.run.local import LocalRun, RunError, RunOptions

    if args.arch is not None:
        from tengen.nn.model import ARCHITECTURES

        if args.arch not in ARCHITECTURES:
            print(f"tengen run: unknown architecture {args.arch!r}: one of {', '.join(ARCHITECTURES)}", file=sys.stderr)
            return 2
        os.environ["TENGEN_TRAINER__ARCH"] = args.arch  # the services read it as they read the preset
    found = preset_and_data_dir("tengen run", args.preset, args.data_dir)
    if found is None:
        return 2
    config, preset, data_dir = found
    stage = DataDir(data_dir).first_stage
    if stage.is_dir():
        # A stage that handed over left the init model in place: that run goes on (its net's samples
        # include the stage's, so the curriculum does not play the first board again).
        if held_run(config) is None and not DataDir(data_dir).init_model.exists() and args.init_model is None:
            print(f"tengen run: {data_dir} holds only the unfinished first stage of an earlier tengen ({stage}), "
                  "which this one no longer plays (its curriculum is part of the loop now): remove that folder "
                  "to start afresh, or start from its net with --init-model "
                  f"{stage}/models/{config.run.model_name}/<newest N>/model.pt", file=sys.stderr)
            return 2
        print(f"tengen run: {stage} is an earlier tengen's first stage, never read now; remove it to free its disk",
              flush=True)
    if args.init_model is not None:
        from tengen.run.bootstrap import place_init_model

        try:
            placed = place_init_model(config, args.init_model)
        except ValueError as exc:
            print(f"tengen run: {exc}", file=sys.stderr)
            return 2
        print(f"tengen run: warm start from {args.init_model} ({placed['architecture']['name']}, "
              f"{placed['init_from']['samples_seen']:,} samples elsewhere)", flush=True)
    workers = args.workers or config.selfplay.workers
    config.selfplay.workers = workers
    interactive = sys.stdout.isatty() and not args.plain
    status_every = args.status_every or (5.0 if interactive else 30.0)
    logs = DataDir(data_dir).logs
    logs.mkdir(parents=True, exist_ok=True)
    log_file = _log_to_file(logs / "run.log", interactive)
    options = RunOptions(preset=preset, config=config, data_dir=data_dir, workers=workers,
                         duration_s=args.duration, status_every_s=status_every, interactive=interactive)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stop.is_set():
            print(f"\n{signal.Signals(signum).name}: stopping (give it a moment: the trainer checkpoints)",
                  file=sys.stderr, flush=True)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    print(f"tengen run: preset {config.preset}, data dir {data_dir}, {workers} selfplay worker(s)"
          + (f", for {args.duration:.0f} s" if args.duration else ", until Ctrl-C"), flush=True)
    if config.game.first_board_size:
        first = config.game.boards_at(0)
        print(f"tengen run: the curriculum plays {first.describe()} (komi around {first.komi_mean:g}) until the "
              f"served net has trained {config.game.first_board_samples:,} samples, then "
              f"{config.game.boards_at(None).describe()}", flush=True)
    try:
        return LocalRun(options).run(stop)
    except RunError as exc:
        print(f"tengen run: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        logging.getLogger().removeHandler(log_file)
        log_file.close()


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="the whole training loop on this machine (broker, Triton, ratings, trainer, gating, strength, "
        "selfplay)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_preset_argument(parser, "the preset: tiny (minutes, for tests), cpu (one CPU box, 9x9), cpu7 (one CPU box, "
                                "7x7), paper (GPU clusters)")
    parser.add_argument("--duration", type=parse_duration, default=None,
                        help="stop after this long, e.g. 30m, 2h, 1h30m (default: run until Ctrl-C)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where everything is written and continued from "
                        "($TENGEN_DATA_DIR, default ./tengen-data)")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="selfplay worker processes (default: the preset's selfplay.workers)")
    parser.add_argument("--status-every", type=positive_float, default=None, metavar="SECONDS",
                        help="status refresh interval (default 5 on a terminal, else 30)")
    parser.add_argument("--init-model", type=Path, default=None, metavar="EXPORT",
                        help="start a new data dir from this export (a model.pt with its .json sidecar, e.g. "
                        "another run's tengen-data/models/tengen/<N>/model.pt): it is version 1 and the "
                        "trainer's first weights; its architecture must be the preset's")
    parser.add_argument("--arch", default=None, metavar="ARCH",
                        help="train this architecture (e.g. b6c96) instead of the preset's: on a data dir whose "
                        "trainer holds another, a new net of it takes over, trains on the window first, and "
                        "is served once its candidate wins gating against the old net (models init --help "
                        "lists the architectures)")
    parser.add_argument("--plain", action="store_true",
                        help="print status lines instead of redrawing the view, even on a terminal")
    parser.set_defaults(func=_run)
