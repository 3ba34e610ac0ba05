# cython: language_level=3
"""Monte-Carlo tree search in C arenas (KataGo paper §5), shaped for batched evaluation.

A `Tree` searches one position. `select_leaves(k, spatial, globals)` runs playouts until `k` leaves
wait for an evaluation, writing each leaf's input features into the caller's batch buffers;
`backup(policy, value, score)` applies the evaluations (the Evaluator protocol's outputs, rows in
the same order). Playouts that end at a terminal node or an NN-cache hit complete at once. Several
leaves of one tree can be in flight: every node on a pending path carries a virtual loss.
`select_batch` / `backup_batch` do the same for many trees with one call, so a runner that plays G
games pays no Python cost per game per step.

Search (paper §5.1-5.4):
- PUCT(c) = V(c) + cpuct P(c) sqrt(sum_c' N(c')) / (1 + N(c)), V from the chooser's point of view.
- First-play urgency: an unvisited child is valued V(n) - c_fpu sqrt(sum of visited children's
  priors), V(n) the parent's average utility; c_fpu = 0 at the root when noise is on.
- Every unvisited child has the same V, so the best of them is the one with the highest prior, and
  the visited children always form a prefix of the edges ordered by prior (ties by position).
  Selection therefore scans only the visited children plus one candidate, and a node's edges are
  ordered lazily, one selection step per new child.
- Root only, when `noise` is on: policy temperature T = T_late + (T_early - T_late) 0.5^(t / B)
  at turn t (B the board's side; KataGo's later runs use 1.25 decaying to 1.1), then Dirichlet
  noise, alpha = total / legal moves, or shaped (KataGo's later runs): half the total spread
  uniformly, half in proportion to max(0, log min(0.01, P) - mean over the legal moves of that
  log), which favours moves the policy rates low but still far above the hopeless ones; forced playouts n = sqrt(2 P sum N) when `forced_playouts` is on (policy target pruning is
  `tengen.search.single_search.prune_visits`).
- Utility = P(win) - P(loss) + c_score E[(2/pi) atan((x - x0) / B)] for a score x ~ N(mu, sigma^2)
  predicted by the net, x0 = the root's predicted score mean at the start of the search, B the
  board's side (sqrt of its area); the expectation comes from a table interpolated bilinearly in
  t = (2/pi) atan(m) and s, m = (mu - x0) / B, s = sigma / B (see `expected_atan`).
- Terminal nodes (two passes, or every point pass-alive: the provably-safe early end of §6.2.3) are
  scored by tengen.go.passalive under the game's rules and keep that exact value.
- A node reached by a pass is valued at least what its mover gets by passing back (the game ends
  with the rules engine's score): the net's value when better for the mover, else that terminal
  value. Without this a search of a few dozen visits sees a pass only through the net's value of
  the position after it, rarely reaches the reply that ends the game, and learns to pass away
  games (the pass collapse of small visit counts: one side passes early, the other passes back).

Uncertainty-weighted playouts (`uncertainty_weighting`; KataGo's "other methods" notes, v1.9): each
playout counts with a weight w instead of 1 in its path's sums (utility, win, loss, score, and the
weights that stand in for visit counts in PUCT: sqrt(sum of the children's weights) and
1 + the child's weight, so a pending playout counts 1), from the net's predicted short-term errors
of the leaf (the evaluator's `uncertainty` output: squared errors of win - loss and of the score):
    U = sqrt(value_error) + dU/dscore sqrt(score_error),
    dU/dscore = c_score (2/pi) / (B (1 + ((mu - x0)/B)^2)) (the score utility's slope at the leaf's mean),
    w = C / (U + C / W_max), C = 0.25, W_max = 8 (KataGo's uncertaintyCoeff and MaxWeight),
so a playout of uncertainty C - C/W_max = 0.219 utility counts as one, a certain one as W_max (the
baseline C/W_max caps it); terminal nodes count W_max once the net has given an uncertainty. A
negative uncertainty (a net without the error heads) gives w = 1. Visit counts stay whole numbers: the search's budget, forced playouts and
the policy target (tengen.search.single_search) read them, never the weights.

Variance-scaled cPUCT (`cpuct_variance_scaling`; KataGo's v1.9): the cpuct of the choice at node n
is multiplied by 1 + k (sd / sd0 - 1), sd the stdev of the utilities of n's playouts with a prior
mixed in, sd = sqrt(((Ubar^2 + sd0^2) m + U2bar W) / (m + W - 1) - Ubar^2) with W the node's weight,
Ubar and U2bar its weighted mean utility and squared utility (sd = sd0 while W <= 1), sd0 = 0.40,
m = 2, k = 0.85 (KataGo's cpuctUtilityStdevPrior, PriorWeight and Scale). Only the nodes' own
utilities enter U2bar (the subtree bias correction's later adjustments of u_sum do not).

With both off every weight is 1 and the search is bit for bit what it was without them.

The NN cache (`NNCache`, bounded LRU, shared by any number of trees) maps a key of the position
hash, player to move, simple-ko point, the last five moves, rules, komi and board size to the
evaluation (policy over the legal moves, value, score) and the position's ladder plane, which
features of its children reuse as their LADDERED_1/2 planes instead of reading ladders again.

Ending bias (`ending_bonus_points` B, paper §6.2.3; KataGo's rootEndingBonusPoints): at the root
of a position without a ko ban, a move where the net's ownership says the opponent almost surely
owns the point (o <= -0.95, the mover's view) is valued as if it lost B (o + 0.95) / -0.05 points,
and one where the mover almost surely owns it (o >= 0.95) B (o - 0.95) / 0.05 points, unless it
touches an opponent stone or joins two of the mover's chains one of which is not pass-alive, so
that dame and clean-up moves stay free. B is below any real score step, so it only breaks ties
between moves the search finds equal, and ends games sooner. Needs the root's ownership: from its
evaluation, or from the NN cache when that keeps ownership (`NNCache(..., ownership=True)`).

Random symmetry (`random_symmetry`, the AlphaGo Zero notes): every leaf's features are written
under one of the board's symmetries drawn at random (8 on a square board, the 4 mirrorings on a
rectangle) and its policy is read back through the same symmetry, so the net's own asymmetries
average out over the search. The cache key is then the smallest of the position's keys under all
those symmetries, and its entry is stored in that canonical orientation: a position reached as a
rotation or mirror image of a cached one (the same stones, ko point and last five moves, each
mapped) is a hit, its policy and ladder plane mapped back. Every feature plane is equivariant
(the on-board mask too: a smaller board stays in the buffer's corner), so that is sound, up to
ladder reads cut off by their budget (their escape order follows the orientation) and superko
bans from history older than the key's five moves, which the plain key ignores as well.

Subtree value bias correction (`subtree_bias_factor` lambda, `subtree_bias_exponent` alpha;
KataGo's "other methods" notes, which use lambda = 0.35, alpha = 0.8) learns, during one search,
how far the net's utility misjudges a local sequence and corrects for it wherever the sequence
recurs. A node's u_sum is its own NodeUtility plus its children's u_sums, with NodeUtility(n) =
NNUtility(n) + lambda ObsBias(B(n)): NNUtility the net's utility of n (after the pass-end rule),
B(n) its bucket, a hash of the last mover, the last two moves, the 5x5 pattern around the last
move (none after a pass) with which of its stones are in atari, and the simple-ko ban (the root
and terminal nodes have none). ObsBias(B) averages ObsError(n) = (children's u_sum / children's
visits) - NNUtility(n) over the nodes of B that have children, each weighted (visits - 1)^alpha.
After each playout's values are added, a walk from the leaf's parent to the root replaces each
node's share of its bucket's two sums, gives the node the bucket's new ObsBias and carries the
change of its NodeUtility into every u_sum above: O(depth) a playout; nodes off the path keep
their NodeUtility until a playout passes them again (as in KataGo). Only the utility is
corrected; win, loss and score sums stay the net's. The buckets go with the tree, and when
`advance` keeps a subtree they are rebuilt from the kept nodes' shares (its new root loses its
bucket and correction). At lambda = 0 none of this runs.
"""
cimport cython
from libc.math cimport M_PI, NAN, atan, ceil, cos, exp, log, pow, sqrt, tan
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

import numpy as np

from tengen.go import planes as _planes
from tengen.go.board cimport Board, C_BLACK, C_EMPTY, C_WHITE, LEGAL, MAX_AREA, MAX_ARR, PASS_LOC
from tengen.go.features cimport encode_c
from tengen.go.passalive cimport final_score_c, pass_alive_area

from tengen.go import features as _features

# The feature layout this module reads and patches (checked against tengen.go.planes below).
cdef enum:
    NUM_SPATIAL = 18
    NUM_GLOBAL = 10
    P_OWN_STONE = 1
    P_OPP_STONE = 2
    P_LADDERED_0 = 12
    P_LADDERED_1 = 13
    P_LADDERED_2 = 14
    P_PASS_ALIVE_OWN = 16
    P_PASS_ALIVE_OPP = 17
    MAX_WORDS = (MAX_AREA + 63) // 64

if (_planes.NUM_SPATIAL, _planes.NUM_GLOBAL, _planes.OWN_STONE, _planes.OPP_STONE, _planes.LADDERED_0,
        _planes.LADDERED_1, _planes.LADDERED_2, _planes.PASS_ALIVE_OWN, _planes.PASS_ALIVE_OPP) != (
        NUM_SPATIAL, NUM_GLOBAL, P_OWN_STONE, P_OPP_STONE, P_LADDERED_0, P_LADDERED_1, P_LADDERED_2,
        P_PASS_ALIVE_OWN, P_PASS_ALIVE_OPP):
    raise ImportError("tengen.search.mcts disagrees with tengen.go.planes on the feature layout")

cdef double VIRTUAL_LOSS = 1.0   # utility a pending playout counts as, against the chooser
cdef double FORCED_BONUS = 1e9   # PUCT of a root child owed forced playouts
cdef double BIAS_MIN_WEIGHT = 1e-9  # a subtree bias bucket with less weight has no bias (rounding leftovers)
cdef int BIAS_MIN_SLOTS = 1024      # first size of the bucket table (a power of two)
cdef double UNCERTAINTY_COEFF = 0.25       # C: the weight of a playout is C / (U + C / W_max)
cdef double UNCERTAINTY_MAX_WEIGHT = 8.0   # W_max
cdef double CPUCT_STDEV_PRIOR = 0.40       # sd0
cdef double CPUCT_STDEV_PRIOR_WEIGHT = 2.0  # m
cdef double CPUCT_STDEV_SCALE = 0.85       # k
cdef enum:
    NUM_VALS = 7  # per NN cache entry: win, loss, no result, score mean, stdev, value and score error


# ------------------------------------------------------------------------------ score utility

cdef enum:
    T_STEPS = 400   # t = (2/pi) atan(m) in [-1, 1]
    S_STEPS = 120   # s in [0, S_MAX]
cdef double S_MAX = 6.0
cdef double UTABLE[T_STEPS + 1][S_STEPS + 1]


