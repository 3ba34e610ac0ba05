# cython: language_level=3
"""Pass-alive stones and territory (Benson's algorithm), KataGo's scoring, and the early end.

KataGo paper §6.2.3: a group is *pass-alive* if the opponent cannot capture any of its stones
even with unboundedly many consecutive moves; a maximal connected non-p region is *pass-alive
territory* of p if only p borders it, every bordering chain is pass-alive, and at most one of its
points is not adjacent to a bordering chain. Under KataGo's scoring such territory counts for p
even with dead opponent stones inside; everything else is scored as Tromp-Taylor area.

Benson's algorithm, for player p. Regions are the maximal connected sets of non-p points
(empty points and opponent stones). A region is *vital* to a p chain when the opponent can never
take away that chain's last liberty in the region. Start with every p chain and region; then
repeat until nothing changes: drop each chain with fewer than two vital regions left, and drop
each region that borders a dropped chain. The chains left are pass-alive: no one of them can be
the first captured, because the move filling a vital region's last empty point leaves the stones
in it without a liberty while every remaining chain still has a liberty in its other vital region,
so that move captures nothing and is suicide.

Suicide. When suicide is illegal, that move is simply forbidden, so a region is vital to a chain
when all its *empty* points are liberties of the chain: the opponent stones inside can never
disappear (p passes and the opponent cannot remove its own stones). When multi-stone suicide is
legal the opponent may play that move: its stones in the region (old ones included) leave the
board, which turns points that were opponent stones into empty points. If such a point is not
adjacent to the chain, the opponent can then refill only the chain's liberties in the region and
keep that point as its own liberty; so the chain keeps a guaranteed liberty in the region only if
*every* point of the region, stone or empty, is adjacent to it. (Single-stone suicide is never
legal, but removing an existing opponent stone by suicide always takes a multi-stone chain.)
A region also needs at least one empty point to give the chain a liberty at all.
"""
from libc.string cimport memset

import numpy as np

from tengen.go.board cimport Board, C_BLACK, C_EMPTY, C_WALL, C_WHITE, MAX_AREA, MAX_ARR


cdef inline bint _adjacent_to_chain(Board b, int loc, int pla, short* chain_idx, int ci) noexcept nogil:
    """Whether loc touches a stone of pla's chain number ci."""
    cdef int i, n
    for i in range(4):
        n = loc + b.adj[i]
        if b.color[n] == pla and chain_idx[b.chain_head[n]] == ci:
            return True
    return False


cdef inline bint _adjacent_to_color(Board b, int loc, int pla) noexcept nogil:
    cdef int i
    for i in range(4):
        if b.color[loc + b.adj[i]] == pla:
            return True
    return False


