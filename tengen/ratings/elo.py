"""Bayesian Elo as BayesElo computes it, in numpy.

Model (Bradley-Terry on the Elo scale): player i has strength gamma_i = exp(theta_i) and rating
r_i = theta_i * 400/ln(10), so P(i beats j) = 1 / (1 + 10^((r_j - r_i)/400)).

Draws: a draw counts as half a win and half a loss for each side. Go under area scoring with a
half-point komi has no draws, and the few that integer komi produces carry too little information
to fit BayesElo's separate drawElo parameter, so the simpler model is the better-behaved choice.
Colour advantage is not modelled either: gating and rating matches play both colours equally.

Prior: every player gets `prior_draws` virtual draws against a pseudo-opponent of fixed strength
gamma = 1 (rating 0). This keeps every rating finite (a player who won all its games), ties
disconnected groups of players together, and makes the posterior strictly concave. The maximum
a posteriori estimate is found by Hunter's (2004) MM algorithm: with W_i the score of i (wins plus
half its draws, real and virtual) and N_ij the games between i and j,

    gamma_i <- W_i / (sum_j N_ij / (gamma_i + gamma_j) + k / (gamma_i + 1)),

each step followed by the exact maximisation along the common shift of all ratings (the one
direction the likelihood ignores; only the prior pins it, so plain MM would crawl along it when
the prior is weak). Both steps increase the posterior.

Anchoring: ratings are reported relative to one player held at `anchor_elo`, or with their mean
held there when no anchor player is given. Intervals: the covariance of the ratings is the inverse
of the negative Hessian of the log posterior at the optimum (the observed information; for this
model it does not depend on the outcomes); the anchored ratings are contrasts of the raw ones, so
their variances are c^T Sigma c with c the contrast vector. The anchor player's own interval is 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

ELO_PER_NAT = 400.0 / math.log(10.0)


@dataclass
class _PairRecord:
    a_wins: int = 0
    b_wins: int = 0
    draws: int = 0


class Tally:
    """Game results aggregated per pair of players; the order of `add` calls does not matter."""

    def __init__(self) -> None:
        self._pairs: dict[tuple[str, str], _PairRecord] = {}

    def add(self, a: str, b: str, a_score: float, count: int = 1) -> None:
        """Record `count` games of `a` against `b`; `a_score` is 1 (a won), 0.5 (draw) or 0."""
        if a == b:
            raise ValueError(f"a game of {a!r} against itself cannot be rated")
        if count < 0:
            raise ValueError(f"negative game count {count}")
        if a_score not in (0.0, 0.5, 1.0):
            raise ValueError(f"score must be 0, 0.5 or 1, got {a_score!r}")
        if a > b:
            a, b, a_score = b, a, 1.0 - a_score
        record = self._pairs.setdefault((a, b), _PairRecord())
        if a_score == 1.0:
            record.a_wins += count
        elif a_score == 0.0:
            record.b_wins += count
        else:
            record.draws += count

    @property
    def players(self) -> list[str]:
        return sorted({name for pair in self._pairs for name in pair})

    @property
    def total_games(self) -> int:
        return sum(r.a_wins + r.b_wins + r.draws for r in self._pairs.values())

    def record(self, a: str, b: str) -> tuple[int, int, int]:
        """(wins, losses, draws) of `a` against `b`."""
        if a <= b:
            r = self._pairs.get((a, b), _PairRecord())
            return r.a_wins, r.b_wins, r.draws
        r = self._pairs.get((b, a), _PairRecord())
        return r.b_wins, r.a_wins, r.draws

    def opponents(self, a: str) -> list[str]:
        return sorted({y if x == a else x for x, y in self._pairs if a in (x, y)})

    def matrices(self, players: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(score, games): score[i, j] = wins of i over j plus half their draws; games symmetric."""
        index = {name: i for i, name in enumerate(players)}
        n = len(players)
        score = np.zeros((n, n))
        games = np.zeros((n, n))
        for (a, b), r in self._pairs.items():
            i, j = index[a], index[b]
            score[i, j] += r.a_wins + 0.5 * r.draws
            score[j, i] += r.b_wins + 0.5 * r.draws
            games[i, j] = games[j, i] = r.a_wins + r.b_wins + r.draws
        return score, games


@dataclass(frozen=True)
class PlayerRating:
    name: str
    elo: float
    stddev: float
    low: float
    high: float
    games: int
    wins: int
    losses: int
    draws: int


