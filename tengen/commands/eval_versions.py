"""`tengen eval versions A B`: validate one net against another, as Leela Zero validates a net.

    tengen eval versions 20 12 --data-dir tengen-data
    tengen eval versions new.pt old.pt --games 400 --visits 100

A and B are version numbers of the data dir's model (<data-dir>/models/<model>/<N>/model.pt) or
export files. They play the gating match (tengen.gate.net_match: the preset's board sizes and
visits, komi and move temperature of gating, no noise, resignation; colours alternate, A has
Black in games 1, 3, ...), batched in this process, until the sequential test of gating
(tengen.gate.decision: H0 A scores p = 0.45, H1 p = 0.55, alpha = beta = 0.05) decides or --games
are played (tengen.gate.validation). It prints every game, then A's score with its 95% Wilson
interval, the Elo difference A - B with its interval, and the SPRT verdict: accept (A is the
stronger), reject (B is), or undecided at the cap. The games go to ratings at the end (as `tengen
eval gnugo` reports them: the service at --ratings, else the data dir's store; --no-ratings keeps
them out): version N as `<model>-vN`, a file as its stem, each a `model` player with the
training samples of its sidecar. The summary ends with a JSON line.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tengen.commands import CommandError
from tengen.infra.entrypoint import add_preset_argument, positive_int
from tengen.loop.ids import id_problem

DEFAULT_GAMES = 200  # the paper's gating match; a clear difference stops far earlier
SOURCE = "eval-versions"


@dataclass(frozen=True)
class Side:
    """One net of the match: its export and its ratings name."""

    path: Path
    name: str


def _side(source: str, repository: Path, model: str) -> Side:
    from tengen.commands.eval import export_player
    from tengen.commands.models import resolve_export
    from tengen.loop.messages import version_player

    path, version = resolve_export(source, repository, model)
    return Side(path, version_player(model, version) if version is not None else export_player(path))


def _sides(args: argparse.Namespace, data_dir: Path, model: str) -> tuple[Side, Side]:
    from tengen.loop.layout import DataDir

    repository = DataDir(data_dir).models
    a, b = _side(args.a, repository, model), _side(args.b, repository, model)
    if args.names:
        a, b = Side(a.path, args.names[0]), Side(b.path, args.names[1])
    for side, flag in ((a, "A"), (b, "B")):
        if problem := id_problem(side.name):
            raise CommandError(f"the ratings name of {flag} {problem}; give others with --names")
    if a.path.resolve() == b.path.resolve():
        raise CommandError(f"A and B are the same export {a.path}")
    if a.name == b.name:
        raise CommandError(f"A and B would both be rated as {a.name!r}; name them with --names A_NAME B_NAME")
    return a, b


def _evaluator(side: Side, args: argparse.Namespace) -> Any:
    from tengen.nn.evaluator import make_evaluator

    try:  # the normal policy: what gating's nets play with (Triton serves it)
        return make_evaluator(side.path, num_threads=args.threads, runtime=args.runtime)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:  # RuntimeError: not TorchScript
        raise CommandError(f"{side.path} is not a tengen export: {str(exc).strip().splitlines()[0]}") from None


def _outcome(result: Any, sides: tuple[Side, Side], match_id: str) -> Any:
    """A finished game as the GTP match's outcome record, which its summary formats."""
    from tengen.go.passalive import result_string
    from tengen.gtp.engine_match import GameOutcome

    black, white = sides[result.black_side].name, sides[1 - result.black_side].name
    text = result_string(result.score) if result.score is not None else f"{result.winner}+R"
    return GameOutcome(result.index + 1, black, white, result.winner, text, result.end, result.moves, result.score,
                       game_id=f"{SOURCE}-{match_id}-{result.index + 1:03d}")


def _report(args: argparse.Namespace, sides: tuple[Side, Side], outcomes: list[Any]) -> int:
    """Report the games to ratings in one call; the number that could not be reported."""
    from tengen.commands.match import make_reporter
    from tengen.nn.export import export_samples
    from tengen.ratings.records import GameReport, PlayerInfo

    if args.no_ratings or not outcomes:
        return 0
    players = [PlayerInfo(side.name, "model", export_samples(side.path)) for side in sides]
    games = [GameReport(o.game_id, o.black, o.white, o.winner, source=SOURCE) for o in outcomes]
    reporter = None
    try:
        reporter = make_reporter(args)
        reporter.report(games, players)
    except Exception as error:  # a store or service that cannot take them: the summary says so
        print(f"error: the games could not be reported to ratings: {error}", file=sys.stderr)
        return len(games)
    finally:
        if reporter is not None:
            reporter.close()
    return 0


