"""The net: architecture constants, output shapes, masking across board sizes, score parity."""
from __future__ import annotations

import pytest
import torch
from nn_support import batch, crop_policy, randomize_batchnorm

from tengen.go import planes
from tengen.nn.export import quiet_torchscript
from tengen.nn.model import (
    ARCHITECTURES,
    NUM_SCORE_BINS,
    OFF_BOARD_LOGIT,
    SCORE_LIMIT,
    FixedScaleNormReLU,
    GlobalPoolResBlock,
    InferenceNet,
    KataGoNet,
    MaskedBatchNormReLU,
    ModelOutputs,
    NestedBottleneckBlock,
    board_geometry,
    build_model,
    score_parity,
    score_values,
)

torch.set_num_threads(1)


def test_paper_sizes_match_table_3() -> None:
    expected = {  # n, c, c_pool, c_head, c_val, global pooling blocks (AAAI paper Table 3 / A.6)
        "b6c96": (6, 96, 32, 32, 48, 2),
        "b10c128": (10, 128, 32, 32, 64, 2),
        "b15c192": (15, 192, 64, 32, 80, 2),
        "b20c256": (20, 256, 64, 48, 96, 3),
    }
    for name, constants in expected.items():
        a = ARCHITECTURES[name]
        assert (a.blocks, a.channels, a.pool_channels, a.head_channels, a.value_channels, a.gpool_blocks) == constants
    assert ARCHITECTURES["b6c96"].gpool_positions() == (2, 4)
    assert ARCHITECTURES["b20c256"].gpool_positions() == (5, 10, 15)
    model = build_model("b10c128")
    kinds = [isinstance(block, GlobalPoolResBlock) for block in model.trunk.blocks]
    assert len(kinds) == 10 and [i for i, k in enumerate(kinds) if k] == [3, 6]


def test_unknown_architecture_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown architecture 'b7c7'"):
        build_model("b7c7")


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_output_shapes(name: str) -> None:
    model = build_model(name).eval()
    spatial, global_inputs = batch([(7, 9), (7, 7)])
    with torch.no_grad():
        out = model(spatial, global_inputs)
    shapes = {k: tuple(v.shape) for k, v in out._asdict().items()}
    assert shapes == {
        "policy_logits": (2, 64),
        "opponent_policy_logits": (2, 64),
        "soft_policy_logits": (2, 64),
        "optimistic_policy_logits": (2, 64),
        "value_logits": (2, 3),
        "score_mean": (2,),
        "score_stdev": (2,),
        "root_variance": (2, 4),
        "ownership_logits": (2, 7, 9),
        "ownership": (2, 7, 9),
        "score_belief_logits": (2, NUM_SCORE_BINS),
        "score_gamma": (2,),
        "mask": (2, 7, 9),
        "short_term": (2, 4),
    }
    assert all(torch.isfinite(v).all() for v in out)
    assert (out.score_stdev > 0).all() and (out.root_variance > 0).all()
    assert out.ownership.abs().max() <= 1.0


def test_bad_inputs_are_rejected() -> None:
    model = build_model("b1c16")
    spatial, global_inputs = batch([(9, 9)])
    with pytest.raises(ValueError, match="spatial must be"):
        model(spatial[:, :17], global_inputs)
    with pytest.raises(ValueError, match="globals must be"):
        model(spatial, global_inputs[:, :9])
    with pytest.raises(ValueError, match="batch sizes differ"):
        model(spatial, torch.cat([global_inputs, global_inputs]))


def test_board_length_pooling_scales() -> None:
    spatial, _ = batch([(9, 9), (19, 19), (7, 7)])
    geo = board_geometry(spatial)
    assert geo.area.squeeze(1).tolist() == [81.0, 361.0, 49.0]
    assert geo.size_scale.squeeze(1).tolist() == pytest.approx([-0.5, 0.5, -0.7])
    # ((b - 14)^2 - 10) / 100, sigma^2 = 10 being the variance of b over 9..19.
    assert geo.size_scale_sq.squeeze(1).tolist() == pytest.approx([0.15, 0.15, 0.39])
    assert geo.total.item() == 81 + 361 + 49


