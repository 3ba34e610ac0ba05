# cython: language_level=3
"""Subtree value bias correction (`subtree_bias_factor` lambda, `subtree_bias_exponent` alpha;
KataGo's "other methods" notes, which use lambda = 0.35, alpha = 0.8): the buckets and the walk that
keeps a playout's path corrected.

It learns, during one search, how far the net's utility misjudges a local sequence and corrects for
it wherever the sequence recurs. A node's u_sum is its own NodeUtility plus its children's u_sums,
with NodeUtility(n) = NNUtility(n) + lambda ObsBias(B(n)): NNUtility the net's utility of n (after
the pass-end rule), B(n) its bucket, a hash of the last mover, the last two moves, the 5x5 pattern
around the last move (none after a pass) with which of its stones are in atari, and the simple-ko
ban (the root and terminal nodes have none). ObsBias(B) averages ObsError(n) = (children's u_sum /
children's visits) - NNUtility(n) over the nodes of B that have children, each weighted
(visits - 1)^alpha. After each playout's values are added, a walk from the leaf's parent to the
root replaces each node's share of its bucket's two sums, gives the node the bucket's new ObsBias
and carries the change of its NodeUtility into every u_sum above: O(depth) a playout; nodes off the
path keep their NodeUtility until a playout passes them again (as in KataGo). Only the utility is
corrected; win, loss and score sums stay the net's. The buckets go with the tree, and when
`advance` keeps a subtree they are rebuilt from the kept nodes' shares (its new root loses its
bucket and correction). At lambda = 0 none of this runs.
"""
from libc.math cimport pow
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from tengen.go.board cimport C_EMPTY, PASS_LOC, Board
from tengen.search.rng cimport mix
from tengen.search.tree cimport Node

cdef double BIAS_MIN_WEIGHT = 1e-9  # a bucket with less weight has no bias (rounding leftovers)
cdef int BIAS_MIN_SLOTS = 1024      # first size of the bucket table (a power of two)


cdef void buckets_init(BiasBuckets* b) noexcept nogil:
    """No table yet: the first bucket makes one."""
    b.keys = NULL
    b.err_w = NULL
    b.weight = NULL
    b.mask = -1
    b.count = 0


cdef void buckets_free(BiasBuckets* b) noexcept nogil:
    free(b.keys)
    free(b.err_w)
    free(b.weight)
    buckets_init(b)


cdef void buckets_clear(BiasBuckets* b) noexcept nogil:
    if b.count:
        memset(b.keys, 0, (b.mask + 1) * sizeof(uint64_t))
        b.count = 0


cdef int _bucket_slot(BiasBuckets* b, uint64_t key, bint create) noexcept nogil:
    """The table slot of bucket `key`; when it has none, a new empty one if `create`, else -1.
    -1 also when memory runs out."""
    cdef int i
    if b.mask < 0:
        if not create or _grow_buckets(b) != 0:
            return -1
    i = <int>(key & <uint64_t>b.mask)
    while b.keys[i] != 0:
        if b.keys[i] == key:
            return i
        i = (i + 1) & b.mask
    if not create:
        return -1
    if 2 * (b.count + 1) > b.mask + 1:
        if _grow_buckets(b) != 0:
            return -1
        return _bucket_slot(b, key, True)
    b.keys[i] = key
    b.err_w[i] = 0.0
    b.weight[i] = 0.0
    b.count += 1
    return i


cdef int _grow_buckets(BiasBuckets* b) noexcept nogil:
    """Double the bucket table (or make its first one), keeping every bucket; -1: no memory."""
    cdef int old_slots = b.mask + 1, slots = max(BIAS_MIN_SLOTS, 2 * old_slots), k, i
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
        if b.keys[k] != 0:
            i = <int>(b.keys[k] & <uint64_t>(slots - 1))
            while keys[i] != 0:
                i = (i + 1) & (slots - 1)
            keys[i] = b.keys[k]
            err_w[i] = b.err_w[k]
            weight[i] = b.weight[k]
    free(b.keys)
    free(b.err_w)
    free(b.weight)
    b.keys = keys
    b.err_w = err_w
    b.weight = weight
    b.mask = slots - 1
    return 0


cdef inline double _bucket_bias(BiasBuckets* b, int slot) noexcept nogil:
    """ObsBias of the bucket in `slot` (0 while it has no weight)."""
    if slot < 0 or b.weight[slot] <= BIAS_MIN_WEIGHT:
        return 0.0
    return b.err_w[slot] / b.weight[slot]


