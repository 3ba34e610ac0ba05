"""The loss of Appendix B: each term finite, weighted as the paper says, with the right gradient sign."""
from __future__ import annotations

import math

import pytest
import torch
from nn_support import batch

from tengen.nn.loss import (
    LOSS_TERMS,
    PAPER_WEIGHTS,
    LossWeights,
    Targets,
    compute_loss,
    compute_training_loss,
    optimistic_weights,
    score_distribution,
    soft_policy_target,
)
from tengen.nn.model import NUM_SCORE_BINS, SCORE_LIMIT, ModelOutputs, build_model, score_values

torch.set_num_threads(1)

SIZE = 3  # hand-made outputs on a 3x3 "board" padded to 4x4: 16 points + pass
MOVES = 17


def bin_of(score: float) -> int:
    return int(score + SCORE_LIMIT - 0.5)


def leaf_outputs(batch_size: int = 2) -> ModelOutputs:
    """Neutral predictions as leaf tensors, so every gradient can be read off."""
    mask = torch.zeros(batch_size, 4, 4)
    mask[:, :SIZE, :SIZE] = 1.0
    policy = torch.zeros(batch_size, MOVES)
    policy[:, :-1] = torch.where(mask.flatten(1) > 0, 0.0, -1.0e4)
    fields = dict(
        policy_logits=policy.clone(),
        opponent_policy_logits=policy.clone(),
        soft_policy_logits=policy.clone(),
        optimistic_policy_logits=policy.clone(),
        value_logits=torch.zeros(batch_size, 3),
        score_mean=torch.zeros(batch_size),
        score_stdev=torch.full((batch_size,), 20.0),
        root_variance=torch.full((batch_size, 4), 0.1),
        ownership_logits=torch.zeros(batch_size, 4, 4),
        score_belief_logits=torch.zeros(batch_size, NUM_SCORE_BINS),
        score_gamma=torch.zeros(batch_size),
    )
    leaves = {k: v.requires_grad_() for k, v in fields.items()}
    return ModelOutputs(**leaves, ownership=torch.tanh(leaves["ownership_logits"]), mask=mask,
                        short_term=torch.zeros(batch_size, 4))


def neutral_targets(batch_size: int = 2) -> Targets:
    policy = torch.zeros(batch_size, MOVES)
    policy[:, 0] = 1.0
    ownership = torch.zeros(batch_size, 4, 4)
    ownership[:, :SIZE, :SIZE] = 1.0
    return Targets(
        policy=policy,
        opponent_policy=policy.clone(),
        value=torch.tensor([[1.0, 0.0, 0.0]]).repeat(batch_size, 1),
        score=torch.full((batch_size,), 0.5),
        ownership=ownership,
        weight=torch.ones(batch_size),
        root_variance=torch.full((batch_size, 4), 0.1),
    )


def grads(term: str, outputs: ModelOutputs, targets: Targets) -> dict[str, torch.Tensor]:
    loss = compute_loss(outputs, targets)[term]
    names = [n for n in ModelOutputs._fields if getattr(outputs, n).is_leaf and getattr(outputs, n).requires_grad]
    values = torch.autograd.grad(loss, [getattr(outputs, n) for n in names], allow_unused=True)
    return {n: (torch.zeros_like(getattr(outputs, n)) if g is None else g) for n, g in zip(names, values)}


def test_every_term_is_reported_and_finite_on_a_real_net() -> None:
    model = build_model("b1c16")
    spatial, global_inputs = batch([(9, 9), (7, 7), (9, 9)], seed=2)
    out = model(spatial, global_inputs)
    targets = Targets(
        policy=torch.softmax(torch.randn(3, 82), 1) * (out.policy_logits > -1000),
        opponent_policy=torch.zeros(3, 82),
        value=torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0.5, 0.5, 0]]),
        score=torch.tensor([3.5, -12.0, 400.0]),
        ownership=torch.randint(-1, 2, (3, 9, 9)).float() * out.mask,
        weight=torch.tensor([1.0, 0.5, 1.0]),
    )
    terms = compute_loss(out, targets, model=model)
    assert list(terms) == [*LOSS_TERMS, "total"]
    assert all(torch.isfinite(v) and v.dim() == 0 for v in terms.values())
    torch.testing.assert_close(terms["total"], sum(terms[k] for k in LOSS_TERMS))
    assert terms["root_variance"].item() == 0.0  # no root-variance target recorded
    assert terms["l2"].item() == pytest.approx(3e-5 * sum((p**2).sum().item() for p in model.parameters()), rel=1e-5)
    terms["total"].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_value_cross_entropy_weight_and_sign() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    assert compute_loss(out, targets)["value"].item() == pytest.approx(1.5 * math.log(3))
    g = grads("value", out, targets)["value_logits"]
    assert (g[:, 0] < 0).all() and (g[:, 1:] > 0).all()


