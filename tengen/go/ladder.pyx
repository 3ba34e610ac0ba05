# cython: language_level=3
"""Ladder search: is a chain in inescapable atari, and which moves would put it there.

See ladder.pxd for the C-level interface and the rules the search plays by. The Python functions
at the bottom (`is_laddered`, `working_moves`, `ladder_moves`) answer the same questions for
tests and tools, with move indices as everywhere else in tengen.go.
"""
from libc.string cimport memcpy, memset

from tengen.go.board cimport Board, C_BLACK, C_EMPTY, C_WALL, C_WHITE, MAX_AREA, MAX_ARR, NULL_LOC

cdef enum:
    MAX_CAPTURE_MOVES = 16  # escapes by capture considered per defender turn (more never occur)


# --- scratch board -------------------------------------------------------------------------

cdef void ladder_load(Ladder* lad, Board board) noexcept nogil:
    cdef int i
    lad.stride = board.stride
    lad.arr_size = board.arr_size
    for i in range(4):
        lad.adj[i] = board.adj[i]
    memcpy(lad.color, board.color, board.arr_size * sizeof(unsigned char))
    memset(lad.mark, 0, board.arr_size * sizeof(unsigned int))  # floods stay below arr_size
    memset(lad.mark2, 0, board.arr_size * sizeof(unsigned int))
    lad.gen = 0
    lad.gen2 = 0
    lad.ko_loc = board.ko_loc
    lad.ko_color = board.next_color
    lad.depth = 0
    lad.num_undo = 0
    lad.moves_left = LADDER_BUDGET
    lad.aborted = False


cdef inline unsigned int _next_gen(unsigned int* mark, unsigned int gen) noexcept nogil:
    """The next flood generation for a mark array (clearing it when the counter wraps)."""
    gen += 1
    if gen == 0:
        memset(mark, 0, MAX_ARR * sizeof(unsigned int))
        gen = 1
    return gen


cdef int _flood_libs(Ladder* lad, unsigned int* mark, unsigned int g, short* stack, int loc,
                     int limit, short* out) noexcept nogil:
    """Distinct liberties of the chain at stone loc, counting stops once more than `limit` are
    found. Writes them to out (room for limit + 1) when out is not NULL. Marks the chain's stones
    and the liberties it found with g."""
    cdef int c = lad.color[loc]
    cdef int sp = 1, n = 0, cur, nb, i, col
    stack[0] = loc
    mark[loc] = g
    while sp:
        sp -= 1
        cur = stack[sp]
        for i in range(4):
            nb = cur + lad.adj[i]
            col = lad.color[nb]  # the color first: walls and opponents need no mark lookup
            if col == C_EMPTY:
                if mark[nb] != g:
                    mark[nb] = g
                    if out != NULL:
                        out[n] = nb
                    n += 1
                    if n > limit:
                        return n
            elif col == c and mark[nb] != g:
                mark[nb] = g
                stack[sp] = nb
                sp += 1
    return n


cdef inline int _libs(Ladder* lad, int loc, int limit, short* out) noexcept nogil:
    lad.gen = _next_gen(lad.mark, lad.gen)
    return _flood_libs(lad, lad.mark, lad.gen, lad.stack, loc, limit, out)


cdef inline bint _touches_empty(Ladder* lad, int loc) noexcept nogil:
    """Whether loc has an empty neighbour: then its chain has a liberty, no flood needed."""
    return (lad.color[loc + lad.adj[0]] == C_EMPTY or lad.color[loc + lad.adj[1]] == C_EMPTY
            or lad.color[loc + lad.adj[2]] == C_EMPTY or lad.color[loc + lad.adj[3]] == C_EMPTY)


cdef inline int _empty_neighbours(Ladder* lad, int loc) noexcept nogil:
    """How many of loc's neighbours are empty (two or more: its chain is not in atari)."""
    return ((lad.color[loc + lad.adj[0]] == C_EMPTY) + (lad.color[loc + lad.adj[1]] == C_EMPTY)
            + (lad.color[loc + lad.adj[2]] == C_EMPTY) + (lad.color[loc + lad.adj[3]] == C_EMPTY))


