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
from tengen.infra.triton.repository import ModelRepository, model_config

log = logging.getLogger(__name__)


def configure_model(repository: ModelRepository, config: Config, name: str, backend: str | None = None) -> bool:
    """Create the model with the preset's config, or bring an existing one's config up to date
    (same backend); True when config.pbtxt was written."""
    if not repository.has_model(name):
        repository.create_model(name, model_config(config, name, backend or "python"))
        return True
    changed = repository.update_config(name, model_config(config, name, backend or repository.backend(name)))
    if changed:
        log.info("model %s: config.pbtxt updated to the preset's triton settings (applied at its next load)", name)
    return changed


def ensure_model(repository: ModelRepository, config: Config, seed: int = 0,
                 backend: str = "python") -> tuple[int, bool]:
    """(the model's latest version, whether this call wrote it as version 1). A new model is created
    with `backend`; an existing one keeps its own (its versions are laid out for it), its config
    brought to the preset."""
    import torch

    from tengen.nn.export import export_model
    from tengen.nn.model import build_model

    name = config.run.model_name
    configure_model(repository, config, name, None if repository.has_model(name) else backend)
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
