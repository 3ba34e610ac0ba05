# cython: language_level=3
"""Random symmetry (`random_symmetry`, the AlphaGo Zero notes): the board's symmetries as the search
applies them to its leaves, and the symmetric position keys of the NN cache.

Every leaf's features are written under one of the board's symmetries drawn at random (8 on a
square board, the 4 mirrorings on a rectangle) and its policy is read back through the same
symmetry, so the net's own asymmetries average out over the search. The cache key is then the
smallest of the position's keys under all those symmetries (`symmetric_key`), and its entry is
stored in that canonical orientation: a position reached as a rotation or mirror image of a cached
one (the same stones, ko point and last five moves, each mapped) is a hit, its policy and ladder
plane mapped back. Every feature plane is equivariant (the on-board mask too: a smaller board stays
in the buffer's corner), so that is sound, up to ladder reads cut off by their budget (their escape
order follows the orientation) and superko bans from history older than the key's five moves,
which the plain key ignores as well.

A symmetry s (0..7) transposes if s & 4 (square boards only), then mirrors x if s & 1, then
mirrors y if s & 2 (tengen.go.symmetry numbers its symmetries otherwise).
"""
from libc.stdint cimport uint64_t
from libc.string cimport memset

from tengen.go.board cimport Board, C_BLACK, C_WHITE, MAX_AREA, PASS_LOC
from tengen.search.rng cimport mix

cdef uint64_t SYM_ZOBRIST[2][MAX_AREA + 3]  # [black/white][move index]; + pass and "none" codes


cdef void _fill_sym_zobrist() noexcept nogil:
    cdef int c, i
    for c in range(2):
        for i in range(MAX_AREA + 3):
            SYM_ZOBRIST[c][i] = mix(0xC0FFEE + <uint64_t>(c * (MAX_AREA + 3) + i) * 0x9E3779B97F4A7C15ULL)


_fill_sym_zobrist()


def symmetry_index(int s, int index, int x_size, int y_size) -> int:
    """Where symmetry s (0..7, as the search applies it) takes a move index (pass: area)."""
    if not (0 <= s < (8 if x_size == y_size else 4)) or not (0 <= index <= x_size * y_size):
        raise ValueError(f"no symmetry {s} of move {index} on {x_size}x{y_size}")
    return index if index == x_size * y_size else sym_index(s, index, x_size, y_size)


cdef void transform_planes(float* spatial, int planes, int buf_h, int buf_w, int y_size, int x_size,
                           int s) noexcept nogil:
    """Each plane's board region rewritten under symmetry s: new[T(p)] = old[p]."""
    cdef float tmp[MAX_AREA]
    cdef float* pl
    cdef int c, i, j
    for c in range(planes):
        pl = spatial + c * buf_h * buf_w
        for i in range(x_size * y_size):
            tmp[i] = pl[(i // x_size) * buf_w + i % x_size]
        for i in range(x_size * y_size):
            j = sym_index(s, i, x_size, y_size)
            pl[(j // x_size) * buf_w + j % x_size] = tmp[i]


cdef void map_bits(const uint64_t* src, uint64_t* dst, int x_size, int y_size, int s, bint scatter) noexcept nogil:
    """Board bits under symmetry s: scatter dst[T(p)] = src[p], or gather dst[p] = src[T(p)]."""
    cdef int i, j, area = x_size * y_size
    memset(dst, 0, ((area + 63) // 64) * sizeof(uint64_t))
    for i in range(area):
        j = sym_index(s, i, x_size, y_size)
        if scatter and (src[i >> 6] >> (i & 63)) & 1:
            dst[j >> 6] |= (<uint64_t>1) << (j & 63)
        elif not scatter and (src[j >> 6] >> (j & 63)) & 1:
            dst[i >> 6] |= (<uint64_t>1) << (i & 63)


cdef uint64_t symmetric_key(Board board, int s, uint64_t rules_key) noexcept nogil:
    """The NN cache key of `board`'s position under symmetry s: every point, the ko point and the
    last five moves mapped by s (rules_key: the rules, komi and board size, hashed)."""
    cdef uint64_t h = 0
    cdef int i, m, c, x_size = board.x_size, stride = board.x_size + 1
    for i in range(board.area):
        c = board.color[(i // x_size + 1) * stride + i % x_size + 1]
        if c == C_BLACK or c == C_WHITE:
            h ^= SYM_ZOBRIST[c - C_BLACK][sym_index(s, i, x_size, board.y_size)]
    h = mix(h ^ rules_key)
    h = mix(h ^ (<uint64_t>board.next_color << 40) ^ (<uint64_t>_sym_code(board, board.ko_loc, s) << 44))
    for i in range(min(5, board.num_moves)):
        m = board.num_moves - 1 - i
        h = mix(h ^ (<uint64_t>_sym_code(board, board.hist_loc[m], s) << 8)
                ^ (<uint64_t>board.hist_color[m] << 4) ^ <uint64_t>(i + 1))
    return h


cdef inline int _sym_code(Board board, int loc, int s) noexcept nogil:
    """A location for a key under symmetry s: its mapped move index, area for pass, area + 1 for none."""
    if loc == PASS_LOC:
        return board.area
    if loc < 0:
        return board.area + 1
    return sym_index(s, board.move_of(loc), board.x_size, board.y_size)
