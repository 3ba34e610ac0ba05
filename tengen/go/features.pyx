# cython: language_level=3
"""The net's input features (KataGo paper, Tables 1-2) in the layout of tengen.go.planes.

`encode(board, spatial, global_, prev1=None, prev2=None)` writes them into a caller's float32
buffers: `spatial` of shape [NUM_SPATIAL, H, W] with H >= y_size and W >= x_size (the board sits
in the top-left corner; everything outside it is zero, so ON_BOARD is the mask for mixed board
sizes) and `global_` of shape [NUM_GLOBAL]. The whole buffer is overwritten on every call, so
buffers can be reused. Cython callers use `encode_c` (nogil, no Python objects, no allocation).

Everything is from the perspective of the player to move ("own" = board.to_move).

Spatial planes (1.0 where the condition holds, else 0.0):
- ON_BOARD: the point is on the board.
- OWN_STONE / OPP_STONE: a stone of the player to move / of the opponent.
- LIBERTIES_1..3: the stone's chain has exactly 1, 2, 3 liberties.
- KO_ILLEGAL: an empty point the player to move may not play because of simple ko or, under
  superko rules, because the move would repeat a position (positional or situational, as the
  board's rules say). Suicide points are not marked.
- PREV_MOVE_1..5: where the last five moves were played, most recent first. Only moves that
  alternate back from the player to move count (the last by the opponent, the one before by the
  player to move, ...); the planes stop at the first move out of turn (setup, changed to_move).
  Passes mark nothing here (see the globals).
- LADDERED_0: stones of chains in inescapable atari (1 liberty, and the owner moving first
  cannot escape) or one move from it (2 liberties, and an opponent move on one of them leaves
  the chain in inescapable atari); both colors. tengen.go.ladder reads the ladders.
- LADDERED_1 / LADDERED_2: the same plane for the position 1 and 2 turns ago. The board keeps
  only its move list (captures are not recorded, so it cannot be rewound), so the caller passes
  those positions as `prev1` and `prev2`. A missing one (start of a game, a position without
  history) is replaced by the oldest position known (prev2 by prev1, prev1 by the board), as
  KataGo does with truncated history.
- LADDER_WORKING_MOVE: empty points where the player to move, by playing there (a legal move),
  puts an opponent chain with two liberties into inescapable atari.
- PASS_ALIVE_OWN / PASS_ALIVE_OPP: pass-alive stones of that player and empty or opponent-held
  points of pass-alive territory (regions bordered only by pass-alive stones of that player),
  from tengen.go.passalive (Benson's algorithm).

Global features:
- PREV_PASS_1..5: the (i+1)-th previous move was a pass (same alternation rule as PREV_MOVE).
- KOMI: komi / 15 from the player to move's side (+komi for White, -komi for Black).
- KO_RULE_SIMPLE: 1.0 under simple ko, 0.0 under superko.
- KO_RULE_KIND: 0.0 simple ko, 0.5 positional superko, -0.5 situational superko.
- SUICIDE_ALLOWED: 1.0 when multi-stone suicide is legal.
- KOMI_PARITY: komi + board size parity (paper, footnote 9). When every point ends up owned,
  own area minus opponent area = 2 * own - area has the parity of the board's area, so only every
  second integer komi allows a draw, and komi values half a point either side of such a "drawable"
  komi decide ties for one player or the other. With k the player to move's komi and
  d = (k - area) mod 2 in [0, 2) (d = 0 exactly on a drawable komi), the feature is the triangle
  wave d for d < 0.5, 1 - d for 0.5 <= d < 1.5, d - 2 above: 0 on drawable komi and on the
  integers between them, +0.5 where ties go to the player to move, -0.5 where they go to the
  opponent, linear in between so it stays continuous in komi.

KataGo's four Japanese-rules spatial planes and four Japanese-rules globals are left out: tengen
trains only on area scoring (see tengen.go.rules), so they would always be zero.
"""
from libc.math cimport floor
from libc.string cimport memcpy, memset

from tengen.go import planes as _planes
from tengen.go.board cimport (
    Board, C_BLACK, C_EMPTY, C_WHITE, ILLEGAL_KO, ILLEGAL_SUPERKO, KO_POSITIONAL, KO_SIMPLE,
    MAX_ARR, PASS_LOC,
)
from tengen.go.ladder cimport Ladder, ladder_chain, ladder_load
from tengen.go.passalive cimport pass_alive_area

# The layout of tengen.go.planes as C constants (checked against it at import below).
cdef enum:
    ON_BOARD = 0
    OWN_STONE = 1
    OPP_STONE = 2
    LIBERTIES_1 = 3
    KO_ILLEGAL = 6
    PREV_MOVE_1 = 7
    LADDERED_0 = 12
    LADDERED_1 = 13
    LADDERED_2 = 14
    LADDER_WORKING_MOVE = 15
    PASS_ALIVE_OWN = 16
    PASS_ALIVE_OPP = 17
    NUM_SPATIAL = 18
    PREV_PASS_1 = 0
    KOMI = 5
    KO_RULE_SIMPLE = 6
    KO_RULE_KIND = 7
    SUICIDE_ALLOWED = 8
    KOMI_PARITY = 9
    NUM_GLOBAL = 10
    NUM_HISTORY = 5