@pytest.mark.parametrize("term,field,weight", [
    ("policy", "policy_logits", 1.0),
    ("opponent_policy", "opponent_policy_logits", 0.15),
    ("soft_policy", "soft_policy_logits", 8.0),
])
def test_policy_terms(term: str, field: str, weight: float) -> None:
    out, targets = leaf_outputs(), neutral_targets()
    # Uniform over the 9 on-board points + pass; off-board logits carry no probability. (A one-hot
    # target is its own soft target.)
    assert compute_loss(out, targets)[term].item() == pytest.approx(weight * math.log(10), rel=1e-5)
    g = grads(term, out, targets)[field]
    assert (g[:, 0] < 0).all() and (g[:, 1:3] > 0).all() and (g[:, -1] > 0).all()
    off_board = torch.cat([out.mask.flatten(1) == 0, torch.zeros(2, 1, dtype=torch.bool)], dim=1)
    assert (g[off_board] == 0).all()


def test_missing_opponent_policy_row_gives_no_loss() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    targets.opponent_policy[1] = 0.0  # last turn of a game: no next move
    g = grads("opponent_policy", out, targets)["opponent_policy_logits"]
    assert (g[1] == 0).all() and (g[0] != 0).any()


def test_soft_policy_target_by_hand() -> None:
    policy = torch.tensor([[0.6, 0.36, 0.0, 0.03, 0.01], [0.0] * 5])
    soft = soft_policy_target(policy, 4.0)
    # 0.6^(1/4) = 0.8801, 0.36^(1/4) = 0.7746, 0.03^(1/4) = 0.4162, 0.01^(1/4) = 0.3162; sum 2.3871
    assert soft[0].tolist() == pytest.approx([0.3687, 0.3245, 0.0, 0.1743, 0.1325], abs=1e-4)
    assert soft[0, 2] == 0.0 and soft[1].tolist() == [0.0] * 5  # no target: nothing to predict


def test_soft_policy_term_is_weighted_cross_entropy_of_the_soft_target() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    torch.manual_seed(3)
    with torch.no_grad():
        out.soft_policy_logits[:, :SIZE] = torch.randn(2, SIZE)  # first on-board row of the 3x3
        out.soft_policy_logits[:, -1] = torch.randn(2)
    moves, policy = [0, 1, 2, MOVES - 1], [0.6, 0.36, 0.03, 0.01]
    targets.policy.zero_()
    targets.policy[0, moves] = torch.tensor(policy)
    targets.weight = torch.tensor([0.5, 1.0])  # row 1 has no policy target
    logits = out.soft_policy_logits[0].tolist()
    log_z = math.log(sum(math.exp(logits[i]) for i in (0, 1, 2, 4, 5, 6, 8, 9, 10, MOVES - 1)))  # legal moves
    soft = [p**0.25 / sum(q**0.25 for q in policy) for p in policy]
    cross_entropy = -sum(t * (logits[i] - log_z) for i, t in zip(moves, soft))
    expected = 8.0 * 0.5 * cross_entropy / 2  # weight x sample weight x CE, averaged over the batch of 2
    assert compute_loss(out, targets)["soft_policy"].item() == pytest.approx(expected, rel=1e-5)
    g = grads("soft_policy", out, targets)["soft_policy_logits"]
    assert (g[1] == 0).all() and g[0, 0] < 0 and g[0, 4] > 0  # an unliked move is pushed down