cdef void pass_alive_for(Board b, int pla, signed char* out) noexcept nogil:
    cdef int opp = 3 - pla
    cdef int n_loc = b.arr_size
    # p chains, numbered by their heads.
    cdef short chain_idx[MAX_ARR]
    cdef int num_chains = 0
    cdef bint chain_alive[MAX_AREA]
    cdef int vital_count[MAX_AREA]
    cdef int chain_stamp[MAX_AREA]
    # Regions: region r's points are reg_pts[reg_start[r]:reg_start[r + 1]].
    cdef short region_of[MAX_ARR]
    cdef short reg_pts[MAX_AREA]
    cdef int reg_start[MAX_AREA + 1]
    cdef int num_regions = 0
    cdef int reg_empty[MAX_AREA]
    cdef bint reg_alive[MAX_AREA]
    # Chains the region is vital to (at most 4: all of them touch its first required point).
    cdef short reg_vital[MAX_AREA][4]
    cdef int reg_num_vital[MAX_AREA]
    # Chains bordering region r: border[border_start[r]:border_start[r + 1]].
    cdef short border[4 * MAX_AREA]
    cdef int border_start[MAX_AREA + 1]
    cdef short cand[4]
    cdef int loc, head, i, j, k, n, r, c, ci, top, num_cand, kept, first, lonely, num_border
    cdef bint changed, need, any_two_vital = False

    # Number pla's chains.
    for loc in range(n_loc):
        if b.color[loc] == pla and b.chain_head[loc] == loc:
            chain_idx[loc] = num_chains
            chain_alive[num_chains] = True
            vital_count[num_chains] = 0
            chain_stamp[num_chains] = -1
            num_chains += 1
    if num_chains == 0:
        return  # no stones, nothing alive, and no territory (it needs a bordering chain)

    # Flood the regions; each region's points are contiguous in reg_pts (the flood's queue).
    for loc in range(n_loc):
        region_of[loc] = -1
    top = 0
    for loc in range(n_loc):
        c = b.color[loc]
        if (c != C_EMPTY and c != opp) or region_of[loc] >= 0:
            continue
        reg_start[num_regions] = top
        reg_empty[num_regions] = 0
        region_of[loc] = num_regions
        reg_pts[top] = loc
        top += 1
        k = reg_start[num_regions]
        while k < top:
            if b.color[reg_pts[k]] == C_EMPTY:
                reg_empty[num_regions] += 1
            for i in range(4):
                n = reg_pts[k] + b.adj[i]
                c = b.color[n]
                if (c == C_EMPTY or c == opp) and region_of[n] < 0:
                    region_of[n] = num_regions
                    reg_pts[top] = n
                    top += 1
            k += 1
        num_regions += 1
    reg_start[num_regions] = top

    for r in range(num_regions):
        reg_alive[r] = True
        # Vital chains: those adjacent to every required point (see the module docstring).
        reg_num_vital[r] = 0
        if reg_empty[r] == 0:
            continue
        first = 1
        num_cand = 0
        for k in range(reg_start[r], reg_start[r + 1]):
            loc = reg_pts[k]
            need = b.color[loc] == C_EMPTY or b.suicide_allowed
            if not need:
                continue
            if first:
                first = 0
                for i in range(4):
                    n = loc + b.adj[i]
                    if b.color[n] == pla:
                        ci = chain_idx[b.chain_head[n]]
                        for j in range(num_cand):
                            if cand[j] == ci:
                                break
                        else:
                            cand[num_cand] = ci
                            num_cand += 1
            else:
                kept = 0
                for j in range(num_cand):
                    if _adjacent_to_chain(b, loc, pla, chain_idx, cand[j]):
                        cand[kept] = cand[j]
                        kept += 1
                num_cand = kept
            if num_cand == 0:
                break
        reg_num_vital[r] = num_cand
        for j in range(num_cand):
            reg_vital[r][j] = cand[j]
            vital_count[cand[j]] += 1
            if vital_count[cand[j]] == 2:
                any_two_vital = True
    # Without a chain with two vital regions nothing survives Benson's first round, and
    # territory needs a surviving bordering chain: nothing to mark.
    if not any_two_vital:
        return

    # Bordering chains of each region, deduplicated with a per-region stamp.
    num_border = 0
    for r in range(num_regions):
        border_start[r] = num_border
        for k in range(reg_start[r], reg_start[r + 1]):
            loc = reg_pts[k]
            for i in range(4):
                n = loc + b.adj[i]
                if b.color[n] == pla:
                    ci = chain_idx[b.chain_head[n]]
                    if chain_stamp[ci] != r:
                        chain_stamp[ci] = r
                        border[num_border] = ci
                        num_border += 1
    border_start[num_regions] = num_border

    # Benson's iteration.
    while True:
        changed = False
        for ci in range(num_chains):
            if chain_alive[ci] and vital_count[ci] < 2:
                chain_alive[ci] = False
                changed = True
        if not changed:
            break
        for r in range(num_regions):
            if not reg_alive[r]:
                continue
            for k in range(border_start[r], border_start[r + 1]):
                if not chain_alive[border[k]]:
                    reg_alive[r] = False
                    for j in range(reg_num_vital[r]):
                        vital_count[reg_vital[r][j]] -= 1
                    break

    for loc in range(n_loc):
        if b.color[loc] == pla and chain_alive[chain_idx[b.chain_head[loc]]]:
            out[loc] = pla
    # Pass-alive territory: a surviving region (so every bordering chain is pass-alive) that
    # some chain borders, with at most one point not adjacent to pla.
    for r in range(num_regions):
        if not reg_alive[r] or border_start[r + 1] == border_start[r]:
            continue
        lonely = 0
        for k in range(reg_start[r], reg_start[r + 1]):
            if not _adjacent_to_color(b, reg_pts[k], pla):
                lonely += 1
                if lonely > 1:
                    break
        if lonely <= 1:
            for k in range(reg_start[r], reg_start[r + 1]):
                out[reg_pts[k]] = pla


cdef void pass_alive_area(Board b, signed char* out) noexcept nogil:
    memset(out, 0, b.arr_size * sizeof(signed char))
    pass_alive_for(b, C_BLACK, out)
    pass_alive_for(b, C_WHITE, out)


