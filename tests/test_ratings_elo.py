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


def test_long_chain_of_versions_converges() -> None:
    """Gating's pattern: each version plays only its predecessor; plain MM would crawl here."""
    rng = np.random.default_rng(4)
    truth = np.cumsum(rng.normal(25.0, 20.0, 80))
    tally = Tally()
    for v in range(1, len(truth)):
        p = 1.0 / (1.0 + 10.0 ** ((truth[v - 1] - truth[v]) / 400.0))
        wins = int(rng.binomial(200, p))
        tally.add(f"v{v:02d}", f"v{v - 1:02d}", 1.0, wins)
        tally.add(f"v{v:02d}", f"v{v - 1:02d}", 0.0, 200 - wins)
    result = fit(tally, anchor="v00", anchor_elo=0.0)
    assert result.converged and result.iterations < 200
    z = [(result[f"v{v:02d}"].elo - (truth[v] - truth[0])) / result[f"v{v:02d}"].stddev for v in range(1, len(truth))]
    assert max(abs(x) for x in z) < 3.5
    # Uncertainty grows along the chain away from the anchor.
    assert result["v79"].stddev > result["v40"].stddev > result["v01"].stddev


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


def _log_posterior(theta: np.ndarray, score: np.ndarray, k: float) -> float:
    """Independent statement of the model: BT log likelihood of the games plus BayesElo's
    virtual draws, prior/2 * N_ij * (1/N_i + 1/N_j) for each pair."""
    games = score + score.T
    per_player = games.sum(axis=1)
    virtual = 0.5 * k * games * (1.0 / per_player[:, None] + 1.0 / per_player[None, :])
    log_p = -np.logaddexp(0.0, -(theta[:, None] - theta[None, :]))  # log P(i beats j)
    return float(np.sum((score + 0.5 * virtual) * log_p))


def test_optimum_and_intervals_match_numeric_derivatives() -> None:
    results = tournament(11, 400, draw_rate=0.1)
    tally = tally_of(results)
    k = 3.0
    result = fit(tally, prior_draws=k, tol=1e-10)
    names = tally.players
    score = np.array([[tally.record(a, b)[0] + 0.5 * tally.record(a, b)[2] for b in names] for a in names])
    theta = np.array([result[n].elo for n in names]) / ELO_PER_NAT
    h = 1e-4
    n = len(names)

    def f(delta: np.ndarray) -> float:
        return _log_posterior(theta + delta, score, k)

    gradient = np.array([(f(h * e) - f(-h * e)) / (2 * h) for e in np.eye(n)])
    assert np.max(np.abs(gradient)) < 1e-4  # a maximum of the posterior
    hessian = np.array(
        [
            [(f(h * (a + b)) - f(h * (a - b)) - f(h * (b - a)) + f(-h * (a + b))) / (4 * h * h) for b in np.eye(n)]
            for a in np.eye(n)
        ]
    )
    # The posterior ignores a common shift, so the covariance of the (mean-anchored) contrasts
    # comes from the pseudo-inverse.
    cov = np.linalg.pinv(-hessian, rcond=1e-8) * ELO_PER_NAT**2
    contrast = np.eye(n) - 1.0 / n
    stddev = np.sqrt(np.diag(contrast @ cov @ contrast.T))
    for i, name in enumerate(names):
        assert result[name].stddev == pytest.approx(stddev[i], rel=1e-3)
        assert result[name].high - result[name].elo == pytest.approx(1.959964 * stddev[i], rel=1e-3)


def test_prior_is_bayeselo_virtual_draws() -> None:
    """Two players, one match: the prior adds exactly `prior_draws` draws between them."""
    for wins, prior, expected_score in [(1, 2.0, 2 / 3), (2, 2.0, 3 / 4), (3, 1.0, 7 / 8)]:
        tally = Tally()
        tally.add("a", "b", 1.0, count=wins)
        result = fit(tally, prior_draws=prior)
        difference = result["a"].elo - result["b"].elo
        assert difference == pytest.approx(400 * math.log10(expected_score / (1 - expected_score)), abs=1e-6)


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
    tally.add("c", "d", 1.0, count=3)  # a separate group: nothing links it to the first
    result = fit(tally)
    # Each group's mean is held at the anchor Elo, so the two groups look alike.
    assert result["a"].elo == pytest.approx(result["c"].elo, abs=1e-6)
    assert result["a"].elo + result["b"].elo == pytest.approx(0.0, abs=1e-6)
    anchored = fit(tally, anchor="b", anchor_elo=100.0)
    assert anchored["b"].elo == 100.0 and anchored["a"].elo > 100.0
    assert anchored["c"].elo + anchored["d"].elo == pytest.approx(200.0, abs=1e-6)
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


def test_benchmark_runs_and_both_fits_agree(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from tengen.bench import ratings as bench

    figures = bench.run(argparse.Namespace(versions=30, games=60, seed=2, seconds=0.05))
    assert "speed-up" in capsys.readouterr().out
    assert figures["versions"] == 30 and figures["games"] > 29 * 60
    assert figures["max_elo_difference"] < 0.01
    assert figures["iterations"] < figures["baseline_iterations"]
