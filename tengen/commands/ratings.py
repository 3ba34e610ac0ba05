"""`tengen ratings top|player|import`: read and feed the Bayesian Elo ratings.

With $TENGEN_RATINGS_URL (or --url) set to a ratings service's gRPC address the commands talk to
it; otherwise they open the store of the data dir directly (its SQLite file, or
$TENGEN_DATABASE_URL), so ratings stay readable after a run has stopped.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the real imports happen inside the commands, keeping `tengen --help` fast
    from tengen.ratings.book import History, Leaderboard, PlayerReport, RatingRow
    from tengen.ratings.records import GameReport, PlayerInfo
    from tengen.ratings.store import ReportOutcome


class Backend(Protocol):
    def leaderboard(self, limit: int = 0, prior_draws: float | None = None) -> Leaderboard: ...
    def player(self, name: str, prior_draws: float | None = None) -> PlayerReport: ...
    def history(self, prior_draws: float | None = None) -> History: ...
    def import_games(self, games: Sequence[GameReport], players: Sequence[PlayerInfo]) -> ReportOutcome: ...
    def close(self) -> None: ...


class _Local:
    """The data dir's store, opened in this process."""

    def __init__(self, args: argparse.Namespace) -> None:
        from tengen.loop.layout import DataDir
        from tengen.ratings.book import RatingsBook
        from tengen.ratings.config import store_url
        from tengen.ratings.records import RatingsError
        from tengen.ratings.store import RatingsStore

        sqlite = DataDir(args.data_dir).ratings_sqlite
        if not args.database_url and args.action is not _import and not sqlite.is_file():
            # Reading a data dir that has no ratings (a typo, a run not started yet) would create an
            # empty store there and show an empty table.
            raise RatingsError(f"no ratings in {args.data_dir} (no {sqlite.name}): give the data dir of a run "
                               "(--data-dir), a database (--database-url) or a ratings service (--url)")
        self.store = RatingsStore(store_url(args.data_dir, args.database_url), max_batch=args.max_batch)
        self.book = RatingsBook(self.store, prior_draws=args.prior_draws, anchor=args.anchor)
        self.leaderboard = self.book.leaderboard
        self.player = self.book.player
        self.history = self.book.history

    def import_games(self, games: Sequence[GameReport], players: Sequence[PlayerInfo]) -> ReportOutcome:
        # One transaction for the whole file, whatever its size.
        return self.store.report(games, players, max_batch=None)

    def close(self) -> None:
        self.store.close()


class _Remote:
    """A running ratings service, over gRPC."""

    def __init__(self, args: argparse.Namespace) -> None:
        from tengen.ratings.client import RatingsClient
        from tengen.ratings.config import client_token

        # A person is waiting: retry a restarting service briefly (about 1.5 s), not for long.
        self.client = RatingsClient(args.url, token=client_token(args.token, args.data_dir), retries=2)
        self.prior_draws = args.prior_draws
        self.max_batch = args.max_batch

    def leaderboard(self, limit: int = 0, prior_draws: float | None = None) -> Leaderboard:
        return self.client.leaderboard(limit, prior_draws)

    def player(self, name: str, prior_draws: float | None = None) -> PlayerReport:
        return self.client.player(name, prior_draws)

    def history(self, prior_draws: float | None = None) -> History:
        return self.client.history(prior_draws)

    def import_games(self, games: Sequence[GameReport], players: Sequence[PlayerInfo]) -> ReportOutcome:
        # The service takes at most max_batch games per report. Every row was validated before
        # the first batch; a batch refused by the service (a conflicting game id) leaves earlier
        # batches stored, and rerunning the import after fixing the file is safe (idempotent).
        from tengen.ratings.store import ReportOutcome

        accepted = duplicates = 0
        for start in range(0, len(games), self.max_batch):
            outcome = self.client.report_games(
                games[start : start + self.max_batch], players if start == 0 else ()
            )
            accepted += outcome.accepted
            duplicates += outcome.duplicates
        return ReportOutcome(accepted, duplicates)

    def close(self) -> None:
        self.client.close()


def _backend(args: argparse.Namespace) -> Backend:
    return _Remote(args) if args.url else _Local(args)


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.0f}"


def _samples(row: RatingRow) -> str:
    return "" if row.training_samples is None else f"{row.training_samples:,}"


def format_leaderboard(board: Leaderboard) -> str:
    s = board.summary
    anchor = f"{s.anchor} = {s.anchor_elo:g}" if s.anchor else f"mean = {s.anchor_elo:g}"
    level = f"{s.confidence * 100:g}%"
    width = max([6] + [len(r.name) for r in board.ratings])
    lines = [
        f"Bayesian Elo over {s.total_games} games (prior {s.prior_draws:g} virtual draws, "
        f"anchor {anchor}, {level} intervals)",
        f"{'rank':>4}  {'player':<{width}}  {'kind':<6}  {'Elo':>6}  {level + ' interval':>16}  "
        f"{'games':>6}  {'W':>5}  {'L':>5}  {'D':>4}  training samples",
    ]
    for r in board.ratings:
        interval = f"[{_fmt(r.elo_low)}, {_fmt(r.elo_high)}]"
        lines.append(
            f"{r.rank:>4}  {r.name:<{width}}  {r.kind:<6}  {_fmt(r.elo):>6}  {interval:>16}  "
            f"{r.games:>6}  {r.wins:>5}  {r.losses:>5}  {r.draws:>4}  {_samples(r)}"
        )
    if not board.ratings:
        lines.append("(no rated games yet)")
    return "\n".join(lines)


