"""The on-disk training window: formula, durability across restarts and kills, dedupe, torn
writes, uniform sampling from the window only, symmetries applied at sampling."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tengen.go import planes, symmetry
from tengen.loop.rows import TrainingRows
from tengen.train.window import Window, window_size

POS_LEN = 9


def fake_rows(seed: int, n: int, x_size: int = POS_LEN, y_size: int = POS_LEN, pos_len: int = POS_LEN) -> TrainingRows:
    """n rows with random binary planes and targets; score holds (seed, row) for identification."""
    rng = np.random.default_rng(seed)
    area = pos_len * pos_len
    spatial = np.zeros((n, planes.NUM_SPATIAL, pos_len, pos_len), np.float32)
    spatial[:, :, :y_size, :x_size] = rng.integers(0, 2, size=(n, planes.NUM_SPATIAL, y_size, x_size))
    policy = np.zeros((n, area + 1), np.float32)
    grid = policy[:, :area].reshape(n, pos_len, pos_len)
    grid[:, :y_size, :x_size] = rng.random((n, y_size, x_size))
    policy[:, area] = rng.random(n)
    policy /= policy.sum(axis=1, keepdims=True)
    ownership = np.zeros((n, pos_len, pos_len), np.float32)
    ownership[:, :y_size, :x_size] = rng.integers(-1, 2, size=(n, y_size, x_size))
    return TrainingRows(
        x_size=x_size,
        y_size=y_size,
        spatial=spatial,
        global_inputs=rng.random((n, planes.NUM_GLOBAL)).astype(np.float32),
        policy=policy,
        opponent_policy=policy[::-1].copy(),
        value=np.tile(np.float32([1, 0, 0]), (n, 1)),
        score=(seed * 1000 + np.arange(n)).astype(np.float32),
        ownership=ownership,
        weight=rng.random(n).astype(np.float32),
    )


def test_window_formula_matches_hand_computed_values() -> None:
    c = 250_000
    # (N/c)^0.75 by hand: 4^0.75 = 2^1.5 = 2.828427, 16^0.75 = 8.
    assert window_size(c, c) == c
    assert window_size(4 * c, c) == 493_790  # 250000 * (1 + 0.4 * 1.828427 / 0.75) = 493790.3
    assert window_size(16 * c, c) == 1_183_333  # 250000 * (1 + 0.4 * 7 / 0.75) = 1183333.3
    assert window_size(2000, 500) == 987  # the tiny preset's c
    # Below c the formula exceeds N_total, so the window is everything there is.
    assert window_size(c // 2, c) == c // 2
    assert window_size(1, c) == 1 and window_size(0, c) == 0
    # Grows, but more slowly than N_total, so the window's start only moves forward.
    sizes = [window_size(n, 1000) for n in range(0, 20_000, 250)]
    starts = [n - s for n, s in zip(range(0, 20_000, 250), sizes)]
    assert sizes == sorted(sizes) and starts == sorted(starts)
    with pytest.raises(ValueError):
        window_size(10, 0)


def _all_rows(window: Window) -> np.ndarray:
    return window.read(np.arange(window.start, window.n_total))


def test_restart_keeps_every_row_and_dedupe(tmp_path: Path) -> None:
    window = Window(tmp_path, POS_LEN, c=10_000, shard_rows=16)
    expected = []
    for seed in range(12):
        rows = fake_rows(seed, 3 + seed % 5, x_size=7 + seed % 3, y_size=7 + seed % 2)
        assert window.append(f"game-{seed}", rows)
        expected.append(rows)
    assert window.append("empty-game", fake_rows(99, 0))
    assert not window.append("game-3", fake_rows(3, 4))  # duplicate: ignored
    total = sum(len(r) for r in expected)
    assert window.n_total == total == len(window)
    window.close()

    reopened = Window(tmp_path, POS_LEN, c=10_000, shard_rows=16)
    assert reopened.n_total == total and reopened.games == 13
    assert "game-5" in reopened and "empty-game" in reopened
    assert not reopened.append("game-5", fake_rows(5, 2))
    stored = _all_rows(reopened)
    scores = np.concatenate([r.score for r in expected])
    np.testing.assert_array_equal(stored["score"], scores)
    np.testing.assert_array_equal(stored["weight"], np.concatenate([r.weight for r in expected]))
    np.testing.assert_array_equal(stored["x_size"], np.concatenate([[r.x_size] * len(r) for r in expected]))
    batch = reopened._unpack(stored, np.arange(total), np.random.default_rng(0), augment=False)
    np.testing.assert_array_equal(batch.spatial, np.concatenate([r.spatial for r in expected]))
    np.testing.assert_array_equal(batch.policy, np.concatenate([r.policy for r in expected]))
    np.testing.assert_array_equal(batch.ownership, np.concatenate([r.ownership for r in expected]))
    np.testing.assert_array_equal(batch.global_inputs, np.concatenate([r.global_inputs for r in expected]))


def test_old_shards_are_dropped_as_the_window_slides(tmp_path: Path) -> None:
    window = Window(tmp_path, POS_LEN, c=40, shard_rows=8)
    for seed in range(100):
        window.append(f"g{seed}", fake_rows(seed, 5))
    assert window.n_total == 500
    assert len(window) == window_size(500, 40) < 500
    # Only shards overlapping the window are kept, on disk too.
    assert len(window) <= window.stored_rows() < len(window) + 8 + 5
    files = list((tmp_path / "shards").iterdir())
    assert sum(f.stat().st_size for f in files) == window.stored_rows() * window.dtype.itemsize
    with pytest.raises(IndexError):
        window.read(np.array([window.start - 1]))
    # The tail of the window is exactly the last rows appended.
    np.testing.assert_array_equal(_all_rows(window)["score"][-5:], fake_rows(99, 5).score)


def test_torn_append_is_invisible_after_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    window = Window(tmp_path, POS_LEN, c=1000, shard_rows=4)
    window.append("a", fake_rows(1, 3))
    window.append("b", fake_rows(2, 3))  # opens a second shard
    before = _all_rows(window)

    def crash(*args: object) -> None:
        raise OSError("simulated crash before the manifest is replaced")

    with monkeypatch.context() as patch:
        patch.setattr("tengen.train.window.os.replace", crash)
        with pytest.raises(OSError):
            window.append("c", fake_rows(3, 5))  # rows and id written, manifest not
    assert (tmp_path / "game_ids.jsonl").read_bytes().count(b"\n") == 3  # the torn id is on disk
    # A crashed process would also leave a shard the manifest never named.
    (tmp_path / "shards" / "000000009999.rows").write_bytes(b"\0" * 100)
    window.close()  # the process dies

    reopened = Window(tmp_path, POS_LEN, c=1000, shard_rows=4)
    assert reopened.n_total == 6 and "c" not in reopened and reopened.games == 2
    np.testing.assert_array_equal(_all_rows(reopened), before)
    assert not (tmp_path / "shards" / "000000009999.rows").exists()
    assert reopened.append("c", fake_rows(3, 5))
    np.testing.assert_array_equal(_all_rows(reopened)["score"][-5:], fake_rows(3, 5).score)
    # The same holds in a process that saw the failure and goes on: its next append overwrites the tail.
    with monkeypatch.context() as patch:
        patch.setattr("tengen.train.window.os.replace", crash)
        with pytest.raises(OSError):
            reopened.append("e", fake_rows(5, 4))
    assert reopened.append("d", fake_rows(4, 2))
    reopened.close()
    with Window(tmp_path, POS_LEN, c=1000) as last:
        assert last.n_total == 13 and "e" not in last and "d" in last


CHILD = textwrap.dedent(
    """
    import sys
    from tengen.train.window import Window
    from tests.test_train_window import fake_rows
    window = Window(sys.argv[1], 9, c=10_000, shard_rows=8)
    for seed in range(int(sys.argv[2]), 10_000):
        window.append(f"g{seed}", fake_rows(seed, 1 + seed % 4))
        print(seed, flush=True)
    """
)


def test_kill_during_appends_keeps_every_acknowledged_game(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    acked: list[int] = []
    for start in (0, 1000):  # two kills; the second run appends onto the recovered window
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(start)],
                                stdout=subprocess.PIPE, text=True, cwd=root)
        assert proc.stdout is not None
        target = 40 + start // 50
        while len([a for a in acked if a >= start]) < target:
            line = proc.stdout.readline()
            assert line, "child ended early"
            acked.append(int(line))
        time.sleep(0.01 * (1 + start // 1000))  # land the kill at some point inside an append
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        acked.extend(int(line) for line in proc.stdout.read().split())  # printed before the kill
        proc.stdout.close()
    window = Window(tmp_path, 9, c=10_000, read_only=True)  # as it was left: the recovery is checked below
    assert window.games >= len(acked)
    window = Window(tmp_path, 9, c=10_000)
    assert all(f"g{seed}" in window for seed in acked)
    # The window holds the acknowledged games (plus maybe the one in flight), in order, whole.
    games = sorted(seed for seed in list(range(0, 1000)) + list(range(1000, 2000)) if f"g{seed}" in window)
    scores = np.concatenate([fake_rows(seed, 1 + seed % 4).score for seed in games])
    np.testing.assert_array_equal(_all_rows(window)["score"], scores)
    assert window.n_total == len(scores) and window.games == len(games) <= len(acked) + 2


OPENER = textwrap.dedent(
    """
    import sys, time
    from tengen.train.window import Window, WindowError
    refused = read = 0
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        try:
            Window(sys.argv[1], 9, c=10_000, shard_rows=8).close()
        except WindowError:
            refused += 1
        try:
            read += Window(sys.argv[1], 9, c=10_000, read_only=True).games > 0
        except (WindowError, OSError, ValueError):  # caught between two files of an append
            pass
    print(refused, read, flush=True)
    """
)


def test_concurrent_opens_cannot_hurt_the_writer(tmp_path: Path) -> None:
    """Opening a window runs recovery (truncating, deleting): once, a second opener crashed the live
    trainer and concurrent opens left a window that no longer opened. Now a second writer is refused
    before it touches a file, and read-only opens change nothing."""
    root = Path(__file__).resolve().parent.parent
    writer = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), "0"], stdout=subprocess.PIPE, text=True,
                              cwd=root)
    assert writer.stdout is not None
    acked = [int(writer.stdout.readline())]  # the window exists and holds a game
    openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(tmp_path), "5"], stdout=subprocess.PIPE,
                                text=True, cwd=root) for _ in range(2)]
    results = [opener.communicate(timeout=120)[0].split() for opener in openers]
    assert writer.poll() is None, "the writer died while others opened its window"
    writer.kill()
    writer.wait()
    acked.extend(int(line) for line in writer.stdout.read().split())
    writer.stdout.close()
    assert all(int(refused) > 0 and int(read) > 0 for refused, read in results), results
    window = Window(tmp_path, 9, c=10_000)  # recovers and opens: nothing was corrupted
    assert all(f"g{seed}" in window for seed in acked)
    scores = np.concatenate([fake_rows(seed, 1 + seed % 4).score
                             for seed in sorted(int(g[1:]) for g in window.game_ids())])
    np.testing.assert_array_equal(_all_rows(window)["score"], scores)


def _chi_square_quantile(df: int, z: float) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at standard-normal z."""
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def test_sampling_is_uniform_over_the_window_only(tmp_path: Path) -> None:
    window = Window(tmp_path, POS_LEN, c=100, shard_rows=16)
    for seed in range(60):
        window.append(f"g{seed}", fake_rows(seed, 5))
    size = len(window)
    assert size == window_size(300, 100) == 168 and window.start == 132
    rng = np.random.default_rng(1234)
    draws = np.concatenate([window.sample(256, rng).rows for _ in range(40)])
    assert draws.min() >= window.start and draws.max() < window.n_total
    counts = np.bincount(draws - window.start, minlength=size)
    expected = len(draws) / size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # A fixed seed, so this is deterministic; the bounds are the 0.1% and 99.9% quantiles.
    assert _chi_square_quantile(size - 1, -3.09) < chi2 < _chi_square_quantile(size - 1, 3.09)


