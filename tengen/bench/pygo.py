"""Pure-Python Go for the baselines of `tengen bench mcts`: a board and the net's input features.

What a Python programmer would write without the compiled engine, kept straightforward: stones in
a flat list, chains and liberties found by flood fill when needed, positional superko through
Zobrist hashes in a set. Only the rules the benchmarks use: `katago` (positional superko, no
suicide, KataGo's pass-alive scoring), which is tengen.go.board.Board's default.

`encode` writes the same planes and globals as tengen.go.features.encode without previous boards
(LADDERED_1/2 repeat LADDERED_0), in plain Python and numpy: the stone and liberty planes are
bench/features.py's numpy baseline, ladders are read by a search with the same rules as
tengen/go/ladder.pyx (extend or capture an attacker chain in atari; 3 liberties escape, 2 escape
when the attacker cannot ladder again; simple ko, no suicide, a budget of moves per read), and
pass-alive stones and territory come from Benson's algorithm as tengen/go/passalive.pyx states it.
"""
from __future__ import annotations

import random

import numpy as np

from tengen.bench.features import numpy_stone_planes
from tengen.go import planes

EMPTY, BLACK, WHITE = 0, 1, 2
LADDER_BUDGET = 3000  # moves one ladder read may play, as in tengen/go/ladder.pxd
LADDER_MAX_DEPTH = 400  # nested moves, as there (repeating captures can cycle without superko)
MAX_CAPTURE_MOVES = 16  # escapes by capture tried per defender turn, as in tengen/go/ladder.pyx

_NEIGHBOURS: dict[int, list[list[int]]] = {}
_RNG = random.Random(7)
_ZOBRIST = [[_RNG.getrandbits(64) for _ in range(19 * 19)] for _ in range(3)]  # [color][point]


def neighbours(size: int) -> list[list[int]]:
    """For each point y * size + x, its on-board neighbours."""
    if size not in _NEIGHBOURS:
        table = []
        for p in range(size * size):
            y, x = divmod(p, size)
            table.append([ny * size + nx for ny, nx in ((y - 1, x), (y, x - 1), (y, x + 1), (y + 1, x))
                          if 0 <= ny < size and 0 <= nx < size])
        _NEIGHBOURS[size] = table
    return _NEIGHBOURS[size]


def chain_and_liberties(stones: list[int], nbrs: list[list[int]], p: int) -> tuple[set[int], set[int]]:
    """The chain of the stone at p and its liberties."""
    color = stones[p]
    chain, libs, todo = {p}, set(), [p]
    while todo:
        q = todo.pop()
        for n in nbrs[q]:
            if stones[n] == EMPTY:
                libs.add(n)
            elif stones[n] == color and n not in chain:
                chain.add(n)
                todo.append(n)
    return chain, libs


