"""Bayesian Elo (tengen.ratings.elo) on synthetic tournaments with known ratings."""
from __future__ import annotations

import math
import random

import choix
import numpy as np
import pytest

from tengen.ratings.elo import ELO_PER_NAT, Tally, fit

TRUE = {"a": -420.0, "b": -260.0, "c": -90.0, "d": 0.0, "e": 60.0, "f": 140.0, "g": 310.0, "h": 470.0}


def tournament(seed: int, games: int, draw_rate: float = 0.0) -> list[tuple[str, str, float]]:
    """Random pairings; results drawn from the Elo model with the TRUE ratings."""
    rng = np.random.default_rng(seed)
    names = sorted(TRUE)
    out = []
    for _ in range(games):
        i, j = rng.choice(len(names), 2, replace=False)
        a, b = names[i], names[j]
        p = 1.0 / (1.0 + 10.0 ** ((TRUE[b] - TRUE[a]) / 400.0))
        if rng.random() < draw_rate:
            out.append((a, b, 0.5))
        else:
            out.append((a, b, 1.0 if rng.random() < p else 0.0))
    return out


def tally_of(results: list[tuple[str, str, float]]) -> Tally:
    tally = Tally()
    for a, b, score in results:
        tally.add(a, b, score)
    return tally


def test_estimates_recover_truth_within_intervals() -> None:
    truth_mean = sum(TRUE.values()) / len(TRUE)
    z_scores = []
    for seed in range(12):
        result = fit(tally_of(tournament(seed, 1500)), prior_draws=2.0)
        assert result.converged
        for name, elo in TRUE.items():
            r = result[name]
            assert r.low < r.elo < r.high
            z_scores.append((r.elo - (elo - truth_mean)) / r.stddev)
    z = np.array(z_scores)
    # Every estimate within its 99.9% interval, 95% intervals cover about 95% of the truths, and
    # the spread of the errors matches the stated stddevs (intervals neither too narrow nor wide).
    assert np.all(np.abs(z) < 3.29), z
    coverage = float(np.mean(np.abs(z) < 1.96))
    assert 0.87 <= coverage <= 0.995, coverage
    assert 0.6 < float(np.mean(z**2)) < 1.5, np.mean(z**2)


def test_ranking_matches_truth_with_many_games() -> None:
    result = fit(tally_of(tournament(99, 8000)))
    assert [r.name for r in result.ratings] == sorted(TRUE, key=lambda n: -TRUE[n])


def test_near_zero_prior_agrees_with_choix() -> None:
    results = tournament(7, 3000)
    names = sorted(TRUE)
    index = {n: i for i, n in enumerate(names)}
    # choix takes (winner, loser) pairs and returns natural-log strengths with mean zero.
    pairs = [(index[a], index[b]) if s == 1.0 else (index[b], index[a]) for a, b, s in results]
    reference = choix.ilsr_pairwise(len(names), pairs, alpha=1e-10, tol=1e-12, max_iter=10_000)
    reference = (reference - reference.mean()) * ELO_PER_NAT
    ours = fit(tally_of(results), prior_draws=1e-8)
    for name in names:
        assert ours[name].elo == pytest.approx(reference[index[name]], abs=1.0)
    # The same after anchoring both on one player.
    anchored = fit(tally_of(results), prior_draws=1e-8, anchor="d", anchor_elo=1000.0)
    for name in names:
        expected = reference[index[name]] - reference[index["d"]] + 1000.0
        assert anchored[name].elo == pytest.approx(expected, abs=1.0)


def test_order_of_reports_does_not_matter() -> None:
    results = tournament(3, 600, draw_rate=0.1)
    first = fit(tally_of(results))
    shuffled = list(results)
    random.Random(5).shuffle(shuffled)
    # Also swap who is named first in half the games: the same result seen from the other side.
    swapped = [(b, a, 1.0 - s) if i % 2 else (a, b, s) for i, (a, b, s) in enumerate(shuffled)]
    second = fit(tally_of(swapped))
    assert [r.name for r in first.ratings] == [r.name for r in second.ratings]
    for r in first.ratings:
        assert second[r.name].elo == pytest.approx(r.elo, abs=1e-6)
        assert second[r.name].stddev == pytest.approx(r.stddev, rel=1e-9)
        assert (second[r.name].wins, second[r.name].draws) == (r.wins, r.draws)


def _log_posterior(theta: np.ndarray, score: np.ndarray, games: np.ndarray, k: float) -> float:
    """Independent statement of the model: BT log likelihood + k virtual draws vs rating 0."""
    diff = theta[:, None] - theta[None, :]
    log_p = -np.logaddexp(0.0, -diff)  # log P(i beats j)
    likelihood = float(np.sum(score * log_p))
    prior = k * float(np.sum(-0.5 * np.logaddexp(0.0, -theta) - 0.5 * np.logaddexp(0.0, theta)))
    return likelihood + prior


