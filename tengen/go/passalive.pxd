# cython: language_level=3
"""C-level pass-alive analysis (Benson's algorithm) and final scoring, for Cython modules that
`cimport` it (the features build their pass-alive planes from `pass_alive_area`).

Every buffer is indexed by board location (board.pxd's padded layout) and must have room for
`board.arr_size` entries (MAX_ARR always suffices); wall locations are written as 0.
"""
from tengen.go.board cimport Board

cdef void pass_alive_for(Board board, int pla, signed char* out) noexcept nogil
# Set out[loc] = pla at pla's pass-alive stones and pla's pass-alive territory (dead opponent
# stones inside it included); every other entry is left as it was. Honours board.suicide_allowed.

cdef void pass_alive_area(Board board, signed char* out) noexcept nogil
# out[loc] = C_BLACK / C_WHITE where pass_alive_for marks that color, else 0.

cdef int ownership_loc(Board board, bint katago_scoring, signed char* out) noexcept nogil
# out[loc] = +1 Black's point, -1 White's, 0 neither; returns the sum over the board.
# Tromp-Taylor area ownership (every stone alive; an empty region counts for a color when it
# reaches only that color); with katago_scoring, pass-alive stones and territory (dead opponent
# stones inside included) belong to their owner first.

cdef double final_score_c(Board board, bint katago_scoring) noexcept nogil
# Black's area minus White's area minus komi, by ownership_loc.

cdef bint all_pass_alive_c(Board board, bint katago_scoring) noexcept nogil
# The provably-safe early end: every point is a pass-alive stone or pass-alive territory of
# some player; with plain area scoring additionally no stone lies in the opponent's territory
# (there, dead stones would still count for their color).
