"""`tengen run` without the whole loop: duration parsing, bad flags, the status view from a data
dir laid out by hand, and the supervisor's restarts, give-up and stop order with real processes."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tengen.cli import main
from tengen.commands.run import parse_duration
from tengen.config import load_config
from tengen.go import planes
from tengen.loop.rows import TrainingRows
from tengen.run.status import LeaderRow, Status, StatusReader, format_gating, render_line, render_screen
from tengen.run.supervisor import ChildState, ServiceProcess, Supervisor, SupervisorError
from tengen.train.window import Window


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), ("1.5m", 90), (" 2m 30s ", 150),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "", "m", "10x", "5m3", "0s", "-5m", "1h-30m", "m30"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("argv, message", [
    (["run", "--duration", "30"], "bad duration"),
    (["run", "--workers", "0"], "whole number >= 1"),
    (["run", "--workers", "two"], "whole number"),
    (["run", "--status-every", "0"], "number > 0"),
    (["run", "--no-such-flag"], "unrecognized arguments"),
])
def test_bad_flags_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_unknown_preset_is_refused_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--preset", "nope", "--data-dir", str(tmp_path / "d")]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_data_dir_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["run", "--preset", "tiny", "--data-dir", str(target)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_a_data_dir_with_only_an_earlier_first_stage_is_told_what_to_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tengen before the curriculum moved into the loop played its 7x7 stage in first-stage/;
    this one no longer reads it, and says so before it writes anything."""
    data_dir = tmp_path / "d"
    (data_dir / "first-stage" / "models").mkdir(parents=True)
    assert main(["run", "--preset", "tiny", "--data-dir", str(data_dir)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds only the unfinished first stage of an earlier tengen" in err
    assert "remove that folder to start afresh, or start from its net with --init-model" in err
    assert sorted(p.name for p in data_dir.iterdir()) == ["first-stage"]


def test_help_explains_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("broker", "Triton", "ratings", "trainer", "gating", "selfplay", "version 1", "restarted",
                   "continues the run", "--duration", "run.json", "tengen models promote"):
        assert phrase in text


# -- status ---------------------------------------------------------------------------------------
def _rows(n: int, size: int = 7) -> TrainingRows:
    area = size * size
    return TrainingRows(
        x_size=size, y_size=size,
        spatial=np.zeros((n, planes.NUM_SPATIAL, size, size), np.float32),
        global_inputs=np.zeros((n, planes.NUM_GLOBAL), np.float32),
        policy=np.full((n, area + 1), 1.0 / (area + 1), np.float32),
        opponent_policy=np.full((n, area + 1), 1.0 / (area + 1), np.float32),
        value=np.tile(np.float32([1, 0, 0]), (n, 1)),
        score=np.zeros(n, np.float32),
        ownership=np.zeros((n, size, size), np.float32),
        weight=np.ones(n, np.float32),
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A data dir as a run leaves it: window with 3 games, candidates, decisions, two versions."""
    config = load_config("tiny")
    with Window(tmp_path / "trainer" / "window", pos_len=7, c=config.trainer.window_c) as window:
        for i, n in enumerate((300, 300, 400)):
            window.append(f"game-{i}", _rows(n))
    (tmp_path / "candidates").mkdir()
    for samples in (1000, 2000):
        (tmp_path / "candidates" / f"candidate-{samples:012d}.pt").write_bytes(b"")
    (tmp_path / "candidates" / "candidate-000000003000.pt.tmp").write_bytes(b"")  # mid-write: not counted
    (tmp_path / "gating").mkdir()
    decisions = [
        {"candidate": "candidate-000000001000", "wins": 1, "losses": 7, "games": 8, "promoted": False,
         "promoted_version": None, "reason": "1 wins < 4 needed"},
        {"candidate": "candidate-000000002000", "wins": 6, "losses": 2, "games": 8, "promoted": True,
         "promoted_version": 2, "reason": "6 wins >= 4"},
    ]
    text = "".join(json.dumps(d) + "\n" for d in decisions) + '{"candidate": "torn'
    (tmp_path / "gating" / "decisions.jsonl").write_text(text)
    for version in (1, 2):
        (tmp_path / "models" / "tengen" / str(version)).mkdir(parents=True)
    (tmp_path / "models" / "tengen" / "2" / "model.pt.json").write_text(json.dumps({"samples_seen": 1500}))
    (tmp_path / "strength").mkdir()
    result = {"version": 1, "player": "tengen-v1", "training_samples": 0, "opponent": "gnugo-l1", "level": 1,
              "games": 10, "wins": 0, "losses": 10, "draws": 0, "score_rate": 0.0, "rate_low": 0.0,
              "rate_high": 0.28, "visits": 100, "board_size": 7, "komi": 9.0, "time": "2026-11-24T12:00:00+00:00"}
    newer = dict(result, version=2, player="tengen-v2", training_samples=1500, wins=3, losses=6, draws=1,
                 score_rate=0.35, rate_low=0.15, rate_high=0.62)
    (tmp_path / "strength" / "results.jsonl").write_text(
        json.dumps(result) + "\n" + json.dumps(newer) + "\n" + '{"version": 3, "pla')
    return tmp_path


def test_status_reads_the_data_dir(run_dir: Path) -> None:
    config = load_config("tiny")
    # Nothing listens on these: the figures the services serve are unknown, not errors.
    reader = StatusReader(run_dir, config, trainer_metrics="http://127.0.0.1:9/metrics",
                          selfplay_metrics=["http://127.0.0.1:9/metrics"], ratings_url=None,
                          triton_url="127.0.0.1:9")
    status = reader.read()
    assert status.rows_total == 1000
    assert status.window_rows == 681  # c = 500: 500 (1 + 0.4 (2^0.75 - 1) / 0.75) = 681.8
    assert status.games_ingested == 3
    assert status.candidates == 2 and status.latest_candidate == "candidate-000000002000"
    assert status.samples == 2000
    assert status.version == 2
    assert status.gating is not None and status.gating["promoted_version"] == 2
    assert status.served_samples == 1500  # Triton unknown: the newest version's sidecar
    assert [(r.version, r.opponent, r.wins) for r in status.strength] == [(2, "gnugo-l1", 3)]
    assert status.games_played is None and status.leaders is None and status.serving is None

    # The id log is read incrementally: a new game is counted once.
    with Window(run_dir / "trainer" / "window", pos_len=7, c=config.trainer.window_c) as window:
        window.append("game-3", _rows(10))
    again = reader.read()
    assert again.games_ingested == 4 and again.rows_total == 1010

    status.elapsed_s, status.duration_s = 125, 600
    status.services = [ChildState("broker", "up", 0, 1), ChildState("trainer", "restarting in 4 s", 2, None)]
    status.leaders = [LeaderRow("v2", 35.4, 16), LeaderRow("v1", -35.4, 16)]
    screen = render_screen(status, "tengen run")
    assert "up 0:02:05 of 0:10:00" in screen
    assert "trainer restarting in 4 s (2 restarts)" in screen
    assert "681 rows used of 1,000 ever" in screen
    assert "2,000 samples" in screen
    assert "candidate-000000002000 6-2 of 8: promoted as v2 (6 wins >= 4)" in screen
    assert "version 2 (1.5k samples, 500 behind the trainer)" in screen
    assert "v2 (1.5k samples), 100 visits: gnugo-l1 3-6-1 = 0.35 [0.15, 0.62]" in screen
    assert "1. v2 +35 (16 games)  2. v1 -35 (16 games)" in screen
    line = render_line(status)
    assert "\n" not in line
    assert line.startswith("[0:02:05 of 0:10:00] games - played, 3 ingested")
    assert "window 681 of 1,000 rows ever" in line and "version 2" in line and "top Elo: v2 +35 (mean = 0)" in line
    assert "not up: trainer" in line
    status.games_per_s, status.positions_per_s, status.evaluations_per_s, status.mean_batch = 1.125, 85.04, 1203.4, 9.6
    status.elo_anchor = "gnugo-l1"
    line = render_line(status)
    assert line.startswith("[0:02:05 of 0:10:00] games - played (1.12 games/s, 85.0 positions/s, 1,203 evals/s), ")
    assert "top Elo: v2 +35 (gnugo-l1 = 0)" in line
    assert "1,203 evals/s in batches of 9.6" in render_screen(status, "t")
    assert "(Elo from every rated game, gnugo-l1 = 0)" in render_screen(status, "t")
    status.serving, status.served_samples = 1, 0
    assert "version 1 serving, 2 loading (0 samples, 2.0k behind the trainer)" in render_screen(status, "t")
    assert "| version 1 serving, 2 loading (0 samples, 2.0k behind the trainer) |" in render_line(status)


def test_status_of_an_empty_data_dir(tmp_path: Path) -> None:
    status = StatusReader(tmp_path, load_config("tiny")).read()
    assert (status.rows_total, status.games_ingested, status.candidates, status.version, status.gating) == \
        (None, None, 0, None, None)
    assert "window - of - rows ever" in render_line(status)
    assert format_gating(None) == "no decision yet"
    assert "rejected" in format_gating({"candidate": "c", "wins": 1, "losses": 7, "games": 8, "promoted": False})


def test_empty_leaderboard_is_not_shown_as_unknown() -> None:
    status = Status(leaders=[])
    assert "top Elo: none rated yet" in render_line(status)
    assert "no rated games yet" in render_screen(status, "t")


# -- supervisor -----------------------------------------------------------------------------------
def _python(tmp_path: Path, name: str, code: str) -> ServiceProcess:
    return ServiceProcess(name, [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, tmp_path / f"{name}.log",
                          stop_grace_s=5.0)


def test_a_dead_child_is_restarted_with_backoff_and_logged(tmp_path: Path) -> None:
    # Dies after 0.3 s the first time it starts, then keeps running.
    marker = tmp_path / "started-once"
    code = (f"import os, sys, time\nif not os.path.exists({str(marker)!r}):\n"
            f"    open({str(marker)!r}, 'w').close(); time.sleep(0.3); print('dying'); sys.exit(3)\ntime.sleep(60)")
    child = _python(tmp_path, "flaky", code)
    supervisor = Supervisor([child], initial_backoff_s=0.5, quick_failure_s=0.1)
    supervisor.start_all()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and supervisor.states()[0].restarts == 0:
            supervisor.check()
            time.sleep(0.05)
        state = supervisor.states()[0]
        assert state.restarts == 1 and state.state == "up" and state.pid is not None
        assert any("flaky died (exit code 3)" in e and "restarting in 0.5 s" in e for e in supervisor.events)
        assert "dying" in (tmp_path / "flaky.log").read_text()
    finally:
        supervisor.stop_all()
    assert supervisor.states()[0].state == "stopped" and supervisor.pids() == {}


def test_a_child_that_keeps_dying_at_start_stops_the_run(tmp_path: Path) -> None:
    child = _python(tmp_path, "broken", "import sys; print('no such module, say'); sys.exit(1)")
    supervisor = Supervisor([child], initial_backoff_s=0.05, max_backoff_s=0.05, max_quick_failures=3)
    supervisor.start_all()
    with pytest.raises(SupervisorError, match=r"(?s)broken died 3 times in a row.*exit code 1.*no such module") as exc:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            supervisor.check()
            time.sleep(0.02)
    assert str(tmp_path / "broken.log") in str(exc.value)
    supervisor.stop_all()


def test_children_stop_in_reverse_start_order(tmp_path: Path) -> None:
    record = tmp_path / "order"
    code = ("import signal, sys, time\n"
            "def bye(*_):\n"
            f"    open({str(record)!r}, 'a').write(sys.argv[1] + '\\n'); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, bye)\n"
            "print('up-' + sys.argv[1], flush=True)\n"
            "while True: time.sleep(0.1)\n")
    names = ["broker", "trainer", "selfplay-0"]
    children = [ServiceProcess(n, [sys.executable, "-c", code, n], {"PATH": "/usr/bin:/bin"}, tmp_path / f"{n}.log")
                for n in names]
    supervisor = Supervisor(children)
    supervisor.start_all()
    for n in names:  # every child has its handler installed before the stop
        deadline = time.monotonic() + 20
        while f"up-{n}" not in (tmp_path / f"{n}.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert set(supervisor.pids()) == set(names)
    supervisor.stop_all()
    assert record.read_text().split() == names[::-1]
    assert [s.state for s in supervisor.states()] == ["stopped"] * 3


def test_status_reads_the_services_metrics(tmp_path: Path) -> None:
    """Samples from the trainer's /metrics, games and rates from the selfplay workers' (summed)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies = {
        "/trainer": "# TYPE tengen_trainer_samples gauge\ntengen_trainer_samples 4096.0\n",
        "/w0": "# TYPE tengen_selfplay_games counter\ntengen_selfplay_games_total 10.0\n"
               "# TYPE tengen_selfplay_positions counter\ntengen_selfplay_positions_total 400.0\n"
               "tengen_selfplay_evaluations_total 9000.0\ntengen_selfplay_batches_total 300.0\n",
        "/w1": "# TYPE tengen_selfplay_games counter\ntengen_selfplay_games_total 5.0\n",
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = bodies[self.path].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        reader = StatusReader(tmp_path, load_config("tiny"), trainer_metrics=f"{base}/trainer",
                              selfplay_metrics=[f"{base}/w0", f"{base}/w1", "http://127.0.0.1:9/metrics"])
        first = reader.read()
        assert first.samples == 4096 and first.games_played == 15 and first.games_per_s is None
        bodies["/w0"] = (bodies["/w0"].replace("10.0", "40.0").replace("400.0", "1600.0")
                         .replace("9000.0", "39000.0").replace("300.0", "1300.0"))
        time.sleep(0.5)
        second = reader.read()
        assert second.games_played == 45
        assert second.games_per_s is not None and 0 < second.games_per_s <= 30 / 0.5
        assert second.positions_per_s == pytest.approx(second.games_per_s * 40)
        assert second.evaluations_per_s == pytest.approx(second.games_per_s * 1000)
        assert second.mean_batch == pytest.approx(30.0)  # 30,000 positions in 1,000 batches
        assert "evals/s in batches of 30.0" in render_screen(second, "run")
    finally:
        server.shutdown()
        server.server_close()


def test_a_data_dir_in_use_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tengen.run.local import data_dir_lock

    data_dir = tmp_path / "d"
    data_dir.mkdir()
    with data_dir_lock(data_dir):
        assert main(["run", "--preset", "tiny", "--data-dir", str(data_dir)]) == 1
    assert "another tengen run is using" in capsys.readouterr().err
    assert not (data_dir / "models").exists()  # refused before anything was written


def test_stopping_a_server_group_leaves_none_of_its_helpers(tmp_path: Path) -> None:
    """Triton exits on SIGTERM with Python backend stubs still up when its exit timeout runs out:
    stop_process(group=True) must not leave them behind."""
    import subprocess

    from tengen.infra.process import stop_process

    helper_pid = tmp_path / "helper.pid"
    code = ("import signal, subprocess, sys, time\n"
            "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"open({str(helper_pid)!r}, 'w').write(str(helper.pid))\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exits, the helper stays\n"
            "time.sleep(120)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 20
    while not (helper_pid.exists() and helper_pid.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(helper_pid.read_text())
    assert _running(pid)
    assert stop_process(leader, "leader", grace_s=10, group=True) == 0
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a killed orphan stays one until init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("preset, instances, threads", [("tiny", 1, 1), ("cpu", 1, 2)])
def test_the_bootstrapped_model_has_the_presets_triton_instances(tmp_path: Path, preset: str, instances: int,
                                                                 threads: int) -> None:
    from tengen.infra.triton.repository import ModelRepository
    from tengen.run.bootstrap import ensure_model

    config = load_config(preset)
    repository = ModelRepository(tmp_path / "models")
    assert ensure_model(repository, config) == (1, True)
    text = (repository.model_dir(config.run.model_name) / "config.pbtxt").read_text()
    assert f"KIND_CPU count: {instances} " in text
    assert f'key: "torch_threads" value: {{ string_value: "{threads}" }}' in text
    assert 'key: "precision" value: { string_value: "auto" }' in text
    assert 'key: "runtime" value: { string_value: "auto" }' in text


def test_the_gating_line_counts_draws() -> None:
    """7x7 at komi 9 is a draw with perfect play: a match of near-equal nets is mostly draws, and
    "1-2 of 20" would hide the 17 that decided it."""
    decision = {"candidate": "candidate-000000800000", "wins": 1, "losses": 2, "draws": 17, "games": 20,
                "promoted": False, "reason": "9.5 wins with 0 games left cannot reach 10 of 20: fails"}
    assert format_gating(decision) == ("candidate-000000800000 1-2-17 of 20: rejected "
                                       "(9.5 wins with 0 games left cannot reach 10 of 20: fails)")
