"""KataGo's training loss (paper Appendix B): every term with its weight, reported separately.

Plus KataGo's later auxiliary soft policy target (v1.12; "other methods" notes): a second policy
head predicts the policy target raised to 1/T and renormalised, T = 4, weighted 8x.

Plus KataGo's short-term heads ("other methods" notes; only for a net that has them and targets
that carry them): the short-term value (win - loss in [-1, 1]) by squared error, the short-term
score by Huber loss, and the two error heads by Huber loss against the squared difference between
the stop-gradient short-term prediction and its target, so the error heads learn the error and the
prediction heads are never pulled toward it.

Each per-sample term is multiplied by the sample weight and averaged over the batch
(sum_i w_i * L_i / B), so a down-weighted sample (e.g. after resignation-free visit reduction)
counts for less; the L2 penalty is added once per batch.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tengen.nn.model import NUM_ROOT_VARIANCES, NUM_SCORE_BINS, SCORE_LIMIT, ModelOutputs, score_values


@dataclass(frozen=True)
class LossWeights:
    """The constants of Appendix B, and the soft policy target's."""

    value: float = 1.5  # c_value, on the win/loss/no-result cross-entropy
    policy: float = 1.0
    opponent_policy: float = 0.15  # w_opp
    # 8x nominally: once trained, the soft target's gradients are much smaller (KataGo's notes)
    soft_policy: float = 8.0
    soft_policy_temperature: float = 4.0  # T
    ownership: float = 1.5  # w_o = 1.5 / b^2: divided by each sample's on-board area
    score_pdf: float = 0.02  # w_spdf
    score_cdf: float = 0.02  # w_scdf
    root_variance: float = 0.2  # w_rv
    score_self: float = 0.004  # w_sbreg, score mean and stdev self-prediction
    huber_delta: float = 10.0
    score_gamma: float = 0.0005  # w_scale, on gamma^2
    l2: float = 3e-5  # c, on ||theta||^2
    # Short-term heads (no paper values; untuned, chosen so that each term starts about as large as
    # the value term): the value by squared error, the score by Huber(huber_delta) in points, the
    # errors by Huber with these deltas (squared win - loss, squared points).
    short_term_value: float = 1.0
    short_term_score: float = 0.004
    short_term_value_error: float = 1.0
    short_term_score_error: float = 1e-4
    value_error_delta: float = 0.4
    score_error_delta: float = 100.0
    # The optimistic policy head: the policy's own loss on the same target (the notes give it no
    # weight of its own), each row weighted by optimistic_weights (0 = no head, no term).
    optimistic_policy: float = 0.0


PAPER_WEIGHTS = LossWeights()

# The keys of compute_loss's result, in a stable order for logging.
LOSS_TERMS = (
    "value",
    "policy",
    "opponent_policy",
    "soft_policy",
    "optimistic_policy",
    "ownership",
    "score_pdf",
    "score_cdf",
    "root_variance",
    "score_mean_self",
    "score_stdev_self",
    "score_gamma",
    "short_term_value",
    "short_term_score",
    "short_term_value_error",
    "short_term_score_error",
    "l2",
)


