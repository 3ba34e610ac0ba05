# cython: language_level=3
"""C-level feature encoder for Cython callers (search, selfplay); see features.pyx."""
from tengen.go.board cimport Board

cdef void encode_c(Board board, Board prev1, Board prev2, float* spatial, int buf_h, int buf_w,
                   float* global_) noexcept nogil
# All features of `board` into spatial ([NUM_SPATIAL, buf_h, buf_w], C order, buf_h >= y_size,
# buf_w >= x_size, overwritten whole) and global_ ([NUM_GLOBAL]). prev1/prev2: the positions 1
# and 2 turns ago, same size (pass `board` itself when unknown; passing the same object again
# reuses the plane already computed). No checks, no allocation. Uses the boards' scratch marks
# (liberty and pass-alive floods), so one board must not be encoded by two threads at once.