cdef int _remove_chain(Ladder* lad, int loc) noexcept nogil:
    """Take the chain at loc off the scratch board, recording its stones for undo."""
    cdef int c = lad.color[loc]
    cdef int sp = 1, n = 0, cur, nb, i
    lad.gen = _next_gen(lad.mark, lad.gen)
    cdef unsigned int g = lad.gen
    lad.stack[0] = loc
    lad.mark[loc] = g
    while sp:
        sp -= 1
        cur = lad.stack[sp]
        for i in range(4):
            nb = cur + lad.adj[i]
            if lad.mark[nb] != g and lad.color[nb] == c:
                lad.mark[nb] = g
                lad.stack[sp] = nb
                sp += 1
        lad.color[cur] = C_EMPTY
        lad.undo_loc[lad.num_undo] = cur
        lad.num_undo += 1
        n += 1
    return n


cdef void _undo(Ladder* lad) noexcept nogil:
    """Take back the last move played with _play, restoring the stones it captured."""
    lad.depth -= 1
    cdef int start = lad.frame_start[lad.depth]
    cdef int placed = lad.undo_loc[start]
    cdef unsigned char captured_color = 3 - lad.color[placed]
    cdef int k
    for k in range(start + 1, lad.num_undo):
        lad.color[lad.undo_loc[k]] = captured_color
    lad.color[placed] = C_EMPTY
    lad.num_undo = start
    lad.ko_loc = lad.frame_ko_loc[lad.depth]
    lad.ko_color = lad.frame_ko_color[lad.depth]


cdef int _play(Ladder* lad, int loc, int pla) noexcept nogil:
    """Play pla at loc on the scratch board: the number of stones captured, or -1 when the move
    is illegal (occupied, simple ko, suicide) or the query ran out of room (then `aborted`).
    Every move that returns >= 0 must be taken back with _undo."""
    cdef int opp = 3 - pla
    cdef int captured = 0, last_captured = NULL_LOC, nb, i
    cdef bint alone = True
    if lad.color[loc] != C_EMPTY or (loc == lad.ko_loc and pla == lad.ko_color):
        return -1
    if (lad.moves_left <= 0 or lad.depth >= LADDER_MAX_DEPTH
            or lad.num_undo > LADDER_UNDO_CAP - MAX_AREA - 1):
        lad.aborted = True
        return -1
    lad.moves_left -= 1
    lad.frame_start[lad.depth] = lad.num_undo
    lad.frame_ko_loc[lad.depth] = lad.ko_loc
    lad.frame_ko_color[lad.depth] = lad.ko_color
    lad.depth += 1
    lad.color[loc] = pla
    lad.undo_loc[lad.num_undo] = loc
    lad.num_undo += 1
    for i in range(4):
        nb = loc + lad.adj[i]
        if lad.color[nb] == opp and not _touches_empty(lad, nb) and _libs(lad, nb, 0, NULL) == 0:
            captured += _remove_chain(lad, nb)
            last_captured = nb
        elif lad.color[nb] == pla:
            alone = False
    if captured == 0 and not _touches_empty(lad, loc) and _libs(lad, loc, 0, NULL) == 0:
        _undo(lad)
        return -1
    # A lone stone that captured exactly one stone and has one liberty makes a simple ko.
    if captured == 1 and alone and _libs(lad, loc, 1, NULL) == 1:
        lad.ko_loc = last_captured
        lad.ko_color = opp
    else:
        lad.ko_loc = NULL_LOC
    return captured


cdef int _chain_libs2(Ladder* lad, int loc, short* lib) noexcept nogil:
    """Liberties of the chain at loc counted up to 2 (0, 1 or 2), with mark2/stack2 so it can
    run inside a flood that uses mark/stack; lib[0] gets the first one found."""
    cdef int c = lad.color[loc]
    cdef int sp = 1, n = 0, cur, nb, i, col
    lad.gen2 = _next_gen(lad.mark2, lad.gen2)
    cdef unsigned int g = lad.gen2
    lad.stack2[0] = loc
    lad.mark2[loc] = g
    while sp:
        sp -= 1
        cur = lad.stack2[sp]
        for i in range(4):
            nb = cur + lad.adj[i]
            col = lad.color[nb]  # the color first: walls and opponents need no mark lookup
            if col == C_EMPTY:
                if lad.mark2[nb] != g:
                    lad.mark2[nb] = g
                    if n == 0:
                        lib[0] = nb
                    n += 1
                    if n == 2:
                        return 2
            elif col == c and lad.mark2[nb] != g:
                lad.mark2[nb] = g
                lad.stack2[sp] = nb
                sp += 1
    return n


