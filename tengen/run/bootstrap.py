"""What a data dir needs before selfplay can start: the served model with a version.

A new run gets version 1 of the model, a randomly initialised net of the preset's trainer
architecture, written straight into the model repository (atomically, through
ModelRepository.write_version) before Triton starts, so Triton loads it at start-up. A data dir that
already has a version is left as it is: the run continues from there.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from tengen.config import Config
from tengen.infra.triton import ModelRepository, render_config

log = logging.getLogger(__name__)


def ensure_model(repository: ModelRepository, config: Config, seed: int = 0) -> tuple[int, bool]:
    """(the model's latest version, whether this call wrote it as version 1)."""
    import torch

    from tengen.nn.export import export_model
    from tengen.nn.model import build_model

    name = config.run.model_name
    if not repository.has_model(name):
        # Warm up on the largest board the run plays, so the first real request finds a warm model.
        repository.create_model(name, render_config(name, "python", warmup_board=max(config.game.board_sizes),
                                                    instances=config.triton.instances,
                                                    torch_threads=config.triton.threads,
                                                    queue_delay_us=config.triton.queue_delay_us))
    latest = repository.latest_version(name)
    if latest is not None:
        return latest, False
    arch = config.trainer.arch
    log.info("model repository %s has no version of %s: writing a random %s net as version 1",
             repository.root, name, arch)
    with tempfile.TemporaryDirectory(prefix="tengen-bootstrap-") as tmp:
        export = Path(tmp) / "model.pt"
        torch.manual_seed(seed)
        export_model(build_model(arch), export, samples_seen=0, extra={"init_seed": seed})
        version = repository.write_version(name, export)
    return version, True