def test_samples_carry_their_symmetry(tmp_path: Path) -> None:
    window = Window(tmp_path, POS_LEN, c=1000)
    originals = {}
    for seed, (x, y) in enumerate([(9, 9), (7, 7), (9, 7), (8, 8)]):
        rows = fake_rows(seed, 6, x_size=x, y_size=y)
        window.append(f"g{seed}", rows)
        for i in range(len(rows)):
            originals[float(rows.score[i])] = (rows, i)
    batch = window.sample(400, np.random.default_rng(5))
    assert set(batch.symmetry.tolist()) == set(range(8))
    area = POS_LEN * POS_LEN
    for k in range(len(batch.rows)):
        rows, i = originals[float(batch.score[k])]
        h, w, s = rows.y_size, rows.x_size, int(batch.symmetry[k])
        assert s in symmetry.symmetries_for(h, w)
        np.testing.assert_array_equal(batch.spatial[k], symmetry.apply_planes(rows.spatial[i], s, h, w))
        np.testing.assert_array_equal(batch.ownership[k], symmetry.apply_planes(rows.ownership[i], s, h, w))
        if h == w:  # the policy's board part moves with the planes, pass stays last
            grid = rows.policy[i, :area].reshape(POS_LEN, POS_LEN)[:h, :w].ravel()
            moved = symmetry.apply_policy(np.append(grid, rows.policy[i, area]), s, h, w)
            policy = batch.policy[k].reshape(-1)[:area].reshape(POS_LEN, POS_LEN)
            np.testing.assert_array_equal(policy[:h, :w].ravel(), moved[:-1])
            assert batch.policy[k, area] == rows.policy[i, area]
        np.testing.assert_array_equal(batch.global_inputs[k], rows.global_inputs[i])