@dataclass
class Targets:
    """Training targets for a batch, every value from the perspective of the player to move.

    Boards smaller than the batch's tensors are padded exactly like the inputs; targets must be
    zero off the board.
    """

    policy: Tensor  # [B, H*W+1] search policy distribution, pass last
    opponent_policy: Tensor  # [B, H*W+1] the next turn's policy target; an all-zero row = none
    value: Tensor  # [B, 3] win / loss / no-result distribution (one-hot for finished games)
    score: Tensor  # [B] final score difference in points (komi included)
    ownership: Tensor  # [B, H, W] final owner: 1 own, -1 opponent, 0 neither
    weight: Tensor  # [B] sample weight
    # [B] 0 where ownership / score are unconstrained (e.g. side-branch positions); None = all 1.
    ownership_weight: Tensor | None = None
    score_weight: Tensor | None = None
    root_variance: Tensor | None = None  # [B, 4] recorded root-value variances; None = no term
    # [B, 2] short-term value (win - loss) and score targets, [B] their weight; None = no terms
    short_term: Tensor | None = None
    short_term_weight: Tensor | None = None

    def to(self, device: torch.device | str) -> "Targets":
        # each field as it is typed: a tensor, or None for the optional ones
        moved: dict[str, Any] = {f.name: _to(getattr(self, f.name), device) for f in fields(self)}
        return Targets(**moved)

    def check(self, outputs: ModelOutputs) -> None:
        """Raises ValueError when a target's shape does not match the outputs."""
        b = outputs.value_logits.shape[0]
        expected = {
            "policy": tuple(outputs.policy_logits.shape),
            "opponent_policy": tuple(outputs.opponent_policy_logits.shape),
            "value": (b, 3),
            "score": (b,),
            "ownership": tuple(outputs.ownership.shape),
            "weight": (b,),
            "ownership_weight": (b,),
            "score_weight": (b,),
            "root_variance": (b, NUM_ROOT_VARIANCES),
            "short_term": (b, 2),
            "short_term_weight": (b,),
        }
        for name, shape in expected.items():
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != shape:
                raise ValueError(f"target {name} has shape {list(value.shape)}, expected {list(shape)}")


def _to(value: Tensor | None, device: torch.device | str) -> Tensor | None:
    return None if value is None else value.to(device)


def score_distribution(score: Tensor) -> Tensor:
    """One-hot over the score belief bins [B] -> [B, NUM_SCORE_BINS].

    Bin centres are half-integers; a score between two centres (an integer score, i.e. a draw
    or integer komi) is split linearly between them, so its mean is exactly the score.
    Scores beyond +-(S - 0.5) land in the end bins.
    """
    position = (score.float() + (SCORE_LIMIT - 0.5)).clamp(0.0, NUM_SCORE_BINS - 1.0)
    low = position.floor()
    frac = (position - low).unsqueeze(1)
    low_index = low.long().unsqueeze(1)
    high_index = (low_index + 1).clamp_max(NUM_SCORE_BINS - 1)
    dist = torch.zeros(score.shape[0], NUM_SCORE_BINS, dtype=torch.float32, device=score.device)
    dist.scatter_add_(1, low_index, 1.0 - frac)
    dist.scatter_add_(1, high_index, frac)
    return dist


def cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """-sum target * log softmax(logits) per row; rows of zeros give 0."""
    return -(target * F.log_softmax(logits, dim=1)).sum(dim=1)


def soft_policy_target(policy: Tensor, temperature: float) -> Tensor:
    """policy^(1/T) renormalised per row [B, M]; zeros stay 0 and an all-zero row stays all zero."""
    soft = policy.float().pow(1.0 / temperature)
    return soft / soft.sum(dim=1, keepdim=True).clamp_min(1e-30)


# The optimism weight's constants (KataGo's notes): a row counts fully once the mover's short-term
# value or score beat the prediction by OPTIMISM_Z standard deviations of its predicted error.
OPTIMISM_Z = 1.5
OPTIMISM_SHARPNESS = 3.0
OPTIMISM_EPSILON = 1e-4  # keeps z finite where a predicted squared error is ~0


def optimistic_weights(predicted: Tensor, short_term: Tensor) -> Tensor:
    """clamp(0, 1, sigmoid((z_value - 1.5) * 3) + sigmoid((z_score - 1.5) * 3)) per row [B], with
    z = (short-term outcome - predicted) / sqrt(predicted squared error + eps) for the value and
    the score; `predicted` [B, 4] is the short-term heads' output and is not differentiated."""
    value, score, value_error, score_error = predicted.detach().float().unbind(dim=1)
    z_value = (short_term[:, 0].float() - value) / torch.sqrt(value_error.clamp_min(0.0) + OPTIMISM_EPSILON)
    z_score = (short_term[:, 1].float() - score) / torch.sqrt(score_error.clamp_min(0.0) + OPTIMISM_EPSILON)
    return (torch.sigmoid((z_value - OPTIMISM_Z) * OPTIMISM_SHARPNESS)
            + torch.sigmoid((z_score - OPTIMISM_Z) * OPTIMISM_SHARPNESS)).clamp(0.0, 1.0)


