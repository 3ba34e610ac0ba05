# cython: language_level=3
"""The search's random numbers: xoshiro256** (state: 4 words, seeded by `seed_state`) and the SplitMix64
finalizer `mix`, which also hashes the search's keys.

Header only: every function is inline, so each module that cimports them compiles its own copy
(no call across modules in the search's loops). Where one expression draws twice, the draws are
named in order, so the stream does not depend on the C compiler's order of evaluation."""
from libc.math cimport M_PI, cos, exp, log, sqrt
from libc.stdint cimport uint64_t


cdef inline uint64_t rotl(uint64_t x, int k) noexcept nogil:
    return (x << k) | (x >> (64 - k))


cdef inline uint64_t next_u64(uint64_t* s) noexcept nogil:
    """xoshiro256**."""
    cdef uint64_t result = rotl(s[1] * 5, 7) * 9
    cdef uint64_t t = s[1] << 17
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = rotl(s[3], 45)
    return result


cdef inline double uniform(uint64_t* s) noexcept nogil:
    """Uniform in (0, 1)."""
    return ((next_u64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0)


cdef inline double normal(uint64_t* s) noexcept nogil:
    """Standard normal (Box-Muller, one of the pair)."""
    cdef double radius = sqrt(-2.0 * log(uniform(s)))
    return radius * cos(2.0 * M_PI * uniform(s))


cdef inline double gamma(uint64_t* s, double alpha) noexcept nogil:
    """Gamma(alpha, 1) by Marsaglia and Tsang; alpha < 1 through Gamma(alpha + 1) U^(1/alpha)."""
    cdef double d, c, x, v, u
    if alpha < 1.0:
        d = gamma(s, alpha + 1.0)
        return d * exp(log(uniform(s)) / alpha)
    d = alpha - 1.0 / 3.0
    c = 1.0 / sqrt(9.0 * d)
    while True:
        x = normal(s)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = uniform(s)
        if u < 1.0 - 0.0331 * x * x * x * x or log(u) < 0.5 * x * x + d * (1.0 - v + log(v)):
            return d * v


cdef inline uint64_t mix(uint64_t z) noexcept nogil:
    """SplitMix64's finalizer: a 64-bit hash of z."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline void seed_state(uint64_t* s, uint64_t value) noexcept nogil:
    """The 4-word state from one 64-bit seed (SplitMix64's sequence from it)."""
    cdef int i
    for i in range(4):
        value += 0x9E3779B97F4A7C15ULL
        s[i] = mix(value)
