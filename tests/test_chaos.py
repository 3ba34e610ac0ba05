"""The fault drill's bookkeeping (tengen.run.chaos) without a run: the games a worker still keeps
in its spool are checked as acknowledged, so a game the broker acknowledged after the drill last
read its log, just before the kill, is not missed. The drill itself runs in tests/test_run_loop.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tengen.config import load_config
from tengen.data.synthetic import random_game
from tengen.infra.outbox import Outbox
from tengen.loop.layout import DataDir
from tengen.loop.rows import rows_from_record
from tengen.run.chaos import Drill, spooled_ids
from tengen.train.window import Window


def test_spooled_games_count_as_acknowledged(tmp_path: Path) -> None:
    config = load_config("tiny")
    assert spooled_ids(tmp_path) == set()  # no worker has spooled anything yet
    for worker, ids in (("0", ["0-a-0-1", "0-a-0-2"]), ("1", ["1-b-0-1"])):
        outbox = Outbox("127.0.0.1:1", "tengen.games", "tengen-trainer", lambda k, v: None,
                        spool_dir=DataDir(tmp_path).outbox(worker))
        for game_id in ids:
            assert outbox.add(game_id, game_id.encode())
    # One of them the trainer already has (committed a moment later, it leaves the spool).
    window = Window(DataDir(tmp_path).window, 7, c=config.trainer.window_c)
    record = random_game(np.random.default_rng(1), 7, game_id="0-a-0-1")
    window.append(record.id, rows_from_record(record, 7))
    window.close()

    drill = Drill("tiny", config, tmp_path, rounds=1)
    drill.acknowledged = {"0-a-0-0"}  # read from the broker before the kill
    assert spooled_ids(tmp_path) == {"0-a-0-1", "0-a-0-2", "1-b-0-1"}
    assert drill._note_spooled() == {"0-a-0-2", "1-b-0-1"}  # at risk: not in the window yet
    assert drill.acknowledged == {"0-a-0-0", "0-a-0-1", "0-a-0-2", "1-b-0-1"}