def l2_penalty(model: nn.Module) -> Tensor:
    return sum((p * p).sum() for p in model.parameters() if p.requires_grad)  # type: ignore[return-value]


def compute_loss(
    outputs: ModelOutputs,
    targets: Targets,
    model: nn.Module | None = None,
    weights: LossWeights = PAPER_WEIGHTS,
) -> dict[str, Tensor]:
    """Every term of LOSS_TERMS plus "total", each a scalar tensor.

    model: whose parameters the L2 term penalises; None leaves it out (0), e.g. for validation.
    """
    targets.check(outputs)
    batch = outputs.value_logits.shape[0]
    w = targets.weight.float()
    ones = torch.ones_like(w)
    own_w = w * (ones if targets.ownership_weight is None else targets.ownership_weight.float())
    score_w = w * (ones if targets.score_weight is None else targets.score_weight.float())

    def batch_mean(per_sample: Tensor, sample_weight: Tensor) -> Tensor:
        return (per_sample * sample_weight).sum() / batch

    terms: dict[str, Tensor] = {}
    terms["value"] = weights.value * batch_mean(cross_entropy(outputs.value_logits, targets.value), w)
    terms["policy"] = weights.policy * batch_mean(cross_entropy(outputs.policy_logits, targets.policy), w)
    terms["opponent_policy"] = weights.opponent_policy * batch_mean(
        cross_entropy(outputs.opponent_policy_logits, targets.opponent_policy), w
    )
    soft_target = soft_policy_target(targets.policy, weights.soft_policy_temperature)
    terms["soft_policy"] = weights.soft_policy * batch_mean(cross_entropy(outputs.soft_policy_logits, soft_target), w)
    if weights.optimistic_policy == 0.0 or targets.short_term is None:
        terms["optimistic_policy"] = outputs.value_logits.new_zeros(())
    else:
        optimism = optimistic_weights(outputs.short_term, targets.short_term) * _short_term_weight(targets)
        terms["optimistic_policy"] = weights.optimistic_policy * batch_mean(
            cross_entropy(outputs.optimistic_policy_logits, targets.policy), w * optimism)

    # tanh(z) = 2 sigmoid(2z) - 1, so (1 + o_hat) / 2 = sigmoid(2z): a stable logistic loss.
    mask = outputs.mask
    area = mask.sum(dim=(1, 2)).clamp_min(1.0)
    owner = F.binary_cross_entropy_with_logits(
        2.0 * outputs.ownership_logits, (1.0 + targets.ownership.float()) / 2.0, reduction="none"
    )
    terms["ownership"] = weights.ownership * batch_mean((owner * mask).sum(dim=(1, 2)) / area, own_w)

    belief_log = F.log_softmax(outputs.score_belief_logits, dim=1)
    belief = belief_log.exp()
    target_dist = score_distribution(targets.score)
    terms["score_pdf"] = weights.score_pdf * batch_mean(-(target_dist * belief_log).sum(dim=1), score_w)
    cdf_gap = torch.cumsum(target_dist - belief, dim=1)
    terms["score_cdf"] = weights.score_cdf * batch_mean((cdf_gap * cdf_gap).sum(dim=1), score_w)

    if targets.root_variance is None:
        terms["root_variance"] = outputs.root_variance.new_zeros(())
    else:
        gap = targets.root_variance.float() - outputs.root_variance
        terms["root_variance"] = weights.root_variance * batch_mean((gap * gap).sum(dim=1), w)

    # Self-prediction: the mean and stdev outputs learn the belief's moments. The belief is
    # detached so it is trained by the real score target only, not pulled toward these outputs.
    with torch.no_grad():
        values = score_values().to(belief.device)
        belief_mean = (belief * values).sum(dim=1)
        belief_stdev = torch.sqrt((belief * (values - belief_mean.unsqueeze(1)) ** 2).sum(dim=1))
    huber = weights.huber_delta
    terms["score_mean_self"] = weights.score_self * batch_mean(
        F.huber_loss(outputs.score_mean, belief_mean, reduction="none", delta=huber), w
    )
    terms["score_stdev_self"] = weights.score_self * batch_mean(
        F.huber_loss(outputs.score_stdev, belief_stdev, reduction="none", delta=huber), w
    )
    terms["score_gamma"] = weights.score_gamma * batch_mean(outputs.score_gamma**2, w)
    terms.update(short_term_terms(outputs.short_term, targets, weights, batch_mean))

    terms["l2"] = (
        weights.l2 * l2_penalty(model) if model is not None else outputs.value_logits.new_zeros(())
    )
    # Added one by one in order: a term weighted 0 (soft_policy off) leaves the total bit for bit
    # what it is without that term, which a vectorised sum does not guarantee.
    terms["total"] = sum((terms[name] for name in LOSS_TERMS[1:]), terms[LOSS_TERMS[0]])
    return terms