def test_optimum_and_intervals_match_numeric_derivatives() -> None:
    results = tournament(11, 400, draw_rate=0.1)
    tally = tally_of(results)
    k = 3.0
    result = fit(tally, prior_draws=k, tol=1e-10)
    names = tally.players
    score, games = tally.matrices(names)
    # Raw (unanchored) MAP in natural units: mean-anchored ratings plus the shift the prior picked.
    # Recover it as the maximiser along the common shift of the anchored ratings.
    anchored = np.array([result[n].elo for n in names]) / ELO_PER_NAT
    shifts = np.linspace(-1, 1, 20001)
    values = [_log_posterior(anchored + c, score, games, k) for c in shifts]
    theta = anchored + shifts[int(np.argmax(values))]
    h = 1e-4
    n = len(names)
    gradient = np.array(
        [
            (_log_posterior(theta + h * e, score, games, k) - _log_posterior(theta - h * e, score, games, k)) / (2 * h)
            for e in np.eye(n)
        ]
    )
    assert np.max(np.abs(gradient)) < 1e-3  # a maximum of the posterior
    hessian = np.empty((n, n))
    for i, ei in enumerate(np.eye(n)):
        for j, ej in enumerate(np.eye(n)):
            f = lambda d: _log_posterior(theta + d, score, games, k)  # noqa: E731
            hessian[i, j] = (f(h * (ei + ej)) - f(h * (ei - ej)) - f(h * (ej - ei)) + f(-h * (ei + ej))) / (4 * h * h)
    cov = np.linalg.inv(-hessian) * ELO_PER_NAT**2
    contrast = np.eye(n) - 1.0 / n
    stddev = np.sqrt(np.diag(contrast @ cov @ contrast.T))
    for i, name in enumerate(names):
        assert result[name].stddev == pytest.approx(stddev[i], rel=1e-3)
        assert result[name].high - result[name].elo == pytest.approx(1.959964 * stddev[i], rel=1e-3)


def test_anchor_player_holds_its_rating() -> None:
    tally = tally_of(tournament(2, 800))
    mean_anchored = fit(tally)
    anchored = fit(tally, anchor="a", anchor_elo=-500.0)
    assert anchored["a"].elo == -500.0 and anchored["a"].stddev == 0.0
    for name in TRUE:
        difference = mean_anchored[name].elo - mean_anchored["a"].elo
        assert anchored[name].elo - anchored["a"].elo == pytest.approx(difference, abs=1e-6)
        if name != "a":
            # Relative to a fixed player the uncertainty includes that player's own.
            assert anchored[name].stddev > mean_anchored[name].stddev * 0.5


def test_draw_counts_as_half_win_half_loss() -> None:
    two_draws, win_and_loss = Tally(), Tally()
    two_draws.add("x", "y", 0.5, count=2)
    two_draws.add("y", "z", 1.0)
    win_and_loss.add("x", "y", 1.0)
    win_and_loss.add("y", "x", 1.0)
    win_and_loss.add("y", "z", 1.0)
    a, b = fit(two_draws), fit(win_and_loss)
    for name in "xyz":
        assert a[name].elo == pytest.approx(b[name].elo, abs=1e-6)
    assert a["x"].draws == 2 and b["x"].wins == 1 and b["x"].losses == 1


def test_prior_keeps_ratings_finite_and_shrinks_them() -> None:
    tally = Tally()
    tally.add("winner", "loser", 1.0, count=10)  # no loss at all: the likelihood alone diverges
    weak, strong = fit(tally, prior_draws=0.5), fit(tally, prior_draws=20.0)
    assert weak.converged and strong.converged
    assert math.isfinite(weak["winner"].elo)
    assert 0 < strong["winner"].elo < weak["winner"].elo
    assert strong["winner"].stddev < weak["winner"].stddev
    assert weak.expected_score("winner", "loser") > 0.9


def test_players_without_common_games_are_still_rated() -> None:
    tally = Tally()
    tally.add("a", "b", 1.0, count=3)
    tally.add("c", "d", 1.0, count=3)  # a separate group: only the prior links the two
    result = fit(tally)
    assert result["a"].elo == pytest.approx(result["c"].elo, abs=1e-6)
    assert all(math.isfinite(r.stddev) and r.stddev > 0 for r in result.ratings)


def test_bad_arguments_are_refused() -> None:
    tally = tally_of(tournament(1, 50))
    for prior in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="prior"):
            fit(tally, prior_draws=prior)
    with pytest.raises(ValueError, match="anchor"):
        fit(tally, anchor="nobody")
    with pytest.raises(ValueError, match="confidence"):
        fit(tally, confidence=1.0)
    with pytest.raises(ValueError, match="itself"):
        tally.add("a", "a", 1.0)
    with pytest.raises(ValueError, match="score"):
        tally.add("a", "b", 0.7)
    assert fit(Tally()).ratings == []
