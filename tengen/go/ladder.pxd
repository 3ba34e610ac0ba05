# cython: language_level=3
"""C-level ladder reader, for Cython modules that `cimport` it (the features use it).

A `Ladder` is a scratch copy of one Board's stones (same padded geometry as board.pxd) that the
search plays on and undoes; the Board itself is never touched. Fill it with `ladder_load`, then
ask any number of questions; every query leaves the scratch position as it found it.

The search (nogil, no allocation) reads the ladder the way players do: the defender (the chain's
owner), with one liberty, escapes by extending at its liberty or by capturing an adjacent attacker
chain that is in atari; an escape works when the chain then has 3 or more liberties, or 2 that the
attacker cannot ladder again. The attacker answers a chain with 2 liberties by playing on either
one. Stones anywhere on the board take part, so ladder breakers, captures of attacking stones and
snapback-like recaptures are read, not guessed. Rules inside the search: no suicide for either
side, simple ko (the board's current ko point included; superko is not checked inside the
search), and `LADDER_BUDGET` moves per query; a query that runs out of budget, or of undo room,
answers "not laddered" (the feature stays off rather than claiming a ladder it did not read).
"""
from tengen.go.board cimport Board, MAX_ARR, MAX_AREA

cdef enum:
    LADDER_BUDGET = 3000    # moves the search may play per query
    LADDER_MAX_DEPTH = 400  # nested moves on the scratch board
    LADDER_UNDO_CAP = 4096  # stones placed or captured in the nested moves


ctypedef struct Ladder:
    unsigned char color[MAX_ARR]     # C_EMPTY / C_BLACK / C_WHITE / C_WALL, as Board.color
    unsigned int mark[MAX_ARR]       # flood marks: marked iff == gen
    unsigned int gen
    unsigned int mark2[MAX_ARR]      # second mark set for floods nested inside a flood
    unsigned int gen2
    int stride
    int arr_size
    int adj[4]
    int ko_loc                       # simple-ko point forbidden to ko_color, or -1
    int ko_color
    # Undo stack: per nested move, where its entries start and the ko state before it; the
    # entries are the placed stone first, then the stones it captured.
    int depth
    int frame_start[LADDER_MAX_DEPTH]
    short frame_ko_loc[LADDER_MAX_DEPTH]
    unsigned char frame_ko_color[LADDER_MAX_DEPTH]
    int num_undo
    short undo_loc[LADDER_UNDO_CAP]
    # Per-query accounting.
    int moves_left
    bint aborted                     # budget or undo room ran out in this query
    short stack[MAX_AREA]            # flood work stacks (stack2 for floods nested in one)
    short stack2[MAX_AREA]


cdef void ladder_load(Ladder* lad, Board board) noexcept nogil
# Copy the board's stones and ko point (the ko binds the board's player to move).

cdef int ladder_working_moves(Ladder* lad, int loc, int* out) noexcept nogil
# The chain at stone `loc` has exactly two liberties: write those of its liberties where an
# opponent move leaves the chain in inescapable atari into out (room for 2) and return how many.
# The moves must also be legal on the real board; callers that need that check it themselves
# (Board.is_legal_loc).

cdef bint ladder_chain(Ladder* lad, Board board, int loc, int* working, int* num_working) noexcept nogil
# The feature question for the chain at stone `loc` of `board` (loaded into lad, unchanged since):
# True when it is in inescapable atari (1 liberty, and its owner moving first cannot escape) or
# one move from it (2 liberties and an opponent move on one of them leaves it in inescapable
# atari; when the opponent is the board's player to move, the move must also be legal on the
# board, superko included). The working moves go to working (room for 2) and their number to
# num_working: all of them for chains of the opponent of the player to move, the first one found
# otherwise (enough to answer), none for 1-liberty chains.
