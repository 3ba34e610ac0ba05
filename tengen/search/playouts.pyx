# cython: language_level=3
"""The search tree's state and its playouts (KataGo paper §5), shaped for batched evaluation:
`PlayoutTree`, the base of tengen.search.mcts's `Tree`.

A playout descends from the root by PUCT, playing each chosen move on a scratch copy of the root
board, and ends at a terminal node or an NN-cache hit (backed up at once) or at a new leaf, whose
input features it writes into the caller's batch buffers; the leaf's evaluation comes back later
(`_backup`). Several leaves of one tree can be in flight: every node on a pending path carries a
virtual loss. The tree lives in C arenas: nodes, edges (move, prior, child) and ladder bits.

Search (paper §5.1-5.4):
- PUCT(c) = V(c) + cpuct P(c) sqrt(sum_c' N(c')) / (1 + N(c)), V from the chooser's point of view.
- First-play urgency: an unvisited child is valued V(n) - c_fpu sqrt(sum of visited children's
  priors), V(n) the parent's average utility; c_fpu = 0 at the root when noise is on.
- Every unvisited child has the same V, so the best of them is the one with the highest prior, and
  the visited children always form a prefix of the edges ordered by prior (ties by position).
  Selection therefore scans only the visited children plus one candidate, and a node's edges are
  ordered lazily, one selection step per new child.
- Root only, when `noise` is on: policy temperature and Dirichlet noise (tengen.search.root_noise);
  forced playouts n = sqrt(2 P sum N) when `forced_playouts` is on (policy target pruning is
  `tengen.search.single_search.prune_visits`).
- Utility = P(win) - P(loss) + c_score E[(2/pi) atan((x - x0) / B)] for a score x ~ N(mu, sigma^2)
  predicted by the net, x0 = the root's predicted score mean at the start of the search, B the
  board's side (sqrt of its area); the expectation comes from a table (tengen.search.score_utility).
- Terminal nodes (two passes, or every point pass-alive: the provably-safe early end of §6.2.3) are
  scored by tengen.go.passalive under the game's rules and keep that exact value.
- A node reached by a pass is valued at least what its mover gets by passing back (the game ends
  with the rules engine's score): the net's value when better for the mover, else that terminal
  value. Without this a search of a few dozen visits sees a pass only through the net's value of
  the position after it, rarely reaches the reply that ends the game, and learns to pass away
  games (the pass collapse of small visit counts: one side passes early, the other passes back).
- At the root, with `ending_bonus_points`, each child's value moves by its ending bias
  (tengen.search.ending_bonus) as a change of score utility.
- Leaves go through the NN cache (tengen.search.nn_cache); with `random_symmetry` their features
  are written under a random symmetry and the cache keys are canonical (tengen.search.symmetry);
  with `subtree_bias_factor` each node's utility is corrected (tengen.search.subtree_bias).

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
negative uncertainty (a net without the error heads) gives w = 1. Visit counts stay whole numbers:
the search's budget, forced playouts and the policy target (tengen.search.single_search) read
them, never the weights.

Variance-scaled cPUCT (`cpuct_variance_scaling`; KataGo's v1.9): the cpuct of the choice at node n
is multiplied by 1 + k (sd / sd0 - 1), sd the stdev of the utilities of n's playouts with a prior
mixed in, sd = sqrt(((Ubar^2 + sd0^2) m + U2bar W) / (m + W - 1) - Ubar^2) with W the node's weight,
Ubar and U2bar its weighted mean utility and squared utility (sd = sd0 while W <= 1), sd0 = 0.40,
m = 2, k = 0.85 (KataGo's cpuctUtilityStdevPrior, PriorWeight and Scale). Only the nodes' own
utilities enter U2bar (the subtree bias correction's later adjustments of u_sum do not).

With both off every weight is 1 and the search is bit for bit what it was without them.
"""
from libc.math cimport M_PI, NAN, exp, sqrt
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from tengen.go.board cimport C_BLACK, LEGAL, MAX_ARR, PASS_LOC, Board
from tengen.go.features cimport encode_c
from tengen.go.passalive cimport final_score_c
from tengen.search.ending_bonus cimport ending_bonuses
from tengen.search.leaf_planes cimport (NUM_GLOBAL, NUM_SPATIAL, P_LADDERED_0, P_LADDERED_1, P_LADDERED_2,
                                        all_pass_alive, bits_to_plane, plane_to_bits)
