# cython: language_level=3
"""The search tree's state and its playouts (playouts.pyx), declared for tengen.search.mcts's `Tree`,
which subclasses it and reads its attributes directly."""
from libc.stdint cimport uint64_t

from tengen.go.board cimport MAX_AREA, PASS_LOC, Board
from tengen.search.leaf_planes cimport MAX_WORDS
from tengen.search.nn_cache cimport NNCache
from tengen.search.subtree_bias cimport BiasBuckets
from tengen.search.symmetry cimport sym_index
from tengen.search.tree cimport Node, SearchParams


cdef class PlayoutTree:
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
    cdef BiasBuckets buckets                # the subtree value bias buckets (tengen.search.subtree_bias)

    # arenas
    cdef int _reserve_nodes(self, int extra) noexcept nogil
    cdef int _reserve_edges(self, int extra) noexcept nogil
    cdef int _alloc_bits(self) noexcept nogil
    cdef int _new_node(self, int parent, int move, int pla) noexcept nogil
    cdef int _clear_tree(self) except -1

    # playouts
    cdef int _select(self, int k, float* spatial, float* glob, int buf_h, int buf_w) except -1
    cdef int _playout(self, float* spatial, float* glob, int buf_h, int buf_w) noexcept nogil
    cdef int _select_edge(self, int ni) noexcept nogil
    cdef double _cpuct_stdev_factor(self, Node* n) noexcept nogil
    cdef double _playout_weight(self, double value_error, double score_error, double mu_black) noexcept nogil
    cdef double _ending_utility(self, Node* ch, double points) noexcept nogil
    cdef void _root_ending_bonus(self) noexcept nogil
    cdef void _next_candidate(self, int ni) noexcept nogil
    cdef int _new_child(self, int ni, int ei) noexcept nogil
    cdef void _add_value(self, int ni, double u, double w, double l, double s, double s2,
                         double weight) noexcept nogil
    cdef double _utility(self, double w_black, double l_black, double mu_black, double sigma) noexcept nogil
    cdef void _set_terminal(self, int ni) noexcept nogil

    # leaves: keys, edges, evaluation requests, expansion
    cdef uint64_t _position_key(self) noexcept nogil
    cdef int _make_edges(self, int ni) noexcept nogil
    cdef uint64_t* _bits_before(self, int ni, int up) noexcept nogil
    cdef int _evaluate_new(self, int ni, float* spatial, float* glob, int buf_h, int buf_w) noexcept nogil
    cdef void _expand(self, int ni, double w, double l, double mu, double sigma, double value_error,
                      double score_error) noexcept nogil
    cdef void _root_priors(self) noexcept nogil
    cdef double _root_temperature(self) noexcept nogil
    cdef void _expand_from_cache(self, int ni, int e) noexcept nogil
    cdef void _root_own_from_entry(self, int e) noexcept nogil

    # backup
    cdef int _backup(self, const float* policy, int pol_stride, const float* value,
                     const float* score, const float* ownership, int own_stride,
                     const float* uncertainty) except -1
    cdef void _backup_one(self, int i, const float* logits, const float* v, const float* score,
                          const float* ownership, const float* uncertainty) noexcept nogil

    cdef inline bint _done(self) noexcept:
        """The root has all its visits and nothing is pending."""
        return (self.root >= 0 and self.target_visits > 0 and self.num_pending == 0
                and self.nodes[self.root].visits >= self.target_visits)

    cdef inline int _move_index(self, int loc) noexcept nogil:
        if loc == PASS_LOC:
            return self.area
        return (loc // (self.x_size + 1) - 1) * self.x_size + loc % (self.x_size + 1) - 1

    cdef inline float _read_point(self, const float* plane, int s, int k) noexcept nogil:
        """Point k's entry of an output plane [buf_h, buf_w] evaluated under symmetry s."""
        cdef int j = sym_index(s, k, self.x_size, self.y_size)
        return plane[(j // self.x_size) * self.buf_w + j % self.x_size]

    cdef inline int _sym_move(self, int loc, int s) noexcept nogil:
        """The move index of loc under symmetry s (pass stays pass)."""
        if loc == PASS_LOC or s == 0:
            return self._move_index(loc)
        return sym_index(s, self._move_index(loc), self.x_size, self.y_size)
