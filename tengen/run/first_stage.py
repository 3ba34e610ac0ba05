"""A new run's first stage on a smaller board (run.first_stage_board_size; KataGo §4.3 and §7.2:
small boards learn fast, and what they teach carries to bigger ones).

`tengen run` on a data dir that holds no run yet plays the whole loop at the stage's side first,
in `<data_dir>/first-stage/` (a data dir of its own: window, models, gating, ratings, logs), until
the stage's trainer has trained run.first_stage_samples. The run proper then starts in the data
dir from the stage's newest promoted net, as `--init-model` would start it: its version 1, the
trainer's first weights, an empty window, game.board_sizes. A stage cut short (Ctrl-C, the end of
--duration) goes on at the next `tengen run` on the data dir; once the data dir holds a run, its
stage is never played again.

The stage's services see the preset with five overrides (`stage_env`): the stage's side and komi
for self-play, gating and training, no first stage of their own, and no GNU Go curve (the strength
service plays the preset's board, where it would measure only the stage's random first net: minutes
of a core that the stage's self-play gets instead). The run proper's curve starts with the stage's
net, its version 1. Everything else is the preset's.
"""
from __future__ import annotations

import os
from pathlib import Path

from tengen.config import Config, load_config
from tengen.infra.triton.repository import ModelRepository
from tengen.loop.layout import DataDir
from tengen.run.bootstrap import held_run, place_init_model


def holds_a_run(config: Config) -> bool:
    """Whether the config's data dir already holds a run (a model version, a trainer checkpoint
    or an init model): then no first stage is played."""
    return held_run(config) is not None or DataDir(config.run.data_dir).init_model.exists()


def stage_pending(config: Config) -> bool:
    """Whether `tengen run` plays the first stage before the run proper."""
    return config.run.first_stage_board_size > 0 and not holds_a_run(config)


def stage_env(config: Config) -> dict[str, str]:
    """The environment overrides the stage's services run with (and its own config is read with)."""
    return {
        "TENGEN_GAME__BOARD_SIZES": str(config.run.first_stage_board_size),
        "TENGEN_GAME__BOARD_SIZE_WEIGHTS": "1",
        "TENGEN_GAME__KOMI_MEAN": f"{config.run.first_stage_komi_mean:g}",
        "TENGEN_RUN__FIRST_STAGE_BOARD_SIZE": "0",
        "TENGEN_STRENGTH__GNUGO_LEVELS": "",
    }


def stage_config(preset: str, config: Config) -> Config:
    """The stage's config: `preset` read with this process's environment and `stage_env`, its data
    dir the stage's."""
    stage = load_config(preset, env={**os.environ, **stage_env(config)})
    stage.run.data_dir = str(DataDir(config.run.data_dir).first_stage)
    return stage


def newest_promoted(stage: Config) -> Path:
    """The export of the stage's newest version (the newest gating promoted, else its version 1).
    Raises ValueError when the stage has no version."""
    repository = ModelRepository(DataDir(stage.run.data_dir).models)
    version = repository.latest_version(stage.run.model_name)
    if version is None:
        raise ValueError(f"the first stage in {stage.run.data_dir} has no model version to start the run from")
    return repository.export_path(stage.run.model_name, version)


def hand_over(config: Config, stage: Config) -> tuple[Path, dict]:
    """Start the run proper from the stage's newest promoted net; returns that export and the
    init model's sidecar."""
    export = newest_promoted(stage)
    return export, place_init_model(config, export, source="the first stage's newest net")