def short_term_terms(predicted: Tensor, targets: Targets, weights: LossWeights,
                     batch_mean: Callable[[Tensor, Tensor], Tensor]) -> dict[str, Tensor]:
    """The four short-term terms; all 0 when the targets carry no short-term targets."""
    names = ("short_term_value", "short_term_score", "short_term_value_error", "short_term_score_error")
    if targets.short_term is None:
        return {name: predicted.new_zeros(()) for name in names}
    st_w = targets.weight.float() * _short_term_weight(targets)
    target = targets.short_term.float()
    value, score, value_error, score_error = predicted.unbind(dim=1)
    # stop-gradient: the error heads learn the prediction's error, the predictions never move toward it
    value_sq = (value.detach() - target[:, 0]) ** 2
    score_sq = (score.detach() - target[:, 1]) ** 2
    return {
        "short_term_value": weights.short_term_value * batch_mean((value - target[:, 0]) ** 2, st_w),
        "short_term_score": weights.short_term_score * batch_mean(
            F.huber_loss(score, target[:, 1], reduction="none", delta=weights.huber_delta), st_w),
        "short_term_value_error": weights.short_term_value_error * batch_mean(
            F.huber_loss(value_error, value_sq, reduction="none", delta=weights.value_error_delta), st_w),
        "short_term_score_error": weights.short_term_score_error * batch_mean(
            F.huber_loss(score_error, score_sq, reduction="none", delta=weights.score_error_delta), st_w),
    }


def _short_term_weight(targets: Targets) -> Tensor:
    """[B] the rows' short-term target weights (1 where the targets give none)."""
    weight = targets.weight.float()
    return torch.ones_like(weight) if targets.short_term_weight is None else targets.short_term_weight.float()


def compute_training_loss(
    weighted: list[tuple[float, ModelOutputs]],
    targets: Targets,
    model: nn.Module | None = None,
    weights: LossWeights = PAPER_WEIGHTS,
) -> dict[str, Tensor]:
    """compute_loss over several sets of heads (KataGoNet.training_outputs): each term the
    weighted sum of the sets' terms, the L2 term once."""
    if len(weighted) == 1 and weighted[0][0] == 1.0:
        return compute_loss(weighted[0][1], targets, model, weights)
    parts = [(share, compute_loss(outputs, targets, None, weights)) for share, outputs in weighted]
    terms = {name: sum((share * t[name] for share, t in parts[1:]), parts[0][0] * parts[0][1][name])
             for name in LOSS_TERMS[:-1]}
    terms["l2"] = weights.l2 * l2_penalty(model) if model is not None else parts[0][1]["l2"]
    terms["total"] = sum((terms[name] for name in LOSS_TERMS[1:]), terms[LOSS_TERMS[0]])
    return terms
