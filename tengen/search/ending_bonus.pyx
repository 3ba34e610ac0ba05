# cython: language_level=3
"""Ending bias of the root's moves (`ending_bonus_points` B, paper §6.2.3; KataGo's
rootEndingBonusPoints).

At the root of a position without a ko ban, a move where the net's ownership says the opponent
almost surely owns the point (o <= -0.95, the mover's view) is valued as if it lost
B (o + 0.95) / -0.05 points, and one where the mover almost surely owns it (o >= 0.95)
B (o - 0.95) / 0.05 points, unless it touches an opponent stone or joins two of the mover's chains
one of which is not pass-alive, so that dame and clean-up moves stay free. B is below any real
score step, so it only breaks ties between moves the search finds equal, and ends games sooner.
Needs the root's ownership: from its evaluation, or from the NN cache when that keeps ownership
(`NNCache(..., ownership=True)`). The search adds a root child's bias to its value as the change of
score utility that moving its average score by the bias gives (tengen.search.playouts).
"""
from libc.string cimport memset

from tengen.go.board cimport MAX_ARR, PASS_LOC, Board
from tengen.go.passalive cimport pass_alive_area


cdef bint ending_bonuses(Board board, int pla, const short* locs, int num, const float* own, double points,
                         double* out) noexcept nogil:
    """The ending bias of each of the `num` moves `locs` of `board` (pla to move), in pla's points,
    into out[move index], from the ownership `own` (pla's view, by move index) and B = `points`.
    Whether any is not 0 (False, and out untouched, with B <= 0 or a ko ban)."""
    cdef signed char safe[MAX_ARR]
    cdef int k, d, loc, adj, head
    cdef int offsets[4]
    cdef double o, bonus
    cdef bint touches_opp, joins, any_bonus = False
    if points <= 0 or board.ko_loc >= 0:
        return False
    offsets[0] = -1
    offsets[1] = 1
    offsets[2] = -(board.x_size + 1)
    offsets[3] = board.x_size + 1
    memset(safe, 0, sizeof(safe))
    pass_alive_area(board, safe)
    for k in range(num):
        loc = locs[k]
        bonus = 0.0
        if loc != PASS_LOC:
            o = own[board.move_of(loc)]
            if o <= -0.95:
                bonus = -points * (-0.95 - o) / 0.05
            elif o >= 0.95:
                touches_opp = False
                joins = False
                head = -1
                for d in range(4):  # a neighbour of the mover's in a chain that is not pass-alive
                    adj = loc + offsets[d]
                    if board.color[adj] == 3 - pla:
                        touches_opp = True
                    elif board.color[adj] == pla and safe[adj] != pla and head < 0:
                        head = board.chain_head[adj]
                if head >= 0 and safe[loc] != pla:
                    for d in range(4):
                        adj = loc + offsets[d]
                        if board.color[adj] == pla and board.chain_head[adj] != head:
                            joins = True
                if not touches_opp and not joins:
                    bonus = -points * (o - 0.95) / 0.05
        out[board.move_of(loc)] = bonus
        if bonus != 0:
            any_bonus = True
    return any_bonus