class PyBoard:
    """A square Go position under `katago` rules, with the parts of Board's API the search uses."""

    def __init__(self, size: int, komi: float = 7.5) -> None:
        self.x_size = self.y_size = size
        self.area = size * size
        self.pass_move = self.area
        self.komi = komi
        self.nbrs = neighbours(size)
        self.stones = [EMPTY] * self.area
        self.to_move = BLACK
        self.ko_point: int | None = None
        self.history: list[tuple[int, int]] = []  # (color, move)
        self.passes = 0
        self.hash = 0
        self.seen = {0}

    @classmethod
    def from_board(cls, board) -> "PyBoard":
        """The same game as a compiled Board, replayed move by move."""
        out = cls(board.x_size, board.komi)
        for _, move in board.history:
            out.play(move)
        return out

    def copy(self) -> "PyBoard":
        """An independent copy (position, history, superko set)."""
        out = PyBoard.__new__(PyBoard)
        out.__dict__.update(self.__dict__)
        out.stones = self.stones[:]
        out.history = self.history[:]
        out.seen = set(self.seen)
        return out

    @property
    def game_over(self) -> bool:
        return self.passes >= 2

    def _outcome(self, p: int, color: int) -> tuple[str | None, list[int], int]:
        """(illegal reason or None, stones captured, hash after) of color playing at empty p."""
        opp = 3 - color
        captured: set[int] = set()
        has_lib = False
        for n in self.nbrs[p]:
            if self.stones[n] == EMPTY:
                has_lib = True
            elif self.stones[n] == opp and n not in captured:
                chain, libs = chain_and_liberties(self.stones, self.nbrs, n)
                if libs == {p}:
                    captured |= chain
            elif self.stones[n] == color and not has_lib:
                _, libs = chain_and_liberties(self.stones, self.nbrs, n)
                has_lib = len(libs) > 1
        if not has_lib and not captured:
            return "suicide", [], self.hash
        h = self.hash ^ _ZOBRIST[color][p]
        for q in captured:
            h ^= _ZOBRIST[opp][q]
        if h in self.seen:
            return "superko", [], h
        return None, list(captured), h

    def illegal_reason(self, move: int) -> str | None:
        """None if `to_move` may play `move`, else why not, checked in Board's order."""
        if move == self.pass_move:
            return None
        if self.stones[move] != EMPTY:
            return "occupied"
        if move == self.ko_point:
            return "ko"
        return self._outcome(move, self.to_move)[0]

    def legal_moves(self) -> np.ndarray:
        """Bool array of length area + 1 (pass last), as Board.legal_moves."""
        out = np.zeros(self.area + 1, bool)
        for p in range(self.area):
            out[p] = self.illegal_reason(p) is None
        out[self.area] = True
        return out

    def play(self, move: int) -> None:
        """Play `move` for `to_move` (ValueError if illegal), capturing and setting the ko point."""
        color = self.to_move
        if move == self.pass_move:
            self.passes += 1
            self.ko_point = None
        else:
            reason = self.illegal_reason(move)
            if reason is not None:
                raise ValueError(f"illegal move {move}: {reason}")
            _, captured, self.hash = self._outcome(move, color)
            self.stones[move] = color
            for q in captured:
                self.stones[q] = EMPTY
            self.passes = 0
            self.ko_point = None
            if len(captured) == 1:
                chain, libs = chain_and_liberties(self.stones, self.nbrs, move)
                if len(chain) == 1 and len(libs) == 1:
                    self.ko_point = captured[0]
            self.seen.add(self.hash)
        self.history.append((color, move))
        self.to_move = 3 - color

    def stones_array(self) -> np.ndarray:
        return np.array(self.stones, np.int8).reshape(self.y_size, self.x_size)


# ------------------------------------------------------------------------------ ladders


class _LadderRead:
    """One ladder question on a scratch copy of the stones (moves played and taken back)."""

    def __init__(self, board: PyBoard) -> None:
        self.stones = board.stones[:]
        self.nbrs = board.nbrs
        self.ko = (board.ko_point, board.to_move)  # (point, the color it binds)
        self.moves_left = LADDER_BUDGET
        self.depth = 0
        self.aborted = False

    def libs(self, p: int) -> set[int]:
        return chain_and_liberties(self.stones, self.nbrs, p)[1]

    def play(self, p: int, color: int):
        """Play and return what undo needs, or None if illegal (occupied, ko, suicide) or the
        budget is spent (then `aborted`)."""
        if self.stones[p] != EMPTY or (p, color) == self.ko:
            return None
        if self.moves_left <= 0 or self.depth >= LADDER_MAX_DEPTH:
            self.aborted = True
            return None
        opp = 3 - color
        self.moves_left -= 1  # a suicide tried counts too, as in tengen/go/ladder.pyx
        self.stones[p] = color
        captured: set[int] = set()
        for n in self.nbrs[p]:
            if self.stones[n] == opp and n not in captured:
                chain, libs = chain_and_liberties(self.stones, self.nbrs, n)
                if not libs:
                    captured |= chain
        if not captured and not self.libs(p):
            self.stones[p] = EMPTY
            return None
        for q in captured:
            self.stones[q] = EMPTY
        chain, libs = chain_and_liberties(self.stones, self.nbrs, p)
        self.depth += 1
        undo = (p, captured, self.ko)
        # A lone stone that took one stone and has one liberty: the opponent may not retake.
        if len(captured) == 1 and len(chain) == 1 and len(libs) == 1:
            self.ko = (next(iter(captured)), opp)
        else:
            self.ko = (None, 0)
        return undo

    def undo(self, undo) -> None:
        p, captured, self.ko = undo
        self.depth -= 1
        opp = 3 - self.stones[p]
        self.stones[p] = EMPTY
        for q in captured:
            self.stones[q] = opp

    def escapes(self, p: int) -> list[int]:
        """The defender's tries for the chain at p in atari: its liberty, then the liberties of
        adjacent attacker chains in atari (captures)."""
        chain, libs = chain_and_liberties(self.stones, self.nbrs, p)
        lib = next(iter(libs))
        tries = [lib]
        opp = 3 - self.stones[p]
        attackers_seen: set[int] = set()
        for q in chain:
            for n in self.nbrs[q]:
                if self.stones[n] == opp and n not in attackers_seen:
                    attacker, attacker_libs = chain_and_liberties(self.stones, self.nbrs, n)
                    attackers_seen |= attacker
                    if len(attacker_libs) == 1:
                        move = next(iter(attacker_libs))
                        if move not in tries and len(tries) <= MAX_CAPTURE_MOVES:
                            tries.append(move)
        return tries

    def defender_loses(self, p: int) -> bool:
        """Defender to move, chain at p in atari: True when no escape works."""
        color = self.stones[p]
        for move in self.escapes(p):
            undo = self.play(move, color)
            if undo is None:
                if self.aborted:
                    return False
                continue
            escaped = self.escaped(p)
            self.undo(undo)
            if escaped or self.aborted:
                return False
        return True

    def escaped(self, p: int) -> bool:
        libs = self.libs(p)
        if len(libs) >= 3:
            return True
        if len(libs) <= 1:
            return False
        return not self.attacker_wins(p, list(libs))

    def attacker_wins(self, p: int, libs: list[int]) -> bool:
        """Chain at p with two liberties, attacker to move: True when an atari on one works."""
        for move in libs:
            undo = self.play(move, 3 - self.stones[p])
            if undo is None:
                if self.aborted:
                    return False
                continue
            wins = self.defender_loses(p)
            self.undo(undo)
            if self.aborted:
                return False
            if wins:
                return True
        return False


