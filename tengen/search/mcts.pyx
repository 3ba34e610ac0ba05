# cython: language_level=3
"""Monte-Carlo tree search in C arenas (KataGo paper §5), shaped for batched evaluation: `Tree`, the
search tree of one game.

A `Tree` searches one position. `select_leaves(k, spatial, globals)` runs playouts until `k` leaves
wait for an evaluation, writing each leaf's input features into the caller's batch buffers;
`backup(policy, value, score)` applies the evaluations (the Evaluator protocol's outputs, rows in
the same order). Playouts that end at a terminal node or an NN-cache hit complete at once. Several
leaves of one tree can be in flight: every node on a pending path carries a virtual loss.
`select_batch` / `backup_batch` do the same for many trees with one call, so a runner that plays G
games pays no Python cost per game per step.

`Tree` is the game-facing side: positions (with the ladder history of the two before), searches,
moving on by a move with the searched subtree kept, and reading the tree. The search itself lives
in modules by concern, each describing its part:
- tengen.search.playouts: `PlayoutTree`, the base of `Tree`: the tree's state and its playouts
  (PUCT, first-play urgency, the utility, terminal and pass-end values, uncertainty-weighted
  playouts, variance-scaled cPUCT, leaf evaluation requests, expansion, backup);
- tengen.search.tree (a .pxd): the C layout of nodes and search parameters;
- tengen.search.nn_cache: `NNCache`, the evaluations shared by any number of trees;
- tengen.search.root_noise: the root's policy temperature and Dirichlet noise;
- tengen.search.ending_bonus: the root's ending bias;
- tengen.search.symmetry: random symmetry and the canonical cache keys it needs;
- tengen.search.subtree_bias: the subtree value bias correction;
- tengen.search.score_utility: the expected score utility's table;
- tengen.search.leaf_planes: the feature planes the search reads and patches;
- tengen.search.rng (a .pxd): the search's random numbers.
"""
from libc.math cimport sqrt
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

import numpy as np

from tengen.go.board cimport LEGAL, Board
from tengen.search.leaf_planes cimport MAX_WORDS, NUM_GLOBAL, NUM_SPATIAL, P_LADDERED_0, plane_to_bits
from tengen.search.playouts cimport PlayoutTree
from tengen.search.rng cimport mix
from tengen.search.subtree_bias cimport rebuild_buckets
from tengen.search.tree cimport NODE_EXPANDED, NODE_PENDING, NODE_TERMINAL, Node, value_sign

from tengen.go import features as _features


cdef class Tree(PlayoutTree):
    """The search tree of one game (see the module docstring).

    Parameters default to KataGo's self-play values; `seed` drives the Dirichlet noise. Typical
    use: set_position(board, prev1, prev2); start_search(visits, ...); then select_leaves /
    backup until `done`; read root_children() / root_value(); advance(move) or set_position.
    """

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
        self.rules_key = mix(<uint64_t>(board.rules.ko_code + 4 * <int>board.rules.suicide
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
        plane_to_bits(&sp[P_LADDERED_0, 0, 0], board.y_size, board.x_size, board.x_size, out)
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
            if (self.p.subtree_bias_factor != 0
                    and rebuild_buckets(&self.buckets, self.nodes, self.num_nodes, self.root) != 0):
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
        return value_sign(self.root_board.next_color) * self.x0_black

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
        cdef double sign = value_sign(r.pla)
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
            out[name] = np.zeros(self.buckets.count, np.uint64 if name == "bucket_keys" else np.float64)
        for k in range(self.buckets.mask + 1):
            if self.buckets.keys[k] != 0:
                out["bucket_keys"][nb] = self.buckets.keys[k]
                out["bucket_error_weight"][nb] = self.buckets.err_w[k]
                out["bucket_weight"][nb] = self.buckets.weight[k]
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
        cdef double n = r.weight, sign = value_sign(r.pla)
        w = r.w_sum / n
        l = r.l_sum / n
        mean = r.s_sum / n
        var = max(0.0, r.s2_sum / n - mean * mean)
        return {"win": w if sign > 0 else l, "loss": l if sign > 0 else w,
                "no_result": max(0.0, 1.0 - w - l), "utility": sign * r.u_sum / n,
                "score_mean": sign * mean, "score_stdev": sqrt(var)}

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

    @property
    def root_temperature(self) -> float:
        """The root policy temperature a noised search of the current root uses."""
        if self.root_board is None:
            raise RuntimeError("no root: set_position first")
        return self._root_temperature()

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


# ------------------------------------------------------------------------------ many trees at once

cdef int _check_buffers(PlayoutTree tree, float[:, :, :, ::1] spatial, float[:, ::1] globals, int rows) except -1:
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
