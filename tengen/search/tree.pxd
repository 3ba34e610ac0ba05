# cython: language_level=3
"""C-level layout of the search tree (tengen.search.playouts runs the playouts on it, tengen.search.mcts
is its game-facing side): the nodes, the search's parameters, the states of nodes and playouts."""
from libc.stdint cimport uint64_t

from tengen.go.board cimport C_BLACK

# Node states.
cdef enum:
    NODE_NEW = 0        # created, nothing known yet
    NODE_PENDING = 1    # features written, waiting for its evaluation
    NODE_EXPANDED = 2   # evaluated; its edges have priors
    NODE_TERMINAL = 3   # game over here (two passes or everything pass-alive); exact value

# What one playout attempt ended in.
cdef enum:
    PLAYOUT_LEAF = 0       # a leaf waits for an evaluation (features written to the slot)
    PLAYOUT_DONE = 1       # finished at once (terminal node or NN cache hit), backed up
    PLAYOUT_COLLISION = 2  # reached a leaf already waiting for its evaluation; nothing changed
    PLAYOUT_BUDGET = 3     # the search has all the visits it needs (counting those in flight)


cdef struct SearchParams:
    double cpuct
    double fpu_reduction        # inside the tree (and at the root without noise)
    double root_fpu_reduction   # at the root when noise is on
    double noise_weight
    double dirichlet_alpha_total
    double root_policy_temperature        # late in the game
    double root_policy_temperature_early  # at the first move, decaying towards the late one
    bint shaped_noise                      # half the Dirichlet alpha shaped by the log policy
    bint random_symmetry                   # each evaluation under a random symmetry, cache keys canonical
    double ending_bonus_points             # the root's ownership bias (paper 6.2.3), in points; 0 = off
    double subtree_bias_factor             # lambda of the subtree value bias correction; 0 = off
    double subtree_bias_exponent           # alpha: a node weighs (its child visits)^alpha in its bucket
    double score_utility_weight  # c_score
    bint uncertainty_weighting             # each playout weighted by the net's uncertainty (playouts.pyx)
    bint cpuct_variance_scaling            # cpuct scaled by each node's utility stdev (playouts.pyx)


cdef struct Node:
    int parent                 # -1 at the root
    int edge_start             # first edge in the edge arrays, -1 before the legal moves are known
    int num_edges              # legal moves (pass included)
    int num_expanded           # edges [0, num_expanded) have child nodes; edge num_expanded holds
                               # the highest prior of the rest (see _next_candidate)
    int visits                 # completed playouts through this node
    double weight              # their summed weights (= visits unless uncertainty weighting)
    double self_w              # the weight of the node's own evaluation (its first playout)
    int in_flight              # playouts through it waiting for an evaluation (virtual loss)
    int bits                   # offset of its LADDERED_0 bits in the bit arena, -1 if unknown
    int move                   # location of the move that led here (-1 at the root)
    double u_sum               # sums over visits, each times its weight, all from Black's view:
    double w_sum               #   utility, P(Black wins), P(Black loses),
    double l_sum
    double s_sum               #   score mean (Black minus White),
    double s2_sum              #   E[score^2] = mean^2 + stdev^2
    double u2_sum              #   utility^2 (for the variance-scaled cpuct)
    double term_u              # terminal nodes: their exact values (Black's view)
    double term_w
    double term_l
    double term_s
    double pass_end_s          # after a pass: the score (Black's view) if the mover passes too
    unsigned char pass_ends    # the mover can end the game by passing (the last move was a pass)
    unsigned char pla          # player to move at this node
    unsigned char state
    # Subtree value bias correction (all 0 while it is off); after the fields the search reads most.
    uint64_t bias_bucket       # the node's bucket, 0 for none (the root, terminal nodes)
    double nn_u                # the net's utility of the node (Black's view, pass-end adjusted)
    double node_u              # what the node itself counts in u_sum: nn_u + lambda ObsBias(bucket)
    double bias_err_w          # its current share of its bucket's sums: ObsError * weight,
    double bias_weight         #   and weight = (visits - 1)^alpha


cdef inline double value_sign(int pla) noexcept nogil:
    """+1 for Black, -1 for White: a node's sums (Black's view) times this are pla's view."""
    return 1.0 if pla == C_BLACK else -1.0
