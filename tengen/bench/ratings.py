"""`tengen bench ratings`: Bayesian Elo fits on gating-shaped data, MM+Newton vs plain MM.

The data is what gating produces: a chain of model versions, each playing one match against its
predecessor, results drawn from known ratings (fixed seed), plus a few round robins among random
versions. The fit (tengen.ratings.elo.fit) is timed as used by the service, and against the
baseline of plain MM iterations (newton_every=0, what BayesElo runs), in the same process. Both
reach the same maximum; the figures report the time per fit, iterations, and the largest rating
difference between the two.
"""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from tengen.infra.entrypoint import positive_int

if TYPE_CHECKING:
    from tengen.ratings.elo import Fit, Tally

DESCRIPTION = "Bayesian Elo fit on a gating chain of model versions: MM+Newton vs plain MM"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--versions", type=positive_int, default=100, help="model versions in the chain (default 100)")
    parser.add_argument("--games", type=positive_int, default=200, help="games per gating match (default 200)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


def _chain(versions: int, games: int, seed: int) -> Tally:
    import numpy as np

    from tengen.ratings.elo import Tally

    rng = np.random.default_rng(seed)
    truth = np.cumsum(rng.normal(25.0, 20.0, versions))
    tally = Tally()

    def match(a: int, b: int, count: int) -> None:
        p = 1.0 / (1.0 + 10.0 ** ((truth[b] - truth[a]) / 400.0))
        wins = int(rng.binomial(count, p))
        tally.add(f"v{a:04d}", f"v{b:04d}", 1.0, wins)
        tally.add(f"v{a:04d}", f"v{b:04d}", 0.0, count - wins)

    for v in range(1, versions):
        match(v, v - 1, games)
    for _ in range(versions // 10):  # occasional round robins between random versions
        picks = rng.choice(versions, 4, replace=False)
        for x in range(4):
            for y in range(x + 1, 4):
                match(int(picks[x]), int(picks[y]), 20)
    return tally


def _time_fits(tally: Tally, seconds: float, **options: Any) -> tuple[float, Fit]:
    from tengen.ratings.elo import fit

    start = time.perf_counter()
    result = fit(tally, **options)
    runs = 1
    while time.perf_counter() - start < seconds:
        result = fit(tally, **options)
        runs += 1
    return (time.perf_counter() - start) / runs, result


def run(args: argparse.Namespace) -> dict:
    tally = _chain(args.versions, args.games, args.seed)
    print(f"{args.versions} versions, {tally.total_games} games")
    ours_s, ours = _time_fits(tally, args.seconds / 2)
    print(f"MM+Newton: {ours_s * 1000:.1f} ms per fit, {ours.iterations} iterations, converged={ours.converged}")
    base_s, base = _time_fits(tally, args.seconds / 2, newton_every=0)
    print(f"plain MM:  {base_s * 1000:.1f} ms per fit, {base.iterations} iterations, converged={base.converged}")
    difference = max(abs(ours[r.name].elo - r.elo) for r in base.ratings)
    print(f"speed-up {base_s / ours_s:.1f}x; largest rating difference {difference:.2e} Elo")
    return {
        "versions": args.versions,
        "games": tally.total_games,
        "fit_ms": round(ours_s * 1000, 3),
        "iterations": ours.iterations,
        "baseline_fit_ms": round(base_s * 1000, 3),
        "baseline_iterations": base.iterations,
        "speedup": round(base_s / ours_s, 2),
        "max_elo_difference": difference,
    }
