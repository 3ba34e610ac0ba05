"""`tengen bench fit`: two architectures trained on one window for equal steps, scored on another."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tengen.data.synthetic import random_game
from tengen.loop.rows import rows_from_record
from tengen.train.window import Window


def _window(path, seed: int, games: int = 6) -> None:
    rng = np.random.default_rng(seed)
    window = Window(path, 7, c=1_000_000)
    try:
        for _ in range(games):
            record = random_game(rng, 7, full_search_prob=1.0)
            window.append(record.id, rows_from_record(record, 7))
    finally:
        window.close()


def _fit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tengen.cli", "bench", "fit", *args],
                          capture_output=True, text=True, timeout=300)


def test_bench_fit_trains_each_architecture_for_the_baselines_steps(tmp_path) -> None:
    _window(tmp_path / "a", seed=1)
    _window(tmp_path / "b", seed=2)
    result = _fit("--seconds", "1", "--window", str(tmp_path / "a"), "--held-out", str(tmp_path / "b"),
                  "--archs", "b1c16,b1c32nbt", "--preset", "tiny")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    base, nested = figures["archs"]["b1c16"], figures["archs"]["b1c32nbt"]
    assert base["steps"] >= 2 and nested["steps"] == base["steps"] and nested["samples"] == base["samples"]
    assert base["cpu_per_step_ratio"] == 1.0 and nested["cpu_per_step_ratio"] > 0
    for arch in (base, nested):
        for rows in ("held_out", "train_rows"):
            assert all(np.isfinite(v) and v > 0 for v in arch[rows].values())
    # The one-batch-norm net serves heads that compute the same in train and eval mode.
    assert "served_train_eval_max_diff" not in base and nested["served_train_eval_max_diff"] < 1e-4


def test_bench_fit_says_what_is_wrong_with_its_input(tmp_path) -> None:
    _window(tmp_path / "a", seed=1, games=1)
    (tmp_path / "empty").mkdir()
    result = _fit("--window", str(tmp_path / "a"), "--held-out", str(tmp_path / "empty"))
    assert result.returncode != 0 and "is not a window" in result.stderr
    result = _fit("--window", str(tmp_path / "a"), "--held-out", str(tmp_path / "a"), "--archs", "b4c48,b9c9")
    assert result.returncode != 0 and "unknown: b9c9" in result.stderr