def test_score_parity() -> None:
    scores = score_values()
    assert scores[0].item() == -SCORE_LIMIT + 0.5 and scores[-1].item() == SCORE_LIMIT - 0.5
    # 19x19, black to move with komi 7.5: own - opp is odd, so scores are 1.5 mod 2.
    parity = score_parity(torch.tensor([361.0, 81.0]), torch.tensor([-7.5, 7.0]), scores)
    at = {s: i for i, s in enumerate(scores.tolist())}
    assert [parity[0, at[s]].item() for s in (-0.5, 0.5, 1.5, 2.5)] == [1.0, 0.0, 1.0, 0.0]
    # Integer komi: scores are integers, every half-integer bin is equally (im)possible.
    assert torch.allclose(parity[1], torch.full_like(parity[1], 0.5))


def assert_outputs_match(alone: ModelOutputs, padded: ModelOutputs, index: int, size: int, width: int) -> None:
    """Outputs of position `index` of a padded batch against the same position run at its own size."""
    tol = dict(atol=2e-5, rtol=1e-5)
    for name in ("policy_logits", "opponent_policy_logits", "soft_policy_logits"):
        torch.testing.assert_close(
            crop_policy(getattr(padded, name)[index : index + 1], width, size, size), getattr(alone, name), **tol
        )
    for name in ("value_logits", "score_mean", "score_stdev", "root_variance", "score_belief_logits", "score_gamma"):
        torch.testing.assert_close(getattr(padded, name)[index : index + 1], getattr(alone, name), **tol)
    torch.testing.assert_close(padded.ownership[index : index + 1, :size, :size], alone.ownership, **tol)


def test_masking_eval_mode_small_board_inside_padded_batch() -> None:
    torch.manual_seed(0)
    model = build_model("b2c32")
    randomize_batchnorm(model)
    model.eval()
    small, small_globals = batch([(9, 9)], seed=3)
    mixed, mixed_globals = batch([(19, 19), (13, 13), (9, 9), (7, 7)], seed=4)
    mixed[2], mixed_globals[2] = 0.0, small_globals[0]
    mixed[2, :, :9, :9] = small[0]
    with torch.no_grad():
        alone = model(small, small_globals)
        padded = model(mixed, mixed_globals)
    assert_outputs_match(alone, padded, index=2, size=9, width=19)
    # Off-board points of the padded 9x9: impossible moves and no ownership.
    for logits in (padded.policy_logits, padded.soft_policy_logits):
        board_logits = logits[2, :-1].view(19, 19)
        assert (board_logits[9:, :] == OFF_BOARD_LOGIT).all() and (board_logits[:, 9:] == OFF_BOARD_LOGIT).all()
        assert (board_logits[:9, :9] > OFF_BOARD_LOGIT / 2).all()
    assert (padded.ownership[2, 9:, :] == 0).all() and (padded.ownership[2, :, 9:] == 0).all()


def test_garbage_off_the_board_is_ignored() -> None:
    model = build_model("b1c16")
    randomize_batchnorm(model)
    model.eval()
    spatial, global_inputs = batch([(9, 9), (13, 13)], seed=5)
    noisy = spatial.clone()
    garbage = torch.rand(noisy[0, 1:, 9:, :].shape)
    noisy[0, 1:, 9:, :] = garbage  # ON_BOARD stays 0 there
    with torch.no_grad():
        clean_out, noisy_out = model(spatial, global_inputs), model(noisy, global_inputs)
    for a, b in zip(clean_out, noisy_out):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("sizes", [[(9, 9), (7, 11), (9, 9)], [(9, 11), (9, 11)]])