cdef uint64_t bias_bucket_key(Board board) noexcept nogil:
    """The bucket of `board`'s position (a tree node other than the root): the last mover, the
    last move and the one before it, the 5x5 pattern around the last move (unless a pass) with the
    stones in it that are in atari, and the simple-ko ban. Never 0."""
    cdef int m = board.num_moves, last = board.hist_loc[m - 1]
    cdef int stride = board.x_size + 1, x0, y0, x, y, loc, c, code, k = 0
    cdef uint64_t pattern[2]
    cdef uint64_t h
    pattern[0] = 0
    pattern[1] = 0
    if last != PASS_LOC:
        x0 = last % stride - 1
        y0 = last // stride - 1
        for y in range(y0 - 2, y0 + 3):
            for x in range(x0 - 2, x0 + 3):
                if x < 0 or y < 0 or x >= board.x_size or y >= board.y_size:
                    code = 3  # off the board
                else:
                    loc = (y + 1) * stride + x + 1
                    c = board.color[loc]
                    code = c  # empty, black, white: 0, 1, 2; in atari: 4, 5
                    if c != C_EMPTY and board.libs[board.chain_head[loc]] == 1:
                        code = c + 3
                pattern[k // 21] |= (<uint64_t>code) << (3 * (k % 21))  # 3 bits a point: exact
                k += 1
    h = mix(0x5B7EE0B1A5ULL ^ board.hist_color[m - 1])
    h = mix(h ^ (<uint64_t>(last + 1) << 8)
            ^ (<uint64_t>(board.hist_loc[m - 2] + 1 if m >= 2 else 0) << 24))
    h = mix(h ^ pattern[0])
    h = mix(h ^ pattern[1] ^ (<uint64_t>(board.ko_loc + 1) << 16))
    return h if h != 0 else 1


cdef double bias_node_utility(BiasBuckets* b, Node* n, double factor, double u) noexcept nogil:
    """NodeUtility of node n, evaluated just now with utility u: u plus lambda = factor times its
    bucket's observed bias (it adds nothing to the bucket before it has children)."""
    n.nn_u = u
    n.node_u = u
    if n.bias_bucket != 0:
        n.node_u = u + factor * _bucket_bias(b, _bucket_slot(b, n.bias_bucket, False))
    return n.node_u


cdef void update_subtree_bias(BiasBuckets* b, Node* nodes, int ni, double factor, double exponent) noexcept nogil:
    """After a playout's values were added: from ni (the leaf's parent) up to the root, move each
    node's observed error and weight in its bucket to their new values, take its new NodeUtility
    from the bucket's bias (lambda = factor, alpha = exponent), and carry the NodeUtility changes
    into the u_sum of every node above. Nodes off the path keep their NodeUtility until a playout
    passes them."""
    cdef double carry = 0.0, child_visits, err, weight, node_u
    cdef int slot
    cdef Node* n
    while ni >= 0:
        n = &nodes[ni]
        n.u_sum += carry
        if n.bias_bucket != 0:
            slot = _bucket_slot(b, n.bias_bucket, True)
            if slot >= 0:  # (out of memory: the node keeps its old share and NodeUtility)
                child_visits = n.visits - 1  # >= 1: this playout went through a child
                err = (n.u_sum - n.self_w * n.node_u) / (n.weight - n.self_w) - n.nn_u
                weight = pow(child_visits, exponent)
                b.err_w[slot] += err * weight - n.bias_err_w
                b.weight[slot] += weight - n.bias_weight
                n.bias_err_w = err * weight
                n.bias_weight = weight
                node_u = n.nn_u + factor * _bucket_bias(b, slot)
                carry += n.self_w * (node_u - n.node_u)
                n.u_sum += n.self_w * (node_u - n.node_u)
                n.node_u = node_u
        ni = n.parent


cdef int rebuild_buckets(BiasBuckets* b, Node* nodes, int num_nodes, int root) noexcept nogil:
    """After the tree kept a subtree: its root loses its bucket and its correction, and the
    buckets hold the kept nodes' shares only. -1 when memory runs out."""
    cdef Node* n = &nodes[root]
    cdef int ni, slot
    n.u_sum -= n.self_w * (n.node_u - n.nn_u)
    n.node_u = n.nn_u
    n.bias_bucket = 0
    n.bias_err_w = 0.0
    n.bias_weight = 0.0
    buckets_clear(b)
    for ni in range(num_nodes):
        n = &nodes[ni]
        if n.bias_bucket != 0 and n.bias_weight > 0:
            slot = _bucket_slot(b, n.bias_bucket, True)
            if slot < 0:
                return -1
            b.err_w[slot] += n.bias_err_w
            b.weight[slot] += n.bias_weight
    return 0