cdef int _escape_moves(Ladder* lad, int loc, int* out, int cap) noexcept nogil:
    """The defender's tries for the chain at loc, if it has exactly one liberty: that liberty
    first, then the single liberties of opponent chains in atari that touch the chain (captures),
    without repeats, at most cap in all. Returns their number, 0 when the chain does not have
    exactly one liberty. One flood of the chain finds both."""
    cdef int c = lad.color[loc]
    cdef int opp = 3 - c
    cdef int sp = 1, n = 1, libs = 0, cur, nb, i, k, col
    cdef short lib[1]
    lib[0] = NULL_LOC
    lad.gen = _next_gen(lad.mark, lad.gen)
    cdef unsigned int g = lad.gen
    # Opponent stones that a _chain_libs2 flood of this call already visited have mark2 above
    # this: their chain was checked, so they are skipped (a wrap of gen2 only stops the skips).
    cdef unsigned int checked = lad.gen2
    lad.stack[0] = loc
    lad.mark[loc] = g
    while sp:
        sp -= 1
        cur = lad.stack[sp]
        for i in range(4):
            nb = cur + lad.adj[i]
            col = lad.color[nb]
            if col == C_WALL or lad.mark[nb] == g:
                continue
            lad.mark[nb] = g
            if col == C_EMPTY:
                libs += 1
                if libs > 1:
                    return 0
                out[0] = nb
            elif col == c:
                lad.stack[sp] = nb
                sp += 1
            elif ((lad.mark2[nb] <= checked or lad.gen2 < checked) and _empty_neighbours(lad, nb) < 2
                    and _chain_libs2(lad, nb, lib) == 1):
                for k in range(1, n):
                    if out[k] == lib[0]:
                        break
                else:
                    if n < cap:
                        out[n] = lib[0]
                        n += 1
    if libs != 1:
        return 0
    # A capture on the liberty itself is the extension, already first.
    for k in range(1, n):
        if out[k] == out[0]:
            out[k] = out[n - 1]
            n -= 1
            break
    return n


# --- the search ----------------------------------------------------------------------------

cdef bint _defender_loses(Ladder* lad, int loc, int lib) noexcept nogil:
    """The defender is to move and the chain at loc has exactly one liberty, `lib`: True when no
    escape works. Extending comes first: it is the usual try and often escapes at once, and it
    needs no flood of the chain; the escapes by capture (one flood) are looked for only when it
    fails. The moves tried, and their order, are those of _escape_moves."""
    cdef int c = lad.color[loc]
    cdef int moves[MAX_CAPTURE_MOVES + 1]
    cdef int num_moves, k, captured
    cdef bint escaped
    if lad.aborted:
        return False
    captured = _play(lad, lib, c)
    if captured >= 0:
        escaped = _extension_escaped(lad, loc, lib, captured)
        _undo(lad)
        if escaped or lad.aborted:
            return False
    elif lad.aborted:
        return False
    num_moves = _escape_moves(lad, loc, moves, MAX_CAPTURE_MOVES + 1)
    for k in range(1, num_moves):
        if _play(lad, moves[k], c) < 0:
            if lad.aborted:
                return False
            continue
        escaped = _escaped(lad, loc)
        _undo(lad)
        if escaped or lad.aborted:
            return False
    return True


cdef bint _extension_escaped(Ladder* lad, int loc, int lib, int captured) noexcept nogil:
    """The defender just extended at `lib`, its chain's only liberty, capturing `captured`
    stones: _escaped without a flood in the usual case. When the extension captured nothing
    and touches no other friendly stone than the one chain stone next to it, the chain's
    liberties are exactly lib's empty neighbours (any other liberty of the chain would have been
    a second liberty before), in the order a flood from loc would find them."""
    cdef short libs[3]
    cdef int n = 0, friends = 0, i, nb
    if captured == 0:
        for i in range(4):
            nb = lib + lad.adj[i]
            if lad.color[nb] == C_EMPTY:
                if n < 3:
                    libs[n] = nb
                n += 1
            elif lad.color[nb] == lad.color[lib]:
                friends += 1
        if friends == 1:
            if n >= 3:
                return True
            if n <= 1:
                return False
            return not _attacker_wins(lad, loc, libs)
    return _escaped(lad, loc)


