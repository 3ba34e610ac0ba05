"""What a data dir needs before selfplay can start: the served model with a version.

A new run gets version 1 of the model, a randomly initialised net of the preset's trainer
architecture (or the data dir's init model, `tengen run --init-model`: a warm start), written
straight into the model repository (atomically, through
ModelRepository.write_version) before Triton starts, so Triton loads it at start-up. A data dir that
already has a version is left as it is: the run continues from there.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from tengen.config import Config
from tengen.infra.triton.repository import ModelRepository, model_config
from tengen.loop.layout import DataDir

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
    init = DataDir(config.run.data_dir).init_model
    if init.is_file():
        log.info("model repository %s has no version of %s: writing the init model %s as version 1",
                 repository.root, name, init)
        return repository.write_version(name, init), True
    arch = config.trainer.arch
    log.info("model repository %s has no version of %s: writing a random %s net as version 1",
             repository.root, name, arch)
    with tempfile.TemporaryDirectory(prefix="tengen-bootstrap-") as tmp:
        export = Path(tmp) / "model.pt"
        torch.manual_seed(seed)
        export_model(build_model(arch), export, samples_seen=0, extra={"init_seed": seed})
        version = repository.write_version(name, export)
    return version, True


def held_run(config: Config) -> str | None:
    """What says the config's data dir already holds a run (its newest model version or its
    trainer checkpoint), or None where a new run may start."""
    data_dir = DataDir(config.run.data_dir)
    latest = ModelRepository(data_dir.models).latest_version(config.run.model_name) if data_dir.models.is_dir() \
        else None  # (a repository would make its folder)
    if latest is not None:
        return f"model version {latest}"
    if data_dir.checkpoint.exists():
        return "a trainer checkpoint"
    return None


def place_init_model(config: Config, export: Path, source: str = "--init-model") -> dict:
    """Copy `export` (a TorchScript export with its sidecar) to the data dir's init model, the
    start of a new run (version 1 and the trainer's first weights); returns its sidecar. Raises
    ValueError when the data dir already has a run, or the export is not one the preset trains
    (naming the export as `source`)."""
    from tengen.nn.export import load_export, sidecar_path

    data_dir = DataDir(config.run.data_dir)
    held = held_run(config)
    if held is not None:
        raise ValueError(f"{data_dir} already holds a run ({held}): --init-model starts a new one; "
                         "give an empty --data-dir")
    try:
        _, metadata = load_export(export)
    except (OSError, ValueError, RuntimeError) as error:
        raise ValueError(f"{source} {export}: {error}") from None
    arch = metadata.get("architecture", {}).get("name")
    if arch != config.trainer.arch:
        raise ValueError(f"{source} {export} is a {arch} net but the preset trains {config.trainer.arch} "
                         f"(set TENGEN_TRAINER__ARCH={arch} to train it)")
    # This run counts its own samples from 0 (its window starts empty); the net's past is kept aside.
    sidecar = {**metadata, "samples_seen": 0,
               "init_from": {"path": str(export.resolve()), "samples_seen": metadata.get("samples_seen", 0)}}
    target = data_dir.init_model
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    # The sidecar first: the net in place is what says the data dir holds a run (held_run).
    tmp_side = sidecar_path(tmp)
    tmp_side.write_text(json.dumps(sidecar, indent=2) + "\n")
    os.replace(tmp_side, sidecar_path(target))
    shutil.copyfile(export, tmp)
    os.replace(tmp, target)
    return sidecar
