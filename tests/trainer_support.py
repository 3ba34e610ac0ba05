"""Windows of random 7x7 games for the trainer's tests, clean or poisoned with the weight 3e38 that
once passed record validation (appended straight to the window, as a gap in validation would)."""
from __future__ import annotations

import numpy as np

from tengen.data.synthetic import random_game
from tengen.loop.rows import rows_from_record
from tengen.train.window import Window

POISON = 3e38


def fill_window(window: Window, rows: int, seed: int, poison: str = "") -> Window:
    """Appends random 7x7 games (half their moves full searches) until the window holds `rows`
    rows; `poison` "all" gives every row the weight 3e38, "first" the first row of each game."""
    if poison not in ("", "all", "first"):
        raise ValueError(f"poison must be '', 'all' or 'first', got {poison!r}")
    rng = np.random.default_rng(seed)
    while window.n_total < rows:
        record = random_game(rng, 7, full_search_prob=0.5)
        game_rows = rows_from_record(record, 7)
        if poison == "all":
            game_rows.weight[:] = POISON
        if poison:
            game_rows.weight[0] = POISON
        window.append(record.id, game_rows)
    return window
