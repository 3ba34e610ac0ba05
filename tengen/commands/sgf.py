"""`tengen sgf check|score FILE`: replay an SGF game with the rules engine.

Exit codes: 0 success; 1 an illegal move (check, score); 2 an unreadable file or bad arguments.
"""
from __future__ import annotations

import argparse
import sys

RULES_HELP = (
    "rules to replay under: tromp-taylor, chinese, katago, or an explicit ko and suicide rule, "
    "e.g. 'ko=simple,suicide=no' (ko: simple, positional or situational; suicide: yes or no; "
    "optionally scoring: area or katago) (default: the file's RU, else katago)"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sgf",
        help="check or score an SGF game with tengen's rules engine",
        description="Replay the main line of an SGF game with tengen's rules engine.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    check = actions.add_parser(
        "check",
        help="check that every move is legal",
        description="Replay every move. Exit 0 with a one-line summary when all are legal; exit 1 "
        "naming the first illegal move (number, colour, GTP vertex) and why (occupied, suicide, "
        "ko, superko); exit 2 when the file cannot be read or parsed.",
    )
    check.add_argument("file", metavar="FILE", help="SGF file")
    check.add_argument("--rules", type=_rules_arg, metavar="NAME", help=RULES_HELP)
    check.set_defaults(func=run_check)

    score = actions.add_parser(
        "score",
        help="score the final position (B+3.5 / W+0.5 / 0)",
        description="Replay the game and print the result of its final position as B+3.5, W+0.5 "
        "or 0, komi included. Rules whose scoring is 'area' (tromp-taylor) count every stone as "
        "alive (Tromp-Taylor); the default, KataGo's scoring, also gives pass-alive territory to "
        "its owner even with dead opponent stones inside. Exit 1 on an illegal move, 2 when the "
        "file cannot be read or parsed.",
    )
    score.add_argument("file", metavar="FILE", help="SGF file")
    score.add_argument("--rules", type=_rules_arg, metavar="NAME", help=RULES_HELP)
    score.set_defaults(func=run_score)


def _rules_arg(text: str):
    from tengen.go.rules import parse_rules

    try:
        return parse_rules(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load(args: argparse.Namespace):
    """The parsed game, or None after printing why it cannot be read."""
    from tengen.go.sgf import SgfError, read_game

    try:
        with open(args.file, "rb") as f:
            data = f.read()
    except OSError as exc:
        print(f"tengen sgf: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return None
    try:
        return read_game(data, rules=args.rules)
    except SgfError as exc:
        print(f"tengen sgf: {args.file}: {exc}", file=sys.stderr)
        return None


def run_check(args: argparse.Namespace) -> int:
    from tengen.go.sgf import SgfError, SgfMoveError, replay

    game = _load(args)
    if game is None:
        return 2
    try:
        replay(game)
    except SgfMoveError as exc:
        print(f"{args.file}: {exc}")
        return 1
    except SgfError as exc:  # a setup the engine refuses (e.g. AB stones without liberties)
        print(f"tengen sgf: {args.file}: {exc}", file=sys.stderr)
        return 2
    passes = sum(1 for _, move in game.moves if move == game.pass_move)
    setup = len(game.black_stones) + len(game.white_stones)
    print(
        f"{args.file}: ok: {len(game.moves)} legal moves ({passes} passes"
        + (f", {setup} setup stones" if setup else "")
        + f") on {game.x_size}x{game.y_size}, komi {game.komi:g}, rules {game.rules.to_string()}"
    )
    return 0


def run_score(args: argparse.Namespace) -> int:
    from tengen.go.passalive import final_score, result_string
    from tengen.go.sgf import SgfError, SgfMoveError, replay

    game = _load(args)
    if game is None:
        return 2
    try:
        board = replay(game)
    except SgfError as exc:
        print(f"tengen sgf: {args.file}: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, SgfMoveError) else 2
    # final_score follows the rules' scoring: plain Tromp-Taylor for 'area', else KataGo's.
    print(result_string(final_score(board)))
    return 0