_LAYOUT = {
    "ON_BOARD": ON_BOARD, "OWN_STONE": OWN_STONE, "OPP_STONE": OPP_STONE,
    "LIBERTIES_1": LIBERTIES_1, "KO_ILLEGAL": KO_ILLEGAL, "PREV_MOVE_1": PREV_MOVE_1,
    "LADDERED_0": LADDERED_0, "LADDERED_1": LADDERED_1, "LADDERED_2": LADDERED_2,
    "LADDER_WORKING_MOVE": LADDER_WORKING_MOVE, "PASS_ALIVE_OWN": PASS_ALIVE_OWN,
    "PASS_ALIVE_OPP": PASS_ALIVE_OPP, "NUM_SPATIAL": NUM_SPATIAL, "PREV_PASS_1": PREV_PASS_1,
    "KOMI": KOMI, "KO_RULE_SIMPLE": KO_RULE_SIMPLE, "KO_RULE_KIND": KO_RULE_KIND,
    "SUICIDE_ALLOWED": SUICIDE_ALLOWED, "KOMI_PARITY": KOMI_PARITY, "NUM_GLOBAL": NUM_GLOBAL,
}
_mismatch = [name for name, value in _LAYOUT.items() if getattr(_planes, name) != value]
if _mismatch:
    raise ImportError(f"tengen.go.features disagrees with tengen.go.planes on {_mismatch}")


