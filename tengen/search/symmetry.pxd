# cython: language_level=3
"""The board's symmetries as the search applies them (symmetry.pyx), for the modules that `cimport` them."""
from libc.stdint cimport uint64_t

from tengen.go.board cimport Board


cdef inline int sym_index(int s, int i, int x_size, int y_size) noexcept nogil:
    """Move index i (y * x_size + x) under symmetry s: transpose if s & 4 (square boards only),
    then mirror x if s & 1, then mirror y if s & 2."""
    cdef int x = i % x_size, y = i // x_size, t
    if s & 4:
        t = x
        x = y
        y = t
    if s & 1:
        x = x_size - 1 - x
    if s & 2:
        y = y_size - 1 - y
    return y * x_size + x


cdef void transform_planes(float* spatial, int planes, int buf_h, int buf_w, int y_size, int x_size,
                           int s) noexcept nogil
cdef void map_bits(const uint64_t* src, uint64_t* dst, int x_size, int y_size, int s, bint scatter) noexcept nogil
cdef uint64_t symmetric_key(Board board, int s, uint64_t rules_key) noexcept nogil