def _ladder_planes(board: PyBoard, laddered: np.ndarray, working: np.ndarray) -> None:
    """LADDERED_0 (chains in or one move from inescapable atari) and LADDER_WORKING_MOVE."""
    done: set[int] = set()
    for p, color in enumerate(board.stones):
        if color == EMPTY or p in done:
            continue
        chain, libs = chain_and_liberties(board.stones, board.nbrs, p)
        done |= chain
        attacker = 3 - color
        found = []
        if len(libs) == 1:
            read = _LadderRead(board)
            caught = read.defender_loses(p) and not read.aborted
        elif len(libs) == 2:
            for move in sorted(libs):
                if attacker == board.to_move and board.illegal_reason(move) is not None:
                    continue
                read = _LadderRead(board)
                undo = read.play(move, attacker)
                if undo is not None and read.defender_loses(p) and not read.aborted:
                    found.append(move)
                    if attacker != board.to_move:
                        break  # the player to move's own chain: one working move settles it
            caught = bool(found)
        else:
            continue
        if caught:
            for q in chain:
                laddered[divmod(q, board.x_size)] = 1.0
            if attacker == board.to_move:
                for move in found:
                    working[divmod(move, board.x_size)] = 1.0


# ------------------------------------------------------------------------------ pass-alive


def pass_alive_for(board: PyBoard, pla: int) -> set[int]:
    """pla's pass-alive stones and territory (Benson's algorithm, suicide illegal)."""
    stones, nbrs = board.stones, board.nbrs
    chain_of: dict[int, int] = {}
    chains: list[set[int]] = []
    for p, c in enumerate(stones):
        if c == pla and p not in chain_of:
            chain = chain_and_liberties(stones, nbrs, p)[0]
            for q in chain:
                chain_of[q] = len(chains)
            chains.append(chain)
    if not chains:
        return set()
    # Regions: maximal connected sets of points that are not pla's stones.
    regions: list[list[int]] = []
    seen: set[int] = set()
    for p, c in enumerate(stones):
        if c == pla or p in seen:
            continue
        region, todo = [], [p]
        seen.add(p)
        while todo:
            q = todo.pop()
            region.append(q)
            for n in nbrs[q]:
                if stones[n] != pla and n not in seen:
                    seen.add(n)
                    todo.append(n)
        regions.append(region)
    border = [{chain_of[n] for q in r for n in nbrs[q] if stones[n] == pla} for r in regions]
    # A region is vital to a chain when each of its empty points (at least one) is a liberty of it.
    vital = []
    for r, region in enumerate(regions):
        empties = [q for q in region if stones[q] == EMPTY]
        vital.append({ci for ci in border[r]
                      if all(any(chain_of.get(n) == ci for n in nbrs[q]) for q in empties)}
                     if empties else set())
    alive_chains = set(range(len(chains)))
    alive_regions = set(range(len(regions)))
    while True:
        dead = {ci for ci in alive_chains if sum(ci in vital[r] for r in alive_regions) < 2}
        if not dead:
            break
        alive_chains -= dead
        alive_regions = {r for r in alive_regions if border[r] <= alive_chains}
    out = set()
    for ci in alive_chains:
        out |= chains[ci]
    for r in alive_regions:
        lonely = sum(1 for q in regions[r] if not any(stones[n] == pla for n in nbrs[q]))
        if border[r] and lonely <= 1:
            out.update(regions[r])
    return out


