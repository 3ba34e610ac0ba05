# cython: language_level=3
"""C-level interface of the rules engine, for Cython modules that `cimport` it.

Geometry: a padded 1-D array with one shared wall column. With `stride = x_size + 1`, the point
(x, y) (x = column from the left, y = row from the top, 0-based) has location
`loc = (y + 1) * stride + (x + 1)`. Rows 0 and y_size + 1 and column 0 are walls (column 0 of
row y + 1 is also the wall right of row y). Neighbours of `loc` are `loc + adj[i]` for i < 4
(up, left, right, down) and diagonals `loc + diag[i]`; every point's neighbours and diagonals
stay inside the array. Python-level *move indices* are `y * x_size + x`, pass = x_size * y_size.

Chains: every stone's `chain_head[loc]` is its chain's head location; `next_stone[loc]` links
the chain's stones in a circular list. Liberty counts (distinct empty points) and sizes are
valid at the head only. Iterate a chain's stones with:
    cur = head
    while True:
        ...  # use cur
        cur = board.next_stone[cur]
        if cur == head: break
and its liberties with `chain_liberty_locs`.

Every cdef method is nogil and allocation-free except where noted, so search and features can
run in nogil loops. Mutating methods keep every invariant above and the Zobrist hash in step.
"""
cimport cython
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memset

cdef enum:
    MAX_SIZE = 19            # largest side
    MIN_SIZE = 7             # smallest side
    MAX_ARR = 441            # >= (MAX_SIZE + 2) * (MAX_SIZE + 1) + 1, array size for locations
    MAX_AREA = MAX_SIZE * MAX_SIZE
    PASS_LOC = 0             # the pass move as a location (loc 0 is a wall, never a point)
    NULL_LOC = -1            # "no location" (e.g. no ko point)

# Colors (also exported to Python as EMPTY, BLACK, WHITE). Opponent of c is 3 - c.
cdef enum:
    C_EMPTY = 0
    C_BLACK = 1
    C_WHITE = 2
    C_WALL = 3

# Ko rules (Rules.ko_code).
cdef enum:
    KO_SIMPLE = 0
    KO_POSITIONAL = 1
    KO_SITUATIONAL = 2

# Result codes of illegal_reason_loc / play_loc; Python sees the strings in rules.ILLEGAL_REASONS.
cdef enum:
    LEGAL = 0
    ILLEGAL_OFF_BOARD = 1
    ILLEGAL_OCCUPIED = 2
    ILLEGAL_SUICIDE = 3
    ILLEGAL_KO = 4
    ILLEGAL_SUPERKO = 5


