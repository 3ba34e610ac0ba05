"""The encoder's planes against a committed fixture of an earlier implementation's outputs.

The fixture (`tests/data/features_fixture.npz`) holds, for every position of a few seeded random
games on 9x9 and 19x19 under several rule sets, all spatial planes (the two positions before
given as history) as the slower, straightforward ladder reader, Benson implementation and
ko-illegal probes produced them (the ones before the fast paths went in). Rewrites of those hot
loops must give the same planes bit for bit. The games favour contact moves next to the last two
moves, so they are full of short-of-liberty chains, ladders, captures and kos.

Regenerate only when the features change on purpose: `python tests/test_features_fixture.py`.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np

from tengen.go import planes
from tengen.go.board import Board
from tengen.go.features import encode

FIXTURE = Path(__file__).parent / "data" / "features_fixture.npz"
PLANES = list(range(planes.NUM_SPATIAL))
# (board size, rules, games, moves per game at most, seed); suicide changes Benson's vital
# regions, the ko rule the ko-illegal points.
GAMES = [(9, "katago", 30, 110, 1), (9, "tromp-taylor", 10, 110, 3), (19, "katago", 6, 330, 2),
         (9, "ko=situational,suicide=yes", 10, 150, 9), (19, "ko=simple,suicide=no", 2, 300, 4)]


def _next_move(board: Board, recent: list[int], rng: random.Random) -> int:
    """A legal move: most often a point next to one of the last two moves, else any legal point."""
    legal = board.legal_moves()
    size = board.x_size
    if recent and rng.random() < 0.7:
        near = []
        for move in recent[-2:]:
            y, x = divmod(move, size)
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < board.y_size and 0 <= nx < size and legal[ny * size + nx]:
                    near.append(ny * size + nx)
        if near:
            return rng.choice(near)
    points = np.flatnonzero(legal[:-1])
    return int(rng.choice(points)) if len(points) else board.pass_move


def positions(size: int, rules: str, games: int, moves: int, seed: int):
    """Every position (after each move) of `games` seeded random games, with the positions one
    and two moves before it (None at the start of a game)."""
    rng = random.Random(seed)
    for _ in range(games):
        board = Board(size, rules=rules)
        history: list[Board | None] = [None, None]
        recent: list[int] = []
        for _ in range(moves):
            history = history[1:] + [board.copy()]
            move = _next_move(board, recent, rng)
            board.play(move)
            if move != board.pass_move:
                recent.append(move)
            yield board, history[1], history[0]
            if board.game_over:
                break


def planes_of(size: int, rules: str, games: int, moves: int, seed: int) -> np.ndarray:
    """The fixture planes of every position, bit-packed: uint8 [positions, len(PLANES), bytes]."""
    spatial = np.zeros((planes.NUM_SPATIAL, size, size), np.float32)
    glob = np.zeros(planes.NUM_GLOBAL, np.float32)
    out = []
    for board, prev1, prev2 in positions(size, rules, games, moves, seed):
        encode(board, spatial, glob, prev1, prev2)
        out.append(np.packbits(spatial[PLANES].reshape(len(PLANES), -1) > 0, axis=1))
    return np.stack(out)


def test_planes_match_the_fixture() -> None:
    fixture = np.load(FIXTURE)
    for size, rules, games, moves, seed in GAMES:
        expected = fixture[f"planes_{size}_{rules}"]
        got = planes_of(size, rules, games, moves, seed)
        assert got.shape == expected.shape, f"{size}x{size} {rules}: position count changed"
        # The positions really exercise ladders and pass-alive areas.
        assert expected[:, planes.LADDERED_0].any() and expected[:, planes.LADDER_WORKING_MOVE].any()
        assert expected[:, planes.PASS_ALIVE_OWN].any()
        differ = np.flatnonzero((got != expected).any(axis=(1, 2)))
        assert len(differ) == 0, (
            f"{size}x{size} {rules}: {len(differ)} of {len(got)} positions differ, first at index {differ[0]}, "
            f"planes {[PLANES[p] for p in np.flatnonzero((got[differ[0]] != expected[differ[0]]).any(axis=1))]}"
        )


if __name__ == "__main__":
    arrays = {f"planes_{size}_{rules}": planes_of(size, rules, games, moves, seed)
              for size, rules, games, moves, seed in GAMES}
    np.savez_compressed(FIXTURE, **arrays)
    for name, array in arrays.items():
        print(name, array.shape, "positions with a point set, per plane:",
              [int(array[:, k].any(axis=1).sum()) for k in range(len(PLANES))], file=sys.stderr)
