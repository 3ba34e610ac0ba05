# cython: language_level=3
"""The root's policy temperature and Dirichlet noise (root_noise.pyx), for the tree's modules."""
from libc.stdint cimport uint64_t

cdef double root_temperature(double late, double early, int turn, double board_len) noexcept nogil
cdef void dirichlet_alphas_c(const float* prior, int m, double total, bint shaped, double* out) noexcept nogil
cdef void noise_priors(float* prior, int m, double temperature, double noise_weight, double alpha_total,
                       bint shaped, uint64_t* rng) noexcept nogil