def format_player(report: PlayerReport) -> str:
    r = report.rating
    level = f"{report.summary.confidence * 100:g}%"
    samples = f", {r.training_samples:,} training samples" if r.training_samples is not None else ""
    lines = [f"{r.name} ({r.kind}{samples})"]
    if not r.rated:
        lines.append("  unrated: no games yet")
        return "\n".join(lines)
    lines.append(
        f"  Elo {_fmt(r.elo)} ± {r.stddev:.0f} ({level} interval [{_fmt(r.elo_low)}, {_fmt(r.elo_high)}]), "
        f"rank {r.rank}"
    )
    lines.append(f"  {r.games} games: {r.wins} wins, {r.losses} losses, {r.draws} draws")
    width = max([8] + [len(h.opponent) for h in report.head_to_head])
    lines.append(f"  {'opponent':<{width}}  {'Elo':>6}  {'W':>5}  {'L':>5}  {'D':>4}  expected score")
    for h in report.head_to_head:
        lines.append(
            f"  {h.opponent:<{width}}  {_fmt(h.opponent_elo):>6}  {h.wins:>5}  {h.losses:>5}  {h.draws:>4}  "
            f"{h.expected_score:.3f}"
        )
    return "\n".join(lines)


def _print_json(value: Any) -> None:
    from tengen.ratings.book import to_json

    print(json.dumps(to_json(value), indent=1, allow_nan=False))


def _run(args: argparse.Namespace) -> int:
    from tengen.config import ConfigError, environment_config
    from tengen.ratings.client import ServiceUnavailable
    from tengen.ratings.config import fill_from_config
    from tengen.ratings.records import RatingsError

    try:
        fill_from_config(args, environment_config())
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        backend = _backend(args)
    except RatingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        return args.action(args, backend)
    except (RatingsError, ServiceUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        backend.close()


def _top(args: argparse.Namespace, backend: Backend) -> int:
    board = backend.leaderboard(args.n, args.prior_draws)
    if args.json:
        _print_json(board)
    else:
        print(format_leaderboard(board))
    return 0


def _player(args: argparse.Namespace, backend: Backend) -> int:
    report = backend.player(args.name, args.prior_draws)
    if args.json:
        _print_json(report)
    else:
        print(format_player(report))
    return 0


def _import(args: argparse.Namespace, backend: Backend) -> int:
    from tengen.ratings.csvfile import read_games
    from tengen.ratings.records import PlayerInfo

    games = read_games(args.file, source=args.source)
    players = sorted({g.black for g in games} | {g.white for g in games})
    declared = [PlayerInfo(name, args.kind) for name in players] if args.kind else []
    outcome = backend.import_games(games, declared)
    print(
        f"imported {outcome.accepted} new games from {args.file} "
        f"({outcome.duplicates} already stored, {len(players)} players)"
    )
    print(format_leaderboard(backend.leaderboard(args.n, args.prior_draws)))
    return 0


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _readable_file(text: str) -> Path:
    """argparse type for `import`: checked before the store is opened, which would create it."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"cannot read {text}: no such file")
    return path


def _add_common(parser: argparse.ArgumentParser, writes: bool) -> None:
    """The store or service to use; the write-side flags (--token, --max-batch) only where `writes`."""
    from tengen.ratings.config import add_store_arguments

    add_store_arguments(parser, writes)
    parser.add_argument(
        "--url",
        default=None,
        help="gRPC address host:port of a ratings service (default ratings.url: $TENGEN_RATINGS_URL); "
        "unset: open the data dir's store directly",
    )
    if not writes:
        parser.set_defaults(token=None)
        return
    parser.add_argument(
        "--token",
        default=None,
        help="write token for the service (default ratings.token: $TENGEN_RATINGS_TOKEN, else the data "
        "dir's token file)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ratings",
        help="Bayesian Elo ratings: leaderboard, one player, import tournament results",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="ratings_command", metavar="ACTION", required=True)

    top = actions.add_parser("top", help="the leaderboard", description="Rated players, best first.")
    top.add_argument("--n", type=_count, default=20, help="how many players (default 20; 0: all)")
    top.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_common(top, writes=False)
    top.set_defaults(func=_run, action=_top)

    player = actions.add_parser(
        "player", help="one player's rating and head-to-head record",
        description="A player's rating, interval, games and record against each opponent.",
    )
    player.add_argument("name", help="player name, e.g. a model version")
    player.add_argument("--json", action="store_true", help="print JSON instead of text")
    _add_common(player, writes=False)
    player.set_defaults(func=_run, action=_player)

    imp = actions.add_parser(
        "import", help="import results of an outside tournament from CSV",
        description="Import games from a CSV file with columns game_id,black,white,winner "
        "(winner B, W or draw). Idempotent: game ids already stored are skipped. A bad row "
        "imports nothing and names its line.",
    )
    imp.add_argument("file", type=_readable_file, help="CSV file")
    imp.add_argument("--source", default="import", help="source recorded with each game (default import)")
    imp.add_argument(
        "--kind", choices=("model", "anchor", "engine"), default=None,
        help="declare every player in the file as this kind (default: new players become engines)",
    )
    imp.add_argument("--n", type=_count, default=20, help="players shown after the import (default 20)")
    _add_common(imp, writes=True)
    imp.set_defaults(func=_run, action=_import)
