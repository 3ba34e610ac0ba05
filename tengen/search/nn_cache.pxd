# cython: language_level=3
"""C-level layout of the NN cache (nn_cache.pyx), for the search modules that read its entries."""
from libc.stdint cimport uint64_t

cdef enum:
    NUM_VALS = 7  # per entry: win, loss, no result, score mean, stdev, value and score error


cdef class NNCache:
    cdef readonly int capacity
    cdef readonly int stride        # policy and ownership entries per position: max_area + 1
    cdef readonly int words         # ladder-bit words per position
    cdef uint64_t* keys
    cdef float* policy
    cdef float* vals
    cdef uint64_t* bits
    cdef unsigned char* all_alive
    cdef int* lru_prev
    cdef int* lru_next
    cdef int lru_head
    cdef int lru_tail
    cdef readonly int count
    cdef int* table
    cdef int table_mask
    cdef readonly long hits
    cdef readonly long misses
    cdef float* own                # ownership per entry (mover's view), NULL unless kept; NaN first: none

    cdef void _unlink(self, int e) noexcept nogil
    cdef void _push_front(self, int e) noexcept nogil
    cdef int lookup(self, uint64_t key) noexcept nogil
    cdef void _table_remove(self, int e) noexcept nogil
    cdef int insert(self, uint64_t key) noexcept nogil