def test_bad_input_is_refused(tmp_path: Path) -> None:
    window = Window(tmp_path, POS_LEN, c=100)
    with pytest.raises(ValueError, match="pos_len"):
        window.append("x", fake_rows(1, 2, pos_len=11))
    rows = fake_rows(1, 2)
    rows.spatial[0, 0, 0, 0] = 0.5
    with pytest.raises(ValueError, match="binary"):
        window.append("x", rows)
    rows = fake_rows(1, 2)
    rows.weight[1] = np.nan
    with pytest.raises(ValueError, match="weights"):
        window.append("x", rows)
    assert window.n_total == 0 and "x" not in window
    with pytest.raises(ValueError, match="empty"):
        window.sample(4, np.random.default_rng(0))
    window.append("y", fake_rows(1, 2))
    window.close()
    with pytest.raises(Exception, match="pos_len 9, not 11"):
        Window(tmp_path, 11, c=100)


def test_cropped_batches_keep_every_board_value(tmp_path: Path) -> None:
    window = Window(tmp_path, 13, c=1000)
    rows7, rows9 = fake_rows(1, 4, 7, 7, pos_len=13), fake_rows(2, 4, 9, 7, pos_len=13)
    window.append("a", rows7)
    window.append("b", rows9)
    full = window.sample(64, np.random.default_rng(3))
    small = full.cropped()
    assert small.pos_len == 9 and full.pos_len == 13
    np.testing.assert_array_equal(small.spatial, full.spatial[:, :, :9, :9])
    assert full.spatial[:, :, 9:, :].sum() == 0 and full.spatial[:, :, :, 9:].sum() == 0
    for big, cut in ((full.policy, small.policy), (full.opponent_policy, small.opponent_policy)):
        np.testing.assert_array_equal(cut[:, :81].reshape(-1, 9, 9), big[:, :169].reshape(-1, 13, 13)[:, :9, :9])
        np.testing.assert_array_equal(cut[:, 81], big[:, 169])
        np.testing.assert_allclose(cut.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(small.ownership, full.ownership[:, :9, :9])
    only7 = Window(tmp_path / "seven", 13, c=1000)
    only7.append("a", rows7)
    assert only7.sample(8, np.random.default_rng(0), crop=True).spatial.shape[-2:] == (7, 7)