@dataclass(frozen=True)
class Fit:
    """The result of `fit`: ratings best first, plus what is needed for expected scores."""

    ratings: list[PlayerRating]
    anchor: str | None
    anchor_elo: float
    prior_draws: float
    confidence: float
    total_games: int
    iterations: int
    converged: bool
    _by_name: dict[str, PlayerRating] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({r.name: r for r in self.ratings})

    def __getitem__(self, name: str) -> PlayerRating:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def rank(self, name: str) -> int:
        return next(i for i, r in enumerate(self.ratings, 1) if r.name == name)

    def expected_score(self, a: str, b: str) -> float:
        """Expected score of `a` against `b` under the fitted ratings."""
        return 1.0 / (1.0 + 10.0 ** ((self[b].elo - self[a].elo) / 400.0))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _centre_shift(theta: np.ndarray) -> float:
    """The c maximising the prior term over a common shift: mean(sigmoid(theta + c)) = 1/2."""
    c = -float(np.median(theta))
    for _ in range(100):
        p = _sigmoid(theta + c)
        gradient = float(np.sum(0.5 - p))
        curvature = float(np.sum(p * (1.0 - p)))
        step = gradient / max(curvature, 1e-300)
        # Newton on a concave function of one variable; cap the step where the curvature vanishes.
        step = max(-10.0, min(10.0, step))
        c += step
        if abs(step) < 1e-15 * max(1.0, abs(c)):
            break
    return c


def fit(
    tally: Tally,
    prior_draws: float = 2.0,
    anchor: str | None = None,
    anchor_elo: float = 0.0,
    confidence: float = 0.95,
    tol: float = 1e-7,
    max_iter: int = 200_000,
) -> Fit:
    """Maximum a posteriori Bayesian Elo of every player in `tally` (see the module docstring).

    `tol` is in Elo: iteration stops when no rating moves by more than that in one step.
    """
    if not prior_draws > 0.0 or not math.isfinite(prior_draws):
        raise ValueError(f"prior weight must be a positive number of virtual draws, got {prior_draws}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    players = tally.players
    if anchor is not None and anchor not in players:
        raise ValueError(f"anchor {anchor!r} has no rated games")
    n = len(players)
    if n == 0:
        return Fit([], anchor, anchor_elo, prior_draws, confidence, 0, 0, True)

    score, games = tally.matrices(players)
    k = prior_draws
    wins = score.sum(axis=1) + 0.5 * k
    theta = np.zeros(n)
    converged = False
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        gamma = np.exp(theta)
        denom = (games / (gamma[:, None] + gamma[None, :])).sum(axis=1) + k / (gamma + 1.0)
        new = np.log(wins / denom)
        new += _centre_shift(new)
        step = float(np.max(np.abs(new - theta))) * ELO_PER_NAT
        theta = new
        if step < tol:
            converged = True
            break

    # Negative Hessian of the log posterior in natural units, then covariance in Elo^2.
    p = _sigmoid(theta[:, None] - theta[None, :])
    info = -games * p * p.T
    prior_p = _sigmoid(theta)
    info[np.diag_indices(n)] = (games * p * p.T).sum(axis=1) + k * prior_p * (1.0 - prior_p)
    cov = np.linalg.inv(info) * ELO_PER_NAT**2

    elo = theta * ELO_PER_NAT
    contrast = np.eye(n)
    if anchor is None:
        contrast -= 1.0 / n
    else:
        contrast[:, players.index(anchor)] -= 1.0
    anchored = contrast @ elo + anchor_elo
    variances = np.einsum("ij,jk,ik->i", contrast, cov, contrast)
    stddev = np.sqrt(np.maximum(variances, 0.0))
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)

    ratings = []
    for i, name in enumerate(players):
        w = l = d = 0
        for other in tally.opponents(name):
            rw, rl, rd = tally.record(name, other)
            w, l, d = w + rw, l + rl, d + rd
        sd = 0.0 if name == anchor else float(stddev[i])
        r = float(anchored[i])
        ratings.append(PlayerRating(name, r, sd, r - z * sd, r + z * sd, w + l + d, w, l, d))
    ratings.sort(key=lambda x: (-x.elo, x.name))
    return Fit(
        ratings, anchor, anchor_elo, prior_draws, confidence, tally.total_games, iterations, converged
    )