cdef inline int _pos(Board board, int loc, int buf_w) noexcept nogil:
    """Offset of a board location inside one plane of the buffer."""
    return (loc // board.stride - 1) * buf_w + loc % board.stride - 1


cdef void _ladder_planes(Ladder* lad, Board board, float* laddered, float* working_plane,
                         int buf_w) noexcept nogil:
    """Mark the stones of every chain in or one move from inescapable atari in `laddered`, and
    (when working_plane is not NULL) the player to move's working ladder moves."""
    cdef int loc, cur, k, num_working
    cdef int working[2]
    cdef int opp = 3 - board.next_color
    ladder_load(lad, board)
    for loc in range(board.arr_size):
        if ((board.color[loc] != C_BLACK and board.color[loc] != C_WHITE)
                or board.chain_head[loc] != loc or board.libs[loc] > 2):
            continue
        if not ladder_chain(lad, board, loc, working, &num_working):
            continue
        cur = loc
        while True:
            laddered[_pos(board, cur, buf_w)] = 1.0
            cur = board.next_stone[cur]
            if cur == loc:
                break
        if working_plane != NULL and board.color[loc] == opp:
            for k in range(num_working):
                working_plane[_pos(board, working[k], buf_w)] = 1.0


cdef inline bint _may_repeat(Board board, int loc) noexcept nogil:
    """Whether Board.illegal_reason_loc looks the move at empty loc up in the superko set: it
    does when some earlier position had as many stones as the move makes, or when the move
    removes stones (a capture, or a multi-stone suicide, which needs a point without an empty
    neighbour). Elsewhere the move cannot be a superko repeat, so no probe is needed."""
    cdef int i, nb
    if board.num_stones[C_BLACK] + board.num_stones[C_WHITE] + 1 <= board.max_seen_stones:
        return True
    for i in range(4):
        nb = loc + board.adj[i]
        if board.color[nb] == C_EMPTY:
            break
    else:
        return True
    for i in range(4):
        nb = loc + board.adj[i]
        if board.color[nb] == 3 - board.next_color and board.libs[board.chain_head[nb]] == 1:
            return True
    return False


cdef float komi_parity(double self_komi, int area) noexcept nogil:
    """The KOMI_PARITY triangle wave (see the module docstring)."""
    cdef double d = self_komi - area
    d -= 2.0 * floor(d / 2.0)
    if d < 0.5:
        return <float>d
    if d < 1.5:
        return <float>(1.0 - d)
    return <float>(d - 2.0)


cdef void encode_c(Board board, Board prev1, Board prev2, float* spatial, int buf_h, int buf_w,
                   float* global_) noexcept nogil:
    """Write all features of `board` into spatial ([NUM_SPATIAL, buf_h, buf_w], C order,
    buf_h >= y_size, buf_w >= x_size) and global_ ([NUM_GLOBAL]). prev1/prev2 are the positions
    1 and 2 turns ago (pass `board` itself when unknown). No checks: the caller guarantees sizes."""
    cdef int plane = buf_h * buf_w
    cdef int pla = board.next_color
    cdef int opp = 3 - pla
    cdef int x, y, loc, pos, c, libs, i, reason
    cdef Ladder lad
    cdef signed char alive[MAX_ARR]
    memset(spatial, 0, NUM_SPATIAL * plane * sizeof(float))
    memset(global_, 0, NUM_GLOBAL * sizeof(float))
    pass_alive_area(board, alive)

    for y in range(board.y_size):
        for x in range(board.x_size):
            loc = (y + 1) * board.stride + x + 1
            pos = y * buf_w + x
            spatial[ON_BOARD * plane + pos] = 1.0
            if alive[loc] == pla:
                spatial[PASS_ALIVE_OWN * plane + pos] = 1.0
            elif alive[loc] == opp:
                spatial[PASS_ALIVE_OPP * plane + pos] = 1.0
            c = board.color[loc]
            if c == C_EMPTY:
                # Under simple ko only the ko point can be ko-illegal; superko needs a probe
                # where the board's own check could find a repeat.
                if loc == board.ko_loc or (board.ko_rule != KO_SIMPLE and _may_repeat(board, loc)):
                    reason = board.illegal_reason_loc(loc)
                    if reason == ILLEGAL_KO or reason == ILLEGAL_SUPERKO:
                        spatial[KO_ILLEGAL * plane + pos] = 1.0
                continue
            spatial[(OWN_STONE if c == pla else OPP_STONE) * plane + pos] = 1.0
            libs = board.libs[board.chain_head[loc]]
            if libs <= 3:
                spatial[(LIBERTIES_1 + libs - 1) * plane + pos] = 1.0

    # History: the i-th previous move must have been played by opp for even i, pla for odd i.
    for i in range(min(NUM_HISTORY, board.num_moves)):
        if board.hist_color[board.num_moves - 1 - i] != (opp if i % 2 == 0 else pla):
            break
        loc = board.hist_loc[board.num_moves - 1 - i]
        if loc == PASS_LOC:
            global_[PREV_PASS_1 + i] = 1.0
        else:
            spatial[(PREV_MOVE_1 + i) * plane + _pos(board, loc, buf_w)] = 1.0

    _ladder_planes(&lad, board, spatial + LADDERED_0 * plane,
                   spatial + LADDER_WORKING_MOVE * plane, buf_w)
    # A stand-in previous position (no history) repeats a plane already computed.
    if <void*>prev1 == <void*>board:
        memcpy(spatial + LADDERED_1 * plane, spatial + LADDERED_0 * plane, plane * sizeof(float))
    else:
        _ladder_planes(&lad, prev1, spatial + LADDERED_1 * plane, NULL, buf_w)
    if <void*>prev2 == <void*>prev1:
        memcpy(spatial + LADDERED_2 * plane, spatial + LADDERED_1 * plane, plane * sizeof(float))
    else:
        _ladder_planes(&lad, prev2, spatial + LADDERED_2 * plane, NULL, buf_w)

    cdef double self_komi = board.komi if pla == C_WHITE else -board.komi
    global_[KOMI] = <float>(self_komi / 15.0)
    if board.ko_rule == KO_SIMPLE:
        global_[KO_RULE_SIMPLE] = 1.0
    else:
        global_[KO_RULE_KIND] = 0.5 if board.ko_rule == KO_POSITIONAL else -0.5
    global_[SUICIDE_ALLOWED] = 1.0 if board.suicide_allowed else 0.0
    global_[KOMI_PARITY] = komi_parity(self_komi, board.area)


cdef int _check_prev(Board board, Board prev, str name) except -1:
    if prev.x_size != board.x_size or prev.y_size != board.y_size:
        raise ValueError(
            f"{name} is {prev.x_size}x{prev.y_size} but the board is {board.x_size}x{board.y_size}"
        )
    return 0


def encode(Board board not None, float[:, :, ::1] spatial, float[::1] global_,
           Board prev1=None, Board prev2=None) -> None:
    """Write the features of `board` (see the module docstring) into `spatial` (float32,
    C-contiguous, [NUM_SPATIAL, H, W] with H >= y_size, W >= x_size) and `global_` (float32
    [NUM_GLOBAL]). `prev1` / `prev2`: the positions 1 and 2 turns ago (same size), or None."""
    if spatial.shape[0] != NUM_SPATIAL or spatial.shape[1] < board.y_size or spatial.shape[2] < board.x_size:
        raise ValueError(
            f"spatial buffer of shape ({spatial.shape[0]}, {spatial.shape[1]}, {spatial.shape[2]}) cannot hold [{NUM_SPATIAL}, "
            f">={board.y_size}, >={board.x_size}] for a {board.x_size}x{board.y_size} board"
        )
    if global_.shape[0] != NUM_GLOBAL:
        raise ValueError(f"global buffer has {global_.shape[0]} entries, expected {NUM_GLOBAL}")
    if prev1 is None:
        if prev2 is not None:
            raise ValueError("prev2 given without prev1")
        prev1 = board
    if prev2 is None:
        prev2 = prev1
    _check_prev(board, prev1, "prev1")
    _check_prev(board, prev2, "prev2")
    with nogil:
        encode_c(board, prev1, prev2, &spatial[0, 0, 0], <int>spatial.shape[1],
                 <int>spatial.shape[2], &global_[0])
