# cython: language_level=3
"""The expected score utility of a predicted score distribution, the score part of the search's utility.

The search's utility of a score x ~ N(mu, sigma^2) is c_score E[(2/pi) atan((x - x0) / B)], x0 the
root's predicted score mean at the start of the search and B the board's side (sqrt of its area):
c_score * expected_atan((mu - x0) / B, sigma / B). The expectation comes from a table filled once
at import, interpolated bilinearly in t = (2/pi) atan(m) and s, m = (mu - x0) / B, s = sigma / B.
"""
from libc.math cimport M_PI, atan, ceil, exp, tan
from libc.stdlib cimport free, malloc

cdef enum:
    T_STEPS = 400   # t = (2/pi) atan(m) in [-1, 1]
    S_STEPS = 120   # s in [0, S_MAX]
cdef double S_MAX = 6.0
cdef double UTABLE[T_STEPS + 1][S_STEPS + 1]


cdef void _fill_utility_table() noexcept nogil:
    """UTABLE[i][j] = E[(2/pi) atan(m + s Z)], Z ~ N(0, 1), at t_i = (2/pi) atan(m), s_j.

    Trapezoid rule in x = s z over +-9 s: atan is analytic within distance 1 of the real line, so
    with steps of at most 0.25 (and 0.25 s, i.e. 0.25 in z, for narrow Gaussians) the rule's error
    is about exp(-2 pi / 0.25), far below float precision. Odd in m, so half the table is mirrored.
    """
    cdef int i, j, k, n
    cdef double s, h, m, t, acc, wsum
    cdef double* w = <double*>malloc(4000 * sizeof(double))
    for j in range(S_STEPS + 1):
        s = S_MAX * j / S_STEPS
        UTABLE[T_STEPS][j] = 1.0
        UTABLE[0][j] = -1.0
        if j == 0:
            for i in range(1, T_STEPS):
                UTABLE[i][0] = -1.0 + 2.0 * i / T_STEPS  # no spread: exactly t
            continue
        h = 0.25 * (s if s < 1.0 else 1.0)
        n = <int>ceil(9.0 * s / h)
        wsum = 0.0
        for k in range(2 * n + 1):
            w[k] = exp(-0.5 * ((k - n) * h / s) ** 2)
            wsum += w[k]
        for i in range(T_STEPS // 2, T_STEPS):
            t = -1.0 + 2.0 * i / T_STEPS
            m = 0.0 if i == T_STEPS // 2 else _tan_half_pi(t)
            acc = 0.0
            for k in range(2 * n + 1):
                acc += w[k] * atan(m + (k - n) * h)
            UTABLE[i][j] = (2.0 / M_PI) * acc / wsum
            UTABLE[T_STEPS - i][j] = -UTABLE[i][j]
    free(w)


cdef inline double _tan_half_pi(double t) noexcept nogil:
    """m with (2/pi) atan(m) = t, for |t| < 1."""
    return tan(0.5 * M_PI * t)


_fill_utility_table()


cdef double expected_atan_c(double m, double s) noexcept nogil:
    """E[(2/pi) atan(m + s Z)] from the table (bilinear in t = (2/pi) atan(m) and s)."""
    cdef double t = (2.0 / M_PI) * atan(m)
    if s < 0.0:
        s = 0.0
    elif s > S_MAX:
        s = S_MAX
    cdef double ft = (t + 1.0) * 0.5 * T_STEPS
    cdef double fs = s / S_MAX * S_STEPS
    cdef int i = <int>ft
    cdef int j = <int>fs
    if i >= T_STEPS:
        i = T_STEPS - 1
    if j >= S_STEPS:
        j = S_STEPS - 1
    cdef double a = ft - i, b = fs - j
    return ((1 - a) * ((1 - b) * UTABLE[i][j] + b * UTABLE[i][j + 1])
            + a * ((1 - b) * UTABLE[i + 1][j] + b * UTABLE[i + 1][j + 1]))


def expected_atan(double m, double s) -> float:
    """E[(2/pi) atan(m + s Z)] for Z ~ N(0, 1), from the precomputed table (s clamped to
    [0, 6]). The score utility of a prediction N(mu, sigma^2) is
    c_score * expected_atan((mu - x0) / B, sigma / B)."""
    return expected_atan_c(m, s)
