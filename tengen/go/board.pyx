# cython: language_level=3
"""The Go rules engine: one compiled board for every size from 7x7 to 19x19 (rectangles too).

Chains are kept incrementally (circular stone lists, exact liberty counts at the head), captures
and multi-stone suicide are applied in place, and simple ko plus positional or situational
superko are enforced through 64-bit Zobrist hashes kept in an open-addressing set. See board.pxd
for the C-level layout that other Cython modules use; this file also holds the Python API.

Single-stone suicide is never legal, whatever the rules: it would leave the board unchanged, like
a pass (KataGo's convention). Play may continue after two passes; `game_over` reports them.
"""
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

import numpy as np

from tengen.go.rules import ILLEGAL_REASONS, KATAGO, IllegalMoveError, Rules, parse_rules

EMPTY = C_EMPTY
BLACK = C_BLACK
WHITE = C_WHITE

# Zobrist keys per color and location; fixed seed so hashes are reproducible across processes.
cdef uint64_t ZOBRIST[3][MAX_ARR]
cdef uint64_t ZOBRIST_WHITE_TO_MOVE


cdef uint64_t _splitmix64(uint64_t* state) noexcept nogil:
    state[0] += 0x9E3779B97F4A7C15ULL
    cdef uint64_t z = state[0]
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef void _init_zobrist() noexcept nogil:
    cdef uint64_t state = 0x7E6E6E5EED
    cdef int c, i
    for c in range(3):
        for i in range(MAX_ARR):
            ZOBRIST[c][i] = _splitmix64(&state)
    global ZOBRIST_WHITE_TO_MOVE
    ZOBRIST_WHITE_TO_MOVE = _splitmix64(&state)


_init_zobrist()

cdef int MIN_SEEN_CAP = 256
cdef int MIN_HIST_CAP = 256


