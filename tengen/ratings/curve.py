"""What the ratings page shows, gathered from what the ratings service itself has.

The learning curve is the strength service's games against GNU Go (tengen.strength.measure:
source `strength`, the version as `<model>-vN` with its training samples, GNU Go as the anchor
`gnugo-l<level>`), read from the ratings store: every game played and reported is there, in
every deployment, which is why the store and not `strength/results.jsonl` is the source. The
results file (one line per version and level) holds the same games summed, but only where the
strength service's volume is mounted, which the ratings service in compose and Kubernetes does
not have. All of a version's games at one level make one point, each game counted once (ids are
idempotent), so a measurement cut short and played again after a restart counts every game.

Beside it: gating's decisions (`gating/decisions.jsonl` of the games dir, which the ratings
service mounts wherever it shows gating's games), the run's progress (tengen.loop.progress: what
the services publish on `tengen.progress`, in every deployment; the run's duration only where
`tengen run` writes `run.json` into the same data dir), and the Elo fit on GNU Go's scale
(tengen.ratings.book.held_at_zero: GNU Go's lowest played level unless an anchor is configured).

The Wilson interval lives here too, where ratings can reach it; tengen.gtp.engine_match has its own
copy until it imports this one (gtp sits above ratings' records, so it can).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tengen.infra.files import read_lines
from tengen.loop.layout import DataDir
from tengen.loop.messages import anchor_level, anchor_name, player_version
from tengen.loop.progress import LoopProgress, RunProgress, read_run_progress
from tengen.ratings.book import History, Leaderboard, RatingsBook
from tengen.ratings.store import RatingsStore
from tengen.stats import wilson_interval

STRENGTH_SOURCE = "strength"  # the source the strength service reports its games with
SCORES = {"B": 1.0, "W": 0.0, "draw": 0.5}  # Black's score of a stored result





@dataclass(frozen=True)
class StrengthMatch:
    """One version's games against one GNU Go level: a point of the curve, a row of the table."""

    player: str  # the version's ratings name
    version: int
    level: int
    wins: int
    losses: int
    draws: int
    training_samples: int | None
    first: datetime  # when its first and its last game were reported
    last: datetime

    @property
    def opponent(self) -> str:
        return anchor_name(self.level)

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    @property
    def rate(self) -> float:
        """The version's score rate, draws half."""
        return (self.wins + 0.5 * self.draws) / self.games

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.wins + 0.5 * self.draws, self.games)


def strength_matches(store: RatingsStore) -> list[StrengthMatch]:
    """Every version's record against each GNU Go level, by version then level."""
    samples = {p.name: p.training_samples for p in store.players()}
    tallies: dict[tuple[str, int], list[Any]] = {}  # (player, level) -> [wins, losses, draws, first, last]
    for pair in store.results_of(STRENGTH_SOURCE):
        for ours, theirs, our_score in ((pair.black, pair.white, SCORES[pair.result]),
                                        (pair.white, pair.black, 1.0 - SCORES[pair.result])):
            level = anchor_level(theirs)
            if level is None or player_version(ours) is None:
                continue
            tally = tallies.setdefault((ours, level), [0, 0, 0, pair.first, pair.last])
            tally[{1.0: 0, 0.0: 1, 0.5: 2}[our_score]] += pair.count
            tally[3], tally[4] = min(tally[3], pair.first), max(tally[4], pair.last)
    matches = [StrengthMatch(player, player_version(player) or 0, level, w, lo, d, samples.get(player), first, last)
               for (player, level), (w, lo, d, first, last) in tallies.items()]
    return sorted(matches, key=lambda m: (m.version, m.level, m.player))


@dataclass(frozen=True)
class GatingDecision:
    """One line of gating's decision log (tengen.gate.service: its `_record`)."""

    candidate: str
    opponent_version: int | None  # None: decided without a match (invalid export, superseded)
    wins: int
    losses: int
    draws: int
    games: int
    promoted_version: int | None
    reason: str
    time: float  # Unix time of the decision


def read_decisions(root: Path) -> list[GatingDecision]:
    """Gating's decisions in the games dir, oldest first (lines without the fields skipped)."""
    decisions = []
    for entry in read_lines(DataDir(root).decisions):
        def whole(key: str) -> int | None:
            value = entry.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        when, candidate = entry.get("time"), entry.get("candidate")
        if not isinstance(when, (int, float)) or not isinstance(candidate, str):
            continue
        decisions.append(GatingDecision(
            candidate, whole("opponent_version"), whole("wins") or 0, whole("losses") or 0, whole("draws") or 0,
            whole("games") or 0, whole("promoted_version") if entry.get("promoted") else None,
            str(entry.get("reason") or ""), float(when)))
    return decisions


@dataclass(frozen=True)
class PageData:
    leaderboard: Leaderboard
    history: History
    matches: list[StrengthMatch]
    decisions: list[GatingDecision]
    progress: LoopProgress | None  # None: no service has reported yet (or no broker to read)
    run: RunProgress | None  # `tengen run`'s own figures (run.json, with its duration); None elsewhere
    origin: datetime | None  # the first stored game: hour 0 of the time axes
    games_dir: bool  # whether there is a games dir (the /games pages, decisions, run.json)


def page_data(book: RatingsBook, root: Path | None, prior_draws: float | None = None,
              progress: LoopProgress | None = None) -> PageData:
    """Everything the page shows, read now (`root`: the games dir, None without one; `progress`:
    the services' latest figures)."""
    return PageData(
        book.leaderboard(0, prior_draws), book.history(prior_draws), strength_matches(book.store),
        read_decisions(root) if root is not None else [], progress, read_run_progress(root) if root else None,
        book.store.first_played_at(), root is not None,
    )
