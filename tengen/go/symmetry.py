"""The 8 symmetries of the Go board (the dihedral group D4) for input planes and policy vectors.

A symmetry is an int 0..7 whose bits say what to do to the board, in this order:
bit 0 (FLIP_Y) mirror top <-> bottom, bit 1 (FLIP_X) mirror left <-> right, bit 2 (TRANSPOSE)
swap rows and columns. Symmetry 0 is the identity. `INVERSE[s]` undoes `s`: the symmetries without
a transpose and the two with both or no flips are their own inverse; the two 90-degree rotations
(transpose with one flip) are each other's inverse.

Planes have shape [..., C, H, W] (any leading batch axes); a policy vector has H*W + 1 entries,
indexed like the board's moves (`y * W + x`), with pass last and left in place by every symmetry.

Square boards have all 8 symmetries. A non-square board keeps its shape only under the 4 without
a transpose (`symmetries_for(h, w)` lists the allowed ones); asking for a transposing symmetry of
a non-square board raises ValueError.

Boards smaller than the buffer (a 9x9 game written into a 19x19 buffer, board in the top-left
corner, see tengen.go.features) are transformed by passing the board's `height`/`width`: only that
corner is mapped, the rest of the buffer stays zero, so the board stays in the corner.
"""
from __future__ import annotations

import numpy as np

FLIP_Y = 1
FLIP_X = 2
TRANSPOSE = 4
NUM_SYMMETRIES = 8
# Applying s then INVERSE[s] gives back the input (5 = flip-y + transpose and 6 = flip-x +
# transpose are the two quarter turns).
INVERSE: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 5, 7)


def _check(symmetry: int, height: int, width: int) -> None:
    if not 0 <= symmetry < NUM_SYMMETRIES:
        raise ValueError(f"symmetry must be in 0..7, got {symmetry}")
    if symmetry & TRANSPOSE and height != width:
        raise ValueError(
            f"symmetry {symmetry} transposes, which a non-square {height}x{width} board does not allow"
        )


def symmetries_for(height: int, width: int) -> tuple[int, ...]:
    """The symmetries that keep a height x width board's shape: all 8 when square, else 4."""
    return tuple(range(8)) if height == width else (0, 1, 2, 3)


def _transform(grid: np.ndarray, symmetry: int) -> np.ndarray:
    """The symmetry applied to the last two axes of `grid` (a view)."""
    if symmetry & FLIP_Y:
        grid = grid[..., ::-1, :]
    if symmetry & FLIP_X:
        grid = grid[..., :, ::-1]
    if symmetry & TRANSPOSE:
        grid = np.swapaxes(grid, -1, -2)
    return grid


def apply_planes(
    planes: np.ndarray, symmetry: int, height: int | None = None, width: int | None = None
) -> np.ndarray:
    """A new array: the planes [..., C, H, W] under `symmetry`.

    With `height`/`width` smaller than the buffer, only the top-left height x width board is
    transformed and the rest of the result is zero.
    """
    if planes.ndim < 2:
        raise ValueError(f"planes need at least 2 dimensions [..., H, W], got shape {planes.shape}")
    buf_h, buf_w = planes.shape[-2:]
    height = buf_h if height is None else height
    width = buf_w if width is None else width
    if not (0 < height <= buf_h and 0 < width <= buf_w):
        raise ValueError(f"board {height}x{width} does not fit planes of shape {planes.shape}")
    _check(symmetry, height, width)
    if (height, width) == (buf_h, buf_w):
        return np.ascontiguousarray(_transform(planes, symmetry))
    out = np.zeros_like(planes)
    out[..., :height, :width] = _transform(planes[..., :height, :width], symmetry)
    return out


def inverse_planes(
    planes: np.ndarray, symmetry: int, height: int | None = None, width: int | None = None
) -> np.ndarray:
    """Undo `apply_planes(planes, symmetry, ...)`."""
    _check(symmetry, 1, 1)
    return apply_planes(planes, INVERSE[symmetry], height, width)


def apply_policy(policy: np.ndarray, symmetry: int, height: int, width: int) -> np.ndarray:
    """A new array: policy vectors [..., H*W + 1] (pass last, kept fixed) under `symmetry`."""
    if policy.shape[-1] != height * width + 1:
        raise ValueError(
            f"policy of length {policy.shape[-1]} does not match a {height}x{width} board "
            f"({height * width + 1} with pass)"
        )
    _check(symmetry, height, width)
    out = np.empty_like(policy)
    lead = policy.shape[:-1]
    grid = policy[..., :-1].reshape(*lead, height, width)
    out[..., :-1] = _transform(grid, symmetry).reshape(*lead, height * width)
    out[..., -1] = policy[..., -1]
    return out


def inverse_policy(policy: np.ndarray, symmetry: int, height: int, width: int) -> np.ndarray:
    """Undo `apply_policy(policy, symmetry, height, width)`: e.g. map a net's policy for the
    transformed input back to the real board."""
    _check(symmetry, height, width)
    return apply_policy(policy, INVERSE[symmetry], height, width)


def apply_move(move: int, symmetry: int, height: int, width: int) -> int:
    """Where move index `move` (`y * width + x`, pass = height * width) goes under `symmetry`,
    consistent with apply_planes/apply_policy."""
    _check(symmetry, height, width)
    if move == height * width:
        return move
    if not 0 <= move < height * width:
        raise ValueError(f"move {move} is off a {height}x{width} board")
    y, x = divmod(move, width)
    if symmetry & FLIP_Y:
        y = height - 1 - y
    if symmetry & FLIP_X:
        x = width - 1 - x
    if symmetry & TRANSPOSE:
        y, x = x, y
    return y * width + x
