# cython: language_level=3
"""Uniformly random playouts on the rules engine, entirely in C (no Python objects, no GIL).

The procedure (issue 3's benchmark, also used to generate test games): each turn pick a uniformly
random empty point, retrying until it is legal and does not fill the mover's own simple eye
(Board.is_simple_eye); pass when no such point is left. A game ends after two consecutive passes
or after 3 x area moves; passes count as moves.
"""
from libc.stdint cimport uint64_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from tengen.go.board cimport LEGAL, MAX_AREA, PASS_LOC, Board

from tengen.go.board import Board as _Board


cdef inline uint64_t _next(uint64_t* s) noexcept nogil:
    # xorshift64*: a few cycles per number, plenty good for picking points.
    cdef uint64_t x = s[0]
    x ^= x >> 12
    x ^= x << 25
    x ^= x >> 27
    s[0] = x
    return x * 0x2545F4914F6CDD1DULL


cdef inline int _below(uint64_t* s, int n) noexcept nogil:
    # Lemire's multiply-shift: uniform enough in [0, n) without a division.
    return <int>(((_next(s) >> 32) * <uint64_t>n) >> 32)


cdef int playout(Board board, uint64_t* rng, int max_moves) noexcept nogil:
    """Play one random game from board's current position; returns the moves played."""
    cdef short candidates[MAX_AREA]
    cdef int moves = 0, n, i, loc, pla
    cdef bint played
    while moves < max_moves:
        pla = board.next_color
        n = board.num_empty
        memcpy(candidates, board.empty_list, n * sizeof(short))
        played = False
        while n > 0:
            i = _below(rng, n)
            loc = candidates[i]
            if not board.is_simple_eye(loc, pla) and board.play_loc(loc) == LEGAL:
                played = True
                break
            n -= 1
            candidates[i] = candidates[n]
        if not played:
            board.play_loc(PASS_LOC)
        moves += 1
        if board.passes >= 2:
            break
    return moves


cdef double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


def random_game(Board board, uint64_t seed) -> int:
    """Play one random game on `board` from its current position (it is modified in place);
    returns the number of moves played. The same seed and position give the same game."""
    cdef uint64_t rng = seed * 2 + 1  # xorshift state must not be 0
    cdef int max_moves = 3 * board.area
    with nogil:
        moves = playout(board, &rng, max_moves)
    return moves


def run_playouts(int x_size, int y_size, rules, double seconds, uint64_t seed=1,
                 int max_games=0) -> tuple:
    """Random games from the empty board until `seconds` pass (or `max_games` are played, if
    > 0), all on one thread without the GIL. Returns (games, moves, elapsed seconds)."""
    if seconds <= 0 and max_games <= 0:
        raise ValueError("give a positive time budget or game count")
    cdef Board board = _Board(x_size, y_size, rules)
    cdef uint64_t rng = seed * 2 + 1
    cdef long games = 0, moves = 0
    cdef int max_moves = 3 * board.area
    cdef double start, elapsed
    with nogil:
        start = _now()
        while True:
            board.clear()
            moves += playout(board, &rng, max_moves)
            games += 1
            elapsed = _now() - start
            if max_games > 0 and games >= max_games:
                break
            if seconds > 0 and elapsed >= seconds:
                break
    return games, moves, elapsed
