"""The optimistic policy head (KataGo's "other methods" notes): built only with the short-term heads,
trained by the learner, carried by exports, and served by test-time evaluators only when asked."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from nn_support import batch
from trainer_support import fill_window

from tengen.config import ConfigError, load_config
from tengen.nn.evaluator import make_evaluator
from tengen.nn.export import export_model, sidecar_path
from tengen.nn.model import InferenceNet, build_model
from tengen.train.learner import Learner
from tengen.train.window import Window

torch.set_num_threads(1)


def test_the_head_needs_the_short_term_heads() -> None:
    with pytest.raises(ValueError, match="needs the short-term heads"):
        build_model("b1c16", optimistic_policy=True)
    with pytest.raises(ConfigError, match="optimistic_policy_weight > 0 needs trainer.short_term_heads"):
        load_config("tiny", env={"TENGEN_TRAINER__OPTIMISTIC_POLICY_WEIGHT": "1"})


@pytest.mark.parametrize("arch", ["b1c16", "b4c64nbt"])
def test_a_net_with_the_head_serves_it_only_when_asked(arch: str) -> None:
    torch.manual_seed(0)
    net = build_model(arch, short_term=True, optimistic_policy=True).eval()
    spatial, global_inputs = batch([(7, 7), (9, 9)], seed=1)
    with torch.no_grad():
        out = net(spatial, global_inputs)
        normal = InferenceNet(net)(spatial, global_inputs)
        optimistic = InferenceNet(net, optimistic=True)(spatial, global_inputs)
    assert torch.equal(normal[0], out.policy_logits) and torch.equal(optimistic[0], out.optimistic_policy_logits)
    on_board = out.policy_logits > -1000
    assert torch.equal(on_board, out.optimistic_policy_logits > -1000)  # masked like the policy
    assert not torch.allclose(out.optimistic_policy_logits[on_board], out.policy_logits[on_board])
    for a, b in zip(normal[1:], optimistic[1:]):  # everything else as it was
        assert torch.equal(a, b)
    if arch.endswith("nbt"):  # the copy behind the one batch norm has its own head
        assert len([n for n, _ in net.named_parameters() if "optimistic_policy_head" in n]) == 4


def test_without_the_head_the_optimistic_output_is_the_policy() -> None:
    net = build_model("b1c16", short_term=True).eval()
    with torch.no_grad():
        out = net(*batch([(7, 7)], seed=2))
    assert torch.equal(out.optimistic_policy_logits, out.policy_logits)
    with pytest.raises(ValueError, match="no optimistic policy head"):
        InferenceNet(net, optimistic=True)


@pytest.mark.parametrize("runtime", ["torch", "openvino"])
def test_exports_carry_the_head_and_evaluators_choose_it(tmp_path: Path, runtime: str) -> None:
    torch.manual_seed(3)
    net = build_model("b1c16", short_term=True, optimistic_policy=True).eval()
    export_model(net, tmp_path / "opt.pt", samples_seen=7)
    export_model(build_model("b1c16"), tmp_path / "plain.pt", samples_seen=7)
    assert json.loads(sidecar_path(tmp_path / "opt.pt").read_text())["optimistic_policy"] is True
    assert json.loads(sidecar_path(tmp_path / "plain.pt").read_text())["optimistic_policy"] is False
    spatial, global_inputs = batch([(9, 9), (9, 9)], seed=4)
    with torch.no_grad():
        out = net(spatial, global_inputs)

    def policy(path: Path, choice: str) -> tuple[bool, np.ndarray]:
        evaluator = make_evaluator(path, 1, precision="fp32", runtime=runtime, policy=choice)
        return evaluator.optimistic, evaluator.evaluate(spatial.numpy(), global_inputs.numpy())["policy"]

    for choice, want in (("normal", out.policy_logits), ("auto", out.optimistic_policy_logits),
                         ("optimistic", out.optimistic_policy_logits)):
        used, got = policy(tmp_path / "opt.pt", choice)
        assert used == (choice != "normal")
        np.testing.assert_allclose(got, want.numpy(), atol=1e-4)
    assert policy(tmp_path / "plain.pt", "auto")[0] is False  # auto: the normal policy of a net without it
    with pytest.raises(ValueError, match="plain.pt has no optimistic policy head"):
        make_evaluator(tmp_path / "plain.pt", 1, runtime=runtime, policy="optimistic")
    with pytest.raises(ValueError, match="unknown policy 'best'"):
        make_evaluator(tmp_path / "opt.pt", 1, runtime=runtime, policy="best")


def test_the_learner_trains_the_head_and_adds_it_to_an_older_checkpoint(tmp_path: Path) -> None:
    window = fill_window(Window(tmp_path / "w", 7, c=500), 200, seed=4)
    base = dataclasses.replace(load_config("tiny").trainer, arch="b1c16", batch_size=8, min_rows_to_train=50,
                               snapshot_every=8, candidate_every=16, short_term_heads=True)
    torch.manual_seed(0)
    old = Learner(base, window, seed=1)
    assert old.step()["optimistic_policy"] == 0.0  # off: no head, no term
    old.take_snapshot()
    old.save(tmp_path / "old.pt")

    optimistic = dataclasses.replace(base, optimistic_policy_weight=1.0)
    learner = Learner(optimistic, window, seed=1)
    learner.load(tmp_path / "old.pt")
    head = "optimistic_policy_head.head.out_conv.weight"
    before = learner.model.state_dict()[head].clone()
    report = learner.step()
    assert report["optimistic_policy"] > 0
    assert not torch.equal(learner.model.state_dict()[head], before)
    learner.take_snapshot()
    assert learner.candidate().optimistic_policy


def test_gtp_refuses_an_optimistic_policy_the_model_lacks(tmp_path: Path) -> None:
    export_model(build_model("b1c16"), tmp_path / "plain.pt", samples_seen=0)
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "gtp", "--model", str(tmp_path / "plain.pt"), "--policy", "optimistic",
         "--visits", "1"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "has no optimistic policy head" in result.stderr
