"""A run's first stage on a smaller board (tengen.run.first_stage, run.first_stage_*): when it is
played, what its services see, which net the run proper starts from; and `tengen run --preset tiny`
with a 7x7 stage before 9x9, for real (broker, Triton, trainer, gating, selfplay), from the stage's
first games to the run proper's 9x9 games and a clean Ctrl-C."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tengen.config import ConfigError, load_config
from tengen.infra.process import stop_marked
from tengen.infra.triton.repository import ModelRepository
from tengen.loop.layout import DataDir
from tengen.nn.export import export_model, load_export
from tengen.nn.model import build_model
from tengen.run.bootstrap import ensure_model
from tengen.run.first_stage import hand_over, holds_a_run, stage_config, stage_env, stage_pending

TENGEN = str(Path(sys.executable).with_name("tengen"))
STAGE_ENV = {"TENGEN_GAME__BOARD_SIZES": "9", "TENGEN_RUN__FIRST_STAGE_BOARD_SIZE": "7"}


def _config(data_dir: Path, **env: str):
    config = load_config("tiny", env={**STAGE_ENV, **env})
    config.run.data_dir = str(data_dir)
    return config


def test_the_stage_board_must_be_smaller_than_every_board_of_the_run() -> None:
    assert load_config("tiny", env=STAGE_ENV).run.first_stage_board_size == 7
    for env in ({"TENGEN_RUN__FIRST_STAGE_BOARD_SIZE": "7"},  # tiny plays 7x7 itself
                {"TENGEN_GAME__BOARD_SIZES": "9,13", "TENGEN_GAME__BOARD_SIZE_WEIGHTS": "1,1",
                 "TENGEN_RUN__FIRST_STAGE_BOARD_SIZE": "9"},
                {**STAGE_ENV, "TENGEN_RUN__FIRST_STAGE_BOARD_SIZE": "5"},
                {**STAGE_ENV, "TENGEN_RUN__FIRST_STAGE_SAMPLES": "0"}):
        with pytest.raises(ConfigError, match="run.first_stage"):
            load_config("tiny", env=env)


def test_the_stage_is_played_only_before_a_data_dir_holds_a_run(tmp_path: Path) -> None:
    assert stage_pending(_config(tmp_path / "a"))
    assert not stage_pending(_config(tmp_path / "a", TENGEN_RUN__FIRST_STAGE_BOARD_SIZE="0"))
    for made in ("checkpoint", "init_model"):  # a trainer's checkpoint, or --init-model's net
        data_dir = tmp_path / made
        path = getattr(DataDir(data_dir), made)
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x")
        assert holds_a_run(_config(data_dir)) and not stage_pending(_config(data_dir))
    served = _config(tmp_path / "served")
    assert ensure_model(ModelRepository(DataDir(served.run.data_dir).models), served) == (1, True)
    assert not stage_pending(served)


def test_the_stage_services_see_its_board_and_komi_and_no_stage_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, TENGEN_RUN__FIRST_STAGE_KOMI_MEAN="8.5")
    env = stage_env(config)
    assert env == {"TENGEN_GAME__BOARD_SIZES": "7", "TENGEN_GAME__BOARD_SIZE_WEIGHTS": "1",
                   "TENGEN_GAME__KOMI_MEAN": "8.5", "TENGEN_RUN__FIRST_STAGE_BOARD_SIZE": "0",
                   "TENGEN_STRENGTH__GNUGO_LEVELS": ""}
    # What a stage service reads: this process's environment under the stage's overrides.
    for name, value in {**STAGE_ENV, "TENGEN_RUN__FIRST_STAGE_KOMI_MEAN": "8.5",
                        "TENGEN_TRAINER__BATCH_SIZE": "32"}.items():
        monkeypatch.setenv(name, value)
    stage = stage_config("tiny", config)
    assert stage.game.board_sizes == [7] and stage.game.komi_mean == 8.5
    assert stage.run.first_stage_board_size == 0
    assert stage.run.data_dir == str(tmp_path / "first-stage")
    assert stage.trainer.batch_size == 32  # the caller's other overrides reach the stage too
    assert stage.strength.gnugo_levels == [] and config.strength.gnugo_levels  # no curve of the stage's nets


def test_the_run_starts_from_the_stage_newest_promoted_net(tmp_path: Path) -> None:
    config = _config(tmp_path / "run")
    stage = stage_config("tiny", config)
    repository = ModelRepository(DataDir(stage.run.data_dir).models)
    ensure_model(repository, stage)  # version 1, as a run makes it; gating promotes 2 and 3
    for samples in (1000, 2000):
        torch.manual_seed(samples)
        export = tmp_path / f"net-{samples}.pt"
        export_model(build_model("b2c32"), export, samples_seen=samples)
        repository.write_version("tengen", export)
    newest = repository.export_path("tengen", 3)

    export, sidecar = hand_over(config, stage)

    assert export == newest
    init = DataDir(config.run.data_dir).init_model
    assert init.read_bytes() == newest.read_bytes()
    _, metadata = load_export(init)
    # The run counts its own samples from 0; the stage's 2000 are kept aside.
    assert metadata["samples_seen"] == 0 and sidecar["samples_seen"] == 0
    assert metadata["init_from"] == {"path": str(newest.resolve()), "samples_seen": 2000}
    assert holds_a_run(config) and not stage_pending(config)


def test_a_stage_without_a_version_is_an_error(tmp_path: Path) -> None:
    config = _config(tmp_path / "run")
    with pytest.raises(ValueError, match="has no model version"):
        hand_over(config, stage_config("tiny", config))


def test_a_stage_net_the_run_cannot_train_is_named_as_the_stage(tmp_path: Path) -> None:
    config = _config(tmp_path / "run", TENGEN_TRAINER__ARCH="b4c48")  # the run proper trains b4c48
    stage = stage_config("tiny", config)  # the stage, read without that override, trains b2c32
    ensure_model(ModelRepository(DataDir(stage.run.data_dir).models), stage)
    with pytest.raises(ValueError, match="the first stage's newest net .* is a b2c32 net but the preset trains b4c48"):
        hand_over(config, stage)
    assert not holds_a_run(config)


def _sizes(sgf_dir: Path) -> set[str]:
    return {m.group(1) for p in sgf_dir.glob("**/*.sgf") if (m := re.search(r"SZ\[(\d+)\]", p.read_text()))}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tengen_run_plays_the_7x7_stage_then_9x9_from_its_net(tmp_path: Path, gnugo: str) -> None:
    data_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENGEN_")}
    # Two candidates' worth of 7x7 training; the run proper's curve at one level, two games.
    env.update(STAGE_ENV, TENGEN_DATA_DIR=str(data_dir), TENGEN_RUN__FIRST_STAGE_SAMPLES="2000",
               TENGEN_STRENGTH__GNUGO_LEVELS="0", TENGEN_STRENGTH__GAMES="2")
    out = tmp_path / "run.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen([TENGEN, "run", "--preset", "tiny", "--data-dir", str(data_dir), "--duration", "12m",
                                 "--status-every", "5"], stdout=sink, stderr=subprocess.STDOUT, env=env)
    layout = DataDir(data_dir)
    staged: dict | None = None  # `tengen status` on the data dir while the stage runs
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(5)
            if staged is None and (layout.first_stage / "run.json").exists():
                live = subprocess.run([TENGEN, "status", "--data-dir", str(data_dir), "--json"], capture_output=True,
                                      text=True, env=env, timeout=120)
                if "first stage done" not in out.read_text(errors="replace"):
                    assert live.returncode == 0, live.stderr
                    staged = json.loads(live.stdout)
            if _sizes(layout.selfplay_sgf) and "] games " in out.read_text(errors="replace").rpartition(
                    "first stage done")[2]:
                break  # the run proper plays and has shown a status line
        assert proc.poll() is None, out.read_text(errors="replace")[-6000:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=180) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_marked(str(data_dir.resolve()))
        stop_marked(str(layout.first_stage.resolve()))
    text = out.read_text(errors="replace")
    stage = DataDir(layout.first_stage)
    assert "first stage at 7x7 (komi around 9) in" in text
    trained = re.search(r"the trainer has trained ([\d,]+) samples \(of 2,000\)", text)
    assert trained is not None and int(trained.group(1).replace(",", "")) >= 2000, text[-6000:]
    assert "first stage done; the run starts at 9x9 from" in text
    assert staged is not None and staged["running"] and staged["data_dir"] == str(layout.first_stage)
    # Each part played its own board and kept its own record.
    assert _sizes(stage.selfplay_sgf) == {"7"} and _sizes(layout.selfplay_sgf) == {"9"}
    records = [json.loads(line) for line in stage.run_records.read_text().splitlines()]
    assert [r["config"]["game"]["board_sizes"] for r in records] == [[7]]
    records = [json.loads(line) for line in layout.run_records.read_text().splitlines()]
    assert [r["config"]["game"]["board_sizes"] for r in records] == [[9]]
    # The run proper's version 1 is the stage's newest version, and its trainer started from it.
    stage_repo = ModelRepository(stage.models)
    newest = stage_repo.export_path("tengen", stage_repo.latest_version("tengen") or 0)
    first = ModelRepository(layout.models).export_path("tengen", 1)
    assert first.read_bytes() == newest.read_bytes()
    assert "tengen run: first stage done; the run starts at 9x9 from " + str(newest) in text
    # Stopped cleanly: one summary (the stage that is done goes on as the run), on the data dir
    # given, never the stage's own; nothing left running.
    assert text.count("run stopped. Everything is in") == 1 and "SIGINT: stopping" in text
    assert f"run stopped. Everything is in {data_dir}; `tengen run --data-dir {data_dir}` continues it" in text
    assert not (data_dir / "run.json").exists() and not (stage.root / "run.json").exists()


def test_a_stage_cut_short_says_to_continue_on_the_data_dir_given(tmp_path: Path) -> None:
    from tengen.run.local import LocalRun, RunOptions

    config = _config(tmp_path / "run")
    stage = stage_config("tiny", config)
    run = LocalRun(RunOptions(preset="tiny", config=stage, data_dir=Path(stage.run.data_dir), workers=1,
                              resume_dir=tmp_path / "run"))
    assert f"run stopped. Everything is in {stage.run.data_dir}; `tengen run --data-dir {tmp_path / 'run'}` " \
           "continues it." in run.summary()


def test_the_run_proper_summary_counts_its_own_games_not_the_stage(tmp_path: Path) -> None:
    from tengen.run.local import LocalRun, RunOptions

    config = _config(tmp_path / "run")
    layout = DataDir(tmp_path / "run")
    for sgf in (layout.selfplay_sgf / "a.sgf", layout.selfplay_sgf / "b.sgf",
                DataDir(layout.first_stage).selfplay_sgf / "c.sgf"):
        sgf.parent.mkdir(parents=True, exist_ok=True)
        sgf.write_text("(;SZ[9])")
    run = LocalRun(RunOptions(preset="tiny", config=config, data_dir=layout.root, workers=1))
    assert f"games (SGF)   2 files under {layout.selfplay_sgf.resolve()}" in run.summary()
