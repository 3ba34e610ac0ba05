# cython: language_level=3
"""The score utility's expectation, for the search's modules that `cimport` it (score_utility.pyx)."""

cdef double expected_atan_c(double m, double s) noexcept nogil