def test_soft_policy_weight_0_leaves_the_old_loss() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    with torch.no_grad():
        out.soft_policy_logits[:, -1] = 5.0
    with_soft = compute_loss(out, targets)
    without = compute_loss(out, targets, weights=LossWeights(soft_policy=0.0))
    assert with_soft["soft_policy"].item() > 0 and without["soft_policy"].item() == 0.0
    others = [name for name in LOSS_TERMS if name != "soft_policy"]
    assert all(torch.equal(without[name], with_soft[name]) for name in others)
    assert without["total"].item() == sum((without[name] for name in others[1:]), without[others[0]]).item()
    assert (torch.autograd.grad(without["total"], out.soft_policy_logits)[0] == 0).all()


def test_optimism_weights_by_hand() -> None:
    # Predicted (value, score, value squared error, score squared error) against short-term outcomes:
    # z = (outcome - predicted) / sqrt(error + 1e-4), weight clamp(0, 1, s((z_v - 1.5) 3) + s((z_s - 1.5) 3)).
    predicted = torch.tensor([[0.0, 0.0, 0.25, 100.0]] * 4)
    outcome = torch.tensor([[1.0, 0.0],     # value 2 sd better: s(1.4988) + s(-4.5) = 0.8174 + 0.0110
                            [2.0, 30.0],    # value 4 sd, score 3 sd better: 0.99945 + 0.98901, clamped
                            [-1.0, -30.0],  # worse than expected: s(-10.4988) + s(-13.5)
                            [0.0, 0.0]])    # as expected: 2 s(-4.5)
    got = optimistic_weights(predicted, outcome)
    assert got.tolist() == pytest.approx([0.82838, 1.0, 2.903e-5, 0.021974], abs=2e-5)


def test_optimistic_policy_term_is_the_policy_loss_weighted_by_optimism() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    with torch.no_grad():
        out.optimistic_policy_logits[:, 0] = 2.0
    predicted = torch.tensor([[0.0, 0.0, 0.25, 100.0], [0.0, 0.0, 0.25, 100.0]], requires_grad=True)
    out = out._replace(short_term=predicted)
    targets.short_term = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    targets.short_term_weight = torch.tensor([1.0, 0.5])
    optimism = optimistic_weights(predicted, targets.short_term) * targets.short_term_weight
    # policy target 1.0 on move 0 (logit 2); the other 8 points of the 3x3 and the pass have logit 0
    ce = math.log(math.exp(2.0) + 9.0) - 2.0
    weights = LossWeights(optimistic_policy=1.0)
    term = compute_loss(out, targets, weights=weights)["optimistic_policy"]
    assert term.item() == pytest.approx(ce * optimism.sum().item() / 2, rel=1e-5)
    assert optimism.tolist() == pytest.approx([0.82838, 0.5 * 0.021974], abs=2e-5)
    logits_grad, short_term_grad = torch.autograd.grad(term, [out.optimistic_policy_logits, predicted],
                                                       allow_unused=True)
    assert logits_grad[0, 0] < 0 and logits_grad[0, 1] > 0  # towards the target move
    assert short_term_grad is None  # stop-gradient: the short-term heads are not moved by it
    assert compute_loss(out, targets)["optimistic_policy"].item() == 0.0  # weight 0: no head, no term
    targets.short_term = None
    assert compute_loss(out, targets, weights=weights)["optimistic_policy"].item() == 0.0


def test_ownership_weight_is_1_5_over_area_and_sign() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    targets.ownership[0, 0, 0] = -1.0
    # Prediction 0 everywhere: log(2) per point, summed over 9 points, times 1.5 / 9.
    assert compute_loss(out, targets)["ownership"].item() == pytest.approx(1.5 * math.log(2), rel=1e-5)
    g = grads("ownership", out, targets)["ownership_logits"]
    assert g[0, 0, 0] > 0 and g[0, 1, 1] < 0 and g[1, 0, 0] < 0
    assert (g[:, SIZE:, :] == 0).all() and (g[:, :, SIZE:] == 0).all()
    targets.ownership_weight = torch.tensor([0.0, 1.0])  # unconstrained ownership on sample 0
    g = grads("ownership", out, targets)["ownership_logits"]
    assert (g[0] == 0).all() and (g[1] != 0).any()


