"""A bigger net mid-run (`tengen run --arch`): when the preset trains another architecture than
the trainer's checkpoint, a fresh net of it takes the run over. It keeps the run's sample count,
warms its learning rate up from its own start, trains up to one pass over the window at the run's
density ahead of the data, and only then offers its first candidate; the old checkpoint is kept.
A restart continues the new net instead of switching again."""
from __future__ import annotations

from pathlib import Path

from trainer_support import fill_window

from tengen.config import Config, load_config
from tengen.loop.layout import DataDir
from tengen.train.learner import Learner, learning_rate
from tengen.train.service import TrainerService
from tengen.train.window import Window

POS_LEN = 7  # the tiny preset's board


def _config(data_dir: Path, **trainer: object) -> Config:
    env = {"TENGEN_DATA_DIR": str(data_dir), "TENGEN_KAFKA_BOOTSTRAP": "127.0.0.1:9",
           **{f"TENGEN_TRAINER__{key.upper()}": str(value) for key, value in trainer.items()}}
    return load_config("tiny", env=env)


def _close(service: TrainerService) -> None:
    service.learner.close()
    service.window.close()


def test_a_bigger_net_takes_over_and_catches_up_on_the_window(tmp_path: Path) -> None:
    old = _config(tmp_path)
    window = Window(DataDir(tmp_path).window, POS_LEN, c=old.trainer.window_c)
    fill_window(window, 400, seed=3)
    window.close()

    # The old net at the data's cap: it waits for self-play.
    service = TrainerService(old)
    batch, per_row = old.trainer.batch_size, old.trainer.samples_per_row
    at = int(per_row * service.window.n_total) // batch * batch
    service.learner.counters.samples = at
    assert not service.learner.can_train()
    service.learner.save(service.checkpoint_path)
    _close(service)
    old_checkpoint = DataDir(tmp_path).checkpoint.read_bytes()

    new = _config(tmp_path, arch="b1c16")
    service = TrainerService(new)
    try:
        kept = DataDir(tmp_path).retired_checkpoint(old.trainer.arch)
        assert kept.read_bytes() == old_checkpoint
        assert Learner.checkpoint_arch(DataDir(tmp_path).checkpoint) == ("b1c16", at)
        learner = service.learner
        counters = learner.counters
        rows = len(service.window)
        assert (counters.samples, counters.net_start, counters.catch_up) == (at, at, int(per_row * rows))
        first_candidate = at + max(int(per_row * rows), new.trainer.candidate_every)
        assert counters.next_candidate == first_candidate
        # Ahead of the data by its catch-up, on its own learning-rate schedule.
        assert learner.can_train()
        assert learner.step()["lr_per_sample"] == learning_rate(0, new.trainer)
        due: list[int] = []

        def train() -> None:
            while learner.can_train():
                learner.step()
                if learner.snapshot_due() and learner.take_snapshot():
                    due.append(learner.counters.samples)

        train()
        end = at + int(per_row * rows)
        assert end - batch < learner.counters.samples <= end  # one pass over the window, then it waits
        assert due == []  # no candidate while it catches up
        fill_window(service.window, len(service.window) + 150, seed=4)  # self-play goes on
        train()
        assert due and due[0] >= first_candidate
        learner.save(service.checkpoint_path)
    finally:
        _close(service)

    # A restart continues the new net: no second switch, the catch-up kept.
    again = TrainerService(new)
    try:
        assert again.learner.counters.net_start == at and again.learner.counters.catch_up == int(per_row * rows)
        assert not again.learner.can_train() and again.learner.counters.samples == learner.counters.samples
    finally:
        _close(again)