from tengen.search.nn_cache cimport NUM_VALS, NNCache
from tengen.search.rng cimport mix, next_u64, seed_state
from tengen.search.root_noise cimport noise_priors, root_temperature
from tengen.search.score_utility cimport expected_atan_c
from tengen.search.subtree_bias cimport (bias_bucket_key, bias_node_utility, buckets_clear, buckets_free,
                                         buckets_init, update_subtree_bias)
from tengen.search.symmetry cimport map_bits, sym_index, symmetric_key, transform_planes
from tengen.search.tree cimport (NODE_EXPANDED, NODE_NEW, NODE_PENDING, NODE_TERMINAL, PLAYOUT_BUDGET,
                                 PLAYOUT_COLLISION, PLAYOUT_DONE, PLAYOUT_LEAF, Node, value_sign)

cdef double VIRTUAL_LOSS = 1.0   # utility a pending playout counts as, against the chooser
cdef double FORCED_BONUS = 1e9   # PUCT of a root child owed forced playouts
cdef double UNCERTAINTY_COEFF = 0.25       # C: the weight of a playout is C / (U + C / W_max)
cdef double UNCERTAINTY_MAX_WEIGHT = 8.0   # W_max
cdef double CPUCT_STDEV_PRIOR = 0.40       # sd0
cdef double CPUCT_STDEV_PRIOR_WEIGHT = 2.0  # m
cdef double CPUCT_STDEV_SCALE = 0.85       # k


cdef inline double _terminal_weight(PlayoutTree tree) noexcept nogil:
    """A terminal node's exact value counts as the most certain playout (as 1 while the net has
    given no uncertainty, as every other playout then)."""
    return UNCERTAINTY_MAX_WEIGHT if tree.p.uncertainty_weighting and tree.errors_known else 1.0