def test_masked_batchnorm_statistics_in_train_mode(sizes: list[tuple[int, int]]) -> None:
    """The same positions in tight or padded tensors give the same training-mode outputs and
    the same running-statistics updates: statistics count on-board points only."""
    tight, tight_globals = batch(sizes, seed=6)  # padded to 9x11, the smallest tensor that fits
    loose, loose_globals = batch(sizes, seed=6, pad_to=(19, 19))
    torch.manual_seed(0)
    model_a = build_model("b2c32").train()
    model_b = KataGoNet(model_a.architecture).train()
    model_b.load_state_dict(model_a.state_dict())
    out_a = model_a(tight, tight_globals)
    out_b = model_b(loose, loose_globals)
    tol = dict(atol=3e-5, rtol=1e-4)
    for name in ("value_logits", "score_mean", "score_stdev", "root_variance", "score_belief_logits"):
        torch.testing.assert_close(getattr(out_b, name), getattr(out_a, name), **tol)
    for name in ("policy_logits", "soft_policy_logits"):
        torch.testing.assert_close(crop_policy(getattr(out_b, name), 19, 9, 11), getattr(out_a, name), **tol)
    torch.testing.assert_close(out_b.ownership[:, :9, :11], out_a.ownership, **tol)
    buffers_a, buffers_b = dict(model_a.named_buffers()), dict(model_b.named_buffers())
    for name, value in buffers_a.items():
        torch.testing.assert_close(buffers_b[name], value, **tol)
    # The statistics really moved (the test would be vacuous on untouched buffers).
    assert not torch.allclose(buffers_a["trunk.final_norm.running_mean"], torch.zeros(16 * 2))


def test_full_model_is_scriptable() -> None:
    model = build_model("b1c16").eval()
    with quiet_torchscript():
        scripted = torch.jit.script(model)
    spatial, global_inputs = batch([(7, 7), (9, 9)], seed=7)
    with torch.no_grad():
        for a, b in zip(model(spatial, global_inputs), scripted(spatial, global_inputs)):
            torch.testing.assert_close(a, b)


def test_policy_logits_stay_float32_under_bf16_autocast() -> None:
    model = build_model("b1c16").eval()
    spatial, global_inputs = batch([(9, 9), (7, 7)], seed=9)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(spatial, global_inputs)
    for logits in (out.policy_logits, out.opponent_policy_logits, out.soft_policy_logits):
        assert logits.dtype == torch.float32
        assert (logits[1, :-1].view(9, 9)[7:, :] == OFF_BOARD_LOGIT).all()  # not bf16's -9984


def test_soft_policy_head_is_training_only() -> None:
    model = build_model("b1c16").eval()
    served = InferenceNet(model)
    assert not [name for name in served.state_dict() if "soft" in name]
    assert [name for name in model.state_dict() if "soft" in name] == [
        "soft_policy_head.out_conv.weight", "soft_policy_head.pass_linear.weight"]
    # Its parameters are the net's last (old checkpoints' optimizer ids depend on it).
    assert [name for name, _ in model.named_parameters()][-2:] == [
        "soft_policy_head.out_conv.weight", "soft_policy_head.pass_linear.weight"]
    spatial, global_inputs = batch([(9, 9), (7, 7)], seed=10)
    with torch.no_grad():
        policy, value, score, ownership, _ = served(spatial, global_inputs)
        full = model(spatial, global_inputs)
    assert [tuple(t.shape) for t in (policy, value, score, ownership)] == [(2, 82), (2, 3), (2, 2), (2, 9, 9)]
    torch.testing.assert_close(policy, full.policy_logits)
    assert not torch.allclose(full.soft_policy_logits, full.policy_logits)


def test_global_inputs_bias_the_trunk() -> None:
    model = build_model("b1c16").eval()
    spatial, global_inputs = batch([(9, 9)], seed=8)
    changed = global_inputs.clone()
    changed[0, planes.KOMI] += 0.5
    with torch.no_grad():
        a, b = model(spatial, global_inputs), model(spatial, changed)
    assert not torch.allclose(a.value_logits, b.value_logits)


def test_nested_bottleneck_nets_have_the_plain_nets_compute_and_the_fixed_scales() -> None:
    def conv_macs(model: KataGoNet) -> int:  # 3x3 and 1x1 convolutions of the blocks, per point
        return sum(m.weight.numel() for m in model.trunk.blocks.modules() if isinstance(m, torch.nn.Conv2d))

    for plain, nested in (("b4c48", "b4c64nbt"), ("b6c96", "b6c128nbt")):
        assert conv_macs(build_model(nested)) == pytest.approx(conv_macs(build_model(plain)), rel=0.05)
    model = build_model("b4c64nbt")
    blocks = list(model.trunk.blocks)
    assert all(isinstance(b, NestedBottleneckBlock) and len(b.inner) == 2 and b.down.out_channels == 32
               for b in blocks)
    # K = 1/sqrt(1 + branches summed so far): the trunk stream before each block and at the end,
    # the inner stream before each inner block and before the 1x1 back up.
    assert [b.pre_norm.scale for b in blocks] == pytest.approx([1, 2 ** -0.5, 3 ** -0.5, 0.5])
    assert model.trunk.final_norm.scale == pytest.approx(5 ** -0.5)
    assert [inner.norm1.scale for inner in blocks[0].inner] == pytest.approx([1, 2 ** -0.5])
    assert blocks[0].post_norm.scale == pytest.approx(3 ** -0.5)
    # The global pooling block sits inside block 2 (of 4, one pooling block), at half width.
    assert [isinstance(b.inner[0], GlobalPoolResBlock) for b in blocks] == [False, False, True, False]
    assert not any(isinstance(m, MaskedBatchNormReLU) for m in InferenceNet(model).modules())


