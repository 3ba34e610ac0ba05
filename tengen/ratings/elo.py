"""Bayesian Elo as BayesElo computes it, in numpy.

Model (Bradley-Terry on the Elo scale): player i has strength gamma_i = exp(theta_i) and rating
r_i = theta_i * 400/ln(10), so P(i beats j) = 1 / (1 + 10^((r_j - r_i)/400)).

Draws: a draw counts as half a win and half a loss for each side. Go under area scoring with a
half-point komi has no draws, and the few that integer komi produces carry too little information
to fit BayesElo's separate drawElo parameter, so the simpler model is the better-behaved choice.
Colour advantage is not modelled either: gating and rating matches play both colours equally.

Prior: `prior_draws` virtual draws per player, placed as BayesElo places them: each player's share
goes to its own opponents in proportion to the games it played against each, so the pair (i, j)
gets prior/2 * N_ij * (1/N_i + 1/N_j) virtual draws (N_ij games between them, N_i games of i in
all; two players with one match between them get exactly `prior_draws`). The prior keeps every
rating finite (a player who won all its games) and only pulls opponents towards each other.
The common simplification, virtual draws against one pseudo-opponent of fixed rating, pulls every
player towards a single point instead; on the long chains of version-vs-predecessor games that
gating produces those pulls add up along the chain (measured here: with 2 virtual draws, 80
versions and 200 games per match, the ends came out 13 standard deviations too close together).

Fit: the maximum a posteriori ratings, found by Hunter's (2004) MM algorithm on the games plus the
virtual draws: with W_i the score of i (wins plus half its draws, real and virtual) and N_ij the
games between i and j (real and virtual),

    gamma_i <- W_i / sum_j N_ij / (gamma_i + gamma_j).

MM alone converges linearly, and very slowly on chains (thousands of iterations for 50 versions),
so every NEWTON_EVERY iterations a Newton step with the exact Hessian (needed for the intervals
anyway) is tried and kept only when it raises the posterior. Every step raises the posterior,
which is concave, so the result is the maximum BayesElo's plain MM reaches.

Anchoring: like the likelihood, this prior does not change when all ratings of a connected group
of players (players linked by games) shift together; the anchor pins that shift. Ratings are
reported relative to one player held at `anchor_elo`, or with the mean held there when no anchor
player is given. Groups with no games linking them to the anchor cannot be compared with it: each
such group has its own mean held at `anchor_elo`. Intervals: the covariance of the anchored
ratings (contrasts c of the raw ones, orthogonal to the shifts) is c^T H^+ c, with H^+ the
pseudo-inverse of the negative Hessian of the log posterior at the optimum (the observed
information; for this model it does not depend on the outcomes). The anchor's own interval is 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

ELO_PER_NAT = 400.0 / math.log(10.0)
# MM iterations between Newton steps (see the module docstring).
NEWTON_EVERY = 10


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

    def totals(self) -> dict[str, tuple[int, int, int]]:
        """(wins, losses, draws) of every player over all its games."""
        totals: dict[str, list[int]] = {}
        for (a, b), r in self._pairs.items():
            for name, won, lost in ((a, r.a_wins, r.b_wins), (b, r.b_wins, r.a_wins)):
                t = totals.setdefault(name, [0, 0, 0])
                t[0] += won
                t[1] += lost
                t[2] += r.draws
        return {name: (won, lost, drawn) for name, (won, lost, drawn) in totals.items()}

    def opponents(self, a: str) -> list[str]:
        return sorted({y if x == a else x for x, y in self._pairs if a in (x, y)})

    def edges(self, players: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per pair that played: (i, j, score of i, score of j), scores = wins + half the draws."""
        index = {name: i for i, name in enumerate(players)}
        pairs = sorted(self._pairs.items())
        i = np.array([index[a] for (a, _), _ in pairs], dtype=np.intp)
        j = np.array([index[b] for (_, b), _ in pairs], dtype=np.intp)
        s_i = np.array([r.a_wins + 0.5 * r.draws for _, r in pairs], dtype=float)
        s_j = np.array([r.b_wins + 0.5 * r.draws for _, r in pairs], dtype=float)
        return i, j, s_i, s_j


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
    _ranks: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({r.name: r for r in self.ratings})
        self._ranks.update({r.name: rank for rank, r in enumerate(self.ratings, 1)})

    def __getitem__(self, name: str) -> PlayerRating:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def rank(self, name: str) -> int:
        return self._ranks[name]

    def expected_score(self, a: str, b: str) -> float:
        """Expected score of `a` against `b` under the fitted ratings."""
        return 1.0 / (1.0 + 10.0 ** ((self[b].elo - self[a].elo) / 400.0))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@dataclass(frozen=True)
class _Games:
    """Games plus virtual draws as edge arrays: pair (i[e], j[e]) scored s_i[e] and s_j[e]."""

    n: int
    i: np.ndarray
    j: np.ndarray
    s_i: np.ndarray
    s_j: np.ndarray

    @property
    def games(self) -> np.ndarray:
        return self.s_i + self.s_j

    def per_player(self, values_i: np.ndarray, values_j: np.ndarray) -> np.ndarray:
        """Sum per player of edge values (values_i credited to i[e], values_j to j[e])."""
        return np.bincount(self.i, values_i, self.n) + np.bincount(self.j, values_j, self.n)


