"""KataGo's pre-activation ResNet (paper Appendix A; sizes from the AAAI version's Table 3).

Masking (paper §4.3, "other methods: training on multiple board sizes"): a batch may mix board
sizes, each position zero-padded to the largest one, with input channel ON_BOARD as the 0/1 mask.
Every batch norm + ReLU multiplies its output by the mask, so each convolution sees zeros off the
board exactly as zero padding would; batch-norm statistics and pooling means count on-board
points only; off-board policy logits are set to OFF_BOARD_LOGIT and off-board ownership to 0.
A position therefore gives the same outputs alone or padded inside a batch.

The soft policy head (KataGo's "auxiliary soft policy target", not in the paper) is trained only:
InferenceNet, and so every export, leaves it out.

Nested bottleneck nets (names ending in "nbt"; KataGo's later nets, "other methods" notes): each
trunk block is a 1x1 conv down to half the channels, two ordinary residual blocks there, a 1x1 conv
back up, and the skip. They use fixed variance initialisation and one batch norm: every norm is a
fixed scalar K (then a learned per-channel gain and bias, ReLU, mask), K chosen so that, counting
each conv as variance-preserving (He-initialised), the net's input as variance 1 and the variances
of a sum as adding, what goes into each ReLU has variance 1; a residual stream of k summed branches
has variance 1 + k, so K = 1/sqrt(1 + k). That idealisation is approximate (binary input planes,
the pooled biases' default init): what it guarantees is a stream whose scale does not grow with
depth (tests/test_nn_model.py). The one batch norm sits at the end of the trunk, and a second copy
of every head is trained behind it with 80% of the loss weight; the heads without it (20%) are the
served ones, so training and inference compute the same function.

Short-term heads (KataGo's "other methods" notes: short-term targets, uncertainty-weighted
playouts), built only when asked for (`build_model(..., short_term=True)`): from the value head's
pooled V, a small MLP gives the short-term value (tanh, the expected win - loss over the next few
turns' searches), the short-term score (points) and two error heads, the predicted squared errors of
those two against their targets (softplus, so never negative; the score one scaled by SCORE_SCALE).
A net without them outputs NO_SHORT_TERM instead (0, 0 and an error of -1, which search reads as
"unknown"), so every export has the same outputs and an old net still loads.

The optimistic policy head (KataGo's "other methods" notes, "optimistic policy"), built only with
the short-term heads (`build_model(..., optimistic_policy=True)`): a third policy output from the
policy head's P and pooled G, trained on the policy target weighted towards the rows whose mover did
better over the next few turns than the short-term heads expected (tengen.nn.loss). Search uses it
at test time only (never in self-play or gating): InferenceNet serves it when asked
(`InferenceNet(net, optimistic=True)`, or an export's `optimistic` attribute set after loading); a
net without it has none to serve.

The whole net is TorchScript-compatible (tengen.nn.export scripts it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tengen.go.planes import KOMI, MAX_BOARD, NUM_GLOBAL, NUM_SPATIAL, ON_BOARD

# Board lengths the pooling scales are centred on: B in [B_min, B_max] = [9, 19] (App. A).
POOL_B_MID = 14.0
# sigma^2 = 1/11 * sum_{b=9}^{19} (b - 14)^2 = 10, for the value head's quadratic pooling term.
POOL_B_VARIANCE = 10.0
# Score belief bins s in {-S+0.5, ..., S-0.5} with S = 19*19 + 60 (App. A, footnote 31).
SCORE_LIMIT = MAX_BOARD * MAX_BOARD + 60
NUM_SCORE_BINS = 2 * SCORE_LIMIT
# Score mean and stdev outputs are scaled by 20 so raw outputs stay near unit scale (footnote 29).
SCORE_SCALE = 20.0
# Logit given to off-board points: exp() of it is exactly 0 in float32, and it stays finite in
# float16 so a served half-precision model cannot produce inf * 0 = NaN downstream.
OFF_BOARD_LOGIT = -1.0e4
NUM_ROOT_VARIANCES = 4  # variance of the MCTS root value between 1 and {4, 16, 64, 256} visits
# Short-term outputs: value, score, value error, score error (see the module docstring).
NUM_SHORT_TERM = 4
# What a net without short-term heads outputs: no prediction (0) and an unknown error (-1).
NO_SHORT_TERM = (0.0, 0.0, -1.0, -1.0)


@dataclass(frozen=True)
class Architecture:
    """The constants of one net size (AAAI paper Table 3)."""

    name: str
    blocks: int  # n: residual blocks in the trunk
    channels: int  # c: trunk channels
    pool_channels: int  # c_pool: channels pooled to bias the rest in a global pooling block
    head_channels: int  # c_head: policy head P/G channels, value head V channels
    value_channels: int  # c_val: hidden width of the value and score-belief subheads
    gpool_blocks: int  # residual blocks using the global pooling bias structure
    nested: bool = False  # nested bottleneck blocks (pool_channels then counts at half width)
    # V normalised and activated before pooling and the ownership conv, as KataGo's released nets
    # do; the paper's Appendix A pools V straight from its 1x1 conv. The later (nested) nets only.
    activated_value: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.gpool_blocks <= self.blocks:
            raise ValueError(f"{self.name}: need 1 <= gpool_blocks <= blocks")
        if not 0 < self.pool_channels < self.block_channels:
            raise ValueError(f"{self.name}: need 0 < pool_channels < {self.block_channels}")

    @property
    def block_channels(self) -> int:
        """Channels of the 3x3 convolutions: the trunk's, or half of them inside a bottleneck."""
        return self.channels // 2 if self.nested else self.channels

    def gpool_positions(self) -> tuple[int, ...]:
        """Indices of the global pooling blocks, spaced at regular intervals in the trunk."""
        k = self.gpool_blocks
        return tuple((self.blocks * (j + 1)) // (k + 1) for j in range(k))


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        # Tiny nets for tests: still one global pooling block so every code path runs.
        Architecture("b1c16", 1, 16, 8, 8, 8, 1),
        Architecture("b2c32", 2, 32, 16, 16, 16, 1),
        # The cpu preset's net (9x9 on a 2-core box): about 3,000 evals/s at batch 32 in-process,
        # 3.5x b6c96, and its 4 blocks still see across a 9x9 board.
        Architecture("b4c48", 4, 48, 16, 24, 24, 1),
        # The paper's sizes; 2, 2, 2 and 3 global pooling blocks respectively.
        Architecture("b6c96", 6, 96, 32, 32, 48, 2),
        Architecture("b10c128", 10, 128, 32, 32, 64, 2),
        Architecture("b15c192", 15, 192, 64, 32, 80, 2),
        Architecture("b20c256", 20, 256, 64, 48, 96, 3),
        # Nested bottleneck nets of about the compute of the plain ones above them: a block costs
        # 10 c^2 multiply-adds per point (two 1x1 of c x c/2, four 3x3 of c/2 x c/2), a plain block
        # 18 c^2; b4c64nbt ~ b4c48, b6c128nbt ~ b6c96.
        Architecture("b1c32nbt", 1, 32, 8, 8, 8, 1, nested=True, activated_value=True),
        Architecture("b4c64nbt", 4, 64, 16, 24, 24, 1, nested=True, activated_value=True),
        Architecture("b6c128nbt", 6, 128, 32, 32, 48, 2, nested=True, activated_value=True),
    )
}

