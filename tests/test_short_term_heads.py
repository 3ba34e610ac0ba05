"""Short-term value/score heads and their error heads: the loss with its stop-gradient, the
uncertainty output of exports with and without the heads, and old checkpoints and exports."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from nn_support import batch
from trainer_support import fill_window

from tengen.config import load_config
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.export import OUTPUT_NAMES, UNKNOWN_UNCERTAINTY, export_model
from tengen.nn.loss import LossWeights, Targets, short_term_terms
from tengen.nn.model import InferenceNet, build_model
from tengen.train.learner import Learner
from tengen.train.window import Window


def _targets(short_term: list[list[float]], weight: list[float]) -> Targets:
    n = len(weight)
    return Targets(policy=torch.zeros(n, 2), opponent_policy=torch.zeros(n, 2), value=torch.zeros(n, 3),
                   score=torch.zeros(n), ownership=torch.zeros(n, 1, 1), weight=torch.ones(n),
                   short_term=torch.tensor(short_term), short_term_weight=torch.tensor(weight))


def test_short_term_losses_by_hand() -> None:
    # predicted (value, score, value error, score error) for two rows; the second has no target
    predicted = torch.tensor([[0.5, 3.0, 0.3, 10.0], [0.9, 9.0, 9.0, 9.0]])
    targets = _targets([[0.1, -1.0], [0.0, 0.0]], [1.0, 0.0])

    def mean(per_sample: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (per_sample * w).sum() / 2

    terms = short_term_terms(predicted, targets, LossWeights(), mean)
    assert float(terms["short_term_value"]) == pytest.approx(1.0 * 0.16 / 2)  # (0.5 - 0.1)^2
    # score miss 4 points: Huber(delta 10) = 0.5 * 16
    assert float(terms["short_term_score"]) == pytest.approx(0.004 * 8.0 / 2)
    # value error: target (0.5 - 0.1)^2 = 0.16, predicted 0.3: Huber(delta 0.4) of 0.14 = 0.5 * 0.0196
    assert float(terms["short_term_value_error"]) == pytest.approx(1.0 * 0.0098 / 2)
    # score error: target 16, predicted 10: Huber(delta 100) of 6 = 18
    assert float(terms["short_term_score_error"]) == pytest.approx(1e-4 * 18.0 / 2)


def test_the_error_losses_do_not_reach_the_predictions() -> None:
    predicted = torch.tensor([[0.5, 3.0, 0.3, 10.0]], requires_grad=True)
    only_errors = LossWeights(short_term_value=0.0, short_term_score=0.0)
    terms = short_term_terms(predicted, _targets([[0.1, -1.0]], [1.0]), only_errors, lambda x, w: (x * w).sum())
    (terms["short_term_value_error"] + terms["short_term_score_error"]).backward()
    grad = predicted.grad[0]
    assert grad[0] == 0 and grad[1] == 0  # stop-gradient: value and score heads get nothing
    assert grad[2] == pytest.approx(0.3 - 0.16) and grad[3] == pytest.approx(1e-4 * (10.0 - 16.0))


def test_no_short_term_targets_no_terms() -> None:
    predicted = torch.zeros(2, 4)
    targets = dataclasses.replace(_targets([[1.0, 1.0]] * 2, [1.0, 1.0]), short_term=None)
    assert all(
        float(t) == 0 for t in short_term_terms(predicted, targets, LossWeights(), lambda x, w: x.sum()).values()
    )


def test_a_net_with_the_heads_trains_them_end_to_end() -> None:
    torch.manual_seed(0)
    model = build_model("b1c16", short_term=True).train()
    spatial, global_inputs = batch([(7, 7), (7, 7)], seed=3)
    out = model(spatial, global_inputs)
    assert out.short_term.shape == (2, 4) and (out.short_term[:, 2:] >= 0).all()
    assert (out.short_term[:, 0].abs() <= 1).all()
    terms = short_term_terms(
        out.short_term,
        _targets([[0.5, 2.0], [-0.5, -2.0]], [1.0, 1.0]),
        LossWeights(short_term_value=0.0, short_term_score=0.0),
        lambda x, w: (x * w).sum(),
    )
    (terms["short_term_value_error"] + terms["short_term_score_error"]).backward()
    # The error loss trains the shared MLP's error outputs only: rows 0 and 1 of the last layer
    # (value and score) get no gradient, rows 2 and 3 do.
    grad = model.short_term_head.out.weight.grad
    assert (grad[:2] == 0).all() and (grad[2:] != 0).any()


@pytest.mark.parametrize("short_term", [False, True])
def test_exports_serve_an_uncertainty_unknown_without_the_heads(tmp_path: Path, short_term: bool) -> None:
    torch.manual_seed(1)
    model = build_model("b1c16", short_term=short_term)
    export_model(model, tmp_path / "m.pt", samples_seen=0)
    spatial, global_inputs = (t.numpy() for t in batch([(9, 9), (9, 9)], seed=2))
    out = TorchEvaluator(tmp_path / "m.pt", precision="fp32").evaluate(spatial, global_inputs)
    assert list(out) == list(OUTPUT_NAMES) and out["uncertainty"].shape == (2, 2)
    if short_term:
        assert (out["uncertainty"] >= 0).all()
    else:
        assert (out["uncertainty"] == UNKNOWN_UNCERTAINTY).all()


def test_an_export_from_before_the_uncertainty_output_gets_the_unknown_constant() -> None:
    class FourOutputs(torch.nn.Module):  # what an older export's forward returns
        def __init__(self) -> None:
            super().__init__()
            self.net = InferenceNet(build_model("b1c16"))

        def forward(self, spatial: torch.Tensor, global_inputs: torch.Tensor):
            return self.net(spatial, global_inputs)[:4]

    spatial, global_inputs = (t.numpy() for t in batch([(7, 7)], seed=5))
    out = TorchEvaluator(FourOutputs(), precision="fp32").evaluate(spatial, global_inputs)
    assert list(out) == list(OUTPUT_NAMES)
    np.testing.assert_array_equal(out["uncertainty"], [[UNKNOWN_UNCERTAINTY, UNKNOWN_UNCERTAINTY]])


def test_a_checkpoint_without_the_heads_loads_into_a_net_with_them(tmp_path: Path) -> None:
    window = fill_window(Window(tmp_path / "w", 7, c=500), 200, seed=4)
    base = dataclasses.replace(
        load_config("tiny").trainer,
        arch="b1c16",
        batch_size=8,
        min_rows_to_train=50,
        snapshot_every=8,
        candidate_every=16,
    )
    torch.manual_seed(0)
    old = Learner(base, window, seed=1)
    old.step()
    old.take_snapshot()
    old.save(tmp_path / "old.pt")
    saved = {k: v.clone() for k, v in old.model.state_dict().items()}

    with_heads = Learner(dataclasses.replace(base, short_term_heads=True), window, seed=1)
    with_heads.load(tmp_path / "old.pt")
    weights = with_heads.model.state_dict()
    for name, value in saved.items():
        assert torch.equal(weights[name], value), name
    assert any(name.startswith("short_term_head.") for name in weights)
    report = with_heads.step()
    assert report["short_term_value"] > 0 and report["short_term_value_error"] > 0
    with_heads.take_snapshot()
    with_heads.candidate()
    assert load_config("tiny").trainer.short_term_heads is False
