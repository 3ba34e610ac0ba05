# cython: language_level=3
"""The subtree value bias correction's buckets (subtree_bias.pyx), for the tree's modules."""
from libc.stdint cimport uint64_t

from tengen.go.board cimport Board
from tengen.search.tree cimport Node


# The buckets of one tree: open addressing keyed by the bucket (0 marks a free slot), at most half
# full; per slot the sums over its nodes of ObsError * weight and of weight. All zero: no table yet
# (mask -1 then).
cdef struct BiasBuckets:
    uint64_t* keys
    double* err_w
    double* weight
    int mask                  # slots - 1; -1 before the first bucket
    int count


cdef void buckets_init(BiasBuckets* b) noexcept nogil
cdef void buckets_free(BiasBuckets* b) noexcept nogil
cdef void buckets_clear(BiasBuckets* b) noexcept nogil
cdef uint64_t bias_bucket_key(Board board) noexcept nogil
cdef double bias_node_utility(BiasBuckets* b, Node* n, double factor, double u) noexcept nogil
cdef void update_subtree_bias(BiasBuckets* b, Node* nodes, int ni, double factor, double exponent) noexcept nogil
cdef int rebuild_buckets(BiasBuckets* b, Node* nodes, int num_nodes, int root) noexcept nogil