def pass_alive_map(board: PyBoard) -> list[int]:
    """Per point: BLACK / WHITE where that player's pass-alive stones or territory are, else 0."""
    out = [EMPTY] * board.area
    for pla in (BLACK, WHITE):
        for p in pass_alive_for(board, pla):
            out[p] = pla
    return out


def final_score(board: PyBoard) -> float:
    """Black minus White minus komi under KataGo's scoring: pass-alive areas first, then
    Tromp-Taylor area (stones, and empty regions reaching one color only)."""
    alive = pass_alive_map(board)
    owner = [0] * board.area
    seen: set[int] = set()
    for p, c in enumerate(board.stones):
        if alive[p]:
            owner[p] = 1 if alive[p] == BLACK else -1
        elif c != EMPTY:
            owner[p] = 1 if c == BLACK else -1
        elif p not in seen:
            region, reach, todo = [], set(), [p]
            seen.add(p)
            while todo:
                q = todo.pop()
                region.append(q)
                for n in board.nbrs[q]:
                    if board.stones[n] == EMPTY:
                        if n not in seen:
                            seen.add(n)
                            todo.append(n)
                    else:
                        reach.add(board.stones[n])
            value = 1 if reach == {BLACK} else (-1 if reach == {WHITE} else 0)
            for q in region:
                if not alive[q]:
                    owner[q] = value
    return sum(owner) - board.komi


# ------------------------------------------------------------------------------ features


def encode(board: PyBoard, spatial: np.ndarray, global_: np.ndarray) -> None:
    """The planes and globals of tengen.go.features.encode (no previous boards) into
    spatial [NUM_SPATIAL, size, size] and global_ [NUM_GLOBAL]."""
    size = board.x_size
    pla, opp = board.to_move, 3 - board.to_move
    spatial[:] = 0
    global_[:] = 0
    numpy_stone_planes(board.stones_array(), pla, spatial)  # ON_BOARD .. LIBERTIES_3
    for p in range(board.area):
        if board.stones[p] == EMPTY and board.illegal_reason(p) in ("ko", "superko"):
            spatial[planes.KO_ILLEGAL][divmod(p, size)] = 1.0
    for i, (color, move) in enumerate(reversed(board.history[-5:])):
        if color != (opp if i % 2 == 0 else pla):
            break
        if move == board.pass_move:
            global_[planes.PREV_PASS_1 + i] = 1.0
        else:
            spatial[planes.PREV_MOVE_1 + i][divmod(move, size)] = 1.0
    _ladder_planes(board, spatial[planes.LADDERED_0], spatial[planes.LADDER_WORKING_MOVE])
    spatial[planes.LADDERED_1] = spatial[planes.LADDERED_0]
    spatial[planes.LADDERED_2] = spatial[planes.LADDERED_0]
    for p, owner in enumerate(pass_alive_map(board)):
        if owner:
            spatial[planes.PASS_ALIVE_OWN if owner == pla else planes.PASS_ALIVE_OPP][divmod(p, size)] = 1.0
    self_komi = board.komi if pla == WHITE else -board.komi
    global_[planes.KOMI] = self_komi / 15.0
    global_[planes.KO_RULE_KIND] = 0.5  # positional superko
    d = (self_komi - board.area) % 2.0
    global_[planes.KOMI_PARITY] = d if d < 0.5 else (1.0 - d if d < 1.5 else d - 2.0)
