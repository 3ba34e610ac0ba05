"""The trainer's learning side: learning-rate schedule, SWA average, steps on window batches,
and checkpoints that resume exactly."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from trainer_support import fill_window

from tengen.config import TrainerConfig, load_config
from tengen.nn.loss import LOSS_TERMS
from tengen.train.learner import Learner, SwaAverager, learning_rate
from tengen.train.window import Window


def test_learning_rate_follows_the_schedule() -> None:
    config = TrainerConfig(lr_per_sample=6e-5, lr_decay_lambda=1e-7, warmup_samples=5_000_000, warmup_lr_factor=1 / 3)
    assert learning_rate(0, config) == pytest.approx(2e-5)  # the AAAI paper's warm-up rate
    assert learning_rate(4_999_999, config) == pytest.approx(2e-5 * (1.4999999) ** (-4 / 3))
    assert learning_rate(5_000_000, config) == pytest.approx(6e-5 * 1.5 ** (-4 / 3))
    assert learning_rate(20_000_000, config) == pytest.approx(6e-5 * 3.0 ** (-4 / 3))


def test_swa_is_an_exponential_moving_average_of_snapshots() -> None:
    model = torch.nn.BatchNorm1d(2)
    swa = SwaAverager(0.75)
    for value in (1.0, 2.0, 3.0):
        with torch.no_grad():
            model.weight.fill_(value)
            model.running_mean.fill_(-value)
        model.num_batches_tracked.fill_(int(value))
        swa.update(model)
    # 1 -> 0.75 * 1 + 0.25 * 2 = 1.25 -> 0.75 * 1.25 + 0.25 * 3 = 1.6875
    assert torch.allclose(swa.average["weight"], torch.full((2,), 1.6875))
    assert torch.allclose(swa.average["running_mean"], torch.full((2,), -1.6875))
    assert int(swa.average["num_batches_tracked"]) == 3 and swa.snapshots == 3
    assert float(model.weight.detach()[0]) == 3.0  # the live model is untouched


@pytest.fixture(scope="module")
def filled_window(tmp_path_factory: pytest.TempPathFactory) -> Window:
    return fill_window(Window(tmp_path_factory.mktemp("window"), 7, c=500), 300, seed=11)


def tiny_config(**changes: object) -> TrainerConfig:
    config = load_config("tiny").trainer
    settings: dict[str, object] = {"arch": "b1c16", "batch_size": 16, "min_rows_to_train": 100, **changes}
    return dataclasses.replace(config, **settings)


def test_learner_steps_checkpoints_and_resumes_exactly(filled_window: Window, tmp_path: Path) -> None:
    torch.manual_seed(0)
    learner = Learner(tiny_config(snapshot_every=32, candidate_every=64), filled_window, seed=3)
    assert learner.can_train()
    for _ in range(4):
        report = learner.step()
        assert all(math.isfinite(report[name]) for name in LOSS_TERMS + ("total",))
        if learner.snapshot_due():
            learner.take_snapshot()
    assert learner.counters.samples == 64 and learner.swa.snapshots == 2
    assert report["lr_per_sample"] == learning_rate(48, learner.config)
    path = tmp_path / "checkpoint.pt"
    learner.save(path)
    after = [learner.step()["total"] for _ in range(3)]
    weights = {k: v.clone() for k, v in learner.model.state_dict().items()}

    torch.manual_seed(99)  # a different init: everything must come from the checkpoint
    resumed = Learner(tiny_config(snapshot_every=32, candidate_every=64), filled_window, seed=4)
    resumed.load(path)
    assert resumed.counters.samples == 64 and resumed.swa.snapshots == 2
    assert [resumed.step()["total"] for _ in range(3)] == after
    for name, value in resumed.model.state_dict().items():
        assert torch.equal(value, weights[name]), name

    candidate = resumed.candidate()
    assert not candidate.training and resumed.counters.candidates == 1
    for name, value in candidate.state_dict().items():
        assert torch.equal(value, resumed.swa.average[name]), name
    with pytest.raises(ValueError, match="b2c32"):
        Learner(dataclasses.replace(tiny_config(), arch="b2c32"), filled_window).load(path)


SOFT_KEYS = ("soft_policy_head.out_conv.weight", "soft_policy_head.pass_linear.weight")


def _old_checkpoint(path: Path, old: Path) -> dict:
    """`path` as the trainer saved it before the soft policy head existed: no head in the net or
    the SWA average, and an optimizer over the other parameters only (the head's are the last)."""
    state = torch.load(path, weights_only=False)
    state["model"] = {k: v for k, v in state["model"].items() if k not in SOFT_KEYS}
    state["swa"]["average"] = {k: v for k, v in state["swa"]["average"].items() if k not in SOFT_KEYS}
    group = state["optimizer"]["param_groups"][0]
    kept = group["params"][: -len(SOFT_KEYS)]
    group["params"] = kept
    state["optimizer"]["state"] = {i: v for i, v in state["optimizer"]["state"].items() if i in kept}
    torch.save(state, old)
    return state


def test_a_checkpoint_from_before_the_soft_policy_head_loads(filled_window: Window, tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = tiny_config(snapshot_every=16, candidate_every=32, soft_policy_weight=8.0)
    learner = Learner(config, filled_window, seed=3)
    for _ in range(2):
        learner.step()
        learner.take_snapshot()
    learner.save(tmp_path / "new.pt")
    state = _old_checkpoint(tmp_path / "new.pt", tmp_path / "old.pt")

    torch.manual_seed(99)
    resumed = Learner(config, filled_window, seed=4)
    fresh = {k: v.clone() for k, v in resumed.model.state_dict().items() if k in SOFT_KEYS}
    resumed.load(tmp_path / "old.pt")
    weights = resumed.model.state_dict()
    for name, value in state["model"].items():
        assert torch.equal(weights[name], value), name
    for name, value in fresh.items():  # the head as this net initialised it, in the average too
        assert torch.equal(weights[name], value) and torch.equal(resumed.swa.average[name], value), name
    momentum = {name: resumed.optimizer.state[p].get("momentum_buffer") for name, p in resumed.model.named_parameters()}
    saved = state["optimizer"]["state"]
    for i, (name, _) in enumerate(list(resumed.model.named_parameters())[: -len(SOFT_KEYS)]):
        assert torch.equal(momentum[name], saved[i]["momentum_buffer"]), name
    assert all(momentum[name] is None for name in SOFT_KEYS)
    assert resumed.counters.samples == 32 and resumed.swa.snapshots == 2
    assert resumed.step()["soft_policy"] > 0 and not torch.equal(resumed.model.state_dict()[SOFT_KEYS[0]],
                                                                 fresh[SOFT_KEYS[0]])
    resumed.take_snapshot()
    resumed.candidate()
    resumed.save(tmp_path / "again.pt")
    Learner(config, filled_window).load(tmp_path / "again.pt")


@pytest.mark.parametrize("damage", ["other_key", "one_soft_key", "soft_shape"])
def test_only_a_missing_soft_policy_head_is_tolerated(filled_window: Window, tmp_path: Path, damage: str) -> None:
    learner = Learner(tiny_config(), filled_window)
    learner.save(tmp_path / "new.pt")
    state = torch.load(tmp_path / "new.pt", weights_only=False)
    if damage == "other_key":
        state = _old_checkpoint(tmp_path / "new.pt", tmp_path / "old.pt")
        del state["model"]["trunk.input_conv.weight"]
    elif damage == "one_soft_key":
        del state["model"][SOFT_KEYS[1]]
    else:
        state["model"][SOFT_KEYS[0]] = torch.zeros(2, *state["model"][SOFT_KEYS[0]].shape[1:])
    torch.save(state, tmp_path / "damaged.pt")
    with pytest.raises(RuntimeError, match="state_dict"):
        Learner(tiny_config(), filled_window).load(tmp_path / "damaged.pt")


def test_soft_policy_weight_comes_from_the_preset(filled_window: Window) -> None:
    assert load_config("tiny").trainer.soft_policy_weight == 0.0  # off: it measured as a loss on this box
    assert load_config("paper").trainer.soft_policy_weight == 8.0
    torch.manual_seed(0)
    on = Learner(tiny_config(soft_policy_weight=8.0), filled_window, seed=5).step()
    torch.manual_seed(0)
    off = Learner(tiny_config(), filled_window, seed=5).step()
    assert on["soft_policy"] > 0 and off["soft_policy"] == 0.0
    assert on["policy"] == off["policy"] and off["total"] < on["total"]


def test_l2_comes_from_the_preset(filled_window: Window) -> None:
    """trainer.l2 is the loss's c: 0 drops the term, 1e-3 is 1e-3 times the weights' squared norm."""
    torch.manual_seed(0)
    none = Learner(tiny_config(l2=0.0), filled_window, seed=5)
    assert none.step()["l2"] == 0.0
    torch.manual_seed(0)
    strong = Learner(tiny_config(l2=1e-3), filled_window, seed=5)
    norm = sum(float((p.detach() ** 2).sum()) for p in strong.model.parameters() if p.requires_grad)
    assert strong.step()["l2"] == pytest.approx(1e-3 * norm, rel=1e-3)


def test_training_waits_for_rows_and_keeps_pace_with_data(filled_window: Window) -> None:
    assert not Learner(tiny_config(min_rows_to_train=10_000), filled_window).can_train()
    # About samples_per_row samples per row ever appended, then it waits for more games.
    learner = Learner(tiny_config(samples_per_row=0.1), filled_window)
    steps = 0
    while learner.can_train():
        learner.step()
        steps += 1
    assert steps == int(0.1 * filled_window.n_total) // 16


def test_a_tiny_net_learns_from_the_window(filled_window: Window) -> None:
    torch.manual_seed(1)
    learner = Learner(tiny_config(lr_per_sample=2e-4, warmup_samples=0, samples_per_row=1000), filled_window, seed=1)
    first = np.mean([learner.step()["policy"] for _ in range(3)])
    for _ in range(60):
        learner.step()
    last = np.mean([learner.step()["policy"] for _ in range(3)])
    assert last < first


def test_prefetched_batches_are_the_same_batches(filled_window: Window) -> None:
    losses = []
    for prefetch in (0, 2):
        torch.manual_seed(5)
        learner = Learner(tiny_config(), filled_window, seed=7, prefetch=prefetch)
        losses.append([learner.step()["total"] for _ in range(4)])
        # Going back (as after loading a checkpoint) draws the earlier batches again.
        first = learner.batches.get(0)[0]
        assert torch.equal(first, Learner(tiny_config(), filled_window, seed=7).batches.get(0)[0])
        learner.close()
    assert losses[0] == losses[1]


def test_a_failing_prefetch_thread_fails_the_step(filled_window: Window, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = Learner(tiny_config(), filled_window, prefetch=1)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(filled_window, "sample", broken)
    with pytest.raises(RuntimeError, match="preparing a training batch failed") as err:
        learner.step()
    assert isinstance(err.value.__cause__, OSError)
    learner.close()


def _poisoned_window(directory: Path, all_rows: bool) -> Window:
    """Every row poisoned, or the first of each game (tests/trainer_support.py)."""
    return fill_window(Window(directory, 7, c=500), 300, seed=5, poison="all" if all_rows else "first")


def _state(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in learner.model.state_dict().items()}


def test_non_finite_steps_change_nothing_and_are_counted(tmp_path: Path) -> None:
    torch.manual_seed(0)
    window = _poisoned_window(tmp_path / "all", all_rows=True)
    learner = Learner(tiny_config(), window, seed=1)
    before = _state(learner)
    reports = [learner.step() for _ in range(5)]
    assert [r["skipped"] for r in reports] == [1.0] * 5
    assert not all(math.isfinite(r["total"]) for r in reports)
    assert learner.counters.skipped_steps == 5 and learner.counters.steps == 5 and learner.counters.samples == 0
    after = _state(learner)
    # Not one weight moved (batch-norm running statistics saw the batches, and stay finite).
    for name, value in learner.model.named_parameters():
        assert torch.equal(value.detach(), before[name]), name
    assert learner.finite() and all(torch.isfinite(t).all() for t in after.values() if t.is_floating_point())
    learner.save(tmp_path / "checkpoint.pt")  # a finite net saves


def test_a_few_poisoned_rows_leave_the_net_finite_and_learning(tmp_path: Path) -> None:
    torch.manual_seed(0)
    window = _poisoned_window(tmp_path / "some", all_rows=False)
    learner = Learner(tiny_config(), window, seed=2)
    reports = [learner.step() for _ in range(40)]
    skipped = sum(r["skipped"] for r in reports)
    # Batches of 16 from a window with 9 poisoned rows of 322: about a third hold one; every
    # batch without one trained, and nothing non-finite reached the weights.
    assert 0 < skipped < 40 and learner.counters.samples == 16 * (40 - skipped)
    assert learner.finite()
    assert all(math.isfinite(r["total"]) for r in reports if not r["skipped"])


def test_a_non_finite_net_is_never_saved_or_averaged(filled_window: Window, tmp_path: Path) -> None:
    from tengen.train.learner import NonFiniteError

    torch.manual_seed(0)
    learner = Learner(tiny_config(snapshot_every=16, candidate_every=16), filled_window, seed=3)
    learner.step()
    path = tmp_path / "checkpoint.pt"
    learner.save(path)
    good = path.read_bytes()
    with torch.no_grad():
        next(learner.model.parameters()).view(-1)[0] = float("nan")
    assert not learner.finite()
    with pytest.raises(NonFiniteError):
        learner.save(path)
    with pytest.raises(NonFiniteError):
        learner.take_snapshot()
    assert path.read_bytes() == good and learner.swa.snapshots == 0