cdef bint _escaped(Ladder* lad, int loc) noexcept nogil:
    """The defender just moved (attacker to move): True when the chain at loc is out."""
    cdef short libs[3]
    cdef int n = _libs(lad, loc, 2, libs)
    if n >= 3:
        return True
    if n <= 1:
        return False
    return not _attacker_wins(lad, loc, libs)


cdef bint _atari_fails(Ladder* lad, int loc, int atari, int other) noexcept nogil:
    """The chain at loc has the two liberties atari and other, and the attacker is to move: True
    when the atari is sure to be answered by an extension at `other` with 3 or more liberties
    (the atari is legal, having an empty neighbour and no ko, and `other` has 3 empty neighbours
    besides it; the atari's captures could only add liberties). Then the two moves the read
    would play are charged to the budget without playing them. False when unsure, or when the
    read might run out of budget or room: the caller then reads it move by move."""
    cdef int attacker = 3 - lad.color[loc]
    cdef int i, empties = 0, atari_empties = 0
    if ((atari == lad.ko_loc and attacker == lad.ko_color) or lad.moves_left < 2
            or lad.depth + 1 >= LADDER_MAX_DEPTH
            or lad.num_undo + 1 + MAX_AREA > LADDER_UNDO_CAP - MAX_AREA - 1):
        return False
    for i in range(4):
        atari_empties += lad.color[atari + lad.adj[i]] == C_EMPTY
        empties += lad.color[other + lad.adj[i]] == C_EMPTY and other + lad.adj[i] != atari
    if atari_empties == 0 or empties < 3:
        return False
    lad.moves_left -= 2
    return True


cdef bint _attacker_wins(Ladder* lad, int loc, short* libs) noexcept nogil:
    """The chain at loc has the two liberties libs and the attacker is to move: True when an
    atari on one of them leaves it in inescapable atari."""
    cdef int opp = 3 - lad.color[loc]
    cdef bint wins
    cdef int k
    for k in range(2):  # libs is the caller's local array: nested reads do not touch it
        if _atari_fails(lad, loc, libs[k], libs[1 - k]):
            continue
        if _play(lad, libs[k], opp) < 0:
            if lad.aborted:
                return False
            continue
        wins = _defender_loses(lad, loc, libs[1 - k])  # the atari leaves the other liberty
        _undo(lad)
        if lad.aborted:
            return False
        if wins:
            return True
    return False


cdef inline void _start_query(Ladder* lad) noexcept nogil:
    lad.moves_left = LADDER_BUDGET
    lad.aborted = False


cdef bint _move_works(Ladder* lad, int loc, int move, int other) noexcept nogil:
    """The chain at loc has exactly the two liberties move and other: True when the opponent
    playing `move` leaves it in inescapable atari (the move's legality on the real board is the
    caller's business)."""
    cdef bint result
    _start_query(lad)
    if _atari_fails(lad, loc, move, other) or _play(lad, move, 3 - lad.color[loc]) < 0:
        return False
    # The atari captures no stone next to the chain (it would be the chain's own color), so the
    # chain's one liberty left is the other one.
    result = _defender_loses(lad, loc, other)
    _undo(lad)
    return result and not lad.aborted


cdef int ladder_working_moves(Ladder* lad, int loc, int* out) noexcept nogil:
    cdef short libs[3]
    cdef int n = 0, k
    if lad.color[loc] != C_BLACK and lad.color[loc] != C_WHITE:
        return 0
    if _libs(lad, loc, 2, libs) != 2:
        return 0
    for k in range(2):
        if _move_works(lad, loc, libs[k], libs[1 - k]):
            out[n] = libs[k]
            n += 1
    return n


