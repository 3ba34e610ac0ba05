# cython: language_level=3
"""The root's ending bias (ending_bonus.pyx), for the tree's modules."""
from tengen.go.board cimport Board

cdef bint ending_bonuses(Board board, int pla, const short* locs, int num, const float* own, double points,
                         double* out) noexcept nogil
