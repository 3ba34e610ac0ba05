"""`tengen match`: play two GTP engines against each other, record and rate the games.

    tengen match --black "tengen gtp --model m.pt" --white "gnugo --mode gtp --level 1" \\
        --games 20 --size 9 --komi 7 --sgf-dir games/

Colours alternate (the --black engine has Black in games 1, 3, ...). Tengen's rules engine
referees and scores; see tengen.gtp.engine_match. Results go to ratings: the service at --ratings
($TENGEN_RATINGS_URL), else the data dir's own store (--data-dir, $TENGEN_DATA_DIR); --no-ratings
keeps them out. The summary ends with a JSON line.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tengen.infra.entrypoint import positive_float, positive_int
from tengen.loop.ids import id_problem

KINDS = ("model", "anchor", "engine")


def add_game_arguments(parser: argparse.ArgumentParser, default_games: int) -> None:
    """Game settings, SGF output and ratings flags (shared with `tengen eval`)."""
    from tengen.commands.gtp import _rules
    from tengen.go.rules import KATAGO

    parser.add_argument("--games", type=positive_int, default=default_games,
                        help=f"games to play (default {default_games})")
    parser.add_argument("--size", type=int, default=9, choices=range(7, 20), metavar="7..19",
                        help="board size (default 9)")
    parser.add_argument("--komi", type=float, default=7.5, help="komi (default 7.5)")
    parser.add_argument("--rules", type=_rules, default=KATAGO,
                        help="rules the referee plays and scores by (default katago: area scoring "
                        "with pass-alive territory, positional superko, no suicide)")
    parser.add_argument("--max-moves", type=positive_int, default=None,
                        help="move cap, after which the game is scored as it stands (default 3 x area)")
    parser.add_argument("--move-timeout", type=positive_float, default=120.0,
                        help="seconds an engine may take for one move before it forfeits (default 120)")
    parser.add_argument("--sgf-dir", type=Path, default=None,
                        help="write every game here as SGF (and each engine's stderr log)")
    add_ratings_arguments(parser)


def add_ratings_arguments(parser: argparse.ArgumentParser, data_dir_use: str = "") -> None:
    """Where the games are reported (make_reporter) and --json (shared with `tengen eval versions`,
    whose data dir also holds the versions: `data_dir_use` says so in --data-dir's help)."""
    parser.add_argument("--ratings", dest="url", metavar="HOST:PORT", default=None,
                        help="ratings service gRPC address (default ratings.url: $TENGEN_RATINGS_URL); unset: "
                        "the data dir's store")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"data dir {data_dir_use}whose ratings store is used without --ratings, and whose token "
                        "file authorises writes to the service (default run.data_dir: $TENGEN_DATA_DIR, "
                        "else ./tengen-data)")
    parser.add_argument("--database-url", default=None,
                        help="ratings database URL instead of the data dir's SQLite (default "
                        "ratings.database_url: $TENGEN_DATABASE_URL)")
    parser.add_argument("--token", default=None,
                        help="ratings write token (default ratings.token: $TENGEN_RATINGS_TOKEN, else the data "
                        "dir's token file)")
    parser.add_argument("--no-ratings", action="store_true", help="do not report the games to ratings")
    parser.add_argument("--json", action="store_true", help="print only the summary's JSON line")


def make_reporter(args: argparse.Namespace) -> Any:
    from tengen.config import environment_config
    from tengen.ratings.config import client_token, fill_from_config, store_url
    from tengen.ratings.report import ServiceReporter, StoreReporter

    if args.no_ratings:
        return None
    fill_from_config(args, environment_config())
    if args.url:
        return ServiceReporter(args.url, client_token(args.token, args.data_dir))
    return StoreReporter(store_url(args.data_dir, args.database_url))


def play_match(args: argparse.Namespace, a: Any, b: Any, source: str) -> int:
    """Run the match between EngineSpecs a and b with the shared arguments; prints progress and
    the summary; exit code 1 when games could not be reported, 128 + N when signal N stopped it."""
    from tengen.gtp.engine_match import EngineMatchSettings, GameOutcome, Match
    from tengen.infra.process import Interrupted, exit_on_signals

    settings = EngineMatchSettings(
        games=args.games, size=args.size, komi=args.komi, rules=args.rules, max_moves=args.max_moves,
        move_timeout=args.move_timeout, sgf_dir=args.sgf_dir, source=source,
    )

    def progress(o: GameOutcome) -> None:
        if not args.json:
            where = f"  {o.sgf_path}" if o.sgf_path else ""
            print(f"game {o.number}: {o.black} (B) vs {o.white} (W): {o.result} by {o.reason}, "
                  f"{o.moves} moves{where}", flush=True)

    try:
        reporter = make_reporter(args)
    except Exception as error:  # a store or service that cannot be opened: say so, play nothing
        print(f"error: cannot open ratings: {error}", file=sys.stderr)
        return 1
    exit_on_signals()  # SIGTERM unwinds like Ctrl-C: Match.run's finally stops both engines
    try:
        match = Match(a, b, settings, reporter, on_game=progress)
        summary = match.run()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Interrupted as stop:
        print(f"interrupted by {stop.signal_name}: the engines are stopped", file=sys.stderr)
        return int(stop.code)
    finally:
        if reporter is not None:
            reporter.close()
    if not args.json:
        print(summary.format())
    print(json.dumps(summary.to_dict()))
    return 1 if summary.unreported else 0


def default_name(command: str) -> str:
    argv = shlex.split(command)
    return Path(argv[0]).name if argv else ""


def _run(args: argparse.Namespace) -> int:
    from tengen.gtp.engine_match import EngineSpec

    a_name = args.black_name or default_name(args.black)
    b_name = args.white_name or default_name(args.white)
    if not a_name or not b_name:
        print("error: engine commands must not be empty", file=sys.stderr)
        return 2
    for flag, name in (("--black-name", a_name), ("--white-name", b_name)):
        if problem := id_problem(name):
            print(f"error: the ratings name {problem}; give another with {flag}", file=sys.stderr)
            return 2
    if a_name == b_name:
        print(f"error: both engines would be named {a_name!r} in ratings; "
              "name them with --black-name and --white-name", file=sys.stderr)
        return 2
    a = EngineSpec(a_name, args.black, args.black_kind)
    b = EngineSpec(b_name, args.white, args.white_kind)
    return play_match(args, a, b, source="match")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "match", help="play two GTP engines against each other (SGF, ratings, summary)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--black", required=True, metavar="CMD",
                        help="command of engine A (Black in odd-numbered games)")
    parser.add_argument("--white", required=True, metavar="CMD",
                        help="command of engine B (White in odd-numbered games)")
    parser.add_argument("--black-name", default=None, help="ratings name of engine A (default: its program name)")
    parser.add_argument("--white-name", default=None, help="ratings name of engine B (default: its program name)")
    parser.add_argument("--black-kind", choices=KINDS, default=None,
                        help="declare engine A to ratings as this kind (default: not declared)")
    parser.add_argument("--white-kind", choices=KINDS, default=None,
                        help="declare engine B to ratings as this kind (default: not declared)")
    add_game_arguments(parser, default_games=2)
    parser.set_defaults(func=_run)