cdef class PlayoutTree:
    """The state of one search tree and the playouts on it (see the module docstring); the search's
    parameters are set here, from the keyword arguments of tengen.search.mcts.Tree."""

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
        seed_state(self.rng, seed)
        self.root = -1
        buckets_init(&self.buckets)

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
        buckets_free(&self.buckets)

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
        buckets_clear(&self.buckets)
        self.root = self._new_node(-1, -1, self.root_board.next_color)
        if self.root < 0:
            raise MemoryError()
        return 0

    # -------------------------------------------------------------- playouts

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
            self._add_value(ni, n.term_u, n.term_w, n.term_l, n.term_s, n.term_s * n.term_s, _terminal_weight(self))
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
        cdef double sign = value_sign(n.pla)
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
            expected_atan_c((shifted - self.x0_black) / self.board_len, sd / self.board_len)
            - expected_atan_c((mu - self.x0_black) / self.board_len, sd / self.board_len))

    cdef void _root_ending_bonus(self) noexcept nogil:
        """The ending bias of every root move (tengen.search.ending_bonus), from root_own."""
        cdef Node* r = &self.nodes[self.root]
        self.any_root_bonus = False
        if self.root_own_known:
            self.any_root_bonus = ending_bonuses(self.root_board, r.pla, &self.e_loc[r.edge_start], r.num_edges,
                                                 self.root_own, self.p.ending_bonus_points, self.root_bonus)

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
            update_subtree_bias(&self.buckets, self.nodes, parent, self.p.subtree_bias_factor,
                                self.p.subtree_bias_exponent)

    cdef double _utility(self, double w_black, double l_black, double mu_black, double sigma) noexcept nogil:
        return (w_black - l_black) + self.p.score_utility_weight * expected_atan_c(
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
        n.self_w = _terminal_weight(self)
        self._add_value(ni, n.term_u, n.term_w, n.term_l, x, x * x, n.self_w)

    # -------------------------------------------------------------- leaves

    cdef uint64_t _position_key(self) noexcept nogil:
        """NN cache key of the scratch position: what the features see of it. With random
        symmetry: the smallest key over the board's symmetries (key_sym: the one that gives it)."""
        cdef uint64_t h, best = 0
        cdef int i, m, s
        self.key_sym = 0
        if not self.p.random_symmetry:
            h = mix(self.scratch.pos_hash ^ self.rules_key)
            h = mix(h ^ (<uint64_t>self.scratch.next_color << 40)
                    ^ (<uint64_t>(self.scratch.ko_loc + 2) << 44))
            for i in range(min(5, self.scratch.num_moves)):
                m = self.scratch.num_moves - 1 - i
                h = mix(h ^ (<uint64_t>(self.scratch.hist_loc[m] + 1) << 8)
                        ^ (<uint64_t>self.scratch.hist_color[m] << 4) ^ <uint64_t>(i + 1))
            return h
        for s in range(self.num_sym):
            h = symmetric_key(self.scratch, s, self.rules_key)
            if s == 0 or h < best:
                best = h
                self.key_sym = s
        return best

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
            self.nodes[ni].bias_bucket = bias_bucket_key(self.scratch)
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
                map_bits(&self.cache.bits[e * self.cache.words], &self.bits[bits], self.x_size, self.y_size,
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
        plane_to_bits(spatial + P_LADDERED_0 * plane, self.y_size, self.x_size, buf_w, &self.bits[bits])
        bits_to_plane(self._bits_before(ni, 1), self.y_size, self.x_size, buf_w, spatial + P_LADDERED_1 * plane)
        bits_to_plane(self._bits_before(ni, 2), self.y_size, self.x_size, buf_w, spatial + P_LADDERED_2 * plane)
        all_alive = all_pass_alive(spatial, plane, self.y_size, self.x_size, buf_w, self.katago_scoring)
        if ni != self.root and all_alive:
            self._set_terminal(ni)
            return PLAYOUT_DONE
        sym = 0
        if self.p.random_symmetry:
            sym = <int>(next_u64(self.rng) % <uint64_t>self.num_sym)
            if sym:
                transform_planes(spatial, NUM_SPATIAL, buf_h, buf_w, self.y_size, self.x_size, sym)
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
            u = bias_node_utility(&self.buckets, n, self.p.subtree_bias_factor, u)
        if value_error >= 0:
            self.errors_known = True
        n.self_w = self._playout_weight(value_error, score_error, mb)
        self._add_value(ni, u, wb, lb, mb, mb * mb + sigma * sigma, n.self_w)

    cdef void _root_priors(self) noexcept nogil:
        """Keep the raw root policy, then apply the policy temperature and Dirichlet noise
        (tengen.search.root_noise)."""
        cdef Node* n = &self.nodes[self.root]
        cdef int start = n.edge_start, k, m = n.num_edges
        memset(self.raw_root, 0, sizeof(self.raw_root))
        for k in range(start, start + m):
            self.raw_root[self._move_index(self.e_loc[k])] = self.e_prior[k]
        self.raw_root_known = True
        if self.noise:
            noise_priors(&self.e_prior[start], m, self._root_temperature(), self.p.noise_weight,
                         self.p.dirichlet_alpha_total, self.p.shaped_noise, self.rng)

    cdef double _root_temperature(self) noexcept nogil:
        """The root policy temperature at this root's turn (its board's moves so far)."""
        return root_temperature(self.p.root_policy_temperature, self.p.root_policy_temperature_early,
                                self.root_board.num_moves, self.board_len)

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

    cdef void _root_own_from_entry(self, int e) noexcept nogil:
        """root_own from cache entry e (stored canonically: mapped back by key_sym)."""
        cdef float* own = &self.cache.own[<size_t>e * self.cache.stride]
        cdef int k
        self.root_own_known = own[0] == own[0]  # NaN: stored without ownership
        for k in range(self.area):
            self.root_own[k] = own[sym_index(self.key_sym, k, self.x_size, self.y_size)]

    # -------------------------------------------------------------- backup

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
                idx = sym_index(sym, self._move_index(loc), self.x_size, self.y_size)
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
                map_bits(&self.bits[n.bits], &self.cache.bits[e * self.cache.words], self.x_size, self.y_size,
                         canon, True)
            else:
                memcpy(&self.cache.bits[e * self.cache.words], &self.bits[n.bits], self.words * sizeof(uint64_t))
            self.cache.all_alive[e] = self.pend_alive[i]
            if self.cache.own != NULL:
                if ownership == NULL:
                    self.cache.own[<size_t>e * self.cache.stride] = NAN
                else:
                    for k in range(self.area):
                        self.cache.own[<size_t>e * self.cache.stride + sym_index(canon, k, self.x_size, self.y_size)] = \
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