def _versions(args: argparse.Namespace) -> int:
    from tengen.commands.models import settings
    from tengen.gate.net_match import MatchRunner, NetMatchSettings
    from tengen.gate.validation import A_SIDE, Validation
    from tengen.gtp.engine_match import MatchSummary, new_match_id
    from tengen.infra.process import Interrupted, exit_on_signals
    from tengen.loop.ledger import MatchGameResult

    config = settings(args)
    data_dir = args.data_dir if args.data_dir is not None else Path(config.run.data_dir)
    sides = _sides(args, data_dir, args.model or config.run.model_name)
    match = NetMatchSettings.from_config(config)
    if args.visits is not None:
        match.visits = args.visits
    if args.size is not None:
        match.board_sizes, match.board_size_weights = [args.size], [1.0]
    seed = args.seed if args.seed is not None else secrets.randbits(31)
    evaluators = [_evaluator(side, args) for side in sides]
    parallel = min(args.parallel or config.selfplay.games_in_parallel, args.games)
    runner = MatchRunner(evaluators, match, config.search, games_in_parallel=parallel, seed=seed)
    match_id = new_match_id()
    a, b = sides[A_SIDE], sides[1 - A_SIDE]
    if not args.json:
        boards = ", ".join(f"{s}x{s}" for s in match.board_sizes)
        print(f"{a.name} ({a.path}) vs {b.name} ({b.path}): up to {args.games} games at {match.visits} visits, "
              f"{boards}, komi {match.komi:g}, seed {seed}; the SPRT may stop it earlier", flush=True)

    def progress(result: MatchGameResult, validation: Validation) -> None:
        if not args.json:
            o = _outcome(result, sides, match_id)
            score = validation.score
            print(f"game {o.number}: {o.black} (B) vs {o.white} (W): {o.result} by {o.reason}, {o.moves} moves; "
                  f"{a.name} {score} of {score.games}", flush=True)

    validation = Validation(args.games)
    interrupted: Interrupted | None = None
    exit_on_signals()  # SIGTERM unwinds like Ctrl-C: the finished games are still reported
    try:
        with contextlib.closing(runner.play(list(range(args.games)))) as results:
            validation.take(results, progress)
    except Interrupted as stop:
        interrupted = stop
    outcomes = [_outcome(validation.results[i], sides, match_id) for i in sorted(validation.results)]
    summary = MatchSummary(match_id, a.name, b.name, outcomes, _report(args, sides, outcomes))
    if interrupted is not None:
        print(f"interrupted by {interrupted.signal_name} after {len(outcomes)} games"
              + ("" if args.no_ratings or not outcomes else ", reported to ratings"), file=sys.stderr)
    if not args.json:
        print(summary.format())
        print(f"  SPRT {validation.explain(a.name, b.name)}")
    print(json.dumps({**summary.to_dict(), "sprt": validation.verdict, "sprt_games": validation.sequential_score.games,
                      "games_cap": args.games, "visits": match.visits, "board_sizes": match.board_sizes,
                      "seed": seed, "a_path": str(a.path), "b_path": str(b.path)}))
    if interrupted is not None:
        return int(interrupted.code)
    return 1 if summary.unreported else 0


def register(opponents: argparse._SubParsersAction) -> None:
    from tengen.commands.match import add_ratings_arguments
    from tengen.commands.models import VERSION_MODEL_HELP
    from tengen.nn.evaluator import RUNTIMES

    parser = opponents.add_parser(
        "versions", help="play one version (or export) against another until the SPRT decides",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("a", metavar="A", help="version number of the data dir's model, or an export file")
    parser.add_argument("b", metavar="B", help="the same for its opponent")
    parser.add_argument("--model", default=None, help=VERSION_MODEL_HELP)
    add_preset_argument(parser, "preset whose gating settings the match plays with (visits, boards, komi)")
    parser.add_argument("--games", type=positive_int, default=DEFAULT_GAMES,
                        help=f"most games to play, when the SPRT does not decide earlier (default {DEFAULT_GAMES})")
    parser.add_argument("--visits", type=positive_int, default=None,
                        help="playouts per move (default the preset's gating.visits)")
    parser.add_argument("--size", type=int, default=None, choices=range(7, 20), metavar="7..19",
                        help="one board size for every game (default the preset's game.board_sizes, as gating)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the games' boards and move choices (default a random one, printed)")
    parser.add_argument("--parallel", type=positive_int, default=None,
                        help="games played at once, their evaluations batched (default the preset's "
                        "selfplay.games_in_parallel)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="CPU threads of each net (default the runtime's own)")
    parser.add_argument("--runtime", default="auto", choices=RUNTIMES,
                        help="CPU runtime of the nets (default auto: OpenVINO where installed, else torch)")
    parser.add_argument("--names", nargs=2, metavar=("A_NAME", "B_NAME"), default=None,
                        help="ratings names of A and B (default <model>-v<N> for a version, a file's stem)")
    add_ratings_arguments(parser, data_dir_use="holding the versions (<data-dir>/models), ")
    parser.set_defaults(func=_versions)