cdef class Board:
    """A Go position with its history, under one rule set.

    Moves are move indices `y * x_size + x` (x column from the left, y row from the top);
    `pass_move` (= x_size * y_size) is the pass. `play` plays for `to_move`.
    """

    def __cinit__(self, int x_size, int y_size=0, rules=KATAGO, komi=7.5):
        if y_size == 0:
            y_size = x_size
        if not (MIN_SIZE <= x_size <= MAX_SIZE and MIN_SIZE <= y_size <= MAX_SIZE):
            raise ValueError(
                f"board size {x_size}x{y_size} out of range: each side must be {MIN_SIZE}..{MAX_SIZE}"
            )
        if isinstance(rules, str):
            rules = parse_rules(rules)
        if not isinstance(rules, Rules):
            raise ValueError(f"rules must be a Rules or a rules string, got {rules!r}")
        komi = float(komi)
        if not (komi * 2).is_integer() or abs(komi) > x_size * y_size:
            raise ValueError(f"komi must be a multiple of 0.5 within +-{x_size * y_size}, got {komi}")
        self.x_size = x_size
        self.y_size = y_size
        self.stride = x_size + 1
        self.area = x_size * y_size
        self.arr_size = (y_size + 2) * self.stride + 1
        self.adj[0] = -self.stride
        self.adj[1] = -1
        self.adj[2] = 1
        self.adj[3] = self.stride
        self.diag[0] = -self.stride - 1
        self.diag[1] = -self.stride + 1
        self.diag[2] = self.stride - 1
        self.diag[3] = self.stride + 1
        self.rules = rules
        self.ko_rule = rules.ko_code
        self.suicide_allowed = rules.suicide
        self.komi = komi
        self.hist_cap = MIN_HIST_CAP
        self.hist_loc = <short*>malloc(self.hist_cap * sizeof(short))
        self.hist_color = <unsigned char*>malloc(self.hist_cap * sizeof(unsigned char))
        self.seen_cap = MIN_SEEN_CAP
        self.seen = <uint64_t*>malloc(self.seen_cap * sizeof(uint64_t))
        if self.hist_loc == NULL or self.hist_color == NULL or self.seen == NULL:
            raise MemoryError()
        self.clear()

    def __dealloc__(self):
        free(self.hist_loc)
        free(self.hist_color)
        free(self.seen)

    # ------------------------------------------------------------------ C level: state upkeep

    cdef void clear(self) noexcept nogil:
        cdef int x, y, loc
        memset(self.color, C_WALL, sizeof(self.color))
        memset(self.chain_head, 0, sizeof(self.chain_head))
        memset(self.next_stone, 0, sizeof(self.next_stone))
        memset(self.libs, 0, sizeof(self.libs))
        memset(self.chain_size, 0, sizeof(self.chain_size))
        self.num_empty = 0
        for y in range(self.y_size):
            for x in range(self.x_size):
                loc = (y + 1) * self.stride + x + 1
                self.color[loc] = C_EMPTY
                self.empty_index[loc] = self.num_empty
                self.empty_list[self.num_empty] = loc
                self.num_empty += 1
        self.num_stones[0] = 0
        self.num_stones[1] = 0
        self.num_stones[2] = 0
        self.next_color = C_BLACK
        self.ko_loc = NULL_LOC
        self.pos_hash = 0
        self.passes = 0
        self.num_moves = 0
        self._reset_seen()

    cdef uint64_t _key(self, uint64_t h, int to_move) noexcept nogil:
        # Situational superko tells positions apart by the player to move; | 1 keeps 0 free.
        if self.ko_rule == KO_SITUATIONAL and to_move == C_WHITE:
            h ^= ZOBRIST_WHITE_TO_MOVE
        return h | 1

    cdef void _reset_seen(self) noexcept nogil:
        memset(self.seen, 0, self.seen_cap * sizeof(uint64_t))
        self.seen_count = 0
        self.max_seen_stones = 0
        if self.ko_rule != KO_SIMPLE:
            self._seen_insert(self._key(self.pos_hash, self.next_color))

    cdef bint _seen_contains(self, uint64_t key) noexcept nogil:
        cdef int mask = self.seen_cap - 1
        cdef int i = <int>(key >> 20) & mask
        while self.seen[i] != 0:
            if self.seen[i] == key:
                return True
            i = (i + 1) & mask
        return False

    cdef void _seen_insert(self, uint64_t key) noexcept nogil:
        # Callers make room first (_reserve), so the table is never more than half full.
        cdef int mask = self.seen_cap - 1
        cdef int i = <int>(key >> 20) & mask
        while self.seen[i] != 0:
            if self.seen[i] == key:
                return
            i = (i + 1) & mask
        self.seen[i] = key
        self.seen_count += 1
        if self.num_stones[C_BLACK] + self.num_stones[C_WHITE] > self.max_seen_stones:
            self.max_seen_stones = self.num_stones[C_BLACK] + self.num_stones[C_WHITE]

    cdef int _reserve(self) noexcept nogil:
        """Room for one more move in the history and one more key in the superko set."""
        cdef int new_cap, i, old_cap
        cdef short* new_loc
        cdef unsigned char* new_color
        cdef uint64_t* old
        if self.num_moves >= self.hist_cap:
            new_cap = self.hist_cap * 2
            new_loc = <short*>realloc(self.hist_loc, new_cap * sizeof(short))
            if new_loc == NULL:
                return -1
            self.hist_loc = new_loc
            new_color = <unsigned char*>realloc(self.hist_color, new_cap * sizeof(unsigned char))
            if new_color == NULL:
                return -1
            self.hist_color = new_color
            self.hist_cap = new_cap
        if (self.seen_count + 1) * 2 > self.seen_cap:
            old = self.seen
            old_cap = self.seen_cap
            self.seen = <uint64_t*>malloc(old_cap * 2 * sizeof(uint64_t))
            if self.seen == NULL:
                self.seen = old
                return -1
            self.seen_cap = old_cap * 2
            memset(self.seen, 0, self.seen_cap * sizeof(uint64_t))
            self.seen_count = 0
            for i in range(old_cap):
                if old[i] != 0:
                    self._seen_insert(old[i])
            free(old)
        return 0

    cdef void _add_empty(self, int loc) noexcept nogil:
        self.empty_index[loc] = self.num_empty
        self.empty_list[self.num_empty] = loc
        self.num_empty += 1

    cdef void _remove_empty(self, int loc) noexcept nogil:
        cdef int i = self.empty_index[loc]
        cdef int last = self.empty_list[self.num_empty - 1]
        self.empty_list[i] = last
        self.empty_index[last] = i
        self.num_empty -= 1

    cdef int _remove_chain(self, int head) noexcept nogil:
        """Take the chain off the board; adjacent chains of the other color gain liberties.
        Returns the number of stones removed."""
        cdef int cc = self.color[head]
        cdef int other = 3 - cc
        cdef int cur = head, n, h, i, j, nh
        cdef int heads[4]
        cdef int count = 0
        while True:
            self.color[cur] = C_EMPTY
            self._add_empty(cur)
            self.pos_hash ^= ZOBRIST[cc][cur]
            count += 1
            nh = 0
            for i in range(4):
                n = cur + self.adj[i]
                if self.color[n] == other:
                    h = self.chain_head[n]
                    for j in range(nh):
                        if heads[j] == h:
                            break
                    else:
                        heads[nh] = h
                        nh += 1
                        self.libs[h] += 1
            cur = self.next_stone[cur]
            if cur == head:
                break
        self.num_stones[cc] -= count
        return count

    cdef int _count_libs(self, int head) noexcept nogil:
        cdef uint32_t m = self.new_mark()
        cdef int cur = head, n, i, count = 0
        while True:
            for i in range(4):
                n = cur + self.adj[i]
                if self.color[n] == C_EMPTY and self.mark[n] != m:
                    self.mark[n] = m
                    count += 1
            cur = self.next_stone[cur]
            if cur == head:
                break
        return count

    cdef int _place(self, int loc, int pla, bint capture) noexcept nogil:
        """Put a pla stone on empty loc, merge chains, and (if capture) remove opponent chains
        left without liberties and then pla's own chain if it has none (suicide).
        Returns the head of loc's chain, or -1 after a suicide; self.ko_loc is updated."""
        cdef int opp = 3 - pla
        cdef int heads[4]
        cdef int nh = 0, i, j, n, m, h, c, big, g, cur, tmp
        cdef int captured = 0, captured_loc = NULL_LOC, own = 0
        cdef bint adjacent
        self.color[loc] = pla
        self._remove_empty(loc)
        self.pos_hash ^= ZOBRIST[pla][loc]
        self.num_stones[pla] += 1
        self.chain_head[loc] = loc
        self.next_stone[loc] = loc
        self.chain_size[loc] = 1
        self.libs[loc] = 0
        for i in range(4):
            n = loc + self.adj[i]
            c = self.color[n]
            if c == C_EMPTY:
                self.libs[loc] += 1
            elif c == pla or c == opp:
                h = self.chain_head[n]
                for j in range(nh):
                    if heads[j] == h:
                        break
                else:
                    heads[nh] = h
                    nh += 1
                    self.libs[h] -= 1  # loc was one of its liberties
        if capture:
            for i in range(nh):
                h = heads[i]
                if self.color[h] == opp and self.libs[h] == 0:
                    if self.chain_size[h] == 1:
                        captured_loc = h
                    captured += self._remove_chain(h)
        # Merge pla's adjacent chains (compacting heads to the own ones).
        for i in range(nh):
            if self.color[heads[i]] == pla:
                heads[own] = heads[i]
                own += 1
        if own == 0:
            h = loc
        elif own == 1:
            h = heads[0]
            # loc's liberties that are not already liberties of h.
            for i in range(4):
                n = loc + self.adj[i]
                if self.color[n] != C_EMPTY:
                    continue
                adjacent = False
                for j in range(4):
                    m = n + self.adj[j]
                    if m != loc and self.color[m] == pla and self.chain_head[m] == h:
                        adjacent = True
                        break
                if not adjacent:
                    self.libs[h] += 1
            self.chain_head[loc] = h
            self.next_stone[loc] = self.next_stone[h]
            self.next_stone[h] = loc
            self.chain_size[h] += 1
        else:
            big = heads[0]
            for i in range(1, own):
                if self.chain_size[heads[i]] > self.chain_size[big]:
                    big = heads[i]
            h = big
            for i in range(own):
                g = heads[i]
                if g == big:
                    continue
                cur = g
                while True:
                    self.chain_head[cur] = big
                    cur = self.next_stone[cur]
                    if cur == g:
                        break
                self.chain_size[big] += self.chain_size[g]
                tmp = self.next_stone[big]
                self.next_stone[big] = self.next_stone[g]
                self.next_stone[g] = tmp
            self.chain_head[loc] = big
            self.next_stone[loc] = self.next_stone[big]
            self.next_stone[big] = loc
            self.chain_size[big] += 1
            self.libs[big] = self._count_libs(big)
        self.ko_loc = NULL_LOC
        if capture and self.libs[h] == 0:
            self._remove_chain(h)
            return -1
        if captured == 1 and self.chain_size[h] == 1 and self.libs[h] == 1:
            self.ko_loc = captured_loc
        return h

    # ------------------------------------------------------------------ C level: rules

    cdef bint would_capture(self, int loc, int pla) noexcept nogil:
        cdef int i, n
        cdef int opp = 3 - pla
        for i in range(4):
            n = loc + self.adj[i]
            if self.color[n] == opp and self.libs[self.chain_head[n]] == 1:
                return True
        return False

    cdef uint64_t hash_after(self, int loc, int pla) noexcept nogil:
        cdef int opp = 3 - pla
        cdef uint64_t h = self.pos_hash ^ ZOBRIST[pla][loc]
        cdef int heads[4]
        cdef int nh = 0, i, j, n, c, head, cur
        cdef bint captured = False, has_lib = False
        for i in range(4):
            n = loc + self.adj[i]
            c = self.color[n]
            if c == C_EMPTY:
                has_lib = True
            elif c == opp and self.libs[self.chain_head[n]] == 1:
                head = self.chain_head[n]
                for j in range(nh):
                    if heads[j] == head:
                        break
                else:
                    heads[nh] = head
                    nh += 1
                    captured = True
                    cur = head
                    while True:
                        h ^= ZOBRIST[opp][cur]
                        cur = self.next_stone[cur]
                        if cur == head:
                            break
            elif c == pla and self.libs[self.chain_head[n]] > 1:
                has_lib = True
        if captured or has_lib:
            return h
        # Multi-stone suicide: the new stone and every adjacent own chain leave the board.
        h ^= ZOBRIST[pla][loc]
        nh = 0
        for i in range(4):
            n = loc + self.adj[i]
            if self.color[n] == pla:
                head = self.chain_head[n]
                for j in range(nh):
                    if heads[j] == head:
                        break
                else:
                    heads[nh] = head
                    nh += 1
                    cur = head
                    while True:
                        h ^= ZOBRIST[pla][cur]
                        cur = self.next_stone[cur]
                        if cur == head:
                            break
        return h

    cdef int illegal_reason_loc(self, int loc) noexcept nogil:
        cdef int pla = self.next_color
        cdef int opp = 3 - pla
        cdef int i, n, c
        cdef bint has_lib = False, own_any = False, captures = False
        if loc == PASS_LOC:
            return LEGAL
        if loc <= 0 or loc >= self.arr_size or self.color[loc] == C_WALL:
            return ILLEGAL_OFF_BOARD
        if self.color[loc] != C_EMPTY:
            return ILLEGAL_OCCUPIED
        if loc == self.ko_loc:
            return ILLEGAL_KO
        for i in range(4):
            n = loc + self.adj[i]
            c = self.color[n]
            if c == C_EMPTY:
                has_lib = True
            elif c == opp:
                if self.libs[self.chain_head[n]] == 1:
                    captures = True  # so the new stone gets a liberty
            elif c == pla:
                own_any = True
                if self.libs[self.chain_head[n]] > 1:
                    has_lib = True
        if not (has_lib or captures or (own_any and self.suicide_allowed)):
            return ILLEGAL_SUICIDE
        # A move that removes nothing makes a position with one stone more than now; if no
        # position in the set has that many stones, it cannot be a repeat: skip the lookup.
        if self.ko_rule != KO_SIMPLE and (
            self.num_stones[C_BLACK] + self.num_stones[C_WHITE] + 1 <= self.max_seen_stones
            or captures or not has_lib  # removes stones: capture or multi-stone suicide
        ):
            if self._seen_contains(self._key(self.hash_after(loc, pla), opp)):
                return ILLEGAL_SUPERKO
        return LEGAL

    cdef bint is_legal_loc(self, int loc) noexcept nogil:
        return self.illegal_reason_loc(loc) == LEGAL

    cdef int play_loc(self, int loc) noexcept nogil:
        cdef int reason = self.illegal_reason_loc(loc)
        cdef int pla = self.next_color
        if reason != LEGAL:
            return reason
        if self._reserve() != 0:
            return -1
        if loc == PASS_LOC:
            self.passes += 1
            self.ko_loc = NULL_LOC
        else:
            self.passes = 0
            self._place(loc, pla, True)
        self.hist_loc[self.num_moves] = loc
        self.hist_color[self.num_moves] = pla
        self.num_moves += 1
        self.next_color = 3 - pla
        if self.ko_rule != KO_SIMPLE:
            self._seen_insert(self._key(self.pos_hash, self.next_color))
        return LEGAL

    cdef int chain_liberty_locs(self, int loc, short* out) noexcept nogil:
        cdef int head = self.chain_head[loc]
        cdef uint32_t m = self.new_mark()
        cdef int cur = head, n, i, count = 0
        while True:
            for i in range(4):
                n = cur + self.adj[i]
                if self.color[n] == C_EMPTY and self.mark[n] != m:
                    self.mark[n] = m
                    out[count] = n
                    count += 1
            cur = self.next_stone[cur]
            if cur == head:
                break
        return count

    cdef bint is_simple_eye(self, int loc, int pla) noexcept nogil:
        cdef int i, c, opp_corners = 0
        cdef bint against_wall = False
        if self.color[loc] != C_EMPTY:
            return False
        for i in range(4):
            c = self.color[loc + self.adj[i]]
            if c == C_WALL:
                against_wall = True
            elif c != pla:
                return False
        for i in range(4):
            if self.color[loc + self.diag[i]] == 3 - pla:
                opp_corners += 1
        if opp_corners >= 2 or (against_wall and opp_corners >= 1):
            return False
        return True

    cdef double area_score_c(self) noexcept nogil:
        cdef short stack[MAX_AREA]
        cdef uint32_t m = self.new_mark()
        cdef int area[3]
        cdef int k, start, top, cur, n, i, size, c
        cdef bint reach_black, reach_white
        area[0] = 0
        area[C_BLACK] = self.num_stones[C_BLACK]
        area[C_WHITE] = self.num_stones[C_WHITE]
        for k in range(self.num_empty):
            start = self.empty_list[k]
            if self.mark[start] == m:
                continue
            self.mark[start] = m
            stack[0] = start
            top = 1
            size = 0
            reach_black = False
            reach_white = False
            while top > 0:
                top -= 1
                cur = stack[top]
                size += 1
                for i in range(4):
                    n = cur + self.adj[i]
                    c = self.color[n]
                    if c == C_EMPTY:
                        if self.mark[n] != m:
                            self.mark[n] = m
                            stack[top] = n
                            top += 1
                    elif c == C_BLACK:
                        reach_black = True
                    elif c == C_WHITE:
                        reach_white = True
            if reach_black and not reach_white:
                area[C_BLACK] += size
            elif reach_white and not reach_black:
                area[C_WHITE] += size
        return area[C_BLACK] - area[C_WHITE] - self.komi

    cdef int copy_into(self, Board dst) except -1:
        cdef short* new_loc
        cdef unsigned char* new_color
        cdef uint64_t* new_seen
        if dst.x_size != self.x_size or dst.y_size != self.y_size:
            raise ValueError(
                f"copy_into needs equal sizes: {self.x_size}x{self.y_size} vs {dst.x_size}x{dst.y_size}"
            )
        if dst.hist_cap < self.num_moves:
            new_loc = <short*>realloc(dst.hist_loc, self.hist_cap * sizeof(short))
            if new_loc == NULL:
                raise MemoryError()
            dst.hist_loc = new_loc
            new_color = <unsigned char*>realloc(dst.hist_color, self.hist_cap * sizeof(unsigned char))
            if new_color == NULL:
                raise MemoryError()
            dst.hist_color = new_color
            dst.hist_cap = self.hist_cap
        if dst.seen_cap != self.seen_cap:
            new_seen = <uint64_t*>realloc(dst.seen, self.seen_cap * sizeof(uint64_t))
            if new_seen == NULL:
                raise MemoryError()
            dst.seen = new_seen
            dst.seen_cap = self.seen_cap
        cdef int n = self.arr_size
        dst.rules = self.rules
        dst.ko_rule = self.ko_rule
        dst.suicide_allowed = self.suicide_allowed
        dst.komi = self.komi
        memcpy(dst.color, self.color, n * sizeof(unsigned char))
        memcpy(dst.chain_head, self.chain_head, n * sizeof(short))
        memcpy(dst.next_stone, self.next_stone, n * sizeof(short))
        memcpy(dst.libs, self.libs, n * sizeof(short))
        memcpy(dst.chain_size, self.chain_size, n * sizeof(short))
        memcpy(dst.empty_index, self.empty_index, n * sizeof(short))
        memcpy(dst.empty_list, self.empty_list, self.num_empty * sizeof(short))
        dst.num_empty = self.num_empty
        dst.num_stones[0] = self.num_stones[0]
        dst.num_stones[1] = self.num_stones[1]
        dst.num_stones[2] = self.num_stones[2]
        dst.next_color = self.next_color
        dst.ko_loc = self.ko_loc
        dst.pos_hash = self.pos_hash
        dst.passes = self.passes
        dst.num_moves = self.num_moves
        memcpy(dst.hist_loc, self.hist_loc, self.num_moves * sizeof(short))
        memcpy(dst.hist_color, self.hist_color, self.num_moves * sizeof(unsigned char))
        memcpy(dst.seen, self.seen, self.seen_cap * sizeof(uint64_t))
        dst.seen_count = self.seen_count
        dst.max_seen_stones = self.max_seen_stones
        return 0

    # ------------------------------------------------------------------ Python API

    cdef int _loc_arg(self, move) except? -2:
        """Location of a Python move index, or -1 when it is off the board."""
        if not isinstance(move, (int, np.integer)) or isinstance(move, bool):
            raise TypeError(f"a move is an int index (y * x_size + x), got {move!r}")
        if move < 0 or move > self.area:
            return -1
        return self.loc_of(move)

    @property
    def pass_move(self) -> int:
        return self.area

    @property
    def to_move(self) -> int:
        """Player to move: BLACK (1) or WHITE (2). Setting it changes only who moves next."""
        return self.next_color

    @to_move.setter
    def to_move(self, int value) -> None:
        if value != C_BLACK and value != C_WHITE:
            raise ValueError(f"to_move must be BLACK (1) or WHITE (2), got {value}")
        if value != self.next_color:
            self.next_color = value
            self.ko_loc = NULL_LOC  # the ko ban binds only the player who was to move
            if self.seen_count <= 1:
                # Nothing played since setup: the position never stood with the old player to
                # move, so it must not count as seen that way (situational superko).
                self._reset_seen()
            elif self.ko_rule != KO_SIMPLE:
                if self._reserve() != 0:
                    raise MemoryError()
                self._seen_insert(self._key(self.pos_hash, self.next_color))

    @property
    def num_moves(self) -> int:
        return self.num_moves

    @property
    def consecutive_passes(self) -> int:
        return self.passes

    @property
    def game_over(self) -> bool:
        """Two consecutive passes ended the game (play may still continue)."""
        return self.passes >= 2

    @property
    def hash(self) -> int:
        """Positional Zobrist hash of the stones (equal positions, equal hashes)."""
        return self.pos_hash

    @property
    def ko_point(self):
        """Move index the player to move may not play because of simple ko, or None."""
        return None if self.ko_loc == NULL_LOC else self.move_of(self.ko_loc)

    @property
    def history(self) -> list:
        """All moves played, oldest first, as (color, move index)."""
        return [(self.hist_color[i], self.move_of(self.hist_loc[i])) for i in range(self.num_moves)]

    def last_moves(self, int n) -> list:
        """The last n moves (fewer early in the game), most recent first, as (color, move)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        cdef int k = min(n, self.num_moves)
        return [
            (self.hist_color[self.num_moves - 1 - i], self.move_of(self.hist_loc[self.num_moves - 1 - i]))
            for i in range(k)
        ]

    def illegal_reason(self, move):
        """None if `to_move` may play `move`, else 'off-board', 'occupied', 'suicide', 'ko' or
        'superko'."""
        cdef int loc = self._loc_arg(move)
        if loc < 0:
            return "off-board"
        cdef int reason = self.illegal_reason_loc(loc)
        return None if reason == LEGAL else ILLEGAL_REASONS[reason - 1]

    def is_legal(self, move) -> bool:
        return self.illegal_reason(move) is None

    def play(self, move) -> None:
        """Play `move` for `to_move`; IllegalMoveError (board unchanged) if the rules forbid it."""
        cdef int loc = self._loc_arg(move)
        if loc < 0:
            raise IllegalMoveError("off-board", move, f"moves are 0..{self.area} on this board")
        cdef int reason = self.play_loc(loc)
        if reason == -1:
            raise MemoryError()
        if reason != LEGAL:
            raise IllegalMoveError(ILLEGAL_REASONS[reason - 1], move)

    def legal_moves(self):
        """Bool array of length x_size * y_size + 1 (pass last): which moves are legal now."""
        out = np.zeros(self.area + 1, dtype=np.bool_)
        cdef unsigned char[::1] view = out.view(np.uint8)
        cdef int k, loc
        for k in range(self.num_empty):
            loc = self.empty_list[k]
            view[self.move_of(loc)] = self.illegal_reason_loc(loc) == LEGAL
        view[self.area] = 1
        return out

    def place_stones(self, black=(), white=()) -> None:
        """Add setup stones (handicap, SGF AB/AW): not moves, no captures. Restarts the superko
        history at the resulting position. ValueError (board unchanged) if a point is off the
        board, occupied or listed twice, or if some chain would be left without a liberty."""
        cdef Board tmp = self.copy()
        cdef int loc, pla
        seen_points = set()
        for pla, moves in ((C_BLACK, black), (C_WHITE, white)):
            for move in moves:
                loc = tmp._loc_arg(move)
                if loc < 0 or loc == PASS_LOC:
                    raise ValueError(f"setup stone {move!r} is not a point of this board")
                if move in seen_points:
                    raise ValueError(f"setup stone {move} listed twice")
                if tmp.color[loc] != C_EMPTY:
                    raise ValueError(f"setup stone {move} is on an occupied point")
                seen_points.add(move)
                tmp._place(loc, pla, False)
        for loc in range(tmp.arr_size):
            if (tmp.color[loc] == C_BLACK or tmp.color[loc] == C_WHITE) and tmp.libs[tmp.chain_head[loc]] == 0:
                raise ValueError(f"setup leaves the chain at {tmp.move_of(loc)} without a liberty")
        tmp.ko_loc = NULL_LOC
        tmp._reset_seen()
        tmp.copy_into(self)

    def copy(self) -> Board:
        """An independent copy (position, history, superko set, rules)."""
        cdef Board b = Board.__new__(Board, self.x_size, self.y_size, self.rules, self.komi)
        self.copy_into(b)
        return b

    def stones(self):
        """int8 array [y_size, x_size]: EMPTY 0, BLACK 1, WHITE 2."""
        out = np.zeros((self.y_size, self.x_size), dtype=np.int8)
        cdef signed char[:, ::1] view = out
        cdef int x, y
        for y in range(self.y_size):
            for x in range(self.x_size):
                view[y, x] = self.color[(y + 1) * self.stride + x + 1]
        return out

    def chain_liberties(self, move) -> int:
        """Liberties of the chain at `move` (0 for an empty point)."""
        cdef int loc = self._loc_arg(move)
        if loc <= 0:
            raise ValueError(f"{move!r} is not a point of this board")
        if self.color[loc] == C_EMPTY:
            return 0
        return self.libs[self.chain_head[loc]]

    def area_score(self) -> float:
        """Tromp-Taylor area score, Black minus White minus komi (every stone counts as alive)."""
        return self.area_score_c()

    def validate(self) -> None:
        """Recompute chains, liberties, counts, empty list and hash from the stones and compare
        with the incremental state; RuntimeError naming the first difference (for tests)."""
        cdef int loc, head, cur, count, k, n, top, size, linked, c
        cdef uint32_t m
        cdef uint64_t h = 0
        cdef int stones[3]
        cdef short stack[MAX_AREA]
        cdef bint checked[MAX_ARR]
        memset(checked, 0, sizeof(checked))
        stones[0] = stones[1] = stones[2] = 0
        for loc in range(self.arr_size):
            c = self.color[loc]
            if c == C_EMPTY:
                k = self.empty_index[loc]
                if k >= self.num_empty or self.empty_list[k] != loc:
                    raise RuntimeError(f"empty point {self.move_of(loc)} missing from the empty list")
            elif c == C_BLACK or c == C_WHITE:
                stones[c] += 1
                h ^= ZOBRIST[c][loc]
                head = self.chain_head[loc]
                if self.color[head] != c or self.chain_head[head] != head:
                    raise RuntimeError(f"stone {self.move_of(loc)} has a bad chain head")
                if checked[head]:
                    continue
                checked[head] = True
                # The flood-filled chain must be exactly the linked list.
                m = self.new_mark()
                self.mark[loc] = m
                stack[0] = loc
                top = 1
                size = 0
                while top > 0:
                    top -= 1
                    cur = stack[top]
                    size += 1
                    if self.chain_head[cur] != head:
                        raise RuntimeError(f"stone {self.move_of(cur)} has a bad chain head")
                    for k in range(4):
                        n = cur + self.adj[k]
                        if self.color[n] == c and self.mark[n] != m:
                            self.mark[n] = m
                            stack[top] = n
                            top += 1
                linked = 0
                cur = head
                while True:
                    if self.mark[cur] != m or linked > size:
                        raise RuntimeError(f"chain list at {self.move_of(head)} leaves the chain")
                    linked += 1
                    cur = self.next_stone[cur]
                    if cur == head:
                        break
                if linked != size or size != self.chain_size[head]:
                    raise RuntimeError(f"chain at {self.move_of(loc)} disagrees with its stones")
                count = self._count_libs(head)
                if count != self.libs[head] or count == 0:
                    raise RuntimeError(
                        f"chain at {self.move_of(loc)}: {self.libs[head]} liberties kept, {count} real"
                    )
        if stones[1] != self.num_stones[1] or stones[2] != self.num_stones[2]:
            raise RuntimeError("stone counts disagree")
        if stones[1] + stones[2] + self.num_empty != self.area:
            raise RuntimeError("empty count disagrees")
        if h != self.pos_hash:
            raise RuntimeError("Zobrist hash disagrees with the stones")

    @staticmethod
    def from_diagram(str diagram, rules=KATAGO, komi=7.5, to_move=C_BLACK) -> Board:
        """A board from rows of 'X' (black), 'O' (white) and '.' or '+' (empty), top row first;
        spaces are ignored. The stones are setup stones (see place_stones)."""
        rows = [line.replace(" ", "") for line in diagram.strip().splitlines()]
        rows = [r for r in rows if r]
        if not rows or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError("diagram rows must be non-empty and of equal length")
        board = Board(len(rows[0]), len(rows), rules, komi)
        black, white = [], []
        for y, row in enumerate(rows):
            for x, ch in enumerate(row):
                if ch == "X":
                    black.append(y * board.x_size + x)
                elif ch == "O":
                    white.append(y * board.x_size + x)
                elif ch not in ".+":
                    raise ValueError(f"unexpected {ch!r} in diagram row {y}")
        board.place_stones(black=black, white=white)
        board.to_move = to_move
        return board

    def __repr__(self) -> str:
        chars = ".XO"
        rows = [
            " ".join(chars[self.color[(y + 1) * self.stride + x + 1]] for x in range(self.x_size))
            for y in range(self.y_size)
        ]
        side = "X" if self.next_color == C_BLACK else "O"
        return f"Board({self.x_size}x{self.y_size}, {side} to move, move {self.num_moves})\n" + "\n".join(rows)