INNER_BLOCKS = 2  # ordinary residual blocks inside each nested bottleneck block
MAIN_HEADS_WEIGHT = 0.2  # the served heads' share of the loss in a one-batch-norm net (KataGo: 20%)


def build_model(name: str, short_term: bool = False, optimistic_policy: bool = False) -> "KataGoNet":
    """A freshly initialised net of the named size (see ARCHITECTURES), with the short-term heads
    when `short_term` and the optimistic policy head when `optimistic_policy` (which needs them)."""
    try:
        arch = ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}") from None
    return KataGoNet(arch, short_term, optimistic_policy)


class ModelOutputs(NamedTuple):
    """Every output of the net, all from the perspective of the player to move."""

    policy_logits: Tensor  # [B, H*W+1], pass last, off-board = OFF_BOARD_LOGIT
    opponent_policy_logits: Tensor  # [B, H*W+1], the opponent's reply on the next turn
    soft_policy_logits: Tensor  # [B, H*W+1], the policy target^(1/T) renormalised (training only)
    # [B, H*W+1], the optimistic policy; the policy logits themselves for a net without the head
    optimistic_policy_logits: Tensor
    value_logits: Tensor  # [B, 3] win / loss / no result
    score_mean: Tensor  # [B] points
    score_stdev: Tensor  # [B] points
    root_variance: Tensor  # [B, 4]
    ownership_logits: Tensor  # [B, H, W] pre-tanh, 0 off the board
    ownership: Tensor  # [B, H, W] tanh, in [-1, 1]
    score_belief_logits: Tensor  # [B, NUM_SCORE_BINS], already multiplied by softplus(gamma)
    score_gamma: Tensor  # [B] the belief's internal scaling activation (penalised in the loss)
    mask: Tensor  # [B, H, W] 1.0 on the board
    # [B, NUM_SHORT_TERM]: short-term value, score (points), their predicted squared errors;
    # NO_SHORT_TERM for a net without the heads
    short_term: Tensor