def test_score_distribution() -> None:
    dist = score_distribution(torch.tensor([2.5, 3.0, -1000.0, 7.25]))
    values = score_values()
    assert dist.sum(1).tolist() == pytest.approx([1.0] * 4)
    assert dist[0, bin_of(2.5)] == 1.0
    assert dist[1, bin_of(2.5)] == 0.5 and dist[1, bin_of(3.5)] == 0.5  # a draw-like integer score
    assert dist[2, 0] == 1.0  # beyond the range: the end bin
    assert (dist * values).sum(1)[[0, 1, 3]].tolist() == pytest.approx([2.5, 3.0, 7.25])


def test_score_pdf_and_cdf_pull_toward_the_target() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    targets.score[:] = 10.5
    total = compute_loss(out, targets)
    assert total["score_pdf"].item() == pytest.approx(0.02 * math.log(NUM_SCORE_BINS), rel=1e-5)
    g = grads("score_pdf", out, targets)["score_belief_logits"]
    assert (g[:, bin_of(10.5)] < 0).all() and (g[:, bin_of(-10.5)] > 0).all()
    with torch.no_grad():  # the belief sits at -10.5, left of the target
        out.score_belief_logits[:, bin_of(-10.5)] = 20.0
    g = grads("score_cdf", out, targets)["score_belief_logits"]
    assert (g[:, bin_of(10.5)] < 0).all() and (g[:, bin_of(-10.5)] > 0).all()
    assert compute_loss(out, targets)["score_cdf"].item() == pytest.approx(0.02 * 21, rel=1e-3)
    targets.score_weight = torch.tensor([1.0, 0.0])
    g = grads("score_cdf", out, targets)["score_belief_logits"]
    assert (g[1] == 0).all() and (g[0] != 0).any()


def test_root_variance_squared_error() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    targets.root_variance = torch.full((2, 4), 0.6)
    assert compute_loss(out, targets)["root_variance"].item() == pytest.approx(0.2 * 4 * 0.25, rel=1e-5)
    assert (grads("root_variance", out, targets)["root_variance"] < 0).all()


def test_score_self_prediction_huber() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    with torch.no_grad():
        out.score_mean[:] = 30.0  # the uniform belief has mean 0: a gap of 30 > delta = 10
        out.score_mean[1] = 4.0  # a gap of 4 < delta: squared error
    terms = compute_loss(out, targets)
    expected = 0.004 * (10.0 * (30.0 - 5.0) + 0.5 * 4.0**2) / 2
    assert terms["score_mean_self"].item() == pytest.approx(expected, rel=1e-4)
    g = grads("score_mean_self", out, targets)
    assert (g["score_mean"] > 0).all()
    assert g["score_mean"][0].item() == pytest.approx(0.004 * 10.0 / 2)  # linear beyond delta
    assert (g["score_belief_logits"] == 0).all()  # the belief is not pulled toward its predictor
    # The uniform belief's stdev is sqrt((4S^2 - 1) / 12) ~ 243; the stdev output (20) is too low.
    g = grads("score_stdev_self", out, targets)
    assert (g["score_stdev"] < 0).all()


def test_gamma_penalty() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    with torch.no_grad():
        out.score_gamma[:] = torch.tensor([2.0, -3.0])
    assert compute_loss(out, targets)["score_gamma"].item() == pytest.approx(0.0005 * (4 + 9) / 2)
    g = grads("score_gamma", out, targets)["score_gamma"]
    assert g[0] > 0 and g[1] < 0


def test_sample_weight_scales_every_term() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    targets.score[:] = 3.5
    full = compute_loss(out, targets)
    targets.weight = torch.tensor([0.0, 0.5])
    part = compute_loss(out, targets)
    for term in LOSS_TERMS:
        if term != "l2":
            assert part[term].item() == pytest.approx(full[term].item() / 4, rel=1e-5), term
    g = grads("total", out, targets)
    assert all((v[0] == 0).all() for v in g.values())


def test_target_shapes_are_checked() -> None:
    out, targets = leaf_outputs(), neutral_targets()
    targets.ownership = torch.zeros(2, 3, 3)
    with pytest.raises(ValueError, match=r"target ownership has shape \[2, 3, 3\], expected \[2, 4, 4\]"):
        compute_loss(out, targets)


