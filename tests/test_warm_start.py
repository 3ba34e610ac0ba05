"""A warm start (`tengen run --init-model`): a new data dir takes an existing export as version 1
and as the trainer's first weights, counting its own samples from 0; a data dir with a run, a
file that is no export and an export of another architecture are refused with a reason."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tengen.config import Config, load_config
from tengen.infra.triton.repository import ModelRepository
from tengen.loop.layout import DataDir
from tengen.nn.export import export_model, load_export
from tengen.nn.model import build_model
from tengen.run.bootstrap import ensure_model, place_init_model
from tengen.train.service import TrainerService

SAMPLES_ELSEWHERE = 123_456


def _config(data_dir: Path) -> Config:
    return load_config("tiny", env={"TENGEN_DATA_DIR": str(data_dir), "TENGEN_KAFKA_BOOTSTRAP": "127.0.0.1:9"})


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    """An export of the tiny preset's architecture with weights no fresh net has."""
    torch.manual_seed(7)
    net = build_model(_config(tmp_path).trainer.arch)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = tmp_path / "elsewhere" / "model.pt"
    export_model(net, path, samples_seen=SAMPLES_ELSEWHERE)
    return path


def _outputs(module: torch.nn.Module) -> list[torch.Tensor]:
    torch.manual_seed(1)
    spatial, globals_ = torch.randn(3, 18, 7, 7), torch.zeros(3, 10)
    spatial[:, 0] = 1.0  # the on-board plane
    with torch.no_grad():
        return list(module(spatial, globals_))


def test_the_init_model_is_version_1_and_the_trainers_first_weights(tmp_path: Path, trained: Path) -> None:
    config = _config(tmp_path / "run")
    placed = place_init_model(config, trained)
    assert placed["samples_seen"] == 0 and placed["init_from"]["samples_seen"] == SAMPLES_ELSEWHERE
    data_dir = DataDir(config.run.data_dir)
    assert data_dir.init_model.read_bytes() == trained.read_bytes()

    repository = ModelRepository(data_dir.models)
    assert ensure_model(repository, config) == (1, True)
    served = repository.export_path(config.run.model_name, 1)
    assert served.read_bytes() == trained.read_bytes()
    assert load_export(served)[1]["samples_seen"] == 0  # this run's count

    service = TrainerService(config)
    try:
        assert service.learner.counters.samples == 0
        from tengen.nn.model import InferenceNet

        ours = _outputs(InferenceNet(service.learner.model.eval()))
        theirs = _outputs(load_export(trained)[0])
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b)
        # A fresh net of the same architecture differs: the weights did come from the export.
        fresh = _outputs(InferenceNet(build_model(config.trainer.arch).eval()))
        assert not torch.allclose(fresh[0], theirs[0])
    finally:
        service.learner.close()
        service.window.close()

    # The data dir now holds a run: a second warm start into it is refused.
    with pytest.raises(ValueError, match="already holds a run"):
        place_init_model(config, trained)


def test_an_export_of_another_architecture_or_no_export_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path / "run")
    other = tmp_path / "other.pt"
    export_model(build_model("b1c16"), other, samples_seen=0)
    assert config.trainer.arch != "b1c16"
    with pytest.raises(ValueError, match=f"is a b1c16 net but the preset trains {config.trainer.arch}"):
        place_init_model(config, other)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="no sidecar"):
        place_init_model(config, garbage)
    assert not DataDir(config.run.data_dir).init_model.exists()


def test_tengen_run_refuses_a_bad_init_model_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "run", "--preset", "tiny", "--data-dir", str(tmp_path / "d"),
         "--init-model", str(tmp_path / "missing.pt"), "--duration", "1m"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("tengen run: --init-model") and "no exported model" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
