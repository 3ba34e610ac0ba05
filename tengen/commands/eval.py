"""`tengen eval gnugo`: measure a model against GNU Go, a fixed outside anchor (`tengen eval versions`,
one version against another until a sequential test decides: tengen.commands.eval_versions).

    tengen eval gnugo --model tengen-data/models/tengen/3/model.pt --level 1 --games 20 --size 9

Plays `tengen gtp` with the model against `gnugo --mode gtp --level L --chinese-rules
--capture-all-dead` (GNU Go's settings for area-scoring referees such as CGOS) through
the match runner (alternating colours, tengen's rules engine as referee, SGFs, a Wilson interval)
and reports every game to ratings with GNU Go declared as the anchor player `gnugo-l<L>`, so every
model's Elo sits on a scale tied to an engine nobody here wrote. The model is declared as a
`model` player with the training samples from its export's sidecar.

GNU Go is Debian's `gnugo` package: `make gnugo` installs it with apt-get when it is missing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tengen.commands import eval_versions
from tengen.commands.gtp import add_engine_arguments
from tengen.commands.match import add_game_arguments, play_match
from tengen.gtp.gnugo import GNUGO_LEVELS, INSTALL_HINT, find_gnugo, gnugo_command, model_command
from tengen.loop.messages import anchor_name, version_player


def model_name(args: argparse.Namespace) -> str:
    """Ratings name of the model: --name, else `<model>-v<N>` for a Triton model or a file in a
    model repository's `<model>/<N>/` directory, else the export file's stem."""
    if args.name:
        return args.name
    if args.triton:
        return version_player(args.model, args.model_version) if args.model_version else args.model
    return export_player(Path(args.model))


def export_player(path: Path) -> str:
    """Ratings name of an export file: `<model>-v<N>` for a file in a model repository's
    `<model>/<N>/` directory, else the file's stem (shared with `tengen eval versions`)."""
    if path.parent.name.isdigit() and path.parent.parent.name:
        return version_player(path.parent.parent.name, int(path.parent.name))
    return path.stem


def training_samples(args: argparse.Namespace) -> int | None:
    """samples_seen from the export's sidecar (None through Triton or without a sidecar)."""
    if args.triton:
        return None
    from tengen.nn.export import export_samples

    return export_samples(args.model)


def engine_command(args: argparse.Namespace) -> str:
    """The `tengen gtp` command line for the model, run by this Python."""
    return model_command(str(args.model), args.visits, args.threads, model_name(args), triton=args.triton,
                         model_version=args.model_version, triton_wait=args.triton_wait, policy=args.policy)


def _gnugo(args: argparse.Namespace) -> int:
    from tengen.gtp.engine_match import EngineSpec

    gnugo = find_gnugo(args.gnugo)
    if gnugo is None:
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return 2
    if not args.triton and not Path(args.model).is_file():
        print(f"error: no exported model at {args.model}", file=sys.stderr)
        return 2
    ours = EngineSpec(model_name(args), engine_command(args), "model", training_samples(args))
    anchor = EngineSpec(anchor_name(args.level), gnugo_command(gnugo, args.level), "anchor")
    return play_match(args, ours, anchor, source="eval-gnugo")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="measure a model against an outside engine (GNU Go) or another version (SPRT)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    opponents = parser.add_subparsers(dest="opponent", metavar="OPPONENT", required=True)
    gnugo = opponents.add_parser(
        "gnugo", help="play GNU Go at a fixed level, rated as the anchor gnugo-l<LEVEL>",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_engine_arguments(gnugo)
    gnugo.add_argument("--name", default=None,
                       help="ratings name of the model (default <model>-v<N> or the export's file name)")
    gnugo.add_argument("--level", type=int, default=1, choices=GNUGO_LEVELS, metavar="0..10",
                       help="GNU Go level (default 1)")
    gnugo.add_argument("--gnugo", default=None, help="path of the gnugo binary (default: gnugo on PATH)")
    add_game_arguments(gnugo, default_games=10)
    gnugo.set_defaults(func=_gnugo)
    eval_versions.register(opponents)