def test_paper_constants() -> None:
    w = PAPER_WEIGHTS
    assert (w.value, w.policy, w.opponent_policy, w.ownership) == (1.5, 1.0, 0.15, 1.5)
    assert (w.soft_policy, w.soft_policy_temperature) == (8.0, 4.0)  # KataGo's, not the paper's
    assert (w.score_pdf, w.score_cdf, w.root_variance, w.score_self, w.huber_delta) == (0.02, 0.02, 0.2, 0.004, 10.0)
    assert (w.score_gamma, w.l2) == (0.0005, 3e-5)


def test_tiny_net_overfits_a_fixed_batch() -> None:
    torch.manual_seed(0)
    model = build_model("b1c16").train()
    spatial, global_inputs = batch([(9, 9), (7, 7), (9, 9), (8, 8)] * 2, seed=11)
    generator = torch.Generator().manual_seed(12)
    b = spatial.shape[0]
    mask = spatial[:, 0]
    moves = torch.cat([mask.flatten(1), torch.ones(b, 1)], 1)
    policy = torch.softmax(torch.randn(b, 82, generator=generator) * 3, 1) * moves
    policy /= policy.sum(1, keepdim=True)
    targets = Targets(
        policy=policy,
        opponent_policy=torch.roll(policy, 1, 0) * moves,
        value=torch.eye(3)[torch.tensor([0, 1, 0, 1, 1, 0, 0, 1])],
        score=torch.tensor([5.5, -3.5, 12.5, -20.0, 1.5, 7.0, -0.5, 30.5]),
        ownership=torch.sign(torch.randn(b, 9, 9, generator=generator)) * mask,
        weight=torch.ones(b),
    )
    soft = soft_policy_target(policy, 4.0)
    soft_floor = 8.0 * -(soft * soft.clamp_min(1e-30).log()).sum(1).mean().item()  # the least soft term
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = last = 0.0
    for step in range(200):
        optimizer.zero_grad()
        terms = compute_loss(model(spatial, global_inputs), targets, model=model)
        terms["total"].backward()
        optimizer.step()
        if step == 0:
            first = terms["total"].item()
        last = terms["total"].item()
    # measured, above the soft floor (31.8): ~23 -> ~2.3, the policy targets' entropy
    assert last - soft_floor < (first - soft_floor) / 5, (first, last, soft_floor)


def test_training_loss_of_a_one_batch_norm_net_weights_its_two_head_sets() -> None:
    torch.manual_seed(0)
    model = build_model("b1c32nbt").train()
    spatial, global_inputs = batch([(9, 9), (7, 7), (9, 9)], seed=2)
    weighted = model.training_outputs(spatial, global_inputs)
    targets = Targets(
        policy=torch.eye(82)[[10, 20, 30]],  # one on-board point each (the 7x7 sits in the corner)
        opponent_policy=torch.zeros(3, 82),
        value=torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0.5, 0.5, 0]]),
        score=torch.tensor([3.5, -12.0, 4.0]),
        ownership=torch.randint(-1, 2, (3, 9, 9)).float() * weighted[0][1].mask,
        weight=torch.tensor([1.0, 0.5, 1.0]),
    )
    terms = compute_training_loss(weighted, targets, model=model)
    behind_bn, served = (compute_loss(out, targets) for _, out in weighted)
    for name in LOSS_TERMS[:-1]:
        torch.testing.assert_close(terms[name], 0.8 * behind_bn[name] + 0.2 * served[name])
    assert terms["l2"].item() == pytest.approx(3e-5 * sum((p**2).sum().item() for p in model.parameters()), rel=1e-5)
    torch.testing.assert_close(terms["total"], sum(terms[k] for k in LOSS_TERMS))
    # Both head sets and the one batch norm learn; the served heads' own loss falls too.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    first = None
    for _ in range(25):
        weighted = model.training_outputs(spatial, global_inputs)
        terms = compute_training_loss(weighted, targets, model=model)
        optimizer.zero_grad()
        terms["total"].backward()
        assert model.bn_norm.weight.grad is not None and model.policy_head.out_conv.weight.grad is not None
        optimizer.step()
        served_policy = compute_loss(weighted[1][1], targets)["policy"].item()
        first = served_policy if first is None else first
    assert served_policy < 0.5 * first
    # A plain net: exactly compute_loss.
    plain = build_model("b1c16")
    out = plain(spatial, global_inputs)
    torch.testing.assert_close(compute_training_loss([(1.0, out)], targets, plain)["total"],
                               compute_loss(out, targets, plain)["total"])