def test_fixed_variance_initialisation_keeps_the_stream_at_its_input_variance() -> None:
    # At initialisation, what each trunk norm passes on (x * K) keeps about the variance of the
    # first block's input, while the residual stream itself (x) grows with every block.
    torch.manual_seed(0)
    model = build_model("b6c128nbt").train()
    spatial, global_inputs = batch([(9, 9)] * 16, seed=1)
    on = spatial[:, 0] > 0
    seen: list[tuple[float, float]] = []

    def record(module: FixedScaleNormReLU, inputs: tuple[torch.Tensor, ...], _output: torch.Tensor) -> None:
        x = inputs[0].permute(1, 0, 2, 3)[:, on]
        seen.append((float(x.var()), float((x * module.scale).var())))

    for norm in [b.pre_norm for b in model.trunk.blocks] + [model.trunk.final_norm]:
        norm.register_forward_hook(record)
    with torch.no_grad():
        model(spatial, global_inputs)
    raw, scaled = zip(*seen)
    assert raw[-1] > 4 * raw[0]
    assert all(0.5 * scaled[0] < v < 2 * scaled[0] for v in scaled)


def test_one_batch_norm_trains_two_head_sets_and_serves_the_one_without_it() -> None:
    torch.manual_seed(0)
    model = build_model("b1c32nbt").train()
    spatial, global_inputs = batch([(9, 9), (7, 7), (9, 9)], seed=2)
    (w_bn, behind_bn), (w_served, served) = model.training_outputs(spatial, global_inputs)
    assert (w_bn, w_served) == (pytest.approx(0.8), pytest.approx(0.2))
    torch.testing.assert_close(served.policy_logits, model(spatial, global_inputs).policy_logits)
    assert not torch.allclose(behind_bn.value_logits, served.value_logits)
    # No batch statistics on the served path: training and inference mode compute the same function,
    # and a training-mode pass through it moves no running statistic.
    before = {name: b.clone() for name, b in model.named_buffers()}
    assert not torch.allclose(before["bn_norm.running_mean"], torch.zeros(32))  # training_outputs moved it
    with torch.no_grad():
        in_training = model(spatial, global_inputs)
    assert all(torch.equal(b, before[name]) for name, b in model.named_buffers())
    model.eval()
    with torch.no_grad():
        for a, b, c in zip(served, in_training, model(spatial, global_inputs)):
            torch.testing.assert_close(a, b)
            torch.testing.assert_close(a, c)
    # A plain net has one set of heads, weighted 1.
    plain = build_model("b1c16").train()
    assert [w for w, _ in plain.training_outputs(spatial, global_inputs)] == [1.0]


def test_value_head_follows_the_paper_in_plain_nets_and_the_released_nets_in_later_ones() -> None:
    # Paper (Appendix A): V pooled straight from its 1x1 conv, so it can be negative; KataGo's
    # released nets (here the nested ones): normalised and ReLU'd first, so V >= 0, 0 off the board.
    for name, activated in (("b1c16", False), ("b1c32nbt", True)):
        model = build_model(name).eval()
        spatial, global_inputs = batch([(7, 7), (9, 9)], seed=11)
        seen: list[torch.Tensor] = []
        model.value_head.ownership_conv.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0]))
        with torch.no_grad():
            model(spatial, global_inputs)
        v = seen[0]
        assert bool((v >= 0).all()) == activated
        assert (v[0, :, 7:, :] == 0).all() and (v[0, :, :, 7:] == 0).all()
    assert not [k for k in build_model("b1c16").state_dict() if "v_norm" in k]  # old checkpoints still load