cdef int ownership_loc(Board b, bint katago_scoring, signed char* out) noexcept nogil:
    cdef signed char alive[MAX_ARR]
    cdef short stack[MAX_AREA]
    cdef short members[MAX_AREA]
    cdef bint seen[MAX_ARR]
    cdef int loc, i, n, c, top, size, k, total = 0
    cdef bint reach_black, reach_white
    cdef signed char owner
    if katago_scoring:
        pass_alive_area(b, alive)
    else:
        memset(alive, 0, b.arr_size * sizeof(signed char))
    memset(seen, 0, b.arr_size * sizeof(bint))
    for loc in range(b.arr_size):
        out[loc] = 0
    for loc in range(b.arr_size):
        c = b.color[loc]
        if c == C_WALL:
            continue
        if alive[loc] != 0:
            out[loc] = 1 if alive[loc] == C_BLACK else -1
        elif c == C_BLACK:
            out[loc] = 1
        elif c == C_WHITE:
            out[loc] = -1
        elif not seen[loc]:
            # Tromp-Taylor: the empty region through loc counts for the only color it reaches.
            seen[loc] = True
            stack[0] = loc
            top = 1
            size = 0
            reach_black = False
            reach_white = False
            while top > 0:
                top -= 1
                members[size] = stack[top]
                size += 1
                for i in range(4):
                    n = members[size - 1] + b.adj[i]
                    c = b.color[n]
                    if c == C_EMPTY:
                        if not seen[n]:
                            seen[n] = True
                            stack[top] = n
                            top += 1
                    elif c == C_BLACK:
                        reach_black = True
                    elif c == C_WHITE:
                        reach_white = True
            owner = 0
            if reach_black and not reach_white:
                owner = 1
            elif reach_white and not reach_black:
                owner = -1
            # Points of the region already claimed as pass-alive territory keep that claim.
            for k in range(size):
                if alive[members[k]] == 0:
                    out[members[k]] = owner
    for loc in range(b.arr_size):
        total += out[loc]
    return total


cdef double final_score_c(Board b, bint katago_scoring) noexcept nogil:
    cdef signed char own[MAX_ARR]
    return ownership_loc(b, katago_scoring, own) - b.komi


cdef bint all_pass_alive_c(Board b, bint katago_scoring) noexcept nogil:
    cdef signed char alive[MAX_ARR]
    cdef int loc, c
    pass_alive_area(b, alive)
    for loc in range(b.arr_size):
        c = b.color[loc]
        if c == C_WALL:
            continue
        if alive[loc] == 0:
            return False
        if not katago_scoring and c != C_EMPTY and alive[loc] != c:
            return False
    return True


# ---------------------------------------------------------------------------------- Python API

cdef bint _katago_scoring(Board board) except -1:
    scoring = board.rules.scoring
    if scoring == "katago":
        return True
    if scoring == "area":
        return False
    raise ValueError(f"unknown scoring {scoring!r} in the board's rules")


cdef object _to_grid(Board b, signed char* by_loc):
    """int8 array [y_size, x_size] of a by-location buffer."""
    out = np.zeros((b.y_size, b.x_size), dtype=np.int8)
    cdef signed char[:, ::1] view = out
    cdef int x, y
    for y in range(b.y_size):
        for x in range(b.x_size):
            view[y, x] = by_loc[(y + 1) * b.stride + x + 1]
    return out


def pass_alive_map(Board board, player=None):
    """int8 array [y, x]: 1 where Black's pass-alive stones or pass-alive territory are, 2 for
    White's, 0 elsewhere. With `player` (BLACK or WHITE) only that player's are marked."""
    cdef signed char buf[MAX_ARR]
    if player is None:
        pass_alive_area(board, buf)
    elif player == C_BLACK or player == C_WHITE:
        memset(buf, 0, sizeof(buf))
        pass_alive_for(board, player, buf)
    else:
        raise ValueError(f"player must be BLACK (1), WHITE (2) or None, got {player!r}")
    return _to_grid(board, buf)


def ownership(Board board):
    """int8 array [y, x]: +1 Black's point, -1 White's, 0 neutral, under the board's scoring
    rule; its sum minus komi is `final_score(board)`."""
    cdef signed char buf[MAX_ARR]
    ownership_loc(board, _katago_scoring(board), buf)
    return _to_grid(board, buf)


def final_score(Board board) -> float:
    """Black minus White minus komi: Tromp-Taylor area when the rules score 'area', KataGo's
    pass-alive variant when they score 'katago'."""
    return final_score_c(board, _katago_scoring(board))


def all_pass_alive(Board board) -> bool:
    """Whether the game may end now with no loss to either side: every point is pass-alive or
    pass-alive territory for some player (and, under plain area scoring, no stone is dead)."""
    return all_pass_alive_c(board, _katago_scoring(board))


def result_string(score: float) -> str:
    """'B+3.5' / 'W+0.5' / '0' for a score given as Black minus White (komi included)."""
    score = float(score)
    if score != score or score in (float("inf"), float("-inf")):
        raise ValueError(f"score must be finite, got {score}")
    if score == 0:
        return "0"
    return f"{'B' if score > 0 else 'W'}+{abs(score):g}"