# final: method calls are direct C calls the compiler can inline (no vtable).
@cython.final
cdef class Board:
    # --- geometry (fixed at construction) ---
    cdef readonly int x_size          # columns
    cdef readonly int y_size          # rows
    cdef readonly int stride          # x_size + 1
    cdef readonly int area            # x_size * y_size
    cdef int arr_size                 # (y_size + 2) * stride + 1: locations in use
    cdef int adj[4]                   # neighbour offsets: -stride, -1, +1, +stride
    cdef int diag[4]                  # diagonal offsets: -stride-1, -stride+1, stride-1, stride+1

    # --- rules ---
    cdef int ko_rule                  # KO_SIMPLE / KO_POSITIONAL / KO_SITUATIONAL
    cdef bint suicide_allowed         # multi-stone suicide legal (single-stone never is)
    cdef readonly double komi         # points added to White's score
    cdef readonly object rules        # the tengen.go.rules.Rules this board plays by

    # --- position ---
    cdef unsigned char color[MAX_ARR]  # C_EMPTY / C_BLACK / C_WHITE / C_WALL per location
    cdef short chain_head[MAX_ARR]     # head location of the stone's chain (stones only)
    cdef short next_stone[MAX_ARR]     # next stone of the same chain (circular list)
    cdef short libs[MAX_ARR]           # at a head: number of distinct liberties of the chain
    cdef short chain_size[MAX_ARR]     # at a head: number of stones of the chain
    cdef short empty_list[MAX_AREA]    # the empty points, in no order (num_empty of them)
    cdef short empty_index[MAX_ARR]    # position of an empty point in empty_list
    cdef int num_empty
    cdef int num_stones[3]             # stones on the board per color (index C_BLACK/C_WHITE)
    cdef int next_color                # player to move (C_BLACK / C_WHITE)
    cdef int ko_loc                    # point next_color may not take back by simple ko, or NULL_LOC
    cdef uint64_t pos_hash             # Zobrist hash of the stones only (positional)
    cdef int passes                    # consecutive passes at the end of the history

    # --- history ---
    cdef int num_moves                 # moves played (passes included; setup stones excluded)
    cdef int hist_cap
    cdef short* hist_loc               # location of each move (PASS_LOC for a pass)
    cdef unsigned char* hist_color     # color of each move
    # Superko: open-addressing set of seen position keys (key = hash | 1; 0 = empty slot).
    # Positional superko keys are pos_hash; situational ones also mix in the player to move.
    cdef uint64_t* seen
    cdef int seen_cap                  # power of two; at most half full
    cdef int seen_count
    cdef int max_seen_stones           # most stones in any position of the set: a position with
                                       # more cannot repeat, so its lookup is skipped

    # --- scratch (not copied) ---
    cdef uint32_t mark[MAX_ARR]        # visit marks for floods; a point is marked iff == mark_gen
    cdef uint32_t mark_gen

    # --- coordinates ---
    cdef inline int loc_of(self, int move) noexcept nogil:
        """Location of a move index (PASS_LOC for the pass index); no range check."""
        if move == self.area:
            return PASS_LOC
        return (move // self.x_size + 1) * self.stride + move % self.x_size + 1

    cdef inline int move_of(self, int loc) noexcept nogil:
        """Move index of a location (the pass index for PASS_LOC)."""
        if loc == PASS_LOC:
            return self.area
        return (loc // self.stride - 1) * self.x_size + loc % self.stride - 1

    cdef inline uint32_t new_mark(self) noexcept nogil:
        """Start a new flood: afterwards no point is marked."""
        self.mark_gen += 1
        if self.mark_gen == 0:  # wrapped around: clear so stale marks cannot match
            memset(self.mark, 0, sizeof(self.mark))
            self.mark_gen = 1
        return self.mark_gen

    # --- rules engine ---
    cdef int illegal_reason_loc(self, int loc) noexcept nogil
    # LEGAL or the ILLEGAL_* code for next_color playing at loc (PASS_LOC is always LEGAL).
    cdef bint is_legal_loc(self, int loc) noexcept nogil
    cdef int play_loc(self, int loc) noexcept nogil
    # Play loc (or PASS_LOC) for next_color if legal: returns LEGAL and updates everything, or
    # the ILLEGAL_* code and changes nothing. May realloc history/superko storage; returns -1
    # only if memory runs out (board unchanged).
    cdef bint would_capture(self, int loc, int pla) noexcept nogil
    # Whether pla playing at empty loc captures at least one opponent chain.
    cdef uint64_t hash_after(self, int loc, int pla) noexcept nogil
    # Positional hash of the position after pla plays at empty loc (captures and multi-stone
    # suicide applied); loc must not be single-stone suicide.
    cdef int chain_liberty_locs(self, int loc, short* out) noexcept nogil
    # Write the distinct liberties of the chain at stone loc into out (room for MAX_AREA);
    # returns their number. Uses the mark array.
    cdef bint is_simple_eye(self, int loc, int pla) noexcept nogil
    # Empty loc whose neighbours are all pla's stones or walls, with too few opponent
    # diagonals to make it false (two, or one on the edge): an eye pla should not fill.
    cdef double area_score_c(self) noexcept nogil
    # Tromp-Taylor: black area minus white area minus komi (all stones alive).
    cdef void clear(self) noexcept nogil
    # Empty board, Black to move, empty history (keeps size, rules and komi).
    cdef int copy_into(self, Board dst) except -1
    # Make dst (same sizes required) an independent copy of self without allocating a Board.

    # --- internals (used by board.pyx only) ---
    cdef uint64_t _key(self, uint64_t h, int to_move) noexcept nogil
    cdef void _reset_seen(self) noexcept nogil
    cdef bint _seen_contains(self, uint64_t key) noexcept nogil
    cdef void _seen_insert(self, uint64_t key) noexcept nogil
    cdef int _reserve(self) noexcept nogil
    cdef void _add_empty(self, int loc) noexcept nogil
    cdef void _remove_empty(self, int loc) noexcept nogil
    cdef int _remove_chain(self, int head) noexcept nogil
    cdef int _count_libs(self, int head) noexcept nogil
    cdef int _place(self, int loc, int pla, bint capture) noexcept nogil
    cdef int _loc_arg(self, move) except? -2
