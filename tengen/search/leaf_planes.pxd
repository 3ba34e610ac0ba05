# cython: language_level=3
"""The feature planes the search reads and patches (leaf_planes.pyx), for the modules that `cimport` them."""
from libc.stdint cimport uint64_t

from tengen.go.board cimport MAX_AREA

# The feature layout (checked against tengen.go.planes when leaf_planes is imported).
cdef enum:
    NUM_SPATIAL = 18
    NUM_GLOBAL = 10
    P_OWN_STONE = 1
    P_OPP_STONE = 2
    P_LADDERED_0 = 12
    P_LADDERED_1 = 13
    P_LADDERED_2 = 14
    P_PASS_ALIVE_OWN = 16
    P_PASS_ALIVE_OPP = 17
    MAX_WORDS = (MAX_AREA + 63) // 64  # words of one board's bits


cdef void plane_to_bits(const float* plane, int y_size, int x_size, int buf_w, uint64_t* out) noexcept nogil
cdef void bits_to_plane(const uint64_t* bits, int y_size, int x_size, int buf_w, float* plane) noexcept nogil
cdef bint all_pass_alive(const float* spatial, int plane, int y_size, int x_size, int buf_w,
                         bint katago_scoring) noexcept nogil
