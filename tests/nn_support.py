"""Random encoded positions for the net's tests (the rules engine is not needed for these)."""
from __future__ import annotations

import torch

from tengen.go import planes
from tengen.nn.model import KataGoNet


def random_position(height: int, width: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One plausible-looking input: spatial [18, H, W] (binary, on-board all ones), globals [10]."""
    spatial = torch.zeros(planes.NUM_SPATIAL, height, width)
    spatial[planes.ON_BOARD] = 1.0
    stones = torch.randint(0, 3, (height, width), generator=generator)
    spatial[planes.OWN_STONE] = (stones == 1).float()
    spatial[planes.OPP_STONE] = (stones == 2).float()
    occupied = (stones > 0).float()
    for channel in range(planes.LIBERTIES_1, planes.NUM_SPATIAL):
        spatial[channel] = (torch.rand(height, width, generator=generator) < 0.05).float()
    for channel in (planes.LIBERTIES_1, planes.LIBERTIES_2, planes.LIBERTIES_3):
        spatial[channel] *= occupied
    global_inputs = torch.zeros(planes.NUM_GLOBAL)
    global_inputs[planes.PREV_PASS_1] = float(torch.rand((), generator=generator) < 0.2)
    komi = float(torch.randint(-16, 17, (), generator=generator)) / 2.0
    global_inputs[planes.KOMI] = komi / 15.0
    global_inputs[planes.KO_RULE_SIMPLE] = 1.0
    global_inputs[planes.SUICIDE_ALLOWED] = float(torch.rand((), generator=generator) < 0.5)
    global_inputs[planes.KOMI_PARITY] = 0.5
    return spatial, global_inputs


def batch(
    sizes: list[tuple[int, int]], seed: int = 0, pad_to: tuple[int, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the given sizes zero-padded (top-left) into one [B, 18, H, W] tensor."""
    generator = torch.Generator().manual_seed(seed)
    height = pad_to[0] if pad_to else max(h for h, _ in sizes)
    width = pad_to[1] if pad_to else max(w for _, w in sizes)
    spatial = torch.zeros(len(sizes), planes.NUM_SPATIAL, height, width)
    global_inputs = torch.zeros(len(sizes), planes.NUM_GLOBAL)
    for i, (h, w) in enumerate(sizes):
        spatial[i, :, :h, :w], global_inputs[i] = random_position(h, w, generator)
    return spatial, global_inputs


def randomize_batchnorm(model: KataGoNet, seed: int = 1) -> None:
    """Non-trivial running statistics and affine parameters, so eval mode is a real test."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.3)
            elif name.endswith("running_var"):
                buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.5)
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.copy_(torch.rand(param.shape, generator=generator) + 0.5)
            elif "norm" in name and name.endswith("bias"):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.2)


def crop_policy(logits: torch.Tensor, padded_width: int, height: int, width: int) -> torch.Tensor:
    """[B, Hp*Wp+1] logits of a padded tensor -> [B, height*width+1] of its top-left board."""
    board = logits[:, :-1].reshape(logits.shape[0], -1, padded_width)[:, :height, :width]
    return torch.cat([board.reshape(logits.shape[0], -1), logits[:, -1:]], dim=1)
