"""A validation match: one net against another with the gating match's settings and only the
sequential test to stop it, as Leela Zero validates a net (`tengen eval versions`).

The games are tengen.gate.net_match's (Appendix D settings, colours alternating by game index);
side 0 is net A. After each finished game the SPRT of tengen.gate.decision runs on the games
finished in index order (as gating counts them, so games that end fast do not sway it): the
match stops once it accepts H1 (A scores p = 0.55 against B: "accept") or H0 (p = 0.45:
"reject"), else after `games` games, undecided at the cap. Gating's other stop, the fixed
wins-to-pass rule, has no place here: a validation asks which net is stronger, not whether a
candidate reaches a pass mark.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from tengen.gate.decision import SPRT_P0, SPRT_P1, Score, side_score, sprt_accepts, sprt_bounds, sprt_llr
from tengen.loop.ledger import MatchGameResult, in_index_order

A_SIDE = 0  # net A is evaluator 0 of the match: Black in the even-numbered games (index 0, 2, ...)
ACCEPT, REJECT, UNDECIDED = "accept", "reject", "undecided"


@dataclass
class Validation:
    """The finished games of a validation match of at most `games` games, by index."""

    games: int
    results: dict[int, MatchGameResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.games < 1:
            raise ValueError(f"a validation needs at least one game, got {self.games}")

    @property
    def score(self) -> Score:
        """A's score over every finished game (what ratings gets and the summary prints)."""
        return side_score(self.results.values(), A_SIDE)

    @property
    def sequential_score(self) -> Score:
        """A's score over the games the SPRT has counted (in index order)."""
        return side_score(in_index_order(self.results), A_SIDE)

    @property
    def verdict(self) -> str:
        accepted = sprt_accepts(self.sequential_score)
        return UNDECIDED if accepted is None else ACCEPT if accepted else REJECT

    def done(self) -> bool:
        return self.verdict != UNDECIDED or len(self.results) >= self.games

    def take(self, results: Iterable[MatchGameResult],
             on_game: Callable[[MatchGameResult, "Validation"], None] | None = None) -> "Validation":
        """Take finished games from `results` (a MatchRunner.play iterator, or any other source)
        until the validation is done; `on_game` sees each one. The caller closes the iterator,
        which drops the games still in progress. Games taken stay here if it raises."""
        if self.done():
            return self
        for result in results:
            if result.index in self.results or not 0 <= result.index < self.games:
                raise ValueError(f"game index {result.index} repeated or outside 0..{self.games - 1}")
            self.results[result.index] = result
            if on_game is not None:
                on_game(result, self)
            if self.done():
                break
        return self

    def explain(self, a: str = "A", b: str = "B") -> str:
        """The verdict in words (`a` and `b` name the nets), with the LLR and the bound that decided it."""
        score = self.sequential_score
        llr, (lower, upper) = round(sprt_llr(score), 2) + 0.0, sprt_bounds()  # + 0.0: no "-0.00"
        counted = f"after {score.games} games in order"
        verdict = self.verdict
        if verdict == ACCEPT:
            return (f"accept: {a} scores p={SPRT_P1} rather than {SPRT_P0} against {b} "
                    f"(LLR {llr:.2f} >= {upper:.2f} {counted})")
        if verdict == REJECT:
            return (f"reject: {a} scores p={SPRT_P0} rather than {SPRT_P1} against {b} "
                    f"(LLR {llr:.2f} <= {lower:.2f} {counted})")
        where = f"at the cap of {self.games} games" if len(self.results) >= self.games else \
            f"when stopped after {len(self.results)} of {self.games} games"
        return f"undecided {where} (LLR {llr:.2f} within ({lower:.2f}, {upper:.2f}) {counted})"