cdef bint _extension_sure(Board board, int loc, int lib, int atari) noexcept nogil:
    """At the root of a read, from the board's own chain data: True when the chain at stone loc,
    extending at its liberty `lib` (after the opponent's atari at its other liberty `atari`, or
    at once when atari is NULL_LOC), surely gets 3 or more liberties: lib has 3 empty neighbours
    besides the atari point, or touches another chain of the same color with enough liberties
    to keep 3 after losing lib and the atari point. The atari's captures could only add
    liberties, a point with an empty or friendly neighbour is no ko point and no suicide, and a
    read of two moves cannot run out of budget: the read would answer False."""
    cdef int c = board.color[loc]
    cdef int head = board.chain_head[loc]
    cdef int lost = 1 if atari == NULL_LOC else 2
    cdef int empties = 0, i, nb
    for i in range(4):
        nb = lib + board.adj[i]
        if nb == atari:
            continue
        if board.color[nb] == C_EMPTY:
            empties += 1
        elif (board.color[nb] == c and board.chain_head[nb] != head
                and board.libs[board.chain_head[nb]] - lost >= 3):
            return True
    return empties >= 3


cdef bint ladder_chain(Ladder* lad, Board board, int loc, int* working, int* num_working) noexcept nogil:
    cdef int head = board.chain_head[loc]
    cdef int attacker = 3 - board.color[loc]
    cdef short libs[3]
    cdef int k
    cdef bint result
    num_working[0] = 0
    if board.libs[head] > 2:
        return False
    _libs(lad, loc, 2, libs)
    if board.libs[head] == 1:
        if _extension_sure(board, loc, libs[0], NULL_LOC):
            return False
        _start_query(lad)
        result = _defender_loses(lad, loc, libs[0])
        return result and not lad.aborted
    for k in range(2):
        if (not _extension_sure(board, loc, libs[1 - k], libs[k])
                and (attacker != board.next_color or board.is_legal_loc(libs[k]))
                and _move_works(lad, loc, libs[k], libs[1 - k])):
            working[num_working[0]] = libs[k]
            num_working[0] += 1
            if attacker != board.next_color:
                break  # the player to move's own chain: one working move settles it
    return num_working[0] > 0


# --- Python access (tests, tools) ----------------------------------------------------------

cdef int _stone_loc(Board board, int move) except -1:
    if not 0 <= move < board.area:
        raise ValueError(f"move {move} is not a point of a {board.x_size}x{board.y_size} board")
    cdef int loc = board.loc_of(move)
    if board.color[loc] != C_BLACK and board.color[loc] != C_WHITE:
        raise ValueError(f"no stone at move {move}")
    return loc


def is_laddered(Board board, int move) -> bool:
    """Whether the chain with a stone at `move` is in or one move from inescapable atari: the
    condition of the ladder input feature (see ladder.pxd for what the search reads)."""
    cdef int loc = _stone_loc(board, move)
    cdef Ladder lad
    cdef int working[2]
    cdef int num_working
    ladder_load(&lad, board)
    return bool(ladder_chain(&lad, board, loc, working, &num_working))


def working_moves(Board board, int move) -> list[int]:
    """For the 2-liberty chain with a stone at `move`: the opponent's moves (move indices) that
    leave it in inescapable atari (legal on the board when the opponent is to move). Empty for
    chains with another number of liberties."""
    cdef int loc = _stone_loc(board, move)
    cdef Ladder lad
    cdef int working[2]
    cdef int num_working = 0
    cdef int attacker = 3 - board.color[loc]
    ladder_load(&lad, board)
    if board.libs[board.chain_head[loc]] == 2:
        num_working = ladder_working_moves(&lad, loc, working)
    return sorted(
        board.move_of(working[k]) for k in range(num_working)
        if attacker != board.next_color or board.is_legal_loc(working[k])
    )


def ladder_moves(Board board) -> list[int]:
    """The player to move's moves (move indices, sorted) that put an opponent chain with two
    liberties into inescapable atari: the LADDER_WORKING_MOVE feature."""
    cdef Ladder lad
    cdef int working[2]
    cdef int num_working, loc, k
    cdef set found = set()
    ladder_load(&lad, board)
    for loc in range(board.arr_size):
        if (board.color[loc] == 3 - board.next_color and board.chain_head[loc] == loc
                and board.libs[loc] == 2):
            ladder_chain(&lad, board, loc, working, &num_working)
            for k in range(num_working):
                found.add(board.move_of(working[k]))
    return sorted(found)