class BoardGeometry(NamedTuple):
    mask: Tensor  # [B, 1, H, W]
    total: Tensor  # [] on-board points in the whole batch (batch-norm divisor)
    area: Tensor  # [B, 1] on-board points per sample (pooling divisor)
    size_scale: Tensor  # [B, 1] (b - 14) / 10 with b = sqrt(area)
    size_scale_sq: Tensor  # [B, 1] ((b - 14)^2 - 10) / 100


# Functions compiled by TorchScript take the module constants as default arguments: TorchScript
# cannot read Python globals.


def board_geometry(
    spatial: Tensor, on_board: int = ON_BOARD, b_mid: float = POOL_B_MID, b_variance: float = POOL_B_VARIANCE
) -> BoardGeometry:
    mask = spatial[:, on_board : on_board + 1]
    # clamp: an all-off-board sample would divide by zero; it gives garbage, never NaN.
    area = mask.sum(dim=(2, 3)).clamp_min(1.0)
    length = torch.sqrt(area)
    size_scale = (length - b_mid) / 10.0
    size_scale_sq = ((length - b_mid) ** 2 - b_variance) / 100.0
    total = mask.sum().clamp_min(1.0)
    return BoardGeometry(mask, total, area, size_scale, size_scale_sq)


class MaskedBatchNormReLU(nn.Module):
    """Batch norm whose statistics count on-board points only, then ReLU, then the mask."""


    def __init__(self, channels: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        self.momentum = momentum
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.running_mean: Tensor  # the buffers as the type checker should see them
        self.running_var: Tensor

    def forward(self, x: Tensor, mask: Tensor, total: Tensor) -> Tensor:
        if self.training:
            mean = (x * mask).sum(dim=(0, 2, 3)) / total
            centered = (x - mean.view(1, -1, 1, 1)) * mask
            var = (centered * centered).sum(dim=(0, 2, 3)) / total
            with torch.no_grad():
                # running_var tracks the unbiased estimate, as torch's BatchNorm does.
                unbiased = var * total / (total - 1.0).clamp_min(1.0)
                self.running_mean.mul_(1.0 - self.momentum).add_(mean * self.momentum)
                self.running_var.mul_(1.0 - self.momentum).add_(unbiased * self.momentum)
            scale = self.weight * torch.rsqrt(var + self.eps)
            y = centered * scale.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)
        else:
            scale = self.weight * torch.rsqrt(self.running_var + self.eps)
            shift = self.bias - self.running_mean * scale
            y = x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)
        return F.relu(y) * mask


class FixedScaleNormReLU(nn.Module):
    """Fixed variance normalisation: x times a fixed K, a learned gain and bias, ReLU, the mask.
    The same function in training and in inference (no batch statistics)."""

    def __init__(self, channels: int, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor, mask: Tensor, total: Tensor) -> Tensor:
        y = x * (self.weight * self.scale).view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)
        return F.relu(y) * mask


class NoNorm(nn.Module):
    """In place of a norm that a net does not have (no parameters, the input unchanged)."""

    def forward(self, x: Tensor, mask: Tensor, total: Tensor) -> Tensor:
        return x


def make_norm(channels: int, scale: float | None) -> nn.Module:
    """A masked batch norm (scale None) or a fixed-scale norm of K = scale, each with ReLU."""
    return MaskedBatchNormReLU(channels) if scale is None else FixedScaleNormReLU(channels, scale)


def fixed_stream_scale(branches: int) -> float:
    """K for a residual stream that has summed `branches` unit-variance branches onto a unit one."""
    return (1.0 + branches) ** -0.5


def stream_scale(branches: int, fixed: bool) -> float | None:
    """fixed_stream_scale(branches) for fixed-scale norms; None (batch norm) otherwise."""
    return fixed_stream_scale(branches) if fixed else None


def global_pool(x: Tensor, geo: BoardGeometry) -> Tensor:
    """[mean, mean * (b-14)/10, max] per channel of a masked, non-negative x -> [B, 3C].

    x comes out of MaskedBatchNormReLU, so it is >= 0 on the board and exactly 0 off it: the
    plain max over the padded tensor equals the max over the board.
    """
    mean = x.sum(dim=(2, 3)) / geo.area
    return torch.cat([mean, mean * geo.size_scale, x.amax(dim=(2, 3))], dim=1)


def value_pool(x: Tensor, geo: BoardGeometry) -> Tensor:
    """The value head's pooling: the max is replaced by a mean scaled quadratically in b."""
    mean = (x * geo.mask).sum(dim=(2, 3)) / geo.area
    return torch.cat([mean, mean * geo.size_scale, mean * geo.size_scale_sq], dim=1)


