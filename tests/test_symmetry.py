"""The 8 board symmetries: round trips, group structure, policy/plane/move consistency."""
from __future__ import annotations

import numpy as np
import pytest

from tengen.go import symmetry as sym

RNG = np.random.default_rng(7)


def test_the_eight_symmetries_are_distinct_and_round_trip() -> None:
    planes = RNG.random((3, 5, 5)).astype(np.float32)
    images = [sym.apply_planes(planes, s) for s in range(8)]
    for s, image in enumerate(images):
        assert image.shape == planes.shape and image.flags.c_contiguous
        np.testing.assert_array_equal(sym.inverse_planes(image, s), planes)
        for t in range(s):
            assert not np.array_equal(image, images[t]), (s, t)


def test_known_symmetries() -> None:
    grid = np.arange(6, dtype=np.float32).reshape(1, 2, 3)  # [[0 1 2] [3 4 5]]
    np.testing.assert_array_equal(sym.apply_planes(grid, sym.FLIP_Y)[0], [[3, 4, 5], [0, 1, 2]])
    np.testing.assert_array_equal(sym.apply_planes(grid, sym.FLIP_X)[0], [[2, 1, 0], [5, 4, 3]])
    square = np.arange(4).reshape(1, 2, 2)  # [[0 1] [2 3]]
    np.testing.assert_array_equal(sym.apply_planes(square, sym.TRANSPOSE)[0], [[0, 2], [1, 3]])
    # flip-y then transpose is a quarter turn clockwise.
    np.testing.assert_array_equal(sym.apply_planes(square, 5)[0], np.rot90(square[0], -1))


def test_group_is_closed_and_inverse_table_is_right() -> None:
    planes = RNG.random((1, 4, 4))
    images = [sym.apply_planes(planes, s) for s in range(8)]
    for s in range(8):
        for t in range(8):
            composed = sym.apply_planes(images[s], t)
            assert any(np.array_equal(composed, image) for image in images)
        back = sym.apply_planes(images[s], sym.INVERSE[s])
        np.testing.assert_array_equal(back, planes)


def test_policy_round_trip_keeps_pass_and_matches_planes_and_moves() -> None:
    h = w = 7
    policy = RNG.random((2, h * w + 1))
    for s in range(8):
        out = sym.apply_policy(policy, s, h, w)
        assert (out[:, -1] == policy[:, -1]).all()
        np.testing.assert_array_equal(sym.inverse_policy(out, s, h, w), policy)
        # The policy's board part moves exactly like a plane.
        as_plane = sym.apply_planes(policy[:, None, :-1].reshape(2, 1, h, w), s)
        np.testing.assert_array_equal(out[:, :-1], as_plane.reshape(2, h * w))
        for move in (0, 3, 10, 48, h * w):
            onehot = np.zeros(h * w + 1)
            onehot[move] = 1
            assert sym.apply_policy(onehot, s, h, w).argmax() == sym.apply_move(move, s, h, w)


def test_non_square_boards_allow_only_four() -> None:
    assert sym.symmetries_for(9, 13) == (0, 1, 2, 3)
    assert len(sym.symmetries_for(9, 9)) == 8
    planes = RNG.random((2, 3, 4))
    for s in range(4):
        np.testing.assert_array_equal(sym.inverse_planes(sym.apply_planes(planes, s), s), planes)
        policy = RNG.random(13)
        np.testing.assert_array_equal(
            sym.inverse_policy(sym.apply_policy(policy, s, 3, 4), s, 3, 4), policy
        )
    with pytest.raises(ValueError, match="non-square"):
        sym.apply_planes(planes, sym.TRANSPOSE)
    with pytest.raises(ValueError, match="non-square"):
        sym.apply_move(0, 6, 3, 4)


def test_board_in_a_larger_buffer_stays_in_the_corner() -> None:
    buf = np.zeros((2, 19, 19), np.float32)
    buf[:, :9, :9] = RNG.random((2, 9, 9))
    for s in range(8):
        out = sym.apply_planes(buf, s, 9, 9)
        assert not out[:, 9:, :].any() and not out[:, :, 9:].any()
        np.testing.assert_array_equal(out[:, :9, :9], sym.apply_planes(buf[:, :9, :9], s))
        np.testing.assert_array_equal(sym.inverse_planes(out, s, 9, 9), buf)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="0..7"):
        sym.apply_planes(np.zeros((1, 3, 3)), 8)
    with pytest.raises(ValueError, match="does not match"):
        sym.apply_policy(np.zeros(9), 0, 3, 3)
    with pytest.raises(ValueError, match="off a"):
        sym.apply_move(9 + 1, 0, 3, 3)
    with pytest.raises(ValueError, match="does not fit"):
        sym.apply_planes(np.zeros((1, 3, 3)), 0, 4, 4)