cdef void _fill_utility_table() noexcept nogil:
    """UTABLE[i][j] = E[(2/pi) atan(m + s Z)], Z ~ N(0, 1), at t_i = (2/pi) atan(m), s_j.

    Trapezoid rule in x = s z over +-9 s: atan is analytic within distance 1 of the real line, so
    with steps of at most 0.25 (and 0.25 s, i.e. 0.25 in z, for narrow Gaussians) the rule's error
    is about exp(-2 pi / 0.25), far below float precision. Odd in m, so half the table is mirrored.
    """
    cdef int i, j, k, n
    cdef double s, h, m, t, acc, wsum
    cdef double* w = <double*>malloc(4000 * sizeof(double))
    for j in range(S_STEPS + 1):
        s = S_MAX * j / S_STEPS
        UTABLE[T_STEPS][j] = 1.0
        UTABLE[0][j] = -1.0
        if j == 0:
            for i in range(1, T_STEPS):
                UTABLE[i][0] = -1.0 + 2.0 * i / T_STEPS  # no spread: exactly t
            continue
        h = 0.25 * (s if s < 1.0 else 1.0)
        n = <int>ceil(9.0 * s / h)
        wsum = 0.0
        for k in range(2 * n + 1):
            w[k] = exp(-0.5 * ((k - n) * h / s) ** 2)
            wsum += w[k]
        for i in range(T_STEPS // 2, T_STEPS):
            t = -1.0 + 2.0 * i / T_STEPS
            m = 0.0 if i == T_STEPS // 2 else _tan_half_pi(t)
            acc = 0.0
            for k in range(2 * n + 1):
                acc += w[k] * atan(m + (k - n) * h)
            UTABLE[i][j] = (2.0 / M_PI) * acc / wsum
            UTABLE[T_STEPS - i][j] = -UTABLE[i][j]
    free(w)


cdef inline double _tan_half_pi(double t) noexcept nogil:
    """m with (2/pi) atan(m) = t, for |t| < 1."""
    return tan(0.5 * M_PI * t)


_fill_utility_table()


cdef inline double _expected_atan(double m, double s) noexcept nogil:
    """E[(2/pi) atan(m + s Z)] from the table (bilinear in t = (2/pi) atan(m) and s)."""
    cdef double t = (2.0 / M_PI) * atan(m)
    if s < 0.0:
        s = 0.0
    elif s > S_MAX:
        s = S_MAX
    cdef double ft = (t + 1.0) * 0.5 * T_STEPS
    cdef double fs = s / S_MAX * S_STEPS
    cdef int i = <int>ft
    cdef int j = <int>fs
    if i >= T_STEPS:
        i = T_STEPS - 1
    if j >= S_STEPS:
        j = S_STEPS - 1
    cdef double a = ft - i, b = fs - j
    return ((1 - a) * ((1 - b) * UTABLE[i][j] + b * UTABLE[i][j + 1])
            + a * ((1 - b) * UTABLE[i + 1][j] + b * UTABLE[i + 1][j + 1]))


def expected_atan(double m, double s) -> float:
    """E[(2/pi) atan(m + s Z)] for Z ~ N(0, 1), from the precomputed table (s clamped to
    [0, 6]). The score utility of a prediction N(mu, sigma^2) is
    c_score * expected_atan((mu - x0) / B, sigma / B)."""
    return _expected_atan(m, s)


# ------------------------------------------------------------------------------ random numbers

cdef inline uint64_t _rotl(uint64_t x, int k) noexcept nogil:
    return (x << k) | (x >> (64 - k))


cdef uint64_t _next_u64(uint64_t* s) noexcept nogil:
    """xoshiro256**."""
    cdef uint64_t result = _rotl(s[1] * 5, 7) * 9
    cdef uint64_t t = s[1] << 17
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


cdef inline double _uniform(uint64_t* s) noexcept nogil:
    """Uniform in (0, 1)."""
    return ((_next_u64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0)


cdef double _normal(uint64_t* s) noexcept nogil:
    return sqrt(-2.0 * log(_uniform(s))) * cos(2.0 * M_PI * _uniform(s))


cdef double _gamma(uint64_t* s, double alpha) noexcept nogil:
    """Gamma(alpha, 1) by Marsaglia and Tsang; alpha < 1 through Gamma(alpha + 1) U^(1/alpha)."""
    cdef double d, c, x, v, u
    if alpha < 1.0:
        return _gamma(s, alpha + 1.0) * exp(log(_uniform(s)) / alpha)
    d = alpha - 1.0 / 3.0
    c = 1.0 / sqrt(9.0 * d)
    while True:
        x = _normal(s)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = _uniform(s)
        if u < 1.0 - 0.0331 * x * x * x * x or log(u) < 0.5 * x * x + d * (1.0 - v + log(v)):
            return d * v


cdef inline uint64_t _mix(uint64_t z) noexcept nogil:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


# ------------------------------------------------------------------------------ NN cache

cdef class NNCache:
    """Bounded LRU map from position keys to evaluations, shared by trees of any board size up to
    `max_area` points. capacity 0 disables caching. Not thread-safe: one thread searches."""

    cdef readonly int capacity
    cdef readonly int stride
    cdef readonly int words
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


# ------------------------------------------------------------------------------ feature helpers

cdef void _plane_to_bits(const float* plane, int y_size, int x_size, int buf_w, uint64_t* out) noexcept nogil:
    """One bit per board point (move index order) where the plane is set."""
    cdef int x, y, i
    memset(out, 0, ((y_size * x_size + 63) // 64) * sizeof(uint64_t))
    for y in range(y_size):
        for x in range(x_size):
            if plane[y * buf_w + x] != 0.0:
                i = y * x_size + x
                out[i >> 6] |= (<uint64_t>1) << (i & 63)


cdef void _bits_to_plane(const uint64_t* bits, int y_size, int x_size, int buf_w, float* plane) noexcept nogil:
    cdef int x, y, i
    for y in range(y_size):
        for x in range(x_size):
            i = y * x_size + x
            plane[y * buf_w + x] = 1.0 if (bits[i >> 6] >> (i & 63)) & 1 else 0.0


cdef bint _all_pass_alive(const float* spatial, int plane, int y_size, int x_size, int buf_w,
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


# ------------------------------------------------------------------------------ the tree

cdef uint64_t SYM_ZOBRIST[2][MAX_AREA + 3]  # [black/white][move index]; + pass and "none" codes


cdef void _fill_sym_zobrist() noexcept nogil:
    cdef int c, i
    for c in range(2):
        for i in range(MAX_AREA + 3):
            SYM_ZOBRIST[c][i] = _mix(0xC0FFEE + <uint64_t>(c * (MAX_AREA + 3) + i) * 0x9E3779B97F4A7C15ULL)


_fill_sym_zobrist()


cdef inline int _sym_index(int s, int i, int x_size, int y_size) noexcept nogil:
    """Move index i (y * x_size + x) under symmetry s: transpose if s & 4 (square boards only),
    then mirror x if s & 1, then mirror y if s & 2."""
    cdef int x = i % x_size, y = i // x_size, t
    if s & 4:
        t = x
        x = y
        y = t
    if s & 1:
        x = x_size - 1 - x
    if s & 2:
        y = y_size - 1 - y
    return y * x_size + x


def symmetry_index(int s, int index, int x_size, int y_size) -> int:
    """Where symmetry s (0..7, as the search applies it) takes a move index (pass: area)."""
    if not (0 <= s < (8 if x_size == y_size else 4)) or not (0 <= index <= x_size * y_size):
        raise ValueError(f"no symmetry {s} of move {index} on {x_size}x{y_size}")
    return index if index == x_size * y_size else _sym_index(s, index, x_size, y_size)


cdef void _transform_planes(float* spatial, int planes, int buf_h, int buf_w, int y_size, int x_size,
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
            j = _sym_index(s, i, x_size, y_size)
            pl[(j // x_size) * buf_w + j % x_size] = tmp[i]


cdef void _map_bits(const uint64_t* src, uint64_t* dst, int x_size, int y_size, int s, bint scatter) noexcept nogil:
    """Board bits under symmetry s: scatter dst[T(p)] = src[p], or gather dst[p] = src[T(p)]."""
    cdef int i, j, area = x_size * y_size
    memset(dst, 0, ((area + 63) // 64) * sizeof(uint64_t))
    for i in range(area):
        j = _sym_index(s, i, x_size, y_size)
        if scatter and (src[i >> 6] >> (i & 63)) & 1:
            dst[j >> 6] |= (<uint64_t>1) << (j & 63)
        elif not scatter and (src[j >> 6] >> (j & 63)) & 1:
            dst[i >> 6] |= (<uint64_t>1) << (i & 63)


cdef void _dirichlet_alphas(const float* prior, int m, double total, bint shaped, double* out) noexcept nogil:
    """Per-move Dirichlet alphas summing to `total`: uniform, or (shaped) half uniform and half in
    proportion to how far log min(0.01, P) stands above its mean over the m moves."""
    cdef int k
    cdef double mean = 0.0, excess = 0.0
    if shaped:
        for k in range(m):
            out[k] = log(min(0.01, <double>prior[k]) + 1e-20)
            mean += out[k] / m
        for k in range(m):
            out[k] = max(0.0, out[k] - mean)
            excess += out[k]
    if not shaped or excess <= 0:
        for k in range(m):
            out[k] = total / m
        return
    for k in range(m):
        out[k] = total * 0.5 * (out[k] / excess + 1.0 / m)


def dirichlet_alphas(prior, double total, bint shaped) -> np.ndarray:
    """The Dirichlet alphas the root noise draws with, for priors over the legal moves."""
    cdef float[::1] p = np.ascontiguousarray(prior, dtype=np.float32)
    out = np.zeros(p.shape[0], np.float64)
    cdef double[::1] o = out
    if p.shape[0] > 0:
        _dirichlet_alphas(&p[0], <int>p.shape[0], total, shaped, &o[0])
    return out


cdef inline double _value_sign(int pla) noexcept nogil:
    return 1.0 if pla == C_BLACK else -1.0


cdef class Tree:
    """The search tree of one game (see the module docstring).

    Parameters default to KataGo's self-play values; `seed` drives the Dirichlet noise. Typical
    use: set_position(board, prev1, prev2); start_search(visits, ...); then select_leaves /
    backup until `done`; read root_children() / root_value(); advance(move) or set_position.
    """

    cdef NNCache cache
    cdef Board root_board
    cdef Board scratch
    cdef SearchParams p
    cdef readonly int x_size
    cdef readonly int y_size
    cdef int area
    cdef int words
    cdef double board_len
    cdef bint katago_scoring
    cdef uint64_t rules_key

    cdef Node* nodes
    cdef readonly int num_nodes
    cdef int cap_nodes
    cdef short* e_loc
    cdef float* e_prior
    cdef int* e_child
    cdef int num_edges_used
    cdef int cap_edges
    cdef uint64_t* bits
    cdef int num_bits_used
    cdef int cap_bits
    cdef int root

    cdef uint64_t hist_bits[2][MAX_WORDS]   # ladder planes 1 and 2 turns before the root
    cdef bint hist_known[2]                 # False: not in the game (before its start)

    cdef readonly int target_visits
    cdef readonly bint noise
    cdef readonly bint forced_playouts
    cdef double x0_black
    cdef bint x0_known
    cdef unsigned char allowed[MAX_AREA + 1]
    cdef bint has_allowed
    cdef float raw_root[MAX_AREA + 1]
    cdef bint raw_root_known

    cdef int* pend_node
    cdef uint64_t* pend_key
    cdef unsigned char* pend_alive
    cdef unsigned char* pend_sym            # the symmetry each pending leaf's features were written under
    cdef unsigned char* pend_canon          # the symmetry that takes it to its cache entry's orientation
    cdef int key_sym                        # that symmetry for the last _position_key
    cdef int num_sym                        # symmetries of the board: 8 square, 4 rectangular
    cdef float root_own[MAX_AREA]           # the root's ownership (its mover's view), by move index
    cdef bint root_own_known
    cdef double root_bonus[MAX_AREA + 1]    # the ending bias of each root move, in the mover's points
    cdef bint any_root_bonus
    cdef readonly int num_pending
    cdef bint errors_known                  # an evaluation came with a known uncertainty
    cdef int cap_pending
    cdef int buf_h                          # geometry of the batch buffers of pending leaves
    cdef int buf_w

    cdef uint64_t rng[4]

    # Subtree value bias buckets: open addressing keyed by the bucket (0 marks a free slot), at most
    # half full; per slot the sums over its nodes of ObsError * weight and of weight.
    cdef uint64_t* b_keys
    cdef double* b_err_w
    cdef double* b_weight
    cdef int b_mask                         # slots - 1; -1 before the first bucket
    cdef int b_count

    def __cinit__(self, NNCache cache not None, *, double cpuct=1.1, double fpu_reduction=0.2,
                  double root_fpu_reduction=0.0, double noise_weight=0.25,
                  double dirichlet_alpha_total=10.83, double root_policy_temperature=1.03,
                  root_policy_temperature_early=None, bint shaped_noise=False, bint random_symmetry=False,
                  double ending_bonus_points=0.0, double subtree_bias_factor=0.0,
                  double subtree_bias_exponent=0.8, double score_utility_weight=0.5,
                  bint uncertainty_weighting=False, bint cpuct_variance_scaling=False, uint64_t seed=0):
        cdef double t_early = (root_policy_temperature if root_policy_temperature_early is None
                               else root_policy_temperature_early)
        if not (cpuct > 0 and fpu_reduction >= 0 and root_fpu_reduction >= 0
                and 0 <= noise_weight < 1 and dirichlet_alpha_total > 0
                and root_policy_temperature > 0 and t_early > 0 and score_utility_weight >= 0
                and ending_bonus_points >= 0 and subtree_bias_factor >= 0 and subtree_bias_exponent >= 0):
            raise ValueError("search parameters out of range: cpuct, alpha and temperature must be > 0, "
                             "FPU reductions, c_score, ending bonus and subtree bias factor and exponent "
                             ">= 0, noise weight in [0, 1)")
        self.cache = cache
        self.p.cpuct = cpuct
        self.p.fpu_reduction = fpu_reduction
        self.p.root_fpu_reduction = root_fpu_reduction
        self.p.noise_weight = noise_weight
        self.p.dirichlet_alpha_total = dirichlet_alpha_total
        self.p.root_policy_temperature = root_policy_temperature
        self.p.root_policy_temperature_early = t_early
        self.p.shaped_noise = shaped_noise
        self.p.random_symmetry = random_symmetry
        self.p.ending_bonus_points = ending_bonus_points
        self.p.subtree_bias_factor = subtree_bias_factor
        self.p.subtree_bias_exponent = subtree_bias_exponent
        self.p.score_utility_weight = score_utility_weight
        self.p.uncertainty_weighting = uncertainty_weighting
        self.p.cpuct_variance_scaling = cpuct_variance_scaling
        cdef uint64_t st = seed
        cdef int i
        for i in range(4):
            st += 0x9E3779B97F4A7C15ULL
            self.rng[i] = _mix(st)
        self.root = -1
        self.b_mask = -1

    def __dealloc__(self):
        free(self.nodes)
        free(self.e_loc)
        free(self.e_prior)
        free(self.e_child)
        free(self.bits)
        free(self.pend_node)
        free(self.pend_key)
        free(self.pend_alive)
        free(self.pend_sym)
        free(self.pend_canon)
        free(self.b_keys)
        free(self.b_err_w)
        free(self.b_weight)

    # -------------------------------------------------------------- arenas

    cdef int _reserve_nodes(self, int extra) noexcept nogil:
        cdef int cap
        cdef Node* grown
        if self.num_nodes + extra <= self.cap_nodes:
            return 0
        cap = max(256, max(2 * self.cap_nodes, self.num_nodes + extra))
        grown = <Node*>realloc(self.nodes, cap * sizeof(Node))
        if grown == NULL:
            return -1
        self.nodes = grown
        self.cap_nodes = cap
        return 0

    cdef int _reserve_edges(self, int extra) noexcept nogil:
        cdef int cap
        cdef short* a
        cdef float* b
        cdef int* c
        if self.num_edges_used + extra <= self.cap_edges:
            return 0
        cap = max(4096, max(2 * self.cap_edges, self.num_edges_used + extra))
        a = <short*>realloc(self.e_loc, cap * sizeof(short))
        if a == NULL:
            return -1
        self.e_loc = a
        b = <float*>realloc(self.e_prior, cap * sizeof(float))
        if b == NULL:
            return -1
        self.e_prior = b
        c = <int*>realloc(self.e_child, cap * sizeof(int))
        if c == NULL:
            return -1
        self.e_child = c
        self.cap_edges = cap
        return 0

    cdef int _alloc_bits(self) noexcept nogil:
        """Offset of a fresh ladder-bits block, or -1 when memory runs out."""
        cdef int cap
        cdef uint64_t* grown
        if self.num_bits_used + self.words > self.cap_bits:
            cap = max(256 * self.words, 2 * self.cap_bits)
            grown = <uint64_t*>realloc(self.bits, cap * sizeof(uint64_t))
            if grown == NULL:
                return -1
            self.bits = grown
            self.cap_bits = cap
        self.num_bits_used += self.words
        return self.num_bits_used - self.words

    cdef int _new_node(self, int parent, int move, int pla) noexcept nogil:
        if self._reserve_nodes(1) != 0:
            return -1
        cdef int ni = self.num_nodes
        cdef Node* n = &self.nodes[ni]
        memset(n, 0, sizeof(Node))
        n.parent = parent
        n.edge_start = -1
        n.bits = -1
        n.move = move
        n.pla = pla
        n.state = NODE_NEW
        self.num_nodes += 1
        return ni

    cdef int _clear_tree(self) except -1:
        self.num_nodes = 0
        self.num_edges_used = 0
        self.num_bits_used = 0
        self.num_pending = 0
        self.root_own_known = False
        self.any_root_bonus = False
        self._clear_buckets()
        self.root = self._new_node(-1, -1, self.root_board.next_color)
        if self.root < 0:
            raise MemoryError()
        return 0

    # -------------------------------------------------------------- position and search setup

    def set_position(self, Board board not None, Board prev1=None, Board prev2=None) -> None:
        """Search `board` next (an independent copy is kept); `prev1` / `prev2` are the positions 1
        and 2 turns earlier (None before the start of the game), for the ladder-history features.
        Discards the tree."""
        if prev2 is not None and prev1 is None:
            raise ValueError("prev2 given without prev1")
        for prev in (prev1, prev2):
            if prev is not None and (prev.x_size != board.x_size or prev.y_size != board.y_size):
                raise ValueError("previous positions must have the board's size")
        if self.num_pending:
            raise RuntimeError("set_position while evaluations are pending")
        scoring = board.rules.scoring
        if scoring not in ("katago", "area"):
            raise ValueError(f"unknown scoring {scoring!r}")
        if self.root_board is None or self.x_size != board.x_size or self.y_size != board.y_size:
            self.root_board = board.copy()
            self.scratch = board.copy()
            self.x_size = board.x_size
            self.y_size = board.y_size
            self.area = board.x_size * board.y_size
            self.words = (self.area + 63) // 64
            self.board_len = sqrt(<double>self.area)
            self.num_sym = 8 if self.x_size == self.y_size else 4
        else:
            board.copy_into(self.root_board)
        self.katago_scoring = scoring == "katago"
        self.rules_key = _mix(<uint64_t>(board.rules.ko_code + 4 * <int>board.rules.suicide
                                         + 8 * <int>self.katago_scoring + 16 * board.x_size
                                         + 1024 * board.y_size)
                              ^ (<uint64_t>(<long long>(board.komi * 2) + 100000) << 20))
        self.hist_known[0] = prev1 is not None
        self.hist_known[1] = prev2 is not None
        if prev1 is not None:
            self._ladder_bits_of(prev1, self.hist_bits[0])
        if prev2 is not None:
            self._ladder_bits_of(prev2, self.hist_bits[1])
        self.raw_root_known = False
        self.target_visits = 0
        self._clear_tree()

    cdef int _ladder_bits_of(self, Board board, uint64_t* out) except -1:
        """The LADDERED_0 plane of `board` (encoded on its own) as bits."""
        spatial = np.zeros((NUM_SPATIAL, board.y_size, board.x_size), np.float32)
        glob = np.zeros(NUM_GLOBAL, np.float32)
        _features.encode(board, spatial, glob)
        cdef float[:, :, ::1] sp = spatial
        _plane_to_bits(&sp[P_LADDERED_0, 0, 0], board.y_size, board.x_size, board.x_size, out)
        return 0

    def start_search(self, int visits, *, bint noise=False, bint forced_playouts=False,
                     allowed=None, bint reuse=False) -> None:
        """Begin a search that stops once the root has `visits` visits.

        noise: Dirichlet noise, root policy temperature and no FPU reduction at the root (full
        self-play searches). forced_playouts: forced playouts at the root (policy target pruning
        goes with them when the result is read). allowed: optional bool array (area + 1) of the
        root moves that may be searched (pass always may). reuse: keep the tree below the root
        as a visit cap (the root keeps its visits); not with noise or `allowed`.
        """
        cdef int i
        if visits < 1:
            raise ValueError(f"visits must be >= 1, got {visits}")
        if self.root_board is None:
            raise RuntimeError("start_search before set_position")
        if self.root_board.passes >= 2:
            raise ValueError("the game is over (two passes): nothing to search")
        if self.num_pending:
            raise RuntimeError("start_search while evaluations are pending")
        if reuse and (noise or allowed is not None):
            raise ValueError("tree reuse is for searches without noise and without a move mask")
        self.has_allowed = allowed is not None
        if allowed is not None:
            mask = np.asarray(allowed, dtype=np.bool_)
            if mask.shape != (self.area + 1,):
                raise ValueError(f"allowed must have shape ({self.area + 1},), got {mask.shape}")
            for i in range(self.area + 1):
                self.allowed[i] = mask[i]
            self.allowed[self.area] = 1
        if not reuse:
            self._clear_tree()
        self.target_visits = visits
        self.noise = noise
        self.forced_playouts = forced_playouts
        # x0: the root's predicted score; a reused root's average stands in for it
        if self.nodes[self.root].visits > 0:
            self.x0_black = self.nodes[self.root].s_sum / self.nodes[self.root].weight
            self.x0_known = True
        else:
            self.x0_known = False

    def abandon(self) -> None:
        """Drop the search in progress, pending leaves included: the tree restarts at its root
        position, and the evaluations of those leaves must not be backed up."""
        self.num_pending = 0
        self.target_visits = 0
        if self.root_board is not None:
            self._clear_tree()

    def advance(self, int move) -> None:
        """Play `move` at the root: the child's subtree (if it was searched) becomes the tree,
        the rest is freed; the ladder history moves on by one position."""
        if self.root_board is None:
            raise RuntimeError("advance before set_position")
        if self.num_pending:
            raise RuntimeError("advance while evaluations are pending")
        if not 0 <= move <= self.area:
            raise ValueError(f"move {move} is outside 0..{self.area}")
        cdef int loc = self.root_board.loc_of(move)
        if self.root_board.illegal_reason_loc(loc) != LEGAL:
            raise ValueError(f"move {move} is illegal at the root")
        cdef Node* r = &self.nodes[self.root]
        cdef int k, child = -1
        if r.edge_start >= 0:
            for k in range(r.num_expanded):
                if self.e_loc[r.edge_start + k] == loc:
                    child = self.e_child[r.edge_start + k]
        memcpy(self.hist_bits[1], self.hist_bits[0], MAX_WORDS * sizeof(uint64_t))
        self.hist_known[1] = self.hist_known[0]
        if r.bits >= 0:
            memcpy(self.hist_bits[0], &self.bits[r.bits], self.words * sizeof(uint64_t))
        else:
            self._ladder_bits_of(self.root_board, self.hist_bits[0])
        self.hist_known[0] = True
        if self.root_board.play_loc(loc) != LEGAL:
            raise MemoryError()
        self.raw_root_known = False
        self.target_visits = 0
        if child >= 0 and self.nodes[child].state == NODE_EXPANDED:
            self._compact(child)
            r = &self.nodes[self.root]
            memset(self.raw_root, 0, sizeof(self.raw_root))
            for k in range(r.edge_start, r.edge_start + r.num_edges):  # no noise below the root
                self.raw_root[self._move_index(self.e_loc[k])] = self.e_prior[k]
            self.raw_root_known = True
            self._root_ownership_from_cache()
            self._root_ending_bonus()
        else:
            self._clear_tree()

    cdef void _root_ownership_from_cache(self) noexcept:
        """The kept root's ownership from the NN cache (unknown when it is not there)."""
        cdef int e
        self.root_own_known = False
        if self.cache.own == NULL or self.p.ending_bonus_points <= 0:
            return
        self.root_board.copy_into(self.scratch)
        e = self.cache.lookup(self._position_key())
        if e >= 0:
            self._root_own_from_entry(e)

    cdef void _root_own_from_entry(self, int e) noexcept nogil:
        """root_own from cache entry e (stored canonically: mapped back by key_sym)."""
        cdef float* own = &self.cache.own[<size_t>e * self.cache.stride]
        cdef int k
        self.root_own_known = own[0] == own[0]  # NaN: stored without ownership
        for k in range(self.area):
            self.root_own[k] = own[_sym_index(self.key_sym, k, self.x_size, self.y_size)]

    cdef int _compact(self, int new_root) except -1:
        """Keep only the subtree of new_root, renumbered breadth first into fresh arenas."""
        cdef Node* old_nodes = self.nodes
        cdef short* old_loc = self.e_loc
        cdef float* old_prior = self.e_prior
        cdef int* old_child = self.e_child
        cdef uint64_t* old_bits = self.bits
        cdef int old_count = self.num_nodes
        cdef int* order = <int*>malloc(old_count * sizeof(int))
        cdef int* remap = <int*>malloc(old_count * sizeof(int))
        cdef int head = 0, tail = 1, i, k, ni, e, c
        if order == NULL or remap == NULL:
            free(order)
            free(remap)
            raise MemoryError()
        order[0] = new_root
        while head < tail:
            ni = order[head]
            head += 1
            for k in range(old_nodes[ni].num_expanded):
                order[tail] = old_child[old_nodes[ni].edge_start + k]
                tail += 1
        for i in range(tail):
            remap[order[i]] = i
        self.nodes = NULL
        self.e_loc = NULL
        self.e_prior = NULL
        self.e_child = NULL
        self.bits = NULL
        self.cap_nodes = self.cap_edges = self.cap_bits = 0
        self.num_nodes = self.num_edges_used = self.num_bits_used = 0
        try:
            if self._reserve_nodes(tail) != 0:
                raise MemoryError()
            for i in range(tail):
                ni = order[i]
                self.nodes[i] = old_nodes[ni]
                self.nodes[i].parent = -1 if i == 0 else remap[old_nodes[ni].parent]
                if old_nodes[ni].edge_start >= 0:
                    if self._reserve_edges(old_nodes[ni].num_edges) != 0:
                        raise MemoryError()
                    e = self.num_edges_used
                    self.nodes[i].edge_start = e
                    for k in range(old_nodes[ni].num_edges):
                        self.e_loc[e + k] = old_loc[old_nodes[ni].edge_start + k]
                        self.e_prior[e + k] = old_prior[old_nodes[ni].edge_start + k]
                        c = old_child[old_nodes[ni].edge_start + k]
                        self.e_child[e + k] = remap[c] if c >= 0 else -1
                    self.num_edges_used += old_nodes[ni].num_edges
                if old_nodes[ni].bits >= 0:
                    e = self._alloc_bits()
                    if e < 0:
                        raise MemoryError()
                    memcpy(&self.bits[e], &old_bits[old_nodes[ni].bits], self.words * sizeof(uint64_t))
                    self.nodes[i].bits = e
            self.num_nodes = tail
            self.nodes[0].move = -1
            self.root = 0
            if self.p.subtree_bias_factor != 0 and self._rebuild_buckets() != 0:
                raise MemoryError()
        finally:
            free(order)
            free(remap)
            free(old_nodes)
            free(old_loc)
            free(old_prior)
            free(old_child)
            free(old_bits)
        return 0

    # -------------------------------------------------------------- reading the tree

    @property
    def done(self) -> bool:
        """The root has all its visits and nothing is pending."""
        return self._done()

    cdef inline bint _done(self) noexcept:
        return (self.root >= 0 and self.target_visits > 0 and self.num_pending == 0
                and self.nodes[self.root].visits >= self.target_visits)

    @property
    def cpuct(self) -> float:
        return self.p.cpuct

    @property
    def visits(self) -> int:
        """Completed visits of the root."""
        return self.nodes[self.root].visits if self.root >= 0 else 0

    @property
    def x0(self) -> float:
        """The score-utility centre of this search, from the root player's point of view."""
        if not self.x0_known:
            return float("nan")
        return _value_sign(self.root_board.next_color) * self.x0_black

    def board(self) -> Board:
        """A copy of the root position."""
        return self.root_board.copy()

    def raw_policy(self):
        """The net's policy at the root (before temperature and noise) as float32 [area + 1], or
        None before the root is evaluated."""
        if not self.raw_root_known:
            return None
        out = np.zeros(self.area + 1, np.float32)
        cdef int i
        for i in range(self.area + 1):
            out[i] = self.raw_root[i]
        return out

    cdef int _node_at(self, path) except -2:
        """The node reached from the root by the move indices in `path`, or -1 if not in the tree."""
        cdef int ni = self.root, k, loc, child
        for move in path:
            loc = self.root_board.loc_of(move) if 0 <= move <= self.area else -1
            child = -1
            if self.nodes[ni].edge_start >= 0:
                for k in range(self.nodes[ni].edge_start, self.nodes[ni].edge_start + self.nodes[ni].num_expanded):
                    if self.e_loc[k] == loc:
                        child = self.e_child[k]
            if child < 0:
                return -1
            ni = child
        return ni

    def children(self, path=()) -> dict:
        """The searched children of the node reached by the moves `path` from the root (the
        root by default), arrays in edge order: `moves` (move indices), `visits` (completed),
        `priors` (at the root: after temperature and noise), `utility` (average, from the view of
        the player to move at that node); and `num_legal`, the node's number of legal (at the
        root: allowed) moves. KeyError if the path is not in the tree."""
        cdef int ni = self._node_at(path)
        if ni < 0:
            raise KeyError(f"no node at path {list(path)}")
        cdef Node* r = &self.nodes[ni]
        cdef int n = r.num_expanded if r.edge_start >= 0 else 0
        cdef int k, c
        cdef double sign = _value_sign(r.pla)
        moves = np.zeros(n, np.int64)
        visits = np.zeros(n, np.int64)
        priors = np.zeros(n, np.float64)
        utility = np.zeros(n, np.float64)
        for k in range(n):
            c = self.e_child[r.edge_start + k]
            moves[k] = self._move_index(self.e_loc[r.edge_start + k])
            priors[k] = self.e_prior[r.edge_start + k]
            visits[k] = self.nodes[c].visits
            if self.nodes[c].visits:
                utility[k] = sign * self.nodes[c].u_sum / self.nodes[c].weight
        return {"moves": moves, "visits": visits, "priors": priors, "utility": utility,
                "num_legal": r.num_edges if r.edge_start >= 0 else 0}

    def pending_paths(self) -> list:
        """For each pending leaf, in batch-row order, the moves from the root to it."""
        out = []
        cdef int i, ni
        for i in range(self.num_pending):
            path = []
            ni = self.pend_node[i]
            while ni != self.root:
                path.append(self._move_index(self.nodes[ni].move))
                ni = self.nodes[ni].parent
            out.append(path[::-1])
        return out

    def check(self) -> None:
        """Verify the tree's bookkeeping (for tests): every expanded node's visits are its own
        evaluation plus its children's, in-flight counts likewise, visited children form the
        prefix of the edges, priors sum to 1. RuntimeError naming the first problem."""
        cdef int ni, k, c, child_visits, child_flight
        cdef double prior_sum
        cdef Node* n
        for ni in range(self.num_nodes):
            n = &self.nodes[ni]
            if n.state == NODE_EXPANDED:
                child_visits = 0
                child_flight = 0
                prior_sum = 0.0
                for k in range(n.edge_start, n.edge_start + n.num_edges):
                    prior_sum += self.e_prior[k]
                    c = self.e_child[k]
                    if (c >= 0) != (k < n.edge_start + n.num_expanded):
                        raise RuntimeError(f"node {ni}: children are not the prefix of its edges")
                    if c >= 0:
                        if self.nodes[c].parent != ni:
                            raise RuntimeError(f"node {c}: wrong parent")
                        child_visits += self.nodes[c].visits
                        child_flight += self.nodes[c].in_flight
                if n.visits != 1 + child_visits or n.in_flight != child_flight:
                    raise RuntimeError(f"node {ni}: {n.visits} visits / {n.in_flight} in flight, children "
                                       f"{child_visits} / {child_flight}")
                if abs(prior_sum - 1.0) > 1e-4:
                    raise RuntimeError(f"node {ni}: priors sum to {prior_sum}")
            elif n.state == NODE_PENDING:
                if n.visits != 0 or n.in_flight != 1:
                    raise RuntimeError(f"pending node {ni}: {n.visits} visits, {n.in_flight} in flight")
            elif n.state == NODE_TERMINAL:
                if n.visits < 1 or n.in_flight != 0:
                    raise RuntimeError(f"terminal node {ni}: {n.visits} visits, {n.in_flight} in flight")
            else:
                raise RuntimeError(f"node {ni} was created but never evaluated")

    def subtree_bias_state(self) -> dict:
        """Copies of the subtree value bias bookkeeping (for tests; all 0 while it is off). Per
        node, in arena order (the root first): `parent` (-1 at the root), `move` (move index, -1
        at the root), `visits`, `terminal` (bool), `u_sum`, `node_utility`, `nn_utility` (Black's
        view), `bucket` (uint64, 0: none), `error_weight` and `weight` (its share of its bucket's
        sums: ObsError * weight and weight). Per bucket in the table: `bucket_keys`,
        `bucket_error_weight`, `bucket_weight` (the sums themselves)."""
        cdef int ni, k, nb = 0
        cdef Node* n
        out = {name: np.zeros(self.num_nodes, dtype) for name, dtype in (
            ("parent", np.int64), ("move", np.int64), ("visits", np.int64), ("terminal", np.bool_),
            ("u_sum", np.float64), ("node_utility", np.float64), ("nn_utility", np.float64),
            ("bucket", np.uint64), ("error_weight", np.float64), ("weight", np.float64))}
        for ni in range(self.num_nodes):
            n = &self.nodes[ni]
            out["parent"][ni] = n.parent
            out["move"][ni] = self._move_index(n.move) if n.move >= 0 else -1
            out["visits"][ni] = n.visits
            out["terminal"][ni] = n.state == NODE_TERMINAL
            out["u_sum"][ni] = n.u_sum
            out["node_utility"][ni] = n.node_u
            out["nn_utility"][ni] = n.nn_u
            out["bucket"][ni] = n.bias_bucket
            out["error_weight"][ni] = n.bias_err_w
            out["weight"][ni] = n.bias_weight
        for name in ("bucket_keys", "bucket_error_weight", "bucket_weight"):
            out[name] = np.zeros(self.b_count, np.uint64 if name == "bucket_keys" else np.float64)
        for k in range(self.b_mask + 1):
            if self.b_keys[k] != 0:
                out["bucket_keys"][nb] = self.b_keys[k]
                out["bucket_error_weight"][nb] = self.b_err_w[k]
                out["bucket_weight"][nb] = self.b_weight[k]
                nb += 1
        return out

    def root_priors(self):
        """float64 [area + 1]: the root's search priors (after temperature and noise), 0 for
        moves that are illegal or not allowed."""
        cdef Node* r = &self.nodes[self.root]
        out = np.zeros(self.area + 1, np.float64)
        cdef int k
        if r.edge_start >= 0:
            for k in range(r.edge_start, r.edge_start + r.num_edges):
                out[self._move_index(self.e_loc[k])] = self.e_prior[k]
        return out

    def root_value(self) -> dict:
        """Averages over the root's visits from the root player's view: `win`, `loss`,
        `no_result`, `utility`, `score_mean`, `score_stdev`."""
        cdef Node* r = &self.nodes[self.root]
        if r.visits == 0:
            raise RuntimeError("the root has no visits yet")
        cdef double n = r.weight, sign = _value_sign(r.pla)
        w = r.w_sum / n
        l = r.l_sum / n
        mean = r.s_sum / n
        var = max(0.0, r.s2_sum / n - mean * mean)
        return {"win": w if sign > 0 else l, "loss": l if sign > 0 else w,
                "no_result": max(0.0, 1.0 - w - l), "utility": sign * r.u_sum / n,
                "score_mean": sign * mean, "score_stdev": sqrt(var)}

    # -------------------------------------------------------------- playouts

    def select_leaves(self, int k, float[:, :, :, ::1] spatial, float[:, ::1] globals, int offset=0) -> int:
        """Run playouts until `k` leaves wait for evaluations (fewer when the search has its
        visits or a playout reaches a leaf already pending). Their features go to rows offset,
        offset + 1, ... of the batch buffers ([B, 18, H, W] and [B, 10], H >= y_size and
        W >= x_size); returns how many. Each select is followed by one backup."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        _check_buffers(self, spatial, globals, offset + k)
        return self._select(k, &spatial[offset, 0, 0, 0], &globals[offset, 0],
                            <int>spatial.shape[2], <int>spatial.shape[3])

    cdef int _select(self, int k, float* spatial, float* glob, int buf_h, int buf_w) except -1:
        cdef int n = 0, status
        cdef int plane = NUM_SPATIAL * buf_h * buf_w
        if self.target_visits <= 0:
            raise RuntimeError("select before start_search")
        if self.num_pending:
            raise RuntimeError("select while evaluations are pending: back them up first")
        if k > self.cap_pending:
            free(self.pend_node)
            free(self.pend_key)
            free(self.pend_alive)
            free(self.pend_sym)
            free(self.pend_canon)
            self.pend_node = <int*>malloc(k * sizeof(int))
            self.pend_key = <uint64_t*>malloc(k * sizeof(uint64_t))
            self.pend_alive = <unsigned char*>malloc(k)
            self.pend_sym = <unsigned char*>malloc(k)
            self.pend_canon = <unsigned char*>malloc(k)
            self.cap_pending = k
            if (self.pend_node == NULL or self.pend_key == NULL or self.pend_alive == NULL
                    or self.pend_sym == NULL or self.pend_canon == NULL):
                self.cap_pending = 0
                raise MemoryError()
        self.buf_h = buf_h
        self.buf_w = buf_w
        while n < k:
            self.root_board.copy_into(self.scratch)
            with nogil:
                status = self._playout(spatial + n * plane, glob + n * NUM_GLOBAL, buf_h, buf_w)
            if status == PLAYOUT_LEAF:
                n += 1
            elif status == PLAYOUT_COLLISION or status == PLAYOUT_BUDGET:
                break
            elif status < 0:
                raise MemoryError("search tree")
        return n

    cdef int _playout(self, float* spatial, float* glob, int buf_h, int buf_w) noexcept nogil:
        cdef int ni = self.root, ei, ci
        cdef Node* n = &self.nodes[ni]
        if n.visits + n.in_flight >= self.target_visits:
            return PLAYOUT_BUDGET
        while n.state == NODE_EXPANDED:
            ei = self._select_edge(ni)
            if self.scratch.play_loc(self.e_loc[ei]) != LEGAL:
                return -1  # edges were legal when made: only running out of memory gets here
            ci = self.e_child[ei]
            if ci < 0:
                ci = self._new_child(ni, ei)
                if ci < 0:
                    return -1
            ni = ci
            n = &self.nodes[ni]
        if n.state == NODE_TERMINAL:
            self._add_value(ni, n.term_u, n.term_w, n.term_l, n.term_s, n.term_s * n.term_s, self._terminal_weight())
            return PLAYOUT_DONE
        if n.state == NODE_PENDING:
            return PLAYOUT_COLLISION
        return self._evaluate_new(ni, spatial, glob, buf_h, buf_w)

    cdef int _select_edge(self, int ni) noexcept nogil:
        """The edge PUCT picks at expanded node ni (see the module docstring)."""
        cdef Node* n = &self.nodes[ni]
        cdef int start = n.edge_start, k, best = -1
        cdef bint at_root = ni == self.root
        cdef bint forced = at_root and self.forced_playouts
        cdef double sign = _value_sign(n.pla)
        cdef double total = n.visits + n.in_flight - 1  # playouts that went on to a child
        cdef double total_w = n.weight - n.self_w + n.in_flight  # their weight (pending ones count 1)
        cdef double cp = self.p.cpuct * (sqrt(total_w) if total_w > 0 else 0.0)
        cdef double fpu = self.p.root_fpu_reduction if (at_root and self.noise) else self.p.fpu_reduction
        cdef double visited_prior = 0.0, best_v = -1e300, v, nv, nw, prior
        cdef Node* ch
        if self.p.cpuct_variance_scaling:
            cp *= self._cpuct_stdev_factor(n)
        for k in range(n.num_expanded):
            ch = &self.nodes[self.e_child[start + k]]
            prior = self.e_prior[start + k]
            visited_prior += prior
            nv = ch.visits + ch.in_flight
            nw = ch.weight + ch.in_flight
            v = (sign * ch.u_sum - VIRTUAL_LOSS * ch.in_flight) / nw + cp * prior / (1.0 + nw)
            if at_root and self.any_root_bonus and ch.visits > 0:
                v += sign * self._ending_utility(ch, self.root_bonus[self._move_index(self.e_loc[start + k])]) \
                    * ch.weight / nw
            if forced and ch.visits > 0 and nv * nv < 2.0 * prior * total:
                v += FORCED_BONUS
            if v > best_v:
                best_v = v
                best = start + k
        if n.num_expanded < n.num_edges:
            v = (sign * n.u_sum / n.weight - fpu * sqrt(visited_prior)
                 + cp * self.e_prior[start + n.num_expanded])
            if v > best_v:
                best = start + n.num_expanded
        return best

    cdef double _cpuct_stdev_factor(self, Node* n) noexcept nogil:
        """cpuct's factor at n under variance scaling (module docstring)."""
        cdef double sd = CPUCT_STDEV_PRIOR, mean, mean_sq, m = CPUCT_STDEV_PRIOR_WEIGHT
        if n.weight > 1.0:
            mean = n.u_sum / n.weight
            mean_sq = max(n.u2_sum / n.weight, mean * mean)
            sd = sqrt(max(0.0, ((mean * mean + CPUCT_STDEV_PRIOR * CPUCT_STDEV_PRIOR) * m + mean_sq * n.weight)
                               / (m + n.weight - 1.0) - mean * mean))
        return 1.0 + CPUCT_STDEV_SCALE * (sd / CPUCT_STDEV_PRIOR - 1.0)

    cdef double _playout_weight(self, double value_error, double score_error, double mu_black) noexcept nogil:
        """A playout's weight from its leaf's predicted squared errors (module docstring); 1 when
        weighting is off or the uncertainty is unknown (negative)."""
        cdef double z, slope, u
        if not self.p.uncertainty_weighting or value_error < 0 or score_error < 0:
            return 1.0
        z = (mu_black - self.x0_black) / self.board_len
        slope = self.p.score_utility_weight * (2.0 / M_PI) / (self.board_len * (1.0 + z * z))
        u = sqrt(value_error) + slope * sqrt(score_error)
        return UNCERTAINTY_COEFF / (u + UNCERTAINTY_COEFF / UNCERTAINTY_MAX_WEIGHT)

    cdef inline double _terminal_weight(self) noexcept nogil:
        """A terminal node's exact value counts as the most certain playout (as 1 while the net
        has given no uncertainty, as every other playout then)."""
        return UNCERTAINTY_MAX_WEIGHT if self.p.uncertainty_weighting and self.errors_known else 1.0

    cdef double _ending_utility(self, Node* ch, double points) noexcept nogil:
        """Utility (Black's view) a root child gains when its score moves by `points` of the root
        mover, from its average score and spread (as KataGo's getScoreUtilityDiff)."""
        cdef double mu, sd, shifted
        if points == 0:
            return 0.0
        mu = ch.s_sum / ch.weight
        sd = sqrt(max(0.0, ch.s2_sum / ch.weight - mu * mu))
        shifted = mu + (points if self.nodes[self.root].pla == C_BLACK else -points)
        return self.p.score_utility_weight * (
            _expected_atan((shifted - self.x0_black) / self.board_len, sd / self.board_len)
            - _expected_atan((mu - self.x0_black) / self.board_len, sd / self.board_len))

    cdef void _root_ending_bonus(self) noexcept nogil:
        """The ending bias of every root move (see the module docstring), from root_own."""
        cdef Node* r = &self.nodes[self.root]
        cdef signed char safe[MAX_ARR]
        cdef int k, d, loc, adj, pla = r.pla, head
        cdef int offsets[4]
        cdef double o, b = self.p.ending_bonus_points, bonus
        cdef bint touches_opp, joins
        self.any_root_bonus = False
        if b <= 0 or not self.root_own_known or self.root_board.ko_loc >= 0:
            return
        offsets[0] = -1
        offsets[1] = 1
        offsets[2] = -(self.x_size + 1)
        offsets[3] = self.x_size + 1
        memset(safe, 0, sizeof(safe))
        pass_alive_area(self.root_board, safe)
        for k in range(r.edge_start, r.edge_start + r.num_edges):
            loc = self.e_loc[k]
            bonus = 0.0
            if loc != PASS_LOC:
                o = self.root_own[self._move_index(loc)]
                if o <= -0.95:
                    bonus = -b * (-0.95 - o) / 0.05
                elif o >= 0.95:
                    touches_opp = False
                    joins = False
                    head = -1
                    for d in range(4):  # a neighbour of the mover's in a chain that is not pass-alive
                        adj = loc + offsets[d]
                        if self.root_board.color[adj] == 3 - pla:
                            touches_opp = True
                        elif self.root_board.color[adj] == pla and safe[adj] != pla and head < 0:
                            head = self.root_board.chain_head[adj]
                    if head >= 0 and safe[loc] != pla:
                        for d in range(4):
                            adj = loc + offsets[d]
                            if self.root_board.color[adj] == pla and self.root_board.chain_head[adj] != head:
                                joins = True
                    if not touches_opp and not joins:
                        bonus = -b * (o - 0.95) / 0.05
            self.root_bonus[self._move_index(loc)] = bonus
            if bonus != 0:
                self.any_root_bonus = True

    def root_ending_bonus(self):
        """float64 [area + 1]: the ending bias of each root move in points (0: none or unknown)."""
        out = np.zeros(self.area + 1, np.float64)
        cdef Node* r
        cdef int k
        if self.root < 0 or not self.any_root_bonus:
            return out
        r = &self.nodes[self.root]
        for k in range(r.edge_start, r.edge_start + r.num_edges):
            out[self._move_index(self.e_loc[k])] = self.root_bonus[self._move_index(self.e_loc[k])]
        return out

    cdef void _next_candidate(self, int ni) noexcept nogil:
        """Move the highest prior among the edges without a child to position num_expanded."""
        cdef Node* n = &self.nodes[ni]
        cdef int first = n.edge_start + n.num_expanded, end = n.edge_start + n.num_edges, k, best
        cdef short loc
        cdef float prior
        if first >= end:
            return
        best = first
        for k in range(first + 1, end):
            if self.e_prior[k] > self.e_prior[best]:
                best = k
        if best != first:
            loc = self.e_loc[first]
            prior = self.e_prior[first]
            self.e_loc[first] = self.e_loc[best]
            self.e_prior[first] = self.e_prior[best]
            self.e_loc[best] = loc
            self.e_prior[best] = prior

    cdef int _new_child(self, int ni, int ei) noexcept nogil:
        cdef int ci = self._new_node(ni, self.e_loc[ei], 3 - self.nodes[ni].pla)
        if ci < 0:
            return -1
        self.e_child[ei] = ci
        self.nodes[ni].num_expanded += 1
        self._next_candidate(ni)
        return ci

    cdef void _add_value(self, int ni, double u, double w, double l, double s, double s2,
                         double weight) noexcept nogil:
        """Add one visit's values (Black's view), each times `weight`, to ni and its ancestors."""
        cdef int parent = self.nodes[ni].parent
        cdef Node* n
        while ni >= 0:
            n = &self.nodes[ni]
            n.visits += 1
            n.weight += weight
            n.u_sum += weight * u
            n.u2_sum += weight * u * u
            n.w_sum += weight * w
            n.l_sum += weight * l
            n.s_sum += weight * s
            n.s2_sum += weight * s2
            ni = n.parent
        if self.p.subtree_bias_factor != 0 and parent >= 0:
            self._update_subtree_bias(parent)

    cdef double _utility(self, double w_black, double l_black, double mu_black, double sigma) noexcept nogil:
        return (w_black - l_black) + self.p.score_utility_weight * _expected_atan(
            (mu_black - self.x0_black) / self.board_len, sigma / self.board_len)

    cdef void _set_terminal(self, int ni) noexcept nogil:
        """Score the scratch position (the game is over there) and make ni terminal. Never the
        root, so x0 is known."""
        cdef Node* n = &self.nodes[ni]
        cdef double x = final_score_c(self.scratch, self.katago_scoring)
        n.state = NODE_TERMINAL
        n.term_w = 1.0 if x > 0 else (0.5 if x == 0 else 0.0)
        n.term_l = 1.0 - n.term_w
        n.term_s = x
        n.term_u = self._utility(n.term_w, n.term_l, x, 0.0)
        if self.p.subtree_bias_factor != 0:  # no bucket: its exact value is never corrected
            n.bias_bucket = 0
            n.nn_u = n.node_u = n.term_u
        n.self_w = self._terminal_weight()
        self._add_value(ni, n.term_u, n.term_w, n.term_l, x, x * x, n.self_w)

    # -------------------------------------------------------------- subtree value bias

    cdef void _clear_buckets(self) noexcept nogil:
        if self.b_count:
            memset(self.b_keys, 0, (self.b_mask + 1) * sizeof(uint64_t))
            self.b_count = 0

    cdef int _bucket_slot(self, uint64_t key, bint create) noexcept nogil:
        """The table slot of bucket `key`; when it has none, a new empty one if `create`, else -1.
        -1 also when memory runs out."""
        cdef int i
        if self.b_mask < 0:
            if not create or self._grow_buckets() != 0:
                return -1
        i = <int>(key & <uint64_t>self.b_mask)
        while self.b_keys[i] != 0:
            if self.b_keys[i] == key:
                return i
            i = (i + 1) & self.b_mask
        if not create:
            return -1
        if 2 * (self.b_count + 1) > self.b_mask + 1:
            if self._grow_buckets() != 0:
                return -1
            return self._bucket_slot(key, True)
        self.b_keys[i] = key
        self.b_err_w[i] = 0.0
        self.b_weight[i] = 0.0
        self.b_count += 1
        return i

    cdef int _grow_buckets(self) noexcept nogil:
        """Double the bucket table (or make its first one), keeping every bucket; -1: no memory."""
        cdef int old_slots = self.b_mask + 1, slots = max(BIAS_MIN_SLOTS, 2 * old_slots), k, i
        cdef uint64_t* keys = <uint64_t*>malloc(slots * sizeof(uint64_t))
        cdef double* err_w = <double*>malloc(slots * sizeof(double))
        cdef double* weight = <double*>malloc(slots * sizeof(double))
        if keys == NULL or err_w == NULL or weight == NULL:
            free(keys)
            free(err_w)
            free(weight)
            return -1
        memset(keys, 0, slots * sizeof(uint64_t))
        for k in range(old_slots):
            if self.b_keys[k] != 0:
                i = <int>(self.b_keys[k] & <uint64_t>(slots - 1))
                while keys[i] != 0:
                    i = (i + 1) & (slots - 1)
                keys[i] = self.b_keys[k]
                err_w[i] = self.b_err_w[k]
                weight[i] = self.b_weight[k]
        free(self.b_keys)
        free(self.b_err_w)
        free(self.b_weight)
        self.b_keys = keys
        self.b_err_w = err_w
        self.b_weight = weight
        self.b_mask = slots - 1
        return 0

    cdef inline double _bucket_bias(self, int slot) noexcept nogil:
        """ObsBias of the bucket in `slot` (0 while it has no weight)."""
        if slot < 0 or self.b_weight[slot] <= BIAS_MIN_WEIGHT:
            return 0.0
        return self.b_err_w[slot] / self.b_weight[slot]

    cdef uint64_t _bias_bucket_key(self) noexcept nogil:
        """The bucket of the scratch position (a tree node other than the root): the last mover,
        the last move and the one before it, the 5x5 pattern around the last move (unless a pass)
        with the stones in it that are in atari, and the simple-ko ban. Never 0."""
        cdef int m = self.scratch.num_moves, last = self.scratch.hist_loc[m - 1]
        cdef int stride = self.x_size + 1, x0, y0, x, y, loc, c, code, k = 0
        cdef uint64_t pattern[2]
        cdef uint64_t h
        pattern[0] = 0
        pattern[1] = 0
        if last != PASS_LOC:
            x0 = last % stride - 1
            y0 = last // stride - 1
            for y in range(y0 - 2, y0 + 3):
                for x in range(x0 - 2, x0 + 3):
                    if x < 0 or y < 0 or x >= self.x_size or y >= self.y_size:
                        code = 3  # off the board
                    else:
                        loc = (y + 1) * stride + x + 1
                        c = self.scratch.color[loc]
                        code = c  # empty, black, white: 0, 1, 2; in atari: 4, 5
                        if c != C_EMPTY and self.scratch.libs[self.scratch.chain_head[loc]] == 1:
                            code = c + 3
                    pattern[k // 21] |= (<uint64_t>code) << (3 * (k % 21))  # 3 bits a point: exact
                    k += 1
        h = _mix(0x5B7EE0B1A5ULL ^ self.scratch.hist_color[m - 1])
        h = _mix(h ^ (<uint64_t>(last + 1) << 8)
                 ^ (<uint64_t>(self.scratch.hist_loc[m - 2] + 1 if m >= 2 else 0) << 24))
        h = _mix(h ^ pattern[0])
        h = _mix(h ^ pattern[1] ^ (<uint64_t>(self.scratch.ko_loc + 1) << 16))
        return h if h != 0 else 1

    cdef double _bias_node_utility(self, int ni, double u) noexcept nogil:
        """NodeUtility of node ni, evaluated just now with utility u: u plus lambda times its
        bucket's observed bias (it adds nothing to the bucket before it has children)."""
        cdef Node* n = &self.nodes[ni]
        n.nn_u = u
        n.node_u = u
        if n.bias_bucket != 0:
            n.node_u = u + self.p.subtree_bias_factor * self._bucket_bias(self._bucket_slot(n.bias_bucket, False))
        return n.node_u

    cdef void _update_subtree_bias(self, int ni) noexcept nogil:
        """After a playout's values were added: from ni (the leaf's parent) up to the root, move
        each node's observed error and weight in its bucket to their new values, take its new
        NodeUtility from the bucket's bias, and carry the NodeUtility changes into the u_sum of
        every node above. Nodes off the path keep their NodeUtility until a playout passes them."""
        cdef double carry = 0.0, child_visits, err, weight, node_u
        cdef int slot
        cdef Node* n
        while ni >= 0:
            n = &self.nodes[ni]
            n.u_sum += carry
            if n.bias_bucket != 0:
                slot = self._bucket_slot(n.bias_bucket, True)
                if slot >= 0:  # (out of memory: the node keeps its old share and NodeUtility)
                    child_visits = n.visits - 1  # >= 1: this playout went through a child
                    err = (n.u_sum - n.self_w * n.node_u) / (n.weight - n.self_w) - n.nn_u
                    weight = pow(child_visits, self.p.subtree_bias_exponent)
                    self.b_err_w[slot] += err * weight - n.bias_err_w
                    self.b_weight[slot] += weight - n.bias_weight
                    n.bias_err_w = err * weight
                    n.bias_weight = weight
                    node_u = n.nn_u + self.p.subtree_bias_factor * self._bucket_bias(slot)
                    carry += n.self_w * (node_u - n.node_u)
                    n.u_sum += n.self_w * (node_u - n.node_u)
                    n.node_u = node_u
            ni = n.parent

    cdef int _rebuild_buckets(self) noexcept nogil:
        """After _compact: the root loses its bucket and its correction, and the buckets hold
        the kept nodes' shares only. -1 when memory runs out."""
        cdef Node* n = &self.nodes[self.root]
        cdef int ni, slot
        n.u_sum -= n.self_w * (n.node_u - n.nn_u)
        n.node_u = n.nn_u
        n.bias_bucket = 0
        n.bias_err_w = 0.0
        n.bias_weight = 0.0
        self._clear_buckets()
        for ni in range(self.num_nodes):
            n = &self.nodes[ni]
            if n.bias_bucket != 0 and n.bias_weight > 0:
                slot = self._bucket_slot(n.bias_bucket, True)
                if slot < 0:
                    return -1
                self.b_err_w[slot] += n.bias_err_w
                self.b_weight[slot] += n.bias_weight
        return 0

    cdef uint64_t _position_key(self) noexcept nogil:
        """NN cache key of the scratch position: what the features see of it. With random
        symmetry: the smallest key over the board's symmetries (key_sym: the one that gives it)."""
        cdef uint64_t h, best = 0
        cdef int i, m, s
        self.key_sym = 0
        if not self.p.random_symmetry:
            h = _mix(self.scratch.pos_hash ^ self.rules_key)
            h = _mix(h ^ (<uint64_t>self.scratch.next_color << 40)
                     ^ (<uint64_t>(self.scratch.ko_loc + 2) << 44))
            for i in range(min(5, self.scratch.num_moves)):
                m = self.scratch.num_moves - 1 - i
                h = _mix(h ^ (<uint64_t>(self.scratch.hist_loc[m] + 1) << 8)
                         ^ (<uint64_t>self.scratch.hist_color[m] << 4) ^ <uint64_t>(i + 1))
            return h
        for s in range(self.num_sym):
            h = self._key_under(s)
            if s == 0 or h < best:
                best = h
                self.key_sym = s
        return best

    cdef uint64_t _key_under(self, int s) noexcept nogil:
        """The scratch position's key with every point, the ko point and the last moves mapped by s."""
        cdef uint64_t h = 0
        cdef int i, m, c, stride = self.x_size + 1
        for i in range(self.area):
            c = self.scratch.color[(i // self.x_size + 1) * stride + i % self.x_size + 1]
            if c == C_BLACK or c == C_WHITE:
                h ^= SYM_ZOBRIST[c - C_BLACK][_sym_index(s, i, self.x_size, self.y_size)]
        h = _mix(h ^ self.rules_key)
        h = _mix(h ^ (<uint64_t>self.scratch.next_color << 40) ^ (<uint64_t>self._sym_code(self.scratch.ko_loc, s) << 44))
        for i in range(min(5, self.scratch.num_moves)):
            m = self.scratch.num_moves - 1 - i
            h = _mix(h ^ (<uint64_t>self._sym_code(self.scratch.hist_loc[m], s) << 8)
                     ^ (<uint64_t>self.scratch.hist_color[m] << 4) ^ <uint64_t>(i + 1))
        return h

    cdef inline int _sym_code(self, int loc, int s) noexcept nogil:
        """A location for a key under symmetry s: its mapped move index, area for pass, area + 1 for none."""
        if loc == PASS_LOC:
            return self.area
        if loc < 0:
            return self.area + 1
        return _sym_index(s, self._move_index(loc), self.x_size, self.y_size)

    cdef int _make_edges(self, int ni) noexcept nogil:
        """The legal moves of the scratch position (at the root: the allowed ones) as ni's edges."""
        cdef int k, loc, e
        cdef bint root_mask = ni == self.root and self.has_allowed
        if self._reserve_edges(self.scratch.num_empty + 1) != 0:
            return -1
        e = self.num_edges_used
        for k in range(self.scratch.num_empty):
            loc = self.scratch.empty_list[k]
            if root_mask and not self.allowed[self._move_index(loc)]:
                continue
            if self.scratch.illegal_reason_loc(loc) == LEGAL:
                self.e_loc[e] = loc
                self.e_child[e] = -1
                e += 1
        self.e_loc[e] = PASS_LOC
        self.e_child[e] = -1
        e += 1
        self.nodes[ni].edge_start = self.num_edges_used
        self.nodes[ni].num_edges = e - self.num_edges_used
        self.nodes[ni].num_expanded = 0
        self.num_edges_used = e
        return 0

    cdef uint64_t* _bits_before(self, int ni, int up) noexcept nogil:
        """Ladder bits of the position `up` turns before node ni (0: ni itself): a tree node, or
        one of the root's history positions; a position before the game's start repeats the
        newest one after it, as the features do."""
        cdef int node = ni, d = 0
        if up == 0:
            return &self.bits[self.nodes[ni].bits]
        while d < up and node != self.root:
            node = self.nodes[node].parent
            d += 1
        if d == up:
            return &self.bits[self.nodes[node].bits]
        if self.hist_known[up - d - 1]:
            return self.hist_bits[up - d - 1]
        return self._bits_before(ni, up - 1)

    cdef int _evaluate_new(self, int ni, float* spatial, float* glob, int buf_h, int buf_w) noexcept nogil:
        cdef int e, k, bits, sym, plane = buf_h * buf_w
        cdef uint64_t key
        cdef bint all_alive
        if ni != self.root and self.scratch.passes >= 2:
            self._set_terminal(ni)
            return PLAYOUT_DONE
        if ni != self.root and self.scratch.passes == 1:
            self.nodes[ni].pass_ends = True
            self.nodes[ni].pass_end_s = final_score_c(self.scratch, self.katago_scoring)
        if ni != self.root and self.p.subtree_bias_factor != 0:
            self.nodes[ni].bias_bucket = self._bias_bucket_key()
        key = self._position_key()
        e = self.cache.lookup(key)
        if e >= 0:
            if ni != self.root and self.cache.all_alive[e]:
                self._set_terminal(ni)
                return PLAYOUT_DONE
            bits = self._alloc_bits()
            if bits < 0 or self._make_edges(ni) != 0:
                return -1
            if self.key_sym:
                _map_bits(&self.cache.bits[e * self.cache.words], &self.bits[bits], self.x_size, self.y_size,
                          self.key_sym, False)
            else:
                memcpy(&self.bits[bits], &self.cache.bits[e * self.cache.words], self.words * sizeof(uint64_t))
            self.nodes[ni].bits = bits
            self._expand_from_cache(ni, e)
            return PLAYOUT_DONE
        # Encode without history (the stand-ins only copy a plane), then fill the ladder-history
        # planes from the ladder planes stored at the parent and grandparent.
        encode_c(self.scratch, self.scratch, self.scratch, spatial, buf_h, buf_w, glob)
        bits = self._alloc_bits()
        if bits < 0 or self._make_edges(ni) != 0:
            return -1
        self.nodes[ni].bits = bits
        _plane_to_bits(spatial + P_LADDERED_0 * plane, self.y_size, self.x_size, buf_w, &self.bits[bits])
        _bits_to_plane(self._bits_before(ni, 1), self.y_size, self.x_size, buf_w, spatial + P_LADDERED_1 * plane)
        _bits_to_plane(self._bits_before(ni, 2), self.y_size, self.x_size, buf_w, spatial + P_LADDERED_2 * plane)
        all_alive = _all_pass_alive(spatial, plane, self.y_size, self.x_size, buf_w, self.katago_scoring)
        if ni != self.root and all_alive:
            self._set_terminal(ni)
            return PLAYOUT_DONE
        sym = 0
        if self.p.random_symmetry:
            sym = <int>(_next_u64(self.rng) % <uint64_t>self.num_sym)
            if sym:
                _transform_planes(spatial, NUM_SPATIAL, buf_h, buf_w, self.y_size, self.x_size, sym)
        self.pend_sym[self.num_pending] = sym
        self.pend_canon[self.num_pending] = self.key_sym
        self.nodes[ni].state = NODE_PENDING
        k = ni
        while k >= 0:
            self.nodes[k].in_flight += 1
            k = self.nodes[k].parent
        self.pend_node[self.num_pending] = ni
        self.pend_key[self.num_pending] = key
        self.pend_alive[self.num_pending] = all_alive
        self.num_pending += 1
        return PLAYOUT_LEAF

    cdef void _expand(self, int ni, double w, double l, double mu, double sigma, double value_error,
                      double score_error) noexcept nogil:
        """Make ni expanded (its edge priors are set) and back up its evaluation (mover's view),
        weighted by its predicted errors (see _playout_weight)."""
        cdef Node* n = &self.nodes[ni]
        cdef double wb, lb, mb, u, tw, tu
        if n.pla == C_BLACK:
            wb = w
            lb = l
            mb = mu
        else:
            wb = l
            lb = w
            mb = -mu
        if ni == self.root:
            self._root_priors()
            self._root_ending_bonus()
            if not self.x0_known:
                self.x0_black = mb
                self.x0_known = True
        n.state = NODE_EXPANDED
        self._next_candidate(ni)
        u = self._utility(wb, lb, mb, sigma)
        if n.pass_ends:  # the mover may pass back and end the game: value at least that
            tw = 1.0 if n.pass_end_s > 0 else (0.5 if n.pass_end_s == 0 else 0.0)
            tu = self._utility(tw, 1.0 - tw, n.pass_end_s, 0.0)
            if (tu > u) if n.pla == C_BLACK else (tu < u):
                u, wb, lb, mb, sigma = tu, tw, 1.0 - tw, n.pass_end_s, 0.0
        if self.p.subtree_bias_factor != 0:  # only the utility is corrected
            u = self._bias_node_utility(ni, u)
        if value_error >= 0:
            self.errors_known = True
        n.self_w = self._playout_weight(value_error, score_error, mb)
        self._add_value(ni, u, wb, lb, mb, mb * mb + sigma * sigma, n.self_w)

    cdef void _root_priors(self) noexcept nogil:
        """Keep the raw root policy, then apply the policy temperature and Dirichlet noise."""
        cdef Node* n = &self.nodes[self.root]
        cdef int start = n.edge_start, k, m = n.num_edges
        cdef double total = 0.0, g, temperature
        cdef double* alpha
        memset(self.raw_root, 0, sizeof(self.raw_root))
        for k in range(start, start + m):
            self.raw_root[self._move_index(self.e_loc[k])] = self.e_prior[k]
        self.raw_root_known = True
        if not self.noise:
            return
        temperature = self._root_temperature()
        for k in range(start, start + m):
            self.e_prior[k] = exp(log(max(self.e_prior[k], 1e-30)) / temperature)
            total += self.e_prior[k]
        for k in range(start, start + m):
            self.e_prior[k] /= total
        if self.p.noise_weight <= 0:
            return
        alpha = <double*>malloc(m * sizeof(double))
        if alpha == NULL:
            return  # no memory for noise: the search goes on without it
        _dirichlet_alphas(&self.e_prior[start], m, self.p.dirichlet_alpha_total, self.p.shaped_noise, alpha)
        total = 0.0
        for k in range(m):
            alpha[k] = _gamma(self.rng, alpha[k])  # the draw replaces its alpha
            total += alpha[k]
        for k in range(m):
            g = alpha[k] / total if total > 0 else 1.0 / m
            self.e_prior[start + k] = (1.0 - self.p.noise_weight) * self.e_prior[start + k] + self.p.noise_weight * g
        free(alpha)

    @property
    def root_temperature(self) -> float:
        """The root policy temperature a noised search of the current root uses."""
        if self.root_board is None:
            raise RuntimeError("no root: set_position first")
        return self._root_temperature()

    cdef double _root_temperature(self) noexcept nogil:
        """The root policy temperature at this root's turn (its board's moves so far)."""
        return self.p.root_policy_temperature + (
            self.p.root_policy_temperature_early - self.p.root_policy_temperature) * (
            0.5 ** (self.root_board.num_moves / self.board_len))

    cdef void _expand_from_cache(self, int ni, int e) noexcept nogil:
        cdef Node* n = &self.nodes[ni]
        cdef float* pol = &self.cache.policy[<size_t>e * self.cache.stride]
        cdef float* vals = &self.cache.vals[e * NUM_VALS]
        cdef int k
        cdef double total = 0.0
        if ni == self.root and self.cache.own != NULL:
            self._root_own_from_entry(e)
        for k in range(n.edge_start, n.edge_start + n.num_edges):
            self.e_prior[k] = pol[self._sym_move(self.e_loc[k], self.key_sym)]
            total += self.e_prior[k]
        for k in range(n.edge_start, n.edge_start + n.num_edges):
            self.e_prior[k] = self.e_prior[k] / total if total > 0 else 1.0 / n.num_edges
        self._expand(ni, vals[0], vals[1], vals[3], vals[4], vals[5], vals[6])

    def backup(self, policy, value, score, int offset=0, ownership=None, uncertainty=None) -> None:
        """Apply the evaluations of the pending leaves: rows offset, offset + 1, ... of the
        evaluator's `policy` [B, H*W+1] logits, `value` [B, 3] logits, `score` [B, 2] (mean,
        stdev), optionally `ownership` [B, H, W] (for the ending bias) and `uncertainty` [B, 2]
        (for uncertainty weighting; None: unknown), in the order select_leaves wrote them (H, W:
        the feature buffers' sizes)."""
        cdef float[:, ::1] pol = np.ascontiguousarray(policy, dtype=np.float32)
        cdef float[:, ::1] val = np.ascontiguousarray(value, dtype=np.float32)
        cdef float[:, ::1] sc = np.ascontiguousarray(score, dtype=np.float32)
        cdef float[:, :, ::1] own
        cdef float[:, ::1] unc
        cdef const float* unc_rows = NULL
        _check_outputs(pol, val, sc, offset + self.num_pending)
        if self.num_pending == 0:
            return
        if uncertainty is not None:
            unc = _uncertainty_rows(uncertainty, offset + self.num_pending)
            unc_rows = &unc[offset, 0]
        if ownership is None:
            self._backup(&pol[offset, 0], <int>pol.shape[1], &val[offset, 0], &sc[offset, 0], NULL, 0, unc_rows)
            return
        own = _ownership_rows(ownership, offset + self.num_pending)
        self._backup(&pol[offset, 0], <int>pol.shape[1], &val[offset, 0], &sc[offset, 0], &own[offset, 0, 0],
                     <int>(own.shape[1] * own.shape[2]), unc_rows)

    cdef int _backup(self, const float* policy, int pol_stride, const float* value,
                     const float* score, const float* ownership, int own_stride,
                     const float* uncertainty) except -1:
        cdef int i, n = self.num_pending
        if n == 0:
            return 0
        if pol_stride != self.buf_h * self.buf_w + 1:
            raise ValueError(f"policy rows have {pol_stride} entries but the features were written "
                             f"for {self.buf_h}x{self.buf_w} (+1 for pass)")
        if ownership != NULL and own_stride != self.buf_h * self.buf_w:
            raise ValueError(f"ownership rows have {own_stride} entries, the features {self.buf_h}x{self.buf_w}")
        with nogil:
            for i in range(n):
                self._backup_one(i, policy + <size_t>i * pol_stride, value + i * 3, score + i * 2,
                                 ownership + <size_t>i * own_stride if ownership != NULL else NULL,
                                 uncertainty + i * 2 if uncertainty != NULL else NULL)
        self.num_pending = 0
        return 0

    cdef void _backup_one(self, int i, const float* logits, const float* v, const float* score,
                          const float* ownership, const float* uncertainty) noexcept nogil:
        cdef int ni = self.pend_node[i], k, e, loc, idx, sym = self.pend_sym[i], canon = self.pend_canon[i]
        cdef Node* n = &self.nodes[ni]
        cdef double mx = -1e300, total = 0.0, w, l, nr, vm, mu, sigma, value_error, score_error
        for k in range(n.edge_start, n.edge_start + n.num_edges):
            loc = self.e_loc[k]
            if loc == PASS_LOC:
                idx = self.buf_h * self.buf_w
            elif sym == 0:
                idx = (loc // (self.x_size + 1) - 1) * self.buf_w + loc % (self.x_size + 1) - 1
            else:  # the features were written under sym: the move's point is where sym took it
                idx = _sym_index(sym, self._move_index(loc), self.x_size, self.y_size)
                idx = (idx // self.x_size) * self.buf_w + idx % self.x_size
            self.e_prior[k] = logits[idx]
            if logits[idx] > mx:
                mx = logits[idx]
        for k in range(n.edge_start, n.edge_start + n.num_edges):
            self.e_prior[k] = exp(self.e_prior[k] - mx)
            total += self.e_prior[k]
        for k in range(n.edge_start, n.edge_start + n.num_edges):
            self.e_prior[k] /= total
        vm = max(v[0], max(v[1], v[2]))
        w = exp(v[0] - vm)
        l = exp(v[1] - vm)
        nr = exp(v[2] - vm)
        total = w + l + nr
        w /= total
        l /= total
        nr /= total
        mu = score[0]
        sigma = max(score[1], 0.0)
        value_error = uncertainty[0] if uncertainty != NULL else -1.0
        score_error = uncertainty[1] if uncertainty != NULL else -1.0
        e = self.cache.insert(self.pend_key[i])
        if e >= 0:
            memset(&self.cache.policy[<size_t>e * self.cache.stride], 0, self.cache.stride * sizeof(float))
            for k in range(n.edge_start, n.edge_start + n.num_edges):
                self.cache.policy[<size_t>e * self.cache.stride + self._sym_move(self.e_loc[k], canon)] = self.e_prior[k]
            self.cache.vals[e * NUM_VALS] = w
            self.cache.vals[e * NUM_VALS + 1] = l
            self.cache.vals[e * NUM_VALS + 2] = nr
            self.cache.vals[e * NUM_VALS + 3] = mu
            self.cache.vals[e * NUM_VALS + 4] = sigma
            self.cache.vals[e * NUM_VALS + 5] = value_error
            self.cache.vals[e * NUM_VALS + 6] = score_error
            if canon:
                _map_bits(&self.bits[n.bits], &self.cache.bits[e * self.cache.words], self.x_size, self.y_size,
                          canon, True)
            else:
                memcpy(&self.cache.bits[e * self.cache.words], &self.bits[n.bits], self.words * sizeof(uint64_t))
            self.cache.all_alive[e] = self.pend_alive[i]
            if self.cache.own != NULL:
                if ownership == NULL:
                    self.cache.own[<size_t>e * self.cache.stride] = NAN
                else:
                    for k in range(self.area):
                        self.cache.own[<size_t>e * self.cache.stride + _sym_index(canon, k, self.x_size, self.y_size)] = \
                            self._read_point(ownership, sym, k)
        if ni == self.root and ownership != NULL:
            for k in range(self.area):
                self.root_own[k] = self._read_point(ownership, sym, k)
            self.root_own_known = True
        k = ni  # release the virtual loss along the path
        while k >= 0:
            self.nodes[k].in_flight -= 1
            k = self.nodes[k].parent
        self._expand(ni, w, l, mu, sigma, value_error, score_error)

    cdef inline int _move_index(self, int loc) noexcept nogil:
        if loc == PASS_LOC:
            return self.area
        return (loc // (self.x_size + 1) - 1) * self.x_size + loc % (self.x_size + 1) - 1

    cdef inline float _read_point(self, const float* plane, int s, int k) noexcept nogil:
        """Point k's entry of an output plane [buf_h, buf_w] evaluated under symmetry s."""
        cdef int j = _sym_index(s, k, self.x_size, self.y_size)
        return plane[(j // self.x_size) * self.buf_w + j % self.x_size]

    cdef inline int _sym_move(self, int loc, int s) noexcept nogil:
        """The move index of loc under symmetry s (pass stays pass)."""
        if loc == PASS_LOC or s == 0:
            return self._move_index(loc)
        return _sym_index(s, self._move_index(loc), self.x_size, self.y_size)


# ------------------------------------------------------------------------------ many trees at once

cdef int _check_buffers(Tree tree, float[:, :, :, ::1] spatial, float[:, ::1] globals, int rows) except -1:
    if tree.root_board is None:
        raise RuntimeError("select before set_position")
    if spatial.shape[1] != NUM_SPATIAL or spatial.shape[2] < tree.y_size or spatial.shape[3] < tree.x_size:
        raise ValueError(f"spatial buffer [B, {spatial.shape[1]}, {spatial.shape[2]}, {spatial.shape[3]}] "
                         f"cannot hold {NUM_SPATIAL} planes of a {tree.x_size}x{tree.y_size} board")
    if globals.shape[1] != NUM_GLOBAL:
        raise ValueError(f"globals buffer has {globals.shape[1]} columns, expected {NUM_GLOBAL}")
    if spatial.shape[0] < rows or globals.shape[0] < rows:
        raise ValueError(f"batch buffers have {min(spatial.shape[0], globals.shape[0])} rows, need {rows}")
    return 0


cdef int _check_outputs(float[:, ::1] pol, float[:, ::1] val, float[:, ::1] sc, int rows) except -1:
    if val.shape[1] != 3 or sc.shape[1] != 2:
        raise ValueError(f"value must be [B, 3] and score [B, 2], got [{val.shape[0]}, {val.shape[1]}] "
                         f"and [{sc.shape[0]}, {sc.shape[1]}]")
    if pol.shape[0] < rows or val.shape[0] < rows or sc.shape[0] < rows:
        raise ValueError(f"evaluations have {min(pol.shape[0], val.shape[0], sc.shape[0])} rows, need {rows}")
    return 0


def _uncertainty_rows(uncertainty, int rows):
    """Uncertainty outputs as float32 [B, 2] with at least `rows` rows."""
    unc = np.ascontiguousarray(uncertainty, dtype=np.float32)
    if unc.ndim != 2 or unc.shape[1] != 2 or unc.shape[0] < rows:
        raise ValueError(f"uncertainty must be [B, 2] with at least {rows} rows, got {list(unc.shape)}")
    return unc


def _ownership_rows(ownership, int rows):
    """Ownership outputs as float32 [B, H, W] with at least `rows` rows."""
    own = np.ascontiguousarray(ownership, dtype=np.float32)
    if own.ndim != 3 or own.shape[0] < rows:
        raise ValueError(f"ownership must be [B, H, W] with at least {rows} rows, got {list(own.shape)}")
    return own


def select_batch(list trees, float[:, :, :, ::1] spatial, float[:, ::1] globals, int k=1):
    """select_leaves(k) on every tree, their leaves packed one after another from row 0 of the
    batch buffers. Returns int32 [len(trees)]: leaves per tree (0 for a finished search)."""
    cdef int i, n, offset = 0
    cdef Tree tree
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    counts = np.zeros(len(trees), np.int32)
    cdef int[::1] c = counts
    for i in range(len(trees)):
        tree = <Tree?>trees[i]
        if tree.target_visits <= 0 or tree._done():
            continue
        _check_buffers(tree, spatial, globals, offset + k)
        n = tree._select(k, &spatial[offset, 0, 0, 0], &globals[offset, 0],
                         <int>spatial.shape[2], <int>spatial.shape[3])
        c[i] = n
        offset += n
    return counts


def backup_batch(list trees, counts, policy, value, score, ownership=None, uncertainty=None) -> None:
    """Back up the evaluations of a select_batch: `counts` as it returned, evaluator outputs with
    the leaves' rows in the same packed order (`ownership` and `uncertainty` optional, as in
    Tree.backup)."""
    cdef float[:, ::1] pol = np.ascontiguousarray(policy, dtype=np.float32)
    cdef float[:, ::1] val = np.ascontiguousarray(value, dtype=np.float32)
    cdef float[:, ::1] sc = np.ascontiguousarray(score, dtype=np.float32)
    cdef float[:, :, ::1] own
    cdef float[:, ::1] unc
    cdef int[::1] c = np.ascontiguousarray(counts, dtype=np.int32)
    cdef int i, offset = 0, total = 0, own_stride = 0
    cdef Tree tree
    if c.shape[0] != len(trees):
        raise ValueError(f"{c.shape[0]} counts for {len(trees)} trees")
    for i in range(c.shape[0]):
        total += c[i]
    _check_outputs(pol, val, sc, total)
    if ownership is not None and total > 0:
        own = _ownership_rows(ownership, total)
        own_stride = <int>(own.shape[1] * own.shape[2])
    if uncertainty is not None and total > 0:
        unc = _uncertainty_rows(uncertainty, total)
    for i in range(len(trees)):
        if c[i] == 0:
            continue
        tree = <Tree?>trees[i]
        if tree.num_pending != c[i]:
            raise ValueError(f"tree {i} has {tree.num_pending} pending leaves, counts say {c[i]}")
        tree._backup(&pol[offset, 0], <int>pol.shape[1], &val[offset, 0], &sc[offset, 0],
                     &own[offset, 0, 0] if own_stride else NULL, own_stride,
                     &unc[offset, 0] if uncertainty is not None else NULL)
        offset += c[i]
