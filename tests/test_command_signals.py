"""Long-running commands stop on SIGTERM (`kill`) and on Ctrl-C (SIGINT to the terminal's process
group) with nothing they started left running and no temp dir left (tests/process_support.py):
`tengen gtp` mid-search, `tengen eval gnugo` and `tengen match` mid-game (a `tengen gtp` engine
against GNU Go), the strength service while it measures, and `tengen chaos` while its run starts.
The benchmarks are tests/test_bench_signals.py; `tengen run`, `tengen triton`, `tengen analysis`
and the other services have theirs beside their own tests."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
import torch
from process_support import TENGEN, has, interrupt, runs

from tengen.config import load_config
from tengen.infra.process import marked_processes
from tengen.infra.triton.repository import ModelRepository
from tengen.loop.layout import DataDir
from tengen.nn.export import export_model
from tengen.nn.model import build_model
from tengen.run.bootstrap import ensure_model

SEARCHING = "1000000"  # visits: the engine is still searching its move when the signal comes
ENGINE = "-m tengen.cli gtp"  # how the match runner's `tengen gtp` engines show in a command line


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(3)
    path = tmp_path_factory.mktemp("signals-model") / "tiny.pt"
    export_model(build_model("b1c16"), path, samples_seen=0)
    return path


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_gtp_stops_mid_search(tmp_path: Path, tiny_export: Path, signum: int) -> None:
    out = interrupt(tmp_path, [*TENGEN, "gtp", "--model", str(tiny_export), "--size", "7", "--visits", SEARCHING],
                    [("the engine ready", lambda found, log: "tengen gtp ready" in log)], signum,
                    to_group=signum == signal.SIGINT, stdin=b"genmove b\n")
    assert "Traceback" not in out


def _engine_ready(sgf_dir: Path) -> bool:
    """The match's `tengen gtp` engine has loaded its net (its stderr log is in the SGF dir)."""
    return any("tengen gtp ready" in p.read_text(errors="replace") for p in sgf_dir.glob("*.stderr.log"))


@pytest.mark.slow
def test_eval_gnugo_stops_its_engines_on_sigterm(tmp_path: Path, tiny_export: Path, gnugo: str) -> None:
    sgf_dir = tmp_path / "sgf"
    out = interrupt(
        tmp_path,
        [
            *TENGEN,
            "eval",
            "gnugo",
            "--model",
            str(tiny_export),
            "--visits",
            SEARCHING,
            "--gnugo",
            gnugo,
            "--size",
            "7",
            "--games",
            "4",
            "--no-ratings",
            "--sgf-dir",
            str(sgf_dir),
        ],
        [
            ("GNU Go", lambda found, log: has(gnugo)(found)),
            ("the tengen engine searching", lambda found, log: runs(ENGINE)(found) and _engine_ready(sgf_dir)),
        ],
        signal.SIGTERM,
    )
    assert "interrupted by SIGTERM" in out and "Traceback" not in out


@pytest.mark.slow
def test_match_stops_its_engines_on_ctrl_c(tmp_path: Path, tiny_export: Path, gnugo: str) -> None:
    sgf_dir = tmp_path / "sgf"
    black = " ".join([*TENGEN, "gtp", "--model", str(tiny_export), "--size", "7", "--visits", SEARCHING])
    out = interrupt(
        tmp_path,
        [
            *TENGEN,
            "match",
            "--black",
            black,
            "--black-name",
            "tiny",
            "--white",
            f"{gnugo} --mode gtp --level 0",
            "--size",
            "7",
            "--no-ratings",
            "--sgf-dir",
            str(sgf_dir),
        ],
        [
            ("GNU Go", lambda found, log: has(gnugo)(found)),
            ("the tengen engine searching", lambda found, log: runs(ENGINE)(found) and _engine_ready(sgf_dir)),
        ],
        signal.SIGINT,
        to_group=True,
    )
    assert "interrupted by SIGINT" in out and "Traceback" not in out


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_strength_service_stops_mid_measurement(tmp_path: Path, gnugo: str, signum: int) -> None:
    data_dir = tmp_path / "data"
    env = {
        "TENGEN_DATA_DIR": str(data_dir),
        "TENGEN_RATINGS_URL": "",
        "TENGEN_STRENGTH__GNUGO": gnugo,
        "TENGEN_STRENGTH__GNUGO_LEVELS": "0",
        "TENGEN_STRENGTH__GAMES": "4",
        "TENGEN_STRENGTH__VISITS": "8",
    }
    ensure_model(ModelRepository(DataDir(data_dir).models), load_config("tiny", env=env))  # version 1
    # The game in progress finishes, then exit 0; Ctrl-C at the terminal does not reach the engines
    # (their own process group), so it does not end that game as a forfeit in the results either.
    out = interrupt(
        tmp_path,
        [sys.executable, "-m", "services.strength", "--preset", "tiny", "--http-port", "0"],
        [
            ("GNU Go", lambda found, log: has(gnugo)(found)),
            ("the tengen engine", lambda found, log: runs(ENGINE)(found)),
        ],
        signum,
        expect_code=0,
        to_group=signum == signal.SIGINT,
        env=env,
    )
    assert f"received {signal.Signals(signum).name}" in out and "strength: stopped" in out
    assert "strength: game 1 " in out and "forfeits" not in out and "engine failure" not in out


@pytest.mark.slow
def test_chaos_stops_its_run_on_sigterm(tmp_path: Path) -> None:
    # Signalled while the run it started brings up its servers: the drill's run, and whatever that
    # run had started, must go with it.
    data_dir = tmp_path / "run"
    out = interrupt(
        tmp_path,
        [*TENGEN, "chaos", "--preset", "tiny", "--data-dir", str(data_dir), "--rounds", "1"],
        [("tritonserver", lambda found, log: has("bin/tritonserver")(found))],
        signal.SIGTERM,
    )
    assert "interrupted by SIGTERM" in out
    assert marked_processes(str(data_dir.resolve())) == []  # also what started after the last look
