"""Test helper: Go positions and expected point sets from ASCII diagrams.

Rows are top first, cells separated by spaces (spaces are optional). Cells:
  X / O      black / white stone
  x / o      black / white stone that belongs to the marked set 'x' / 'o'
  . or +     empty point
  any other  empty point marked with that character (e.g. '*', 'a', '1')
"""
from __future__ import annotations

import numpy as np

from tengen.go.board import BLACK, Board
from tengen.go.rules import KATAGO, Rules


def _rows(diagram: str) -> list[str]:
    rows = [line.replace(" ", "") for line in diagram.strip().splitlines()]
    rows = [r for r in rows if r]
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("diagram rows must be non-empty and of equal length")
    return rows


def marks(diagram: str) -> dict[str, set[int]]:
    """Move indices (y * width + x) of every marked cell, by mark character."""
    rows = _rows(diagram)
    found: dict[str, set[int]] = {}
    for y, row in enumerate(rows):
        for x, ch in enumerate(row):
            if ch not in "XO.+":
                found.setdefault(ch, set()).add(y * len(row) + x)
    return found


def board(diagram: str, to_move: int = BLACK, rules: Rules = KATAGO, komi: float = 7.5) -> Board:
    """A board with the diagram's stones as setup stones (marks removed) and `to_move` to play."""
    plain = "\n".join(
        "".join(
            ch.upper() if ch in "xo" else (ch if ch in "XO.+" else ".") for ch in row
        )
        for row in _rows(diagram)
    )
    return Board.from_diagram(plain, rules=rules, komi=komi, to_move=to_move)


def points(plane: np.ndarray) -> set[int]:
    """Move indices where a [H, W] plane is non-zero (the board in its top-left corner)."""
    ys, xs = np.nonzero(plane)
    return {int(y) * plane.shape[1] + int(x) for y, x in zip(ys, xs)}


def move(x: int, y: int, width: int) -> int:
    """Move index of column x, row y."""
    return y * width + x
