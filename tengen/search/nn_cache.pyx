# cython: language_level=3
"""The NN cache: evaluations of positions the search has seen, shared by any number of trees.

`NNCache` (bounded LRU) maps a key of the position hash, player to move, simple-ko point, the last
five moves, rules, komi and board size (the search computes the keys, tengen.search.playouts) to the
evaluation (policy over the legal moves, value, score, their predicted errors) and the position's
ladder plane, which features of its children reuse as their LADDERED_1/2 planes instead of reading
ladders again; optionally its ownership (`ownership=True`: the root's ending bias reads it).
"""
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from tengen.go.board cimport MAX_AREA


cdef class NNCache:
    """Bounded LRU map from position keys to evaluations, shared by trees of any board size up to
    `max_area` points. capacity 0 disables caching. Not thread-safe: one thread searches."""

    def __cinit__(self, int capacity, int max_area=MAX_AREA, *, bint ownership=False):
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        if not 49 <= max_area <= MAX_AREA:
            raise ValueError(f"max_area must be within 49..{MAX_AREA}, got {max_area}")
        self.capacity = capacity
        self.stride = max_area + 1
        self.words = (max_area + 63) // 64
        cdef int cap = max(capacity, 1)
        cdef int tsize = 2
        while tsize < 2 * cap:
            tsize *= 2
        self.table_mask = tsize - 1
        self.keys = <uint64_t*>malloc(cap * sizeof(uint64_t))
        self.policy = <float*>malloc(<size_t>cap * self.stride * sizeof(float))
        self.vals = <float*>malloc(cap * NUM_VALS * sizeof(float))
        self.bits = <uint64_t*>malloc(cap * self.words * sizeof(uint64_t))
        self.all_alive = <unsigned char*>malloc(cap * sizeof(unsigned char))
        self.lru_prev = <int*>malloc(cap * sizeof(int))
        self.lru_next = <int*>malloc(cap * sizeof(int))
        self.table = <int*>malloc(tsize * sizeof(int))
        if ownership:
            self.own = <float*>malloc(<size_t>cap * self.stride * sizeof(float))
        if (self.keys == NULL or self.policy == NULL or self.vals == NULL or self.bits == NULL
                or self.all_alive == NULL or self.lru_prev == NULL or self.lru_next == NULL
                or self.table == NULL or (ownership and self.own == NULL)):
            raise MemoryError(f"NN cache of {capacity} entries")
        self.clear()

    def __dealloc__(self):
        free(self.keys)
        free(self.policy)
        free(self.vals)
        free(self.bits)
        free(self.all_alive)
        free(self.lru_prev)
        free(self.lru_next)
        free(self.table)
        free(self.own)

    def clear(self) -> None:
        """Drop every entry (and reset the hit counters)."""
        memset(self.table, 0xFF, (self.table_mask + 1) * sizeof(int))
        self.count = 0
        self.lru_head = -1
        self.lru_tail = -1
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return self.count

    cdef void _unlink(self, int e) noexcept nogil:
        cdef int p = self.lru_prev[e], n = self.lru_next[e]
        if p >= 0:
            self.lru_next[p] = n
        else:
            self.lru_head = n
        if n >= 0:
            self.lru_prev[n] = p
        else:
            self.lru_tail = p

    cdef void _push_front(self, int e) noexcept nogil:
        self.lru_prev[e] = -1
        self.lru_next[e] = self.lru_head
        if self.lru_head >= 0:
            self.lru_prev[self.lru_head] = e
        self.lru_head = e
        if self.lru_tail < 0:
            self.lru_tail = e

    cdef int lookup(self, uint64_t key) noexcept nogil:
        """Entry index holding key (now the most recently used), or -1."""
        if self.capacity == 0:
            return -1
        cdef int i = <int>(key & self.table_mask), e
        while True:
            e = self.table[i]
            if e < 0:
                self.misses += 1
                return -1
            if self.keys[e] == key:
                self.hits += 1
                if e != self.lru_head:
                    self._unlink(e)
                    self._push_front(e)
                return e
            i = (i + 1) & self.table_mask

    cdef void _table_remove(self, int e) noexcept nogil:
        """Take entry e out of the probe table (backward-shift deletion keeps probing exact)."""
        cdef int i = <int>(self.keys[e] & self.table_mask), j, home
        while self.table[i] != e:
            i = (i + 1) & self.table_mask
        j = i
        while True:
            j = (j + 1) & self.table_mask
            if self.table[j] < 0:
                break
            home = <int>(self.keys[self.table[j]] & self.table_mask)
            # Move table[j] into the hole at i unless its home lies cyclically in (i, j].
            if (i <= j and (home <= i or home > j)) or (i > j and home <= i and home > j):
                self.table[i] = self.table[j]
                i = j
        self.table[i] = -1

    cdef int insert(self, uint64_t key) noexcept nogil:
        """Entry index for key, to be filled by the caller (evicts the least recently used entry
        when full); -1 when the cache is disabled."""
        cdef int e, i
        if self.capacity == 0:
            return -1
        i = <int>(key & self.table_mask)
        while self.table[i] >= 0:
            e = self.table[i]
            if self.keys[e] == key:
                if e != self.lru_head:
                    self._unlink(e)
                    self._push_front(e)
                return e
            i = (i + 1) & self.table_mask
        if self.count < self.capacity:
            e = self.count
            self.count += 1
        else:
            e = self.lru_tail
            self._unlink(e)
            self._table_remove(e)
            # the hole may have moved: find the free slot for key again
            i = <int>(key & self.table_mask)
            while self.table[i] >= 0:
                i = (i + 1) & self.table_mask
        self.keys[e] = key
        self.table[i] = e
        self._push_front(e)
        return e