def _with_prior(n: int, i: np.ndarray, j: np.ndarray, s_i: np.ndarray, s_j: np.ndarray, k: float) -> _Games:
    """Add BayesElo's virtual draws: prior/2 * N_ij * (1/N_i + 1/N_j) to each pair."""
    games = s_i + s_j
    per_player = np.bincount(i, games, n) + np.bincount(j, games, n)
    virtual = 0.5 * k * games * (1.0 / per_player[i] + 1.0 / per_player[j])
    return _Games(n, i, j, s_i + 0.5 * virtual, s_j + 0.5 * virtual)


def _components(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Label of the connected group of each player (players linked by games)."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(i.tolist(), j.tolist()):
        parent[root(a)] = root(b)
    roots = [root(x) for x in range(n)]
    labels = {r: label for label, r in enumerate(dict.fromkeys(roots))}
    return np.array([labels[r] for r in roots], dtype=np.intp)


def _log_posterior(theta: np.ndarray, g: _Games) -> float:
    """Log likelihood of the games and virtual draws (the log posterior up to a constant)."""
    d = theta[g.i] - theta[g.j]
    return float(np.sum(-g.s_i * np.logaddexp(0.0, -d) - g.s_j * np.logaddexp(0.0, d)))


def _information(theta: np.ndarray, g: _Games, shifts: np.ndarray) -> np.ndarray:
    """Negative Hessian of the log posterior (natural units) plus shifts @ shifts.T.

    The Hessian is singular along each group's common shift (the columns of `shifts`, orthonormal);
    adding those directions makes it invertible without changing it on the contrasts, so the
    inverse serves both for Newton steps and as H^+ on anchored ratings.
    """
    p = _sigmoid(theta[g.i] - theta[g.j])
    pq = g.games * p * (1.0 - p)
    info = shifts @ shifts.T
    np.add.at(info, (g.i, g.j), -pq)
    np.add.at(info, (g.j, g.i), -pq)
    info[np.diag_indices(g.n)] += g.per_player(pq, pq)
    return info


def _newton(theta: np.ndarray, posterior: float, g: _Games, shifts: np.ndarray) -> tuple[np.ndarray, float]:
    """One Newton step with backtracking, kept only if it raises the posterior."""
    p = _sigmoid(theta[g.i] - theta[g.j])
    gradient = g.per_player(g.s_i - g.games * p, g.s_j - g.games * (1.0 - p))
    direction = np.linalg.solve(_information(theta, g, shifts), gradient)
    for halvings in range(30):
        candidate = theta + direction * 0.5**halvings
        value = _log_posterior(candidate, g)
        if value > posterior:
            return candidate, value
    return theta, posterior



def fit(
    tally: Tally,
    prior_draws: float = 2.0,
    anchor: str | None = None,
    anchor_elo: float = 0.0,
    confidence: float = 0.95,
    tol: float = 1e-7,
    max_iter: int = 200_000,
    newton_every: int = NEWTON_EVERY,
) -> Fit:
    """Maximum a posteriori Bayesian Elo of every player in `tally` (see the module docstring).

    `tol` is in Elo: iteration stops when no rating moves by more than that in one step.
    `newton_every` 0 runs plain MM, as BayesElo does (the benchmark's baseline).
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

    g = _with_prior(n, *tally.edges(players), prior_draws)
    group = _components(n, g.i, g.j)
    sizes = np.bincount(group)
    shifts = np.zeros((n, len(sizes)))
    shifts[np.arange(n), group] = 1.0 / np.sqrt(sizes[group])
    wins = g.per_player(g.s_i, g.s_j)
    theta = np.zeros(n)
    converged = False
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        gamma = np.exp(theta)
        share = g.games / (gamma[g.i] + gamma[g.j])
        new = np.log(wins / g.per_player(share, share))
        new -= (np.bincount(group, new) / sizes)[group]  # only differences matter: keep means at 0
        new_posterior = _log_posterior(new, g)
        if newton_every and iterations % newton_every == 0:
            new, new_posterior = _newton(new, new_posterior, g, shifts)
        step = float(np.max(np.abs(new - theta))) * ELO_PER_NAT
        theta = new
        if step < tol:
            converged = True
            break

    try:
        cov = np.linalg.inv(_information(theta, g, shifts)) * ELO_PER_NAT**2
    except np.linalg.LinAlgError:  # e.g. prior_draws=1e-300: the information matrix is singular
        raise ValueError(
            f"the ratings cannot be computed with a prior of {prior_draws:g} virtual draws: with a player who "
            "won or lost every game they grow without bound; use a larger prior"
        ) from None
    # Contrast rows: each player minus the anchor (its group's mean where the anchor is absent).
    contrast = np.eye(n)
    anchor_index = players.index(anchor) if anchor is not None else None
    for label, size in enumerate(sizes):
        members = group == label
        if anchor_index is not None and group[anchor_index] == label:
            contrast[members, anchor_index] -= 1.0
        else:
            contrast[np.ix_(members, members)] -= 1.0 / size

    elo = theta * ELO_PER_NAT
    anchored = contrast @ elo + anchor_elo
    variances = np.einsum("ij,jk,ik->i", contrast, cov, contrast)
    stddev = np.sqrt(np.maximum(variances, 0.0))
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)

    ratings = []
    totals = tally.totals()
    for i, name in enumerate(players):
        won, lost, drawn = totals[name]
        sd = 0.0 if name == anchor else float(stddev[i])
        r = float(anchored[i])
        ratings.append(PlayerRating(name, r, sd, r - z * sd, r + z * sd, won + lost + drawn, won, lost, drawn))
    ratings.sort(key=lambda x: (-x.elo, x.name))
    return Fit(
        ratings, anchor, anchor_elo, prior_draws, confidence, tally.total_games, iterations, converged
    )
