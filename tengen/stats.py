"""The statistics every measurement here reports: a score rate's Wilson interval and its Elo."""
from __future__ import annotations

import math

Z_95 = 1.959964  # the two-sided 95% normal quantile


def wilson_interval(score: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a rate of `score` successes (draws count half) in n games."""
    if n <= 0:
        return 0.0, 1.0
    p = score / n
    denominator = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def elo_difference(rate: float) -> float:
    """Elo difference implied by a score rate (infinite at 0 and 1)."""
    if rate <= 0.0:
        return -math.inf
    if rate >= 1.0:
        return math.inf
    return -400.0 * math.log10(1.0 / rate - 1.0)
