"""Games against GNU Go as the strength service reports them, and what the ratings page's learning
curve must show for them, computed here from the games alone (not with tengen's code): each
version's score against each level (draws half), its 95% Wilson interval, its training samples
and the time of its last game after the first rated game.

Used by the page's tests with and without a browser (tests/test_ratings_page.py,
tests/test_ratings_browser.py), which read the plotted points back from the SVG through its axes'
tick labels and compare."""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tengen.ratings.records import GameReport, PlayerInfo

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SAMPLES = {1: 0, 2: 40_000, 3: 90_000}
PLAYERS = [PlayerInfo(f"tengen-v{v}", "model", n) for v, n in SAMPLES.items()] + [
    PlayerInfo("gnugo-l1", "anchor"), PlayerInfo("gnugo-l5", "anchor")]
# (version, level): tengen's results in order ("w" won, "l" lost, "d" drawn), colours alternating
# (tengen Black in the first), and the minute after T0 of the first game (one a minute).
SCHEDULE = {
    (1, 1): ("llll", 0), (1, 5): ("llll", 4),
    (2, 1): ("wdlwlw", 40), (2, 5): ("wlllll", 46),
    (3, 1): ("wwwwlw", 90), (3, 5): ("wlwlwl", 96),
}


def strength_games(schedule: dict[tuple[int, int], tuple[str, int]] = SCHEDULE) -> list[GameReport]:
    games = []
    for (version, level), (results, minute) in schedule.items():
        for i, outcome in enumerate(results):
            ours, gnugo = f"tengen-v{version}", f"gnugo-l{level}"
            black, white = (ours, gnugo) if i % 2 == 0 else (gnugo, ours)
            ours_colour = "B" if i % 2 == 0 else "W"
            result = {"w": ours_colour, "l": "W" if ours_colour == "B" else "B", "d": "draw"}[outcome]
            games.append(GameReport(f"strength-v{version}-l{level}-20261201-0900-{i + 1:03d}", black, white, result,
                                    "strength", T0 + timedelta(minutes=minute + i)))
    return games


# Games that are not the curve's: gating's, and `tengen eval gnugo`'s (another source).
OTHER_GAMES = [
    GameReport("gating-candidate-000000040000-v1-0", "tengen-v2", "tengen-v1", "B", "gating",
               T0 + timedelta(minutes=30)),
    GameReport("gating-candidate-000000090000-v2-0", "tengen-v2", "tengen-v3", "W", "gating",
               T0 + timedelta(minutes=80)),
    GameReport("eval-gnugo-x-001", "tengen-v1", "gnugo-l1", "B", "eval-gnugo", T0 + timedelta(minutes=20)),
]


def wilson(score: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval, written out (its textbook form)."""
    p = score / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n)), min(1.0, (centre + spread) / (1 + z * z / n))


@dataclass(frozen=True)
class Expected:
    games: int
    wins: int
    losses: int
    draws: int
    rate: float
    low: float
    high: float
    samples: int
    hours: float  # the last game, after the first rated game


def expected_curve(games: Sequence[GameReport], players: Sequence[PlayerInfo] = PLAYERS
                   ) -> dict[tuple[int, int], Expected]:
    """(version, level) -> what its point and its table row must say."""
    first = min(g.played_at for g in games if g.played_at is not None)
    samples = {p.name: p.training_samples for p in players}
    tallies: dict[tuple[int, int], list] = {}
    for g in games:
        if g.source != "strength" or g.played_at is None:
            continue
        ours_black = g.black.startswith("tengen-v")
        ours, gnugo = (g.black, g.white) if ours_black else (g.white, g.black)
        key = (int(ours.rsplit("-v", 1)[1]), int(gnugo.rsplit("-l", 1)[1]))
        tally = tallies.setdefault(key, [0, 0, 0, first, ours])
        won = g.result == ("B" if ours_black else "W")
        tally[0 if won else 2 if g.result == "draw" else 1] += 1
        tally[3] = max(tally[3], g.played_at)
    expected = {}
    for key, (wins, losses, draws, last, ours) in tallies.items():
        n = wins + losses + draws
        score = wins + draws / 2
        low, high = wilson(score, n)
        expected[key] = Expected(n, wins, losses, draws, score / n, low, high, samples[ours],
                                 (last - first).total_seconds() / 3600)
    return expected


def unsi(text: str) -> float:
    """A tick label back to its number: 40k -> 40000."""
    factor = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1:], 1.0)
    return float(text[:-1] if factor != 1.0 else text) * factor


def unclock(text: str) -> float:
    """An h:mm tick label back to hours."""
    match = re.fullmatch(r"(\d+):(\d\d)", text)
    assert match, f"time tick {text!r} does not read h:mm"
    return int(match.group(1)) + int(match.group(2)) / 60


def axis_map(ticks: Sequence[tuple[str, float]], parse: Callable[[str], float]) -> Callable[[float], float]:
    """Value -> pixel along an axis, from its tick labels and their pixel positions."""
    (label_a, at_a), (label_b, at_b) = ticks[0], ticks[-1]
    a, b = parse(label_a), parse(label_b)
    assert a != b, ticks
    return lambda value: at_a + (value - a) / (b - a) * (at_b - at_a)
