# cython: language_level=3
"""The root's priors in a noised search (`start_search(noise=True)`, full self-play searches): a
policy temperature, then Dirichlet noise.

Policy temperature T = T_late + (T_early - T_late) 0.5^(t / B) at turn t (B the board's side;
KataGo's later runs use 1.25 decaying to 1.1), then Dirichlet noise, alpha = total / legal moves,
or shaped (KataGo's later runs): half the total spread uniformly, half in proportion to
max(0, log min(0.01, P) - mean over the legal moves of that log), which favours moves the policy
rates low but still far above the hopeless ones.
"""
from libc.math cimport exp, log
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc

import numpy as np

from tengen.search.rng cimport gamma


cdef double root_temperature(double late, double early, int turn, double board_len) noexcept nogil:
    """The root policy temperature at turn `turn` (the root board's moves so far)."""
    return late + (early - late) * (0.5 ** (turn / board_len))


cdef void dirichlet_alphas_c(const float* prior, int m, double total, bint shaped, double* out) noexcept nogil:
    """Per-move Dirichlet alphas summing to `total`: uniform, or (shaped) half uniform and half in
    proportion to how far log min(0.01, P) stands above its mean over the m moves."""
    cdef int k
    cdef double mean = 0.0, excess = 0.0
    if shaped:
        for k in range(m):
            out[k] = log(min(0.01, <double>prior[k]) + 1e-20)
            mean += out[k] / m
        for k in range(m):
            out[k] = max(0.0, out[k] - mean)
            excess += out[k]
    if not shaped or excess <= 0:
        for k in range(m):
            out[k] = total / m
        return
    for k in range(m):
        out[k] = total * 0.5 * (out[k] / excess + 1.0 / m)


def dirichlet_alphas(prior, double total, bint shaped) -> np.ndarray:
    """The Dirichlet alphas the root noise draws with, for priors over the legal moves."""
    cdef float[::1] p = np.ascontiguousarray(prior, dtype=np.float32)
    out = np.zeros(p.shape[0], np.float64)
    cdef double[::1] o = out
    if p.shape[0] > 0:
        dirichlet_alphas_c(&p[0], <int>p.shape[0], total, shaped, &o[0])
    return out


cdef void noise_priors(float* prior, int m, double temperature, double noise_weight, double alpha_total,
                       bint shaped, uint64_t* rng) noexcept nogil:
    """The m root priors under the policy temperature, then mixed with Dirichlet noise of weight
    noise_weight (none at 0, or when there is no memory for it), drawn from `rng`."""
    cdef int k
    cdef double total = 0.0, g
    cdef double* alpha
    for k in range(m):
        prior[k] = exp(log(max(prior[k], 1e-30)) / temperature)
        total += prior[k]
    for k in range(m):
        prior[k] /= total
    if noise_weight <= 0:
        return
    alpha = <double*>malloc(m * sizeof(double))
    if alpha == NULL:
        return  # no memory for noise: the search goes on without it
    dirichlet_alphas_c(prior, m, alpha_total, shaped, alpha)
    total = 0.0
    for k in range(m):
        alpha[k] = gamma(rng, alpha[k])  # the draw replaces its alpha
        total += alpha[k]
    for k in range(m):
        g = alpha[k] / total if total > 0 else 1.0 / m
        prior[k] = (1.0 - noise_weight) * prior[k] + noise_weight * g
    free(alpha)
