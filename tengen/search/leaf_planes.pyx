# cython: language_level=3
"""The feature planes of a leaf that the search reads and patches, beyond writing them
(tengen.go.features): a leaf's ladder plane kept as bits (the LADDERED_1/2 planes of its children
are its parent's and grandparent's, copied from the tree instead of read again) and the
provably-safe early end read off its pass-alive planes."""
from libc.stdint cimport uint64_t
from libc.string cimport memset

from tengen.go import planes as _planes

if (_planes.NUM_SPATIAL, _planes.NUM_GLOBAL, _planes.OWN_STONE, _planes.OPP_STONE, _planes.LADDERED_0,
        _planes.LADDERED_1, _planes.LADDERED_2, _planes.PASS_ALIVE_OWN, _planes.PASS_ALIVE_OPP) != (
        NUM_SPATIAL, NUM_GLOBAL, P_OWN_STONE, P_OPP_STONE, P_LADDERED_0, P_LADDERED_1, P_LADDERED_2,
        P_PASS_ALIVE_OWN, P_PASS_ALIVE_OPP):
    raise ImportError("tengen.search.leaf_planes disagrees with tengen.go.planes on the feature layout")


cdef void plane_to_bits(const float* plane, int y_size, int x_size, int buf_w, uint64_t* out) noexcept nogil:
    """One bit per board point (move index order) where the plane is set."""
    cdef int x, y, i
    memset(out, 0, ((y_size * x_size + 63) // 64) * sizeof(uint64_t))
    for y in range(y_size):
        for x in range(x_size):
            if plane[y * buf_w + x] != 0.0:
                i = y * x_size + x
                out[i >> 6] |= (<uint64_t>1) << (i & 63)


cdef void bits_to_plane(const uint64_t* bits, int y_size, int x_size, int buf_w, float* plane) noexcept nogil:
    cdef int x, y, i
    for y in range(y_size):
        for x in range(x_size):
            i = y * x_size + x
            plane[y * buf_w + x] = 1.0 if (bits[i >> 6] >> (i & 63)) & 1 else 0.0


cdef bint all_pass_alive(const float* spatial, int plane, int y_size, int x_size, int buf_w,
                         bint katago_scoring) noexcept nogil:
    """From the pass-alive planes: every point is pass-alive for someone (and, under plain area
    scoring, no stone lies in the other player's pass-alive area) - tengen.go.passalive's
    all_pass_alive, the provably-safe early end."""
    cdef int x, y, pos
    cdef bint own, opp
    for y in range(y_size):
        for x in range(x_size):
            pos = y * buf_w + x
            own = spatial[P_PASS_ALIVE_OWN * plane + pos] != 0.0
            opp = spatial[P_PASS_ALIVE_OPP * plane + pos] != 0.0
            if not (own or opp):
                return False
            if not katago_scoring and ((own and spatial[P_OPP_STONE * plane + pos] != 0.0)
                                       or (opp and spatial[P_OWN_STONE * plane + pos] != 0.0)):
                return False
    return True