def conv(in_channels: int, out_channels: int, size: int) -> nn.Conv2d:
    # No bias: every convolution feeds a batch norm or a masked head output.
    return nn.Conv2d(in_channels, out_channels, size, padding=size // 2, bias=False)


class ResBlock(nn.Module):
    """BN, ReLU, 3x3 conv, BN, ReLU, 3x3 conv, plus the skip connection (scale: fixed-scale norms,
    the first with K = scale)."""

    def __init__(self, channels: int, scale: float | None = None) -> None:
        super().__init__()
        self.norm1 = make_norm(channels, scale)
        self.conv1 = conv(channels, channels, 3)
        self.norm2 = make_norm(channels, None if scale is None else 1.0)
        self.conv2 = conv(channels, channels, 3)

    def forward(self, x: Tensor, geo: BoardGeometry) -> Tensor:
        h = self.conv1(self.norm1(x, geo.mask, geo.total))
        return x + self.conv2(self.norm2(h, geo.mask, geo.total))


class GlobalPoolResBlock(nn.Module):
    """A residual block whose first conv's first c_pool channels are pooled to bias the rest."""

    def __init__(self, channels: int, pool_channels: int, scale: float | None = None) -> None:
        super().__init__()
        self.pool_channels = pool_channels
        rest = channels - pool_channels
        self.norm1 = make_norm(channels, scale)
        self.conv1 = conv(channels, channels, 3)
        self.pool_norm = make_norm(pool_channels, None if scale is None else 1.0)
        self.pool_linear = nn.Linear(3 * pool_channels, rest, bias=False)
        self.norm2 = make_norm(rest, stream_scale(1, scale is not None))  # conv output + pooled bias
        self.conv2 = conv(rest, channels, 3)

    def forward(self, x: Tensor, geo: BoardGeometry) -> Tensor:
        h = self.conv1(self.norm1(x, geo.mask, geo.total))
        g = self.pool_norm(h[:, : self.pool_channels], geo.mask, geo.total)
        bias = self.pool_linear(global_pool(g, geo))
        h = h[:, self.pool_channels :] + bias.unsqueeze(-1).unsqueeze(-1)
        return x + self.conv2(self.norm2(h, geo.mask, geo.total))


class NestedBottleneckBlock(nn.Module):
    """Norm, 1x1 conv to c/2, INNER_BLOCKS residual blocks at c/2 (the first a global pooling one
    when `pool_channels`), norm, 1x1 conv back to c, plus the skip; fixed-scale norms throughout."""

    def __init__(self, channels: int, pool_channels: int | None, scale: float) -> None:
        super().__init__()
        mid = channels // 2
        self.pre_norm = FixedScaleNormReLU(channels, scale)
        self.down = conv(channels, mid, 1)
        self.inner = nn.ModuleList([
            GlobalPoolResBlock(mid, pool_channels, fixed_stream_scale(j)) if j == 0 and pool_channels
            else ResBlock(mid, fixed_stream_scale(j)) for j in range(INNER_BLOCKS)
        ])
        self.post_norm = FixedScaleNormReLU(mid, fixed_stream_scale(INNER_BLOCKS))
        self.up = conv(mid, channels, 1)

    def forward(self, x: Tensor, geo: BoardGeometry) -> Tensor:
        h = self.down(self.pre_norm(x, geo.mask, geo.total))
        for block in self.inner:
            h = block(h, geo)
        return x + self.up(self.post_norm(h, geo.mask, geo.total))


class Trunk(nn.Module):
    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        c = arch.channels
        self.input_conv = conv(NUM_SPATIAL, c, 5)
        self.global_linear = nn.Linear(NUM_GLOBAL, c, bias=False)
        gpool = set(arch.gpool_positions())
        if arch.nested:
            self.blocks = nn.ModuleList([
                NestedBottleneckBlock(c, arch.pool_channels if i in gpool else None, fixed_stream_scale(i))
                for i in range(arch.blocks)
            ])
            self.final_norm: nn.Module = FixedScaleNormReLU(c, fixed_stream_scale(arch.blocks))
        else:
            self.blocks = nn.ModuleList(
                [GlobalPoolResBlock(c, arch.pool_channels) if i in gpool else ResBlock(c) for i in range(arch.blocks)]
            )
            self.final_norm = MaskedBatchNormReLU(c)

    def stream(self, spatial: Tensor, global_inputs: Tensor, geo: BoardGeometry) -> Tensor:
        """The residual stream after the last block, before the final norm."""
        x = self.input_conv(spatial * geo.mask) + self.global_linear(global_inputs).unsqueeze(-1).unsqueeze(-1)
        x = x * geo.mask
        for block in self.blocks:
            x = block(x, geo)
        return x

    def forward(self, spatial: Tensor, global_inputs: Tensor, geo: BoardGeometry) -> Tensor:
        return self.final_norm(self.stream(spatial, global_inputs, geo), geo.mask, geo.total)


def masked_policy(board: Tensor, pass_logits: Tensor, mask: Tensor, off_board_logit: float) -> Tensor:
    """Board logits [B, K, H, W] and pass logits [B, K] -> [B, K, H*W+1], off-board = off_board_logit."""
    # float32 even under bf16 autocast, where OFF_BOARD_LOGIT would round to -9984
    board = board.float()
    board = torch.where(mask > 0.5, board, torch.full_like(board, off_board_logit))
    return torch.cat([board.flatten(2), pass_logits.unsqueeze(-1)], dim=2)


class PolicyHead(nn.Module):
    """Policy and opponent-policy logits [B, 2, H*W+1]; pass logits from G's pooled values."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        c, ch = arch.channels, arch.head_channels
        self.p_conv = conv(c, ch, 1)
        self.g_conv = conv(c, ch, 1)
        self.g_norm = make_norm(ch, 1.0 if arch.nested else None)
        self.g_linear = nn.Linear(3 * ch, ch, bias=False)
        self.p_norm = make_norm(ch, stream_scale(1, arch.nested))  # conv output + pooled bias
        self.out_conv = conv(ch, 2, 1)
        self.pass_linear = nn.Linear(3 * ch, 2, bias=False)
        self.off_board_logit = OFF_BOARD_LOGIT

    def features(self, x: Tensor, geo: BoardGeometry) -> tuple[Tensor, Tensor]:
        """-> (P after its batch norm [B, c_head, H, W], G pooled [B, 3c_head])."""
        p = self.p_conv(x)
        g_pooled = global_pool(self.g_norm(self.g_conv(x), geo.mask, geo.total), geo)
        p = p + self.g_linear(g_pooled).unsqueeze(-1).unsqueeze(-1)
        return self.p_norm(p, geo.mask, geo.total), g_pooled

    def logits(self, p: Tensor, g_pooled: Tensor, geo: BoardGeometry) -> Tensor:
        return masked_policy(self.out_conv(p), self.pass_linear(g_pooled), geo.mask, self.off_board_logit)


class AuxiliaryPolicyHead(nn.Module):
    """A further policy's logits [B, H*W+1] from the policy head's P and pooled G: the soft policy
    (training only) or the optimistic policy."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        ch = arch.head_channels
        self.out_conv = conv(ch, 1, 1)
        self.pass_linear = nn.Linear(3 * ch, 1, bias=False)
        self.off_board_logit = OFF_BOARD_LOGIT

    def forward(self, p: Tensor, g_pooled: Tensor, geo: BoardGeometry) -> Tensor:
        return masked_policy(self.out_conv(p), self.pass_linear(g_pooled), geo.mask, self.off_board_logit)[:, 0]


class OptimisticPolicyHead(nn.Module):
    """The optimistic policy's logits; `policy` (the ordinary policy's) is not used."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.head = AuxiliaryPolicyHead(arch)

    def forward(self, p: Tensor, g_pooled: Tensor, geo: BoardGeometry, policy: Tensor) -> Tensor:
        return self.head(p, g_pooled, geo)


class NoOptimisticPolicyHead(nn.Module):
    """In place of OptimisticPolicyHead in a net without it: the ordinary policy, no parameters."""

    def forward(self, p: Tensor, g_pooled: Tensor, geo: BoardGeometry, policy: Tensor) -> Tensor:
        return policy


def make_optimistic_policy_head(arch: Architecture, enabled: bool) -> nn.Module:
    return OptimisticPolicyHead(arch) if enabled else NoOptimisticPolicyHead()


class ValueHead(nn.Module):
    """V, its pooled values, the 9 game-outcome outputs and the ownership logits."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        ch = arch.head_channels
        self.v_conv = conv(arch.channels, ch, 1)
        self.v_norm = make_norm(ch, 1.0 if arch.nested else None) if arch.activated_value else NoNorm()
        self.outcome_hidden = nn.Linear(3 * ch, arch.value_channels)
        self.outcome_out = nn.Linear(arch.value_channels, 3 + 2 + NUM_ROOT_VARIANCES)
        self.ownership_conv = conv(ch, 1, 1)

    def forward(self, x: Tensor, geo: BoardGeometry) -> tuple[Tensor, Tensor, Tensor]:
        """-> (V_pooled [B, 3c_head], outcome [B, 9] raw, ownership logits [B, H, W])."""
        # As in Appendix A, V is pooled and fed to the ownership conv directly, with no batch
        # norm or ReLU in between; it is 0 off the board (bias-free 1x1 conv of a masked input).
        # The later nets normalise and activate it first (masked, so still 0 off the board).
        v = self.v_norm(self.v_conv(x), geo.mask, geo.total)
        pooled = value_pool(v, geo)
        hidden = F.relu(float32_linear(pooled, self.outcome_hidden.weight, self.outcome_hidden.bias))
        outcome = float32_linear(hidden, self.outcome_out.weight, self.outcome_out.bias)
        ownership = (self.ownership_conv(v) * geo.mask).squeeze(1)
        return pooled, outcome, ownership


def float32_linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """F.linear(x, weight, bias) in float32 even under bf16 autocast (which leaves elementwise ops
    alone and which a scripted module cannot switch off): the score is 20 x an outcome output, and
    bf16's 8 bits would round a 40-point score to 0.3 points."""
    return (x.float().unsqueeze(2) * weight.t().float().unsqueeze(0)).sum(dim=1) + bias.float()


def score_values() -> Tensor:
    """The score belief's bin centres -S+0.5, ..., S-0.5 [NUM_SCORE_BINS]."""
    return torch.arange(NUM_SCORE_BINS, dtype=torch.float32) - (SCORE_LIMIT - 0.5)


def score_parity(area: Tensor, komi: Tensor, scores: Tensor) -> Tensor:
    """Parity(s): 1 where score s is normally possible, 0 where not [B, NUM_SCORE_BINS].

    With every point owned, own - opp = area - 2*opp, so final scores (komi included) lie on
    the lattice area + komi + 2Z. The value is 1 - (distance from s to that lattice), which is
    exactly 1 or 0 for half-integer komi and 0.5 everywhere for integer komi, where the bin
    centres s (half-integers) are all equally far from the possible (integer) scores.
    """
    offset = torch.remainder(scores.unsqueeze(0) - (area + komi).unsqueeze(1), 2.0)
    return 1.0 - torch.minimum(offset, 2.0 - offset)


class ScoreBeliefHead(nn.Module):
    """Logits over final score differences: shared-weight layers per bin, scaled by softplus(gamma)."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        pooled = 3 * arch.head_channels
        self.pooled_channels = pooled
        self.gamma_hidden = nn.Linear(pooled, arch.value_channels)
        self.gamma_out = nn.Linear(arch.value_channels, 1)
        # Input per bin: V_pooled ++ (0.05 * s, Parity(s) - 0.5), same weights for every s.
        self.bin_hidden = nn.Linear(pooled + 2, arch.value_channels)
        self.bin_out = nn.Linear(arch.value_channels, 1)
        self.register_buffer("scores", score_values(), persistent=False)
        self.scores: Tensor  # the buffer as the type checker should see it

    def forward(self, pooled: Tensor, area: Tensor, komi: Tensor) -> tuple[Tensor, Tensor]:
        """-> (scaled logits [B, NUM_SCORE_BINS], gamma [B])."""
        gamma = self.gamma_out(F.relu(self.gamma_hidden(pooled)))
        w = self.bin_hidden.weight
        # The linear layer on the concatenation, split so V_pooled's part is computed once.
        base = F.linear(pooled, w[:, : self.pooled_channels], self.bin_hidden.bias)
        score_term = (0.05 * self.scores).unsqueeze(1) * w[:, self.pooled_channels]
        parity = score_parity(area, komi, self.scores) - 0.5
        hidden = base.unsqueeze(1) + score_term.unsqueeze(0) + parity.unsqueeze(2) * w[:, self.pooled_channels + 1]
        logits = self.bin_out(F.relu(hidden)).squeeze(2)
        return logits * F.softplus(gamma), gamma.squeeze(1)


class ShortTermHead(nn.Module):
    """Short-term value, score and their error predictions [B, NUM_SHORT_TERM] from V_pooled."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.hidden = nn.Linear(3 * arch.head_channels, arch.value_channels)
        self.out = nn.Linear(arch.value_channels, NUM_SHORT_TERM)
        self.score_scale = SCORE_SCALE

    def forward(self, pooled: Tensor) -> Tensor:
        hidden = F.relu(float32_linear(pooled, self.hidden.weight, self.hidden.bias))
        raw = float32_linear(hidden, self.out.weight, self.out.bias)
        return torch.stack([torch.tanh(raw[:, 0]), raw[:, 1] * self.score_scale, F.softplus(raw[:, 2]),
                            F.softplus(raw[:, 3]) * self.score_scale], dim=1)


class NoShortTermHead(nn.Module):
    """In place of ShortTermHead in a net without it: NO_SHORT_TERM for every sample, no parameters
    (so the net's state dict is what it was before the heads existed)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("constant", torch.tensor(NO_SHORT_TERM), persistent=False)
        self.constant: Tensor  # the buffer as the type checker should see it

    def forward(self, pooled: Tensor) -> Tensor:
        return self.constant.unsqueeze(0).expand(pooled.shape[0], -1).float()


def make_short_term_head(arch: Architecture, enabled: bool) -> nn.Module:
    return ShortTermHead(arch) if enabled else NoShortTermHead()


def score_mean_stdev(outcome: Tensor, scale: float = SCORE_SCALE) -> tuple[Tensor, Tensor]:
    """Score mean = 20 * raw, stdev = 20 * softplus(raw), from the 9 game-outcome outputs."""
    return outcome[:, 3] * scale, F.softplus(outcome[:, 4]) * scale


def check_inputs(
    spatial: Tensor, global_inputs: Tensor, num_spatial: int = NUM_SPATIAL, num_global: int = NUM_GLOBAL
) -> None:
    if spatial.dim() != 4 or spatial.shape[1] != num_spatial:
        raise ValueError(f"spatial must be [B, {num_spatial}, H, W], got {list(spatial.shape)}")
    if global_inputs.dim() != 2 or global_inputs.shape[1] != num_global:
        raise ValueError(f"globals must be [B, {num_global}], got {list(global_inputs.shape)}")
    if spatial.shape[0] != global_inputs.shape[0]:
        raise ValueError(f"batch sizes differ: spatial {spatial.shape[0]}, globals {global_inputs.shape[0]}")


class KataGoNet(nn.Module):
    __jit_unused_properties__ = ["architecture"]

    def __init__(self, arch: Architecture, short_term: bool = False, optimistic_policy: bool = False) -> None:
        super().__init__()
        if optimistic_policy and not short_term:
            raise ValueError("the optimistic policy head needs the short-term heads (its weights come from them)")
        self.arch_name = arch.name
        self.short_term = short_term
        self.optimistic_policy = optimistic_policy
        self.trunk = Trunk(arch)
        self.policy_head = PolicyHead(arch)
        self.value_head = ValueHead(arch)
        self.score_belief_head = ScoreBeliefHead(arch)
        # Registered last, so its parameters come last: a checkpoint saved before it existed keeps
        # its optimizer's parameter ids (tengen.train.learner adds it fresh).
        self.soft_policy_head = AuxiliaryPolicyHead(arch)
        self.komi_index = KOMI
        self.one_batch_norm = arch.nested
        if arch.nested:  # the one batch norm and the heads trained behind it (never served)
            self.bn_norm = MaskedBatchNormReLU(arch.channels)
            self.bn_heads = HeadSet(arch, short_term, optimistic_policy)
            for module in self.modules():  # variance-preserving convolutions, as K assumes
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        # Registered last (after bn_heads, whose own short-term and optimistic heads are its last
        # modules), so that these parameters are the net's last ones: a checkpoint saved without them
        # keeps its optimizer's parameter ids (tengen.train.learner adds them fresh).
        self.short_term_head = make_short_term_head(arch, short_term)
        self.optimistic_policy_head = make_optimistic_policy_head(arch, optimistic_policy)

    @property
    def architecture(self) -> Architecture:
        return ARCHITECTURES[self.arch_name]

    def forward(self, spatial: Tensor, global_inputs: Tensor) -> ModelOutputs:
        """Every output of the served heads."""
        check_inputs(spatial, global_inputs)
        geo = board_geometry(spatial)
        return self._served_heads(self.trunk(spatial, global_inputs, geo), global_inputs, geo)

    def _served_heads(self, x: Tensor, global_inputs: Tensor, geo: BoardGeometry) -> ModelOutputs:
        p, g_pooled = self.policy_head.features(x, geo)
        pooled, outcome, ownership_logits = self.value_head(x, geo)
        komi = global_inputs[:, self.komi_index] * 15.0  # the input holds komi / 15
        belief, gamma = self.score_belief_head(pooled, geo.area.squeeze(1), komi)
        policy = self.policy_head.logits(p, g_pooled, geo)
        return assemble_outputs(policy, self.soft_policy_head(p, g_pooled, geo),
                                self.optimistic_policy_head(p, g_pooled, geo, policy[:, 0]),
                                outcome, ownership_logits, belief, gamma, geo.mask, self.short_term_head(pooled))

    @torch.jit.unused
    def training_outputs(self, spatial: Tensor, global_inputs: Tensor) -> list[tuple[float, ModelOutputs]]:
        """(loss weight, outputs) of every set of heads: the served heads alone, or in a one-batch-
        norm net the heads behind the batch norm (80%) and the served ones (20%)."""
        if not self.one_batch_norm:
            return [(1.0, self(spatial, global_inputs))]
        check_inputs(spatial, global_inputs)
        geo = board_geometry(spatial)
        x = self.trunk.stream(spatial, global_inputs, geo)
        komi = global_inputs[:, self.komi_index] * 15.0
        behind_bn = self.bn_heads(self.bn_norm(x, geo.mask, geo.total), komi, geo)
        served = self._served_heads(self.trunk.final_norm(x, geo.mask, geo.total), global_inputs, geo)
        return [(1.0 - MAIN_HEADS_WEIGHT, behind_bn), (MAIN_HEADS_WEIGHT, served)]


class HeadSet(nn.Module):
    """A second copy of every head (a one-batch-norm net's, trained behind the batch norm)."""

    def __init__(self, arch: Architecture, short_term: bool = False, optimistic_policy: bool = False) -> None:
        super().__init__()
        self.policy_head = PolicyHead(arch)
        self.value_head = ValueHead(arch)
        self.score_belief_head = ScoreBeliefHead(arch)
        self.soft_policy_head = AuxiliaryPolicyHead(arch)
        self.short_term_head = make_short_term_head(arch, short_term)
        self.optimistic_policy_head = make_optimistic_policy_head(arch, optimistic_policy)

    def forward(self, x: Tensor, komi: Tensor, geo: BoardGeometry) -> ModelOutputs:
        p, g_pooled = self.policy_head.features(x, geo)
        pooled, outcome, ownership_logits = self.value_head(x, geo)
        belief, gamma = self.score_belief_head(pooled, geo.area.squeeze(1), komi)
        policy = self.policy_head.logits(p, g_pooled, geo)
        return assemble_outputs(policy, self.soft_policy_head(p, g_pooled, geo),
                                self.optimistic_policy_head(p, g_pooled, geo, policy[:, 0]),
                                outcome, ownership_logits, belief, gamma, geo.mask, self.short_term_head(pooled))


def assemble_outputs(policy: Tensor, soft_policy: Tensor, optimistic_policy: Tensor, outcome: Tensor,
                     ownership_logits: Tensor, belief: Tensor, gamma: Tensor, mask: Tensor,
                     short_term: Tensor) -> ModelOutputs:
    """ModelOutputs from the heads' raw outputs (policy [B, 2, M]: own and opponent's)."""
    score_mean, score_stdev = score_mean_stdev(outcome)
    return ModelOutputs(
        policy_logits=policy[:, 0],
        opponent_policy_logits=policy[:, 1],
        soft_policy_logits=soft_policy,
        optimistic_policy_logits=optimistic_policy,
        value_logits=outcome[:, 0:3],
        score_mean=score_mean,
        score_stdev=score_stdev,
        root_variance=F.softplus(outcome[:, 5:9]),
        ownership_logits=ownership_logits,
        ownership=torch.tanh(ownership_logits),
        score_belief_logits=belief,
        score_gamma=gamma,
        mask=mask.squeeze(1),
        short_term=short_term,
    )


class InferenceNet(nn.Module):
    """The served outputs only (no opponent or soft policy, score belief or root variance).

    forward(spatial [B,18,H,W], globals [B,10]) -> (policy [B,H*W+1], value [B,3],
    score [B,2] = (mean, stdev), ownership [B,H,W], uncertainty [B,2] = the short-term value and
    score error predictions, -1 each for a net without short-term heads); the signature of the
    exported model. The policy is the optimistic head's when `optimistic` (an attribute, so a
    loaded export can be switched before use), the ordinary one otherwise.
    """

    def __init__(self, net: KataGoNet, optimistic: bool = False) -> None:
        super().__init__()
        if optimistic and not net.optimistic_policy:
            raise ValueError("this net has no optimistic policy head")
        self.trunk = net.trunk
        self.policy_head = net.policy_head
        self.value_head = net.value_head
        self.short_term_head = net.short_term_head
        self.optimistic_policy_head = net.optimistic_policy_head
        self.optimistic = optimistic

    def forward(self, spatial: Tensor, globals: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # noqa: A002
        check_inputs(spatial, globals)
        geo = board_geometry(spatial)
        x = self.trunk(spatial, globals, geo)
        p, g_pooled = self.policy_head.features(x, geo)
        policy = self.policy_head.logits(p, g_pooled, geo)[:, 0]
        if self.optimistic:
            policy = self.optimistic_policy_head(p, g_pooled, geo, policy)
        pooled, outcome, ownership_logits = self.value_head(x, geo)
        score = torch.stack(score_mean_stdev(outcome), dim=1)
        return policy, outcome[:, 0:3], score, torch.tanh(ownership_logits), self.short_term_head(pooled)[:, 2:4]


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


SOFT_POLICY_PREFIX = "soft_policy_head."
SCORE_BELIEF_PREFIX = "score_belief_head."  # training-only, like the soft policy: not in an export
SHORT_TERM_PREFIXES = ("short_term_head.", "bn_heads.short_term_head.")
OPTIMISTIC_POLICY_PREFIXES = ("optimistic_policy_head.", "bn_heads.optimistic_policy_head.")


__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "InferenceNet",
    "KataGoNet",
    "ModelOutputs",
    "NUM_SCORE_BINS",
    "OFF_BOARD_LOGIT",
    "SCORE_LIMIT",
    "build_model",
    "parameter_count",
]
