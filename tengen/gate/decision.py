"""When a gating match is decided, and which way.

The rule is KataGo's (§6.2.4): the candidate passes with at least `wins_to_pass` wins out of
`games` (100 of 200 in the paper; a draw counts half a win). Two ways to stop before all games
are played:

- Exact early stopping (always): once `wins_to_pass` is reached, or can no longer be reached with
  the games left, playing on cannot change the verdict, so the match ends with the verdict the
  full match would give.
- With `sprt` (config.gating.sprt): Wald's sequential probability ratio test on the candidate's
  score rate p, H0: p = 0.45 against H1: p = 0.55, alpha = beta = 0.05. The log likelihood ratio
  after W wins and L losses is (W - L) ln(0.55 / 0.45) (a draw adds nothing), and the test stops
  once it leaves (ln(beta / (1 - alpha)), ln((1 - beta) / alpha)) = (-2.94, +2.94), i.e. once
  |W - L| >= 15: a candidate 15 games ahead is promoted, one 15 behind is rejected.

Why these hypotheses: the paper's gate accepts at a 50% score ("not much worse than the current
net"); H0 and H1 are symmetric about 0.5, so the SPRT's verdict agrees in direction with the
fixed rule (it promotes only when ahead), a net at p <= 0.45 is promoted with probability at most
~5% and one at p >= 0.55 rejected with at most ~5%. Its expected length at p = 0.5 is about
(2.94 / 0.20)^2 = 216 games, more than the paper's 200, so close candidates still play the whole
match and get the fixed rule's verdict; only clear ones stop early, which is where the saving is
(a candidate that wins 15 of its first 15 needs no more games). Exact stopping costs nothing in
accuracy; the SPRT trades a small, bounded error for speed.

Games are counted in game-index order (the caller passes the longest run of finished games from
index 0): games that end quickly (resignations) would otherwise be counted first, and the side
that wins fast would sway a sequential test.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from tengen.loop.ledger import MatchGameResult

SPRT_P0 = 0.45
SPRT_P1 = 0.55
SPRT_ALPHA = 0.05
SPRT_BETA = 0.05


@dataclass(frozen=True)
class Score:
    """The candidate's results so far."""

    wins: int = 0
    losses: int = 0
    draws: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    @property
    def points(self) -> float:
        return self.wins + 0.5 * self.draws

    def add(self, outcome: str) -> "Score":
        """`outcome` is "win", "loss" or "draw" for the candidate."""
        if outcome == "win":
            return Score(self.wins + 1, self.losses, self.draws)
        if outcome == "loss":
            return Score(self.wins, self.losses + 1, self.draws)
        if outcome == "draw":
            return Score(self.wins, self.losses, self.draws + 1)
        raise ValueError(f"unknown outcome {outcome!r}: expected win, loss or draw")

    def __str__(self) -> str:
        return f"{self.wins}-{self.losses}" + (f"-{self.draws}" if self.draws else "")


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str


def sprt_llr(score: Score, p0: float = SPRT_P0, p1: float = SPRT_P1) -> float:
    """Log likelihood ratio of H1 (rate p1) over H0 (rate p0); draws count half a win and half a
    loss, so they cancel."""
    win = math.log(p1 / p0)
    loss = math.log((1 - p1) / (1 - p0))
    return score.wins * win + score.losses * loss + score.draws * 0.5 * (win + loss)


def sprt_bounds(alpha: float = SPRT_ALPHA, beta: float = SPRT_BETA) -> tuple[float, float]:
    """Wald's (lower, upper) bounds on the log likelihood ratio."""
    return math.log(beta / (1 - alpha)), math.log((1 - beta) / alpha)


def sprt_accepts(score: Score) -> bool | None:
    """The sequential test's verdict on `score` (games in index order): True once it accepts H1
    (p = SPRT_P1), False once it accepts H0 (p = SPRT_P0), None while the LLR is between the bounds."""
    llr = sprt_llr(score)
    lower, upper = sprt_bounds()
    return True if llr >= upper else False if llr <= lower else None


def side_score(results: Iterable[MatchGameResult], side: int) -> Score:
    """The score of match side `side` (0 or 1: an evaluator of tengen.gate.net_match) in these games."""
    score = Score()
    for result in results:
        winner = result.winner_side()
        score = score.add("draw" if winner is None else "win" if winner == side else "loss")
    return score


def decide(score: Score, games: int, wins_to_pass: int, sprt: bool) -> Verdict | None:
    """The verdict once the match is decided by `score` (games in index order), else None."""
    if not 1 <= wins_to_pass <= games:
        raise ValueError(f"wins_to_pass must be within 1..games, got {wins_to_pass} of {games}")
    if score.games > games:
        raise ValueError(f"{score.games} results for a match of {games} games")
    # The reason names the games it counted: games finish out of order, so a match's record (every
    # finished game) can hold more than the first games in order that decided it.
    left = games - score.games
    counted = f"the first {score.games} games in order score {score}"
    if score.points >= wins_to_pass:
        return Verdict(True, f"{counted}: {score.points:g} wins reach the {wins_to_pass} of {games} needed, passes")
    if score.points + left < wins_to_pass:
        return Verdict(False, f"{counted}: {score.points:g} wins, and {left} games left cannot reach the "
                       f"{wins_to_pass} of {games} needed, fails")
    accepted = sprt_accepts(score) if sprt else None
    if accepted is not None:
        llr, (lower, upper) = sprt_llr(score), sprt_bounds()
        if accepted:
            return Verdict(True, f"{counted}: SPRT accepts p={SPRT_P1} over p={SPRT_P0} (LLR {llr:.2f} >= {upper:.2f})")
        return Verdict(False, f"{counted}: SPRT accepts p={SPRT_P0} over p={SPRT_P1} (LLR {llr:.2f} <= {lower:.2f})")
    return None
